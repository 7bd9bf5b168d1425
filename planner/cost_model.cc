// cost_model.cc: parameter counts, FLOPs, and activation and model-state
// memory of GPT-2 stages (formulas and conventions in cost_model.h).
#include "planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "planner/transformer_ops.h"

namespace paraplan {

using schema::RecomputeMode;

int element_bytes(schema::DType dtype) {
  return dtype == schema::DType::BFloat16 ? 2 : 4;
}

namespace {
// One tensor-parallel shard of a split tensor, or the whole of a small one.
int64_t shard(int64_t elements, int64_t tensor_parallel, int64_t replicate_below) {
  return elements < replicate_below ? elements : elements / tensor_parallel;
}
}  // namespace

int64_t block_parameters(const ModelConfig& model, int tensor_parallel, int64_t replicate_below) {
  const int64_t C = model.d_model, F = model.ffn_size, t = tensor_parallel, r = replicate_below;
  // Column-parallel c_attn and c_fc (weights and biases), row-parallel attn
  // c_proj and mlp c_proj weights.
  const int64_t split = shard(3 * C * C, t, r) + shard(3 * C, t, r) + shard(C * C, t, r) +
                        shard(F * C, t, r) + shard(F, t, r) + shard(C * F, t, r);
  const int64_t replicated = 4 * C + 2 * C;  // ln_1, ln_2, the two row-parallel biases
  return split + replicated;
}

int64_t embedding_parameters(const ModelConfig& model, int tensor_parallel,
                             int64_t replicate_below) {
  const int64_t C = model.d_model;
  return shard(int64_t{model.vocab_size} * C, tensor_parallel, replicate_below) +
         int64_t{model.seq_len} * C;
}

int64_t head_parameters(const ModelConfig& model, bool stage_has_embedding, int tensor_parallel,
                        int64_t replicate_below) {
  const int64_t C = model.d_model;
  const bool own_weight = !model.tied_embeddings || !stage_has_embedding;
  return 2 * C +
         (own_weight ? shard(int64_t{model.vocab_size} * C, tensor_parallel, replicate_below) : 0);
}

int64_t stage_parameters(const ModelConfig& model, const StageLayout& stage, int tensor_parallel,
                         int64_t replicate_below) {
  int64_t total =
      int64_t{stage.num_layers} * block_parameters(model, tensor_parallel, replicate_below);
  if (stage.has_embedding) total += embedding_parameters(model, tensor_parallel, replicate_below);
  if (stage.has_head)
    total += head_parameters(model, stage.has_embedding, tensor_parallel, replicate_below);
  return total;
}

int64_t model_parameters(const ModelConfig& model) {
  StageLayout whole{0, model.num_layers, true, true, {}};
  return stage_parameters(model, whole);
}

double block_forward_flops(const ModelConfig& model, int micro_batch_size) {
  return block_ops(model, micro_batch_size, 1).forward.model_flops();
}

double attention_core_forward_flops(const ModelConfig& model, int micro_batch_size) {
  return block_ops(model, micro_batch_size, 1).forward.attention.forward_flops();
}

double head_forward_flops(const ModelConfig& model, int micro_batch_size) {
  return head_ops(model, micro_batch_size, 1).forward.model_flops();
}

double block_backward_flops(const ModelConfig& model, int micro_batch_size,
                            RecomputeMode recompute) {
  const double backward = 2 * block_forward_flops(model, micro_batch_size);
  switch (recompute) {
    case RecomputeMode::Full:
      return backward + block_forward_flops(model, micro_batch_size);
    case RecomputeMode::Selective:
      return backward + attention_core_forward_flops(model, micro_batch_size);
    default:
      return backward;
  }
}

RecomputeCounts count_recompute(const StageLayout& stage) {
  RecomputeCounts counts;
  for (int i = 0; i < stage.num_layers; ++i) {
    const RecomputeMode mode =
        i < static_cast<int>(stage.recompute.size()) ? stage.recompute[i] : RecomputeMode::None;
    if (mode == RecomputeMode::Full) {
      ++counts.full;
    } else if (mode == RecomputeMode::Selective) {
      ++counts.selective;
    } else {
      ++counts.none;
    }
  }
  return counts;
}

StageFlops stage_flops(const ModelConfig& model, const RecomputeCounts& counts, bool has_head,
                       int micro_batch_size) {
  StageFlops flops;
  const double block = block_forward_flops(model, micro_batch_size);
  flops.forward = counts.layers() * block;
  flops.backward =
      counts.none * block_backward_flops(model, micro_batch_size, RecomputeMode::None) +
      counts.selective * block_backward_flops(model, micro_batch_size, RecomputeMode::Selective) +
      counts.full * block_backward_flops(model, micro_batch_size, RecomputeMode::Full);
  if (has_head) {
    flops.forward += head_forward_flops(model, micro_batch_size);
    flops.backward += 2 * head_forward_flops(model, micro_batch_size);
  }
  return flops;
}

StageFlops stage_flops(const ModelConfig& model, const StageLayout& stage, int micro_batch_size) {
  return stage_flops(model, count_recompute(stage), stage.has_head, micro_batch_size);
}

double model_flops_per_step(const ModelConfig& model, int global_batch_size) {
  const double forward = model.num_layers * block_forward_flops(model, global_batch_size) +
                         head_forward_flops(model, global_batch_size);
  return 3 * forward;
}

int64_t block_activation_bytes(const ModelConfig& model, int micro_batch_size,
                               RecomputeMode recompute, int tensor_parallel) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  const int64_t sbh = int64_t{model.seq_len} * micro_batch_size * model.d_model;
  if (recompute == RecomputeMode::Full) return e * sbh;  // only the block input
  // Replicated: two LayerNorm inputs and the attention and MLP inputs (4 tensors)
  // plus two 1-byte dropout masks; split: Q, K, V, the c_fc output and the GELU
  // output (11 h-widths of tensors).
  const int64_t bytes = sbh * (4 * e + 2) + sbh * 11 * e / t;
  if (recompute == RecomputeMode::Selective) return bytes;
  // Without recompute also the attention output and the fp32 logsumexp per
  // (head, token), which selective recompute rebuilds from qkv.
  const int64_t asb = int64_t{model.num_heads} * model.seq_len * micro_batch_size;
  return bytes + sbh * e / t + 4 * asb / t;
}

