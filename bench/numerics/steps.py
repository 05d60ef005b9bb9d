#!/usr/bin/python3
# steps.py A_PREFIX B_PREFIX [-v]: per-step logit differences of two dumps (A's .tok gives the
# token sequence): max abs, max abs over A's max |logit|, nrmse, each argmax and top-1/top-2 gap.
import sys, numpy as np
lc, mf = sys.argv[1], sys.argv[2]
with open(lc + ".tok") as f:
    np_, nv = map(int, f.readline().split()); toks = list(map(int, f.readline().split()))
A = np.fromfile(lc + ".logits", dtype=np.float32).reshape(-1, nv)
B = np.fromfile(mf + ".logits", dtype=np.float32).reshape(-1, nv)
n = min(len(A), len(B))
first = None
rows = []
for i in range(n):
    a, b = A[i].astype(np.float64), B[i].astype(np.float64)
    d = np.abs(a - b)
    sa = np.sort(a)[::-1]; sb = np.sort(b)[::-1]
    ta, tb = int(a.argmax()), int(b.argmax())
    if ta != tb and first is None: first = i
    nrmse = np.sqrt(((a - b)**2).mean()) / a.std()
    rows.append((i, d.max(), d.max() / np.abs(a).max(), nrmse, ta, tb, sa[0] - sa[1], sb[0] - sb[1]))
verbose = len(sys.argv) > 3
for r in rows:
    if verbose or r[0] < 3 or r[0] == first:
        print("step %2d maxabs %.4g maxrel %.4g nrmse %.4g  argmax lc %6d mf %6d  "
              "gap lc %.4g mf %.4g" % r)
print("logit range lc step0: [%.3f, %.3f] std %.3f" % (A[0].min(), A[0].max(), A[0].std()))
print("first divergent step:", first, "of", n, "| overall maxabs %.4g" % max(r[1] for r in rows))
