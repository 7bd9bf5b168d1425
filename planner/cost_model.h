// cost_model.h: analytic parameter counts, FLOPs, and activation and
// model-state memory of GPT-2 pipeline stages. (Time: compute_model.h from the
// operations of transformer_ops.h, or a measured profile; stage_cost.h.)
//
// Conventions:
// - Sizes follow runtime/model/gpt/gpt_layout.h (Hugging Face GPT-2): a block holds ln_1,
//   c_attn [3C, C], attn c_proj [C, C], ln_2, c_fc [F, C], mlp c_proj [C, F], all
//   with biases. The first stage holds wte and wpe; the last holds ln_f and the
//   head, which is wte itself when tied and on the same stage, else its own copy.
// - Tensor parallelism is Megatron's: c_attn, c_fc and their biases, attn c_proj
//   and mlp c_proj weights, wte and the head are split t ways; LayerNorms and the
//   row-parallel biases are replicated; wpe is replicated.
// - FLOPs are the model FLOPs of transformer_ops.h's operation lists (the
//   same GEMMs the time model costs): multiply-adds count 2 and causal
//   attention counts the full s x s (the usual MFU convention). Backward = 2 x
//   forward; full recompute adds one
//   block forward, selective adds the attention core (QK^T and scores x V: the
//   one fused attention forward that rebuilds its output). The fused attention
//   backward's own recomputation of the scores is not counted (as in MFU).
// - Activations follow Korthikanti et al., "Reducing Activation Recomputation in
//   Large Transformer Models", with the attention fused (flash attention, as the
//   runtime's kernels): no s x s tensor is stored, so their a*s^2*b terms
//   (scores, softmax, its dropout) vanish for every recompute mode. Per layer,
//   with element_bytes e: replicated, two LayerNorm inputs and the attention and
//   MLP inputs (4 tensors) plus two 1-byte dropout masks, sbh*(4e + 2); split t
//   ways, Q, K, V, the attention output, the c_fc and GELU outputs (12 h-widths),
//   12*e*sbh/t; plus the fp32 per-row logsumexp, 4*a*s*b/t. (t = 1, 16-bit:
//   34*sbh + 4*asb; float32: 66*sbh + 4*asb.) Selective recompute drops the
//   attention output (e*sbh/t) and logsumexp, which backward rebuilds from qkv;
//   full recompute keeps only the block input, e*sbh. Each block keeps its input,
//   so a stage without the head adds its output (sent on), e*sbh; the embedding
//   stage adds the int32 tokens, the head stage ln_f's input, the head's input
//   and the logits.
#pragma once

#include <cstdint>
#include <vector>

#include "planner/job_config.h"