int64_t head_activation_bytes(const ModelConfig& model, int micro_batch_size, int tensor_parallel) {
  const int64_t e = element_bytes(model.dtype);
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  return 2 * e * sb * model.d_model + e * sb * model.vocab_size / tensor_parallel;
}

int64_t embedding_activation_bytes(const ModelConfig& model, int micro_batch_size) {
  return int64_t{4} * model.seq_len * micro_batch_size;
}

int64_t stage_output_activation_bytes(const ModelConfig& model, int micro_batch_size) {
  return int64_t{element_bytes(model.dtype)} * model.seq_len * micro_batch_size * model.d_model;
}

ModelStateMemory model_state_memory(double parameters, int element_bytes, double opt_resident_coef,
                                    double opt_transient_coef, int zero_shards) {
  ModelStateMemory memory;
  memory.weights = parameters * element_bytes;
  memory.gradients = memory.weights;
  memory.optimizer_state = opt_resident_coef * memory.weights / std::max(zero_shards, 1);
  memory.optimizer_transient = opt_transient_coef * memory.weights;
  return memory;
}

int in_flight_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                            int num_micro_batches) {
  if (kind == schema::ScheduleKind::GPipe) return num_micro_batches;
  return std::min(num_stages - pipeline_rank, num_micro_batches);
}

namespace {

// Sizes of the op outputs one micro-batch produces on a device of this stage.
std::vector<int64_t> op_output_bytes(const ModelConfig& model, const StageLayout& stage,
                                     int micro_batch_size, int tensor_parallel) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  const int64_t hidden = e * sb * model.d_model;
  std::vector<int64_t> outputs;
  if (stage.has_embedding) outputs.push_back(hidden);
  if (stage.num_layers > 0) {
    const int64_t ffn = e * sb * model.ffn_size / t;
    // The fused attention writes its output and the fp32 logsumexp; no s x s scores.
    const int64_t attention = hidden / t + 4 * sb * model.num_heads / t;
    // ln, c_attn, attention, c_proj, ln, c_fc, gelu, c_proj
    for (int64_t bytes : {hidden, 3 * hidden / t, attention, hidden, hidden, ffn, ffn, hidden})
      outputs.push_back(bytes);
  }
  if (stage.has_head) {
    outputs.push_back(hidden);
    outputs.push_back(e * sb * model.vocab_size / t);
  }
  return outputs;
}

