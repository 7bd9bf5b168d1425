// sampler.h: `paraplan sample`: text generated from a checkpoint, one token at
// a time, with temperature and top-k sampling from a seeded counter-based RNG
// (the same seed gives the same text). Byte-level models (vocab 256) need no
// tokenizer; others are given the BPE tokenizer their data was tokenized with
// (runtime/tokenizer/bpe_tokenizer.h), or find tokenizer.json beside the
// checkpoint's config.json (a Hugging Face export's); the prompt then follows
// the token that starts documents (<|endoftext|>, Llama 3's
// <|begin_of_text|>, or Llama 2's and Mistral's <s>), as in the data the
// model was trained on. The logits come from text_decoder.h: the prompt once,
// then each token alone against a key/value cache as long as the text.
#pragma once

#include <cstdint>
#include <string>

namespace paraplan {

struct SampleOptions {
  std::string checkpoint;  // a step directory or a checkpoint dir with 'latest'
  std::string prompt;
  std::string tokenizer;  // tokenizer.json or a tiktoken file; empty: see above
  int tokens = 200;
  float temperature = 0.8f;  // 0: greedy
  int top_k = 40;            // 0: the whole vocabulary
  uint64_t seed = 1337;
  std::string backend = "cpu";
  // Prompt tokens run at once into the key/value cache (text_decoder.h).
  int prefill_chunk = 512;
  std::string dtype = "float32";  // or "bfloat16": the weights and activations' storage
};

// Returns the generated continuation (without the prompt), each invalid UTF-8
// sequence in it shown as U+FFFD.
std::string sample_text(const SampleOptions& options);

}  // namespace paraplan
