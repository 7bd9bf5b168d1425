#!/usr/bin/env python3
"""device_states_test.py: each phase's state and the verdict (device_states.py)
for every way a phase can fail to pass, from fixtures as the phases write them
(tests.log and JUnit, the sanitizer's results.txt and reports, the bench's and
breakdown's runs.txt and figures, progress.txt, check.txt); and that
device_check.sh reads the state and the verdict as the table prints them.

Usage: device_states_test.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_states  # noqa: E402
import device_summary  # noqa: E402
from device_test_fixtures import (GTEST_PASSED, GTEST_SKIPPED_NO_GPU, NCCL_CRASH_LOG,  # noqa: E402
                                  NCU_CSV, REPO, ctest_line, junit, write)


class States(unittest.TestCase):
    """Each phase's state and the verdict: ok only for what ran and passed."""

    def setUp(self):
        self.work = tempfile.mkdtemp()

    def check(self, phases, mode="device"):
        write(os.path.join(self.work, "check.txt"), "mode: %s\nphases: %s\n" % (mode, phases))

    def progress(self, name, rc=0, outcome="ended", seconds=3):
        with open(os.path.join(self.work, "progress.txt"), "a") as f:
            f.write("%s %s %d exit %d (limit 100 s)\n" % (name, outcome, seconds, rc))

    def file(self, relative, text):
        write(os.path.join(self.work, relative), text)

    def state(self, phase):
        rows, _ = device_states.phase_states(self.work)
        return {name: state for name, state, _, _, _ in rows}[phase]

    def sub_states(self, phase):
        rows, _ = device_states.phase_states(self.work)
        return {sub: state for name, _, _, _, subs in rows if name == phase
                for sub, state, _ in subs}

    def verdict(self):
        return device_states.verdict(*device_states.phase_states(self.work))[0]

    def table(self):
        return "\n".join(device_states.states_section(self.work))

    # -- tests

    def given_tests(self, log, rc, rerun=None, junit_cases=None, mode="device"):
        self.check("tests", mode)
        self.file("tests/tests.log", log)
        if rerun is not None:
            self.file("tests/rerun.log", rerun)
        if junit_cases is not None:
            self.file("tests/junit.xml", junit(junit_cases))
        self.progress("tests", rc)

    def test_tests_that_pass_are_ok(self):
        self.given_tests(ctest_line(1, "CudaOps.A", "Passed") + ctest_line(2, "CudaOps.B", "Passed"),
                         0, junit_cases=[("CudaOps.A", "run", GTEST_PASSED)])
        self.assertEqual(self.state("tests"), "ok")
        self.assertEqual(self.verdict(), "ok")
        self.assertIn("verdict: ok", self.table())

    def test_tests_failed_then_skipped_on_the_rerun_is_failed(self):
        self.given_tests(NCCL_CRASH_LOG, 8, rerun=ctest_line(4, "NcclCommunicator.ranks_2",
                                                             "Skipped"))
        self.assertEqual(self.state("tests"), "failed")
        self.assertEqual(self.verdict(), "not ok")
        self.assertIn("1 failed (1 of them skipped on the rerun)", self.table())

    def test_tests_failed_then_gtest_skipped_on_the_rerun_is_failed(self):
        # A GTEST_SKIP exits 0: ctest says Passed; its output says it skipped.
        self.given_tests(ctest_line(3, "Storage/CudaOps.Gelu/bfloat16", "Exception: SegFault"), 8,
                         rerun=ctest_line(3, "Storage/CudaOps.Gelu/bfloat16", "Passed"))
        self.file("tests/junit-rerun.xml", junit([("Storage/CudaOps.Gelu/bfloat16", "run",
                                                   GTEST_SKIPPED_NO_GPU)]))
        self.assertEqual(self.state("tests"), "failed")

    def test_tests_failed_then_passed_is_flaky_and_not_ok(self):
        self.given_tests(NCCL_CRASH_LOG, 3, rerun=ctest_line(4, "NcclCommunicator.ranks_2",
                                                             "Passed"))
        self.assertEqual(self.state("tests"), "flaky")
        self.assertEqual(self.verdict(), "not ok")

    def test_tests_none_matched_is_none_ran(self):
        self.given_tests("Test project /b\nNo tests were found!!!\nErrors while running CTest\n", 8)
        self.assertEqual(self.state("tests"), "none ran")
        self.assertEqual(self.verdict(), "not ok")

    def test_tests_all_skipped_is_none_ran(self):
        self.given_tests(ctest_line(1, "NcclCommunicator.ranks_1", "Skipped") +
                         ctest_line(2, "Storage/CudaOps.GeluMatchesCpu/float32", "Passed"), 0,
                         junit_cases=[("Storage/CudaOps.GeluMatchesCpu/float32  # GetParam() = 4",
                                       "run", GTEST_SKIPPED_NO_GPU)])
        self.assertEqual(self.state("tests"), "none ran")
        self.assertIn("tests: 2 run: 2 skipped (1 skipped for want of a visible GPU)",
                      "\n".join(device_summary.tests(self.work)))

    def test_tests_skipped_for_want_of_a_gpu_is_none_ran_on_a_device_only(self):
        log = (ctest_line(1, "ChooseTransport.CpuRefusesNccl", "Passed") +
               ctest_line(2, "Storage/CudaOps.GeluMatchesCpu/float32", "Passed"))
        cases = [("ChooseTransport.CpuRefusesNccl", "run", GTEST_PASSED),
                 ("Storage/CudaOps.GeluMatchesCpu/float32", "run", GTEST_SKIPPED_NO_GPU)]
        self.given_tests(log, 0, junit_cases=cases)
        self.assertEqual(self.state("tests"), "none ran")
        self.assertIn("1 skipped for want of a visible GPU", self.table())
        self.check("tests", "rehearsal")
        self.assertEqual(self.state("tests"), "ok")
        self.assertEqual(self.verdict(), "ok")

    def test_tests_a_one_gpu_skip_of_the_2_rank_test_is_still_ok(self):
        log = ctest_line(1, "NcclCommunicator.ranks_1", "Passed") + ctest_line(
            2, "NcclCommunicator.ranks_2", "Skipped")
        self.given_tests(log, 0, junit_cases=[(
            "NcclCommunicator.ranks_2", "notrun",
            "NCCL tests skipped: needs a GPU per rank: 2 ranks but 1 GPU(s)\n")])
        self.assertEqual(self.state("tests"), "ok")

    def test_tests_no_results_with_a_failing_exit_is_failed(self):
        self.given_tests("Test project /b\nctest: cannot open the build folder\n", 1)
        self.assertEqual(self.state("tests"), "failed")

    # -- sanitizer

    def sanitizer_run(self, name, rc, report, out=GTEST_PASSED):
        self.file("sanitizer/%s.log" % name, report)
        self.file("sanitizer/%s.out" % name, out)
        with open(os.path.join(self.work, "sanitizer", "results.txt"), "a") as f:
            f.write("%s: exit %d (%s)\n" % (name, rc, report.strip().splitlines()[-1]
                                             if report.strip() else "no summary line"))

    def sanitizer_phase(self, runs, mode="device"):
        self.check("sanitizer", mode)
        os.makedirs(os.path.join(self.work, "sanitizer"), exist_ok=True)
        for run in runs:
            self.sanitizer_run(*run)
        self.progress("sanitizer", 0)

    def test_sanitizer_clean_runs_are_ok(self):
        self.sanitizer_phase([
            ("memcheck_ops", 0, "========= ERROR SUMMARY: 0 errors\n"),
            ("racecheck_attention", 0, "========= RACECHECK SUMMARY: 0 hazards displayed "
                                       "(0 errors, 0 warnings)\n")])
        self.assertEqual(self.state("sanitizer"), "ok")
        self.assertEqual(self.verdict(), "ok")

    def test_sanitizer_memcheck_errors_with_exit_0_fail(self):
        # Without --error-exitcode memcheck exits 0 on errors: the count decides.
        self.sanitizer_phase([("memcheck_ops", 0, "========= Invalid __global__ read of size 4\n"
                                                  "========= ERROR SUMMARY: 3 errors\n")])
        self.assertEqual(self.sub_states("sanitizer"), {"memcheck_ops": "failed"})
        self.assertEqual(self.state("sanitizer"), "failed")
        self.assertIn("ERROR SUMMARY: 3 errors", self.table())
        self.assertEqual(self.verdict(), "not ok")

    def test_sanitizer_racecheck_hazards_fail(self):
        self.sanitizer_phase([("racecheck_norms_losses", 0, "========= RACECHECK SUMMARY: 2 "
                               "hazards displayed (0 errors, 2 warnings)\n")])
        self.assertEqual(self.state("sanitizer"), "failed")

    def test_sanitizer_error_exit_fails(self):
        self.sanitizer_phase([("memcheck_step", 86, "========= ERROR SUMMARY: 0 errors\n")])
        self.assertEqual(self.state("sanitizer"), "failed")

    def test_sanitizer_without_a_summary_line_fails(self):
        self.sanitizer_phase([("memcheck_ops", 0, "")])
        self.assertEqual(self.state("sanitizer"), "failed")

    def test_sanitizer_run_past_its_limit_is_timeout(self):
        self.sanitizer_phase([("racecheck_attention", 124, "")])
        self.assertEqual(self.sub_states("sanitizer"), {"racecheck_attention": "timeout"})

    def test_sanitizer_over_tests_that_all_skipped_is_none_ran(self):
        self.sanitizer_phase([("memcheck_ops", 0, "========= ERROR SUMMARY: 0 errors\n",
                               GTEST_SKIPPED_NO_GPU)])
        self.assertEqual(self.state("sanitizer"), "none ran")

    def test_sanitizer_a_missing_test_binary_is_absent(self):
        self.check("sanitizer")
        self.file("sanitizer/results.txt", "memcheck_ops: absent (no b/kernels/cuda_ops_test)\n")
        self.progress("sanitizer", 0)
        self.assertEqual(self.state("sanitizer"), "absent")

    def test_sanitizer_missing_tool_is_absent_and_not_ok_on_a_device(self):
        self.check("sanitizer")
        self.file("sanitizer/results.txt", "compute-sanitizer absent: not on PATH\n")
        self.progress("sanitizer", 0)
        self.assertEqual(self.state("sanitizer"), "absent")
        self.assertEqual(self.verdict(), "not ok")
        self.check("sanitizer", "rehearsal")
        self.assertEqual(self.state("sanitizer"), "absent")
        self.assertEqual(self.verdict(), "ok")

    # -- bench

    def bench_phase(self, runs, jsons, logs=None, rc=0, mode="device"):
        self.check("bench", mode)
        self.file("bench/runs.txt", "".join(line + "\n" for line in runs))
        for name, value in jsons.items():
            self.file("bench/" + name, json.dumps(value))
        for name, text in (logs or {}).items():
            self.file("bench/" + name, text)
        self.progress("bench", rc)

    OURS = {"tokens_per_second_measured": 300000.0, "each_step_loss": [10.9, 10.8],
            "step_seconds": {"predicted": 0.100, "measured": 0.102, "error": 0.02},
            "peak_memory_bytes": {"predicted": 10.4e9, "measured": 10.0e9, "error": -0.04}}
    TORCH = {"tokens_per_second": 250000.0, "losses": [10.9, 10.8]}
    ALL_RAN = ["paraplan exit 0 batches 8", "eager exit 0 batches 8", "compile exit 0 batches 8",
               "llmc absent no .device/llmc/train_gpt2cu"]

    def test_bench_every_run_with_figures_is_ok(self):
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": self.OURS, "b8.eager.json": self.TORCH,
                                        "b8.compile.json": self.TORCH})
        self.assertEqual(self.sub_states("bench"), {"paraplan": "ok", "eager": "ok", "compile": "ok",
                                                    "llmc": "absent"})
        self.assertEqual(self.state("bench"), "ok")
        self.assertEqual(self.verdict(), "ok")
        self.assertIn("verdict: ok (absent, optional: llm.c)", self.table())

    def test_bench_a_failed_compile_fails_the_bench(self):
        # bench.sh exits 0 when a run fails: the missing figure decides.
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": self.OURS, "b8.eager.json": self.TORCH},
                         logs={"b8.compile.log": "torch._dynamo.exc.BackendCompilerFailed: x\n"})
        self.assertEqual(self.sub_states("bench"), {"paraplan": "ok", "eager": "ok",
                                                    "compile": "failed", "llmc": "absent"})
        self.assertEqual(self.state("bench"), "failed")
        self.assertIn("BackendCompilerFailed", self.table())
        self.assertEqual(self.verdict(), "not ok")

    def test_bench_without_pytorch_is_absent_not_ok_on_a_device(self):
        no_torch = "ModuleNotFoundError: No module named 'torch'\n"
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": self.OURS},
                         logs={"b8.eager.log": no_torch, "b8.compile.log": no_torch})
        self.assertEqual(self.sub_states("bench"), {"paraplan": "ok", "eager": "absent",
                                                    "compile": "absent", "llmc": "absent"})
        self.assertEqual(self.state("bench"), "absent")
        self.assertEqual(self.verdict(), "not ok")
        self.check("bench", "rehearsal")
        self.assertEqual(self.state("bench"), "ok")
        self.assertEqual(self.verdict(), "ok")

    def test_bench_a_non_finite_loss_fails(self):
        self.bench_phase(self.ALL_RAN, {
            "b8.paraplan.json": dict(self.OURS, each_step_loss=[10.9, None]),
            "b8.eager.json": self.TORCH, "b8.compile.json": self.TORCH})
        self.assertEqual(self.sub_states("bench")["paraplan"], "failed")

    def test_bench_a_run_past_its_limit_and_one_never_reached(self):
        self.bench_phase(["paraplan exit 0 batches 8", "eager exit 124 batches 8"],
                         {"b8.paraplan.json": self.OURS})
        self.assertEqual(self.sub_states("bench"), {"paraplan": "ok", "eager": "timeout",
                                                    "compile": "not run", "llmc": "not run"})
        self.assertEqual(self.state("bench"), "timeout")

    def test_bench_switches_are_judged_and_compared_with_the_default(self):
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": self.OURS, "b8.eager.json": self.TORCH,
                                        "b8.compile.json": self.TORCH})
        # device_phases.sh bench_switches: one ran, one left no figures.
        self.file("bench/switch_PARAPLAN_CUDA_OVERLAP_0/switch.txt", "PARAPLAN_CUDA_OVERLAP=0\n")
        self.file("bench/switch_PARAPLAN_CUDA_OVERLAP_0/runs.txt", "paraplan exit 0 batches 8\n")
        self.file("bench/switch_PARAPLAN_CUDA_OVERLAP_0/b8.paraplan.json",
                  json.dumps(dict(self.OURS, tokens_per_second_measured=240000.0)))
        self.assertEqual(self.sub_states("bench")["paraplan PARAPLAN_CUDA_OVERLAP=0"], "ok")
        self.assertEqual(self.state("bench"), "ok")
        self.assertIn("paraplan PARAPLAN_CUDA_OVERLAP=0 ok        B=8 240,000 tokens/s",
                      self.table())
        self.file("bench/switch_PARAPLAN_CUDA_FUSED_GEMMS_0/switch.txt",
                  "PARAPLAN_CUDA_FUSED_GEMMS=0\n")
        self.file("bench/switch_PARAPLAN_CUDA_FUSED_GEMMS_0/runs.txt", "paraplan exit 1 batches 8\n")
        self.assertEqual(self.sub_states("bench")["paraplan PARAPLAN_CUDA_FUSED_GEMMS=0"], "failed")
        self.assertEqual(self.state("bench"), "failed")
        self.assertEqual(self.verdict(), "not ok")

    def test_bench_a_switch_whose_graphs_fell_back_failed(self):
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": self.OURS, "b8.eager.json": self.TORCH,
                                        "b8.compile.json": self.TORCH})
        sub = "bench/switch_PARAPLAN_CUDA_GRAPHS_1/"
        self.file(sub + "switch.txt", "PARAPLAN_CUDA_GRAPHS=1\n")
        self.file(sub + "runs.txt", "paraplan exit 0 batches 8\n")
        self.file(sub + "b8.paraplan.json", json.dumps(self.OURS))
        self.file(sub + "paraplan.log", "step 1\n")
        self.assertEqual(self.sub_states("bench")["paraplan PARAPLAN_CUDA_GRAPHS=1"], "ok")
        broke = ("paraplan: CUDA graphs: capture ended with operation not permitted when stream "
                 "is capturing; the step runs without a graph")
        self.file(sub + "paraplan.log", "step 1\n" + broke + "\n" + broke + "\nstep 2\n")
        self.assertEqual(self.sub_states("bench")["paraplan PARAPLAN_CUDA_GRAPHS=1"], "failed")
        self.assertEqual(self.verdict(), "not ok")
        self.assertIn("CUDA graphs fell back 2 time(s): " + broke, self.table())

    def test_bench_a_replay_off_the_plan_is_a_finding_not_a_failure(self):
        slow = dict(self.OURS, step_seconds={"predicted": 0.100, "measured": 0.1073})
        self.bench_phase(self.ALL_RAN, {"b8.paraplan.json": slow, "b8.eager.json": self.TORCH,
                                        "b8.compile.json": self.TORCH})
        self.assertEqual(self.state("bench"), "ok")
        self.assertIn("B=8 300,000 tokens/s (step off: +7.3%, peak +4.0%)", self.table())
        self.assertIn("planner off its bounds (findings, not failures; step within 5%, peak never "
                      "below and at most 10% above): bench B=8 step off: +7.3%", self.table())

    # -- llama: paraplan's replay of the Llama-3.2-1B shape against torch.compile

    def llama_phase(self, runs, jsons, logs=None, rc=0, mode="device"):
        self.check("llama", mode)
        self.file("llama/runs.txt", "".join(line + "\n" for line in runs))
        for name, value in jsons.items():
            self.file("llama/" + name, json.dumps(value))
        for name, text in (logs or {}).items():
            self.file("llama/" + name, text)
        self.progress("llama", rc)

    LLAMA = {"tokens_per_second_measured": 60000.0, "each_step_loss": [11.9, 11.8],
             "mfu": {"predicted": 0.5, "measured": 0.49},
             "step_seconds": {"predicted": 0.270, "measured": 0.2754, "error": 0.02},
             "peak_memory_bytes": {"predicted": 30.0e9, "measured": 29.0e9, "error": -0.033},
             "micro_batch_size": 2, "num_micro_batches": 4}
    LLAMA_COMPILE = {"tokens_per_second": 55000.0, "losses": [11.9, 11.8], "mfu": 0.45,
                     "peak_memory_gib": 31.0, "global_batch_size": 8}
    LLAMA_RAN = ["paraplan exit 0 batches 2 4", "compile exit 0 batches 2"]

    def llama_jsons(self, **replace):
        jsons = {"b2.paraplan.json": self.LLAMA, "b4.paraplan.json": dict(
            self.LLAMA, micro_batch_size=4, num_micro_batches=2), "b2.compile.json":
            self.LLAMA_COMPILE}
        jsons.update(replace)
        return {name: value for name, value in jsons.items() if value is not None}

    def test_llama_every_run_with_figures_is_ok(self):
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons())
        self.assertEqual(self.sub_states("llama"), {"paraplan": "ok", "compile": "ok"})
        self.assertEqual(self.state("llama"), "ok")
        self.assertEqual(self.verdict(), "ok")
        self.assertIn("B=2 60,000 tokens/s (step +2.0%, peak +3.4%), B=4 60,000", self.table())
        self.assertNotIn("off its bounds", self.table())
        text = "\n".join(device_summary.llama(self.work))
        self.assertIn("global batch 8 sequences", text)
        self.assertRegex(text, r"\n +2 +60,000 +49\.0 +27\.0 +55,000 +45\.0 +31\.0 +1\.09\n")
        self.assertRegex(text, r"\n +4 +60,000 +49\.0 +27\.0 +- +- +- +-\n")
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertRegex(text, r"Llama-3.2-1B shape +B=2 +step +275\.40 ms measured +270\.00 "
                         r"predicted +x1\.020 +within 5%")
        self.assertRegex(text, r"peak +27\.01 GiB measured +27\.94 predicted +within 10% above")

    def test_llama_a_failed_compile_fails_the_phase(self):
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b2.compile.json": None}),
                         logs={"b2.compile.log": "torch.OutOfMemoryError: CUDA out of memory\n",
                               "compile.log": "pytorch compile failed for B=2: see "
                                              "x/b2.compile.log\n"})
        self.assertEqual(self.sub_states("llama"), {"paraplan": "ok", "compile": "failed"})
        self.assertEqual(self.state("llama"), "failed")
        self.assertIn("no figures for B=2: torch.OutOfMemoryError", self.table())
        self.assertEqual(self.verdict(), "not ok")
        self.assertIn("pytorch compile failed for B=2: torch.OutOfMemoryError",
                      "\n".join(device_summary.llama(self.work)))

    def test_llama_a_compile_that_left_nothing_or_never_ran_is_not_ok(self):
        # Exit 0 and no JSON, no word why: failed; no record at all: not run.
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b2.compile.json": None}))
        self.assertEqual(self.sub_states("llama")["compile"], "failed")
        self.llama_phase(self.LLAMA_RAN[:1], self.llama_jsons(**{"b2.compile.json": None}))
        self.assertEqual(self.sub_states("llama")["compile"], "not run")
        self.assertEqual(self.verdict(), "not ok")

    def test_llama_without_pytorch_is_absent_on_a_device_and_allowed_in_a_rehearsal(self):
        no_gpu = "no CUDA device visible\n"
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b2.compile.json": None}),
                         logs={"b2.compile.log": no_gpu})
        self.assertEqual(self.sub_states("llama")["compile"], "absent")
        self.assertEqual(self.verdict(), "not ok")
        self.check("llama", "rehearsal")
        self.assertEqual(self.state("llama"), "ok")
        self.assertEqual(self.verdict(), "ok")

    def test_llama_a_missing_replay_json_fails(self):
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b4.paraplan.json": None}),
                         logs={"b4.replay.log": "paraplan: out of device memory: 80.1 GiB\n"})
        self.assertEqual(self.sub_states("llama")["paraplan"], "failed")
        self.assertIn("no figures for B=4: paraplan: out of device memory", self.table())
        self.assertEqual(self.verdict(), "not ok")
        # In a rehearsal too: paraplan runs on the CPU backend there.
        self.check("llama", "rehearsal")
        self.assertEqual(self.state("llama"), "failed")
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertIn("B=2 ", text)
        self.assertNotIn("B=4 ", text)

    def test_llama_a_replay_off_by_more_than_5_percent_is_a_finding(self):
        slow = dict(self.LLAMA, step_seconds={"predicted": 0.270, "measured": 0.2897})
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b4.paraplan.json": slow}))
        self.assertEqual(self.state("llama"), "ok")
        self.assertEqual(self.verdict(), "ok")
        self.assertIn("B=4 60,000 tokens/s (step off: +7.3%, peak +3.4%)", self.table())
        self.assertIn("findings, not failures; step within 5%, peak never below and at most "
                      "10% above): llama B=4 step off: +7.3%", self.table())
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertRegex(text, r"B=4 +step +289\.70 ms measured +270\.00 predicted +x1\.073 +"
                         r"off: \+7\.3%")

    def test_llama_memory_predicted_below_measured_or_too_far_above_is_a_finding(self):
        below = dict(self.LLAMA, peak_memory_bytes={"predicted": 28.0e9, "measured": 29.0e9})
        above = dict(self.LLAMA, peak_memory_bytes={"predicted": 33.0e9, "measured": 29.0e9})
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b2.paraplan.json": below,
                                                             "b4.paraplan.json": above}))
        self.assertEqual(self.state("llama"), "ok")
        self.assertIn("llama B=2 peak below: -3.4%; llama B=4 peak over: +13.8%", self.table())
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertRegex(text, r"peak +27\.01 GiB measured +26\.08 predicted +below: -3\.4%")
        self.assertRegex(text, r"peak +27\.01 GiB measured +30\.73 predicted +over: \+13\.8%")

    def test_llama_a_report_without_the_figures_says_absent(self):
        bare = {"tokens_per_second_measured": 60000.0, "each_step_loss": [11.9, 11.8],
                "step_seconds_measured": 0.2754}
        self.llama_phase(self.LLAMA_RAN, self.llama_jsons(**{"b2.paraplan.json": bare}))
        self.assertEqual(self.state("llama"), "ok")
        self.assertIn("B=2 60,000 tokens/s (step absent, peak absent)", self.table())
        text = "\n".join(device_summary.replay_accuracy(self.work))
        self.assertRegex(text, r"B=2 +step +275\.40 ms measured +- predicted +x- +absent \(no "
                         r"predicted step_seconds in the report\)")
        self.assertRegex(text, r"peak +- MiB measured +- predicted +absent \(no measured "
                         r"peak_memory_bytes in the report\)")

    def test_llama_timed_out_is_timeout(self):
        self.llama_phase(["paraplan exit 124 batches 2 4"], {}, rc=124)
        self.progress("llama", 124, outcome="timeout")
        self.assertEqual(self.state("llama"), "timeout")

    # -- breakdown

    def breakdown_phase(self, runs, torch=None, ours=True, ncu=True, mode="device", rc=0):
        self.check("breakdown", mode)
        self.file("breakdown/runs.txt", "".join(line + "\n" for line in runs))
        if ncu:
            self.file("breakdown/ncu.csv", NCU_CSV)
        if ours:
            self.file("breakdown/attention_paraplan.json", json.dumps(
                {"batch": 8, "seq": 1024, "heads": 12, "head_dim": 64, "forward_ms": 0.4,
                 "backward_ms": 1.0, "forward_backward_ms": 1.4, "output_nan_count": 0}))
        self.file("breakdown/attention_torch.json", json.dumps(
            torch if torch is not None else {"backends": {"flash": {"forward_backward_ms": 1.2},
                                                          "cudnn": {"unavailable": "no"}}}))
        self.progress("breakdown", rc)

    ALL_MEASURED = ["ncu exit 0", "attention exit 0", "torch_attention exit 0"]

    def test_breakdown_every_measurement_is_ok(self):
        self.breakdown_phase(self.ALL_MEASURED)
        self.assertEqual(set(self.sub_states("breakdown").values()), {"ok"})
        self.assertEqual(self.verdict(), "ok")

    def test_breakdown_ring_attention_is_judged_where_it_ran(self):
        line = ("attention_block_bench cuda bfloat16 (H100) B=1 T=32768 H=32 Hkv=8 D=128 cp=4: "
                "whole sequence forward+backward 40.1 ms; one rank's ring blocks 10.9 ms (rank 0) "
                "and 10.9 ms (rank 3); speed-up 3.68x of 4; work overhead 1.09x\n")
        self.breakdown_phase(self.ALL_MEASURED + ["ring_attention exit 0"])
        self.file("breakdown/ring_attention.log", line)
        self.assertEqual(self.sub_states("breakdown")["ring_attention"], "ok")
        self.assertIn("speed-up 3.68x of 4", self.table())
        self.assertEqual(self.verdict(), "ok")
        # Crashed before its line: failed; never run (an older bundle): no row.
        self.breakdown_phase(self.ALL_MEASURED + ["ring_attention exit 1"])
        self.file("breakdown/ring_attention.log", "attention_block_bench: error: out of memory\n")
        self.assertEqual(self.sub_states("breakdown")["ring_attention"], "failed")
        self.assertEqual(self.verdict(), "not ok")
        self.breakdown_phase(self.ALL_MEASURED)
        self.assertNotIn("ring_attention", self.sub_states("breakdown"))

    def test_breakdown_a_failed_ncu_fails(self):
        self.breakdown_phase(["ncu exit 1"] + self.ALL_MEASURED[1:], ncu=False)
        self.file("breakdown/ncu_replay.log", "==ERROR== ERR_NVGPUCTRPERM\n")
        self.assertEqual(self.sub_states("breakdown")["ncu"], "failed")
        self.assertIn("ERR_NVGPUCTRPERM", self.table())
        self.assertEqual(self.verdict(), "not ok")

    def test_breakdown_ncu_that_profiled_nothing_fails(self):
        self.breakdown_phase(self.ALL_MEASURED, ncu=False)
        self.assertEqual(self.sub_states("breakdown")["ncu"], "failed")

    def test_breakdown_missing_ncu_and_attention_bench_are_absent(self):
        self.breakdown_phase(["ncu absent not on PATH", "attention absent no b/kernels/attention_bench",
                              "torch_attention exit 0"], ours=False, ncu=False)
        self.assertEqual(self.sub_states("breakdown"), {
            "ncu": "absent", "attention": "absent", "torch_attention": "ok"})
        self.assertEqual(self.state("breakdown"), "absent")
        self.assertEqual(self.verdict(), "not ok")
        self.check("breakdown", "rehearsal")  # paraplan's attention bench is needed there too
        self.assertEqual(self.state("breakdown"), "absent")
        self.assertEqual(self.verdict(), "not ok")

    def test_breakdown_a_failed_attention_bench_fails(self):
        self.breakdown_phase(["ncu exit 0", "attention exit 1", "torch_attention exit 0"],
                             ours=False)
        self.file("breakdown/attention_paraplan.log", "CUDA error: an illegal memory access\n")
        self.assertEqual(self.sub_states("breakdown")["attention"], "failed")

    def test_breakdown_torch_attention_unavailable_or_failing(self):
        self.breakdown_phase(self.ALL_MEASURED, torch={
            "unavailable": "no CUDA device visible to torch 2.5.1 (built with CUDA 12.4)"})
        self.assertEqual(self.sub_states("breakdown")["torch_attention"], "absent")
        self.assertEqual(self.verdict(), "not ok")
        self.breakdown_phase(self.ALL_MEASURED, torch={
            "backends": {"flash": {"unavailable": "No available kernel"}}})
        self.assertEqual(self.sub_states("breakdown")["torch_attention"], "failed")
        self.breakdown_phase(["ncu exit 0", "attention exit 0", "torch_attention exit 124"])
        self.assertEqual(self.sub_states("breakdown")["torch_attention"], "timeout")

    # -- the phases themselves

    def test_a_phase_past_its_limit_is_timeout(self):
        self.check("losses")
        self.progress("losses", 124, outcome="timeout")
        self.assertEqual(self.state("losses"), "timeout")
        self.assertEqual(self.verdict(), "not ok")

    def test_a_phase_skipped_for_time_or_never_reached_is_not_run(self):
        self.check("facts losses bench")
        self.file("facts/facts.txt", "gpu: H100\n")
        self.progress("facts", 0)
        with open(os.path.join(self.work, "progress.txt"), "a") as f:
            f.write("losses skipped 0 no time left before the deadline\n")
        self.assertEqual(self.state("facts"), "ok")
        self.assertEqual(self.state("losses"), "not run")
        self.assertEqual(self.state("bench"), "not run")
        self.assertEqual(self.verdict(), "not ok")

    def test_a_phase_that_exits_non_zero_is_failed_even_if_its_files_look_fine(self):
        self.check("facts")
        self.file("facts/facts.txt", "gpu: H100\n")
        self.progress("facts", 1)
        self.assertEqual(self.state("facts"), "failed")

    def test_losses_that_differ_fail(self):
        self.check("losses")
        self.file("losses/losses.json", json.dumps({"gpt2": {"verdict": "ok"},
                                                    "llama": {"verdict": "too far"}}))
        self.progress("losses", 1)
        self.assertEqual(self.state("losses"), "failed")

    def test_no_phase_at_all_is_not_ok(self):
        self.assertEqual(self.verdict(), "not ok")
        self.assertIn("verdict: not ok", self.table())

    def test_the_check_script_reads_the_state_and_verdict_as_printed(self):
        # device_check.sh's phase_state sed and verdict grep against this table.
        self.sanitizer_phase([("memcheck_ops", 0, "========= ERROR SUMMARY: 0 errors\n")])
        self.given_tests(ctest_line(1, "NcclCommunicator.ranks_1", "Skipped"), 0)
        self.check("tests sanitizer")
        summary = os.path.join(self.work, "summary.txt")
        write(summary, "\n".join(device_states.states_section(self.work)) + "\n")
        script = ('phase_state() { %s; }; phase_state tests; phase_state sanitizer; '
                  'grep -q "^verdict: ok" "$out/summary.txt" && echo ok || echo not ok') % (
            extract_function("phase_state"))
        result = subprocess.run(["bash", "-c", script], env=dict(os.environ, out=self.work),
                                capture_output=True, text=True, check=True).stdout
        self.assertEqual(result.splitlines(), ["none ran", "ok", "not ok"])


def extract_function(name):
    """The body of a shell function of device_check.sh."""
    with open(os.path.join(REPO, "scripts", "device_check.sh")) as f:
        text = f.read()
    start = text.index("%s() {" % name) + len("%s() {" % name)
    return text[start:text.index("\n}\n", start)]


if __name__ == "__main__":
    unittest.main()
