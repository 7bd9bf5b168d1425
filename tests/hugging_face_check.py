#!/usr/bin/env python3
"""hugging_face_check.py: paraplan's checkpoints against Hugging Face transformers.

Drives transformers (PyTorch, float32, eager attention) on the tokens and
checkpoints of a paraplan run, for tests/hugging_face_test.cc:

  make ARCH OUT_DIR SEED key=value...
      A random LlamaForCausalLM (ARCH llama), MistralForCausalLM (mistral),
      Qwen2ForCausalLM (qwen2) or GPT2LMHeadModel (gpt2) with that config,
      saved by save_pretrained (model.safetensors + config.json; with
      max_shard_size=SIZE, the index and the files it names). Qwen 2's q, k
      and v biases, which transformers starts at zero, are drawn like the
      weights, so a model that ignored them would compute another loss.
  loss MODEL_DIR TOKENS.bin FIRST COUNT SEQ_LEN
      Loads MODEL_DIR with from_pretrained (refusing missing or unexpected
      tensors), then prints as JSON the mean cross-entropy over samples
      FIRST .. FIRST + COUNT - 1 of the token file, windowed as paraplan's data
      loader windows them, and the largest difference between the loaded
      parameters and the file's tensors.
  step MODEL_DIR TOKENS.bin BATCH SEQ_LEN LR BETA1 BETA2 EPS WEIGHT_DECAY CLIP CHECKPOINT
      One training step as paraplan takes it (mean loss over the first BATCH
      samples, torch's clip_grad_norm_, AdamW with decay on matrices and
      embeddings only), then prints the step's loss, the loss of the next
      BATCH samples with the updated weights, and the largest difference
      between the updated weights and CHECKPOINT's model tensors.

  generate MODEL_DIR TOKENIZER_JSON PROMPT COUNT
      Greedy continuation of PROMPT (after <|endoftext|>, or Llama 3's
      <|begin_of_text|>) by COUNT tokens as `paraplan sample --temperature 0`
      computes it (a full forward of the text so far per token, the argmax of
      the last position), encoded and decoded with Hugging Face's
      tokenizers; prints the continuation's text and ids.
  hellaswag MODEL_DIR TOKENIZER_JSON HELLASWAG.jsonl EVAL_FILE.bin
      HellaSwag scored as llm.c's dev/data/hellaswag.py scores it: each
      example's context and each ending (after a space) encoded, the rows
      forwarded, each ending's mean cross-entropy over its tokens; the
      lowest wins. Prints every ending's mean loss and the right counts (by
      mean and by sum), and writes the tokens as llm.c's eval file
      (dev/data/data_common.py's layout, written here from its description).

Every number is printed as one JSON object on the last line.
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file


def read_tokens(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    formats = {20240520: (1, "<u2"), 20240801: (7, "<u4")}
    if header[0] not in formats or header[1] != formats[header[0]][0]:
        sys.exit(f"{path}: not an llm.c token file (magic {header[0]}, version {header[1]})")
    return np.fromfile(path, dtype=formats[header[0]][1], offset=1024)[: header[2]].astype(np.int64)


def windows(tokens, first, count, seq_len):
    """Samples as runtime/data/data_loader.cc cuts them: sample k covers tokens
    [k T, k T + T + 1) (k modulo the samples per epoch)."""
    per_epoch = (len(tokens) - 1) // seq_len
    starts = [((first + i) % per_epoch) * seq_len for i in range(count)]
    inputs = np.stack([tokens[s : s + seq_len] for s in starts])
    targets = np.stack([tokens[s + 1 : s + seq_len + 1] for s in starts])
    return torch.from_numpy(inputs), torch.from_numpy(targets)


def mean_loss(model, inputs, targets):
    logits = model(input_ids=inputs).logits.float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             targets.reshape(-1))


def load(model_dir):
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                       attn_implementation="eager",
                                                       output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    if problems:
        sys.exit(f"{model_dir}: transformers did not load every tensor as it is: {problems}")
    return model


def model_tensors(directory):
    """The model's tensors by name: model.safetensors, or every file that
    model.safetensors.index.json names (a save with several writers)."""
    index = os.path.join(directory, "model.safetensors.index.json")
    if not os.path.exists(index):
        return load_file(os.path.join(directory, "model.safetensors"))
    with open(index) as file:
        weight_map = json.load(file)["weight_map"]
    tensors = {}
    for shard in sorted(set(weight_map.values())):
        held = load_file(os.path.join(directory, shard))
        if sorted(held) != sorted(n for n, f in weight_map.items() if f == shard):
            sys.exit(f"{directory}/{shard}: holds {sorted(held)}, not what {index} says")
        tensors.update(held)
    return tensors


def largest_difference(model, directory):
    """max |parameter - checkpoint tensor| over the checkpoint's tensors (a
    tied head is the embedding's parameter, so it is compared once)."""
    state = model.state_dict()
    largest = 0.0
    for name, tensor in model_tensors(directory).items():
        if name not in state:
            sys.exit(f"{directory}: tensor {name} is not a parameter of the model")
        largest = max(largest, float((state[name].float() - torch.from_numpy(tensor)).abs().max()))
    return largest


