// sampler.cc: autoregressive generation on one rank (text_decoder.h).
#include "runtime/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/model/architecture.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/utf8.h"
#include "runtime/train/text_decoder.h"

namespace paraplan {

namespace {

// A uniform in [0, 1) from (seed, index): sampling is reproducible and
// independent of how many tokens were drawn before.
double counter_uniform(uint64_t seed, uint64_t index) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + index + 0x632be59bd9b4e019ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return static_cast<double>(x >> 11) / 9007199254740992.0;
}

int choose_token(const float* logits, int vocab, float temperature, int top_k, double uniform) {
  if (temperature <= 0) return static_cast<int>(std::max_element(logits, logits + vocab) - logits);
  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  const int keep = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<double> weights(keep);
  const double top = logits[order[0]];
  double total = 0;
  for (int i = 0; i < keep; ++i)
    total += weights[i] = std::exp((logits[order[i]] - top) / temperature);
  double target = uniform * total;
  for (int i = 0; i < keep; ++i) {
    target -= weights[i];
    if (target <= 0) return order[i];
  }
  return order[keep - 1];
}

// The tokenizer of a model: --tokenizer, else the one beside its config.json
// (tokenizer_file_in); none for a byte-level model. Its ids must fit the
// model's embedding (which may be padded beyond them: GPT-2's 50,257 in
// 50,304).
std::optional<BpeTokenizer> tokenizer_for(const SampleOptions& options, const std::string& step_dir,
                                          int vocab_size) {
  const std::string path =
      options.tokenizer.empty() ? tokenizer_file_in(step_dir) : options.tokenizer;
  if (path.empty()) {
    if (vocab_size == 256) return std::nullopt;  // byte-level
    throw std::runtime_error(step_dir + "/config.json: vocab_size is " +
                             std::to_string(vocab_size) +
                             ", not byte-level (256), and no tokenizer is beside it; give "
                             "--tokenizer, the tokenizer.json or .tiktoken file the training data "
                             "was tokenized with (`train --tokenizer` keeps it with checkpoints)");
  }
  return load_tokenizer_for_model(path, vocab_size, step_dir + "/config.json");
}

}  // namespace

std::string sample_text(const SampleOptions& options) {
  if (options.tokens < 0) throw std::runtime_error("--tokens: must be >= 0");
  if (options.prompt.empty())
    throw std::runtime_error("--prompt: must not be empty (the model continues the prompt)");
  const std::string step_dir = resolve_checkpoint(options.checkpoint);
  const TransformerConfig config = read_checkpoint_config(step_dir);
  const std::optional<BpeTokenizer> tokenizer = tokenizer_for(options, step_dir, config.vocab_size);
  std::vector<int32_t> context;
  if (tokenizer) {
    // The prompt starts a document, as the model saw documents in training.
    const std::string separator = default_document_separator(*tokenizer);
    if (!separator.empty()) context.push_back(*tokenizer->special_token(separator));
    tokenizer->encode(options.prompt, context);
  } else {
    for (unsigned char c : options.prompt) context.push_back(c);
  }
  const int V = config.vocab_size;
  // Only the tokenizer's ids are drawn: the padding rows of the embedding
  // were never a target.
  const int drawn = tokenizer ? tokenizer->vocab_size() : V;
  if (options.prefill_chunk < 1) throw std::runtime_error("--prefill-chunk: must be >= 1");
  if (options.dtype != "float32" && options.dtype != "bfloat16")
    throw std::runtime_error("--dtype: '" + options.dtype + "'; valid: float32, bfloat16");
  TextDecoder decoder(
      options.backend, step_dir, config, static_cast<int>(context.size()), options.tokens,
      options.prefill_chunk,
      options.dtype == "bfloat16" ? kernels::DType::kBFloat16 : kernels::DType::kFloat32);
  std::vector<int32_t> generated;
  for (int i = 0; i < options.tokens; ++i) {
    const std::vector<float>& logits = decoder.next_logits(context);
    const int token = choose_token(logits.data(), drawn, options.temperature, options.top_k,
                                   counter_uniform(options.seed, i));
    context.push_back(token);
    generated.push_back(token);
  }
  // Decoded at the end (a character may span tokens), and shown as Python's
  // and Hugging Face's byte-level decoders show it: an invalid byte sequence
  // as U+FFFD (one per maximal subpart; SentencePiece's ByteFallback shows
  // one per byte token).
  return to_valid_utf8(tokenizer ? tokenizer->decode_continuation(generated)
                                 : std::string(generated.begin(), generated.end()));
}

}  // namespace paraplan
