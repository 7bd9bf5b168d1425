#!/usr/bin/python3
"""gpt2_reference.py: an independent GPT-2 forward pass in NumPy (float64).

Reads a paraplan checkpoint the way Hugging Face would (model.safetensors with
GPT-2 tensor names, Conv1D weights stored [in, out], config.json) and prints the
mean cross-entropy over the first `samples` validation samples of an llm.c
token file, windowed as paraplan's data loader windows them. The end-to-end
test compares it with the val_loss paraplan logged from the same checkpoint:
equal losses mean paraplan computes GPT-2 (pre-LayerNorm blocks, tanh GELU,
causal softmax attention, tied head) and saves it in Hugging Face's layout.

usage: gpt2_reference.py CHECKPOINT_STEP_DIR TOKENS.bin SAMPLES
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    header_length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_length])
    body = data[8 + header_length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        assert entry["dtype"] == "F32", entry["dtype"]
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(entry["shape"]).astype(
            np.float64)
    return tensors


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:1024], dtype="<i4")
    assert header[0] == 20240520 and header[1] == 1
    return np.frombuffer(data[1024:], dtype="<u2")[:header[2]].astype(np.int64)


def layer_norm(x, weight, bias, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * weight + bias


def gelu(x):  # GPT-2's "gelu_new"
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward_loss(w, config, inputs, targets):
    T = inputs.shape[0]
    C, H = config["n_embd"], config["n_head"]
    D = C // H
    eps = config["layer_norm_epsilon"]
    p = "transformer."
    x = w[p + "wte.weight"][inputs] + w[p + "wpe.weight"][:T]
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    for layer in range(config["n_layer"]):
        h = p + "h.%d." % layer
        a = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"], eps)
        qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]  # Conv1D: [in, out]
        q, k, v = np.split(qkv, 3, axis=-1)
        q, k, v = (m.reshape(T, H, D).transpose(1, 0, 2) for m in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(D)
        scores[:, mask] = -np.inf
        scores -= scores.max(-1, keepdims=True)
        probabilities = np.exp(scores)
        probabilities /= probabilities.sum(-1, keepdims=True)
        attended = (probabilities @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + attended @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"]
        m = layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"], eps)
        m = gelu(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
        x = x + m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"]
    x = layer_norm(x, w[p + "ln_f.weight"], w[p + "ln_f.bias"], eps)
    logits = x @ w[p + "wte.weight"].T  # tied head
    logits -= logits.max(-1, keepdims=True)
    log_probabilities = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    return -log_probabilities[np.arange(T), targets].sum()


def main():
    step_dir, token_path, samples = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(step_dir + "/config.json") as f:
        config = json.load(f)
    weights = read_safetensors(step_dir + "/model.safetensors")
    tokens = read_tokens(token_path)
    T = config["n_positions"]
    per_epoch = (len(tokens) - 1) // T
    total = 0.0
    for k in range(samples):
        start = (k % per_epoch) * T
        total += forward_loss(weights, config, tokens[start:start + T], tokens[start + 1:start + T + 1])
    print("%.10f" % (total / (samples * T)))


if __name__ == "__main__":
    main()
