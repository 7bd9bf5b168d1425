#!/usr/bin/env python3
"""llmc_run.py: one llm.c training run (train_gpt2cu, scripts/llmc_build.sh) at
GPT-2 124M, timed as bench.sh times paraplan and PyTorch, written as the same
JSON shape (tokens_per_second, mfu, losses, peak_memory_gib, ...).

llm.c starts from random weights (-e d12: 12 layers, 768 wide, vocab 50,257
padded to 50,304), bf16, on uniform random tokens (llmc_tokens.py, made here
when missing), at micro-batch B and global batch G sequences per optimizer
step (-d G*T tokens: G/B micro-batches accumulated), for WARMUP + STEPS steps
with no evaluation beyond llm.c's one val batch before the first and after the
last step (outside its timer), no sampling, no checkpoints; llm.c's recipe for
GPT-2 124M otherwise (-r 0 no recompute, -c 0.1 weight decay, -l 6e-4).

Each step's line (train_gpt2.cu: "step %4d/%d | loss %7.6f (%+.2fz)| norm ...
| %.2f ms | %.1f%% bf16 MFU | %.0f tok/s") gives the step's time, measured by
llm.c with CUDA events around forward, backward and the AdamW update. The last
STEPS lines are the timed ones: tokens/s = G*T*STEPS / their summed time. MFU
is llm.c's formula, 6N + 6LCT FLOPs per token (N with the padded vocabulary),
against --peak-tflops (989, the H100 SXM dense bf16 peak). Peak memory: the
process's largest use nvidia-smi saw (sampled every 0.2 s; the CUDA context
and cuBLAS/cuDNN workspaces included), else llm.c's own "device memory usage"
after it allocated its state. Attention: cuDNN's or llm.c's kernels, read from
llmc_build.txt beside the binary; where the machine has no libcudnn the
USE_CUDNN=0 build beside it (train_gpt2cu_kernels) runs instead, and says so.

Usage: llmc_run.py --binary PATH --batch-size B [--global-batch G] [--steps S]
  [--warmup W] [--json OUT] [--data DIR] [--extra "llm.c flags"]
Exits 1, its last line saying why, when llm.c fails or prints too few steps.
"""
import argparse
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmc_tokens  # noqa: E402

# GPT-2 124M as llm.c builds it from "d12": N counts the padded vocabulary.
GPT2_124M = {"num_parameters": 124475904, "layers": 12, "width": 768, "seq_len": 1024}
H100_BF16_PEAK_TFLOPS = 989.0

STEP_LINE = re.compile(
    r"^step +(\d+)/(\d+) \| loss +([-+0-9.eE]+|[-+]?nan|[-+]?inf) \(([^)]*)z\)\| "
    r"norm +([-+0-9.eE]+|[-+]?nan|[-+]?inf) \(([^)]*)z\)\| lr ([-+0-9.eE]+|[-+]?nan) \| "
    r"([0-9.]+) ms \| ([-0-9.]+)% bf16 MFU \| ([-0-9.]+) tok/s", re.MULTILINE)
MEMORY_LINE = re.compile(r"^device memory usage: (\d+) MiB / (\d+) MiB", re.MULTILINE)
PARAMETERS_LINE = re.compile(r"^num_parameters: (\d+)", re.MULTILINE)
ACCUMULATION_LINE = re.compile(r"grad_accum_steps=(\d+)")
DEVICE_LINE = re.compile(r"^\| device +\| (.*?) *\|$", re.MULTILINE)
ERROR_LINE = re.compile(r"ERROR|error|Error|out of memory|Assertion|Segmentation|Aborted")


def flops_per_token(num_parameters, layers, width, seq_len):
    """llm.c's count (train_gpt2.cu gpt2_estimate_mfu): 6N + 6LCT."""
    return 6 * num_parameters + 6 * layers * width * seq_len


def parse_output(text):
    """What llm.c printed: each step's figures, the parameters, the accumulation,
    the device, the memory after allocation, and its error lines."""
    steps = []
    for m in STEP_LINE.finditer(text):
        steps.append({"step": int(m.group(1)), "of": int(m.group(2)), "loss": float(m.group(3)),
                      "norm": float(m.group(5)), "lr": float(m.group(7)), "ms": float(m.group(8)),
                      "mfu_printed": float(m.group(9)) / 100, "tokens_per_second_ema":
                      float(m.group(10))})
    memory = MEMORY_LINE.search(text)
    parameters = PARAMETERS_LINE.search(text)
    accumulation = ACCUMULATION_LINE.search(text)
    device = DEVICE_LINE.search(text)
    return {"steps": steps,
            "memory_after_allocation_mib": int(memory.group(1)) if memory else None,
            "num_parameters": int(parameters.group(1)) if parameters else None,
            "grad_accum_steps": int(accumulation.group(1)) if accumulation else None,
            "device": device.group(1) if device else None,
            "errors": [line.strip() for line in text.splitlines() if ERROR_LINE.search(line)]}


