#!/usr/bin/env python3
"""tokenizer_check.py: `paraplan tokenize --tokenizer` against tiktoken,
sentencepiece and Hugging Face's tokenizers, on GPT-2's, Llama 3's and
Mistral's real vocabularies, for tests/real_tokenizers_test.cc:

  tokenizer_check.py PARAPLAN ASSETS WORK
  tokenizer_check.py json gpt2|llama3|qwen2|mistral_v1 ASSETS OUT.json
      (that tokenizer.json only)
  tokenizer_check.py converted gpt2|llama3|mistral_v1 ASSETS FILE.json
      A tokenizer.json paraplan converted from the tiktoken file (or the
      SentencePiece model): the same vocabulary, merges (in order), special
      tokens and pattern (normalizers, decoder) as this script's
      (transformers'); Hugging Face's encoding of it equals tiktoken's
      (sentencepiece's) on pieces of the README, and transformers'
      AutoTokenizer loads it from the checkpoint directory it is in and
      encodes the same.
  tokenizer_check.py bench PARAPLAN ASSETS WORK [MB]
      Speed: paraplan tokenize on 1 and 2 threads against tiktoken's
      encode_ordinary (one thread) and encode_ordinary_batch (2), and Hugging
      Face's encode_batch, on MB megabytes (default 40) of README-derived
      text in 10 kB documents; prints MB/s each.

ASSETS holds gpt2.tiktoken (openai-whisper's copy) and llama3.tiktoken
(llama-models' Llama 3 tokenizer.model), as scripts/install_dependencies.sh
fetches them. From their ranks this builds the tokenizer.json files Hugging
Face publishes for such models (vocab in ByteLevel's alphabet, merges in
priority order): GPT-2's (ByteLevel's own pattern), Llama 3's (a Split, then
ByteLevel, ignore_merges) and one shaped as Qwen 2's (its NFC normalizer and
pattern) over GPT-2's vocab.
Hugging Face's encoding of each is checked against tiktoken's where both
exist, so the files are what the models ship. ASSETS also holds Mistral's
SentencePiece models (mistral-common's copies): mistral_v1.model, Mistral 7B
v0.1's (Llama 2's kind: 32,000 pieces with byte fallback), and
mistral_v3.model (32,768, with its control tokens). transformers converts
them to tokenizer.json as Mistral's repositories ship it (legacy: the
normalizers Prepend and Replace) and in its newer form (the pre-tokenizer
Metaspace); Hugging Face's encoding is checked against sentencepiece's.
mistral_v1.model itself is read by paraplan too, against sentencepiece.

WORK gets a corpus: a .jsonl of varied documents (scripts, digits, white
space, contractions, emoji, combining marks) and a 3 MB text file (encoded in
chunks on several threads). Each tokenizer file is given to `paraplan
tokenize`, and train.bin + val.bin must be exactly the reference's
[separator] + encode(document) for every document, the validation split
starting at a document (the first ending past 90% of the input's bytes).
Prints one JSON object: per file, tokens and
paraplan's time against the reference's.
"""
import json
import os
import random
import subprocess
import sys
import time
import unicodedata

import numpy as np
import tiktoken
from tiktoken.load import load_tiktoken_bpe
from tokenizers import Tokenizer

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"""
          r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|step_id|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
                   "<|python_tag|>", "<|image|>"]


def byte_level_alphabet():
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    table, extra = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def merges_of(ranks):
    """Each token of two bytes or more as the pair BPE reaches just below its
    rank (how Hugging Face converts tiktoken files); tokens no merge reaches
    are left out, as in Llama 3's tokenizer.json."""
    merges = []
    for token, rank in ranks.items():
        if len(token) == 1:
            continue
        parts = [bytes([b]) for b in token]
        while len(parts) > 2:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        if len(parts) == 2:
            merges.append((rank, parts))
    merges.sort()
    return [parts for _, parts in merges]


def tokenizer_json(ranks, specials, pattern, ignore_merges):
    alphabet = byte_level_alphabet()
    text = lambda token: "".join(alphabet[b] for b in token)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": pattern is None}
    pre = byte_level if pattern is None else {
        "type": "Sequence",
        "pretokenizers": [{"type": "Split", "pattern": {"Regex": pattern},
                           "behavior": "Isolated", "invert": False}, byte_level]}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for c, i in specials.items()],
        "normalizer": None, "pre_tokenizer": pre, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": {text(t): r for t, r in ranks.items()},
                  "merges": [text(a) + " " + text(b) for a, b in merges_of(ranks)]},
    }