def make(arch, out_dir, seed, settings):
    import transformers

    values, save = {}, {"safe_serialization": True}
    for setting in settings:
        key, value = setting.split("=", 1)
        if key == "max_shard_size":  # save_pretrained's: shards and their index, as the hub has
            save[key] = value
        else:
            values[key] = json.loads(value)
    torch.manual_seed(seed)
    classes = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
               "mistral": ("MistralConfig", "MistralForCausalLM"),
               "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
               "gpt2": ("GPT2Config", "GPT2LMHeadModel")}
    config_class, model_class = (getattr(transformers, name) for name in classes[arch])
    model = model_class(config_class(**values))
    if arch == "qwen2":
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith(".bias"):
                    parameter.normal_(0.0, 0.02)
    model.save_pretrained(out_dir, **save)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def loss(model_dir, tokens_path, first, count, seq_len):
    model = load(model_dir)
    inputs, targets = windows(read_tokens(tokens_path), first, count, seq_len)
    with torch.no_grad():
        value = float(mean_loss(model, inputs, targets))
    print(json.dumps({"loss": value,
                      "max_weight_difference": largest_difference(model, model_dir)}))


def step(model_dir, tokens_path, batch, seq_len, lr, beta1, beta2, eps, weight_decay, clip,
         checkpoint):
    model = load(model_dir)
    tokens = read_tokens(tokens_path)
    inputs, targets = windows(tokens, 0, batch, seq_len)
    first = mean_loss(model, inputs, targets)
    first.backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    # paraplan decays matrices and embeddings, not norm weights or biases.
    decayed = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": weight_decay},
                                   {"params": other, "weight_decay": 0.0}],
                                  lr=lr, betas=(beta1, beta2), eps=eps)
    optimizer.step()
    inputs, targets = windows(tokens, batch, batch, seq_len)
    with torch.no_grad():
        second = float(mean_loss(model, inputs, targets))
    print(json.dumps({"loss": float(first), "next_loss": second,
                      "max_weight_difference": largest_difference(model, checkpoint)}))


def generate(model_dir, tokenizer_path, prompt, count):
    from tokenizers import Tokenizer

    model = load(model_dir)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    # After the token that starts documents, as paraplan's data has it.
    start = next(tokenizer.token_to_id(name) for name in ("<|endoftext|>", "<|begin_of_text|>", "<s>")
                 if tokenizer.token_to_id(name) is not None)
    ids = [start] + tokenizer.encode(prompt, add_special_tokens=False).ids
    prompt_ids = list(ids)
    generated = []
    with torch.no_grad():
        for _ in range(count):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1]
            generated.append(int(logits[: tokenizer.get_vocab_size()].argmax()))
            ids.append(generated[-1])
    # The continuation as the whole text shows it (a SentencePiece decoder
    # strips the space at a text's start, not a continuation's).
    whole = tokenizer.decode(ids, skip_special_tokens=False)
    head = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    assert whole.startswith(head), (whole, head)
    print(json.dumps({"text": whole[len(head):], "ids": generated}))


def render(tokenizer, example):
    """llm.c's render_example: the context's tokens, then each ending's
    (encoded with a space before it)."""
    context = tokenizer.encode(example["ctx"], add_special_tokens=False).ids
    endings = [tokenizer.encode(" " + e, add_special_tokens=False).ids for e in example["endings"]]
    return context, endings


def write_eval_file(path, examples):
    """llm.c's eval file: 256 int32 of header (magic 20240522, version 1,
    examples, longest example's bytes), then per example uint16 values:
    65535, its bytes, its index, the label, the ending count, the context's
    length and tokens, each ending's length and tokens."""
    streams = []
    for index, (label, context, endings) in enumerate(examples):
        values = [65535, 0, index, label, len(endings), len(context)] + context
        for ending in endings:
            values += [len(ending)] + ending
        values[1] = 2 * len(values)
        streams.append(values)
    header = [20240522, 1, len(examples), max(2 * len(v) for v in streams)] + [0] * 252
    with open(path, "wb") as file:
        file.write(np.array(header, dtype="<i4").tobytes())
        for values in streams:
            file.write(np.array(values, dtype="<u2").tobytes())


def hellaswag(model_dir, tokenizer_path, jsonl, eval_file):
    from tokenizers import Tokenizer

    model = load(model_dir)
    tokenizer = Tokenizer.from_file(tokenizer_path)
    means, right, right_by_sum, examples = [], 0, 0, []
    with open(jsonl) as file:
        for line in file:
            if not line.strip():
                continue
            example = json.loads(line)
            context, endings = render(tokenizer, example)
            label = int(example["label"])
            examples.append((label, context, endings))
            sums, counts = [], []
            with torch.no_grad():
                for ending in endings:
                    row = torch.tensor([context + ending])
                    logits = model(input_ids=row).logits.float()[0, :-1]
                    losses = torch.nn.functional.cross_entropy(logits, row[0, 1:], reduction="none")
                    sums.append(float(losses[len(context) - 1 :].double().sum()))
                    counts.append(len(ending))
            mean = [s / c for s, c in zip(sums, counts)]
            means.append(mean)
            right += int(min(range(len(mean)), key=lambda i: (mean[i], i)) == label)
            right_by_sum += int(min(range(len(sums)), key=lambda i: (sums[i], i)) == label)
    write_eval_file(eval_file, examples)
    print(json.dumps({"mean_losses": means, "right": right, "right_by_sum": right_by_sum}))


def main(argv):
    command = argv[1] if len(argv) > 1 else ""
    if command == "make":
        make(argv[2], argv[3], int(argv[4]), argv[5:])
    elif command == "loss":
        loss(argv[2], argv[3], int(argv[4]), int(argv[5]), int(argv[6]))
    elif command == "generate":
        generate(argv[2], argv[3], argv[4], int(argv[5]))
    elif command == "hellaswag":
        hellaswag(argv[2], argv[3], argv[4], argv[5])
    elif command == "step":
        step(argv[2], argv[3], int(argv[4]), int(argv[5]), *map(float, argv[6:12]), argv[12])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
