#!/usr/bin/env python3
"""replay_accuracy_table_test.py: the accuracy table's arithmetic on reports
made up here (ctest runs it as ReplayAccuracyTable.*): the error is the median
over rounds of each round's error, components under 5% of the step are left
out of the summary, and the second replays give the step's and each
component's noise."""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "replay_accuracy_table.py")


def report(step, forward, tensor_parallel, optimizer, predicted_step=0.100):
    """A one-stage replay report: predicted forward 0.050 s, tensor-parallel 0.010 s, optimizer 0.001 s."""
    def part(p, m):
        return {"predicted": p, "measured": m, "error": (m - p) / p}
    return {
        "step_seconds": part(predicted_step, step),
        "each_step_seconds_measured": [step] * 3,
        "num_micro_batches": 4,
        "peak_memory_bytes": {"predicted": 2.0**20, "measured": 2.0**19},
        "memory_within_prediction": True,
        "stages": [{"stage": 0, "per_step": {"forward": part(0.050, forward),
                                             "tensor_parallel": part(0.010, tensor_parallel),
                                             "optimizer": part(0.001, optimizer)}}],
    }


class ReplayAccuracyTable(unittest.TestCase):
    def table(self, named_reports):
        with tempfile.TemporaryDirectory() as directory:
            arguments = []
            for i, (name, content) in enumerate(named_reports):
                path = os.path.join(directory, "%d.json" % i)
                with open(path, "w") as f:
                    json.dump(content, f)
                arguments.append("%s=%s" % (name, path))
            return subprocess.run([sys.executable, TABLE] + arguments, check=True,
                                  capture_output=True, text=True).stdout

    def summary(self, output, component):
        line = next(l for l in output.splitlines() if l.startswith("summary %s " % component))
        numbers = [float(x) for x in re.findall(r"(-?\d+\.\d+)%", line)]
        return line, numbers

    def test_errors_are_medians_over_rounds_and_noise_is_per_component(self):
        # Three rounds: steps +10%, -5%, +20% (median +10%); forward +4%, +8%, +2%
        # (median +4%); tensor-parallel +30% each round; the optimizer is 1% of
        # the step and not summarized. Each second replay differs by 2% on the
        # step and 40% on the tensor-parallel transfers.
        rounds = [(0.110, 0.052), (0.095, 0.054), (0.120, 0.051)]
        named = []
        for step, forward in rounds:
            named.append(("tp2", report(step, forward, 0.013, 0.001)))
            named.append(("tp2@again", report(step * 1.02, forward, 0.013 * 1.4, 0.001)))
        output = self.table(named)
        line, numbers = self.summary(output, "step")
        self.assertAlmostEqual(numbers[0], 10.0, places=1, msg=line)  # mean |error|
        self.assertIn("over 5%: 1", line)
        _, numbers = self.summary(output, "forward")
        self.assertAlmostEqual(numbers[0], 4.0, places=1)
        line, numbers = self.summary(output, "tensor_parallel")
        self.assertAlmostEqual(numbers[0], 30.0, places=1, msg=line)
        self.assertIn("over 15%: 1", line)
        self.assertAlmostEqual(numbers[-2], 40.0, places=1, msg=line)  # noise mean
        self.assertFalse(any(l.startswith("summary optimizer") for l in output.splitlines()))
        noise = next(l for l in output.splitlines() if l.startswith("machine noise"))
        self.assertIn("differs by 2.0%", noise)

    def test_without_second_replays_no_noise_is_claimed(self):
        output = self.table([("dp2", report(0.101, 0.050, 0.010, 0.001))])
        line, numbers = self.summary(output, "step")
        self.assertAlmostEqual(numbers[0], 1.0, places=1)
        self.assertNotIn("noise", line)
        self.assertFalse(any(l.startswith("machine noise") for l in output.splitlines()))


if __name__ == "__main__":
    unittest.main()
