"""device_states.py: each phase's state and the verdict of scripts/device_check.sh,
and the summary table's first section that gives them (states_section).

Judged from the files each phase left in the check's work folder and from
progress.txt, never from an exit status alone: judge_<phase> gives a phase's
state and its measurements' states (the sanitizer's runs, the bench's and
breakdown's measurements; a phase takes the worst of them), phase_states one
row per phase asked for (check.txt), verdict the line device_check.sh's exit
status follows. The states (ok, failed, flaky, timeout, absent, none ran, not
run) are described in device_summary.py's docstring and scripts/README.md.
Standard library only.
"""
import glob
import math
import os
import re

from device_readers import (GTEST_NONE_PASSED, NO_GPU, fmt, last_line, load_json, ncu_kernels,
                            read, records, test_outcomes)

# Worst first: a phase with several measurements takes the worst state among them.
SEVERITY = ("failed", "timeout", "not run", "none ran", "absent", "flaky", "ok")
# What a rehearsal (no GPU) may find absent: a phase, or a phase's measurement.
REHEARSAL_MAY_LACK = {"sanitizer", "bench/eager", "bench/compile", "llama/compile",
                      "breakdown/ncu", "breakdown/torch_attention"}
# What may be absent anywhere without holding its phase back: llm.c runs only
# where its binary was bundled (scripts/llmc_build.sh, device_bundle.sh); when
# it runs, it fails or passes like any measurement.
OPTIONAL = {"bench/llmc"}
TIMED_OUT = (124, 137)


def worst(states):
    return min(states, key=SEVERITY.index) if states else "ok"


def judge_facts(work):
    if read(os.path.join(work, "facts", "facts.txt")) is None:
        return "failed", "no facts.txt", []
    return "ok", "", []


def judge_tests(work, rehearsal):
    first = test_outcomes(work, "tests.log", "junit.xml")
    if first is None:
        return "failed", "no tests.log", []
    states, text, outputs = first
    if "No tests were found" in text and not states:
        return "none ran", "no test matched", []
    if not states:
        return "failed", "no test results in tests.log", []
    rerun = test_outcomes(work, "rerun.log", "junit-rerun.xml")
    rerun_states = rerun[0] if rerun else {}
    failures = [name for name, state in states.items() if state not in ("Passed", "Skipped")]
    failed = [name for name in failures if rerun_states.get(name) != "Passed"]
    if failed:
        skipped = sum(1 for name in failed if rerun_states.get(name) == "Skipped")
        return "failed", "%d failed%s" % (len(failed), " (%d of them skipped on the rerun)" % skipped
                                           if skipped else ""), []
    if failures:
        return "flaky", "%d failed and passed on the rerun" % len(failures), []
    passed = sum(1 for state in states.values() if state == "Passed")
    no_gpu = sum(1 for name, state in states.items()
                 if state == "Skipped" and NO_GPU.search(outputs.get(name, "")))
    if not passed:
        return "none ran", "all %d skipped" % len(states), []
    if no_gpu and not rehearsal:
        return "none ran", "%d skipped for want of a visible GPU" % no_gpu, []
    return "ok", "%d passed, %d skipped" % (passed, len(states) - passed), []


# "ERROR SUMMARY: 3 errors", "RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)"
SANITIZER_SUMMARY = re.compile(r"(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards?)")


def judge_sanitizer(work):
    folder = os.path.join(work, "sanitizer")
    text = read(os.path.join(folder, "results.txt"))
    if text is None:
        return "failed", "no results.txt", []
    absent = re.match(r"compute-sanitizer (?:absent|not run): (.*)", text.strip())
    if absent:
        return "absent", "compute-sanitizer: " + absent.group(1), []
    subs = []
    for line in text.splitlines():
        match = re.match(r"(\w+): (?:exit (\d+)|absent (.*))", line)
        if not match:
            continue
        name, rc, why = match.group(1), match.group(2), match.group(3)
        if rc is None:
            subs.append((name, "absent", why.strip("()")))
            continue
        rc = int(rc)
        report = (read(os.path.join(folder, name + ".log")) or "")
        output = read(os.path.join(folder, name + ".out")) or ""
        counts = [int(n) for n in SANITIZER_SUMMARY.findall(report)]
        if any(counts):
            state, note = "failed", "; ".join(
                re.sub(r"^=* *", "", l) for l in report.splitlines() if "SUMMARY:" in l)
        elif rc in TIMED_OUT:
            state, note = "timeout", line.split(": ", 1)[1]
        elif not counts:
            state, note = "failed", "exit %d, no summary line (the tool did not finish)" % rc
        elif rc != 0:
            state, note = "failed", "exit %d%s" % (rc, ": " + last_line(
                os.path.join(folder, name + ".out")) if output else "")
        elif GTEST_NONE_PASSED.search(output):
            state, note = "none ran", "no test passed under the tool" + (
                " (no CUDA device visible)" if NO_GPU.search(output) else "")
        else:
            state, note = "ok", "0 errors"
        subs.append((name, state, note))
    if not subs:
        return "failed", "no run recorded", []
    return worst([state for _, state, _ in subs]), "", subs


