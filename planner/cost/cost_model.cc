// cost_model.cc: stage parameter counts, FLOPs, and activation and
// model-state memory, from model_counts.h and transformer_ops.h (formulas and
// conventions in cost_model.h).
#include "planner/cost/cost_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <tuple>

#include "planner/cost/context_parallel_cost.h"
#include "planner/cost/transformer_ops.h"
#include "planner/schedule/schedule.h"
#include "planner/schedule/schedule_kinds.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

using schema::RecomputeMode;

std::string mesh_name(const ParallelShape& shape) {
  const auto text = [](int value) { return std::to_string(value); };
  return "pp " + text(shape.pipeline_stages) + " x dp " + text(shape.data_parallel) +
         (shape.context_parallel > 1 ? " x cp " + text(shape.context_parallel) : std::string()) +
         " x tp " + text(shape.tensor_parallel) +
         (shape.sequence_parallel ? " (sequence parallel)" : "");
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

int64_t rank_parameters(const ModelConfig& model, const StageLayout& stage, bool separate_ends,
                        int tensor_parallel, int64_t replicate_below) {
  if (!separate_ends || !stage.has_embedding || !stage.has_head)
    return stage_parameters(model, stage, tensor_parallel, replicate_below);
  StageLayout first = stage;
  first.has_head = false;
  return stage_parameters(model, first, tensor_parallel, replicate_below) +
         stage_parameters(model, {0, 0, false, true, {}}, tensor_parallel, replicate_below);
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
    case RecomputeMode::None:
      return backward;
  }
  return backward;
}

RecomputeCounts count_recompute(const StageLayout& stage) {
  RecomputeCounts counts;
  counts.keep_parameters_gathered = stage.keep_parameters_gathered;
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

int64_t head_activation_bytes(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                              bool sequence_parallel) {
  const int64_t e = element_bytes(model.dtype), r = sequence_parallel ? tensor_parallel : 1;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  return (2 * e * sb * model.d_model + norm_statistics_bytes_per_token(model) * sb) / r +
         e * sb * model.vocab_size / tensor_parallel + 4 * sb;
}

int64_t embedding_activation_bytes(const ModelConfig& model, int micro_batch_size) {
  return int64_t{8} * model.seq_len * micro_batch_size;
}

int64_t stage_output_activation_bytes(const ModelConfig& model, int micro_batch_size,
                                      int tensor_parallel, bool sequence_parallel) {
  return int64_t{element_bytes(model.dtype)} * model.seq_len * micro_batch_size * model.d_model /
         (sequence_parallel ? tensor_parallel : 1);
}

ModelStateMemory model_state_memory(double parameters, int element_bytes, double opt_resident_coef,
                                    double opt_transient_coef, const ZeroSharding& sharding) {
  const double whole = parameters * element_bytes;
  ModelStateMemory memory;
  memory.weights = whole / std::max(sharding.weights_divisor, 1);
  memory.gradients = whole / std::max(sharding.gradients_divisor, 1);
  memory.optimizer_state = opt_resident_coef * whole / std::max(sharding.optimizer_divisor, 1);
  memory.optimizer_transient = opt_transient_coef * whole;
  return memory;
}

namespace {

// Bytes backward_input keeps for one block's deferred backward_weight (ZB-H1's
// split backward; runtime/model/decoder_stage.h linear_backward), per
// micro-batch waiting for its W, per device: a copy of each GEMM's output
// gradient [m, n], and of its input [m, k] where that lives in shared scratch
// (recomputed blocks; gathered by sequence parallelism). Inputs are counted
// for every block, so that more recomputation never means more memory (the
// search relies on it): an upper bound by the inputs of blocks that keep theirs.
int64_t block_deferred_weight_bytes(const ModelConfig& model, int micro_batch_size,
                                    int tensor_parallel) {
  double elements = 0;
  for (const Gemm& gemm : block_ops(model, micro_batch_size, tensor_parallel).forward.gemms)
    elements += gemm.count * gemm.m * (gemm.n + gemm.k);
  return static_cast<int64_t>(elements) * element_bytes(model.dtype);
}

}  // namespace

bool splits_backward(schema::ScheduleKind kind) {
  return schedule_kind_traits(kind).splits_backward;
}

int weight_pending_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                                 int num_micro_batches) {
  return schedule_kind_row(kind).weight_pending(num_stages, num_micro_batches, pipeline_rank);
}

