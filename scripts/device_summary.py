#!/usr/bin/env python3
"""device_summary.py: the one summary table of scripts/device_check.sh.

Reads whatever the phases left in the check's work folder (one sub-folder per
phase: facts, tests, sanitizer, losses, bench, llama, breakdown, and
progress.txt) and prints: each phase's state and time; the machine's facts;
the tests passed, failed, timed out and crashed by name (with the rerun under
CUDA_LAUNCH_BLOCKING) and the largest measured comparison errors; sanitizer
errors; device against CPU losses; GPT-2's tokens/s and MFU against PyTorch
eager and torch.compile with each step's loss, and the replay's components
measured against predicted; the Llama-3.2-1B shape's tokens/s and MFU against
torch.compile; every replay's step and peak memory against its plan's (the
step within 5%, the peak never below the measured and at most 10% above: off
is a finding, shown, not a failure); the kernels' time by kind with the host
gaps; paraplan's attention against PyTorch's SDPA backends. A phase that did
not run says so.

First, each phase's state and the verdict, read from the phases' files and
progress.txt (never from an exit status alone):
  ok        it ran and passed
  failed    it ran and something failed: a test (also one that failed and then
            skipped on its rerun), a sanitizer error or hazard, a run's non-zero
            exit, a missing figure, a non-finite loss
  flaky     tests only: every failure passed on its rerun
  timeout   it ran past its limit
  absent    what it needs is missing: the tool (compute-sanitizer, ncu), the
            binary, PyTorch, or a GPU that PyTorch sees
  none ran  nothing to judge: no test matched, every test skipped (on a GPU, a
            test skipped for want of a visible GPU), a gtest filter ran nothing
  not run   the check ended, or its deadline came, before it
The sanitizer's runs and the bench's, llama's and breakdown's measurements
(paraplan's replay, torch eager, torch.compile; ncu, paraplan's attention,
PyTorch's attention) get their own states under their phase, which is ok only
when they all are. The verdict (the line "verdict: ok" or "verdict: not ok ...", which
device_check.sh's exit status follows) is ok only when every phase asked for
(check.txt) is ok; in a rehearsal (no GPU) the sanitizer, ncu and PyTorch may
be absent. A replay whose step or peak is off the plan's bounds is listed under
the verdict ("planner off its bounds"): a finding, not a failure.

Standard library only. Usage:
  device_summary.py WORK_DIR
  device_summary.py --compare-losses DIR CASE...   (the losses phase: writes
      DIR/losses.json, prints one line per case, exits 1 on a mismatch)
"""
# The phases' states and the verdict are judged in device_states.py; the files
# the phases leave are read in device_readers.py.
import glob
import json
import math
import os
import re
import sys
import xml.etree.ElementTree as ElementTree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_readers import (NO_GPU, fmt, load_json, load_jsonl, ncu_kernels, read,  # noqa: E402
                            test_body, test_outcomes)
from device_states import peak_accuracy, states_section, step_accuracy  # noqa: E402

# bf16 on both sides, different summation orders: |device - cpu| per step.
# Measured on an H100 (2026-11-27), 5 steps with the loss falling 10.9 -> 6.0:
# GPT-2 widths 4.4e-4, the grouped-KV Llama 3.2e-4; about 10x that allowed.
LOSS_TOLERANCE = 5e-3


# ---- the losses phase's comparison ----------------------------------------------------------------

def compare_losses(folder, cases):
    results, ok = {}, True
    for case in cases:
        cpu = load_jsonl(os.path.join(folder, case + ".cpu.jsonl"))
        device = load_jsonl(os.path.join(folder, case + ".device.jsonl"))
        result = {"cpu": [r.get("loss") for r in cpu or []],
                  "device": [r.get("loss") for r in device or []]}
        if not cpu or not device:
            result["verdict"] = "no %s losses" % ("CPU" if not cpu else "device")
        elif len(cpu) != len(device):
            result["verdict"] = "%d device steps against %d CPU steps" % (len(device), len(cpu))
        elif any(v is None or not math.isfinite(v) for v in result["device"]):
            result["verdict"] = "non-finite device loss"
        else:
            diffs = [abs(d - c) for d, c in zip(result["device"], result["cpu"])]
            result["max_abs_diff"] = max(diffs)
            result["verdict"] = "ok" if max(diffs) <= LOSS_TOLERANCE else "too far"
        result["tolerance"] = LOSS_TOLERANCE
        ok = ok and result["verdict"] == "ok"
        results[case] = result
    with open(os.path.join(folder, "losses.json"), "w") as f:
        json.dump(results, f, indent=1)
    for line in losses_lines(results):
        print(line)
    return 0 if ok else 1


