// llama_layout_test.cc: the Llama parameter table (Hugging Face
// LlamaForCausalLM names and shapes, published parameter counts), its stage
// and tensor-parallel slices, its validity rules, the rotary tables and the
// config.json both ways.
#include "runtime/model/llama/llama_layout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "runtime/model/architecture.h"
#include "runtime/model/layout_test_support.h"
#include "runtime/model/llama/rotary.h"

namespace paraplan {
namespace {

TransformerConfig tiny_llama() {
  TransformerConfig config;
  config.architecture = Architecture::kLlama;
  config.vocab_size = 256;
  config.seq_len = 16;
  config.num_layers = 3;
  config.d_model = 64;
  config.num_heads = 4;
  config.num_kv_heads = 2;
  config.ffn_size = 96;
  config.tied_embeddings = false;
  return config;
}

TEST(LlamaLayout, Llama3HasThePublishedParameterCounts) {
  TransformerConfig config = tiny_llama();
  config.vocab_size = 128256, config.seq_len = 8192, config.num_layers = 32;
  config.d_model = 4096, config.num_heads = 32, config.num_kv_heads = 8, config.ffn_size = 14336;
  EXPECT_EQ(parameter_count(config), 8030261248);  // Llama 3 8B: "8.03B"
  config.num_layers = 80, config.d_model = 8192, config.num_heads = 64, config.ffn_size = 28672;
  EXPECT_EQ(parameter_count(config), 70553706496);  // Llama 3 70B: "70.55B"
  // The layout holds exactly that many (Llama 3.2 1B's shape, tied; small enough to build).
  config.num_layers = 16, config.d_model = 2048, config.num_heads = 32, config.ffn_size = 8192;
  config.tied_embeddings = true;
  EXPECT_EQ(parameter_count(config), 1235814400);
  EXPECT_EQ(make_whole_model_layout(config)->num_elements(), 1235814400u);
}

TEST(LlamaLayout, TensorsAreNamedAndShapedLikeHuggingFace) {
  const TransformerConfig config = tiny_llama();
  const LlamaLayout layout(config, StageSpec{0, 3, true, true});
  layout_test::expect_contiguous(layout);
  const auto shape = [&](const std::string& name) {
    const ParameterTensor* tensor = layout.find(name);
    EXPECT_NE(tensor, nullptr) << name;
    return tensor ? tensor->shape : std::vector<int64_t>{};
  };
  EXPECT_EQ(shape("model.embed_tokens.weight"), (std::vector<int64_t>{256, 64}));
  EXPECT_EQ(shape("model.layers.1.input_layernorm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape("model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shape("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shape("model.layers.1.self_attn.v_proj.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shape("model.layers.1.self_attn.o_proj.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shape("model.layers.1.mlp.gate_proj.weight"), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(shape("model.layers.1.mlp.up_proj.weight"), (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(shape("model.layers.1.mlp.down_proj.weight"), (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(shape("model.norm.weight"), (std::vector<int64_t>{64}));
  EXPECT_EQ(shape("lm_head.weight"), (std::vector<int64_t>{256, 64}));
  for (const ParameterTensor& tensor : layout.tensors()) {
    EXPECT_FALSE(tensor.hf_transposed) << tensor.name;  // nn.Linear, as stored
    EXPECT_EQ(tensor.name.find("bias"), std::string::npos) << tensor.name;
    EXPECT_EQ(tensor.weight_decay, tensor.shape.size() == 2) << tensor.name;
  }
  // q, k, v are one GEMM weight [(H + 2 Hkv) D, C]; gate and up one [2F, C].
  const LlamaBlockOffsets& block = layout.block(1);
  EXPECT_EQ(layout.find("model.layers.1.self_attn.v_proj.weight")->offset,
            block.qkv + (64 + 32) * 64);
  EXPECT_EQ(layout.find("model.layers.1.mlp.up_proj.weight")->offset, block.gate_up + 96 * 64);
  EXPECT_EQ(layout.local_qkv_width(), 128);
  EXPECT_EQ(layout.tied_tensor(), nullptr);
}

TEST(LlamaLayout, StagesAndTensorShardsAreSlicesOfTheWholeModel) {
  TransformerConfig config = tiny_llama();
  layout_test::expect_initialises_its_slice(config, StageSpec{1, 2, false, true}, 0, 1);
  layout_test::expect_initialises_its_slice(config, StageSpec{0, 1, true, false}, 1, 2);
  for (int tensor_size : {2}) layout_test::expect_shards_tile_the_model(config, tensor_size);
  config.num_kv_heads = 4;  // multi-head: 4 ranks of one query and one KV head each
  layout_test::expect_shards_tile_the_model(config, 4);
  // Rank 1 of 2: query heads 2, 3 (q rows 32..63), KV head 1 (k and v rows 16..31).
  config.num_kv_heads = 2;
  const LlamaLayout rank1(config, StageSpec{0, 1, true, true}, 1, 2);
  EXPECT_EQ(rank1.local_heads(), 2);
  EXPECT_EQ(rank1.local_kv_heads(), 1);
  const ParameterTensor* k = rank1.find("model.layers.0.self_attn.k_proj.weight");
  EXPECT_EQ(k->shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(k->global_index(0), 16u * 64);
  const ParameterTensor* o = rank1.find("model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(o->shape, (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(o->global_index(3), 32u + 3);
}

TEST(LlamaLayout, TiedEmbeddingsOnSeveralStagesAreSummed) {
  TransformerConfig config = tiny_llama();
  config.tied_embeddings = true;
  const LlamaLayout whole(config, StageSpec{0, 3, true, true});
  EXPECT_EQ(whole.head_weight(), whole.token_embedding());
  EXPECT_EQ(whole.find("lm_head.weight"), nullptr);
  const LlamaLayout last(config, StageSpec{2, 1, false, true});
  ASSERT_NE(last.tied_tensor(), nullptr);
  EXPECT_TRUE(last.tied_tensor()->tied_copy);
  EXPECT_EQ(last.tied_tensor()->name, "model.embed_tokens.weight");
}

TEST(LlamaLayout, InvalidShapesAreRefusedNamingWhy) {
  TransformerConfig config = tiny_llama();
  config.num_kv_heads = 3;
  EXPECT_NE(llama::invalid_config_reason(config).find("num_heads 4 is not divisible by "
                                                      "num_kv_heads 3"),
            std::string::npos);
  EXPECT_THROW(LlamaLayout(config, StageSpec{0, 1, true, true}), std::invalid_argument);
  config = tiny_llama();
  EXPECT_NE(llama::invalid_config_reason(config, 4).find("num_kv_heads 2 is not divisible by the "
                                                         "tensor-parallel degree 4"),
            std::string::npos);
  config.d_model = 60;  // head_dim 15
  EXPECT_NE(llama::invalid_config_reason(config).find("head_dim (d_model / num_heads) 15 is odd"),
            std::string::npos);
}

TEST(LlamaRotary, InverseFrequenciesAndTablesAsHuggingFace) {
  TransformerConfig config = tiny_llama();  // head_dim 16
  config.rope_theta = 500000.0f;
  const std::vector<float> inverse = llama::rotary_inverse_frequencies(config);
  ASSERT_EQ(inverse.size(), 8u);
  for (int i = 0; i < 8; i++)
    EXPECT_NEAR(inverse[i], 1.0 / std::pow(500000.0, 2.0 * i / 16), 1e-6 * inverse[i]) << i;
  const llama::RotaryTables tables = llama::rotary_tables(config);
  ASSERT_EQ(tables.cos.size(), 16u * 8);
  EXPECT_EQ(tables.cos[3], 1.0f);  // position 0: no rotation
  EXPECT_EQ(tables.sin[3], 0.0f);
  EXPECT_FLOAT_EQ(tables.cos[5 * 8 + 1], std::cos(5.0f * inverse[1]));
  // Llama 3.1 scaling (factor 8, 1, 4, 8192): wavelengths above 8192 slowed
  // 8x, below 2048 kept, between interpolated.
  config.d_model = 128 * 4;  // head_dim 128, Llama 3's
  config.rope_scaling = {
      .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192};
  const std::vector<float> scaled = llama::rotary_inverse_frequencies(config);
  config.rope_scaling = {};
  const std::vector<float> plain = llama::rotary_inverse_frequencies(config);
  EXPECT_EQ(scaled[0], plain[0]);                 // wavelength 2 pi: kept
  EXPECT_FLOAT_EQ(scaled[63], plain[63] / 8.0f);  // the longest: slowed
  // theta 500000, D 128: inv_freq[30] = 500000^(-60/128), a wavelength of ~4.8e3.
  const int medium = 30;
  const float wavelength = 2 * 3.14159265f / plain[medium];
  ASSERT_GT(wavelength, 2048.0f);
  ASSERT_LT(wavelength, 8192.0f);
  const float smooth = (8192.0f / wavelength - 1) / 3;
  EXPECT_FLOAT_EQ(scaled[medium], (1 - smooth) * plain[medium] / 8 + smooth * plain[medium]);
}

TEST(LlamaHuggingFaceConfig, RoundTripsAndNamesDifferences) {
  TransformerConfig config = tiny_llama();
  config.rope_theta = 500000.0f;
  config.norm_epsilon = 1e-6f;
  config.rope_scaling = {
      .factor = 32, .low_freq_factor = 1, .high_freq_factor = 4, .original_max_positions = 8192};
  const nlohmann::ordered_json json = hugging_face_config(config);
  EXPECT_EQ(json["architectures"][0], "LlamaForCausalLM");
  EXPECT_EQ(json["model_type"], "llama");
  EXPECT_EQ(json["num_key_value_heads"], 2);
  EXPECT_EQ(json["hidden_act"], "silu");
  EXPECT_EQ(json["rms_norm_eps"], 1e-6);
  EXPECT_EQ(json["rope_theta"], 500000.0);
  EXPECT_EQ(json["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ(json["tie_word_embeddings"], false);
  const TransformerConfig back = config_from_hugging_face(json, "config.json");
  EXPECT_TRUE(config_differences(back, config).empty());
  EXPECT_EQ(back.architecture, Architecture::kLlama);
  EXPECT_EQ(back.kv_heads(), 2);
  EXPECT_EQ(back.rope_scaling, config.rope_scaling);

  TransformerConfig other = config;
  other.num_kv_heads = 4;
  other.rope_theta = 10000.0f;
  const std::vector<std::string> differences = config_differences(other, config);
  ASSERT_EQ(differences.size(), 2u);
  EXPECT_EQ(differences[0], "num_key_value_heads is 4 but the plan's model has 2 num_kv_heads");
  // A longer trained context runs a shorter one; not the reverse.
  other = config;
  other.seq_len = 8192;
  EXPECT_TRUE(config_differences(other, config).empty());
  EXPECT_FALSE(config_differences(config, other).empty());

  nlohmann::json biased = json;
  biased["attention_bias"] = true;
  EXPECT_THROW(
      {
        try {
          config_from_hugging_face(biased, "config.json");
        } catch (const std::runtime_error& error) {
          EXPECT_STREQ(error.what(),
                       "config.json: attention_bias is true (biases on q_proj, k_proj, v_proj and "
                       "o_proj) but paraplan's Llama has biases only on q, k and v, as Qwen 2 "
                       "(model_type qwen2)");
          throw;
        }
      },
      std::runtime_error);
  nlohmann::json yarn = json;
  yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THROW(config_from_hugging_face(yarn, "config.json"), std::runtime_error);
}

// Qwen 2 and 2.5 are Llama with biases on q, k and v (qkv_bias).
TEST(LlamaLayout, Qwen2HasThePublishedParameterCounts) {
  TransformerConfig config = tiny_llama();
  config.qkv_bias = true;
  config.vocab_size = 151936, config.num_layers = 24, config.d_model = 896;
  config.num_heads = 14, config.num_kv_heads = 2, config.ffn_size = 4864;
  config.tied_embeddings = true;
  EXPECT_EQ(parameter_count(config), 494032768);                           // Qwen2.5-0.5B: "0.49B"
  EXPECT_EQ(make_whole_model_layout(config)->num_elements(), 494032768u);  // the table agrees
  config.vocab_size = 152064, config.num_layers = 28, config.d_model = 3584;
  config.num_heads = 28, config.num_kv_heads = 4, config.ffn_size = 18944;
  config.tied_embeddings = false;
  EXPECT_EQ(parameter_count(config), 7615616512);  // Qwen2.5-7B: "7.61B"
}

TEST(LlamaLayout, QkvBiasesFollowTheirWeightsAndShardAsTheirRows) {
  TransformerConfig config = tiny_llama();
  config.qkv_bias = true;
  const StageSpec stage{
      .first_layer = 1, .num_layers = 1, .has_embedding = false, .has_head = false};
  const LlamaLayout whole(config, stage);
  const LlamaLayout half(config, stage, /*tensor_rank=*/1, /*tensor_size=*/2);
  // q [H D = 64], k and v [Hkv D = 32], right after v_proj's weight: one
  // bias vector of the fused q|k|v GEMM, on each rank its own heads'.
  const char* names[] = {"model.layers.1.self_attn.q_proj.bias",
                         "model.layers.1.self_attn.k_proj.bias",
                         "model.layers.1.self_attn.v_proj.bias"};
  const int64_t lengths[] = {64, 32, 32};
  size_t expected_offset = whole.block(0).qkv_bias;
  size_t expected_half_offset = half.block(0).qkv_bias;
  EXPECT_EQ(expected_offset,
            whole.find("model.layers.1.self_attn.v_proj.weight")->offset + 32 * 64);
  for (int i = 0; i < 3; ++i) {
    const ParameterTensor* tensor = whole.find(names[i]);
    const ParameterTensor* shard = half.find(names[i]);
    ASSERT_NE(tensor, nullptr) << names[i];
    ASSERT_NE(shard, nullptr) << names[i];
    EXPECT_EQ(tensor->offset, expected_offset);
    EXPECT_EQ(tensor->size, static_cast<size_t>(lengths[i]));
    EXPECT_FALSE(tensor->weight_decay);
    EXPECT_EQ(shard->offset, expected_half_offset);
    EXPECT_EQ(shard->size, static_cast<size_t>(lengths[i] / 2));
    EXPECT_EQ(shard->global_index(0), static_cast<size_t>(lengths[i] / 2));  // rank 1's half
    expected_offset += tensor->size;
    expected_half_offset += shard->size;
  }
  EXPECT_EQ(half.local_qkv_width(), 64);  // the local bias is as wide as the local q|k|v rows
  EXPECT_EQ(whole.find("model.layers.1.self_attn.o_proj.bias"), nullptr);
  config.qkv_bias = false;
  EXPECT_EQ(LlamaLayout(config, stage).block(0).qkv_bias, LlamaLayout::kNone);
}

TEST(LlamaHuggingFaceConfig, QwenTwoIsLlamaWithQkvBiases) {
  TransformerConfig config = tiny_llama();
  config.qkv_bias = true;
  config.tied_embeddings = true;
  config.rope_theta = 1000000.0f;
  const nlohmann::ordered_json json = hugging_face_config(config);
  EXPECT_EQ(json["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(json["model_type"], "qwen2");
  EXPECT_EQ(json["use_sliding_window"], false);
  EXPECT_FALSE(json.contains("attention_bias"));  // not a Qwen2Config key
  const TransformerConfig back = config_from_hugging_face(json, "config.json");
  EXPECT_TRUE(back.qkv_bias);
  EXPECT_EQ(back.attention_window, 0);
  EXPECT_TRUE(config_differences(back, config).empty());
  TransformerConfig plain = config;
  plain.qkv_bias = false;
  const std::vector<std::string> differences = config_differences(back, plain);
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0],
            "the checkpoint's model has q/k/v biases (Qwen 2's) but the plan's model has none "
            "([model] qkv_bias)");
  // Qwen 2's sliding window counts only when use_sliding_window is true, and
  // for the layers from max_window_layers (default 28) on.
  nlohmann::json windowed = json;
  windowed["sliding_window"] = 8;
  EXPECT_EQ(config_from_hugging_face(windowed, "config.json").attention_window, 0);
  windowed["use_sliding_window"] = true;
  EXPECT_EQ(config_from_hugging_face(windowed, "config.json").attention_window, 0);  // 28 >= 3
  windowed["max_window_layers"] = 2;
  const TransformerConfig qwen_window = config_from_hugging_face(windowed, "config.json");
  EXPECT_EQ(qwen_window.attention_window, 8);
  // Written back as it was read.
  const TransformerConfig again =
      config_from_hugging_face(hugging_face_config(qwen_window), "config.json");
  EXPECT_EQ(again.attention_window, 8);
  EXPECT_TRUE(again.qkv_bias);
}

// Mistral is Llama's tensors with a sliding window, which changes nothing
// while the plan's sequence fits in it.
TEST(LlamaHuggingFaceConfig, MistralLoadsWhileTheSequenceFitsItsWindow) {
  const TransformerConfig config = tiny_llama();  // seq_len 16
  nlohmann::json json = hugging_face_config(config);
  json["architectures"] = {"MistralForCausalLM"};
  json["model_type"] = "mistral";
  json.erase("attention_bias");
  json.erase("mlp_bias");
  json["max_position_embeddings"] = 32768;
  json["sliding_window"] = nullptr;  // v0.3
  TransformerConfig back = config_from_hugging_face(json, "config.json");
  EXPECT_FALSE(back.qkv_bias);
  EXPECT_EQ(back.attention_window, 0);
  EXPECT_TRUE(config_differences(back, config).empty());
  json["sliding_window"] = 16;  // v0.1's 4096, scaled down
  back = config_from_hugging_face(json, "config.json");
  EXPECT_EQ(back.attention_window, 16);
  EXPECT_TRUE(config_differences(back, config).empty());
  TransformerConfig longer = config;
  longer.seq_len = 32;
  const std::vector<std::string> differences = config_differences(back, longer);
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_EQ(differences[0],
            "sliding_window is 16 but the plan's model has seq_len 32: the model attends only to "
            "the last 16 tokens, paraplan's attention to the whole sequence; plan seq_len <= 16");
  // Written back as Mistral with its window.
  const nlohmann::ordered_json written = hugging_face_config(back);
  EXPECT_EQ(written["model_type"], "mistral");
  EXPECT_EQ(written["sliding_window"], 16);
  EXPECT_EQ(config_from_hugging_face(written, "config.json").attention_window, 16);
  // Absent, it is MistralConfig's default of 4096.
  json.erase("sliding_window");
  EXPECT_EQ(config_from_hugging_face(json, "config.json").attention_window, 4096);
  json["sliding_window"] = "wide";
  EXPECT_THROW(config_from_hugging_face(json, "config.json"), std::runtime_error);
}

}  // namespace
}  // namespace paraplan
