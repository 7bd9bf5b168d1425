#!/usr/bin/env python3
"""parquet_check.py: `paraplan tokenize` of Parquet files against the same
documents as a .jsonl, for tests/parquet_test.cc:

  parquet_check.py PARAPLAN TOKENIZER WORK

pyarrow writes one table (ids, and texts of every script, white space,
empty texts and nulls, one of 300 kB) in the forms Hugging Face datasets
and datatrove produce and their variants: SNAPPY (pyarrow's default), ZSTD,
uncompressed, without a dictionary, data pages v2, many row groups of small
pages, a required column, and the DELTA encodings Spark writes. Each, tokenized with TOKENIZER, must give the
.jsonl's tokens exactly (the nulls and empty texts are no documents), and
with a validation fraction a validation split that starts at a document.
It also writes the files paraplan refuses (GZIP, a nested text column, a
cut file) for the C++ test to check the messages. Prints one JSON object.
"""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def read_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    dtype = np.uint16 if header[0] == 20240520 else np.uint32
    return np.fromfile(path, dtype=dtype, offset=1024).tolist()


def tokenize(paraplan, tokenizer, inputs, out, val_fraction):
    run = subprocess.run([paraplan, "tokenize", "--tokenizer", tokenizer, "--output", out,
                          "--val-fraction", str(val_fraction), "--threads", "2"] +
                         sum((["--input", i] for i in inputs), []), capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"{inputs}: paraplan tokenize failed:\n{run.stdout}{run.stderr}")
    return read_tokens(out + "/train.bin"), read_tokens(out + "/val.bin")


def main():
    paraplan, tokenizer, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    random.seed(20261207)
    pieces = ["Hello", " world", "caf\u00e9", "\u6771\u4eac", "\U0001F642", "\n", "\n\n", "  ",
              "\t", "don't", "1234", "\u0645\u0631\u062d\u0628\u0627", "x=y;", "..."]
    texts = ["".join(random.choice(pieces) for _ in range(random.randint(0, 400)))
             for _ in range(4000)]
    texts[3], texts[40], texts[41] = None, None, ""
    texts[100] = "long document " * 20000  # 280 kB: pages of one value
    table = pa.table({"id": list(range(len(texts))), "text": texts,
                      "url": [f"https://example.com/{i}" for i in range(len(texts))]})
    with open(os.path.join(work, "docs.jsonl"), "w", encoding="utf-8") as out:
        for text in texts:
            if text:
                out.write(json.dumps({"text": text}) + "\n")
    forms = {"snappy": {}, "zstd": {"compression": "zstd"}, "none": {"compression": "none"},
             "plain": {"use_dictionary": False}, "v2": {"data_page_version": "2.0"},
             "groups": {"row_group_size": 300, "data_page_size": 2048},
             "v2_zstd_groups": {"data_page_version": "2.0", "compression": "zstd",
                                "row_group_size": 700},
             # Spark's and parquet-mr's encodings of strings.
             "delta": {"use_dictionary": False, "column_encoding": {"text": "DELTA_BYTE_ARRAY"},
                       "data_page_size": 4096},
             "delta_length_v2_zstd": {"use_dictionary": False, "data_page_version": "2.0",
                                      "compression": "zstd",
                                      "column_encoding": {"text": "DELTA_LENGTH_BYTE_ARRAY"}}}
    for name, options in forms.items():
        pq.write_table(table, os.path.join(work, name + ".parquet"), **options)
    required = pa.table({"text": [t for t in texts if t is not None]},
                        schema=pa.schema([pa.field("text", pa.string(), nullable=False)]))
    pq.write_table(required, os.path.join(work, "required.parquet"))
    forms["required"] = {}
    # What paraplan refuses, for the C++ test.
    pq.write_table(table, os.path.join(work, "gzip.parquet"), compression="gzip")
    nested = pa.table({"meta": pa.array([{"text": t} for t in texts[:10]])})
    pq.write_table(nested, os.path.join(work, "nested.parquet"))
    with open(os.path.join(work, "snappy.parquet"), "rb") as whole, \
            open(os.path.join(work, "cut.parquet"), "wb") as cut:
        cut.write(whole.read()[:-100])

    expected, _ = tokenize(paraplan, tokenizer, [os.path.join(work, "docs.jsonl")],
                           os.path.join(work, "out-jsonl"), 0)
    results = {"tokens": len(expected), "forms": {}}
    for name in forms:
        got, _ = tokenize(paraplan, tokenizer, [os.path.join(work, name + ".parquet")],
                          os.path.join(work, "out-" + name), 0)
        results["forms"][name] = got == expected
    # A validation split: after the training tokens, from a document's start.
    train, val = tokenize(paraplan, tokenizer, [os.path.join(work, "groups.parquet")],
                          os.path.join(work, "out-split"), 0.1)
    separator = expected[0]
    results["split"] = (train + val == expected and len(val) > 0 and val[0] == separator and
                        0.8 * len(expected) < len(train) < 0.97 * len(expected))
    print(json.dumps(results))
    if not all(results["forms"].values()) or not results["split"]:
        raise SystemExit(f"paraplan's tokens differ: {results}")


if __name__ == "__main__":
    main()