def corpus(work, source_text):
    random.seed(20261207)
    pieces = ["Hello", " world", "'s", "'S", "'\u017f", "'RE", "'ll", "'LL", "'ve", " ", "  ",
              "\t", "\n", "\r\n", "\n\n", " \n ", "\u00a0", "\u3000", "123", "4567890", " 42",
              "\u0661\u0662\u0663", "\u00b2", "\u00bd", "caf\u00e9", "cafe\u0301", "\u6771\u4eac",
              "\U0001F642", "\U0001F44D\U0001F3FD", "!!!", "...", " ...", "\u2014", "x=y+z;",
              "==\n", "#include <x>", "\u200b", "\u2028", "\u03a9\u03bc\u03ad\u03b3\u03b1",
              "\u041f\u0440\u0438\u0432\u0435\u0442", "\u092e\u0928\u0941\u0937\u094d\u092f",
              "don't", "DON'T", "I'm", "\x0b", "\x0c", "\x1c", "\u0085", "\u01c5", "$100.00",
              "\ufeff", "\U0001D518\U0001D52B", " \t\n", "\n\t", "ab\u0300c", "\ufb01",
              "\u0130stanbul", "<|endoftext|>", "<s>", "\u2581x", "\u2581\u2581 ",
              # for NFC: marks out of order, a singleton, an exclusion, Hangul jamo
              "a\u0302\u0323", "\u212b", "\u0958", "\u1100\u1161\u11a8", "o\u0308\u0304"]
    words = source_text.split(" ")
    documents = []
    for n in range(300):
        parts = []
        for _ in range(random.randint(1, 200)):
            if random.random() < 0.5:
                parts.append(random.choice(pieces))
            else:
                start = random.randrange(len(words))
                parts.append(" ".join(words[start:start + random.randint(1, 30)]))
        documents.append("".join(parts))
    documents[7] = " " * 3000 + "=" * 5000 + "9" * 500  # long runs
    ends, end = [], 0  # where each document's bytes end in the input
    with open(os.path.join(work, "docs.jsonl"), "w", encoding="utf-8") as out:
        for document in documents:
            line = json.dumps({"id": len(documents), "text": document}) + "\n"
            out.write(line)
            end += len(line.encode("utf-8"))
            ends.append(end)
    big = (source_text + "".join(random.choice(pieces) for _ in range(2000)) + "\n")
    big = big * (3_000_000 // len(big) + 1)
    with open(os.path.join(work, "big.txt"), "w", encoding="utf-8", newline="") as out:
        out.write(big)
    ends.append(end + len(big.encode("utf-8")))
    return documents + [big], ends


# (tokenizer.json written, SentencePiece model in ASSETS, transformers' legacy form)
SENTENCEPIECE = [("mistral_v1.json", "mistral_v1.model", True),
                 ("mistral_v3.json", "mistral_v3.model", False)]


def sentencepiece_json(model_path, legacy, out_path):
    """The tokenizer.json transformers converts a SentencePiece model to:
    legacy, as Mistral's and Llama 2's repositories ship it (the normalizers
    Prepend and Replace), or not (the pre-tokenizer Metaspace, "first")."""
    import warnings
    from transformers import LlamaTokenizerFast
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = LlamaTokenizerFast(vocab_file=model_path, legacy=legacy, add_prefix_space=True,
                                  from_slow=True)
    fast.backend_tokenizer.save(out_path)


def sentencepiece_files(assets, work, documents):
    """Each SentencePiece tokenizer.json: (path, its <s>, its ordinary
    encoding), Hugging Face's checked against sentencepiece's own."""
    import sentencepiece
    files = []
    for name, model, legacy in SENTENCEPIECE:
        path = os.path.join(work, name)
        sentencepiece_json(os.path.join(assets, model), legacy, path)
        hugging_face = Tokenizer.from_file(path)
        hugging_face.encode_special_tokens = True  # "<s>" in the text is text, as in paraplan
        encode = lambda text, t=hugging_face: t.encode(text, add_special_tokens=False).ids
        processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(assets, model))
        for document in documents[:50]:
            # The newer form adds no prefix space before a space.
            if legacy or not document.startswith((" ", "\u2581")):
                if encode(document) != processor.encode(document):
                    raise SystemExit(f"{name}: Hugging Face and sentencepiece disagree; the "
                                     f"test's conversion is wrong")
        files.append((path, hugging_face.token_to_id("<s>"), encode))
    # SentencePiece's own file, read by paraplan (v3's has USER_DEFINED
    # pieces, which paraplan refuses).
    model = os.path.join(assets, "mistral_v1.model")
    files.append((model, 1, sentencepiece.SentencePieceProcessor(model_file=model).encode))
    return files