int in_flight_micro_batches(schema::ScheduleKind kind, int pipeline_rank, int num_stages,
                            int num_micro_batches, int virtual_stages) {
  return schedule_kind_row(kind).slots_held(num_stages, num_micro_batches, virtual_stages,
                                            pipeline_rank);
}

namespace {

// Sizes of the op outputs one micro-batch produces on a device of this stage.
std::vector<int64_t> op_output_bytes(const ModelConfig& model, const StageLayout& stage,
                                     int micro_batch_size, int tensor_parallel,
                                     bool sequence_parallel) {
  const int64_t e = element_bytes(model.dtype), t = tensor_parallel;
  const int64_t sb = int64_t{model.seq_len} * micro_batch_size;
  const int64_t hidden = e * sb * model.d_model;
  std::vector<int64_t> outputs;
  if (stage.has_embedding) outputs.push_back(hidden);
  if (stage.num_layers > 0)
    for (int64_t bytes :
         block_op_output_bytes(model, micro_batch_size, tensor_parallel, sequence_parallel))
      outputs.push_back(bytes);
  if (stage.has_head) {
    outputs.push_back(hidden);
    outputs.push_back(e * sb * model.vocab_size / t);
  }
  return outputs;
}

uint64_t round_up(double bytes, int granularity) {
  const uint64_t whole = static_cast<uint64_t>(std::ceil(bytes));
  if (granularity <= 1) return whole;  // (the default; spares the search a division)
  const uint64_t g = static_cast<uint64_t>(granularity);
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
  return stage_memory(options,
                      stage_memory_terms(model, options, has_embedding, has_head, pipeline_rank,
                                         shape, micro_batch_size, num_micro_batches),
                      counts);
}

StageMemoryTerms stage_memory_terms(const ModelConfig& model, const PlannerOptions& options,
                                    bool has_embedding, bool has_head, int pipeline_rank,
                                    const ParallelShape& shape, int micro_batch_size,
                                    int num_micro_batches, bool document_mask) {
  StageMemoryTerms terms = stage_shape_memory_terms(model, options, has_embedding, has_head, shape,
                                                    micro_batch_size, document_mask);
  const schema::ScheduleKind kind = options.pipeline_scheduler.value_or(default_schedule_kind());
  terms.in_flight = in_flight_micro_batches(kind, pipeline_rank, shape.pipeline_stages,
                                            num_micro_batches, terms.chunks);
  if (splits_backward(kind) && options.is_train)
    terms.weight_pending =
        weight_pending_micro_batches(kind, pipeline_rank, shape.pipeline_stages, num_micro_batches);
  return terms;
}

StageMemoryTerms stage_shape_memory_terms(const ModelConfig& whole_model,
                                          const PlannerOptions& options, bool has_embedding,
                                          bool has_head, const ParallelShape& shape,
                                          int micro_batch_size, bool document_mask) {
  StageMemoryTerms terms;
  // The setting's kind (StageCostModel fixes it); unset, the one that runs
  // every setting.
  const schema::ScheduleKind kind = options.pipeline_scheduler.value_or(default_schedule_kind());
  const int t = shape.tensor_parallel;
  // Parameters are the whole model's; every activation is per token of the
  // rank's share of each sequence (context parallelism).
  const ModelConfig model = context_parallel_tokens(whole_model, shape.context_parallel);
  const int zero_group =
      zero_group_size(options.zero_stage, shape.gradient_replicas(), options.zero_ngroups);
  terms.zero_stage = options.zero_stage;
  terms.sharding = zero_sharding(options.zero_stage, zero_group);
  const int64_t replicate_below = options.ignore_small_tensor_threshold;
  const bool separate_ends = v_shaped(kind) && shape.pipeline_stages > 1;
  terms.block_parameters =
      stage_parameters(whole_model, {0, 1, false, false, {}}, t, replicate_below);
  terms.end_parameters = rank_parameters(whole_model, {0, 0, has_embedding, has_head, {}},
                                         separate_ends, t, replicate_below);
  // Interleaved and the V kinds: in flight counts chunks, each a 1 / v share
  // of the blocks with its own ends (embedding, head or output: counted for
  // every chunk); ZeRO's units are each chunk's own.
  const bool chunked = schedule_kind_traits(kind).chunked();
  terms.chunks = chunked ? std::max(options.pipeline_virtual_stages, 1) : 1;
  if (shards_gradients(options.zero_stage))
    terms.zero_two = zero_two_gradients(
        zero_two_ends(whole_model, has_embedding, has_head, separate_ends, t, replicate_below),
        terms.block_parameters, zero_group, splits_backward(kind), options.zero_layers_per_unit,
        terms.chunks);
  const int64_t e = terms.element_bytes = element_bytes(model.dtype);
  const bool sp = shape.sequence_parallel && t > 1;
  for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full})
    terms.kept[static_cast<int>(mode)] =
        block_activation_bytes(model, micro_batch_size, mode, t, sp);
  const int64_t local_rows =
      int64_t{model.seq_len} * micro_batch_size / (sp ? static_cast<int64_t>(t) : 1);
  const bool zero_bubble = splits_backward(kind);
  if (zero_bubble && options.is_train) {
    // A micro-batch waiting for its W also keeps what backward_input copied
    // for it: each block's share, the embedding's input gradient, and with
    // sequence parallelism the head's gathered final-norm output.
    terms.deferred_per_block = block_deferred_weight_bytes(model, micro_batch_size, t);
    if (has_embedding) terms.deferred_ends += e * local_rows * model.d_model;
    if (has_head && sp)
      terms.deferred_ends += e * int64_t{model.seq_len} * micro_batch_size * model.d_model;
  }
  // Posted transfers (interleaved, ZB-H1, ZB-V): a stage receiving output
  // gradients receives each in-flight micro-batch's into a buffer of its own.
  if (options.is_train && (terms.chunks > 1 || (zero_bubble && !has_head)))
    terms.per_chunk_extra += e * local_rows * model.d_model;
  terms.per_chunk_extra += embedding_activation_bytes(model, micro_batch_size);
  if (document_mask) terms.per_chunk_extra += document_table_bytes(whole_model, micro_batch_size);
  terms.per_chunk_extra += has_head ? head_activation_bytes(model, micro_batch_size, t, sp)
                                    : stage_output_activation_bytes(model, micro_batch_size, t, sp);
  for (const int layers : {1, 0}) {
    std::vector<int64_t> outputs =
        op_output_bytes(model, {0, layers, has_embedding, has_head, {}}, micro_batch_size, t, sp);
    std::sort(outputs.begin(), outputs.end(), std::greater<>());
    (layers > 0 ? terms.largest_two_with_blocks : terms.largest_two_without) = static_cast<double>(
        (outputs.size() > 0 ? outputs[0] : 0) + (outputs.size() > 1 ? outputs[1] : 0));
  }
  terms.workspace = static_cast<double>(
      stage_workspace_bytes(model, micro_batch_size, t, has_head, sp, whole_model.seq_len));
  terms.ring_workspace = static_cast<double>(context_parallel_workspace_bytes(
      whole_model, micro_batch_size, t, shape.context_parallel, document_mask));
  return terms;
}

