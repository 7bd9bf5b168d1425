// model_counts.cc: per-architecture parameter, FLOP and activation counts
// (conventions in model_counts.h and cost_model.h).
#include "planner/cost/model_counts.h"

#include <algorithm>

#include "common/attention_workspace.h"
#include "common/gemm_workspace.h"
#include "common/kernel_scratch.h"

namespace paraplan {

using schema::RecomputeMode;

namespace {

bool is_llama(const ModelConfig& model) {
  return model.architecture == schema::Architecture::Llama;
}

// One tensor-parallel shard of a split tensor, or the whole of a small one.
int64_t shard(int64_t elements, int64_t tensor_parallel, int64_t replicate_below) {
  return elements < replicate_below ? elements : elements / tensor_parallel;
}

}  // namespace

int element_bytes(schema::DType dtype) {
  return dtype == schema::DType::BFloat16 ? 2 : 4;
}

int kv_heads(const ModelConfig& model) {
  return is_llama(model) && model.num_kv_heads > 0 ? model.num_kv_heads : model.num_heads;
}

int head_dim(const ModelConfig& model) {
  return model.num_heads > 0 ? model.d_model / model.num_heads : 0;
}

std::vector<LinearLayer> block_linear_layers(const ModelConfig& model) {
  const int64_t C = model.d_model, F = model.ffn_size;
  if (!is_llama(model)) {
    return {{"attn.c_attn", 3 * C, C, true, true},
            {"attn.c_proj", C, C, false, true},
            {"mlp.c_fc", F, C, true, true},
            {"mlp.c_proj", C, F, false, true}};
  }
  const int64_t Q = int64_t{model.num_heads} * head_dim(model),
                KV = int64_t{kv_heads(model)} * head_dim(model);
  const bool qkv_bias = model.qkv_bias;  // Qwen 2's
  return {{"self_attn.q_proj", Q, C, true, qkv_bias},  {"self_attn.k_proj", KV, C, true, qkv_bias},
          {"self_attn.v_proj", KV, C, true, qkv_bias}, {"self_attn.o_proj", C, Q, false, false},
          {"mlp.gate_proj", F, C, true, false},        {"mlp.up_proj", F, C, true, false},
          {"mlp.down_proj", C, F, false, false}};
}

int64_t block_parameters(const ModelConfig& model, int tensor_parallel, int64_t replicate_below) {
  const int64_t C = model.d_model, t = tensor_parallel, r = replicate_below;
  int64_t total = is_llama(model) ? 2 * C : 4 * C;  // two RMSNorm weights, or LayerNorms' w and b
  for (const LinearLayer& linear : block_linear_layers(model)) {
    total += shard(linear.out_features * linear.in_features, t, r);
    if (linear.bias)
      total += linear.column_parallel ? shard(linear.out_features, t, r) : linear.out_features;
  }
  return total;
}

int64_t embedding_parameters(const ModelConfig& model, int tensor_parallel,
                             int64_t replicate_below) {
  const int64_t C = model.d_model;
  const int64_t positions = is_llama(model) ? 0 : int64_t{model.seq_len} * C;  // rotary: none
  return shard(int64_t{model.vocab_size} * C, tensor_parallel, replicate_below) + positions;
}

int64_t head_parameters(const ModelConfig& model, bool stage_has_embedding, int tensor_parallel,
                        int64_t replicate_below) {
  const int64_t C = model.d_model;
  const int64_t final_norm = is_llama(model) ? C : 2 * C;
  const bool own_weight = !model.tied_embeddings || !stage_has_embedding;
  return final_norm +
         (own_weight ? shard(int64_t{model.vocab_size} * C, tensor_parallel, replicate_below) : 0);
}

int64_t norm_statistics_bytes_per_token(const ModelConfig& model) {
  return is_llama(model) ? 4 : 8;
}

int64_t block_activation_bytes(const ModelConfig& model, int micro_batch_size,
                               RecomputeMode recompute, int tensor_parallel,
                               bool sequence_parallel) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  // The replicated terms' divisor: sequence parallelism shards them t ways.
  const int64_t r = sequence_parallel ? t : 1;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  const int64_t sbh = sb * model.d_model;
  if (recompute == RecomputeMode::Full) return e * sbh / r;  // only the block input
  // The attention output and the fp32 logsumexp per (query head, token), kept
  // only without recomputation (selective recompute rebuilds them from qkv).
  const int64_t attention_output = sbh * e / t + 4 * int64_t{model.num_heads} * sb / t;
  int64_t bytes = 0;
  if (!is_llama(model)) {
    // What GptStage::allocate_block keeps (Korthikanti et al.'s 34 sbh
    // without dropout, whose two 1-byte masks paraplan has no use for):
    // replicated, both LayerNorm outputs, the attention residual and the
    // block output (4 tensors) and the two norms' fp32 mean and rstd; split,
    // q, k, v (3C), the c_fc and GELU outputs (2F: 8 h-widths at F = 4h).
    bytes = (4 * e * sbh + 2 * norm_statistics_bytes_per_token(model) * sb) / r +
            e * sb * (3 * int64_t{model.d_model} + 2 * int64_t{model.ffn_size}) / t;
  } else {
    // Replicated: the block input, both RMSNorm outputs and the attention
    // residual (4 tensors) and the two fp32 rstd rows; split: q, k, v
    // ((H + 2 Hkv) D wide), gate and up (2F) and silu(gate) * up (F).
    const int64_t qkv_width = (int64_t{model.num_heads} + 2 * kv_heads(model)) * head_dim(model);
    bytes = (4 * e * sbh + 2 * norm_statistics_bytes_per_token(model) * sb) / r +
            e * sb * (qkv_width + 3 * int64_t{model.ffn_size}) / t;
  }
  return recompute == RecomputeMode::Selective ? bytes : bytes + attention_output;
}