namespace paraplan {

// What one pipeline stage holds.
struct StageLayout {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
  std::vector<schema::RecomputeMode> recompute;  // one per layer of the stage
};

int element_bytes(schema::DType dtype);

// Parameters held by one device of one tensor-parallel group (t = 1: all).
// replicate_below is [planner] ignore_small_tensor_threshold: a tensor the
// Megatron layout would split but with fewer elements than this stays whole on
// every device of the group (the default 1 splits everything).
int64_t block_parameters(const ModelConfig& model, int tensor_parallel = 1,
                         int64_t replicate_below = 1);
int64_t embedding_parameters(const ModelConfig& model, int tensor_parallel = 1,
                             int64_t replicate_below = 1);  // wte + wpe
// ln_f plus the head weight when the stage needs its own (untied, or tied but on a
// stage without the embedding).
int64_t head_parameters(const ModelConfig& model, bool stage_has_embedding, int tensor_parallel = 1,
                        int64_t replicate_below = 1);
int64_t stage_parameters(const ModelConfig& model, const StageLayout& stage,
                         int tensor_parallel = 1, int64_t replicate_below = 1);
// The whole model, tied head counted once.
int64_t model_parameters(const ModelConfig& model);

// Forward FLOPs of one micro-batch (micro_batch_size sequences of seq_len tokens).
double block_forward_flops(const ModelConfig& model, int micro_batch_size);
double attention_core_forward_flops(const ModelConfig& model, int micro_batch_size);
double head_forward_flops(const ModelConfig& model, int micro_batch_size);
// Backward of one block including its recomputation.
double block_backward_flops(const ModelConfig& model, int micro_batch_size,
                            schema::RecomputeMode recompute);

// How many of a stage's layers use each recompute mode. Blocks are identical in
// cost, so a stage's memory and time depend on these counts, not on the order.
struct RecomputeCounts {
  int none = 0, selective = 0, full = 0;
  int layers() const { return none + selective + full; }
  bool operator==(const RecomputeCounts&) const = default;
};
RecomputeCounts count_recompute(const StageLayout& stage);

struct StageFlops {
  double forward = 0;   // per micro-batch
  double backward = 0;  // per micro-batch, including recomputation
};
StageFlops stage_flops(const ModelConfig& model, const StageLayout& stage, int micro_batch_size);
StageFlops stage_flops(const ModelConfig& model, const RecomputeCounts& counts, bool has_head,
                       int micro_batch_size);

// Model FLOPs (forward + backward, no recomputation) of one training step over
// global_batch_size sequences: the numerator of MFU.
double model_flops_per_step(const ModelConfig& model, int global_batch_size);

// Bytes one block keeps for backward, per micro-batch, per device.
int64_t block_activation_bytes(const ModelConfig& model, int micro_batch_size,
                               schema::RecomputeMode recompute, int tensor_parallel = 1);
// The head stage keeps ln_f's input, the head matmul's input and the logits.
int64_t head_activation_bytes(const ModelConfig& model, int micro_batch_size,
                              int tensor_parallel = 1);
// The embedding stage keeps the int32 token ids.
int64_t embedding_activation_bytes(const ModelConfig& model, int micro_batch_size);
// A stage without the head also keeps its output [s, b, h] (the last block's or
// the embedding's), which it sends to the next stage; on the head stage that
// tensor is ln_f's input, counted by head_activation_bytes.
int64_t stage_output_activation_bytes(const ModelConfig& model, int micro_batch_size);

// Weights, gradients and optimizer state for a parameter count, in bytes:
// weights = gradients = parameters * element_bytes; optimizer_state =
// opt_resident_coef * weights / zero_shards; optimizer_transient =
// opt_transient_coef * weights.
struct ModelStateMemory {
  double weights = 0, gradients = 0, optimizer_state = 0, optimizer_transient = 0;
  double total() const { return weights + gradients + optimizer_state + optimizer_transient; }
};
ModelStateMemory model_state_memory(double parameters, int element_bytes, double opt_resident_coef,
                                    double opt_transient_coef, int zero_shards);

struct MemoryBreakdown {
  uint64_t weights = 0;
  uint64_t gradients = 0;
  uint64_t optimizer_state = 0;      // resident, divided over the ZeRO shards
  uint64_t optimizer_transient = 0;  // during the step only
  uint64_t activations = 0;          // in-flight micro-batches plus the recompute working set
  uint64_t transient = 0;            // transient_mem_coef * (largest + second largest op output)
  uint64_t total() const {
    return weights + gradients + optimizer_state + optimizer_transient + activations + transient;
  }
};

struct ParallelShape {
  int pipeline_stages = 1;
  int data_parallel = 1;
  int tensor_parallel = 1;
};

// Micro-batches whose activations stage pipeline_rank holds at once: min(p - s, m)
// under 1F1B, all m under GPipe.
int in_flight_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                            int num_micro_batches);

// Memory of one device of stage pipeline_rank. Uses the planner options
// opt_resident_coef, opt_transient_coef, transient_mem_coef, zero_stage,
// zero_ngroups (ZeRO-1 shards optimizer state over data_parallel / zero_ngroups
// ranks), memory_granularity (each component rounded up to a multiple), is_train
// (false: no gradients, optimizer state or kept activations) and pipeline_scheduler.
MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const StageLayout& stage, int pipeline_rank,
                             const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches);
// The same from recompute counts (stage_memory counts, then calls this).
MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const RecomputeCounts& counts, bool has_embedding, bool has_head,
                             int pipeline_rank, const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches);

// A plan's headline figures (stage_cost.h's combine_stage_estimates).
struct StepPrediction {
  double step_seconds = 0;
  double bubble_ratio = 0;  // idle fraction of the pipeline: (p - 1) / (m + p - 1)
  double tokens_per_second = 0;
  double mfu = 0;
};

}  // namespace paraplan
