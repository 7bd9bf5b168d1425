#!/usr/bin/env python3
"""device_phases_test.py: the phase functions of device_phases.sh (tests,
sanitizer, breakdown, bench, llama) run as device_check.sh runs them, with made-up
ctest, compute-sanitizer, ncu, paraplan and python, and the state and verdict
device_states.py gives what each left.

Usage: device_phases_test.py
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_states  # noqa: E402
from device_test_fixtures import NCCL_CRASH_LOG, NCU_CSV, REPO, ctest_line, write  # noqa: E402


class PhaseFunctions(unittest.TestCase):
    """Runs phase_* of device_phases.sh as device_check.sh does, on a 'device'
    whose ctest, compute-sanitizer, ncu, paraplan and python are scripts here,
    then the summary over what the phase left."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        self.work = os.path.join(self.root, "work")
        self.bin = os.path.join(self.root, "bin")
        self.build = os.path.join(self.root, "build")
        for folder in (self.work, self.bin, os.path.join(self.build, "kernels"),
                       os.path.join(self.build, "launcher")):
            os.makedirs(folder)

    def tool(self, path, body):
        path = path if os.path.isabs(path) else os.path.join(self.bin, path)
        write(path, "#!/bin/bash\n" + body)
        os.chmod(path, 0o755)
        return path

    def run_phase(self, name, rehearse=0, path=None):
        os.makedirs(os.path.join(self.work, name), exist_ok=True)
        write(os.path.join(self.work, "check.txt"), "mode: %s\nphases: %s\n" % (
            "rehearsal" if rehearse else "device", name))
        env = dict(os.environ, work=self.work, build=self.build, rehearse=str(rehearse),
                   paraplan=os.path.join(self.build, "launcher", "paraplan"),
                   python=self.tool("python", 'exec python3 "$@"\n'),
                   PATH=path or (self.bin + os.pathsep + os.environ["PATH"]))
        rc = subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_" + name],
                            cwd=REPO, env=env, capture_output=True, text=True).returncode
        with open(os.path.join(self.work, "progress.txt"), "a") as f:
            f.write("%s ended 1 exit %d (limit 100 s)\n" % (name, rc))
        rows, rehearsal = device_states.phase_states(self.work)
        row = {r[0]: r for r in rows}[name]
        return rc, row[1], {sub: state for sub, state, _ in row[4]}, \
            device_states.verdict(rows, rehearsal)[0]

    # A ctest that answers the first run with FIRST and the rerun with RERUN
    # (lines of ctest output), exiting as ctest does, and logs its arguments.
    def ctest(self, first, first_rc, rerun="", rerun_rc=0):
        self.tool("ctest", """echo "$*" >>"%s/ctest.args"
if [[ " $* " == *" --rerun-failed "* ]]; then
  printf '%%s' '%s'; exit %d
fi
printf '%%s' '%s'; exit %d
""" % (self.root, rerun, rerun_rc, first, first_rc))

    def test_tests_a_crash_whose_rerun_skips_is_failed_not_flaky(self):
        self.ctest(NCCL_CRASH_LOG, 8, ctest_line(4, "NcclCommunicator.ranks_2", "Skipped"), 0)
        rc, state, _, verdict = self.run_phase("tests")
        self.assertNotIn(rc, (0, 3))
        self.assertEqual((state, verdict), ("failed", "not ok"))

    def test_tests_a_crash_whose_rerun_passes_is_flaky(self):
        self.ctest(NCCL_CRASH_LOG, 8, ctest_line(4, "NcclCommunicator.ranks_2", "Passed"), 0)
        rc, state, _, verdict = self.run_phase("tests")
        self.assertEqual((rc, state, verdict), (3, "flaky", "not ok"))

    def test_tests_none_matched_is_none_ran_and_not_rerun(self):
        self.ctest("No tests were found!!!\nErrors while running CTest\n", 8)
        rc, state, _, _ = self.run_phase("tests")
        self.assertEqual((rc, state), (8, "none ran"))
        with open(os.path.join(self.root, "ctest.args")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 1)
        self.assertIn("--no-tests=error", calls[0])

    # A compute-sanitizer that runs nothing, logs its arguments, writes REPORT
    # to --log-file and exits RC (exit 0 on errors: an old tool, or racecheck).
    def sanitizer(self, report, rc=0):
        self.tool("compute-sanitizer", """echo "$*" >>"%s/sanitizer.args"
while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; shift; done
printf '%%s' '%s' >"$log"
echo '[  PASSED  ] 1 test.'
exit %d
""" % (self.root, report, rc))
        self.tool(os.path.join(self.build, "kernels", "cuda_ops_test"), "exit 0\n")
        self.tool(os.path.join(self.build, "launcher", "paraplan"), "exit 0\n")

    def test_sanitizer_errors_fail_even_when_the_tool_exits_0(self):
        self.sanitizer("========= ERROR SUMMARY: 2 errors\n", 0)
        rc, state, subs, verdict = self.run_phase("sanitizer")
        self.assertNotEqual(rc, 0)
        self.assertEqual((state, verdict), ("failed", "not ok"))
        self.assertEqual(set(subs.values()), {"failed"})
        with open(os.path.join(self.root, "sanitizer.args")) as f:
            self.assertTrue(all("--error-exitcode" in line for line in f))

    def test_sanitizer_clean_is_ok(self):
        self.sanitizer("========= ERROR SUMMARY: 0 errors\n", 0)
        rc, state, subs, verdict = self.run_phase("sanitizer")
        self.assertEqual((rc, state, verdict), (0, "ok", "ok"))
        # memcheck: the ops, cuDNN's attention, a step; racecheck: attention, norms and losses.
        self.assertEqual(len(subs), 5)

    def test_sanitizer_missing_is_absent(self):
        # PATH without compute-sanitizer: only the basic tools, linked into a folder.
        for name in ("bash", "sed", "tee", "grep", "cat"):
            found = shutil.which(name)
            if found and not os.path.exists(os.path.join(self.bin, name)):
                os.symlink(found, os.path.join(self.bin, name))
        rc, state, _, verdict = self.run_phase("sanitizer", path=self.bin)
        self.assertEqual((state, verdict), ("absent", "not ok"))
        rc, state, _, verdict = self.run_phase("sanitizer", rehearse=1, path=self.bin)
        self.assertEqual((rc, state, verdict), (0, "absent", "ok"))

    def breakdown_tools(self, ncu_rc, attention_rc=0):
        self.tool("ncu", """while [ $# -gt 0 ]; do [ "$1" = --log-file ] && log=$2; shift; done
[ %d = 0 ] && printf '%%s' '%s' >"$log"
echo "==ERROR== the profiler failed"; exit %d
""" % (ncu_rc, NCU_CSV.replace("'", "'\\''"), ncu_rc))
        self.tool(os.path.join(self.build, "kernels", "attention_bench"), """
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
[ %d = 0 ] && echo '{"forward_backward_ms": 1.0, "output_nan_count": 0}' >"$json"
exit %d
""" % (attention_rc, attention_rc))
        # PyTorch's side, made up: one backend measured.
        self.tool("python", """
while [ $# -gt 0 ]; do [ "$1" = --json ] && json=$2; shift; done
echo '{"backends": {"flash": {"forward_backward_ms": 1.1}}}' >"$json"
""")
        os.makedirs(os.path.join(self.work, "bench"))
        write(os.path.join(self.work, "bench", "b8.pplan"), "")

    def run_breakdown(self):
        # run_phase's python would replace the made-up one: keep ours.
        os.makedirs(os.path.join(self.work, "breakdown"), exist_ok=True)
        write(os.path.join(self.work, "check.txt"), "mode: device\nphases: breakdown\n")
        env = dict(os.environ, work=self.work, build=self.build, rehearse="0",
                   paraplan=os.path.join(self.build, "launcher", "paraplan"),
                   python=os.path.join(self.bin, "python"),
                   PATH=self.bin + os.pathsep + os.environ["PATH"])
        rc = subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_breakdown"],
                            cwd=REPO, env=env, capture_output=True, text=True).returncode
        write(os.path.join(self.work, "progress.txt"), "breakdown ended 1 exit %d (limit 75 s)\n"
              % rc)
        rows, rehearsal = device_states.phase_states(self.work)
        return rc, rows[0][1], {sub: state for sub, state, _ in rows[0][4]}, \
            device_states.verdict(rows, rehearsal)[0]

    def test_breakdown_all_measured_is_ok(self):
        self.breakdown_tools(0)
        self.assertEqual(self.run_breakdown(), (0, "ok", {
            "ncu": "ok", "attention": "ok", "torch_attention": "ok"}, "ok"))

    def test_breakdown_a_failed_ncu_and_attention_bench_fail(self):
        self.breakdown_tools(1, attention_rc=1)
        rc, state, subs, verdict = self.run_breakdown()
        self.assertNotEqual(rc, 0)
        self.assertEqual((state, verdict), ("failed", "not ok"))
        self.assertEqual(subs, {"ncu": "failed", "attention": "failed", "torch_attention": "ok"})

    def test_bench_records_each_run(self):
        # paraplan plans and replays (a report with figures); PyTorch is missing.
        self.tool(os.path.join(self.build, "launcher", "paraplan"), """
cmd=$1; shift
while [ $# -gt 0 ]; do case $1 in --output) touch "$2" ;; --report) echo \\
  '{"tokens_per_second_measured": 1000, "each_step_loss": [10.9, 10.8]}' >"$2" ;; esac; shift; done
""")
        self.tool("python", """case "$1" in
  -) exec python3 "$@" ;;
  *) echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1 ;;
esac
""")
        os.makedirs(os.path.join(self.work, "bench"))
        write(os.path.join(self.work, "check.txt"), "mode: device\nphases: bench\n")
        env = dict(os.environ, work=self.work, build=self.build, rehearse="0", BATCHES="8",
                   paraplan=os.path.join(self.build, "launcher", "paraplan"),
                   python=os.path.join(self.bin, "python"),
                   LLMC=os.path.join(self.root, "no-llmc", "train_gpt2cu"))
        rc = subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_bench"],
                            cwd=REPO, env=env, capture_output=True, text=True).returncode
        write(os.path.join(self.work, "progress.txt"), "bench ended 1 exit %d (limit 150 s)\n" % rc)
        rows, rehearsal = device_states.phase_states(self.work)
        self.assertEqual(rc, 0)
        self.assertEqual({sub: state for sub, state, _ in rows[0][4]},
                         {"paraplan": "ok", "eager": "absent", "compile": "absent",
                          "llmc": "absent"})
        self.assertEqual((rows[0][1], device_states.verdict(rows, rehearsal)[0]),
                         ("absent", "not ok"))

    def test_llama_asks_each_run_for_the_llama_at_one_global_batch(self):
        # paraplan logs what it is asked and reports figures; torch.compile too.
        self.tool(os.path.join(self.build, "launcher", "paraplan"), """
echo "$*" >>"%s/paraplan.args"
cmd=$1; shift
while [ $# -gt 0 ]; do case $1 in --output) touch "$2" ;; --report) echo \\
  '{"tokens_per_second_measured": 1000, "each_step_loss": [10.9, 10.8],
    "step_seconds": {"measured": 0.30, "predicted": 0.27},
    "peak_memory_bytes": {"measured": 3e10, "predicted": 3.1e10}}' >"$2" ;; esac; shift; done
""" % self.root)
        self.tool("python", """case "$1" in
  -) exec python3 "$@" ;;
esac
echo "$*" >>"%s/python.args"
while [ $# -gt 0 ]; do [ "$1" = --json ] && echo \\
  '{"tokens_per_second": 900, "losses": [10.9, 10.8]}' >"$2"; shift; done
""" % self.root)
        os.makedirs(os.path.join(self.work, "llama"))
        write(os.path.join(self.work, "check.txt"), "mode: device\nphases: llama\n")
        env = dict(os.environ, work=self.work, build=self.build, rehearse="0",
                   paraplan=os.path.join(self.build, "launcher", "paraplan"),
                   python=os.path.join(self.bin, "python"), BATCHES="8", GLOBAL_BATCH="16")
        result = subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_llama"],
                                cwd=REPO, env=env, capture_output=True, text=True)
        write(os.path.join(self.work, "progress.txt"),
              "llama ended 1 exit %d (limit 150 s)\n" % result.returncode)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(os.path.join(self.work, "llama", "runs.txt")) as f:
            self.assertEqual(f.read(), "paraplan exit 0 batches 2 4\ncompile exit 0 batches 2\n")
        with open(os.path.join(self.root, "paraplan.args")) as f:
            calls = f.read().splitlines()
        # The bench's BATCHES and GLOBAL_BATCH do not reach the llama's runs.
        self.assertEqual(len(calls), 4)
        for call, b in zip(calls[::2], (2, 4)):
            self.assertIn("plan --config samples/llama_1b/job.toml", call)
            self.assertIn("--training.micro_batch_size %d --training.global_batch_size 8" % b, call)
            self.assertNotIn("--model.num_layers", call)
        self.assertIn("--steps 5 --warmup 2 --backend cuda", calls[1])
        with open(os.path.join(self.root, "python.args")) as f:
            calls = f.read().splitlines()
        self.assertEqual(len(calls), 1)
        self.assertRegex(calls[0], r"^samples/llama_1b/pytorch_baseline.py --batch-size 2 "
                         r"--steps 5 --warmup 2 --mode compile .*--bf16 +--global-batch-size 8$")
        rows, rehearsal = device_states.phase_states(self.work)
        self.assertEqual({sub: (state, note) for sub, state, note in rows[0][4]}, {
            "paraplan": ("ok", "B=2 1,000 tokens/s (step off: +11.1%, peak +3.3%), "
                               "B=4 1,000 tokens/s (step off: +11.1%, peak +3.3%)"),
            "compile": ("ok", "B=2 900 tokens/s")})
        self.assertEqual(device_states.verdict(rows, rehearsal), ("ok", ""))

    def test_llama_rehearsed_is_a_tiny_llama_on_the_cpu(self):
        self.tool(os.path.join(self.build, "launcher", "paraplan"), """
echo "$*" >>"%s/paraplan.args"
""" % self.root)
        os.makedirs(os.path.join(self.work, "llama"))
        env = dict(os.environ, work=self.work, build=self.build, rehearse="1",
                   paraplan=os.path.join(self.build, "launcher", "paraplan"),
                   python=self.tool("python", 'exec python3 "$@"\n'), LLAMA_BATCHES="2 4 8")
        subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_llama"],
                       cwd=REPO, env=env, capture_output=True, text=True)
        with open(os.path.join(self.root, "paraplan.args")) as f:
            plan, replay = f.read().splitlines()
        self.assertTrue(plan.endswith(
            "--training.micro_batch_size 2 --training.global_batch_size 8 --model.dtype bfloat16 "
            "--model.num_layers 2 --model.d_model 64 --model.num_heads 4 --model.num_kv_heads 2 "
            "--model.ffn_size 128 --model.seq_len 64 --model.vocab_size 512"), plan)
        self.assertIn("--steps 2 --warmup 1 --backend cpu", replay)
        with open(os.path.join(self.work, "llama", "runs.txt")) as f:
            self.assertEqual(f.read(), "paraplan exit 0 batches 2\ncompile exit 0 batches 2\n")


if __name__ == "__main__":
    unittest.main()
