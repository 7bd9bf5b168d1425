#!/usr/bin/env python3
"""pytorch_baseline.py: a minimal GPT-2 training step in PyTorch, the reference
paraplan's CUDA backend is timed against (samples/gpt2_124m/bench.sh).

Same model as samples/gpt2_124m/job.toml (learned positions, pre-LayerNorm
blocks, tanh GELU, tied embeddings, biases everywhere but the head); the
step, optimizer, precision and timing are samples/pytorch_bench.py's.

MFU uses the planner's convention (planner/cost/model_counts.h): model FLOPs per
token = 6 * (L * (4 C^2 + 2 F C) + C V) + 12 L T C (matmul weights forward and
backward, plus the causal attention core over the full T x T).
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import pytorch_bench  # noqa: E402  (samples/pytorch_bench.py: flags and the timed loop)


class Block(nn.Module):
    def __init__(self, d_model, num_heads, ffn_size, attention):
        super().__init__()
        self.num_heads = num_heads
        self.attention = attention
        self.ln_1 = nn.LayerNorm(d_model, eps=1e-5)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.attn_proj = nn.Linear(d_model, d_model)
        self.ln_2 = nn.LayerNorm(d_model, eps=1e-5)
        self.c_fc = nn.Linear(d_model, ffn_size)
        self.mlp_proj = nn.Linear(ffn_size, d_model)

    def attend(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # (q heads | k heads | v heads), as paraplan
        shape = (B, T, self.num_heads, C // self.num_heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # "manual": the [B, H, T, T] probabilities materialised (unfused)
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attend(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq_len, layers, d_model, heads, ffn, attention):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads, ffn, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model, eps=1e-5)
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, tokens, targets):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1))


def flops_per_token(layers, d_model, ffn, vocab, seq_len):
    matmul_weights = layers * (4 * d_model * d_model + 2 * ffn * d_model) + d_model * vocab
    return 6 * matmul_weights + 12 * layers * seq_len * d_model


def main():
    parser = pytorch_bench.parser(__doc__.split("\n\n")[0], seq_len=1024, vocab=50304)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--ffn", type=int, default=0, help="default 4 * d_model")
    args = parser.parse_args()
    ffn = args.ffn or 4 * args.d_model
    # Synthetic tokens from the GPT-2 vocabulary (the last 47 padding ids are never drawn).
    pytorch_bench.run(
        args,
        lambda: GPT(args.vocab, args.seq_len, args.layers, args.d_model, args.heads, ffn,
                    args.attention),
        flops_per_token(args.layers, args.d_model, ffn, args.vocab, args.seq_len),
        draw_vocab=min(args.vocab, 50257))


if __name__ == "__main__":
    main()
