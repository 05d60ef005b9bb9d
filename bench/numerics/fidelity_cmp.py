#!/usr/bin/python3
# fidelity_cmp.py A B [C]: compares logits files of the fidelity format (i32 n_vocab, i32 n_pos,
# i32 pos[], f32 logits[n_pos][n_vocab]: llama.cpp's .lclogits from lcforce, minfer's
# .mflogits from test_fidelity with MINFER_FIDELITY_DUMP=DIR, the float64 .f64logits from
# npref_gemma.py). Per pair: max |difference| over all positions and at 1, 64, 1024, 4000, and
# top-1 agreement. Used for docs/NUMERICS.md's Gemma rows.
import struct, sys
import numpy as np

def load(path):
    with open(path, "rb") as fh:
        nv, n = struct.unpack("<ii", fh.read(8))
        pos = np.frombuffer(fh.read(4 * n), dtype=np.int32)
        lg = np.frombuffer(fh.read(4 * n * nv), dtype=np.float32).reshape(n, nv)
    return pos, lg.astype(np.float64)

files = sys.argv[1:]
data = [load(f) for f in files]
for i in range(len(files)):
    for j in range(i + 1, len(files)):
        (pa, a), (pb, b) = data[i], data[j]
        assert (pa == pb).all()
        d = np.abs(a - b).max(-1)
        at = {int(p): d[k] for k, p in enumerate(pa) if p in (1, 64, 1024, 4000)}
        agree = int((a.argmax(-1) == b.argmax(-1)).sum())
        print(f"{files[i]} vs {files[j]}: max {d.max():.2e}; " +
              ", ".join(f"pos {p} {v:.2e}" for p, v in at.items()) +
              f"; top-1 {agree}/{len(pa)}")