def losses_lines(results):
    lines = []
    for case, r in results.items():
        pairs = " ".join("%s/%s" % (fmt(d, ".4f"), fmt(c, ".4f"))
                         for d, c in zip(r.get("device", []), r.get("cpu", [])))
        lines.append("  %-6s %-8s max |diff| %s (tolerance %.0e)  device/cpu per step: %s" % (
            case, r["verdict"], fmt(r.get("max_abs_diff"), ".2e"), r["tolerance"], pairs))
    return lines


# ---- sections -------------------------------------------------------------------------------------

def facts(work):
    text = read(os.path.join(work, "facts", "facts.txt"))
    if text is None:
        return ["facts: not run"]
    return ["facts:"] + ["  " + line for line in text.splitlines()]


# A comparison a test printed: "[ compare ] WHAT: max rel err E (tolerance T)".
COMPARE_LINE = re.compile(r"\[ compare \] (.*?): max rel err ([0-9.eE+-]+|nan|inf) "
                          r"\(tolerance ([0-9.eE+-]+)\)")


# The error-looking lines of what ctest printed for one test first, at most 6.
ERROR_WORDS = re.compile(r"error|fail|abort|what\(\)|fault|refused|timed? ?out|signal|"
                         r"not found|cannot|exception", re.IGNORECASE)


def failure_excerpt(text, name, most=6):
    body = test_body(text, name)
    errors = [line for line in body if ERROR_WORDS.search(line)]
    return (errors or body[-most:])[:most]


def comparisons(work):
    """The measured errors of every comparison the tests printed (JUnit system-out)."""
    found = {}
    for path in (os.path.join(work, "tests", "junit.xml"),):
        try:
            root = ElementTree.parse(path).getroot()
        except (OSError, ElementTree.ParseError):
            continue
        for case in root.iter("testcase"):
            out = "".join(node.text or "" for node in case.iter("system-out"))
            for what, error, tolerance in COMPARE_LINE.findall(out):
                try:
                    ratio = float(error) / float(tolerance)
                except ValueError:
                    ratio = float("inf")
                name = re.sub(r"  # GetParam\(\).*", "", case.get("name", "?"))
                found[name + ": " + what] = (ratio, error, tolerance)
    return found


def tests(work):
    first = test_outcomes(work, "tests.log", "junit.xml")
    if first is None:
        return ["tests: not run"]
    states, text, outputs = first
    if not states:
        return ["tests: no test results in tests.log (%s)" % (
            "no test matched" if "No tests were found" in text else "the run did not get far"),
                "  " + text.strip().splitlines()[-1] if text.strip() else ""]
    counts = {}
    for state in states.values():
        key = "crashed" if state.startswith("Exception") or state in (
            "SegFault", "Subprocess aborted") else state.lower()
        counts[key] = counts.get(key, 0) + 1
    no_gpu = sum(1 for name, state in states.items()
                 if state == "Skipped" and NO_GPU.search(outputs.get(name, "")))
    lines = ["tests: %d run: %s%s" % (len(states), ", ".join(
        "%d %s" % (n, k) for k, n in sorted(counts.items())),
        " (%d skipped for want of a visible GPU)" % no_gpu if no_gpu else "")]
    rerun = test_outcomes(work, "rerun.log", "junit-rerun.xml")
    rerun_states, rerun_text, _ = rerun if rerun else ({}, "", {})
    for name, state in sorted(states.items()):
        if state in ("Passed", "Skipped"):
            continue
        again = rerun_states.get(name)
        # Flaky only when it passed alone: a rerun that skips proved nothing.
        flaky = again == "Passed"
        lines.append("  %-9s %s%s" % ("flaky" if flaky else state.lower(), name,
                                      "  (rerun with CUDA_LAUNCH_BLOCKING=1: %s)" % again.lower()
                                      if again else ""))
        # The first run's words: a flaky test's cause is only there.
        lines += ["      | " + line for line in failure_excerpt(text, name)]
        if again and not flaky:
            lines += ["      | rerun: " + line for line in failure_excerpt(rerun_text, name)]
    measured = comparisons(work)
    if measured:
        worst = sorted(measured.items(), key=lambda item: -item[1][0])[:5]
        lines.append("  comparisons measured: %d; largest error / tolerance:" % len(measured))
        for what, (ratio, error, tolerance) in worst:
            lines.append("    %5.2f  %s (%s against %s)" % (ratio, what, error, tolerance))
    dumps = glob.glob(os.path.join(work, "tests", "dumps", "*"))
    if dumps:
        lines.append("  %d tensor dump file(s) in tests/dumps" % len(dumps))
    return lines


