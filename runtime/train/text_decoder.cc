// text_decoder.cc: TextDecoder (text_decoder.h).
#include "runtime/train/text_decoder.h"

#include <algorithm>
#include <stdexcept>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/model/architecture.h"

namespace paraplan {

TextDecoder::TextDecoder(const std::string& backend, const std::string& step_dir,
                         const TransformerConfig& config, int prompt_tokens, int tokens,
                         int prefill_chunk, kernels::DType storage)
    : prompt_tokens_(prompt_tokens) {
  ops_ = backend == "cuda" ? kernels::make_cuda_ops(0, storage) : kernels::make_cpu_ops(0, storage);
  memory_ = std::make_unique<MemoryTracker>(*ops_);
  // Positions beyond a sliding window are another model (config_differences):
  // the checkpoint is read as the window's length of it.
  TransformerConfig whole = config;
  if (config.attention_window > 0)
    whole.seq_len = std::min(config.seq_len, config.attention_window);
  context_ = whole.seq_len;
  layout_ = make_whole_model_layout(whole);
  // The parameters on the host and as the model's weights, before either is allocated.
  require_host_memory(static_cast<double>(layout_->num_elements()) * 4 * 2,
                      step_dir + "/config.json: the model's " +
                          std::to_string(layout_->num_elements()) + " parameters",
                      "sample on a machine with more memory");
  if (prompt_tokens < 1 || prefill_chunk < 1)
    throw std::invalid_argument("text decoder: an empty prompt or prefill chunk");
  if (prompt_tokens <= context_) {
    // The cache holds the text as far as the context allows, no further.
    const int positions = std::min<int64_t>(context_, int64_t{prompt_tokens} + tokens);
    cache_ = std::make_unique<KeyValueCache>(*ops_, *memory_, whole.num_layers, positions,
                                             whole.num_heads, whole.kv_heads(), whole.head_dim());
    const int chunk = std::min(prompt_tokens, prefill_chunk), rest = prompt_tokens % chunk;
    prompt_ = make_stage(chunk, cache_.get(), nullptr);
    if (rest > 0) rest_ = make_stage(rest, cache_.get(), prompt_->parameters());
  } else {
    prompt_ = make_stage(context_, nullptr, nullptr);  // a prompt beyond the context: windows
  }
  std::vector<float> params(layout_->num_elements());
  load_checkpoint(step_dir, *layout_, params.data(), nullptr, nullptr);
  // A tensor at a time: the conversion to storage holds one tensor, not the model.
  for (const ParameterTensor& tensor : layout_->tensors())
    prompt_->load_parameters(params.data() + tensor.offset, tensor.size, tensor.offset);
}

TextDecoder::~TextDecoder() = default;

std::unique_ptr<ModelStage> TextDecoder::make_stage(int length, KeyValueCache* cache,
                                                    void* parameters) {
  ModelStageOptions options;
  // Nothing is kept for a backward: each layer holds only its output, the
  // rest one shared scratch.
  options.recompute.assign(layout_->config().num_layers, RecomputeMode::Full);
  options.parameters = parameters;
  options.gradients_elsewhere = true;  // forwards only: no gradient buffer
  options.sequence_length = length;
  options.key_value_cache = cache;
  return make_model_stage(*layout_, *ops_, *memory_, options);
}

void TextDecoder::forward(ModelStage& stage, const int32_t* tokens, int count, int row) {
  const int V = layout_->config().vocab_size;
  ops_->copy_from_host(stage.tokens(0), tokens, count * sizeof(int32_t));
  ops_->copy_from_host(stage.targets(0), tokens, count * sizeof(int32_t));
  stage.forward(0, 1.0f, /*training=*/false);
  // The row's logits in storage, widened to floats.
  const kernels::DType dtype = ops_->storage_dtype();
  std::vector<char> stored(ops_->storage_bytes(V));
  ops_->copy_to_host(stored.data(),
                     kernels::element_at(stage.logits(0), static_cast<size_t>(row) * V, dtype),
                     stored.size());
  logits_.resize(V);
  kernels::host_to_float(logits_.data(), stored.data(), dtype, V);
}

const std::vector<float>& TextDecoder::next_logits(const std::vector<int32_t>& text) {
  const int length = static_cast<int>(text.size());
  if (cache_ && cached_ == 0 && length == prompt_tokens_) {
    // The prompt's chunks in order; the last one's last row is the next token's.
    const int chunk = prompt_->sequence_length();
    int first = 0;
    for (; first + chunk <= length; first += chunk) {
      prompt_->set_first_position(first);
      forward(*prompt_, &text[first], chunk, chunk - 1);
    }
    if (rest_) {
      rest_->set_first_position(first);
      forward(*rest_, &text[first], length - first, length - first - 1);
    }
    cached_ = length;
    return logits_;
  }
  if (cache_ && length == cached_ + 1 && length <= cache_->positions()) {
    if (!step_) step_ = make_stage(1, cache_.get(), prompt_->parameters());
    step_->set_first_position(length - 1);
    forward(*step_, &text[length - 1], 1, 0);
    cached_ = length;
    return logits_;
  }
  // Beyond the context: its last tokens, at positions from 0, in a stage of
  // the whole context (the padding after a shorter text is never attended to).
  if (!window_ && cache_) {
    window_ = make_stage(context_, nullptr, prompt_->parameters());
    step_.reset();  // never used again
  }
  ModelStage& window = window_ ? *window_ : *prompt_;
  const int used = std::min(length, context_);
  std::vector<int32_t> tokens(static_cast<size_t>(context_), 0);
  std::copy(text.end() - used, text.end(), tokens.begin());
  forward(window, tokens.data(), context_, used - 1);
  return logits_;
}

}  // namespace paraplan
