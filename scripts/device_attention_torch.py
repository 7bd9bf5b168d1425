#!/usr/bin/env python3
"""device_attention_torch.py: PyTorch's side of the attention comparison with
paraplan's kernels/attention_bench.cc: times causal
F.scaled_dot_product_attention(q, k, v, is_causal=True), forward and forward +
backward, on each SDPA backend (flash, cudnn, efficient, math, each forced with
torch.nn.attention.sdpa_kernel) at the same shapes, default GPT-2 124M's
attention (batch 8, seq 1024, 12 heads, head dim 64, bf16).

Inputs are contiguous [B, H, T, D] tensors (K and V [B, Hkv, T, D]), uniform
in [-1, 1), requiring grad, so the timed forward is the training forward (it
keeps the logsumexp for backward, as paraplan's forward always does). Grouped
KV heads (--kv-heads < --heads) pass enable_gqa=True (PyTorch >= 2.5; a
backend that refuses it is reported unavailable), or with --gqa
repeat_interleave, K and V are repeated to H heads inside the timed region.
The backward is torch.autograd.grad(out, (q, k, v), grad_output) with a random
grad_output: fresh gradients every call, nothing accumulates.

Timing: --warmup untimed forward + backward pairs, then --repeats repeats of
--iterations calls, each repeat timed with two torch.cuda.Event records; the
median repeat over --iterations is reported, for the forward alone and for
forward + backward; backward_ms is their difference.

FLOPs, as attention_bench.cc (FlashAttention's convention): forward = 2
matmuls x 2*B*H*T*T*D, halved for causal = 2*B*H*T*T*D; backward = 2.5 x
forward; forward + backward = 3.5 x forward.

Standard library + torch only. Without torch, without the SDPA backend API
(Debian's torch 1.13) or without a CUDA device it prints why, writes
{"unavailable": reason, ...} to --json and exits 0, so a CPU rehearsal runs
the plumbing. A backend that is unavailable or fails for the shape is reported
as {"unavailable": "<short reason>"}; the script goes on with the others.
"""
import argparse
import json
import statistics
import sys
import warnings

BACKENDS = [("flash", "FLASH_ATTENTION"), ("cudnn", "CUDNN_ATTENTION"),
            ("efficient", "EFFICIENT_ATTENTION"), ("math", "MATH")]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=0, help="default: --heads")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--iterations", type=int, default=20, help="calls per timed repeat")
    p.add_argument("--warmup", type=int, default=5, help="untimed forward + backward pairs")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (the median is kept)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--gqa", choices=["enable_gqa", "repeat_interleave"], default="enable_gqa",
                   help="how K, V reach H heads when --kv-heads < --heads")
    p.add_argument("--backends", default=",".join(name for name, _ in BACKENDS),
                   help="comma-separated subset of flash,cudnn,efficient,math")
    p.add_argument("--json", default="", help="write the results here")
    args = p.parse_args()
    if args.kv_heads == 0:
        args.kv_heads = args.heads
    for flag in ("batch", "seq", "heads", "kv_heads", "head_dim", "iterations", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag.replace('_', '-')}: must be >= 1")
    if args.warmup < 0:
        p.error("--warmup: must be >= 0")
    if args.heads % args.kv_heads:
        p.error(f"--kv-heads: {args.kv_heads} does not divide --heads {args.heads}")
    known = [name for name, _ in BACKENDS]
    args.backends = [b for b in args.backends.split(",") if b]
    for b in args.backends:
        if b not in known:
            p.error(f"--backends: '{b}' is not one of {', '.join(known)}")
    return args


def shape_of(args):
    return {"batch": args.batch, "seq": args.seq, "heads": args.heads,
            "kv_heads": args.kv_heads, "head_dim": args.head_dim, "dtype": args.dtype,
            "iterations": args.iterations, "warmup": args.warmup, "repeats": args.repeats,
            "gqa": args.gqa if args.kv_heads < args.heads else "none"}


def write_json(path, result):
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


def forward_flops(args):
    """2 matmuls x 2*B*H*T*T*D flops, halved for the causal mask."""
    return 2.0 * args.batch * args.heads * args.seq * args.seq * args.head_dim


def short(text, limit=160):
    """The first line of an error or warning, cut to limit characters."""
    line = next((l.strip() for l in str(text).splitlines() if l.strip()), "error")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def why_unavailable():
    """None when torch, its SDPA backend API and a CUDA device are all here;
    else (reason, torch version or None)."""
    try:
        import torch
    except ImportError as error:
        return f"torch is not importable ({short(error)})", None
    reasons = []
    try:
        import torch.nn.attention as attention  # PyTorch >= 2.3
        has_api = hasattr(attention, "sdpa_kernel") and hasattr(attention, "SDPBackend")
    except ImportError:
        has_api = False
    if not has_api:
        reasons.append(f"torch {torch.__version__} has no torch.nn.attention.sdpa_kernel "
                       "(needs PyTorch >= 2.3)")
    if not torch.cuda.is_available():
        reasons.append(f"no CUDA device visible to torch {torch.__version__} "
                       f"(built with CUDA {torch.version.cuda})")
    return ("; ".join(reasons), torch.__version__) if reasons else None


