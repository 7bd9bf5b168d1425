"""pytorch_bench.py: the PyTorch side of the samples' benchmarks against
paraplan (samples/gpt2_124m/bench.sh, samples/llama_1b/bench.sh): the
command-line flags both baselines take, and the timed training loop.

A step is what paraplan's replay times: forward, backward, grad-norm
clipping at 1.0 and an AdamW update (betas 0.9/0.95, eps 1e-8, weight decay
0.1 on matrices and embeddings), over --global-batch-size sequences in
micro-batches of --batch-size whose gradients add up (each micro-batch's loss
divided by their count; one micro-batch per step by default), synthetic
uniform random tokens. fp32 parameters with TF32 matmuls allowed (as paraplan's
default); --bf16 adds bf16 autocast. --mode compile wraps the model in
torch.compile. The first --warmup steps are not timed. MFU is the model's
FLOPs per token (the planner's count, given by the caller) times tokens/s over
the dense tensor-core peak of the precision: TF32 494.5 TFLOP/s, bf16 989
TFLOP/s on an H100 SXM (--peak-tflops overrides).
"""
import argparse
import json
import sys
import time

import torch


def parser(description, seq_len, vocab):
    """The flags every baseline takes; the caller adds its model's shapes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per micro-batch")
    p.add_argument("--global-batch-size", type=int, default=0,
                   help="sequences per optimizer step, a multiple of --batch-size (default: "
                   "--batch-size, no accumulation)")
    p.add_argument("--seq-len", type=int, default=seq_len)
    p.add_argument("--vocab", type=int, default=vocab)
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa",
                   help="sdpa: F.scaled_dot_product_attention (fused, flash-style like "
                   "paraplan's); manual: materialised probabilities")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast (default fp32 + TF32)")
    p.add_argument("--peak-tflops", type=float, default=0.0,
                   help="default 494.5 (TF32) or 989 (bf16), H100 SXM dense")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--json", default="", help="also write the result as JSON here")
    return p


def allow_tf32(torch):
    """fp32 matmuls and convolutions in TF32. PyTorch 2.9 replaced the
    allow_tf32 switches with fp32_precision (and warns on, or refuses, a mix of
    the two); older versions only have the switches."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "tf32"
    else:
        matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def run(args, make_model, flops_per_token, draw_vocab=None):
    """Times args.steps training steps of make_model() (a module returning the
    mean cross-entropy of (tokens, targets)); prints and returns the result."""
    if not torch.cuda.is_available():
        sys.exit("no CUDA device visible")
    torch.manual_seed(args.seed)
    allow_tf32(torch)
    device = torch.device("cuda")
    global_batch = args.global_batch_size or args.batch_size
    if global_batch % args.batch_size:
        sys.exit("--global-batch-size must be a multiple of --batch-size")
    accumulate = global_batch // args.batch_size
    model = make_model().to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = torch.compile(model) if args.mode == "compile" else model
    data = torch.randint(0, draw_vocab or args.vocab,
                         (args.steps + args.warmup, accumulate, args.batch_size,
                          args.seq_len + 1), device=device)

    def step(i):
        total = torch.zeros((), device=device)
        for j in range(accumulate):
            tokens, targets = data[i, j, :, :-1], data[i, j, :, 1:]
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.bf16):
                loss = step_model(tokens, targets) / accumulate
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    start = time.perf_counter()
    losses = []  # read back after the clock stops: no host wait inside the timed steps
    for i in range(args.warmup, args.warmup + args.steps):
        loss = step(i)
        losses.append(loss.detach())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    losses = [value.item() for value in losses]

    tokens_per_second = global_batch * args.seq_len * args.steps / elapsed
    peak = (args.peak_tflops or (989.0 if args.bf16 else 494.5)) * 1e12
    result = {
        "mode": args.mode, "attention": args.attention, "precision": "bf16" if args.bf16 else "tf32",
        "batch_size": args.batch_size, "global_batch_size": global_batch,
        "grad_accum_steps": accumulate, "steps": args.steps, "step_seconds": elapsed / args.steps,
        "tokens_per_second": tokens_per_second, "mfu": flops_per_token * tokens_per_second / peak,
        "last_loss": losses[-1], "losses": losses, "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30,
    }
    batches = f"B={args.batch_size:<3d} " + (f"G={global_batch:<3d} " if accumulate > 1 else "")
    print(f"torch {args.mode:7s} {batches}{result['precision']}: "
          f"{elapsed / args.steps * 1e3:8.2f} ms/step  {tokens_per_second:12,.0f} tokens/s  "
          f"MFU {100 * result['mfu']:5.1f}%  loss {result['last_loss']:.4f}  "
          f"memory {result['peak_memory_gib']:.1f} GiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result
