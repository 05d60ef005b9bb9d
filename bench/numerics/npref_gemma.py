#!/usr/bin/python3
# npref_gemma.py MODEL.gguf REF.lclogits OUT: float64 Gemma 2 / Gemma 3 forward (Hugging Face's
# modeling_gemma2 / gemma3 math: embeddings x sqrt(n_embd), pre and post RMS norms, tanh-GELU
# GeGLU, soft-capping c tanh(s / c), a causal window of n_swa positions on the sliding layers,
# their own rope base, gemma3's Q/K norms) from weights dequantized by llama.cpp's gguf-py, on
# the fidelity sequence t_i = (i * 7919 + 13) % n_vocab (tests/fidelity_test.cpp), teacher-forced;
# writes the logits at REF's positions in REF's format (i32 n_vocab, i32 n_pos, i32 pos[],
# f32 logits[n_pos][n_vocab]). Keys and defaults as llama.cpp's loaders (hparams_gemma.cpp).
# The exact-arithmetic yardstick of docs/NUMERICS.md's Gemma rows. Cost: seconds for the tiny
# fidelity files (whole-sequence numpy, one [S x S] score matrix per head at a time).
import os, struct, sys
import numpy as np
sys.path.insert(0, os.path.join(os.environ.get("MINFER_LLAMACPP_CACHE",
                                               os.path.expanduser("~/.cache/minfer/llamacpp")),
                                "src", "gguf-py"))
from gguf import GGUFReader
from gguf.quants import dequantize

r = GGUFReader(sys.argv[1])
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]
    return dequantize(t.data, t.tensor_type).astype(np.float64)
def key(k, default=None):
    return r.fields[k].contents() if k in r.fields else default
arch = key("general.architecture")
assert arch in ("gemma2", "gemma3"), arch
a = arch + "."
nl, ne = key(a + "block_count"), key(a + "embedding_length")
nh, nkv = key(a + "attention.head_count"), key(a + "attention.head_count_kv", None)
nkv = nkv or nh
hd = key(a + "attention.key_length", ne // nh)
eps, base = key(a + "attention.layer_norm_rms_epsilon"), key(a + "rope.freq_base", 10000.0)
if arch == "gemma2":
    n_swa, period = key(a + "attention.sliding_window", 4096), key(a + "attention.sliding_window_pattern", 2)
    attn_cap = key(a + "attn_logit_softcapping", 50.0)
    final_cap = key(a + "final_logit_softcapping", 30.0)
    base_swa = key(a + "rope.freq_base_swa", base)
else:
    n_swa, period = key(a + "attention.sliding_window", 0), key(a + "attention.sliding_window_pattern", 6)
    attn_cap, final_cap = 0.0, key(a + "final_logit_softcapping", 0.0)
    base_swa = key(a + "rope.freq_base_swa", 10000.0)
big = nl == (46 if arch == "gemma2" else 62)  # the 27B shapes: query_pre_attn_scalar n_embd/n_head
qscale = 1.0 / np.sqrt(ne // nh if big else hd)
def is_swa(l): return n_swa > 0 and (period == 0 or l % period < period - 1)

with open(sys.argv[2], "rb") as fh:
    nv, npos = struct.unpack("<ii", fh.read(8))
    want = list(struct.unpack(f"<{npos}i", fh.read(4 * npos)))
S = max(want) + 1
toks = [(i * 7919 + 13) % nv for i in range(S)]
emb = W("token_embd.weight")  # (nv, ne)
x = emb[toks] * np.sqrt(ne)
def rms(v, w): return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
def cap(s, c): return c * np.tanh(s / c) if c > 0 else s
def rope(q, b):  # (S, H, hd), NEOX halves
    inv = b ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(S)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    u, v = q[..., :hd // 2], q[..., hd // 2:]
    return np.concatenate([u * c - v * s, u * s + v * c], -1)
ii, jj = np.arange(S)[:, None], np.arange(S)[None, :]
for l in range(nl):
    p = f"blk.{l}."
    h = rms(x, W(p + "attn_norm.weight"))
    q = (h @ W(p + "attn_q.weight").T).reshape(S, nh, hd)
    k = (h @ W(p + "attn_k.weight").T).reshape(S, nkv, hd)
    v = (h @ W(p + "attn_v.weight").T).reshape(S, nkv, hd)
    if arch == "gemma3":
        q, k = rms(q, W(p + "attn_q_norm.weight")), rms(k, W(p + "attn_k_norm.weight"))
    b = base_swa if is_swa(l) else base
    q, k = rope(q, b), rope(k, b)
    masked = jj > ii
    if is_swa(l): masked = masked | (ii - jj >= n_swa)
    out = np.zeros((S, nh, hd))
    for hh in range(nh):
        sc = cap(q[:, hh, :] * qscale @ k[:, hh // (nh // nkv), :].T, attn_cap)
        sc[masked] = -np.inf
        sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
        out[:, hh, :] = sc @ v[:, hh // (nh // nkv), :]
    o = rms(out.reshape(S, nh * hd) @ W(p + "attn_output.weight").T, W(p + "post_attention_norm.weight"))
    x = x + o
    h = rms(x, W(p + "ffn_norm.weight"))
    g, u = h @ W(p + "ffn_gate.weight").T, h @ W(p + "ffn_up.weight").T
    gelu = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))
    x = x + rms((gelu * u) @ W(p + "ffn_down.weight").T, W(p + "post_ffw_norm.weight"))
h = rms(x[want], W("output_norm.weight"))
out_w = W("output.weight") if "output.weight" in T else emb
lg = cap(h @ out_w.T, final_cap).astype(np.float32)
with open(sys.argv[3], "wb") as fh:
    fh.write(struct.pack("<ii", nv, npos) + struct.pack(f"<{npos}i", *want))
    lg.tofile(fh)
