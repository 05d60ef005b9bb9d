#!/usr/bin/python3
# npref.py MODEL TOKFILE OUTPREFIX: float64 Qwen2 forward from weights dequantized by llama.cpp's
# gguf-py (ggml's numpy dequantizers), no activation quantization, float64 KV; logits at the
# same steps as lcdump (teacher-forced on its tokens). The exact-arithmetic yardstick both
# engines are measured against. Cost: minutes for 24 layers (whole-prompt numpy, one process).
import os, sys, numpy as np
sys.path.insert(0, os.path.join(os.environ.get("MINFER_LLAMACPP_CACHE",
                                               os.path.expanduser("~/.cache/minfer/llamacpp")),
                                "src", "gguf-py"))
from gguf import GGUFReader
from gguf.quants import dequantize
r = GGUFReader(sys.argv[1])
T = {t.name: t for t in r.tensors}
def W(name):
    t = T[name]; return dequantize(t.data, t.tensor_type).astype(np.float64)
f = lambda k: r.fields[k].contents()
nl, ne = f("qwen2.block_count"), f("qwen2.embedding_length")
nh, nkv = f("qwen2.attention.head_count"), f("qwen2.attention.head_count_kv")
eps, base = f("qwen2.attention.layer_norm_rms_epsilon"), f("qwen2.rope.freq_base")
hd = ne // nh
with open(sys.argv[2]) as fh:
    npr, nv = map(int, fh.readline().split()); toks = list(map(int, fh.readline().split()))
n = len(toks) - 1  # positions whose logits are needed: npr-1 .. len-2
E = T["token_embd.weight"]
emb = dequantize(E.data, E.tensor_type)  # (nv, ne) float32
x = emb[toks[:-1]].astype(np.float64)  # (S, ne)
S = x.shape[0]
def rms(v, w): return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w
pos = np.arange(S)
inv = base ** (-np.arange(0, hd, 2) / hd)
ang = pos[:, None] * inv[None, :]
cos, sin = np.cos(ang), np.sin(ang)
def rope(q):  # (S, H, hd), NEOX halves
    a, b = q[..., :hd // 2], q[..., hd // 2:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([a * c - b * s, a * s + b * c], -1)
for l in range(nl):
    p = f"blk.{l}."
    h = rms(x, W(p + "attn_norm.weight"))
    q = h @ W(p + "attn_q.weight").T + W(p + "attn_q.bias")
    k = h @ W(p + "attn_k.weight").T + W(p + "attn_k.bias")
    v = h @ W(p + "attn_v.weight").T + W(p + "attn_v.bias")
    q = rope(q.reshape(S, nh, hd)); k = rope(k.reshape(S, nkv, hd)); v = v.reshape(S, nkv, hd)
    g = nh // nkv
    out = np.zeros((S, nh, hd))
    mask = np.triu(np.full((S, S), -np.inf), 1)
    for hh in range(nh):
        sc = q[:, hh, :] @ k[:, hh // g, :].T / np.sqrt(hd) + mask
        sc = np.exp(sc - sc.max(-1, keepdims=True)); sc /= sc.sum(-1, keepdims=True)
        out[:, hh, :] = sc @ v[:, hh // g, :]
    x = x + out.reshape(S, ne) @ W(p + "attn_output.weight").T
    h = rms(x, W(p + "ffn_norm.weight"))
    a = h @ W(p + "ffn_gate.weight").T; u = h @ W(p + "ffn_up.weight").T
    x = x + (a / (1 + np.exp(-a)) * u) @ W(p + "ffn_down.weight").T
h = rms(x, W("output_norm.weight"))[npr - 1:]
out = np.zeros((h.shape[0], nv), dtype=np.float32)
for c0 in range(0, nv, 16384):
    out[:, c0:c0 + 16384] = h @ emb[c0:c0 + 16384].astype(np.float64).T
out.tofile(sys.argv[3] + ".logits")