def read_tokens(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    dtype = np.uint16 if header[0] == 20240520 else np.uint32
    tokens = np.fromfile(path, dtype=dtype, offset=1024)
    assert len(tokens) == header[2], path
    return tokens.tolist()


def check(paraplan, tokenizer_file, work, documents, ends, separator, encode):
    out = os.path.join(work, "out-" + os.path.basename(tokenizer_file))
    start = time.time()
    run = subprocess.run([paraplan, "tokenize", "--tokenizer", tokenizer_file, "--input",
                          os.path.join(work, "docs.jsonl"), "--input", os.path.join(work, "big.txt"),
                          "--output", out, "--threads", "2"], capture_output=True, text=True)
    seconds = time.time() - start
    if run.returncode != 0:
        raise SystemExit(f"{tokenizer_file}: paraplan tokenize failed:\n{run.stdout}{run.stderr}")
    start = time.time()
    expected = [[separator] + encode(document) for document in documents]
    reference_seconds = time.time() - start
    train, val = read_tokens(out + "/train.bin"), read_tokens(out + "/val.bin")
    # Validation: the documents (not the first) ending past 90% of the input.
    first_val = next(i for i, end in enumerate(ends) if i > 0 and end > 0.9 * ends[-1])
    for name, got, want in (("train", train, sum(expected[:first_val], [])),
                            ("val", val, sum(expected[first_val:], []))):
        if got != want:
            at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                      min(len(got), len(want)))
            raise SystemExit(f"{tokenizer_file}: {name}.bin differs at token {at} of "
                             f"{len(want)} (got {len(got)}): {got[at - 3:at + 5]} against "
                             f"{want[at - 3:at + 5]}")
    return {"tokens": len(train) + len(val), "validation_documents": len(documents) - first_val,
            "paraplan_seconds": round(seconds, 3), "reference_seconds": round(reference_seconds, 3),
            "output": run.stdout}


def bench(paraplan, assets, work, megabytes):
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md"),
              encoding="utf-8") as readme:
        words = readme.read().split(" ")
    random.seed(1)
    documents = []
    size = 0
    while size < megabytes * 1e6:
        start = random.randrange(len(words))
        document = " ".join(words[start:start + 1500])
        documents.append(document)
        size += len(document.encode("utf-8"))
    corpus = os.path.join(work, "bench.jsonl")
    with open(corpus, "w", encoding="utf-8") as out:
        for document in documents:
            out.write(json.dumps({"text": document}) + "\n")
    ranks = load_tiktoken_bpe(os.path.join(assets, "gpt2.tiktoken"))
    encoding = tiktoken.Encoding("gpt2", pat_str=GPT2, mergeable_ranks=ranks, special_tokens={})
    figures = {"megabytes": round(size / 1e6, 1)}
    for threads in (1, 2):
        start = time.time()
        subprocess.run([paraplan, "tokenize", "--tokenizer", os.path.join(assets, "gpt2.tiktoken"),
                        "--input", corpus, "--output", os.path.join(work, "bench-out"),
                        "--threads", str(threads)], check=True, capture_output=True)
        figures[f"paraplan_{threads}_thread_mb_s"] = round(size / 1e6 / (time.time() - start), 1)
    start = time.time()
    for document in documents:
        encoding.encode_ordinary(document)
    figures["tiktoken_1_thread_mb_s"] = round(size / 1e6 / (time.time() - start), 1)
    start = time.time()
    encoding.encode_ordinary_batch(documents, num_threads=2)
    figures["tiktoken_2_threads_mb_s"] = round(size / 1e6 / (time.time() - start), 1)
    path = os.path.join(work, "gpt2.json")
    with open(path, "w", encoding="utf-8") as out:
        json.dump(tokenizer_json(ranks, {"<|endoftext|>": 50256}, None, False), out)
    hugging_face = Tokenizer.from_file(path)
    start = time.time()
    hugging_face.encode_batch(documents, add_special_tokens=False)
    figures["hugging_face_batch_mb_s"] = round(size / 1e6 / (time.time() - start), 1)
    print(json.dumps(figures))


def readme_samples(count):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md"),
              encoding="utf-8") as readme:
        text = readme.read()
    samples = [text[i:i + 2000] for i in range(0, min(len(text), 2000 * count), 2000)]
    return samples + ["caf\u00e9 \u6771\u4eac 2026\n\n  x", "\U0001F44D\U0001F3FD don't DON'T"]


