"""device_test_fixtures.py: what the device check's tests share (device_summary_test.py,
device_states_test.py, device_phases_test.py): phase outputs as a GPU window
writes them (ncu's CSV, a crashing NCCL test's ctest log, ctest result lines,
ctest JUnit files, gtest's output of a test skipped for want of a GPU and of
one that passed) and a helper that writes a file, making its folder.
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