int64_t stage_workspace_bytes(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                              bool has_head, bool sequence_parallel, int whole_seq_len) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  const int64_t C = model.d_model, F = model.ffn_size, A = C / t;
  // Sequence parallelism: the residual gradient shrinks to a token shard (C
  // -> C/t of the 2C below) and the gathered buffer (C) and a norm gradient
  // shard (C/t) come beside it: 2C/t more per token; and the norms'
  // weight-gradient scratch [2C].
  const int64_t sequence = sequence_parallel && t > 1 ? e * sb * 2 * C / t + 2 * C * e : 0;
  const int64_t row_terms = 4 * sb * model.num_heads / t;  // fp32 [B, H, T]
  const int64_t cross_entropy = has_head && t > 1 ? 12 * sb : 0;
  // The device accumulators read once per step: the gradient norm's sum of
  // squares (every stage) and the losses' sum (the head's), a double each.
  const int64_t accumulators = has_head ? 16 : 8;
  // residual, norm, qkv, atty and fch gradients (the GELU output's gradient
  // is never stored: Ops::linear_backward_gelu carries it through)
  if (!is_llama(model))
    return e * sb * (2 * C + 3 * A + A + F / t) + row_terms + cross_entropy + accumulators +
           sequence;
  const int64_t qkv = (int64_t{model.num_heads} + 2 * kv_heads(model)) * head_dim(model) / t;
  const int64_t positions = whole_seq_len > 0 ? whole_seq_len : model.seq_len;
  const int64_t rotary_tables = int64_t{4} * positions * head_dim(model);  // fp32 cos, sin
  // residual, norm, qkv, attention, gate|up and SwiGLU-output gradients
  return e * sb * (2 * C + qkv + A + 3 * F / t) + row_terms + rotary_tables + cross_entropy +
         accumulators + sequence;
}

int64_t cudnn_attention_workspace_bytes(const ModelConfig& model, const std::string& cluster_preset,
                                        int micro_batch_size, int tensor_parallel,
                                        int context_parallel, bool document_mask, bool is_train) {
  const int d = head_dim(model);
  if (cluster_preset == "cpu" || model.dtype != schema::DType::BFloat16 || (d != 64 && d != 128) ||
      context_parallel > 1 || document_mask)
    return 0;
  const int64_t local_heads = std::max<int64_t>(1, int64_t{model.num_heads} / tensor_parallel);
  return cudnn_sdpa_workspace_bytes(micro_batch_size, model.seq_len, local_heads, d, is_train);
}

