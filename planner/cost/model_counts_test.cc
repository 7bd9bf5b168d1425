// model_counts_test.cc: the planner's per-architecture counts against
// published figures: parameter counts of GPT-2 124M, Llama 2 7B, Llama 3 8B
// and 70B and Llama 3.2 1B (tied embeddings); training FLOPs per token
// against Megatron-LM's num_floating_point_operations (the formula the Llama 3
// paper's MFU and torchtitan's count agree with); Llama's activation bytes per
// recompute mode tensor by tensor; tensor-parallel shards that tile the
// whole model; and cuDNN's attention workspace, counted only where the CUDA
// backend runs attention on cuDNN.
#include "planner/cost/model_counts.h"

#include <gtest/gtest.h>

#include <cmath>

#include "common/attention_workspace.h"
#include "planner/cost/cost_model.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

ModelConfig llama(int layers, int d_model, int heads, int kv_heads, int ffn, int vocab, int seq,
                  bool tied = false) {
  ModelConfig model;
  model.architecture = schema::Architecture::Llama;
  model.num_layers = layers;
  model.d_model = d_model;
  model.num_heads = heads;
  model.num_kv_heads = kv_heads;
  model.ffn_size = ffn;
  model.vocab_size = vocab;
  model.seq_len = seq;
  model.tied_embeddings = tied;
  return model;
}

ModelConfig llama3_8b() {
  return llama(32, 4096, 32, 8, 14336, 128256, 8192);
}
ModelConfig llama3_70b() {
  return llama(80, 8192, 64, 8, 28672, 128256, 8192);
}

TEST(ModelCounts, PublishedParameterCounts) {
  // Meta's model cards: Llama 3 8B "8.03B", 70B "70.55B" (Hugging Face's
  // safetensors index: 8,030,261,248 and 70,553,706,496 parameters).
  EXPECT_EQ(model_parameters(llama3_8b()), 8030261248);
  EXPECT_EQ(model_parameters(llama3_70b()), 70553706496);
  // Llama 3.2 1B ties its embeddings: 1,235,814,400 ("1.24B").
  EXPECT_EQ(model_parameters(llama(16, 2048, 32, 8, 8192, 128256, 2048, true)), 1235814400);
  // Llama 2 7B, multi-head (32 KV heads): 6,738,415,616 ("6.74B").
  EXPECT_EQ(model_parameters(llama(32, 4096, 32, 32, 11008, 32000, 4096)), 6738415616);
  // GPT-2 124M keeps its count (wpe 1024 x 768 included, head tied).
  ModelConfig gpt2;
  gpt2.num_layers = 12, gpt2.d_model = 768, gpt2.num_heads = 12, gpt2.ffn_size = 3072;
  gpt2.vocab_size = 50257, gpt2.seq_len = 1024;
  EXPECT_EQ(model_parameters(gpt2), 124439808);
}

// Megatron-LM's training/utils num_floating_point_operations, per token, as it
// writes it (GQA, SwiGLU, the logit layer).
double megatron_flops_per_token(const ModelConfig& m) {
  const double h = m.d_model, L = m.num_layers, s = m.seq_len, V = m.vocab_size;
  const double query_groups_ratio = static_cast<double>(m.num_kv_heads) / m.num_heads;
  const double gated_linear_multiplier = 3.0 / 2.0;
  return 12 * L * h * h *
         ((1 + query_groups_ratio + s / h) + (m.ffn_size / h) * gated_linear_multiplier +
          V / (2 * L * h));
}

TEST(ModelCounts, TrainingFlopsPerTokenAreMegatrons) {
  for (const ModelConfig& model : {llama3_8b(), llama3_70b()}) {
    const double per_token = model_flops_per_step(model, 1) / model.seq_len;
    EXPECT_NEAR(per_token / megatron_flops_per_token(model), 1.0, 1e-12);
  }
  // Llama 3 8B at 8192 tokens: 6 x 8.03e9 for the weights (the embedding
  // lookup excluded, the head included: 6 x 7.50e9 = 4.50e10) and 1.29e10
  // for attention: 5.79e10 FLOPs per token.
  EXPECT_NEAR(model_flops_per_step(llama3_8b(), 1) / 8192 / 1e10, 5.7913, 1e-4);
  // Full recompute adds a block forward per block, selective only the attention core.
  const ModelConfig model = llama3_8b();
  EXPECT_DOUBLE_EQ(block_backward_flops(model, 1, RecomputeMode::Full),
                   3 * block_forward_flops(model, 1));
  EXPECT_DOUBLE_EQ(
      block_backward_flops(model, 1, RecomputeMode::Selective) - 2 * block_forward_flops(model, 1),
      attention_core_forward_flops(model, 1));
}

