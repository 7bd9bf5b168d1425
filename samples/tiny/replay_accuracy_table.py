#!/usr/bin/env python3
"""replay_accuracy_table.py: the accuracy table of replay_accuracy.sh.

Arguments: name=report.json ... (paraplan replay --report files); a name given
more than once is one plan measured in several rounds (a fresh profile and a
replay each). Prints, per plan and stage, every component per step: predicted
and measured (medians over the rounds), the error (the median over the rounds
of each round's own predicted-against-measured error, so that the machine's
speed drifting between rounds cancels) with its range over the rounds, and
the share of the measured step; then the step and peak memory; then one
summary line per component: mean and worst of the plans' median absolute
errors over the components that are at least 5% of their plan's measured
step (the issue's target: step within 5%, those components within 15%).

Reports that list each measured step ("each_step_seconds_measured", since
paraplan replay writes it) also give the step as the median of the steps: on
a shared machine one step slowed by another tenant moves a mean of five
steps by a fifth of its delay and the median not at all; both are printed
and summarized, the mean first (what a user's throughput is).

A name given as NAME@again is a second replay of the round's plan right after
the first, with no new profile: its step against the first one's is this
machine's own noise (the error a perfect model would still show), printed
per plan and summarized in the last line; each component's replay-to-replay
difference is summarized too, on its summary line ("noise"): a component
whose error is within its noise is as close as this machine lets a
prediction come (on the VM it was written on, a tensor-parallel transfer's
time doubles for seconds at a time; see samples/README.md).

Reports written by `paraplan replay` since the wait attribution carry a
"per_step" object per stage; older ones name forward, backward and
tensor_parallel per micro-batch and "pipeline_and_bubble" for the rest, which
this turns into per-step figures the same way.
"""
import json
import statistics
import sys

PER_MICRO_BATCH = ("forward", "backward", "tensor_parallel")
MIN_SHARE = 0.05
STEP_ROWS = ("step", "median of steps")  # the step as the mean and as the median of the steps


def per_step_components(stage, micro_batches):
    if "per_step" in stage:
        return stage["per_step"]
    parts = {}
    for key, value in stage.items():
        if not isinstance(value, dict) or "predicted" not in value or key == "memory_bytes":
            continue
        scale = micro_batches if key in PER_MICRO_BATCH else 1
        parts[key] = {"predicted": value["predicted"] * scale, "measured": value["measured"] * scale}
    return parts


def error(predicted, measured):
    return (measured - predicted) / predicted if predicted > 1e-12 else None


def rows_of(report):
    """(stage, component) -> (predicted, measured, each's share of the measured step)."""
    step = report["step_seconds"]
    rows = {}
    for stage in report["stages"]:
        for component, value in per_step_components(stage, report["num_micro_batches"]).items():
            p, s = value["predicted"], value["measured"]
            measured_step = max(step["measured"], 1e-12)
            rows[(str(stage["stage"]), component)] = (p, s, s / measured_step, p / measured_step)
    rows[("all", "step")] = (step["predicted"], step["measured"], 1.0, 1.0)
    each = report.get("each_step_seconds_measured")
    if each:
        rows[("all", "median of steps")] = (step["predicted"], statistics.median(each), 1.0, 1.0)
    return rows


def replayed_again_differences(runs, again_runs, key):
    """Each round's second replay of `key` against its first (rows_of of each): b / a - 1."""
    differences = []
    for first, second in zip(runs, again_runs):
        a, b = first.get(key), second.get(key)
        if a and b and a[1] > 1e-9:
            differences.append(b[1] / a[1] - 1)
    return differences


def describe(errors):
    """The median error and, over several rounds, its range."""
    known = [e for e in errors if e is not None]
    if not known:
        return None, "-"
    median = statistics.median(known)
    text = "%+.1f%%" % (100 * median)
    if len(known) > 1:
        text += " [%+.0f..%+.0f]" % (100 * min(known), 100 * max(known))
    return median, text