def judge_losses(work):
    results = load_json(os.path.join(work, "losses", "losses.json"))
    if results is None:
        return "failed", "no comparison written", []
    bad = ["%s %s" % (case, r.get("verdict")) for case, r in results.items()
           if r.get("verdict") != "ok"]
    if bad or not results:
        return "failed", ", ".join(bad) or "no case compared", []
    return "ok", "", []


BENCH_RUNS = (("paraplan", "tokens_per_second_measured", "each_step_loss"),
              ("eager", "tokens_per_second", "losses"),
              ("compile", "tokens_per_second", "losses"),
              ("llmc", "tokens_per_second", "losses"))
# How the table names a measurement (a sanitizer run by its own name).
LABELS = {"paraplan": "paraplan replay", "eager": "torch eager", "compile": "torch.compile",
          "llmc": "llm.c", "ncu": "ncu", "attention": "paraplan attention",
          "torch_attention": "torch attention", "ring_attention": "ring attention (cp)"}
NO_TORCH = re.compile(r"No module named '?torch|torch is not importable|no CUDA device visible|"
                      r"has no torch\.nn\.attention")


def finite(values):
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values or [])


# The planner against a replay (issue 47): the predicted step within 5% of the
# measured one; the predicted peak memory never below the measured peak and at
# most 10% above it. Off is a finding the table shows, not a failure of the phase.
STEP_TOLERANCE = 0.05
MEMORY_ABOVE = 0.10


def figure(report, name, flat):
    """(measured, predicted) of one of the replay report's comparisons
    ({"predicted", "measured", "error"}), else its flat NAME_measured and
    NAME_predicted fields; None for what the report lacks or gives as 0."""
    entry = report.get(name) if isinstance(report.get(name), dict) else {}
    values = []
    for side in ("measured", "predicted"):
        value = entry.get(side, report.get("%s_%s" % (flat, side)) if flat else None)
        values.append(value if isinstance(value, (int, float)) and math.isfinite(value) and
                      value > 0 else None)
    return tuple(values)


def step_accuracy(report):
    """The replay's step against the plan's: (measured s, predicted s,
    measured / predicted - 1 or None, verdict): "within 5%", "off: +7.3%" or
    "absent (no ...)" naming the field the report lacks."""
    measured, predicted = figure(report, "step_seconds", "step_seconds")
    if measured is None or predicted is None:
        return measured, predicted, None, "absent (no %s step_seconds in the report)" % (
            "measured" if measured is None else "predicted")
    error = measured / predicted - 1
    return measured, predicted, error, ("within 5%" if abs(error) <= STEP_TOLERANCE else
                                        "off: %+.1f%%" % (100 * error))


def peak_accuracy(report):
    """The replay's peak memory (the memory tracker's high-water) against the
    plan's: (measured bytes, predicted bytes, predicted / measured - 1 or None,
    verdict): "within 10% above", "below: -3.1%", "over: +14.2%" or "absent (...)"."""
    measured, predicted = figure(report, "peak_memory_bytes", None)
    if measured is None or predicted is None:
        return measured, predicted, None, "absent (no %s peak_memory_bytes in the report)" % (
            "measured" if measured is None else "predicted")
    above = predicted / measured - 1
    if above < 0:
        verdict = "below: %+.1f%%" % (100 * above)
    elif above > MEMORY_ABOVE:
        verdict = "over: %+.1f%%" % (100 * above)
    else:
        verdict = "within 10% above"
    return measured, predicted, above, verdict


