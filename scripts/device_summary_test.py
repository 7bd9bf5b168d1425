#!/usr/bin/env python3
"""device_summary_test.py: device_summary.py on made-up phase outputs of the
kinds only a GPU window produces (ncu's CSV, failing and crashing ctest lines,
a rerun, measured comparisons in JUnit, device losses that drift or go NaN),
so a parsing slip shows here and not in the window; and, given a rehearsal's
work folder (--rehearsal DIR), that every section of its table has figures.
Each phase's state and the verdict: device_states_test.py (from fixtures) and
device_phases_test.py (from the phase functions run with made-up tools).

Usage: device_summary_test.py [--rehearsal OUT_DIR]  (OUT_DIR: the rehearsal's
results folder, whose *.tar.gz archives are unpacked and summarized again)
"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_summary  # noqa: E402
from device_test_fixtures import NCCL_CRASH_LOG, NCU_CSV, write  # noqa: E402

if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "--rehearsal":
    os.environ["PARAPLAN_REHEARSAL_OUT"] = sys.argv[2]
    del sys.argv[1:3]

CTEST_LOG = """\
      Start  1: Storage/CudaOps.FactoryAndMemoryRoundTrip/float32
 1/5 Test  #1: Storage/CudaOps.FactoryAndMemoryRoundTrip/float32 ...   Passed    0.51 sec
 2/5 Test  #2: Storage/CudaAttention.Forward/bfloat16 ..........***Failed    1.20 sec
 3/5 Test  #3: Storage/CudaOps.Gelu/bfloat16 ...................***Exception: SegFault  0.30 sec
 4/5 Test  #4: NcclCommunicator.ranks_2 ........................***Skipped   0.40 sec
 5/5 Test  #5: ParallelTraining.CudaBfloat16MatchesTheCpuBfloat16Run ***Timeout  60.01 sec
"""
RERUN_LOG = """\
1/3 Test  #2: Storage/CudaAttention.Forward/bfloat16 ..........***Failed    1.30 sec
2/3 Test  #3: Storage/CudaOps.Gelu/bfloat16 ...................***Exception: SegFault  0.31 sec
3/3 Test  #5: ParallelTraining.CudaBfloat16MatchesTheCpuBfloat16Run ***Timeout  60.00 sec
"""
JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="Linux" tests="2">
 <testcase name="Storage/CudaAttention.Forward/bfloat16" classname="x" time="1.2" status="fail">
  <system-out>[ compare ] attention output: max rel err 4.0e-02 (tolerance 2e-02), 17 of 4096
outside
[ compare ] lse: max rel err 1.0e-06 (tolerance 2e-05), 0 of 64 outside</system-out>
 </testcase>
</testsuite>
"""