def main():
    plans = {}  # name -> list of reports, in order of first appearance
    again = {}  # name -> its second replays, a round each
    for argument in sys.argv[1:]:
        name, path = argument.split("=", 1)
        if name.endswith("@again"):
            again.setdefault(name[: -len("@again")], []).append(json.load(open(path)))
        else:
            plans.setdefault(name, []).append(json.load(open(path)))
    noise = []  # (|median replay-to-replay difference|, plan)
    component_noise = {}  # component -> list of |median replay-to-replay difference|
    rounds = max(len(reports) for reports in plans.values()) if plans else 0
    summary = {}  # component -> list of (|median error|, plan)
    print("%d round(s); error: the median over rounds of each round's error [its range]" % rounds)
    print("%-12s %-5s %-20s %10s %10s %22s %6s" % ("plan", "stage", "component", "pred ms", "meas ms",
                                                  "error", "share"))
    for name, reports in plans.items():
        runs = [rows_of(report) for report in reports]
        again_runs = [rows_of(report) for report in again.get(name, [])]
        for key in runs[0]:
            values = [run[key] for run in runs if key in run]
            p = statistics.median(v[0] for v in values)
            s = statistics.median(v[1] for v in values)
            share = statistics.median(v[2] for v in values)
            predicted_share = statistics.median(v[3] for v in values)
            median, text = describe([error(v[0], v[1]) for v in values])
            stage, component = key
            if component in STEP_ROWS:
                summary.setdefault(component, []).append((abs(median), name))
                print("%-12s %-5s %-20s %10.3f %10.3f %22s" % (name, stage, component, 1e3 * p, 1e3 * s, text))
                if component == "step" and again_runs:
                    differences = replayed_again_differences(runs, again_runs, key)
                    _, text = describe(differences)
                    noise.append((statistics.median(abs(d) for d in differences), name))
                    seconds = statistics.median(run[key][1] for run in again_runs)
                    print("%-12s %-5s %-20s %10s %10.3f %22s" % (
                        name, stage, "step, replayed again", "", 1e3 * seconds, text))
                continue
            counted = share >= MIN_SHARE or predicted_share >= MIN_SHARE
            differences = replayed_again_differences(runs, again_runs, key)
            if counted and differences:
                component_noise.setdefault(component, []).append(
                    statistics.median(abs(d) for d in differences))
            if counted and median is not None:
                summary.setdefault(component, []).append((abs(median), name))
            elif counted and median is None and s > 1e-9:
                summary.setdefault(component, []).append((float("inf"), name))
            print("%-12s %-5s %-20s %10.3f %10.3f %22s %5.1f%%%s" % (
                name, stage, component, 1e3 * p, 1e3 * s, text, 100 * share,
                "" if counted else "  (< 5%)"))
        memory = [report["peak_memory_bytes"] for report in reports]
        within = all(report["memory_within_prediction"] for report in reports)
        print("%-12s %-5s %-20s %8.2f MiB %6.2f MiB  %s" % (
            name, "all", "peak memory", max(m["predicted"] for m in memory) / 2**20,
            max(m["measured"] for m in memory) / 2**20,
            "within prediction" if within else "ABOVE PREDICTION"))
    print()
    steps = [k for k in STEP_ROWS if k in summary]
    for component in steps + sorted(k for k in summary if k not in steps):
        errors = summary[component]
        worst = max(errors)
        mean = sum(e for e, _ in errors) / len(errors)
        target = 0.05 if component in steps else 0.15
        misses = sum(1 for e, _ in errors if e > target)
        line = "summary %-20s n=%-3d mean |error| %6.1f%%  worst %6.1f%% (%s)  over %.0f%%: %d" % (
            component, len(errors), 100 * mean, 100 * worst[0], worst[1], 100 * target, misses)
        if component_noise.get(component):
            line += "; noise mean %.1f%% worst %.1f%%" % (
                100 * statistics.mean(component_noise[component]), 100 * max(component_noise[component]))
        print(line)
    if noise:
        worst = max(noise)
        print("machine noise: the same plan's step replayed twice in a row differs by %.1f%% "
              "(mean over plans of each one's median |difference| over rounds), worst %.1f%% (%s)" % (
                  100 * sum(e for e, _ in noise) / len(noise), 100 * worst[0], worst[1]))


if __name__ == "__main__":
    main()