def sanitizer(work):
    text = read(os.path.join(work, "sanitizer", "results.txt"))
    if text is None:
        return ["sanitizer: not run"]
    return ["compute-sanitizer:"] + ["  " + line for line in text.splitlines()]


def losses(work):
    results = load_json(os.path.join(work, "losses", "losses.json"))
    if results is None:
        return ["losses: not run" if not os.path.isdir(os.path.join(work, "losses"))
                else "losses: no comparison written (see losses/phase.log)"]
    return ["device against CPU losses (bf16, 5 steps):"] + losses_lines(results)


def losses_text(values):
    if not values:
        return "-"
    return " ".join("nan" if v is None or not math.isfinite(v) else "%.3f" % v for v in values)


def bench(work):
    folder = os.path.join(work, "bench")
    batches = micro_batches(folder)
    if not batches:
        return ["benchmark: not run"]
    lines = ["GPT-2 124M throughput (tokens/s, MFU %, x = paraplan / torch.compile):",
             "  %5s %12s %6s %12s %6s %12s %6s %6s" % ("micro", "paraplan", "MFU", "eager", "MFU",
                                                       "compile", "MFU", "x")]
    details = []
    for b in batches:
        ours = load_json(os.path.join(folder, "b%d.paraplan.json" % b)) or {}
        eager = load_json(os.path.join(folder, "b%d.eager.json" % b)) or {}
        compiled = load_json(os.path.join(folder, "b%d.compile.json" % b)) or {}
        tps = ours.get("tokens_per_second_measured")
        mfu = (ours.get("mfu") or {}).get("measured")
        ratio = None if not tps or not compiled.get("tokens_per_second") else \
            tps / compiled["tokens_per_second"]
        lines.append("  %5d %12s %6s %12s %6s %12s %6s %6s" % (
            b, fmt(tps, ",.0f"), fmt(None if mfu is None else 100 * mfu, ".1f"),
            fmt(eager.get("tokens_per_second"), ",.0f"),
            fmt(None if eager.get("mfu") is None else 100 * eager["mfu"], ".1f"),
            fmt(compiled.get("tokens_per_second"), ",.0f"),
            fmt(None if compiled.get("mfu") is None else 100 * compiled["mfu"], ".1f"),
            fmt(ratio, ".2f")))
        llmc = load_json(os.path.join(folder, "b%d.llmc.json" % b)) or {}
        details.append("  B=%d losses: paraplan %s | eager %s | compile %s | llm.c %s" % (
            b, losses_text(ours.get("each_step_loss")), losses_text(eager.get("losses")),
            losses_text(compiled.get("losses")), losses_text(llmc.get("losses"))))
        for stage in ours.get("stages", []):
            parts = []
            for key, value in (stage.get("per_step") or {}).items():
                if isinstance(value, dict) and value.get("measured"):
                    parts.append("%s %.2f/%.2f" % (key, 1e3 * value["measured"],
                                                   1e3 * (value.get("predicted") or 0)))
            if parts:
                details.append("  B=%d stage %s ms measured/predicted: %s" % (
                    b, stage.get("stage"), ", ".join(parts)))
    lines += peers(folder, batches) + switches(folder)
    return lines + details + failed_runs(folder, ("paraplan", "eager", "compile", "llmc"))


def switches(folder):
    """The before of each before/after: paraplan's replay under each of
    SWITCHES (device_phases.sh bench_switches) against the default run at the
    same micro-batch, in one call on one card."""
    lines = []
    for sub in sorted(glob.glob(os.path.join(folder, "switch_*"))):
        switch = (read(os.path.join(sub, "switch.txt")) or os.path.basename(sub)).strip()
        for b in micro_batches(sub):
            default = (load_json(os.path.join(folder, "b%d.paraplan.json" % b)) or {}).get(
                "tokens_per_second_measured")
            switched = (load_json(os.path.join(sub, "b%d.paraplan.json" % b)) or {}).get(
                "tokens_per_second_measured")
            gain = default / switched if default and switched else None
            lines.append("  B=%d with %s: %s tokens/s; the default %s (%sx)" % (
                b, switch, fmt(switched, ",.0f"), fmt(default, ",.0f"), fmt(gain, ".3f")))
    return ["before/after, paraplan's replay (the default against each switch):"] + lines \
        if lines else []


