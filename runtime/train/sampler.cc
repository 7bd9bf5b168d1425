// sampler.cc: autoregressive generation over a single-stage GptStage.
#include "runtime/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/model/architecture.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/tokenizer/bpe_tokenizer.h"
#include "runtime/tokenizer/utf8.h"

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

// The sequence length the sampler runs: no more than the text it will hold
// (the prompt and the tokens to draw), the model's context and its sliding
// window. Causal attention makes a shorter window give the same logits, so a
// Hugging Face model with a context of 32k or 128k tokens samples at the
// cost of its text, not of its context.
int window_length(const TransformerConfig& config, size_t prompt_tokens, int tokens) {
  int64_t length = std::min<int64_t>(config.seq_len, static_cast<int64_t>(prompt_tokens) + tokens);
  if (config.attention_window > 0) length = std::min<int64_t>(length, config.attention_window);
  return static_cast<int>(std::max<int64_t>(length, 1));
}

// Loads the whole model's parameters (params, as `whole` lays them out) into
// a stage of a shorter sequence: every tensor as it is, but GPT-2's learned
// positions, of which it takes the first rows.
void load_shortened(ModelStage& stage, const ParameterLayout& whole, const float* params) {
  for (const ParameterTensor& tensor : stage.layout().tensors()) {
    const ParameterTensor* source = whole.find(tensor.name);
    if (source == nullptr || source->size < tensor.size)
      throw std::logic_error("sampler: tensor " + tensor.name + " has no source");
    stage.load_parameters(params + source->offset, tensor.size, tensor.offset);
  }
}

// The model on the backend, as a single stage of sequence length `length`.
struct TextModel {
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<MemoryTracker> memory;
  std::unique_ptr<ParameterLayout> layout;
  std::unique_ptr<ModelStage> stage;
};

TextModel load_text_model(const std::string& backend, const std::string& step_dir,
                          const TransformerConfig& config, int length) {
  TextModel model;
  model.ops = backend == "cuda" ? kernels::make_cuda_ops(0) : kernels::make_cpu_ops();
  model.memory = std::make_unique<MemoryTracker>(*model.ops);
  // Positions beyond a sliding window are another model (config_differences):
  // the checkpoint is read as the window's length of it.
  TransformerConfig whole_config = config;
  if (config.attention_window > 0)
    whole_config.seq_len = std::min(config.seq_len, config.attention_window);
  const std::unique_ptr<ParameterLayout> whole = make_whole_model_layout(whole_config);
  // The parameters on the host and as the model's weights, before either is allocated.
  require_host_memory(static_cast<double>(whole->num_elements()) * 4 * 2,
                      step_dir + "/config.json: the model's " +
                          std::to_string(whole->num_elements()) + " parameters",
                      "sample on a machine with more memory");
  TransformerConfig run_config = whole_config;
  run_config.seq_len = length;
  model.layout = make_whole_model_layout(run_config);
  // Forwards only: no gradient buffer (half the device memory of fp32 weights).
  model.stage = make_model_stage(*model.layout, *model.ops, *model.memory,
                                 ModelStageOptions{.recompute = std::vector<RecomputeMode>(
                                                       config.num_layers, RecomputeMode::None),
                                                   .gradients_elsewhere = true});
  std::vector<float> params(whole->num_elements());
  load_checkpoint(step_dir, *whole, params.data(), nullptr, nullptr);
  load_shortened(*model.stage, *whole, params.data());
  return model;
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
  const TextModel model = load_text_model(options.backend, step_dir, config,
                                          window_length(config, context.size(), options.tokens));
  kernels::Ops* ops = model.ops.get();
  ModelStage* stage = model.stage.get();
  const int T = model.layout->config().seq_len, V = config.vocab_size;
  // Only the tokenizer's ids are drawn: the padding rows of the embedding
  // were never a target.
  const int drawn = tokenizer ? tokenizer->vocab_size() : V;
  std::vector<int32_t> window(T, 0);
  std::vector<float> logits(V);
  std::vector<int32_t> generated;
  for (int i = 0; i < options.tokens; ++i) {
    // The last T tokens sit at the start of the window; causal attention makes
    // the padding after them irrelevant to the position we read.
    const int length = std::min<int>(T, static_cast<int>(context.size()));
    std::fill(window.begin(), window.end(), 0);
    std::copy(context.end() - length, context.end(), window.begin());
    ops->copy_from_host(stage->tokens(0), window.data(), T * sizeof(int32_t));
    ops->copy_from_host(stage->targets(0), window.data(), T * sizeof(int32_t));
    stage->forward(0, 1.0f, /*training=*/false);
    // fp32 storage (make_cpu_ops / make_cuda_ops default): logits are floats.
    ops->copy_to_host(logits.data(),
                      kernels::element_at(stage->logits(0), static_cast<size_t>(length - 1) * V,
                                          kernels::DType::kFloat32),
                      V * sizeof(float));
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