uint64_t round_up(double bytes, int granularity) {
  const uint64_t whole = static_cast<uint64_t>(std::ceil(bytes));
  const uint64_t g = static_cast<uint64_t>(std::max(granularity, 1));
  return (whole + g - 1) / g * g;
}

}  // namespace

MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const StageLayout& stage, int pipeline_rank,
                             const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches) {
  return stage_memory(model, options, count_recompute(stage), stage.has_embedding, stage.has_head,
                      pipeline_rank, shape, micro_batch_size, num_micro_batches);
}

MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const RecomputeCounts& counts, bool has_embedding, bool has_head,
                             int pipeline_rank, const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches) {
  const int t = shape.tensor_parallel;
  const int zero_shards =
      options.zero_stage == 1 ? std::max(shape.data_parallel / options.zero_ngroups, 1) : 1;
  const StageLayout layout{0, counts.layers(), has_embedding, has_head, {}};
  const ModelStateMemory state =
      model_state_memory(static_cast<double>(stage_parameters(
                             model, layout, t, options.ignore_small_tensor_threshold)),
                         element_bytes(model.dtype), options.opt_resident_coef,
                         options.opt_transient_coef, zero_shards);

  // Integer sums are exact (far below 2^63), so any layer order gives the same bytes.
  const int64_t kept_none = block_activation_bytes(model, micro_batch_size, RecomputeMode::None, t);
  const int64_t kept_selective =
      block_activation_bytes(model, micro_batch_size, RecomputeMode::Selective, t);
  const int64_t kept_full = block_activation_bytes(model, micro_batch_size, RecomputeMode::Full, t);
  int64_t per_micro_batch =
      counts.none * kept_none + counts.selective * kept_selective + counts.full * kept_full;
  // Backward of a recomputed layer rebuilds what it dropped, one layer at a time.
  const int64_t recompute_working_set = counts.full > 0        ? kept_none - kept_full
                                        : counts.selective > 0 ? kept_none - kept_selective
                                                               : 0;
  if (has_embedding) per_micro_batch += embedding_activation_bytes(model, micro_batch_size);
  if (has_head) {
    per_micro_batch += head_activation_bytes(model, micro_batch_size, t);
  } else {
    per_micro_batch += stage_output_activation_bytes(model, micro_batch_size);
  }
  const int in_flight = in_flight_micro_batches(options.pipeline_scheduler, pipeline_rank,
                                                shape.pipeline_stages, num_micro_batches);

  std::vector<int64_t> outputs = op_output_bytes(model, layout, micro_batch_size, t);
  std::sort(outputs.begin(), outputs.end(), std::greater<>());
  const double largest_two =
      (outputs.size() > 0 ? outputs[0] : 0) + (outputs.size() > 1 ? outputs[1] : 0);

  const int g = options.memory_granularity;
  MemoryBreakdown memory;
  memory.weights = round_up(state.weights, g);
  memory.transient = round_up(options.transient_mem_coef * largest_two, g);
  if (options.is_train) {
    // ZeRO-1 (runtime/parallel/distributed_optimizer.h) reduce-scatters into a shard
    // buffer beside the full gradients: 1 / zero_shards more.
    const double shard = options.zero_stage == 1 ? state.gradients / zero_shards : 0;
    memory.gradients = round_up(state.gradients + shard, g);
    memory.optimizer_state = round_up(state.optimizer_state, g);
    memory.optimizer_transient = round_up(state.optimizer_transient, g);
    memory.activations =
        round_up(static_cast<double>(in_flight * per_micro_batch + recompute_working_set), g);
  }
  return memory;
}

}  // namespace paraplan