def failed_runs(folder, modes):
    """bench.sh's "X failed for B=..." lines from each mode's log, with the
    run's own last line (no CUDA, out of memory, ...)."""
    lines = []
    for mode in modes:
        log = read(os.path.join(folder, mode + ".log")) or ""
        for line in log.splitlines():
            if re.match(r"(paraplan \w+|pytorch \w+|llm\.c) (failed|not run) for", line):
                run_log = re.search(r"see (\S+)", line)
                why = (read(os.path.join(folder, os.path.basename(run_log.group(1))))
                       or "").strip().splitlines() if run_log else []
                lines.append("  %s%s" % (line.split(": see")[0],
                                         ": " + why[-1][:100] if why else ""))
    return lines


def micro_batches(folder):
    """The micro-batch sizes a bench.sh run left plans or JSON for."""
    paths = glob.glob(os.path.join(folder, "b*.pplan")) + glob.glob(os.path.join(folder, "b*.json"))
    return sorted({int(re.search(r"b(\d+)\.", os.path.basename(p)).group(1)) for p in paths})


def percent(fraction):
    return None if fraction is None else 100 * fraction


def llama(work):
    """The Llama-3.2-1B shape: paraplan's replay against torch.compile at one
    global batch, tokens/s and MFU (both by the planner's count of model FLOPs
    per token, planner/cost/model_counts.h, against the 989 TFLOP/s bf16 peak)."""
    folder = os.path.join(work, "llama")
    batches = micro_batches(folder)
    if not batches:
        return ["Llama-3.2-1B shape: not run"]
    globals_seen = sorted({g for b in batches for g in (
        peer_figures(folder, b, "paraplan")[2], peer_figures(folder, b, "compile")[2]) if g})
    lines = ["Llama-3.2-1B shape (samples/llama_1b), global batch %s sequences: tokens/s, MFU %% "
             "(the planner's FLOPs per token, 989 TFLOP/s), peak GiB, x = paraplan / "
             "torch.compile:" % ("/".join(str(g) for g in globals_seen) or "-"),
             "  %5s %12s %6s %7s %14s %6s %7s %6s" % ("micro", "paraplan", "MFU", "GiB",
                                                     "torch.compile", "MFU", "GiB", "x")]
    details = []
    for b in batches:
        ours = load_json(os.path.join(folder, "b%d.paraplan.json" % b)) or {}
        compiled = load_json(os.path.join(folder, "b%d.compile.json" % b)) or {}
        tps, memory, _ = peer_figures(folder, b, "paraplan")
        compiled_tps, compiled_memory, _ = peer_figures(folder, b, "compile")
        lines.append("  %5d %12s %6s %7s %14s %6s %7s %6s" % (
            b, fmt(tps, ",.0f"), fmt(percent((ours.get("mfu") or {}).get("measured")), ".1f"),
            fmt(memory, ".1f"), fmt(compiled_tps, ",.0f"), fmt(percent(compiled.get("mfu")), ".1f"),
            fmt(compiled_memory, ".1f"),
            fmt(tps / compiled_tps if tps and compiled_tps else None, ".2f")))
        details.append("  B=%d losses: paraplan %s | compile %s" % (
            b, losses_text(ours.get("each_step_loss")), losses_text(compiled.get("losses"))))
    lines.append("  memory: paraplan's tracked peak, torch's max allocated")
    return lines + details + failed_runs(folder, ("paraplan", "compile"))


def replay_accuracy(work):
    """Each replay of the bench and llama phases against its plan: the step
    (within 5%) and the peak memory (never below the measured, at most 10%
    above). A figure the report lacks is absent, never made up."""
    lines = []
    for phase, model in (("bench", "GPT-2 124M"), ("llama", "Llama-3.2-1B shape")):
        folder = os.path.join(work, phase)
        for b in micro_batches(folder):
            report = load_json(os.path.join(folder, "b%d.paraplan.json" % b))
            if report is None:
                lines.append("  %-18s B=%-3d no replay report (b%d.paraplan.json)" % (model, b, b))
                continue
            measured, predicted, _, verdict = step_accuracy(report)
            ratio = measured / predicted if measured and predicted else None
            lines.append("  %-18s B=%-3d step %9s ms measured %9s predicted  x%-6s %s" % (
                model, b, fmt(None if measured is None else 1e3 * measured, ".2f"),
                fmt(None if predicted is None else 1e3 * predicted, ".2f"), fmt(ratio, ".3f"),
                verdict))
            measured, predicted, _, verdict = peak_accuracy(report)
            # GiB on a GPU; a rehearsal's tiny model in MiB.
            unit, scale = ("GiB", 2**30) if max(measured or 0, predicted or 0) >= 2**30 else \
                ("MiB", 2**20)
            lines.append("  %-18s %5s peak %9s %s measured %8s predicted  %s" % (
                "", "", fmt(None if measured is None else measured / scale, ".2f"), unit,
                fmt(None if predicted is None else predicted / scale, ".2f"), verdict))
    if not lines:
        return ["the planner against the replays: no replay ran"]
    return ["the planner against the replays (x = measured / predicted step; within 5% is the "
            "bound; peak: the replay's memory tracker's high-water, predicted never below and "
            "at most 10% above; off is a finding, not a failure):"] + lines


