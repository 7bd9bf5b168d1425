"""device_readers.py: the readers of the files the device check's phases leave
(scripts/device_check.sh, scripts/device_phases.sh), shared by the summary
table (device_summary.py) and the phases' states (device_states.py): text and
JSON files, ctest's log and JUnit, a run's last line, a phase's runs.txt, and
ncu's CSV. Standard library only; each returns None, {} or [] for a file that
is missing or unreadable.
"""
import csv
import json
import os
import re
import xml.etree.ElementTree as ElementTree


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def load_jsonl(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


# "12/75 Test #261: Storage/CudaOps.GeluMatchesCpu/float32  # GetParam() = ... ....***Skipped   0.15 sec"
CTEST_LINE = re.compile(r"Test +#\d+: (.+?)(?:  # GetParam\(\).*?)? \.*\s*(\*\*\*)?(Passed|Failed|"
                        r"Skipped|Timeout|Not Run|Exception: [\w ]+?|SegFault|Subprocess aborted)"
                        r"\s+[\d.]+ sec")


def ctest_results(path):
    text = read(path)
    if text is None:
        return None
    return {name: state for name, _, state in CTEST_LINE.findall(text)}, text


def junit_outputs(path):
    """Each test's output in a ctest JUnit file, by ctest's name (GetParam() cut)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return {}
    return {re.sub(r"  # GetParam\(\).*", "", case.get("name", "?")):
            "".join(node.text or "" for node in case.iter("system-out"))
            for case in root.iter("testcase")}


# gtest's own summary when every test it ran skipped (GTEST_SKIP exits 0: ctest says Passed).
GTEST_NONE_PASSED = re.compile(r"^\[  PASSED  \] 0 tests", re.MULTILINE)
# The skips of a test that needs a GPU and sees none (kernels/cuda/cuda_test_support.h,
# the NCCL and training tests).
NO_GPU = re.compile(r"no CUDA device (?:is )?visible")


def test_outcomes(work, log_name, junit_name):
    """{name: state} of one ctest run with GTEST_SKIPs counted as Skipped, the
    log's text, and each test's output (JUnit, else the log's lines after it)."""
    results = ctest_results(os.path.join(work, "tests", log_name))
    if results is None:
        return None
    states, text = results
    outputs = junit_outputs(os.path.join(work, "tests", junit_name))
    for name, state in states.items():
        if name not in outputs:
            outputs[name] = "\n".join(test_body(text, name))
        if state == "Passed" and GTEST_NONE_PASSED.search(outputs[name]):
            states[name] = "Skipped"
    return states, text, outputs


# What ctest printed for one test (--output-on-failure): the lines after its
# result line, up to the next test's.
NEXT_TEST = re.compile(r"^\s*(?:Start +\d+:|\d+/\d+ Test +#\d+:)")


def test_body(text, name):
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines)
                  if CTEST_LINE.search(line) and CTEST_LINE.search(line).group(1) == name), None)
    if start is None:
        return []
    body = []
    for line in lines[start + 1:]:
        if NEXT_TEST.match(line):
            break
        if line.strip():
            body.append(line.rstrip()[:160])
    return body


def records(path):
    """A phase's runs.txt: {name: (kind, rc or None, rest)}, kind exit|absent|failed."""
    found = {}
    for line in (read(path) or "").splitlines():
        match = re.match(r"(\S+) (exit|absent|failed)\b ?(.*)", line.strip())
        if not match:
            continue
        name, kind, rest = match.groups()
        rc = None
        if kind == "exit":
            number = re.match(r"(\d+)\s*(.*)", rest)
            rc, rest = (int(number.group(1)), number.group(2)) if number else (None, rest)
        found[name] = (kind, rc, rest)
    return found


def last_line(path):
    lines = [line for line in (read(path) or "").strip().splitlines() if line.strip()]
    return lines[-1].strip()[:100] if lines else ""


UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0}


def ncu_kernels(path):
    """(kernel name, seconds) of every gpu__time_duration row of an ncu --csv log."""
    text = read(path)
    if not text:
        return []
    rows = [line for line in text.splitlines() if line.startswith('"')]
    kernels = []
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            value = float((row.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        kernels.append((row.get("Kernel Name", "?"), value * UNITS.get(row.get("Metric Unit"), 1e-9)))
    return kernels
