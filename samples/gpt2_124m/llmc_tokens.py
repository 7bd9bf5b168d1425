#!/usr/bin/env python3
"""llmc_tokens.py: token shards in llm.c's .bin format for bench.sh's mode llmc,
made on the GPU machine without the internet.

The tokens are the kind paraplan's GPT-2 bench trains on: synthetic, drawn
independently and uniformly at random. `paraplan replay` draws them with a
counter-based hash (runtime/data/sample_source.cc: splitmix64 of seed, sample
and position, modulo the job's vocab_size, 50,304 with GPT-2's padding);
PyTorch's baseline with torch.randint over GPT-2's 50,257 ids. llm.c's
embedding and classifier take ids below its vocab_size V = 50,257 (the padded
rows to 50,304 are never a target), so the shards hold ids drawn uniformly from
[0, 50,257), the PyTorch baseline's range.

The format (llm.c dev/data/data_common.py write_datafile, read by
llmc/dataloader.h): a header of 256 little-endian int32, [0] the magic
20240520, [1] the version 1, [2] the token count, the rest 0; then the tokens
as uint16. The loader takes B*T+1 tokens per micro-batch and wants at least
that many in every shard.

Usage: llmc_tokens.py OUT_DIR --tokens N [--val-tokens M] [--vocab V] [--seed S]
  writes OUT_DIR/train_000000.bin (N tokens) and OUT_DIR/val_000000.bin (M).
Standard library only.
"""
import argparse
import array
import os
import random
import struct
import sys

MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
GPT2_VOCAB = 50257


def tokens_needed(global_batch, seq_len, steps):
    """Tokens for `steps` optimizer steps of global_batch sequences (llm.c reads
    B*T+1 tokens per micro-batch and moves on by B*T)."""
    return steps * global_batch * seq_len + 1


def uniform_tokens(count, vocab=GPT2_VOCAB, seed=1337):
    """count ids drawn independently and uniformly from [0, vocab), as uint16."""
    if not 0 < vocab <= 1 << 16:
        raise ValueError("vocab must be in 1..65536 for uint16 tokens, got %d" % vocab)
    draw = random.Random(seed).randrange
    return array.array("H", (draw(vocab) for _ in range(count)))


def write_shard(path, tokens):
    """One shard: the 256-int32 header, then the tokens as little-endian uint16."""
    tokens = array.array("H", tokens)
    if not 0 < len(tokens) < 2 ** 31:
        raise ValueError("a shard holds 1 to 2**31 - 1 tokens, got %d" % len(tokens))
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = MAGIC, VERSION, len(tokens)
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % HEADER_INTS, *header))
        f.write(tokens.tobytes())


def read_shard(path):
    """The tokens of a shard, checked as llmc/dataloader.h checks them (magic,
    version, count against the file's size); raises ValueError otherwise."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 * HEADER_INTS:
        raise ValueError("%s: shorter than the header" % path)
    header = struct.unpack_from("<%di" % HEADER_INTS, data)
    if header[0] != MAGIC:
        raise ValueError("%s: bad magic %d" % (path, header[0]))
    if header[1] != VERSION:
        raise ValueError("%s: bad version %d" % (path, header[1]))
    count = header[2]
    if count <= 0 or len(data) != 4 * HEADER_INTS + 2 * count:
        raise ValueError("%s: %d tokens in the header, %d bytes in the file" % (
            path, count, len(data)))
    tokens = array.array("H")
    tokens.frombytes(data[4 * HEADER_INTS:])
    if sys.byteorder != "little":
        tokens.byteswap()
    return tokens


def write_shards(folder, train_tokens, val_tokens, vocab=GPT2_VOCAB, seed=1337):
    """The train and val shards in folder; returns their paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name, count, offset in (("train", train_tokens, 0), ("val", val_tokens, 1)):
        path = os.path.join(folder, "%s_000000.bin" % name)
        write_shard(path, uniform_tokens(count, vocab, seed + offset))
        paths.append(path)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--tokens", type=int, required=True, help="train tokens")
    parser.add_argument("--val-tokens", type=int, default=0,
                        help="val tokens (default: as many as --tokens, at most 65,537)")
    parser.add_argument("--vocab", type=int, default=GPT2_VOCAB)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args(argv)
    val = args.val_tokens or min(args.tokens, 64 * 1024 + 1)
    for path in write_shards(args.out_dir, args.tokens, val, args.vocab, args.seed):
        print("%s: %d tokens" % (path, (os.path.getsize(path) - 4 * HEADER_INTS) // 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
