"""device_test_fixtures.py: what the device check's tests share (device_summary_test.py,
device_states_test.py, device_phases_test.py, llmc_test.py): phase outputs as a
GPU window writes them (ncu's CSV, a crashing NCCL test's ctest log, ctest
result lines, ctest JUnit files, gtest's output of a test skipped for want of a
GPU and of one that passed, llm.c's output and a made-up train_gpt2cu that
prints it) and a helper that writes a file, making its folder.
"""
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ncu --csv --print-units base: one row per kernel and metric.
NCU_CSV = """==PROF== Connected to process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","1234","paraplan","h","nvjet_tst_128x128_64x4_h_bz_TNT","1","7","(384, 1, 1)","(66, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","2,000,000"
"1","1234","paraplan","h","attention_forward_tensor_core_kernel","1","7","(128, 1, 1)","(16, 12, 8)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","1,000,000"
"2","1234","paraplan","h","layernorm_forward_kernel","1","7","(256, 1, 1)","(64, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","500"
"""
NCCL_CRASH_LOG = """\
      Start  4: NcclCommunicator.ranks_2
 1/2 Test  #4: NcclCommunicator.ranks_2 ........................***Failed    0.40 sec
[rank 1] runtime/comm/x.cc:12: failure
mpiexec noticed that process rank 1 exited on signal 11
      Start  5: NcclCommunicator.ranks_1
 2/2 Test  #5: NcclCommunicator.ranks_1 ........................***Skipped   0.40 sec
NCCL tests skipped: no CUDA device is visible
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def ctest_line(number, name, result, total=9):
    """One ctest result line as ctest 3.25 prints it ("***" before a non-pass)."""
    return "%d/%d Test #%d: %s .........%s%s    0.10 sec\n" % (
        number, total, number, name, "   " if result == "Passed" else "***", result)


def junit(cases):
    """A ctest JUnit file: cases is [(name, status, output)]."""
    body = "".join('\t<testcase name="%s" classname="%s" time="0.1" status="%s">\n'
                   '\t\t<system-out>%s</system-out>\n\t</testcase>\n' % (name, name, status, out)
                   for name, status, out in cases)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<testsuite name="x" tests="%d">\n%s'
            '</testsuite>\n' % (len(cases), body))


GTEST_SKIPPED_NO_GPU = ("kernels/cuda/cuda_test_support.h:120: Skipped\n"
                        "no CUDA device visible: CUDA op tests skipped\n"
                        "[  SKIPPED ] Storage/CudaOps.GeluMatchesCpu/float32 (0 ms)\n"
                        "[  PASSED  ] 0 tests.\n[  SKIPPED ] 1 test, listed below:\n")
GTEST_PASSED = "[ RUN      ] X.Y\n[       OK ] X.Y (3 ms)\n[  PASSED  ] 1 test.\n"


# llm.c's lines as train_gpt2.cu (karpathy/llm.c f1e2ace) prints them: its printf0
# formats verbatim (the step line, the memory and accumulation lines, the table).
LLMC_STEP = ("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | "
             "%.1f%% bf16 MFU | %.0f tok/s\n")
LLMC_ROW = "| %-21s | %-50s |\n"
LLMC_RULE = "+-----------------------+----------------------------------------------------+\n"


def llmc_output(batch=8, global_batch=64, steps=4, ms=170.0, first_ms=530.0, seq=1024,
                device="NVIDIA H100 80GB HBM3", loss=11.0):
    """What train_gpt2cu -e d12 -b batch -d global_batch*seq -x steps prints."""
    accumulate = global_batch // batch
    text = LLMC_RULE + LLMC_ROW % ("Parameter", "Value") + LLMC_RULE
    for key, value in (("micro batch size B", batch), ("sequence length T", seq),
                       ("total batch size", global_batch * seq), ("max_steps", steps)):
        text += LLMC_ROW % (key, value)
    text += LLMC_RULE + LLMC_ROW % ("device", device) + LLMC_ROW % ("peak TFlops", "989.4")
    text += LLMC_ROW % ("precision", "BF16") + LLMC_RULE
    text += LLMC_ROW % ("weight init method", "d12") + LLMC_ROW % ("num_parameters", 124475904)
    text += LLMC_RULE
    text += "num_parameters: 124475904 => bytes: 248951808\n"
    text += "allocated 237 MiB for model parameters\n"
    text += ("batch_size B=%d * seq_len T=%d * num_processes=1 and total_batch_size=%d\n"
             "=> setting grad_accum_steps=%d\n" % (batch, seq, global_batch * seq, accumulate))
    text += "---\nWARNING: Failed to open the tokenizer file gpt2_tokenizer.bin\n---\n"
    text += "allocating 237 MiB for parameter gradients\nallocating %d MiB for activations\n" % (
        340 * batch)
    text += "allocating 474 MiB for AdamW optimizer state m\n"
    text += "allocating 474 MiB for AdamW optimizer state v\n"
    text += "allocating 474 MiB for master copy of params\n"
    text += "device memory usage: %d MiB / 81559 MiB\n" % (2600 + 340 * batch)
    text += "memory per sequence: 340 MiB\n -> estimated maximum batch size: 200\nval loss 11.01\n"
    for step in range(steps):
        took = first_ms if step == 0 else ms
        tokens = global_batch * seq / took * 1000
        text += LLMC_STEP % (step + 1, steps, loss - 0.01 * step, float("nan") if step < 2 else 0.5,
                             1.5, float("nan") if step < 2 else -0.3, 6e-4, took,
                             100 * 803478528 * tokens / 989.4e12, tokens)
    return text + "val loss 10.95\ntotal average iteration time: %f ms\n" % ms


# A made-up train_gpt2cu: checks its data shards as llm.c's loader would, then
# prints llmc_output for its flags; FAKE_LLMC_FAIL=oom prints llm.c's
# out-of-memory error and exits 1. Its first line's interpreter is python3.
FAKE_LLMC = """#!/usr/bin/env python3
import glob, os, sys
sys.path[:0] = [%r, %r]
from device_test_fixtures import llmc_output
from llmc_tokens import read_shard
flags = dict(zip(sys.argv[1::2], sys.argv[2::2]))
b, t, d, x = (int(flags[k]) for k in ("-b", "-t", "-d", "-x"))
assert flags["-e"] == "d12", flags
for pattern in (flags["-i"], flags["-j"]):
    shards = glob.glob(pattern)
    if not shards:
        print("Error: no files found matching the pattern: %%s" %% pattern)
        sys.exit(1)
    assert all(len(read_shard(s)) >= b * t + 1 for s in shards)
if os.environ.get("FAKE_LLMC_FAIL") == "oom":
    print("[CUDA ERROR] at file llmc/cuda_common.h:101:\\nout of memory")
    sys.exit(1)
sys.stdout.write(llmc_output(b, d // t, x, seq=t))
""" % (os.path.join(REPO, "scripts"), os.path.join(REPO, "samples", "gpt2_124m"))
