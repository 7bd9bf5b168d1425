// text_decoder.h: the next token's logits of a text, one token after another,
// on one rank (`paraplan sample`). The prompt runs once, in chunks of at most
// prefill_chunk tokens (so a prompt of 32k tokens holds one chunk's
// activations and logits, not the prompt's), filling a key/value cache
// (runtime/model/key_value_cache.h); each later token runs alone against the
// cache, so a token costs the model once, not the text. The cache holds at most the model's context
// (and its sliding window); a text that outgrows it is decoded as before the cache: the last
// context's worth of tokens through a whole-context stage per token. The logits are those of a
// forward of the whole text so far (fp32: within rounding, the block attention summing in another
// order).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "runtime/model/key_value_cache.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_config.h"
#include "runtime/model/model_stage.h"

namespace paraplan {

class TextDecoder {
 public:
  // The checkpoint's model on `backend` ("cpu" or "cuda") in `storage`
  // (fp32, or bf16: half the memory and, on a GPU, of each token's reads of
  // the weights), for a prompt of prompt_tokens tokens followed by up to
  // `tokens` more.
  TextDecoder(const std::string& backend, const std::string& step_dir,
              const TransformerConfig& config, int prompt_tokens, int tokens,
              int prefill_chunk = 512, kernels::DType storage = kernels::DType::kFloat32);
  ~TextDecoder();

  // The logits [vocab] after `text`: the prompt at the first call, then the
  // same text with one more token at each call.
  const std::vector<float>& next_logits(const std::vector<int32_t>& text);

 private:
  // The logits of row `row` after a forward of tokens[0, count) on stage.
  void forward(ModelStage& stage, const int32_t* tokens, int count, int row);
  // A stage of `length` tokens on the decoder's parameters (with a cache:
  // decoding from it).
  std::unique_ptr<ModelStage> make_stage(int length, KeyValueCache* cache, void* parameters);

  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<MemoryTracker> memory_;
  std::unique_ptr<ParameterLayout> layout_;  // the model at its context
  int context_ = 0;                          // positions it attends over
  std::unique_ptr<KeyValueCache> cache_;
  // prompt_: the prompt's chunks (without a cache: the window), rest_: its
  // last, shorter chunk, step_: one token.
  std::unique_ptr<ModelStage> prompt_, rest_, step_, window_;
  int prompt_tokens_ = 0;
  int cached_ = 0;  // tokens of the text in the cache
  std::vector<float> logits_;
};

}  // namespace paraplan