TEST(ModelCounts, LlamaLinearLayersAndShards) {
  const ModelConfig model = llama3_8b();
  const std::vector<LinearLayer> layers = block_linear_layers(model);
  ASSERT_EQ(layers.size(), 7u);
  EXPECT_EQ(layers[1].name, "self_attn.k_proj");
  EXPECT_EQ(layers[1].out_features, 1024);  // 8 KV heads x 128
  EXPECT_FALSE(layers[3].column_parallel);  // o_proj, row-parallel
  for (const LinearLayer& layer : layers) EXPECT_FALSE(layer.bias);
  // Shards tile the block: t ranks hold the split tensors once and the two
  // RMSNorm weights t times.
  for (int t : {2, 4, 8})
    EXPECT_EQ(t * block_parameters(model, t), block_parameters(model) + (t - 1) * 2 * 4096) << t;
  EXPECT_EQ(embedding_parameters(model), int64_t{128256} * 4096);          // no position table
  EXPECT_EQ(head_parameters(model, true), 4096 + int64_t{128256} * 4096);  // untied lm_head
}

// Qwen 2's q, k and v biases: Qwen2.5-0.5B's published 494,032,768
// parameters (tied), the biases split with their heads.
TEST(ModelCounts, QkvBiasesAreCountedAndSharded) {
  ModelConfig model = llama3_8b();
  model.qkv_bias = true;
  model.vocab_size = 151936, model.num_layers = 24, model.d_model = 896, model.num_heads = 14;
  model.num_kv_heads = 2, model.ffn_size = 4864, model.tied_embeddings = true;
  const std::vector<LinearLayer> layers = block_linear_layers(model);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(layers[i].bias) << layers[i].name;
  for (int i = 3; i < 7; ++i) EXPECT_FALSE(layers[i].bias) << layers[i].name;
  EXPECT_EQ(
      embedding_parameters(model) + 24 * block_parameters(model) + head_parameters(model, true),
      494032768);
  // 2 ranks: each its 7 query heads' and 1 KV head's biases, (7 + 2) x 64.
  model.qkv_bias = false;
  const int64_t without = block_parameters(model, 2);
  model.qkv_bias = true;
  EXPECT_EQ(block_parameters(model, 2) - without, (7 + 2 * 1) * 64);
}

TEST(ModelCounts, LlamaActivationBytesAreWhatTheStageKeeps) {
  // One block, b = 2, s = 16, h = 64, 4 heads of 16 over 2 KV heads, F = 96,
  // fp32: e = 4, sb = 32.
  ModelConfig model = llama(1, 64, 4, 2, 96, 256, 16);
  const int64_t sb = 32, e = 4, h = 64, qkv = (4 + 2 * 2) * 16, F = 96;
  // Input, both norms' outputs and the attention residual; two rstd rows; q|k|v,
  // gate|up and the SwiGLU output.
  const int64_t selective = 4 * e * sb * h + 8 * sb + e * sb * (qkv + 3 * F);
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Selective), selective);
  // Without recompute, also the attention output and the logsumexp of 4 heads.
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::None),
            selective + e * sb * h + 4 * 4 * sb);
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Full), e * sb * h);
  // Tensor parallelism splits the heads and the hidden units, not the norms.
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Selective, 2),
            4 * e * sb * h + 8 * sb + e * sb * (qkv + 3 * F) / 2);
  model.dtype = schema::DType::BFloat16;
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Full), 2 * sb * h);
}