class MadeUpWindow(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp()

    def test_tests_name_failures_crashes_timeouts_and_the_rerun(self):
        write(os.path.join(self.work, "tests", "tests.log"), CTEST_LOG)
        write(os.path.join(self.work, "tests", "rerun.log"), RERUN_LOG)
        write(os.path.join(self.work, "tests", "junit.xml"), JUNIT)
        text = "\n".join(device_summary.tests(self.work))
        self.assertIn("tests: 5 run: 1 crashed, 1 failed, 1 passed, 1 skipped, 1 timeout", text)
        self.assertIn("failed    Storage/CudaAttention.Forward/bfloat16  (rerun with "
                      "CUDA_LAUNCH_BLOCKING=1: failed)", text)
        self.assertIn("exception: segfault Storage/CudaOps.Gelu/bfloat16", text)
        self.assertIn("timeout   ParallelTraining.CudaBfloat16MatchesTheCpuBfloat16Run", text)
        self.assertIn("comparisons measured: 2", text)
        self.assertIn(" 2.00  Storage/CudaAttention.Forward/bfloat16: attention output", text)

    def test_a_failure_that_skips_on_its_rerun_is_failed_and_quoted(self):
        # The 2-rank NCCL test on one GPU: its rerun skips, which proves nothing
        # (this was counted flaky, and the check passed).
        write(os.path.join(self.work, "tests", "tests.log"), NCCL_CRASH_LOG)
        write(os.path.join(self.work, "tests", "rerun.log"),
              "1/1 Test  #4: NcclCommunicator.ranks_2 .......***Skipped   0.40 sec\n")
        text = "\n".join(device_summary.tests(self.work))
        self.assertIn("failed    NcclCommunicator.ranks_2  (rerun with CUDA_LAUNCH_BLOCKING=1: "
                      "skipped)", text)
        self.assertIn("      | [rank 1] runtime/comm/x.cc:12: failure", text)
        self.assertIn("      | mpiexec noticed that process rank 1 exited on signal 11", text)
        self.assertNotIn("NCCL tests skipped", text)

    def test_a_failure_that_passes_alone_is_flaky_and_quoted(self):
        write(os.path.join(self.work, "tests", "tests.log"), NCCL_CRASH_LOG)
        write(os.path.join(self.work, "tests", "rerun.log"),
              "1/1 Test  #4: NcclCommunicator.ranks_2 .......   Passed    0.40 sec\n")
        text = "\n".join(device_summary.tests(self.work))
        self.assertIn("flaky     NcclCommunicator.ranks_2  (rerun with CUDA_LAUNCH_BLOCKING=1: "
                      "passed)", text)
        self.assertIn("      | [rank 1] runtime/comm/x.cc:12: failure", text)

    def test_ncu_kernels_by_kind_and_host_gaps(self):
        write(os.path.join(self.work, "breakdown", "ncu.csv"), NCU_CSV)
        write(os.path.join(self.work, "breakdown", "batch.txt"), "8\n")
        write(os.path.join(self.work, "bench", "b4.paraplan.json"),
              json.dumps({"step_seconds_measured": 0.003}))
        write(os.path.join(self.work, "bench", "b8.paraplan.json"),
              json.dumps({"step_seconds_measured": 0.005}))
        kernels = device_summary.ncu_kernels(os.path.join(self.work, "breakdown", "ncu.csv"))
        self.assertEqual([round(s * 1e6) for _, s in kernels], [2000, 1000, 500])
        text = "\n".join(device_summary.breakdown(self.work))
        self.assertIn("GEMMs          2.00 ms   40.0%", text)
        self.assertIn("attention      1.00 ms   20.0%", text)
        self.assertIn("the rest       0.50 ms   10.0%", text)
        self.assertIn("host gaps      1.50 ms   30.0%", text)

    def test_losses_compare_within_and_beyond_tolerance(self):
        folder = os.path.join(self.work, "losses")
        steps = [10.9, 10.5, 10.1]
        write(os.path.join(folder, "a.cpu.jsonl"), "".join(
            json.dumps({"loss": v}) + "\n" for v in steps))
        write(os.path.join(folder, "a.device.jsonl"), "".join(
            json.dumps({"loss": v + 1e-3}) + "\n" for v in steps))
        write(os.path.join(folder, "b.cpu.jsonl"), "".join(
            json.dumps({"loss": v}) + "\n" for v in steps))
        write(os.path.join(folder, "b.device.jsonl"), "".join(
            json.dumps({"loss": v}) + "\n" for v in (10.9, None, None)))  # NaN is null in JSON
        self.assertEqual(device_summary.compare_losses(folder, ["a"]), 0)
        self.assertEqual(device_summary.compare_losses(folder, ["a", "b"]), 1)
        with open(os.path.join(folder, "losses.json")) as f:
            results = json.load(f)
        self.assertAlmostEqual(results["a"]["max_abs_diff"], 1e-3, places=9)
        self.assertEqual(results["b"]["verdict"], "non-finite device loss")

    def test_each_switch_against_the_default(self):
        bench = os.path.join(self.work, "bench")
        write(os.path.join(bench, "b8.paraplan.json"),
              json.dumps({"tokens_per_second_measured": 300000.0}))
        switch = os.path.join(bench, "switch_PARAPLAN_CUDA_OVERLAP_0")
        write(os.path.join(switch, "switch.txt"), "PARAPLAN_CUDA_OVERLAP=0\n")
        write(os.path.join(switch, "b8.paraplan.json"),
              json.dumps({"tokens_per_second_measured": 240000.0}))
        self.assertEqual(device_summary.switches(bench), [
            "before/after, paraplan's replay (the default against each switch):",
            "  B=8 with PARAPLAN_CUDA_OVERLAP=0: 240,000 tokens/s; the default 300,000 (1.250x)"])
        self.assertIn("  B=8 with PARAPLAN_CUDA_OVERLAP=0: 240,000 tokens/s; the default 300,000 "
                      "(1.250x)", device_summary.bench(self.work))

    def test_a_phase_not_run_says_so(self):
        for section in (device_summary.tests, device_summary.sanitizer, device_summary.losses,
                        device_summary.bench, device_summary.llama, device_summary.breakdown):
            self.assertIn("not run", "\n".join(section(self.work)))
        self.assertIn("no replay ran", "\n".join(device_summary.replay_accuracy(self.work)))

    def test_replays_of_both_models_against_their_plans(self):
        # The GPT-2 bench's replay within bounds; the Llama's at two micro-batches,
        # one off in step and one predicting less memory than measured; one that failed.
        def replay(b, measured_ms, predicted_ms, measured_gib, predicted_gib, tps):
            return json.dumps({"tokens_per_second_measured": tps, "each_step_loss": [11.0, 10.9],
                               "micro_batch_size": b, "num_micro_batches": 8 // b,
                               "mfu": {"measured": 0.45},
                               "step_seconds": {"measured": measured_ms / 1e3,
                                                "predicted": predicted_ms / 1e3},
                               "peak_memory_bytes": {"measured": measured_gib * 2**30,
                                                     "predicted": predicted_gib * 2**30}})
        write(os.path.join(self.work, "bench", "b8.paraplan.json"),
              replay(8, 101.0, 100.0, 10.0, 10.5, 80000))
        write(os.path.join(self.work, "llama", "b2.paraplan.json"),
              replay(2, 290.0, 270.0, 30.0, 31.0, 56500))
        write(os.path.join(self.work, "llama", "b4.paraplan.json"),
              replay(4, 272.0, 270.0, 36.0, 35.0, 60200))
        write(os.path.join(self.work, "llama", "b8.pplan"), "")
        write(os.path.join(self.work, "llama", "b8.replay.log"), "out of device memory\n")
        write(os.path.join(self.work, "llama", "paraplan.log"),
              "paraplan replay failed for B=8: see out/b8.replay.log\n")
        write(os.path.join(self.work, "llama", "b2.compile.json"), json.dumps(
            {"tokens_per_second": 50000.0, "mfu": 0.41, "peak_memory_gib": 40.2,
             "global_batch_size": 8, "losses": [11.0, 10.9]}))
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertRegex(text, r"GPT-2 124M +B=8 +step +101\.00 ms measured +100\.00 predicted "
                         r"+x1\.010 +within 5%\n +peak +10\.00 GiB measured +10\.50 predicted "
                         r"+within 10% above")
        self.assertRegex(text, r"Llama-3.2-1B shape +B=2 +step +290\.00 ms measured +270\.00 "
                         r"predicted +x1\.074 +off: \+7\.4%")
        self.assertRegex(text, r"peak +36\.00 GiB measured +35\.00 predicted +below: -2\.8%")
        self.assertIn("B=8   no replay report (b8.paraplan.json)", text)
        text = "\n".join(device_summary.llama(self.work))
        self.assertRegex(text, r"\n +2 +56,500 +45\.0 +30\.0 +50,000 +41\.0 +40\.2 +1\.13\n")
        self.assertRegex(text, r"\n +8 +- +- +- +- +- +- +-\n")
        self.assertIn("B=2 losses: paraplan 11.000 10.900 | compile 11.000 10.900", text)
        self.assertIn("paraplan replay failed for B=8: out of device memory", text)


@unittest.skipUnless(os.environ.get("PARAPLAN_REHEARSAL_OUT"), "no rehearsal given")
class Rehearsal(unittest.TestCase):
    """The rehearsal on the CPU: every phase ran and the table has its figures."""

    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        out = os.environ["PARAPLAN_REHEARSAL_OUT"]
        for name in ("facts", "tests", "sanitizer", "losses", "bench", "llama", "breakdown"):
            with tarfile.open(os.path.join(out, name + ".tar.gz")) as archive:
                archive.extractall(cls.work)
        with open(os.path.join(out, "summary.txt")) as f:
            cls.summary = f.read()

    def test_each_section_has_figures(self):
        text = self.summary
        for phase in ("facts", "tests", "losses", "bench", "llama", "breakdown"):
            self.assertRegex(text, r"\n  %s +ok " % phase)
        # No GPU: compute-sanitizer is absent, and a rehearsal may lack it.
        self.assertRegex(text, r"\n  sanitizer +absent ")
        self.assertRegex(text, r"\n      paraplan replay +ok ")
        self.assertRegex(text, r"\n      paraplan attention +ok ")
        self.assertRegex(text, r"\nverdict: ok")
        self.assertIn("ldd_missing: 0", text)
        self.assertRegex(text, r"tests: \d+ run: ")
        self.assertRegex(text, r"gpt2 +ok +max \|diff\| 0\.00e\+00")
        self.assertRegex(text, r"llama +ok +max \|diff\| 0\.00e\+00")
        self.assertRegex(text, r"\n +2 +[\d,]+ +[\d.]+ ")  # the bench row of micro-batch 2
        self.assertRegex(text, r"B=2 losses: paraplan \d+\.\d{3} \d+\.\d{3} \d+\.\d{3}")
        self.assertRegex(text, r"paraplan +fwd +\d+\.\d{3} +bwd +\d+\.\d{3}")
        # The Llama's replay on the CPU backend (torch.compile absent: no GPU), and every
        # replay's step and peak against its plan's, with figures (a rehearsal's are far off).
        self.assertRegex(text, r"Llama-3.2-1B shape \(samples/llama_1b\), global batch 8 ")
        self.assertRegex(text, r"\n +2 +[\d,]+ +[\d.]+ +[\d.]+ +- +- +- +-\n")
        self.assertRegex(text, r"\n      torch.compile +absent ")
        self.assertRegex(text, r"GPT-2 124M +B=2 +step +[\d.]+ ms measured +[\d.]+ predicted "
                         r"+x[\d.]+ ")
        self.assertRegex(text, r"Llama-3.2-1B shape +B=2 +step +[\d.]+ ms measured +[\d.]+ "
                         r"predicted +x[\d.]+ ")
        self.assertRegex(text, r"\n +peak +[\d.]+ MiB measured +[\d.]+ predicted ")

    def test_the_summary_is_what_the_archives_give(self):
        again = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                             "device_summary.py"), self.work],
                               capture_output=True, text=True, check=True).stdout
        # The archives hold everything but progress.txt, which the table's first section reads.
        self.assertEqual(again.split("facts:", 1)[1], self.summary.split("facts:", 1)[1])


if __name__ == "__main__":
    unittest.main()