def summarize(parsed, batch, global_batch, seq_len, steps, peak_tflops=H100_BF16_PEAK_TFLOPS):
    """The result as bench.sh's other runs write it, from the last `steps` step
    lines; raises ValueError saying what is missing."""
    lines = parsed["steps"]
    if len(lines) < steps:
        raise ValueError("llm.c printed %d step line(s), %d timed steps wanted%s" % (
            len(lines), steps, ": " + parsed["errors"][-1][:120] if parsed["errors"] else ""))
    timed = lines[-steps:]
    seconds = sum(line["ms"] for line in timed) / 1e3
    if seconds <= 0:
        raise ValueError("llm.c's timed steps took no time")
    tokens_per_second = global_batch * seq_len * steps / seconds
    shape = dict(GPT2_124M, seq_len=seq_len)
    if parsed["num_parameters"]:
        shape["num_parameters"] = parsed["num_parameters"]
    per_token = flops_per_token(**shape)
    losses = [line["loss"] for line in timed]
    return {
        "mode": "llmc", "precision": "bf16", "batch_size": batch, "global_batch_size": global_batch,
        "grad_accum_steps": parsed["grad_accum_steps"], "steps": steps,
        "step_seconds": seconds / steps, "each_step_seconds": [line["ms"] / 1e3 for line in timed],
        "tokens_per_second": tokens_per_second,
        "mfu": per_token * tokens_per_second / (peak_tflops * 1e12),
        "mfu_formula": "llm.c: 6N + 6LCT = %d FLOPs per token, against %.1f TFLOP/s" % (
            per_token, peak_tflops),
        "mfu_llmc_printed": sum(line["mfu_printed"] for line in timed) / steps,
        "last_loss": losses[-1], "losses": losses,
        "memory_after_allocation_gib": None if parsed["memory_after_allocation_mib"] is None
        else parsed["memory_after_allocation_mib"] / 1024,
        "device": parsed["device"], "num_parameters": shape["num_parameters"],
    }


def build_info(binary):
    """llmc_build.txt beside the binary, as {key: value}."""
    info = {}
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(binary)), "llmc_build.txt")) as f:
            for line in f:
                key, _, value = line.partition(":")
                info[key.strip()] = value.strip()
    except OSError:
        pass
    return info


def attention_of(binary, info):
    if info.get("attention"):
        return info["attention"]
    try:
        with open(binary, "rb") as f:
            return "cudnn" if b"libcudnn.so" in f.read() else "llm.c kernels"
    except OSError:
        return "unknown"


def library_folders():
    """Where a GPU machine keeps CUDA's and the nvidia-* wheels' libraries."""
    folders = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib",
               "/usr/local/cuda/targets/x86_64-linux/lib"]
    try:
        import nvidia  # the nvidia-* wheels of PyTorch's environment
        for root in nvidia.__path__:
            folders += sorted(glob.glob(os.path.join(root, "*", "lib")) +
                              glob.glob(os.path.join(root, "*", "*", "lib")))
    except ImportError:
        pass
    folders += sorted(glob.glob("/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib"))
    return folders + ["/usr/lib/x86_64-linux-gnu"]


def missing_libraries(binary, env):
    try:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, env=env).stdout
    except OSError:
        return []
    return re.findall(r"^\s*(\S+) => not found", out, re.MULTILINE)


def loadable(binary):
    """(environment in which binary's libraries resolve, libraries still missing)."""
    env = dict(os.environ)
    added = []
    for library in missing_libraries(binary, env):
        for folder in library_folders():
            if os.path.exists(os.path.join(folder, library)) and folder not in added:
                added.append(folder)
                break
    if added:
        env["LD_LIBRARY_PATH"] = ":".join(added + [p for p in env.get(
            "LD_LIBRARY_PATH", "").split(":") if p])
    return env, missing_libraries(binary, env)


class MemoryPoller(threading.Thread):
    """The largest GPU memory nvidia-smi reports for one process (MiB)."""

    def __init__(self, pid, interval=0.2):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak_mib = pid, interval, None
        self.done = threading.Event()

    def run(self):
        while not self.done.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=5).stdout
            except (OSError, subprocess.SubprocessError):
                return
            for line in out.splitlines():
                parts = [p.strip() for p in line.split(",")]
                if len(parts) == 2 and parts[0] == str(self.pid) and parts[1].isdigit():
                    self.peak_mib = max(self.peak_mib or 0, int(parts[1]))
            self.done.wait(self.interval)