TEST(ModelCounts, SequenceParallelismDividesTheReplicatedActivationsByT) {
  // Llama as above, tp 2: the input, norm outputs, residual and rstd rows
  // become token shards; q|k|v, gate|up and SwiGLU were split already.
  const ModelConfig model = llama(1, 64, 4, 2, 96, 256, 16);
  const int64_t sb = 32, e = 4, h = 64, qkv = (4 + 2 * 2) * 16, F = 96;
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Selective, 2, true),
            (4 * e * sb * h + 8 * sb) / 2 + e * sb * (qkv + 3 * F) / 2);
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::Full, 2, true), e * sb * h / 2);
  // GPT-2 (Korthikanti's 34 sbh + 5 a s^2 b, flash attention, no dropout
  // masks, 16-bit): (8 sbh + 16 sb) / t + 24 sbh / t with sequence
  // parallelism instead of 8 sbh + 16 sb + 24 sbh / t.
  ModelConfig gpt;
  gpt.seq_len = 2048;
  gpt.d_model = 12288;
  gpt.num_heads = 96;
  gpt.ffn_size = 4 * 12288;
  gpt.vocab_size = 51200;
  gpt.num_layers = 96;
  gpt.dtype = schema::DType::BFloat16;
  const int64_t sbh = int64_t{2048} * 12288, logsumexp = 4 * int64_t{96} * 2048 / 8;
  const int64_t statistics = 16 * int64_t{2048};  // two LayerNorms' fp32 mean and rstd
  EXPECT_EQ(block_activation_bytes(gpt, 1, RecomputeMode::None, 8),
            sbh * 8 + statistics + sbh * 24 / 8 + logsumexp);
  EXPECT_EQ(block_activation_bytes(gpt, 1, RecomputeMode::None, 8, true),
            (sbh * 8 + statistics) / 8 + sbh * 24 / 8 + logsumexp);
  // The stage-level terms: the sent output and the head's norm tensors too.
  EXPECT_EQ(stage_output_activation_bytes(gpt, 1, 8, true), 2 * sbh / 8);
  EXPECT_EQ(head_activation_bytes(gpt, 1, 8, true) - head_activation_bytes(gpt, 1, 8),
            (2 * 2 * sbh + 8 * 2048) / 8 - (2 * 2 * sbh + 8 * 2048));
  // The workspace: the residual gradient shard, the gathered buffer, a norm
  // gradient shard and the norms' weight-gradient scratch.
  EXPECT_EQ(stage_workspace_bytes(gpt, 1, 8, false, true) - stage_workspace_bytes(gpt, 1, 8, false),
            2 * 2 * sbh / 8 + 2 * 2 * 12288);
}

// cuDNN's SDPA workspace: the formula's figure for a GPU preset in bf16 with
// head_dim 64 or 128 and the one-rank attention; 0 wherever the runtime
// would not run cuDNN (the cpu preset, fp32, other head dims, the ring's
// block attention), so those plans do not change.
TEST(ModelCounts, CudnnAttentionWorkspaceOnlyWhereCudnnRuns) {
  ModelConfig gpt2;
  gpt2.num_layers = 12, gpt2.d_model = 768, gpt2.num_heads = 12, gpt2.ffn_size = 3072;
  gpt2.vocab_size = 50257, gpt2.seq_len = 1024, gpt2.dtype = schema::DType::BFloat16;
  const auto bytes = [](const ModelConfig& model, const char* preset, int tp = 1, int cp = 1,
                        bool documents = false, bool train = true) {
    return cudnn_attention_workspace_bytes(model, preset, 8, tp, cp, documents, train);
  };
  EXPECT_EQ(bytes(gpt2, "h100-sxm"), cudnn_sdpa_workspace_bytes(8, 1024, 12, 64, true));
  EXPECT_EQ(bytes(gpt2, "h200"), bytes(gpt2, "a100-80g"));
  // About 217 MiB at GPT-2 124M's micro-batch of 8: the 16-bit dP dominates.
  EXPECT_GT(bytes(gpt2, "h100-sxm"), int64_t{200} << 20);
  EXPECT_LT(bytes(gpt2, "h100-sxm"), int64_t{230} << 20);
  EXPECT_EQ(bytes(gpt2, "h100-sxm", 2), cudnn_sdpa_workspace_bytes(8, 1024, 6, 64, true));
  EXPECT_EQ(bytes(gpt2, "h100-sxm", 1, 1, false, false),
            cudnn_sdpa_workspace_bytes(8, 1024, 12, 64, false));
  EXPECT_EQ(bytes(gpt2, "cpu"), 0);
  EXPECT_EQ(bytes(gpt2, "h100-sxm", 1, 2), 0);        // context parallelism: the ring
  EXPECT_EQ(bytes(gpt2, "h100-sxm", 1, 1, true), 0);  // document mask: the block kernels
  ModelConfig fp32 = gpt2;
  fp32.dtype = schema::DType::Float32;
  EXPECT_EQ(bytes(fp32, "h100-sxm"), 0);
  ModelConfig narrow = gpt2;
  narrow.d_model = 384;  // head_dim 32
  EXPECT_EQ(bytes(narrow, "h100-sxm"), 0);
  // Llama 3 8B's head_dim 128, grouped KV heads: the query heads count.
  ModelConfig llama8b = llama3_8b();
  llama8b.dtype = schema::DType::BFloat16;
  EXPECT_EQ(cudnn_attention_workspace_bytes(llama8b, "h100-sxm", 1, 8, 1, false, true),
            cudnn_sdpa_workspace_bytes(1, 8192, 4, 128, true));
}