def replay_findings(report):
    """[(text, off)] for a replay's step and peak: "step +1.9%" or "step off: +7.3%",
    "peak +4.0%" or "peak below: -3.1%" (the plan's peak against the measured);
    off when the planner missed its bound or the report lacks the figure."""
    found = []
    for name, (_, _, error, verdict) in (("step", step_accuracy(report)),
                                         ("peak", peak_accuracy(report))):
        within = verdict.startswith("within")
        found.append(("%s %+.1f%%" % (name, 100 * error) if within else
                      "%s %s" % (name, verdict.split(" (")[0]), not within))
    return found


PARAPLAN_JSON = re.compile(r"b(\d+)\.paraplan\.json$")


def phase_findings(work, phase):
    """["B=8 step off: +7.3%", ...]: the replays of a phase that missed the planner's bounds."""
    folder = os.path.join(work, phase)
    names = os.listdir(folder) if os.path.isdir(folder) else []
    found = []
    for b in sorted(int(m.group(1)) for m in map(PARAPLAN_JSON.match, names) if m):
        report = load_json(os.path.join(folder, "b%d.paraplan.json" % b))
        if report and report.get("tokens_per_second_measured") is not None:
            found += ["B=%d %s" % (b, text) for text, off in replay_findings(report) if off]
    return found


def judge_bench(work):
    """The bench's runs, and paraplan's replay again under each of SWITCHES
    (device_phases.sh bench_switches: switch_*/ with its own runs.txt), named
    "paraplan VAR=VALUE". A run whose CUDA graphs fell back to plain launches
    (graph_fallbacks) failed: its figures do not measure what it switched."""
    folder = os.path.join(work, "bench")
    _, note, subs = judge_runs(folder, BENCH_RUNS)
    for sub in sorted(glob.glob(os.path.join(folder, "switch_*"))):
        switch = (read(os.path.join(sub, "switch.txt")) or os.path.basename(sub)).strip()
        _, _, switch_subs = judge_runs(sub, BENCH_RUNS[:1])
        fell_back = graph_fallbacks(read(os.path.join(sub, "paraplan.log")) or "")
        for _, sub_state, sub_note in switch_subs:
            if fell_back:
                sub_state = worst([sub_state, "failed"])
                sub_note = (sub_note + "; " if sub_note else "") + fell_back
            subs.append(("paraplan " + switch, sub_state, sub_note))
    return worst([sub_state for _, sub_state, _ in subs]), note, subs


def graph_fallbacks(log):
    """What a run's log says of CUDA graphs that fell back to plain launches
    (kernels/cuda/cuda_graphs.cu: one line per key whose capture broke): how
    many, and the first; "" when none did."""
    lines = [line.strip() for line in log.splitlines() if "paraplan: CUDA graphs:" in line]
    if not lines:
        return ""
    return "CUDA graphs fell back %d time(s): %s" % (len(lines), lines[0])


# The llama phase's runs: paraplan's replay and torch.compile (samples/llama_1b/bench.sh).
LLAMA_RUNS = tuple(run for run in BENCH_RUNS if run[0] in ("paraplan", "compile"))


def judge_llama(work):
    return judge_runs(os.path.join(work, "llama"), LLAMA_RUNS)


def judge_runs(folder, runs):
    """The bench's and the llama phase's measurements: each run recorded in
    runs.txt ("NAME exit RC batches B..." or "NAME absent WHY") is ok only when
    it exited 0 and left a JSON with figures and finite losses for every
    micro-batch it was asked for. A replay's step or peak memory off the plan's
    is a finding in its note (replay_findings), not a failure."""
    found = records(os.path.join(folder, "runs.txt"))
    subs = []
    for mode, key, losses_key in runs:
        record = found.get(mode)
        if record is None:
            subs.append((mode, "not run", "no record (the phase ended first)"))
            continue
        kind, rc, rest = record
        if kind != "exit":
            subs.append((mode, kind, rest))
            continue
        batches = re.findall(r"\d+", rest.split("batches", 1)[1]) if "batches" in rest else []
        figures, missing, whys = [], [], []
        for b in batches:
            result = load_json(os.path.join(folder, "b%s.%s.json" % (b, mode))) or {}
            if result.get(key) is None:
                missing.append(b)
                # bench.sh names the run's log; its last line says why.
                why = last_line(os.path.join(folder, "b%s.%s.log" % (
                    b, "replay" if mode == "paraplan" else mode)))
                if mode == "paraplan" and not why:
                    why = last_line(os.path.join(folder, "b%s.plan.log" % b))
                whys.append(why)
            elif not finite(result.get(losses_key)):
                whys.append("B=%s: a non-finite loss" % b)
            else:
                figure = "B=%s %s tokens/s" % (b, fmt(result[key], ",.0f"))
                if mode == "paraplan":
                    figure += " (%s)" % ", ".join(text for text, _ in replay_findings(result))
                figures.append(figure)
                if mode == "llmc" and result.get("attention") and len(figures) == 1:
                    figures[0] += " (attention: %s)" % result["attention"]
        if rc in TIMED_OUT:
            state, note = "timeout", "ran past its limit"
        elif not batches:
            state, note = "failed", "no micro-batch recorded"
        elif missing and mode != "paraplan" and all(NO_TORCH.search(w) for w in whys):
            state, note = "absent", whys[0]
        elif missing or whys:
            state, note = "failed", "%s%s" % ("no figures for B=%s: " % ",".join(missing)
                                              if missing else "", whys[0] if whys else "")
        elif rc != 0:
            state, note = "failed", "exit %d" % rc
        else:
            state, note = "ok", ", ".join(figures)
        subs.append((mode, state, note))
    return worst([state for _, state, _ in subs]), "", subs