def converted_sentencepiece(which, assets, path):
    """paraplan's tokenizer.json of a SentencePiece model against
    transformers' conversion of it and sentencepiece's encoding."""
    import sentencepiece
    from transformers import AutoTokenizer
    model = os.path.join(assets, which + ".model")
    import tempfile
    reference_path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    sentencepiece_json(model, True, reference_path)
    with open(reference_path, encoding="utf-8") as file:
        reference = json.load(file)
    with open(path, encoding="utf-8") as file:
        mine = json.load(file)
    pair = lambda m: tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
    checks = {
        "vocab": mine["model"]["vocab"] == reference["model"]["vocab"],
        "merges": [pair(m) for m in mine["model"]["merges"]] ==
                  [pair(m) for m in reference["model"]["merges"]],
        "added_tokens": sorted((t["id"], t["content"]) for t in mine["added_tokens"]) ==
                        sorted((t["id"], t["content"]) for t in reference["added_tokens"]),
        "normalizer": mine["normalizer"] == reference["normalizer"],
        "pre_tokenizer": mine["pre_tokenizer"] == reference["pre_tokenizer"],
        "decoder": mine["decoder"] == reference["decoder"],
        "model_options": all(mine["model"].get(k) == reference["model"].get(k) for k in (
            "type", "unk_token", "fuse_unk", "byte_fallback", "dropout",
            "continuing_subword_prefix", "end_of_word_suffix")),
    }
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    hugging_face = Tokenizer.from_file(path)
    hugging_face.encode_special_tokens = True
    samples = readme_samples(30)
    checks["encodes_as_sentencepiece"] = all(
        hugging_face.encode(t, add_special_tokens=False).ids == processor.encode(t)
        for t in samples)
    auto = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)))
    checks["auto_tokenizer"] = all(
        auto(t, add_special_tokens=False)["input_ids"] == processor.encode(t) for t in samples[:5])
    print(json.dumps(checks))
    if not all(checks.values()):
        raise SystemExit(f"{path}: differs from the reference: {checks}")


def converted(which, assets, path):
    if which.startswith("mistral"):
        converted_sentencepiece(which, assets, path)
        return
    ranks = load_tiktoken_bpe(os.path.join(assets, which + ".tiktoken"))
    if which == "gpt2":
        specials, pattern = {"<|endoftext|>": 50256}, GPT2
    else:
        names = LLAMA3_SPECIALS + [f"<|reserved_special_token_{2 + i}|>" for i in range(244)]
        specials, pattern = {n: 128000 + i for i, n in enumerate(names)}, LLAMA3
    reference = tokenizer_json(ranks, specials, None if which == "gpt2" else LLAMA3, True)
    with open(path, encoding="utf-8") as file:
        mine = json.load(file)
    merge_text = lambda m: m if isinstance(m, str) else " ".join(m)
    checks = {
        "vocab": mine["model"]["vocab"] == reference["model"]["vocab"],
        "merges": [merge_text(m) for m in mine["model"]["merges"]] ==
                  reference["model"]["merges"],
        "added_tokens": sorted((t["id"], t["content"]) for t in mine["added_tokens"]) ==
                        sorted((t["id"], t["content"]) for t in reference["added_tokens"]),
        "pre_tokenizer": mine["pre_tokenizer"] == reference["pre_tokenizer"],
    }
    encoding = tiktoken.Encoding(which, pat_str=pattern, mergeable_ranks=ranks,
                                 special_tokens=specials)
    hugging_face = Tokenizer.from_file(path)
    samples = readme_samples(30)
    for special in specials:  # Hugging Face's encode finds them in the text; tiktoken's does not
        samples = [t.replace(special, "") for t in samples]
    checks["encodes_as_tiktoken"] = all(
        hugging_face.encode(t, add_special_tokens=False).ids == encoding.encode_ordinary(t)
        for t in samples)
    # transformers' AutoTokenizer loads it beside the checkpoint's config.json.
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(os.path.dirname(os.path.abspath(path)))
    checks["auto_tokenizer"] = all(
        auto(t, add_special_tokens=False)["input_ids"] == encoding.encode_ordinary(t)
        for t in samples[:5])
    print(json.dumps(checks))
    if not all(checks.values()):
        raise SystemExit(f"{path}: differs from the reference: {checks}")