uint64_t stage_activation_bytes(const PlannerOptions& options, const StageMemoryTerms& terms,
                                const RecomputeCounts& counts) {
  if (!options.is_train) return 0;
  const int layers = counts.layers();
  // Integer sums are exact (far below 2^63), so any layer order gives the same bytes.
  const int64_t kept_none = terms.kept[0], kept_selective = terms.kept[1],
                kept_full = terms.kept[2];
  int64_t per_micro_batch =
      counts.none * kept_none + counts.selective * kept_selective + counts.full * kept_full;
  // Backward of a recomputed layer rebuilds what it dropped, one layer at a time.
  const int64_t recompute_working_set = counts.full > 0        ? kept_none - kept_full
                                        : counts.selective > 0 ? kept_none - kept_selective
                                                               : 0;
  const int chunks = terms.chunks;
  per_micro_batch = (per_micro_batch + chunks - 1) / chunks + terms.per_chunk_extra;
  // Only the micro-batches waiting for their W keep the deferred copies:
  // each at most the larger chunk's blocks and the ends (ZB-V's chunks may
  // wait for unequal numbers, the ends' chunk for the most).
  const int64_t deferred =
      (layers + chunks - 1) / chunks * terms.deferred_per_block + terms.deferred_ends;
  // Interleaved: each chunk's stage has its own recompute scratch.
  return round_up(
      static_cast<double>(terms.in_flight * per_micro_batch + terms.weight_pending * deferred +
                          recompute_working_set * chunks),
      options.memory_granularity);
}

