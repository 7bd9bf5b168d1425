// cost_model.h: analytic parameter counts, FLOPs, and activation and
// model-state memory of pipeline stages, composed from the per-architecture
// counts of model_counts.h (parameters, activation bytes per recompute mode)
// and the operation lists of transformer_ops.h (FLOPs). (Time: compute_model.h
// from the same operations, or a measured profile; stage_cost.h.)
//
// Conventions:
// - Sizes and tensor-parallel splits: model_counts.h (GPT-2 and Llama).
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
//   (scores, softmax, its dropout) vanish for every recompute mode. Per layer
//   (GPT-2), with element_bytes e: replicated, two LayerNorm inputs and the
//   attention and MLP inputs (4 tensors) plus two 1-byte dropout masks,
//   sbh*(4e + 2); split t ways, Q, K, V, the attention output, the c_fc and
//   GELU outputs (12 h-widths), 12*e*sbh/t; plus the fp32 per-row logsumexp,
//   4*a*s*b/t. (t = 1, 16-bit: 34*sbh + 4*asb; float32: 66*sbh + 4*asb.) Llama
//   keeps what its stage allocates (model_counts.cc). Selective recompute drops the
//   attention output (e*sbh/t) and logsumexp, which backward rebuilds from qkv;
//   full recompute keeps only the block input, e*sbh. Each block keeps its input,
//   so a stage without the head adds its output (sent on), e*sbh; every stage
//   the int32 tokens and targets of each micro-batch (8*sb), the head stage
//   the final norm's input and statistics, the head's input, the logits and
//   the fp32 losses.
// - Sequence parallelism (ParallelShape::sequence_parallel): the replicated
//   terms above (norm inputs, outputs and statistics, residual, the dropout
//   masks' allowance, the block input, the stage output and the head's norm
//   tensors) divide by t, as the runtime's stages hold token shards:
//   Korthikanti's 34*sbh/t (16-bit) instead of sbh*(10 + 24/t).
// - Transient: transient_mem_coef x (largest + second largest op output), or
//   the gradient scratch the runtime's stage keeps (model_counts.h) if larger;
//   plus, on a GPU preset in bf16, cuDNN's SDPA workspace, which the CUDA Ops
//   keep once the first attention ran on cuDNN (model_counts.h
//   cudnn_attention_workspace_bytes), and on any GPU preset the CUDA
//   backend's two GEMM workspaces (gemm_workspace_bytes, 64 MiB) and its
//   kernels' other scratch (cuda_kernel_scratch_bytes, a few MiB).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/cost/model_counts.h"
#include "planner/cost/zero_memory.h"
#include "planner/job/job_config.h"
#include "planner/schedule/schedule_kinds.h"