# MFU beside the peers, counted as llm.c counts it (train_gpt2.cu gpt2_estimate_mfu):
# 6N + 6LCT FLOPs per token, N = 124,475,904 parameters of GPT-2 124M with the
# vocabulary padded to 50,304, L 12, C 768, T 1024: 803.5 MFLOP; H100 SXM dense bf16.
LLMC_FLOPS_PER_TOKEN = 6 * 124475904 + 6 * 12 * 768 * 1024
BF16_PEAK = 989e12
PEERS = (("paraplan", "paraplan"), ("compile", "torch.compile"), ("llmc", "llm.c"))


def peer_figures(folder, b, mode):
    """(tokens/s, peak memory GiB, global batch) of one run's JSON, or Nones."""
    result = load_json(os.path.join(folder, "b%d.%s.json" % (b, mode))) or {}
    if mode == "paraplan":
        memory = (result.get("peak_memory_bytes") or {}).get("measured")
        micro = result.get("micro_batch_size")
        return (result.get("tokens_per_second_measured"), None if memory is None else memory / 2**30,
                micro * result["num_micro_batches"] if micro and result.get("num_micro_batches")
                else None)
    return (result.get("tokens_per_second"), result.get("peak_memory_gib"),
            result.get("global_batch_size") or result.get("batch_size"))


def peers(folder, batches):
    """paraplan, torch.compile and llm.c at each micro-batch: tokens/s, MFU by
    llm.c's formula, peak memory; each one's best micro-batch; llm.c's attention."""
    figures = {(b, mode): peer_figures(folder, b, mode) for b in batches for mode, _ in PEERS}
    globals_seen = sorted({g for _, _, g in figures.values() if g})
    lines = ["beside the peers: tokens/s, MFU by llm.c's formula (6N + 6LCT = %.1f MFLOP/token, "
             "%.0f TFLOP/s), peak GiB; global batch %s sequences:" % (
                 LLMC_FLOPS_PER_TOKEN / 1e6, BF16_PEAK / 1e12,
                 "/".join(str(g) for g in globals_seen) or "-"),
             "  %5s" % "micro" + "".join(" %26s" % label for _, label in PEERS)]
    for b in batches:
        cells = []
        for mode, _ in PEERS:
            tps, memory, _ = figures[(b, mode)]
            mfu = None if tps is None else 100 * tps * LLMC_FLOPS_PER_TOKEN / BF16_PEAK
            cells.append(" %12s %6s %5s" % (fmt(tps, ",.0f"), "-" if mfu is None else
                                            "%.1f%%" % mfu, fmt(memory, ".1f")))
        lines.append("  %5d%s" % (b, "".join(cells)))
    best = []
    for mode, label in PEERS:
        runs = [(figures[(b, mode)][0], b) for b in batches if figures[(b, mode)][0]]
        if runs:
            tps, b = max(runs)
            best.append("%s B=%d %s" % (label, b, fmt(tps, ",.0f")))
    lines.append("  best: " + (", ".join(best) if best else "none measured"))
    llmc = [load_json(os.path.join(folder, "b%d.llmc.json" % b)) for b in batches]
    llmc = [r for r in llmc if r]
    if llmc:
        lines.append("  llm.c: attention %s, commit %s, %s micro-batch(es) a step at B=%d; "
                     "memory %s" % (llmc[0].get("attention"), str(llmc[0].get("commit"))[:10],
                                    llmc[0].get("grad_accum_steps"), llmc[0].get("batch_size"),
                                    llmc[0].get("peak_memory_source")))
    lines.append("  memory: paraplan's tracked peak, torch's max allocated, llm.c's process use")
    return lines