def main():
    if sys.argv[1] == "bench":
        bench(*sys.argv[2:5], float(sys.argv[5]) if len(sys.argv) > 5 else 40)
        return
    if sys.argv[1] == "json":
        which, assets, out_path = sys.argv[2:5]
        if which == "mistral_v1":
            sentencepiece_json(os.path.join(assets, "mistral_v1.model"), True, out_path)
            return
        ranks = load_tiktoken_bpe(os.path.join(assets, ("gpt2" if which == "qwen2" else which) +
                                               ".tiktoken"))
        if which == "gpt2":
            file = tokenizer_json(ranks, {"<|endoftext|>": 50256}, None, False)
        elif which == "qwen2":  # Qwen 2's form (its split pattern, NFC) over GPT-2's ranks
            file = tokenizer_json(ranks, {"<|endoftext|>": 50256}, QWEN2, False)
            file["normalizer"] = {"type": "NFC"}
        else:
            names = LLAMA3_SPECIALS + [f"<|reserved_special_token_{2 + i}|>" for i in range(244)]
            file = tokenizer_json(ranks, {n: 128000 + i for i, n in enumerate(names)}, LLAMA3,
                                  True)
        with open(out_path, "w", encoding="utf-8") as out:
            json.dump(file, out, ensure_ascii=False)
        return
    if sys.argv[1] == "converted":
        converted(*sys.argv[2:5])
        return
    paraplan, assets, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md"),
              encoding="utf-8") as readme:
        documents, ends = corpus(work, readme.read())
    results = {}

    gpt2_ranks = load_tiktoken_bpe(os.path.join(assets, "gpt2.tiktoken"))
    llama_ranks = load_tiktoken_bpe(os.path.join(assets, "llama3.tiktoken"))
    gpt2 = tiktoken.Encoding("gpt2", pat_str=GPT2, mergeable_ranks=gpt2_ranks,
                             special_tokens={"<|endoftext|>": 50256})
    llama_specials = {name: 128000 + i for i, name in enumerate(
        LLAMA3_SPECIALS + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - 12)])}
    llama = tiktoken.Encoding("llama3", pat_str=LLAMA3, mergeable_ranks=llama_ranks,
                              special_tokens=llama_specials)
    qwen = tiktoken.Encoding("qwen2", pat_str=QWEN2, mergeable_ranks=gpt2_ranks,
                             special_tokens={"<|endoftext|>": 50256})

    # (file, its encoding as tiktoken gives it): tiktoken files as they are;
    # tokenizer.json files built from their ranks, Qwen 2's with its NFC.
    nfc = lambda text: unicodedata.normalize("NFC", text)
    files = [("gpt2.tiktoken", gpt2, gpt2.encode_ordinary),
             ("llama3.tiktoken", llama, llama.encode_ordinary)]
    for name, encoding, pattern, ignore_merges, normalize in (
            ("gpt2.json", gpt2, None, False, False), ("llama3.json", llama, LLAMA3, True, False),
            ("qwen2.json", qwen, QWEN2, False, True)):
        path = os.path.join(work, name)
        file = tokenizer_json(encoding._mergeable_ranks, encoding._special_tokens, pattern,
                              ignore_merges)
        if normalize:
            file["normalizer"] = {"type": "NFC"}
        with open(path, "w", encoding="utf-8") as out:
            json.dump(file, out, ensure_ascii=False)
        reference = (lambda text, e=encoding: e.encode_ordinary(nfc(text))) if normalize else \
            encoding.encode_ordinary
        hugging_face = Tokenizer.from_file(path)
        encode = lambda text, t=hugging_face: t.encode(text, add_special_tokens=False).ids
        # The file encodes as the model's tokenizer does, on text without
        # special tokens (Hugging Face's encode finds them in the text).
        for document in documents[:50]:
            ordinary = document
            for special in encoding._special_tokens:
                ordinary = ordinary.replace(special, "")
            if encode(ordinary) != reference(ordinary):
                raise SystemExit(f"{name}: Hugging Face and tiktoken disagree; the test's "
                                 f"converter is wrong")
        files.append((path, encoding, reference))
    # (file, the token before each document, the reference's encoding)
    files = [(path if os.path.isabs(path) else os.path.join(assets, path),
              encoding._special_tokens.get("<|endoftext|>") or
              encoding._special_tokens["<|begin_of_text|>"], reference)
             for path, encoding, reference in files]
    files += sentencepiece_files(assets, work, documents)
    for path, separator, reference in files:
        results[os.path.basename(path)] = check(paraplan, path, work, documents, ends, separator,
                                                reference)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
