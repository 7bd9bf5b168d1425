#!/usr/bin/env python3
"""replay_accuracy_table.py: the accuracy table of replay_accuracy.sh.

Arguments: name=report.json ... (paraplan replay --report files). Prints, per
plan and stage, every component per step (predicted, measured, error, share of
the measured step), the step and peak memory, then one summary line per
component: mean and worst absolute error over the components that are at
least 5% of their plan's measured step (the issue's target: step within 5%,
those components within 15%).

Reports written by `paraplan replay` since the wait attribution carry a
"per_step" object per stage; older ones name forward, backward and
tensor_parallel per micro-batch and "pipeline_and_bubble" for the rest, which
this turns into per-step figures the same way.
"""
import json
import sys

PER_MICRO_BATCH = ("forward", "backward", "tensor_parallel")
MIN_SHARE = 0.05


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


def main():
    summary = {}  # component -> list of |error|
    print("%-12s %-5s %-22s %10s %10s %8s %6s" % ("plan", "stage", "component", "pred ms",
                                                  "meas ms", "error", "share"))
    for argument in sys.argv[1:]:
        name, path = argument.split("=", 1)
        report = json.load(open(path))
        m = report["num_micro_batches"]
        step = report["step_seconds"]
        for stage in report["stages"]:
            for component, value in per_step_components(stage, m).items():
                p, s = value["predicted"], value["measured"]
                share = s / step["measured"] if step["measured"] > 0 else 0
                e = error(p, s)
                counted = share >= MIN_SHARE or (p / step["measured"] >= MIN_SHARE)
                if counted and e is not None:
                    summary.setdefault(component, []).append((abs(e), name))
                elif counted and e is None and s > 1e-9:
                    summary.setdefault(component, []).append((float("inf"), name))
                print("%-12s %-5s %-22s %10.3f %10.3f %8s %5.1f%%%s" % (
                    name, stage["stage"], component, 1e3 * p, 1e3 * s,
                    "-" if e is None else "%+.1f%%" % (100 * e), 100 * share,
                    "" if counted else "  (< 5%)"))
        e = error(step["predicted"], step["measured"])
        summary.setdefault("step", []).append((abs(e), name))
        memory = report["peak_memory_bytes"]
        print("%-12s %-5s %-22s %10.3f %10.3f %+7.1f%%" % (name, "all", "step", 1e3 * step["predicted"],
                                                         1e3 * step["measured"], 100 * e))
        print("%-12s %-5s %-22s %8.2f MiB %6.2f MiB  %s" % (
            name, "all", "peak memory", memory["predicted"] / 2**20, memory["measured"] / 2**20,
            "within prediction" if report["memory_within_prediction"] else "ABOVE PREDICTION"))
    print()
    for component in ["step"] + sorted(k for k in summary if k != "step"):
        errors = summary[component]
        worst = max(errors)
        mean = sum(e for e, _ in errors) / len(errors)
        target = 0.05 if component == "step" else 0.15
        misses = sum(1 for e, _ in errors if e > target)
        print("summary %-22s n=%-3d mean |error| %6.1f%%  worst %6.1f%% (%s)  over %.0f%%: %d" % (
            component, len(errors), 100 * mean, 100 * worst[0], worst[1], 100 * target, misses))


if __name__ == "__main__":
    main()
