#!/usr/bin/env python3
"""llmc_test.py: llm.c beside paraplan, without a GPU: the token shards in
llm.c's format (samples/gpt2_124m/llmc_tokens.py, also read back by llm.c's own
llmc/dataloader.h when LLMC_SRC names an llm.c source folder and cc is there),
llmc_build.sh's refusals, the parser of train_gpt2cu's output and the runner (llmc_run.py, with a
made-up train_gpt2cu), llm.c's state in the device check (device_states.py:
ok, failed, timeout, absent without holding the verdict back), and the bench
phase at one global batch with accumulation (device_phases.sh phase_bench,
bench.sh, made-up paraplan, PyTorch and llm.c).

Usage: llmc_test.py   (LLMC_SRC=DIR, e.g. OUT_DIR/src of scripts/llmc_build.sh,
adds the check against llm.c's own loader)
"""
import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from device_test_fixtures import FAKE_LLMC, LLMC_STEP, REPO, llmc_output, write  # noqa: E402
import device_states  # noqa: E402
import device_summary  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "samples", "gpt2_124m"))
import llmc_run  # noqa: E402
import llmc_tokens  # noqa: E402


def fake_llmc(folder, attention="cudnn"):
    """A made-up train_gpt2cu in folder, with the llmc_build.txt the build writes."""
    path = os.path.join(folder, "train_gpt2cu")
    write(path, FAKE_LLMC)
    os.chmod(path, 0o755)
    write(os.path.join(folder, "llmc_build.txt"), "commit: f1e2ace651495b74ae22d45d1723443fd00ecd3a\n"
          "attention: %s\ncudnn: %s\n" % (attention, "yes" if attention == "cudnn" else "no"))
    return path


