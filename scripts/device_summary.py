#!/usr/bin/env python3
"""device_summary.py: the one summary table of scripts/device_check.sh.

Reads what the device checks left in a log folder and prints, whatever of it
is there: the GPU test results (ctest's log), the GPT-2 124M benchmark
(paraplan against PyTorch eager and torch.compile, tokens/s and MFU per
micro-batch, from bench/*.json), where a step's time goes (an nsys kernel
summary: GEMMs, attention, the rest, host gaps) and the multi-rank replays on
the GPU (measured against predicted per stage, from replay/*.json).
Standard library only; usage: device_summary.py LOG_DIR [PEAK_TFLOPS].
"""
import csv
import glob
import json
import os
import re
import sys

# GPT-2 124M as samples/gpt2_124m/job.toml and bench.sh count it.
L, C, F, V, T = 12, 768, 3072, 50304, 1024
FLOPS_PER_TOKEN = 6 * (L * (4 * C * C + 2 * F * C) + C * V) + 12 * L * T * C


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def tests(log_dir):
    path = os.path.join(log_dir, "tests.log")
    if not os.path.exists(path):
        return ["tests: not run"]
    text = open(path, errors="replace").read()
    summary = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    if not summary:
        return ["tests: no ctest summary in tests.log (the run did not finish)"]
    failed, total = int(summary.group(2)), int(summary.group(3))
    skipped = text.count("***Skipped")
    lines = ["tests: %d of %d passed, %d failed, %d skipped" % (total - failed, total, failed,
                                                                 skipped)]
    lines += ["  failed: " + name for name in re.findall(r"\d+ - (\S+) \(Failed\)", text)]
    return lines


def bench(log_dir, peak):
    rows = []
    for path in sorted(glob.glob(os.path.join(log_dir, "bench", "b*.paraplan.json")),
                       key=lambda p: int(re.search(r"b(\d+)\.", os.path.basename(p)).group(1))):
        b = re.search(r"b(\d+)\.", os.path.basename(path)).group(1)
        ours = (load_json(path) or {}).get("tokens_per_second_measured")
        eager = (load_json(os.path.join(log_dir, "bench", "b%s.eager.json" % b)) or {}).get(
            "tokens_per_second")
        compiled = (load_json(os.path.join(log_dir, "bench", "b%s.compile.json" % b)) or {}).get(
            "tokens_per_second")
        mfu = None if ours is None else 100 * ours * FLOPS_PER_TOKEN / peak
        eager_mfu = None if eager is None else 100 * eager * FLOPS_PER_TOKEN / peak
        compiled_mfu = None if compiled is None else 100 * compiled * FLOPS_PER_TOKEN / peak
        ratio = None if ours is None or compiled is None else ours / compiled
        rows.append("%5s %12s %6s %12s %6s %12s %6s %7s" % (
            b, fmt(ours, ",.0f"), fmt(mfu, ".1f"), fmt(eager, ",.0f"), fmt(eager_mfu, ".1f"),
            fmt(compiled, ",.0f"), fmt(compiled_mfu, ".1f"), fmt(ratio, ".2f")))
    if not rows:
        return ["benchmark: not run"]
    return ["GPT-2 124M, seq 1024, tokens/s and MFU %% (peak %.1f TFLOP/s):" % (peak / 1e12),
            "%5s %12s %6s %12s %6s %12s %6s %7s" % ("micro", "paraplan", "MFU", "eager", "MFU",
                                                    "compile", "MFU", "x comp")] + rows


def categorize(kernel):
    name = kernel.lower()
    if any(key in name for key in ("gemm", "xmma", "cutlass", "cublas", "matmul", "sm90_", "sm80_")):
        return "GEMMs"
    if "attention" in name or "flash" in name:
        return "attention"
    return "the rest"


def breakdown(log_dir):
    path = os.path.join(log_dir, "profile", "kernels.csv")  # nsys stats cuda_gpu_kern_sum
    if not os.path.exists(path):
        return ["time breakdown: no kernel profile (nsys not found or not run)"]
    totals = {}
    with open(path) as f:
        rows = [row for row in csv.DictReader(line for line in f if "," in line)]
    for row in rows:
        nanoseconds = float(row.get("Total Time (ns)", 0) or 0)
        category = categorize(row.get("Name", ""))
        totals[category] = totals.get(category, 0.0) + nanoseconds
    wall = load_json(os.path.join(log_dir, "profile", "wall.json")) or {}
    wall_ns = float(wall.get("profiled_seconds", 0)) * 1e9
    kernels_ns = sum(totals.values())
    lines = ["where the step's time goes (nsys, %s):" % wall.get("what", "profiled replay")]
    for category in ("GEMMs", "attention", "the rest"):
        share = 100 * totals.get(category, 0.0) / max(wall_ns or kernels_ns, 1)
        lines.append("  %-10s %9.1f ms  %5.1f%%" % (category, totals.get(category, 0.0) / 1e6,
                                                    share))
    if wall_ns > kernels_ns:
        lines.append("  %-10s %9.1f ms  %5.1f%%" % ("host gaps", (wall_ns - kernels_ns) / 1e6,
                                                    100 * (wall_ns - kernels_ns) / wall_ns))
    return lines


def replays(log_dir):
    lines = []
    for path in sorted(glob.glob(os.path.join(log_dir, "replay", "*.json"))):
        report = load_json(path)
        if not report:
            continue
        lines.append("replay %s: step measured %s s, predicted %s s" % (
            os.path.splitext(os.path.basename(path))[0],
            fmt(report.get("step_seconds_measured"), ".4f"),
            fmt(report.get("step_seconds_predicted"), ".4f")))
        for stage in report.get("stages", []):
            parts = []
            for key, value in stage.items():
                if isinstance(value, dict) and "measured" in value and "predicted" in value:
                    parts.append("%s %s/%s" % (key, fmt(value["measured"], ".3g"),
                                               fmt(value["predicted"], ".3g")))
            lines.append("  stage %s (measured/predicted): %s" % (stage.get("stage"),
                                                                   ", ".join(parts)))
    return lines or ["replay: not run"]


def main():
    log_dir = sys.argv[1]
    peak = float(sys.argv[2] if len(sys.argv) > 2 else 989.0) * 1e12
    gpu = open(os.path.join(log_dir, "gpu.txt")).read().strip() if os.path.exists(
        os.path.join(log_dir, "gpu.txt")) else "unknown GPU"
    print("=" * 78)
    print("device check summary: " + gpu)
    for section in (tests(log_dir), bench(log_dir, peak), breakdown(log_dir), replays(log_dir)):
        print("-" * 78)
        print("\n".join(section))
    print("=" * 78)


if __name__ == "__main__":
    main()