def kernel_kind(name):
    lower = name.lower()
    if any(key in lower for key in ("gemm", "xmma", "cutlass", "cublas", "nvjet", "sm90_", "sm80_")):
        return "GEMMs"
    if "attention" in lower or "flash" in lower:
        return "attention"
    return "the rest"


def breakdown(work):
    folder = os.path.join(work, "breakdown")
    if not os.path.isdir(folder):
        return ["time breakdown: not run"]
    lines = []
    kernels = ncu_kernels(os.path.join(folder, "ncu.csv"))
    if kernels:
        totals = {}
        for name, seconds in kernels:
            totals[kernel_kind(name)] = totals.get(kernel_kind(name), 0.0) + seconds
        kernel_seconds = sum(totals.values())
        replay_log = read(os.path.join(folder, "ncu_replay.log")) or ""
        # The bench's replay of the same micro-batch, measured without ncu.
        batch = (read(os.path.join(folder, "batch.txt")) or "").strip()
        step = (load_json(os.path.join(work, "bench", "b%s.paraplan.json" % batch)) or {}).get(
            "step_seconds_measured")
        wall = max(step or 0, kernel_seconds)
        lines.append("one step's kernels by ncu (%d launches), against the replay's step%s:" % (
            len(kernels), " of micro-batch " + batch if batch else ""))
        for kind in ("GEMMs", "attention", "the rest"):
            lines.append("  %-10s %8.2f ms  %5.1f%%" % (kind, 1e3 * totals.get(kind, 0.0),
                                                       100 * totals.get(kind, 0.0) / wall))
        if step:
            lines.append("  %-10s %8.2f ms  %5.1f%%  (step %.2f ms measured without ncu)" % (
                "host gaps", 1e3 * max(step - kernel_seconds, 0),
                100 * max(step - kernel_seconds, 0) / wall, 1e3 * step))
        top = {}
        for name, seconds in kernels:
            top[name] = top.get(name, 0.0) + seconds
        for name, seconds in sorted(top.items(), key=lambda item: -item[1])[:6]:
            lines.append("    %7.2f ms  %s" % (1e3 * seconds, name[:70]))
        if "nan" in replay_log.lower():
            lines.append("  (the profiled replay printed a NaN: see breakdown/ncu_replay.log)")
    else:
        lines.append("time breakdown: " + ((read(os.path.join(folder, "ncu.txt")) or
                                            "no ncu figures").strip()))
    ours = load_json(os.path.join(folder, "attention_paraplan.json"))
    torch = load_json(os.path.join(folder, "attention_torch.json"))
    rows = []
    if ours:
        rows.append(("paraplan", ours))
    if torch and "backends" in torch:
        for name, figures in torch["backends"].items():
            rows.append(("torch " + name, figures))
    shape = ours or (torch or {}).get("shape") or {}
    lines.append("attention forward + backward, B %s T %s H %s D %s (ms, TFLOP/s):" % (
        shape.get("batch"), shape.get("seq"), shape.get("heads"), shape.get("head_dim")))
    for label, figures in rows:
        if "unavailable" in figures:
            lines.append("  %-26s unavailable: %s" % (label, figures["unavailable"]))
            continue
        lines.append("  %-26s fwd %7s  bwd %7s  fwd+bwd %7s  %6s TFLOP/s" % (
            label, fmt(figures.get("forward_ms"), ".3f"), fmt(figures.get("backward_ms"), ".3f"),
            fmt(figures.get("forward_backward_ms"), ".3f"),
            fmt(figures.get("forward_backward_tflops"), ".1f")))
    if ours and ours.get("implementation"):
        lines.append("  paraplan's kernels: %s" % ours["implementation"])
    if torch and "unavailable" in torch:
        lines.append("  torch: unavailable: %s" % torch["unavailable"])
    if not rows and not (torch and "unavailable" in torch):
        lines.append("  not run")
    return lines


def main(argv):
    if len(argv) >= 3 and argv[1] == "--compare-losses":
        return compare_losses(argv[2], argv[3:])
    if len(argv) != 2:
        sys.exit(__doc__)
    work = argv[1]
    print("=" * 78)
    print("device check summary")
    for section in (states_section(work), facts(work), tests(work), sanitizer(work), losses(work),
                    bench(work), llama(work), replay_accuracy(work), breakdown(work)):
        print("-" * 78)
        print("\n".join(line for line in section if line is not None))
    print("=" * 78)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