def judge_breakdown(work):
    folder = os.path.join(work, "breakdown")
    found = records(os.path.join(folder, "runs.txt"))
    subs = []
    for name in ("ncu", "attention", "torch_attention"):
        record = found.get(name)
        if record is None:
            subs.append((name, "not run", "no record (the phase ended first)"))
            continue
        kind, rc, rest = record
        if kind != "exit":
            subs.append((name, kind, rest))
            continue
        state, note = "ok", ""
        if rc in TIMED_OUT:
            state, note = "timeout", "ran past its limit"
        elif name == "ncu":
            kernels = ncu_kernels(os.path.join(folder, "ncu.csv"))
            if rc != 0 or not kernels:
                state, note = "failed", "exit %d, %d kernels: %s" % (
                    rc, len(kernels), last_line(os.path.join(folder, "ncu_replay.log")))
            else:
                note = "%d kernels" % len(kernels)
        elif name == "attention":
            result = load_json(os.path.join(folder, "attention_paraplan.json")) or {}
            if rc != 0 or result.get("forward_backward_ms") is None:
                state, note = "failed", "exit %d: %s" % (
                    rc, last_line(os.path.join(folder, "attention_paraplan.log")))
            elif result.get("output_nan_count"):
                state, note = "failed", "%d NaN outputs" % result["output_nan_count"]
            else:
                note = "fwd+bwd %s ms" % fmt(result["forward_backward_ms"], ".3f")
        else:
            result = load_json(os.path.join(folder, "attention_torch.json")) or {}
            measured = [backend for backend, figures in (result.get("backends") or {}).items()
                        if figures.get("forward_backward_ms") is not None]
            if rc != 0 or not result:
                state, note = "failed", "exit %d: %s" % (
                    rc, last_line(os.path.join(folder, "attention_torch.log")))
            elif "unavailable" in result:
                state = "absent" if NO_TORCH.search(result["unavailable"]) else "failed"
                note = result["unavailable"][:100]
            elif not measured:
                state, note = "failed", "no SDPA backend measured"
            else:
                note = "measured: " + ", ".join(measured)
        subs.append((name, state, note))
    ring = judge_ring_attention(folder, found.get("ring_attention"))
    if ring is not None:
        subs.append(ring)
    return worst([state for _, state, _ in subs]), "", subs


def judge_ring_attention(folder, record):
    """The context-parallel ring's blocks against the whole sequence
    (attention_block_bench): judged where a bundle ran it, else None (bundles
    before it have no record)."""
    if record is None:
        return None
    kind, rc, rest = record
    if kind != "exit":
        return ("ring_attention", kind, rest)
    lines = (read(os.path.join(folder, "ring_attention.log")) or "").strip().splitlines()
    line = lines[-1] if lines else ""
    if rc in TIMED_OUT:
        return ("ring_attention", "timeout", "ran past its limit")
    figures = re.search(r"speed-up [0-9.]+x of [0-9]+; work overhead [0-9.]+x", line)
    if rc != 0 or not figures:
        return ("ring_attention", "failed", "exit %d: %s" % (rc, line[:100]))
    return ("ring_attention", "ok", figures.group(0))