// The CUDA kernels' scratch besides cuDNN's (common/kernel_scratch.h), at
// GPT-2 124M's micro-batch of 8 on an H100 (132 SMs, 8192 rows): the layer
// norm backward's partials (256 blocks of 768 weight and bias sums), the
// token embedding's sort (four 8192-token arrays, two of 256 segment sums
// of 768, CUB's two arrays and its 1 MiB), the bias column sums at 2304,
// 3072 and 768 columns (256 chunks) on each lane and the epilogue's rows.
// Llama has no biases; context parallelism adds the block attention's row
// terms; the first rank alone the sort; none on the cpu preset or without
// a backward.
TEST(ModelCounts, KernelScratchIsTheSumOfTheBackwardsRequests) {
  ModelConfig gpt2;
  gpt2.num_layers = 12, gpt2.d_model = 768, gpt2.num_heads = 12, gpt2.ffn_size = 3072;
  gpt2.vocab_size = 50257, gpt2.seq_len = 1024, gpt2.dtype = schema::DType::BFloat16;
  const int64_t norm = 2 * 256 * 768 * 4;
  const int64_t embedding = 4 * 32768 + 2 * 256 * 768 * 4 + 2 * 32768 + (int64_t{1} << 20);
  const int64_t columns = 256 * (2304 + 3072 + 768) * 4;
  const int64_t epilogue = (2304 + 3072 + 768) * 4;
  EXPECT_EQ(cuda_kernel_scratch_bytes(gpt2, "h100-sxm", 132, 8, 1, 1, false, false, true, true),
            norm + embedding + 2 * columns + epilogue);
  EXPECT_EQ(norm + embedding + 2 * columns + epilogue, 16'998'400);
  EXPECT_EQ(cuda_kernel_scratch_bytes(gpt2, "h100-sxm", 132, 8, 1, 1, false, false, false, true),
            norm + 2 * columns + epilogue);
  EXPECT_EQ(cuda_kernel_scratch_bytes(gpt2, "cpu", 132, 8, 1, 1, false, false, true, true), 0);
  EXPECT_EQ(cuda_kernel_scratch_bytes(gpt2, "h100-sxm", 132, 8, 1, 1, false, false, true, false),
            0);
  ModelConfig llama8b = llama3_8b();
  llama8b.seq_len = 32768;
  // cp 4: 8192 rows of 4096 (RMSNorm: weights only), 32 heads x 8192 rows.
  const int64_t rms = 256 * 4096 * 4;
  const int64_t array = 4 * 8192;  // one int32 per token
  EXPECT_EQ(cuda_kernel_scratch_bytes(llama8b, "h100-sxm", 132, 1, 1, 4, false, false, false, true),
            rms + 32 * 8192 * 4);
  EXPECT_EQ(cuda_kernel_scratch_bytes(llama8b, "h100-sxm", 132, 1, 1, 4, false, false, true, true),
            rms + 32 * 8192 * 4 + 4 * array + 2 * 256 * 4096 * 4 + 2 * array + (int64_t{1} << 20));
}

// The GEMM lanes' workspaces: 2 x 32 MiB on every GPU preset, whatever the
// dtype; none on the CPU backend.
TEST(ModelCounts, GemmWorkspacesOnGpuPresetsOnly) {
  EXPECT_EQ(gemm_workspace_bytes("h100-sxm"), int64_t{64} << 20);
  EXPECT_EQ(gemm_workspace_bytes("a100-80g"), int64_t{64} << 20);
  EXPECT_EQ(gemm_workspace_bytes("cpu"), 0);
}

}  // namespace
}  // namespace paraplan