class Tokens(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()

    def test_a_shard_is_the_header_then_uint16_tokens(self):
        path = os.path.join(self.dir, "s.bin")
        llmc_tokens.write_shard(path, [0, 1, 50256, 65535])
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(len(data), 256 * 4 + 4 * 2)
        self.assertEqual(struct.unpack_from("<3i", data), (20240520, 1, 4))
        self.assertEqual(set(struct.unpack_from("<253i", data, 12)), {0})
        self.assertEqual(struct.unpack_from("<4H", data, 1024), (0, 1, 50256, 65535))
        self.assertEqual(list(llmc_tokens.read_shard(path)), [0, 1, 50256, 65535])

    def test_the_reader_refuses_what_the_loader_refuses(self):
        path = os.path.join(self.dir, "s.bin")
        llmc_tokens.write_shard(path, [5, 6, 7])
        with open(path, "rb") as f:
            good = f.read()
        for bad, why in ((struct.pack("<i", 20240801) + good[4:], "bad magic"),
                         (good[:4] + struct.pack("<i", 7) + good[8:], "bad version"),
                         (good[:-2], "3 tokens in the header")):
            write(path, "")
            with open(path, "wb") as f:
                f.write(bad)
            with self.assertRaisesRegex(ValueError, why):
                llmc_tokens.read_shard(path)

    def test_tokens_are_uniform_over_gpt2s_vocabulary(self):
        tokens = llmc_tokens.uniform_tokens(200000, seed=3)
        self.assertEqual(tokens.typecode, "H")
        self.assertLess(max(tokens), 50257)
        self.assertGreaterEqual(min(tokens), 0)
        self.assertAlmostEqual(sum(tokens) / len(tokens) / 25128, 1, delta=0.01)
        self.assertGreater(len(set(tokens)), 49000)
        self.assertEqual(tokens, llmc_tokens.uniform_tokens(200000, seed=3))
        self.assertNotEqual(tokens[:100], llmc_tokens.uniform_tokens(100, seed=4))

    def test_main_writes_enough_for_the_steps(self):
        need = llmc_tokens.tokens_needed(global_batch=4, seq_len=16, steps=3)
        self.assertEqual(need, 3 * 4 * 16 + 1)
        with contextlib.redirect_stdout(io.StringIO()) as out:
            self.assertEqual(llmc_tokens.main([self.dir, "--tokens", str(need)]), 0)
        self.assertIn("train_000000.bin: 193 tokens", out.getvalue())
        self.assertEqual(len(llmc_tokens.read_shard(os.path.join(self.dir, "train_000000.bin"))),
                         need)
        self.assertEqual(len(llmc_tokens.read_shard(os.path.join(self.dir, "val_000000.bin"))),
                         need)

    @unittest.skipUnless(os.path.isfile(os.path.join(os.environ.get("LLMC_SRC", "/nonexistent"),
                                                     "llmc", "dataloader.h"))
                         and shutil.which("cc"), "LLMC_SRC (llm.c's source) and cc not given")
    def test_llmcs_own_loader_reads_the_shards(self):
        llmc_tokens.write_shards(self.dir, 2 * 3 * 8 + 1, 2 * 8 + 1, seed=9)
        program = os.path.join(self.dir, "read.c")
        write(program, '#include "llmc/dataloader.h"\nint main(int c, char** v) {\n'
              '  DataLoader l; dataloader_init(&l, v[1], 2, 8, 0, 1, 0);\n'
              '  for (int s = 0; s < 3; s++) { dataloader_next_batch(&l);\n'
              '    for (int i = 0; i < 16; i++) printf("%d %d\\n", l.inputs[i], l.targets[i]); }\n'
              '  dataloader_free(&l); return 0; }\n')
        binary = os.path.join(self.dir, "read")
        subprocess.run(["cc", "-O1", "-I", os.environ["LLMC_SRC"], program, "-o", binary, "-lm"],
                       check=True)
        out = subprocess.run([binary, os.path.join(self.dir, "train_*.bin")], capture_output=True,
                             text=True, check=True).stdout
        pairs = [tuple(map(int, line.split())) for line in out.splitlines()]
        tokens = list(llmc_tokens.read_shard(os.path.join(self.dir, "train_000000.bin")))
        self.assertEqual(pairs, list(zip(tokens[:48], tokens[1:49])))


class Build(unittest.TestCase):
    """llmc_build.sh's refusals, before anything is built (a made-up nvcc)."""

    def build(self, source, out):
        bin_dir = tempfile.mkdtemp()
        write(os.path.join(bin_dir, "nvcc"), "#!/bin/sh\nexit 0\n")
        os.chmod(os.path.join(bin_dir, "nvcc"), 0o755)
        return subprocess.run(["bash", "scripts/llmc_build.sh", "--no-cudnn", source, out], cwd=REPO,
                              env=dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"]),
                              capture_output=True, text=True)

    def test_a_checkout_at_another_commit_is_refused(self):
        source = tempfile.mkdtemp()
        write(os.path.join(source, "train_gpt2.cu"), "int main() {}\n")
        git = ["git", "-C", source, "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run(git[:3] + ["init", "-q"], check=True)
        subprocess.run(git + ["add", "."], check=True)
        subprocess.run(git + ["commit", "-qm", "x"], check=True)
        result = self.build(source, tempfile.mkdtemp())
        self.assertEqual(result.returncode, 1)
        self.assertIn("not the pinned f1e2ace651495b74ae22d45d1723443fd00ecd3a", result.stderr)

    def test_a_git_directory_without_the_commit_and_an_out_dir_in_the_repository(self):
        empty = tempfile.mkdtemp()
        subprocess.run(["git", "init", "-q", "--bare", empty], check=True)
        result = self.build(empty, tempfile.mkdtemp())
        self.assertEqual(result.returncode, 1)
        self.assertIn("neither an llm.c source folder nor a git directory holding", result.stderr)
        inside = os.path.join(REPO, "samples", "llmc-build-test")
        result = self.build(empty, inside)
        self.assertEqual(result.returncode, 1)
        self.assertIn("inside this repository and not ignored", result.stderr)
        self.assertFalse(os.path.exists(inside))


class Output(unittest.TestCase):
    """train_gpt2cu's output: the parser and the figures made of it."""

    def test_the_step_lines_and_the_lines_around_them(self):
        parsed = llmc_run.parse_output(llmc_output(batch=8, global_batch=64, steps=4))
        self.assertEqual([s["step"] for s in parsed["steps"]], [1, 2, 3, 4])
        self.assertEqual([s["ms"] for s in parsed["steps"]], [530.0, 170.0, 170.0, 170.0])
        self.assertAlmostEqual(parsed["steps"][3]["loss"], 10.97)
        self.assertEqual((parsed["grad_accum_steps"], parsed["num_parameters"]), (8, 124475904))
        self.assertEqual(parsed["device"], "NVIDIA H100 80GB HBM3")
        self.assertEqual(parsed["memory_after_allocation_mib"], 2600 + 340 * 8)
        self.assertEqual(parsed["errors"], [])

    def test_the_figures_come_from_the_last_steps(self):
        parsed = llmc_run.parse_output(llmc_output(batch=16, global_batch=64, steps=4))
        result = llmc_run.summarize(parsed, 16, 64, 1024, steps=3)
        self.assertAlmostEqual(result["step_seconds"], 0.170)
        self.assertAlmostEqual(result["tokens_per_second"], 65536 / 0.170, places=3)
        self.assertAlmostEqual(result["mfu"], 803478528 * 65536 / 0.170 / 989e12)
        self.assertEqual(result["losses"], [10.99, 10.98, 10.97])
        self.assertEqual((result["batch_size"], result["global_batch_size"],
                          result["grad_accum_steps"]), (16, 64, 4))

    def test_llmcs_formula_is_the_anchor(self):
        # /work/shared/perf-anchors.md: 803.5 MFLOP per token; 50% MFU = 615k tokens/s.
        per_token = llmc_run.flops_per_token(**llmc_run.GPT2_124M)
        self.assertEqual(per_token, 803478528)
        self.assertEqual(per_token, device_summary.LLMC_FLOPS_PER_TOKEN)
        self.assertEqual(round(0.5 * 989e12 / per_token, -3), 615000)

    def test_too_few_steps_say_why(self):
        text = llmc_output(steps=2) + "[CUDA ERROR] at file llmc/cuda_common.h:101:\nout of memory\n"
        with self.assertRaisesRegex(ValueError, "2 step line.*3 timed steps wanted: out of memory"):
            llmc_run.summarize(llmc_run.parse_output(text), 8, 64, 1024, steps=3)

    @unittest.skipUnless(shutil.which("cc"), "no C compiler")
    def test_cs_printf_of_nan_and_padding_parses(self):
        # The step format through C's printf (glibc prints NaN as "nan", "-nan", "+nan").
        folder = tempfile.mkdtemp()
        source = os.path.join(folder, "p.c")
        fmt = LLMC_STEP.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        write(source, '#include <math.h>\n#include <stdio.h>\nint main(void) {\n'
              '  printf("%s", 1, 3, (float)NAN, (float)NAN, -(float)NAN, (float)NAN, 6e-4f, 99.5f,'
              ' 12.3f, 1000.0f);\n  printf("%s", 2, 3, 9.5f, 0.0f, 0.25f, -1.0f, 6e-4f, 12.25f,'
              ' -100.0f, 5.0e6f);\n  return 0; }\n' % (fmt, fmt))
        subprocess.run(["cc", source, "-o", os.path.join(folder, "p")], check=True)
        out = subprocess.run([os.path.join(folder, "p")], capture_output=True, text=True).stdout
        steps = llmc_run.parse_output(out)["steps"]
        self.assertEqual(len(steps), 2, out)
        self.assertNotEqual(steps[0]["loss"], steps[0]["loss"])  # NaN
        self.assertEqual((steps[1]["loss"], steps[1]["ms"], steps[1]["mfu_printed"]),
                         (9.5, 12.25, -1.0))


class Runner(unittest.TestCase):
    """llmc_run.py over a made-up train_gpt2cu."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.binary = fake_llmc(os.path.join(self.dir, "llmc"))
        self.json = os.path.join(self.dir, "b8.llmc.json")

    def run_main(self, *extra, env=None):
        argv = ["--binary", self.binary, "--batch-size", "8", "--global-batch", "64", "--steps",
                "3", "--warmup", "1", "--data", os.path.join(self.dir, "data"), "--json",
                self.json] + list(extra)
        with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(io.StringIO()):
            return llmc_run.main(argv)

    def test_a_run_writes_the_bench_json(self):
        self.assertEqual(self.run_main(), 0)
        with open(self.json) as f:
            result = json.load(f)
        self.assertAlmostEqual(result["tokens_per_second"], 65536 / 0.170, places=3)
        self.assertEqual(result["attention"], "cudnn")
        self.assertEqual(result["commit"][:7], "f1e2ace")
        self.assertEqual(len(result["losses"]), 3)
        self.assertEqual(result["grad_accum_steps"], 8)
        command = result["command"]
        for flag, value in (("-e", "d12"), ("-b", "8"), ("-d", "65536"), ("-t", "1024"),
                            ("-x", "4"), ("-s", "0"), ("-n", "0"), ("-h", "0")):
            self.assertEqual(command[command.index(flag) + 1], value)
        # No nvidia-smi here: llm.c's own figure after it allocated its state.
        self.assertAlmostEqual(result["peak_memory_gib"], (2600 + 340 * 8) / 1024)

    def test_a_failed_run_exits_1_and_says_why(self):
        with mock.patch("sys.stderr") as stderr:
            self.assertEqual(self.run_main(env={"FAKE_LLMC_FAIL": "oom"}), 1)
        self.assertIn("llm.c exited 1: out of memory", "".join(
            call.args[0] for call in stderr.write.call_args_list))
        self.assertFalse(os.path.exists(self.json))

    def test_without_libcudnn_the_kernels_build_runs(self):
        fallback = os.path.join(os.path.dirname(self.binary), "train_gpt2cu_kernels")
        shutil.copy(self.binary, fallback)
        missing = lambda binary, env: ["libcudnn.so.9"] if binary == self.binary else []  # noqa
        with mock.patch.object(llmc_run, "missing_libraries", missing):
            self.assertEqual(self.run_main(), 0)
        with open(self.json) as f:
            result = json.load(f)
        self.assertEqual(result["attention"], "llm.c kernels (no libcudnn.so.9 on this machine)")
        self.assertEqual(result["command"][0], fallback)


class States(unittest.TestCase):
    """llm.c's own state in the bench phase."""

    def setUp(self):
        self.work = tempfile.mkdtemp()

    def bench(self, llmc_record, jsons=None, logs=None, mode="device"):
        write(os.path.join(self.work, "check.txt"), "mode: %s\nphases: bench\n" % mode)
        ours = {"tokens_per_second_measured": 3e5, "each_step_loss": [10.9]}
        torch = {"tokens_per_second": 2e5, "losses": [10.9]}
        files = {"b8.paraplan.json": ours, "b8.eager.json": torch, "b8.compile.json": torch}
        files.update(jsons or {})
        for name, value in files.items():
            write(os.path.join(self.work, "bench", name), json.dumps(value))
        for name, text in (logs or {}).items():
            write(os.path.join(self.work, "bench", name), text)
        write(os.path.join(self.work, "bench", "runs.txt"), "paraplan exit 0 batches 8\n"
              "eager exit 0 batches 8\ncompile exit 0 batches 8\n%s\n" % llmc_record)
        write(os.path.join(self.work, "progress.txt"), "bench ended 3 exit 0 (limit 150 s)\n")
        rows, rehearsal = device_states.phase_states(self.work)
        subs = {sub: (state, note) for sub, state, note in rows[0][4]}
        return rows[0][1], subs["llmc"], device_states.verdict(rows, rehearsal)

    LLMC = {"b8.llmc.json": {"tokens_per_second": 4e5, "losses": [10.9, 10.8],
                             "attention": "cudnn"}}

    def test_figures_are_ok_and_name_the_attention(self):
        state, (llmc, note), verdict = self.bench("llmc exit 0 batches 8", self.LLMC)
        self.assertEqual((state, llmc, verdict), ("ok", "ok", ("ok", "")))
        self.assertEqual(note, "B=8 400,000 tokens/s (attention: cudnn)")

    def test_a_run_without_figures_fails_with_its_reason(self):
        state, (llmc, note), verdict = self.bench(
            "llmc exit 0 batches 8", logs={"b8.llmc.log": "llmc_run.py: llm.c exited 1: out of "
                                                          "memory\n"})
        self.assertEqual((state, llmc, verdict[0]), ("failed", "failed", "not ok"))
        self.assertIn("no figures for B=8: llmc_run.py: llm.c exited 1: out of memory", note)

    def test_a_non_finite_loss_and_a_timeout_fail(self):
        nan = {"b8.llmc.json": {"tokens_per_second": 4e5, "losses": [10.9, float("nan")]}}
        self.assertEqual(self.bench("llmc exit 0 batches 8", nan)[1][0], "failed")
        self.assertEqual(self.bench("llmc exit 124 batches 8")[1][0], "timeout")

    def test_absent_holds_neither_the_phase_nor_the_verdict_back(self):
        for mode in ("device", "rehearsal"):
            state, (llmc, _), verdict = self.bench("llmc absent no .device/llmc/train_gpt2cu",
                                                   mode=mode)
            self.assertEqual((state, llmc, verdict[0]), ("ok", "absent", "ok"))
            self.assertIn("llm.c", verdict[1])

    def test_a_bench_that_never_reached_llmc_is_not_ok(self):
        state, (llmc, _), verdict = self.bench("")
        self.assertEqual((state, llmc, verdict[0]), ("not run", "not run", "not ok"))


class BenchPhase(unittest.TestCase):
    """phase_bench at GLOBAL_BATCH 16 over BATCHES "8 16": what each system is asked."""

    def test_every_system_runs_at_the_global_batch(self):
        root = tempfile.mkdtemp()
        work, bin_dir = os.path.join(root, "work"), os.path.join(root, "bin")
        os.makedirs(os.path.join(work, "bench"))
        paraplan = os.path.join(bin_dir, "paraplan")
        write(paraplan, """#!/bin/bash
echo "$*" >>%s/paraplan.args
while [ $# -gt 0 ]; do case $1 in --output) touch "$2" ;; --report) echo \\
  '{"tokens_per_second_measured": 300000, "each_step_loss": [10.9], "micro_batch_size": 8,
    "num_micro_batches": 2, "peak_memory_bytes": {"measured": 2147483648}}' >"$2" ;; esac; shift; done
""" % root)
        python = os.path.join(bin_dir, "python")
        write(python, """#!/bin/bash
case "$1" in
  -|*llmc_run.py) exec python3 "$@" ;;
  *) echo "$*" >>%s/torch.args; echo "ModuleNotFoundError: No module named 'torch'" >&2; exit 1 ;;
esac
""" % root)
        for path in (paraplan, python):
            os.chmod(path, 0o755)
        write(os.path.join(work, "check.txt"), "mode: device\nphases: bench\n")
        env = dict(os.environ, work=work, build=root, rehearse="0", BATCHES="8 16",
                   COMPILE_BATCHES="8 16", GLOBAL_BATCH="16", paraplan=paraplan, python=python,
                   LLMC=fake_llmc(os.path.join(root, "llmc")))
        rc = subprocess.run(["bash", "-c", "source scripts/device_phases.sh && phase_bench"],
                            cwd=REPO, env=env, capture_output=True, text=True).returncode
        write(os.path.join(work, "progress.txt"), "bench ended 1 exit %d (limit 150 s)\n" % rc)
        rows, _ = device_states.phase_states(work)
        self.assertEqual({sub: state for sub, state, _ in rows[0][4]}, {
            "paraplan": "ok", "eager": "absent", "compile": "absent", "llmc": "ok"})
        with open(os.path.join(root, "paraplan.args")) as f:
            plans = [line for line in f if line.startswith("plan ")]
        self.assertEqual(len(plans), 2)
        self.assertTrue(all("--training.global_batch_size 16" in line for line in plans))
        with open(os.path.join(root, "torch.args")) as f:
            torch_runs = f.read().splitlines()
        self.assertEqual(len(torch_runs), 4)  # eager and compile at 8 and 16
        self.assertTrue(all("--global-batch-size 16" in line for line in torch_runs))
        with open(os.path.join(work, "bench", "b8.llmc.json")) as f:
            self.assertEqual(json.load(f)["grad_accum_steps"], 2)
        text = "\n".join(device_summary.bench(work))
        self.assertIn("global batch 16 sequences", text)
        self.assertRegex(text, r"\n +8 +300,000 +24\.4% +2\.0 +- +- +- +96,376 +7\.8% +5\.2\n")
        self.assertIn("llm.c: attention cudnn, commit f1e2ace651, 2 micro-batch(es) a step", text)
        self.assertIn("best: paraplan B=", text)

    def test_bench_refuses_a_global_batch_that_is_not_a_multiple(self):
        result = subprocess.run(["bash", "samples/gpt2_124m/bench.sh"], cwd=REPO, env=dict(
            os.environ, GLOBAL_BATCH="24", BATCHES="16", OUT=tempfile.mkdtemp()),
            capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn("GLOBAL_BATCH 24 is not a multiple of the micro-batch 16", result.stderr)


if __name__ == "__main__":
    unittest.main()
