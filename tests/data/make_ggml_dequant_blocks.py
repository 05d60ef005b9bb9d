#!/usr/bin/env python3
"""Writes ggml_dequant_blocks.bin: raw quantized blocks and ggml's own dequantization of them.

The expected floats come from llama.cpp's gguf-py (gguf/quants.py, numpy dequantizers written
independently of minfer), so tests/numerics_test.cpp checks our block decoding against ggml's,
not against our own reading of the format. Regenerate (needs numpy and llama.cpp's gguf-py):

  PYTHONPATH=~/.cache/minfer/llamacpp/src/gguf-py python3 make_ggml_dequant_blocks.py

Blocks: random bytes everywhere (every 6-bit scale/min, high-bit plane and sign pattern occurs
across the blocks), with the fp16 scales (d, dmin) replaced by finite values of either sign,
plus one block per type with extreme fields (all-ones bytes, largest finite d).
Format (little-endian): b"MFXQ", u32 count, then per entry: u32 ggml type id, u32 n_elements,
u32 n_bytes, the block bytes, n_elements f32.
"""
import struct
import sys

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType as T
from gguf.quants import dequantize

# (type, byte offsets of its fp16 scale fields within a block)
TYPES = [(T.Q4_0, [0]), (T.Q5_0, [0]), (T.Q8_0, [0]), (T.Q4_K, [0, 2]), (T.Q5_K, [0, 2]),
         (T.Q6_K, [208])]
N_BLOCKS = 6


def main(out):
    rng = np.random.default_rng(20261130)
    entries = []
    for t, f16_offsets in TYPES:
        block_elems, block_bytes = GGML_QUANT_SIZES[t]
        raw = rng.integers(0, 256, size=(N_BLOCKS, block_bytes), dtype=np.uint8)
        raw[-1, :] = 0xFF  # extreme codes, scales and high bits
        for b in range(N_BLOCKS):
            for o in f16_offsets:
                v = rng.uniform(1e-3, 2e-2) * rng.choice([-1.0, 1.0])
                if b == N_BLOCKS - 1:
                    v = 65504.0 if o == f16_offsets[0] else -0.5  # largest finite half
                raw[b, o:o + 2] = np.frombuffer(np.float16(v).tobytes(), dtype=np.uint8)
        want = dequantize(raw.reshape(-1), t).astype(np.float32).reshape(-1)
        assert np.isfinite(want).all()
        entries.append((int(t), block_elems * N_BLOCKS, raw.tobytes(), want))
    with open(out, "wb") as f:
        f.write(b"MFXQ" + struct.pack("<I", len(entries)))
        for tid, n, raw, want in entries:
            f.write(struct.pack("<III", tid, n, len(raw)) + raw + want.tobytes())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "ggml_dequant_blocks.bin")