MemoryBreakdown stage_memory(const PlannerOptions& options, const StageMemoryTerms& terms,
                             const RecomputeCounts& counts) {
  const int layers = counts.layers();
  const ModelStateMemory state = model_state_memory(
      static_cast<double>(layers * terms.block_parameters + terms.end_parameters),
      terms.element_bytes, options.opt_resident_coef, options.opt_transient_coef, terms.sharding);
  const int chunks = terms.chunks;
  const double largest_two = layers > 0 ? terms.largest_two_with_blocks : terms.largest_two_without;

  const int g = options.memory_granularity;
  MemoryBreakdown memory;
  const bool zero_two = shards_gradients(terms.zero_stage);
  const double e = static_cast<double>(terms.element_bytes);
  if (shards_parameters(terms.zero_stage)) {
    // ZeRO-3 (zero_memory.h): the shard and resident units, and the
    // gathered slots apart; no parameter buffer, so no spill.
    memory.weights =
        round_up(e * static_cast<double>(zero_three_owned_elements(terms.zero_two, layers)), g);
    memory.gathered = round_up(e * static_cast<double>(zero_three_gathered_elements(
                                       terms.zero_two, layers, counts.keep_parameters_gathered)),
                               g);
  } else {
    // ZeRO-2: the parameter buffer's spill past the last unit.
    memory.weights = round_up(
        zero_two ? state.weights + e * static_cast<double>(terms.zero_two.parameter_spill())
                 : state.weights,
        g);
  }
  // The op outputs' peak, or the gradient scratch the stage keeps if larger.
  // Interleaved: every chunk's stage keeps its own gradient scratch. What the
  // runtime allocates of it: the scratch, the ring's and cuDNN's workspace.
  const double attention_workspace =
      static_cast<double>(terms.attention_workspace + terms.gemm_workspace + terms.kernel_scratch);
  const double workspace =
      terms.workspace * chunks + terms.ring_workspace * chunks + attention_workspace;
  memory.transient =
      round_up(std::max(options.transient_mem_coef * largest_two, terms.workspace * chunks) +
                   terms.ring_workspace * chunks + attention_workspace,
               g);
  memory.transient_reserve = memory.transient - std::min(memory.transient, round_up(workspace, g));
  memory.communicator_buffers = round_up(static_cast<double>(terms.communicator_buffers), g);
  if (options.is_train) {
    if (zero_two) {
      // ZeRO-2 and 3 (zero_memory.h): resident units, the pool and the fp32
      // shard; the optimizer state is the shard's (its units padded).
      memory.gradients = round_up(static_cast<double>(terms.zero_two.bytes(layers, e)), g);
      memory.optimizer_state =
          round_up(options.opt_resident_coef * e *
                       static_cast<double>(terms.zero_two.shard_elements(layers)),
                   g);
    } else {
      // ZeRO-1 (runtime/parallel/distributed_optimizer.h) reduce-scatters into a
      // shard buffer beside the full gradients: 1 / its group more.
      const double shard = shards_optimizer_state(terms.zero_stage)
                               ? state.gradients / terms.sharding.optimizer_divisor
                               : 0;
      memory.gradients = round_up(state.gradients + shard, g);
      memory.optimizer_state = round_up(state.optimizer_state, g);
    }
    memory.optimizer_transient = round_up(state.optimizer_transient, g);
  }
  memory.activations = stage_activation_bytes(options, terms, counts);
  return memory;
}

}  // namespace paraplan