namespace paraplan {

// What one pipeline stage holds.
struct StageLayout {
  int first_layer = 0;
  int num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
  std::vector<schema::RecomputeMode> recompute;  // one per layer of the stage
  // ZeRO-3, per pipeline rank: the rank keeps its parameters gathered across
  // its micro-batches (StageSchedule.keep_parameters_gathered); false under
  // the other stages.
  bool keep_parameters_gathered = false;
};

int64_t stage_parameters(const ModelConfig& model, const StageLayout& stage,
                         int tensor_parallel = 1, int64_t replicate_below = 1);
// The whole model, tied head counted once.
int64_t model_parameters(const ModelConfig& model);
// A pipeline rank's parameters, its ends in separate chunks where
// separate_ends (ZB-V's first rank holds the embedding and the head in two
// chunks: a tied head is then a copy of its own, as on another rank).
int64_t rank_parameters(const ModelConfig& model, const StageLayout& stage, bool separate_ends,
                        int tensor_parallel = 1, int64_t replicate_below = 1);

// Forward FLOPs of one micro-batch (micro_batch_size sequences of seq_len
// tokens): multiply-adds count 2, causal attention over the full s x s (the
// MFU convention; Megatron's num_floating_point_operations and the Llama 3
// paper count the same).
double block_forward_flops(const ModelConfig& model, int micro_batch_size);
// QK^T and scores x V: 2 * 2 * b * s * s * (H D).
double attention_core_forward_flops(const ModelConfig& model, int micro_batch_size);
double head_forward_flops(const ModelConfig& model, int micro_batch_size);
// Backward of one block including its recomputation.
double block_backward_flops(const ModelConfig& model, int micro_batch_size,
                            schema::RecomputeMode recompute);

// How many of a stage's layers use each recompute mode. Blocks are identical in
// cost, so a stage's memory and time depend on these counts, not on the order.
// With them the rank's other choice that trades memory for time: ZeRO-3's
// keeping its parameters gathered (StageLayout's), ignored by the other stages.
struct RecomputeCounts {
  int none = 0, selective = 0, full = 0;
  bool keep_parameters_gathered = false;
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

// The head stage keeps the final norm's input and statistics, the head
// matmul's input, the logits and the fp32 per-token losses.
// With sequence parallelism the norm's input, output and statistics are token
// shards (the logits and losses cover every token).
int64_t head_activation_bytes(const ModelConfig& model, int micro_batch_size,
                              int tensor_parallel = 1, bool sequence_parallel = false);
// Every stage keeps each in-flight micro-batch's int32 token ids and targets
// (runtime/model/model_stage.h allocates both per slot on every stage).
int64_t embedding_activation_bytes(const ModelConfig& model, int micro_batch_size);
// A stage without the head also keeps its output [s, b, h] (the last block's or
// the embedding's), which it sends to the next stage; on the head stage that
// tensor is ln_f's input, counted by head_activation_bytes. With sequence
// parallelism it is the rank's token shard (so is the pipeline message).
int64_t stage_output_activation_bytes(const ModelConfig& model, int micro_batch_size,
                                      int tensor_parallel = 1, bool sequence_parallel = false);

// Weights, gradients and optimizer state for a parameter count, in bytes,
// each divided as the ZeRO stage's sharding says (zero_memory.h): weights =
// parameters * element_bytes / weights_divisor, gradients the same over
// gradients_divisor, optimizer_state = opt_resident_coef * parameters *
// element_bytes / optimizer_divisor; optimizer_transient =
// opt_transient_coef * parameters * element_bytes. The idealized model
// state (the ZeRO paper's); stage_memory adds what the runtime's buffers add.
struct ModelStateMemory {
  double weights = 0, gradients = 0, optimizer_state = 0, optimizer_transient = 0;
  double total() const { return weights + gradients + optimizer_state + optimizer_transient; }
};
ModelStateMemory model_state_memory(double parameters, int element_bytes, double opt_resident_coef,
                                    double opt_transient_coef, const ZeroSharding& sharding);

struct MemoryBreakdown {
  uint64_t weights = 0;
  uint64_t gradients = 0;
  uint64_t optimizer_state = 0;      // resident, divided over the ZeRO shards
  uint64_t optimizer_transient = 0;  // during the step only
  uint64_t gathered = 0;             // ZeRO-3's gathered slots (weights: the rest)
  uint64_t activations = 0;          // in-flight micro-batches plus the recompute working set
  uint64_t transient = 0;            // transient_mem_coef * (largest + second largest op output)
  // Of transient, what exceeds the workspace the runtime preallocates: the
  // plan fits with it, the runtime never allocates it (total() - reserve is
  // what replay measures against).
  uint64_t transient_reserve = 0;
  // NCCL's own buffers of the rank's communicators (communicator_memory.h):
  // a constant of the mesh on GPU clusters, 0 on the CPU backend (MPI).
  uint64_t communicator_buffers = 0;
  uint64_t total() const {
    return weights + gradients + optimizer_state + optimizer_transient + gathered + activations +
           transient + communicator_buffers;
  }
};

struct ParallelShape {
  int pipeline_stages = 1;
  int data_parallel = 1;
  int tensor_parallel = 1;
  // Megatron's sequence parallelism over the tensor group (tensor_parallel > 1):
  // the norm and residual regions and the pipeline messages are token shards.
  bool sequence_parallel = false;
  // Context parallelism (plan.fbs Mesh.context_parallel): each rank of a
  // group holds seq_len / cp tokens of every sequence, two load-balanced
  // chunks, and attention passes key/value blocks around the group's ring
  // (context_parallel_cost.h). Ranks: tp innermost, then cp, dp, pp.
  int context_parallel = 1;
  // The divisor of the replicated activations: t with sequence parallelism, else 1.
  int sequence_shards() const { return sequence_parallel ? tensor_parallel : 1; }
  // The ranks of a stage that hold the same parameters: the gradient is
  // reduced, and ZeRO shards, over the data- x context-parallel ranks.
  int gradient_replicas() const { return data_parallel * context_parallel; }
  // The ranks of one pipeline stage.
  int stage_ranks() const { return data_parallel * context_parallel * tensor_parallel; }
};

// "pp 2 x dp 4 x tp 8", with " x cp 2" before tp where context parallel and
// " (sequence parallel)" where so: a mesh as the search and its messages name it.
std::string mesh_name(const ParallelShape& shape);

// Micro-batches whose activations stage pipeline_rank holds at once: the
// kind's slots_held (planner/schedule/schedule_kinds.h): min(p - s, m) under
// 1F1B, all m under GPipe, under interleaved 1F1B each chunk's peak in its
// stream (summed), under the split-backward kinds the slots the runtime
// holds on that rank (max_slots_held of the generated stream, chunks summed).
int in_flight_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                            int num_micro_batches, int virtual_stages = 1);

// The split-backward kinds: the most micro-batches (the V kinds: chunk
// micro-batches, summed over the rank's chunks) waiting for their weight
// gradient at once on
// stage pipeline_rank, from the generated stream: what its pool of deferred
// weight-gradient copies grows to (runtime/model/decoder_stage.h). 0 for
// the kinds without a split backward.
int weight_pending_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                                 int num_micro_batches);

// Whether the kind splits the backward into BackwardInput and a deferred
// BackwardWeight (its row in schema/schedule_kinds.h).
bool splits_backward(schema::ScheduleKind kind);