def command(binary, args, data):
    return [binary, "-i", os.path.join(data, "train_*.bin"), "-j", os.path.join(data, "val_*.bin"),
            "-e", "d12", "-b", str(args.batch_size), "-t", str(args.seq_len),
            "-d", str(args.global_batch * args.seq_len), "-x", str(args.warmup + args.steps),
            "-v", "1000000", "-m", "1", "-s", "0", "-h", "0", "-n", "0",
            "-r", "0", "-c", "0.1", "-l", "0.0006"] + shlex.split(args.extra)


def prepare_data(args):
    data = args.data or tempfile.mkdtemp(prefix="llmc-data-")
    need = llmc_tokens.tokens_needed(args.global_batch, args.seq_len, args.warmup + args.steps)
    train = os.path.join(data, "train_000000.bin")
    if not (os.path.exists(train) and (os.path.getsize(train) - 1024) // 2 >= need):
        llmc_tokens.write_shards(data, need, args.global_batch * args.seq_len + 1)
    return data


def run(args):
    info = build_info(args.binary)
    binary, attention = args.binary, attention_of(args.binary, info)
    env, missing = loadable(binary)
    fallback = os.path.join(os.path.dirname(os.path.abspath(binary)), "train_gpt2cu_kernels")
    if any("cudnn" in m for m in missing) and os.access(fallback, os.X_OK):
        binary, attention = fallback, "llm.c kernels (no %s on this machine)" % missing[0]
        env, missing = loadable(binary)
    if missing:
        raise RuntimeError("llm.c cannot start: %s not found" % ", ".join(missing))
    data = prepare_data(args)
    cmd = command(os.path.abspath(binary), args, data)
    print("llmc_run.py: " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    process = subprocess.Popen(cmd, cwd=data, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
    poller = MemoryPoller(process.pid)
    poller.start()
    lines = []
    for line in process.stdout:
        sys.stdout.write(line)
        lines.append(line)
    process.stdout.close()
    rc = process.wait()
    poller.done.set()
    parsed = parse_output("".join(lines))
    if rc != 0:
        raise RuntimeError("llm.c exited %d%s" % (rc, ": " + parsed["errors"][-1][:120]
                                                  if parsed["errors"] else ""))
    result = summarize(parsed, args.batch_size, args.global_batch, args.seq_len, args.steps,
                       args.peak_tflops)
    result.update(attention=attention, commit=info.get("commit", "unknown"), command=cmd,
                  warmup=args.warmup)
    if poller.peak_mib:
        result["peak_memory_gib"] = poller.peak_mib / 1024
        result["peak_memory_source"] = "nvidia-smi: the process's largest use (context included)"
    else:
        result["peak_memory_gib"] = result["memory_after_allocation_gib"]
        result["peak_memory_source"] = "llm.c: device memory usage after allocating its state"
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="train_gpt2cu (scripts/llmc_build.sh)")
    parser.add_argument("--batch-size", type=int, default=8, help="micro-batch B")
    parser.add_argument("--global-batch", type=int, default=0,
                        help="sequences per optimizer step (default B: no accumulation)")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--peak-tflops", type=float, default=H100_BF16_PEAK_TFLOPS)
    parser.add_argument("--data", default="", help="token shards' folder (made when missing)")
    parser.add_argument("--extra", default="", help="more train_gpt2cu flags")
    parser.add_argument("--json", default="", help="write the result here")
    args = parser.parse_args(argv)
    args.global_batch = args.global_batch or args.batch_size
    if args.global_batch % args.batch_size or args.warmup < 1 or args.steps < 1:
        parser.error("--global-batch must be a multiple of --batch-size; --warmup and --steps >= 1 "
                     "(llm.c's first step sets up cuBLAS and cuDNN)")
    try:
        result = run(args)
    except (RuntimeError, ValueError, OSError) as error:
        print("llmc_run.py: %s" % error, file=sys.stderr)
        return 1
    print("llm.c   B=%-3d G=%-3d %s: %8.2f ms/step  %12s tokens/s  MFU %5.1f%% (llm.c's formula)  "
          "loss %.4f  memory %s GiB" % (
              args.batch_size, args.global_batch, result["attention"], 1e3 * result["step_seconds"],
              format(result["tokens_per_second"], ",.0f"), 100 * result["mfu"], result["last_loss"],
              "-" if result["peak_memory_gib"] is None else "%.1f" % result["peak_memory_gib"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
