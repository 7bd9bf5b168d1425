// gpt_layout_test.cc: parameter counts, offsets and counter-based initialisation.
#include "runtime/model/gpt/gpt_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runtime/model/layout_test_support.h"

namespace paraplan {
namespace {

TransformerConfig gpt2_small() {
  TransformerConfig config;
  config.vocab_size = 50257;
  config.seq_len = 1024;
  config.num_layers = 12;
  config.d_model = 768;
  config.num_heads = 12;
  config.ffn_size = 3072;
  return config;
}

TEST(GptLayout, Gpt2SmallHasThePublishedParameterCount) {
  const TransformerConfig config = gpt2_small();
  EXPECT_EQ(gpt::parameter_count(config), 124439808);  // Hugging Face gpt2
  const GptLayout layout(config, StageSpec{0, 12, true, true});
  EXPECT_EQ(layout.num_elements(), 124439808u);
}

TEST(GptLayout, TensorsAreContiguousAndNamedLikeHuggingFace) {
  TransformerConfig config;  // tiny defaults
  const GptLayout layout(config, StageSpec{0, config.num_layers, true, true});
  layout_test::expect_contiguous(layout);
  const ParameterTensor* qkv = layout.find("transformer.h.2.attn.c_attn.weight");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{3 * 128, 128}));
  EXPECT_TRUE(qkv->hf_transposed);
  EXPECT_TRUE(qkv->weight_decay);
  EXPECT_FALSE(layout.find("transformer.h.2.ln_1.bias")->weight_decay);
  EXPECT_EQ(layout.head_weight(), layout.token_embedding());  // tied
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);
}

TEST(GptLayout, StagesPartitionTheModelAndLaterStagesCopyTheTiedHead) {
  TransformerConfig config;
  const GptLayout whole(config, StageSpec{0, 4, true, true});
  const GptLayout first(config, StageSpec{0, 1, true, false});
  const GptLayout last(config, StageSpec{1, 3, false, true});
  const size_t embedding = static_cast<size_t>(config.vocab_size) * config.d_model;
  EXPECT_EQ(first.num_elements() + last.num_elements(), whole.num_elements() + embedding);
  EXPECT_NE(last.find("transformer.h.3.mlp.c_fc.bias"), nullptr);
  EXPECT_EQ(last.find("transformer.h.0.mlp.c_fc.bias"), nullptr);
  EXPECT_EQ(last.find("transformer.wpe.weight"), nullptr);
  EXPECT_NE(last.find("transformer.wte.weight"), nullptr);  // the head's copy
}

TEST(GptLayout, EveryStageInitialisesExactlyItsSliceOfTheWholeModel) {
  layout_test::expect_initialises_its_slice(TransformerConfig{}, StageSpec{2, 2, false, true}, 0,
                                            1);
}

// Initialisation is spread over threads in pieces of 2^20 elements: tensors
// of several pieces (the 2.1M-element token embedding whole, one piece per
// rank at tp 2) hold the same bits cut either way, and every normal element
// is drawn (a skipped piece would leave it zero).
TEST(GptLayout, TensorsOfSeveralInitialisationPiecesAreDrawnWhole) {
  TransformerConfig config;
  config.vocab_size = 8200;
  config.d_model = 256;
  config.num_heads = 4;
  config.ffn_size = 1024;
  config.num_layers = 1;
  layout_test::expect_shards_tile_the_model(config, 2);
  const GptLayout whole(config, StageSpec{0, 1, true, true});
  std::vector<float> params(whole.num_elements());
  whole.initialize(params.data(), 3);
  const ParameterTensor* embedding = whole.find("transformer.wte.weight");
  ASSERT_GT(embedding->size, size_t{2} << 20);
  for (size_t i = 0; i < embedding->size; ++i) ASSERT_NE(params[embedding->offset + i], 0.0f) << i;
}

TEST(GptLayout, TensorParallelShardsTileTheWholeModelExactly) {
  TransformerConfig config;  // d_model 128, 4 heads, ffn 512, vocab 256
  for (int tensor_size : {2, 4}) layout_test::expect_shards_tile_the_model(config, tensor_size);
  // QKV rows of rank 1 of 2: q rows 64..127, then k rows 192..255, then v rows 320..383.
  const GptLayout rank1(config, StageSpec{0, 1, true, true}, 1, 2);
  const ParameterTensor* qkv = rank1.find("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(qkv->shape, (std::vector<int64_t>{192, 128}));
  EXPECT_EQ(qkv->global_index(0), 64u * 128);
  EXPECT_EQ(qkv->global_index(64 * 128), 192u * 128);
  EXPECT_EQ(qkv->global_index(128 * 128 + 5), 320u * 128 + 5);
  const ParameterTensor* proj = rank1.find("transformer.h.0.attn.c_proj.weight");
  EXPECT_EQ(proj->shape, (std::vector<int64_t>{128, 64}));
  EXPECT_EQ(proj->global_index(64 + 3), 128u + 64 + 3);  // row 1, column 64 + 3
  EXPECT_EQ(rank1.vocab_start(), 128);
  EXPECT_EQ(rank1.local_vocab(), 128);
}

TEST(GptLayout, InitialisationFollowsGpt2) {
  TransformerConfig config;
  const GptLayout layout(config, StageSpec{0, 4, true, true});
  std::vector<float> params(layout.num_elements());
  layout.initialize(params.data(), 7);
  const ParameterTensor* ln = layout.find("transformer.h.0.ln_1.weight");
  EXPECT_EQ(params[ln->offset], 1.0f);
  const ParameterTensor* bias = layout.find("transformer.h.0.attn.c_attn.bias");
  EXPECT_EQ(params[bias->offset], 0.0f);
  // Sample standard deviations: 0.02, and 0.02 / sqrt(2 * layers) for projections.
  auto std_of = [&](const std::string& name) {
    const ParameterTensor* t = layout.find(name);
    double sum = 0, squares = 0;
    for (size_t i = 0; i < t->size; ++i) {
      sum += params[t->offset + i];
      squares += double(params[t->offset + i]) * params[t->offset + i];
    }
    const double mean = sum / t->size;
    return std::sqrt(squares / t->size - mean * mean);
  };
  EXPECT_NEAR(std_of("transformer.wte.weight"), 0.02, 0.0005);
  EXPECT_NEAR(std_of("transformer.h.1.mlp.c_proj.weight"), 0.02 / std::sqrt(8.0), 0.0003);
  // A different seed changes the values; the same seed repeats them.
  std::vector<float> again(layout.num_elements()), other(layout.num_elements());
  layout.initialize(again.data(), 7);
  layout.initialize(other.data(), 8);
  EXPECT_EQ(params, again);
  EXPECT_NE(params, other);
}

}  // namespace
}  // namespace paraplan