def check_file(work):
    text = read(os.path.join(work, "check.txt")) or ""
    mode = re.search(r"^mode: *(\S+)", text, re.MULTILINE)
    phases = re.search(r"^phases: *(.*)$", text, re.MULTILINE)
    return (mode.group(1) if mode else "device",
            phases.group(1).split() if phases else None)


def phase_states(work):
    """[(phase, state, seconds, note, [(measurement, state, note)])] for each
    phase asked for (check.txt; else each in progress.txt), and whether this
    was a rehearsal."""
    mode, asked = check_file(work)
    rehearsal = mode == "rehearsal"
    progress_lines = {}
    for line in (read(os.path.join(work, "progress.txt")) or "").splitlines():
        parts = line.split(" ", 3)
        if len(parts) >= 3:
            progress_lines[parts[0]] = (parts[1], parts[2], parts[3] if len(parts) > 3 else "")
    names = asked if asked is not None else list(progress_lines)
    names += [name for name in progress_lines if name not in names]
    judges = {"facts": lambda: judge_facts(work), "tests": lambda: judge_tests(work, rehearsal),
              "sanitizer": lambda: judge_sanitizer(work), "losses": lambda: judge_losses(work),
              "bench": lambda: judge_bench(work), "llama": lambda: judge_llama(work),
              "breakdown": lambda: judge_breakdown(work)}
    rows = []
    for name in names:
        if name not in progress_lines:
            rows.append((name, "not run", "-", "did not finish (the check ended first)", []))
            continue
        outcome, seconds, rest = progress_lines[name]
        if outcome == "skipped":
            rows.append((name, "not run", seconds, rest, []))
            continue
        rc = re.search(r"exit (\d+)", rest)
        rc = int(rc.group(1)) if rc else None
        state, note, subs = judges[name]() if name in judges else ("failed", "unknown phase", [])
        if subs:
            # What a rehearsal cannot have (no GPU), and an optional peer, do not
            # hold their phase back.
            may_lack = OPTIONAL | (REHEARSAL_MAY_LACK if rehearsal else set())
            state = worst([s for sub, s, _ in subs
                           if not (s == "absent" and "%s/%s" % (name, sub) in may_lack)])
        if outcome == "timeout" or rc in TIMED_OUT:
            state, note = "timeout", "ran past the phase's limit" + ("; " + note if note else "")
        elif state == "ok" and rc not in (0, None):
            # Its files look fine but the phase said otherwise.
            state, note = "failed", "the phase exited %d" % rc
        rows.append((name, state, seconds, rest + (": " + note if note else ""), subs))
    return rows, rehearsal


def verdict(rows, rehearsal):
    """("ok" or "not ok", what held it back or what a rehearsal lacked)."""
    if not rows:
        return "not ok", "no phase ran"
    bad, lacked = [], []
    for name, state, _, _, subs in rows:
        if state == "ok":
            lacked += [LABELS.get(sub, sub) for sub, s, _ in subs if s == "absent"]
        elif rehearsal and state == "absent" and name in REHEARSAL_MAY_LACK:
            lacked.append(name)
        else:
            bad.append("%s %s" % (name, state))
    if bad:
        return "not ok", ", ".join(bad)
    if not lacked:
        return "ok", ""
    return "ok", ("a rehearsal; absent as expected without a GPU: " if rehearsal else
                  "absent, optional: ") + ", ".join(lacked)


def states_section(work):
    rows, rehearsal = phase_states(work)
    lines = ["phases (state, seconds; %s):" % ("a rehearsal on the CPU" if rehearsal else
                                               "on the device")] if rows else \
        ["phases: none finished"]
    for name, state, seconds, note, subs in rows:
        lines.append("  %-10s %-9s %5s s  %s" % (name, state, seconds, note))
        for sub, sub_state, sub_note in subs:
            lines.append("      %-20s %-9s %s" % (LABELS.get(sub, sub), sub_state, sub_note))
    result, why = verdict(rows, rehearsal)
    lines.append("verdict: %s%s" % (result, " (%s)" % why if why else ""))
    # The planner's misses: figures the check exists to give, not failures.
    findings = ["%s %s" % (name, finding) for name, _, _, _, _ in rows
                if name in ("bench", "llama") for finding in phase_findings(work, name)]
    if findings:
        lines.append("planner off its bounds (findings, not failures; step within 5%%, peak "
                     "never below and at most 10%% above): %s" % "; ".join(findings))
    return lines