def median_ms(torch, args, body):
    """Median over args.repeats of the milliseconds per call of body, timed
    with CUDA events around args.iterations calls."""
    per_call = []
    for _ in range(args.repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iterations):
            body()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / args.iterations)
    return statistics.median(per_call)


def time_backend(torch, args, backend, tensors):
    """One backend's timings (dict), or raises with the reason it cannot run."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    q, k, v, grad_out = tensors
    group = args.heads // args.kv_heads
    gqa = {}
    if group > 1 and args.gqa == "enable_gqa":
        gqa = {"enable_gqa": True}

    def attention():
        kk, vv = k, v
        if group > 1 and args.gqa == "repeat_interleave":
            kk, vv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, kk, vv, is_causal=True, **gqa)

    def forward_backward():
        out = attention()
        torch.autograd.grad(out, (q, k, v), grad_out)

    with sdpa_kernel(backend), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = attention()  # fails here when the backend refuses the shape or dtype
            for _ in range(args.warmup):
                forward_backward()
            torch.cuda.synchronize()
            fwd = median_ms(torch, args, attention)
            fwd_bwd = median_ms(torch, args, forward_backward)
        except Exception as error:
            # The warnings say why a backend was skipped ("No available kernel").
            reasons = [short(error)] + [short(w.message) for w in caught
                                        if "not used because" not in str(w.message)]
            raise RuntimeError("; ".join(dict.fromkeys(reasons))) from None
    out = out.detach().float()
    flops = forward_flops(args)
    bwd = fwd_bwd - fwd
    return {
        "forward_ms": fwd, "backward_ms": bwd, "forward_backward_ms": fwd_bwd,
        "forward_tflops": flops / (fwd * 1e-3) / 1e12,
        "backward_tflops": 2.5 * flops / (bwd * 1e-3) / 1e12 if bwd > 0 else None,
        "forward_backward_tflops": 3.5 * flops / (fwd_bwd * 1e-3) / 1e12,
        "output_abs_sum": float(out.nan_to_num(nan=0.0).abs().sum(dtype=torch.float64)),
        "output_nan_count": int(out.isnan().sum()),
    }


def main():
    args = parse_args()
    shape = shape_of(args)
    unavailable = why_unavailable()
    if unavailable:
        reason, version = unavailable
        print(f"device_attention_torch: unavailable: {reason}")
        write_json(args.json, {"unavailable": reason, "torch": version, "shape": shape})
        return 0

    import torch
    from torch.nn.attention import SDPBackend

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[args.dtype]
    torch.manual_seed(args.seed)
    B, H, K, T, D = args.batch, args.heads, args.kv_heads, args.seq, args.head_dim

    def uniform(*size, grad=True):
        x = torch.rand(*size, device="cuda", dtype=torch.float32).mul_(2).sub_(1).to(dtype)
        return x.requires_grad_(grad)

    try:
        tensors = (uniform(B, H, T, D), uniform(B, K, T, D), uniform(B, K, T, D),
                   uniform(B, H, T, D, grad=False))
    except Exception as error:  # e.g. out of memory for a large shape
        reason = f"cannot allocate the inputs: {short(error)}"
        print(f"device_attention_torch: unavailable: {reason}")
        write_json(args.json, {"unavailable": reason, "torch": torch.__version__, "shape": shape})
        return 0

    device = torch.cuda.get_device_name()
    print(f"device_attention_torch: {device}, torch {torch.__version__} (CUDA "
          f"{torch.version.cuda}), B={B} T={T} H={H} Hkv={K} D={D} {args.dtype}, median of "
          f"{args.repeats} x {args.iterations} iterations, causal")
    results = {}
    for name, member in BACKENDS:
        if name not in args.backends:
            continue
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            results[name] = {"unavailable": f"torch {torch.__version__} has no SDPBackend.{member}"}
        else:
            try:
                results[name] = time_backend(torch, args, backend, tensors)
            except Exception as error:
                results[name] = {"unavailable": short(error, 300)}
            torch.cuda.empty_cache()
        r = results[name]
        if "unavailable" in r:
            print(f"  {name:9s} unavailable: {r['unavailable']}")
        else:
            bwd_tflops = r["backward_tflops"]
            bwd_text = f"{bwd_tflops:.2f}" if bwd_tflops is not None else "-"
            print(f"  {name:9s} forward {r['forward_ms']:.4f} ms ({r['forward_tflops']:.2f} "
                  f"TFLOP/s), backward {r['backward_ms']:.4f} ms ({bwd_text} TFLOP/s), "
                  f"forward+backward {r['forward_backward_ms']:.4f} ms "
                  f"({r['forward_backward_tflops']:.2f} TFLOP/s); sum|out| "
                  f"{r['output_abs_sum']:.6g} nan {r['output_nan_count']}")
    write_json(args.json, {
        "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
        "shape": shape,
        "flop_formula": "forward = 2*B*H*T*T*D (4*B*H*T*T*D halved for causal); backward = "
                        "2.5 x forward; forward_backward = 3.5 x forward",
        "backends": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
