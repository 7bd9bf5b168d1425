// key_value_cache_test.cc: decoding with a key/value cache gives the logits of
// the whole sequence's forward: a prefill stage of 70 tokens and a one-token
// stage sharing its parameters and cache walk a 150-token text (the attention
// kernels' tiles of 64 crossed by both), for GPT-2 (learned positions at the
// true offsets), Llama (rotary positions, grouped KV heads) and Qwen 2's
// q/k/v biases, on the CPU backend in fp32 and, on a GPU, on the CUDA backend
// in fp32 and bf16; the same cache decodes another text afresh; and the
// refusals.
#include "runtime/model/key_value_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/model/architecture.h"

namespace paraplan {
namespace {

constexpr int kPrompt = 70;

TransformerConfig small(Architecture architecture, bool qkv_bias = false) {
  TransformerConfig config;
  config.architecture = architecture;
  config.vocab_size = 19;
  config.seq_len = 150;
  config.num_layers = 2;
  config.d_model = 16;
  config.num_heads = 4;
  config.num_kv_heads = architecture == Architecture::kLlama ? 2 : 0;
  config.ffn_size = 24;
  config.tied_embeddings = architecture == Architecture::kGpt2;
  config.init_std = 0.3f;  // far from uniform logits
  config.qkv_bias = qkv_bias;
  return config;
}

struct Model {
  explicit Model(const TransformerConfig& config,
                 std::unique_ptr<kernels::Ops> backend = kernels::make_cpu_ops())
      : ops(std::move(backend)),
        memory(*ops),
        layout(make_whole_model_layout(config)),
        params(layout->num_elements()) {
    layout->initialize(params.data(), 11);
    for (const ParameterTensor& tensor : layout->tensors())  // biases away from zero
      if (tensor.name.find("bias") != std::string::npos)
        for (size_t k = 0; k < tensor.size; ++k)
          params[tensor.offset + k] = 0.2f * std::cos(static_cast<float>(k + 3 * tensor.offset));
  }
  std::unique_ptr<ModelStage> stage(ModelStageOptions options) {
    options.recompute.assign(layout->config().num_layers, RecomputeMode::None);
    return make_model_stage(*layout, *ops, memory, options);
  }
  // The logits [length, V] of a forward of tokens at the stage's position.
  std::vector<float> logits(ModelStage& stage, const std::vector<int32_t>& tokens) {
    ops->copy_from_host(stage.tokens(0), tokens.data(), tokens.size() * sizeof(int32_t));
    ops->copy_from_host(stage.targets(0), tokens.data(), tokens.size() * sizeof(int32_t));
    stage.forward(0, 1.0f, /*training=*/false);
    const size_t count = tokens.size() * layout->config().vocab_size;
    std::vector<char> stored(ops->storage_bytes(count));
    ops->copy_to_host(stored.data(), stage.logits(0), stored.size());
    std::vector<float> result(count);
    kernels::host_to_float(result.data(), stored.data(), ops->storage_dtype(), count);
    return result;
  }
  KeyValueCache& cache() {
    const TransformerConfig& config = layout->config();
    if (!cache_)
      cache_ =
          std::make_unique<KeyValueCache>(*ops, memory, config.num_layers, config.seq_len,
                                          config.num_heads, config.kv_heads(), config.head_dim());
    return *cache_;
  }
  std::unique_ptr<kernels::Ops> ops;
  MemoryTracker memory;
  std::unique_ptr<ParameterLayout> layout;
  std::vector<float> params;
  std::unique_ptr<KeyValueCache> cache_;
};

// A decoding stage's options: no gradients, `length` tokens, the cache, and
// another stage's parameters (null: its own).
ModelStageOptions decoding(KeyValueCache* cache, int length, void* parameters = nullptr) {
  ModelStageOptions options;
  options.parameters = parameters;
  options.gradients_elsewhere = true;
  options.sequence_length = length;
  options.key_value_cache = cache;
  return options;
}

std::vector<int32_t> text_of(const TransformerConfig& config, int salt = 0) {
  std::vector<int32_t> text(config.seq_len);
  for (int t = 0; t < config.seq_len; ++t)
    text[t] = (7 * t + 3 + salt * (t % 5)) % config.vocab_size;
  return text;
}

// The logits of every position from one forward of the whole text.
std::vector<float> whole_logits(Model& model, const std::vector<int32_t>& text) {
  const std::unique_ptr<ModelStage> whole = model.stage({});
  whole->load_parameters(model.params.data(), model.params.size());
  return model.logits(*whole, text);
}

// The same from a prefill of kPrompt tokens, then one token at a time, in
// the model's cache (whatever it held before).
std::vector<float> decoded_logits(Model& model, const std::vector<int32_t>& text) {
  const std::unique_ptr<ModelStage> prefill = model.stage(decoding(&model.cache(), kPrompt));
  prefill->load_parameters(model.params.data(), model.params.size());
  const std::unique_ptr<ModelStage> step =
      model.stage(decoding(&model.cache(), 1, prefill->parameters()));
  EXPECT_EQ(prefill->gradients(), nullptr);
  std::vector<float> decoded = model.logits(*prefill, {text.begin(), text.begin() + kPrompt});
  for (int t = kPrompt; t < static_cast<int>(text.size()); ++t) {
    step->set_first_position(t);
    const std::vector<float> row = model.logits(*step, {text[t]});
    decoded.insert(decoded.end(), row.begin(), row.end());
  }
  return decoded;
}

// max |a - b| and max |b|.
std::pair<double, double> difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double largest = 0, scale = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    largest = std::max(largest, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return {largest, scale};
}

std::string name_of(const TransformerConfig& config) {
  return std::string(architecture_name(config.architecture)) +
         (config.qkv_bias ? " with q/k/v biases" : "");
}

class KeyValueCacheTest : public ::testing::TestWithParam<TransformerConfig> {};

TEST_P(KeyValueCacheTest, DecodingGivesTheWholeSequencesLogits) {
  const TransformerConfig& config = GetParam();
  Model model(config);
  const std::vector<int32_t> text = text_of(config);
  const auto [largest, scale] = difference(decoded_logits(model, text), whole_logits(model, text));
  EXPECT_GT(scale, 0.5);  // logits that say something
  // The block kernel sums in another order: fp32 rounding.
  EXPECT_LT(largest, 1e-5 * scale) << name_of(config);
  std::cout << "key/value cache: " << name_of(config) << ": max |logit - whole forward's| "
            << largest << " (largest logit " << scale << ")" << std::endl;
  // The same cache decodes another text as that text's forward: nothing of
  // the first text is left in it.
  const std::vector<int32_t> other = text_of(config, 1);
  ASSERT_NE(other, text);
  const auto [again, again_scale] =
      difference(decoded_logits(model, other), whole_logits(model, other));
  EXPECT_LT(again, 1e-5 * again_scale) << name_of(config);
}

// bf16 storage (`sample --dtype bfloat16`): decoding against the whole
// forward of the same storage; both round every tensor to 8 bits, at points
// that differ where the block kernel folds its fp32 result.
TEST_P(KeyValueCacheTest, Bfloat16DecodingTracksTheWholeForward) {
  const TransformerConfig& config = GetParam();
  Model model(config, kernels::make_cpu_ops(0, kernels::DType::kBFloat16));
  const std::vector<int32_t> text = text_of(config);
  const auto [largest, scale] = difference(decoded_logits(model, text), whole_logits(model, text));
  std::cout << "key/value cache in bf16: " << name_of(config) << ": max |logit - whole forward's| "
            << largest << " of " << scale << std::endl;
  EXPECT_LT(largest, 5e-2 * scale) << name_of(config);
}

// On a GPU: the CUDA backend's decoding (the block attention kernels of
// context parallelism) against the CPU's whole forward. TF32 GEMMs by
// default: ~1e-3 relative per GEMM, a dozen of them; bf16 storage rounds
// every tensor to 8 bits (the stage tests' bf16 tolerance).
TEST_P(KeyValueCacheTest, CudaDecodingGivesTheCpuLogits) {
  if (kernels::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const TransformerConfig& config = GetParam();
  Model cpu(config);
  const std::vector<int32_t> text = text_of(config);
  const std::vector<float> expected = whole_logits(cpu, text);
  for (const kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    Model cuda(config, kernels::make_cuda_ops(0, dtype));
    const auto [largest, scale] = difference(decoded_logits(cuda, text), expected);
    const bool bf16 = dtype == kernels::DType::kBFloat16;
    std::cout << "key/value cache on CUDA (" << (bf16 ? "bf16" : "fp32") << "): " << name_of(config)
              << ": max |logit - CPU whole forward's| " << largest << " of " << scale << std::endl;
    EXPECT_LT(largest, (bf16 ? 5e-2 : 2e-2) * scale) << name_of(config);
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, KeyValueCacheTest,
                         ::testing::Values(small(Architecture::kGpt2), small(Architecture::kLlama),
                                           small(Architecture::kLlama, /*qkv_bias=*/true)));

TEST(KeyValueCache, RefusesWhatItCannotDecode) {
  const TransformerConfig config = small(Architecture::kLlama);
  Model model(config);
  KeyValueCache& cache = model.cache();
  // Two sequences at once, or a position past the model's context.
  ModelStageOptions two = decoding(&cache, 1);
  two.micro_batch_size = 2;
  EXPECT_THROW(model.stage(two), std::invalid_argument);
  const std::unique_ptr<ModelStage> step = model.stage(decoding(&cache, 4));
  EXPECT_THROW(step->set_first_position(config.seq_len - 3), std::invalid_argument);
  step->set_first_position(config.seq_len - 4);
  EXPECT_FALSE(step->compute_replays());  // its positions move between steps
  // Forwards only: training and backward throw before anything runs.
  EXPECT_THROW(step->forward(0, 1.0f, /*training=*/true), std::logic_error);
  EXPECT_THROW(step->backward(0), std::logic_error);
  EXPECT_THROW(step->backward_input(0), std::logic_error);
  EXPECT_THROW(model.stage(decoding(nullptr, config.seq_len + 1)), std::invalid_argument);
  // Without a cache a stage stays at position 0.
  const std::unique_ptr<ModelStage> plain = model.stage({});
  EXPECT_THROW(plain->set_first_position(1), std::invalid_argument);
  // A cache of another model's shape, or for part of a model.
  TransformerConfig other = config;
  other.num_kv_heads = 4;
  Model wider(other);
  EXPECT_THROW(wider.stage(decoding(&cache, 1)), std::invalid_argument);
  const std::unique_ptr<ParameterLayout> half = make_parameter_layout(
      config,
      StageSpec{.first_layer = 0, .num_layers = 1, .has_embedding = true, .has_head = false});
  ModelStageOptions part = decoding(&cache, 1);
  part.recompute.assign(1, RecomputeMode::None);
  EXPECT_THROW(make_model_stage(*half, *model.ops, model.memory, part), std::invalid_argument);
}

}  // namespace
}  // namespace paraplan