int64_t gemm_workspace_bytes(const std::string& cluster_preset) {
  return cluster_preset == "cpu" ? 0 : kGemmLanes * kGemmLaneWorkspaceBytes;
}

int64_t cuda_kernel_scratch_bytes(const ModelConfig& model, const std::string& cluster_preset,
                                  int multiprocessors, int micro_batch_size, int tensor_parallel,
                                  int context_parallel, bool sequence_parallel, bool document_mask,
                                  bool has_embedding, bool is_train) {
  namespace ks = kernel_scratch;
  if (cluster_preset == "cpu" || !is_train) return 0;
  const int64_t t = tensor_parallel, sms = std::max(multiprocessors, 1);
  const int64_t local_seq = model.seq_len / std::max(context_parallel, 1);
  const int64_t rows = int64_t{micro_batch_size} * local_seq, C = model.d_model;
  const bool biases = !is_llama(model);
  std::vector<int64_t> main_lane;  // distinct request sizes of the Ops' scratch
  const auto add = [](std::vector<int64_t>& requests, int64_t bytes) {
    if (std::find(requests.begin(), requests.end(), bytes) == requests.end())
      requests.push_back(bytes);
  };
  add(main_lane, ks::norm_backward_bytes(rows, C, biases, sms));
  if (sequence_parallel && t > 1) add(main_lane, ks::norm_backward_bytes(rows / t, C, biases, sms));
  std::vector<int64_t> side_lane;  // the weight-gradient stream's scratch
  // The linear layers' bias gradients: GPT-2's c_attn, c_fc (column-parallel)
  // and two projections, or Qwen 2's q|k|v.
  std::vector<int64_t> bias_columns;
  if (biases) bias_columns = {3 * C / t, model.ffn_size / t, C};
  if (is_llama(model) && model.qkv_bias)
    bias_columns = {(model.num_heads + 2 * int64_t{kv_heads(model)}) * head_dim(model) / t};
  for (const int64_t columns : bias_columns) {
    add(main_lane, ks::column_sums_bytes(rows, columns, sms));  // PARAPLAN_CUDA_OVERLAP=0
    add(side_lane, ks::column_sums_bytes(rows, columns, sms));
    add(side_lane, ks::request(columns * 4));  // the BGRADB epilogue's row
  }
  if (has_embedding) add(main_lane, ks::token_embedding_backward_bytes(rows, C));
  if (context_parallel > 1 || document_mask) {
    const int64_t heads = std::max<int64_t>(1, model.num_heads / t);
    add(main_lane, ks::block_attention_backward_bytes(micro_batch_size, heads, local_seq));
  }
  int64_t bytes = 0;
  for (const int64_t request : main_lane) bytes += request;
  for (const int64_t request : side_lane) bytes += request;
  return bytes;
}

std::vector<int64_t> block_op_output_bytes(const ModelConfig& model, int micro_batch_size,
                                           int tensor_parallel, bool sequence_parallel) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  const int64_t hidden = e * sb * model.d_model;
  const int64_t norm = sequence_parallel ? hidden / t : hidden;
  const int64_t ffn = e * sb * model.ffn_size / t;
  // The fused attention writes its output and the fp32 logsumexp; no s x s scores.
  const int64_t attention = hidden / t + 4 * sb * model.num_heads / t;
  if (!is_llama(model))  // ln, c_attn, attention, c_proj, ln, c_fc, gelu, c_proj
    return {norm, 3 * hidden / t, attention, hidden, norm, ffn, ffn, hidden};
  const int64_t qkv =
      e * sb * (int64_t{model.num_heads} + 2 * kv_heads(model)) * head_dim(model) / t;
  // norm, q|k|v (rotated in place), attention, o, norm, gate|up, swiglu, down
  return {norm, qkv, attention, hidden, norm, 2 * ffn, ffn, hidden};
}

}  // namespace paraplan
