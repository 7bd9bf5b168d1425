#!/usr/bin/env python3
"""pytorch_baseline.py: a minimal Llama training step in PyTorch, the reference
paraplan's CUDA backend is timed against (samples/llama_1b/bench.sh).

Same model as samples/llama_1b/job.toml: token embedding, pre-RMSNorm blocks,
grouped-query attention (KV heads repeated for F.scaled_dot_product_attention)
with the rotary embedding in Hugging Face's rotate-half convention and Llama
3.1's rope scaling, a SwiGLU MLP, no biases, the head tied to the embedding.
The step, optimizer, precision and timing are samples/pytorch_bench.py's.

MFU uses the planner's count (planner/cost/model_counts.h): model FLOPs per token =
6 * (L * (2 C^2 + 2 KV C + 3 C F) + C V) + 12 L T C, KV = kv_heads * head_dim.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pytorch_bench  # noqa: E402  (samples/pytorch_bench.py: flags and the timed loop)


def inverse_frequencies(head_dim, theta, factor, low, high, original):
    """Hugging Face's rope inverse frequencies with the "llama3" scaling."""
    inverse = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    if factor <= 0:
        return inverse
    wavelength = 2 * math.pi / inverse
    slowed = torch.where(wavelength > original / low, inverse / factor, inverse)
    smooth = (original / wavelength - low) / (high - low)
    smoothed = (1 - smooth) * slowed / factor + smooth * slowed
    medium = ~(wavelength < original / high) * ~(wavelength > original / low)
    return torch.where(medium, smoothed, slowed)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * \
            self.weight


class Block(nn.Module):
    def __init__(self, d_model, heads, kv_heads, ffn, eps, attention):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, d_model // heads
        self.attention = attention
        self.attention_norm = RMSNorm(d_model, eps)
        self.qkv = nn.Linear(d_model, (heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=False)
        self.mlp_norm = RMSNorm(d_model, eps)
        self.gate_up = nn.Linear(d_model, 2 * ffn, bias=False)
        self.down_proj = nn.Linear(ffn, d_model, bias=False)

    def attend(self, x, cos, sin):
        B, T, C = x.shape
        D = self.head_dim
        q, k, v = self.qkv(x).split([self.heads * D, self.kv_heads * D, self.kv_heads * D], dim=2)
        q = q.view(B, T, self.heads, D).transpose(1, 2)
        k = k.view(B, T, self.kv_heads, D).transpose(1, 2)
        v = v.view(B, T, self.kv_heads, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = self.heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # "manual": the [B, H, T, T] probabilities materialised (unfused)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(D)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.o_proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x, cos, sin):
        x = x + self.attend(self.attention_norm(x), cos, sin)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.embed = nn.Embedding(args.vocab, args.d_model)
        self.blocks = nn.ModuleList(
            Block(args.d_model, args.heads, args.kv_heads, args.ffn, args.eps, args.attention)
            for _ in range(args.layers))
        self.norm = RMSNorm(args.d_model, args.eps)
        self.lm_head = nn.Linear(args.d_model, args.vocab, bias=False)
        self.lm_head.weight = self.embed.weight  # tied, as Llama 3.2 1B
        angles = torch.outer(torch.arange(args.seq_len).float(), inverse_frequencies(
            args.d_model // args.heads, args.rope_theta, args.rope_factor, 1.0, 4.0, 8192))
        emb = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        cos, sin = self.cos.to(x.dtype), self.sin.to(x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def flops_per_token(args):
    kv = args.kv_heads * (args.d_model // args.heads)
    C, F_, L = args.d_model, args.ffn, args.layers
    matmul_weights = L * (2 * C * C + 2 * kv * C + 3 * C * F_) + C * args.vocab
    return 6 * matmul_weights + 12 * L * args.seq_len * C


def main():
    parser = pytorch_bench.parser(__doc__.split("\n\n")[0], seq_len=2048, vocab=128256)
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--d-model", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=8192)
    parser.add_argument("--eps", type=float, default=1e-5)
    parser.add_argument("--rope-theta", type=float, default=500000.0)
    parser.add_argument("--rope-factor", type=float, default=32.0)
    args = parser.parse_args()
    pytorch_bench.run(args, lambda: Llama(args), flops_per_token(args))


if __name__ == "__main__":
    main()