// Memory of one device of stage pipeline_rank (with context parallelism its
// seq_len / cp tokens of every sequence, plus the ring's workspace:
// context_parallel_cost.h). Uses the planner options
// opt_resident_coef, opt_transient_coef, transient_mem_coef, zero_stage,
// zero_ngroups (ZeRO-1 shards optimizer state over data_parallel / zero_ngroups
// ranks and keeps a gradient shard beside the whole gradients; ZeRO-2 keeps
// only resident units, a pool and the shard; ZeRO-3 its parameters too, as
// a shard, resident units and gathered slots, more of them where counts
// keep the parameters gathered: zero_memory.h),
// memory_granularity (each component rounded up to a multiple), is_train
// (false: no gradients, optimizer state or kept activations), pipeline_scheduler and
// pipeline_virtual_stages.
MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const StageLayout& stage, int pipeline_rank,
                             const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches);
// The same from recompute counts (stage_memory counts, then calls this).
MemoryBreakdown stage_memory(const ModelConfig& model, const PlannerOptions& options,
                             const RecomputeCounts& counts, bool has_embedding, bool has_head,
                             int pipeline_rank, const ParallelShape& shape, int micro_batch_size,
                             int num_micro_batches);

// What stage_memory needs of a stage that does not depend on how many blocks
// it holds or how they recompute: worked out once per stage shape (the
// search asks for the memory of thousands of partitions of each), after
// which stage_memory is a few multiplications.
struct StageMemoryTerms {
  int64_t element_bytes = 4;
  int zero_stage = 0, chunks = 1;
  ZeroSharding sharding;                             // what the ZeRO stage divides, over its group
  ZeroTwoGradients zero_two;                         // ZeRO-2's gradient storage (shards_gradients)
  int64_t block_parameters = 0, end_parameters = 0;  // per block; embedding and head
  int64_t kept[3] = {0, 0, 0};                       // a block's activations per RecomputeMode
  // ZB-H1, ZB-V: per block and for the ends, what a micro-batch waiting for
  // its W keeps (weight_pending of them at most, in_flight counting their slots).
  int64_t deferred_per_block = 0, deferred_ends = 0;
  int64_t per_chunk_extra = 0;  // per micro-batch and chunk, after the 1 / chunks share
  int64_t in_flight = 1;
  int64_t weight_pending = 0;
  double largest_two_with_blocks = 0, largest_two_without = 0;  // op outputs
  double workspace = 0;
  // Context parallelism's ring buffers (context_parallel_cost.h; document
  // masking's too), beside the transient peak: the stage allocates them once
  // for its blocks.
  double ring_workspace = 0;
  // NCCL's buffers of the stage's communicators (communicator_memory.h): set
  // by StageCostModel from the cluster, once per setting; 0 here.
  int64_t communicator_buffers = 0;
  // cuDNN's SDPA workspace (model_counts.h cudnn_attention_workspace_bytes),
  // beside the transient peak, once per rank: set by StageCostModel from the
  // cluster (a GPU preset); 0 here.
  int64_t attention_workspace = 0;
  // The CUDA backend's GEMM workspaces (model_counts.h gemm_workspace_bytes),
  // the same way.
  int64_t gemm_workspace = 0;
  // The CUDA kernels' other scratch (model_counts.h
  // cuda_kernel_scratch_bytes), the same way (the rank holding the embedding
  // also its sort's).
  int64_t kernel_scratch = 0;
};
// document_mask: each in-flight micro-batch's documents table, and the ring's
// workspace even without a ring (context_parallel_cost.h).
StageMemoryTerms stage_memory_terms(const ModelConfig& model, const PlannerOptions& options,
                                    bool has_embedding, bool has_head, int pipeline_rank,
                                    const ParallelShape& shape, int micro_batch_size,
                                    int num_micro_batches, bool document_mask = false);
// The same without the micro-batches in flight (in_flight 1, weight_pending
// 0): what depends on the stage's shape alone, for a caller that counts
// them itself (StageCostModel, from the schedules it caches).
StageMemoryTerms stage_shape_memory_terms(const ModelConfig& model, const PlannerOptions& options,
                                          bool has_embedding, bool has_head,
                                          const ParallelShape& shape, int micro_batch_size,
                                          bool document_mask = false);
MemoryBreakdown stage_memory(const PlannerOptions& options, const StageMemoryTerms& terms,
                             const RecomputeCounts& counts);
// Its activations alone: the only part that changes with how a stage of a
// given block count recomputes (the recompute search asks for it most).
uint64_t stage_activation_bytes(const PlannerOptions& options, const StageMemoryTerms& terms,
                                const RecomputeCounts& counts);

// A plan's headline figures (stage_cost.h's combine_stage_estimates).
struct StepPrediction {
  double step_seconds = 0;
  double bubble_ratio = 0;  // idle fraction of the pipeline: (p - 1) / (m + p - 1)
  double tokens_per_second = 0;
  double mfu = 0;
};

}  // namespace paraplan
