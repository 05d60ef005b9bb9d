#!/usr/bin/python3
# summary.py TAG: one line comparing lc_TAG (llama.cpp), mf_TAG (minfer) and np_TAG (float64
# reference) logits, all teacher-forced on llama.cpp's tokens. nrmse: RMS difference over the
# second argument's standard deviation, averaged over steps; first div: first step whose argmax
# differs between llama.cpp and minfer (= first differing greedy token), with each side's
# top-1 minus top-2 gap there and which token the float64 reference prefers.
import sys, numpy as np
tag = sys.argv[1]
with open(f"lc_{tag}.tok") as f: npr, nv = map(int, f.readline().split())
L = {k: np.fromfile(f"{k}_{tag}.logits", dtype=np.float32).reshape(-1, nv).astype(np.float64)
     for k in ("lc", "mf", "np")}


def nr(a, b):
    return np.mean([np.sqrt(((a[i] - b[i])**2).mean()) / b[i].std() for i in range(len(a))])


def mx(a, b):
    return np.abs(a - b).max()



am = {k: v.argmax(1) for k, v in L.items()}
div = np.nonzero(am["lc"] != am["mf"])[0]
d = int(div[0]) if len(div) else None
s = f"{tag:16s} nrmse"
for a, b in (("lc", "np"), ("mf", "np"), ("lc", "mf")):
    s += f" {a}-{b} {nr(L[a], L[b]):.4f}"
s += " | maxabs"
for a, b in (("lc", "np"), ("mf", "np"), ("lc", "mf")):
    s += f" {a}-{b} {mx(L[a], L[b]):.3f}"
s += f" | first div {d}"
if d is not None:
    g = lambda k: (lambda s: s[0]-s[1])(np.sort(L[k][d])[::-1])
    pick = "lc" if am["np"][d] == am["lc"][d] else "mf" if am["np"][d] == am["mf"][d] else "neither"
    s += f" (gap lc {g('lc'):.4f} mf {g('mf'):.4f} np {g('np'):.4f}; f64 ref picks {pick})"
print(s)
