// stage_cost.h: the planner's memory and time model of one pipeline stage, and
// of a whole plan, for one plan-wide setting (mesh, micro-batching, ZeRO).
//
// Contract:
// - A stage is described by its pipeline rank (stage 0 holds the embedding, the
//   last stage the head) and the recompute counts of its layers: blocks are
//   identical, so nothing else matters. estimate() is the one definition every
//   solver (dynamic program, ILP, exhaustive oracle) and the plan writer use, so
//   their predictions agree to the bit.
// - Memory: cost_model.h's stage_memory (weights, gradients, opt_resident_coef,
//   opt_transient_coef, ZeRO-1, 2 and 3 over data_parallel / zero_ngroups ranks, the
//   in-flight micro-batches of its schedule position, transient_mem_coef).
// - Time per micro-batch ("slot"): compute (the analytic model of
//   compute_model.h over transformer_ops.h's operations of one device of the
//   tensor-parallel group, or a measured profile's entry for the
//   tensor-parallel degree and micro-batch size), the Megatron tensor-parallel all-reduces (2 per
//   block forward, 2 backward, 2 more for a fully recomputed block; 1 for the vocabulary-parallel
//   embedding forward, 1 for the head's input gradient plus two small cross-entropy reductions),
//   the point-to-point sends the stage initiates (activation to the next stage, gradient to the
//   previous one), and with context parallelism the ring's exposed transfers
//   (context_parallel_cost.h; every other part then runs on the rank's seq_len / cp tokens, and
//   the data-parallel parts below span the data x context-parallel ranks; the
//   compute is analytic, a profile measuring no context parallelism). Where the
//   profile measured a block's pace in its real tensor-parallel group
//   (TensorGroupPace: ranks on cores of their own), the block's compute is scaled by its ratios
//   and each of those calls also waits the measured wait per call for the group's last member
//   (counted in the slot, and in the stage's bubble, as replay counts it: waiting).
// - Per step ("tail", stage_reduction.cc): the data-parallel gradient
//   reduction (ring all-reduce, or under ZeRO-1 reduce-scatter in the group +
//   all-reduce across groups + all-gather of the updated weights; under
//   ZeRO-2 each micro-batch's reduce-scatter of its streamed units, one per
//   unit (zero_memory.h), of which the first m - 1 count where they exceed a
//   micro-batch's backward (overlap_communication; else whole) and the last
//   as ZeRO-1's, the resident units' once, then ZeRO-1's all-reduce and
//   all-gather; under ZeRO-3 ZeRO-2's reduce-scatters and all-reduce, and
//   all-gathers of the resident units only; and the gradient norm's one-double
//   all-reduce over the world) and the optimizer step on the stage's
//   shard (its bytes at the device's memory bandwidth, compute_model.h, or the
//   profile's measured seconds per parameter). Where the cluster overlaps communication
//   (overlap_communication) the all-reduce or reduce-scatter runs in
//   gradient_bucket_size buckets started as the step's last backward finishes
//   them, and only its exposed part counts (exposed_reduction_seconds); the
//   cross-group all-reduce and the all-gather stay exposed (what they overlap
//   depends on the other stages, so the model does not count on it).
// - ZeRO-3's parameter all-gathers (stage_reduction.cc): one per streamed
//   unit (zero_memory.h) and pass that reads it (a forward reads every
//   unit; a backward every unit but the embedding, whose backward reads no
//   parameter; recomputation reads inside the backward's gather). Each is
//   prefetched one unit ahead beside the compute: what exceeds the compute
//   of the streamed unit read before it counts (its plain backward in a
//   backward pass: recomputation would hide more; there behind the
//   reduce-scatter queued before it on the same group, beyond what that
//   alone exceeds), the first of each pass (each chunk's) whole, all of it
//   without overlap_communication. The first forward's gathers are the
//   tail's (every rank makes them); a rank
//   freeing its parameters (not RecomputeCounts' keep_parameters_gathered)
//   adds to its slot the backward's and (m - 1) / m of the forward's, so
//   the step counts m forwards' and backwards' gathers. A pass's figure
//   never falls below that of no blocks (the ends'), so slots and tails
//   still grow with the blocks, as the search's bounds need.
// - Collectives: every group inside a node costs the profile's measured
//   latency + bytes x seconds_per_byte for its operation and group size when the
//   profile has one, else the analytic ring over the intra-node link; groups
//   spanning nodes always use the analytic inter-node link. (The tied embedding's
//   gradient is not charged separately: it is part of the stage's reduction.)
// - Plan: step = (m + bubble slots) x slowest slot + slowest tail, the bubble
//   per schedule: p - 1 slots for 1F1B and GPipe (the schedule changes memory,
//   not this bound), (p - 1) / v for interleaved 1F1B (whose slot carries its
//   2 (v - 1) extra sends per micro-batch), (p - 1)(1 - 2 w) for ZB-H1 with w
//   the weight gradients' share of the slot (Qi et al.: (p - 1)(F + B - W)
//   against 1F1B's (p - 1)(F + B + W)) are their ideals, which their posted
//   streams reach where p divides m (interleaved) and W <= min(F, B_in)
//   (ZB-H1); elsewhere the model takes the bubble of the generated streams
//   played out for identical stages (played_out_bubble_slots), so the step
//   stays (m + bubble) x slowest slot +
//   tail, which every solver minimises alike. is_train = false:
//   forward only, no tail. Each stage's bubble is what is left of the step
//   after m of its slots and its tail: the time it waits for the others.
// - Memory per schedule (cost_model.h's in_flight_micro_batches): 1F1B
//   min(p - s, m) micro-batches, GPipe m, interleaved in_flight_bound
//   (schedule.h) chunks' worth; ZB-H1 and ZB-V each rank's slots as the
//   runtime holds them (from the load or receipt to the W) plus the deferred
//   W's copies for the most micro-batches waiting for their W at once
//   (weight_pending_micro_batches), both from the generated stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "planner/cost/communication_model.h"
#include "planner/cost/compute_model.h"
#include "planner/cost/cost_model.h"
#include "planner/cost/profile.h"
#include "planner/job/job_config.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

// The pipeline schedule of a setting: kind and model chunks per rank, and the
// two figures of the time model that depend on it, filled in by
// StageCostModel (0 in a setting no model has seen).
struct ScheduleChoice {
  schema::ScheduleKind kind = schema::ScheduleKind::OneForwardOneBackward;
  int virtual_stages = 1;
  // ZB-H1: the weight-gradient GEMMs' share of a block's slot (W / (F + B +
  // W + tensor-parallel)), from transformer_ops.h's backward list.
  double weight_fraction = 0;
  double weight_of_backward = 0;  // W / a block's backward: what a BackwardWeight does
  // Interleaved and ZB-H1: the bubble, in slots, of the generated streams
  // played out (played_out_bubble_slots); < 0 until a model has set it.
  double bubble_slots = -1;
  bool operator==(const ScheduleChoice& other) const {
    return kind == other.kind && virtual_stages == other.virtual_stages;
  }
};

// "1f1b", "zb-h1", "interleaved v=2".
std::string schedule_choice_name(const ScheduleChoice& choice);

// ZeRO-2 and 3's unit a setting of zero_stage starts from: [planner]
// zero_layers_per_unit where set, else one block (1 below ZeRO-2).
int fixed_zero_unit(const JobConfig& config, int zero_stage);

// The plan-wide choices a stage's cost depends on.
struct PlanSetting {
  ParallelShape shape;
  DeviceLayout layout;
  int micro_batch_size = 1;
  int num_micro_batches = 1;
  int zero_stage = 0;
  int zero_ngroups = 1;
  ScheduleChoice schedule;
  // ZeRO-2 and 3: the layers each gathered and reduce-scattered unit holds.
  int zero_layers_per_unit = 1;
};

// A collective the time model charges for some stage of a setting.
struct ChargedCollective {
  CollectiveOperation operation = CollectiveOperation::AllReduce;
  int group_size = 2;
  bool inter_node = false;  // always the analytic link
  bool operator==(const ChargedCollective&) const = default;
};

struct StageEstimate {
  MemoryBreakdown memory;
  double forward_seconds = 0;          // compute, per micro-batch
  double backward_seconds = 0;         // compute including recomputation, per micro-batch
  double tensor_parallel_seconds = 0;  // all-reduces, per micro-batch
  // Per micro-batch: waiting at those calls for the group's last member
  // (measured TensorGroupPace; 0 without one).
  double tensor_parallel_wait_seconds = 0;
  // Per micro-batch: the context-parallel ring's transfers its block
  // attention does not hide (context_parallel_cost.h; 0 without cp).
  double context_parallel_seconds = 0;
  double pipeline_p2p_seconds = 0;        // sends this stage initiates, per micro-batch
  double gradient_reduction_seconds = 0;  // per step, the exposed part
  double hidden_reduction_seconds = 0;    // per step, overlapped with backward
  double optimizer_seconds = 0;           // per step
  // Per step: waiting for the other stages (the pipeline bubble, slower
  // stages) and for the tensor-parallel group's last member: the step less m
  // x the slot's other parts and the tail. Set by combine_stage_estimates,
  // which knows the step.
  double bubble_seconds = 0;
  // ZeRO-3 freeing its parameters, per micro-batch: the exposed all-gathers
  // beyond the first forward's (those are in the tail's gradient_reduction).
  double parameter_gather_seconds = 0;
  double slot_seconds() const {
    return forward_seconds + backward_seconds + tensor_parallel_seconds +
           tensor_parallel_wait_seconds + context_parallel_seconds + pipeline_p2p_seconds +
           parameter_gather_seconds;
  }
  double tail_seconds() const { return gradient_reduction_seconds + optimizer_seconds; }
};

// How a model takes the bubble of the kinds whose streams are played out
// (played_out_bubble_slots): played out, or bubble_slots_lower_bound, which
// spares working the streams out (the search's bounds of settings it may
// skip; context_parallel_cost.h's settings bring shapes of their own).
enum class BubbleEstimate { kPlayedOut, kLowerBound };

class StageCostModel {
 public:
  // profile may be null (analytic time model); the model keeps copies of the
  // entries it uses. config must outlive the model.
  StageCostModel(const JobConfig& config, const PlanSetting& setting,
                 const MeasuredProfile* profile = nullptr,
                 BubbleEstimate bubble = BubbleEstimate::kPlayedOut);

  // The setting with the schedule's figures (its played-out bubble worked
  // out on first use: a setting found not to fit needs none).
  const PlanSetting& setting() const;
  // The same before the bubble is played out (bubble_slots may be unset):
  // for what needs only the mesh, micro-batching, ZeRO and schedule kind.
  const PlanSetting& setting_before_bubble() const { return setting_; }
  const JobConfig& config() const { return *config_; }
  int num_stages() const { return setting_.shape.pipeline_stages; }
  // The pipeline rank holding the head: the last, or under a V (ZB-V,
  // DualPipe-V) the first (beside the embedding).
  int head_rank() const { return v_shaped(setting_.schedule.kind) ? 0 : num_stages() - 1; }
  // Whether the head rank holds the embedding and the head in two chunks.
  bool separate_ends() const { return v_shaped(setting_.schedule.kind) && num_stages() > 1; }

  StageEstimate estimate(int pipeline_rank, const RecomputeCounts& counts) const;
  // Only the memory (cheaper; equal to estimate().memory).
  MemoryBreakdown memory(int pipeline_rank, const RecomputeCounts& counts) const;
  // Only its activations (equal to memory().activations): all that changes
  // between recompute choices of one block count. The recompute search asks
  // for thousands per rank, so it takes the rank's terms once.
  struct RankActivations {
    const PlannerOptions* options;
    const StageMemoryTerms* terms;
    uint64_t operator()(const RecomputeCounts& counts) const {
      return stage_activation_bytes(*options, *terms, counts);
    }
  };
  RankActivations activations_of(int pipeline_rank) const {
    return {&options_, &memory_terms().at(pipeline_rank)};
  }
  // Its model state alone (weights, gradients, optimizer state and its
  // transient; NCCL's buffers, a constant of the mesh) with num_layers
  // blocks, the least of ZeRO-3's two ways: what
  // no recompute choice changes, worked out without the micro-batches in
  // flight.
  double model_state_bytes(int pipeline_rank, int num_layers) const;
  // Only the slot, and only the tail (equal to estimate()'s).
  double slot_seconds(int pipeline_rank, const RecomputeCounts& counts) const;
  double tail_seconds(int pipeline_rank, int num_layers) const;
  // ZeRO-3: whether a rank of num_layers blocks gathers any unit, so that
  // keeping them gathered (RecomputeCounts) is a choice; false under the
  // other stages.
  bool gathers_parameters(int pipeline_rank, int num_layers) const;
  // ZeRO-2 and 3: the unit of 2, 4 or 8 blocks (at most max_blocks) whose
  // collectives expose the least per block (first pipeline rank, one
  // micro-batch's forward and backward), where that saves a block over a
  // hundredth of its compute against units of one block; else 1.
  int larger_zero_unit(int max_blocks) const;
  // What a unit of k blocks exposes per block in one micro-batch's forward
  // and backward (first pipeline rank): its gathers (ZeRO-3) behind k
  // blocks' compute, and its reduce-scatter beyond the backward it runs
  // beside; 0 below ZeRO-2.
  double zero_unit_seconds_per_block(int k) const;

  // memory_constraint in bytes; +inf when consider_mem is false.
  double memory_limit_bytes() const { return memory_limit_; }
  bool fits(const MemoryBreakdown& memory) const { return fits(memory.total()); }
  bool fits(uint64_t total_bytes) const {
    return static_cast<double>(total_bytes) <= memory_limit_;
  }

  // The collectives some stage is charged for (not for hot loops: the report).
  std::vector<ChargedCollective> charged_collectives() const;

 private:
  const JobConfig* config_;
  mutable PlanSetting setting_;  // (its bubble_slots set on first use, setting())
  mutable std::once_flag bubble_once_;
  bool bubble_to_play_ = false;  // played_out_bubble_slots due on first use
  void play_out_bubble() const;
  PlannerOptions options_;  // the job's options with this setting's ZeRO choice
  LinkModel links_;
  double memory_limit_ = std::numeric_limits<double>::infinity();
  // Per micro-batch seconds of one block / the embedding / the head.
  double block_forward_ = 0, block_backward_[3] = {0, 0, 0};
  double embedding_forward_ = 0, embedding_backward_ = 0, head_forward_ = 0, head_backward_ = 0;
  // Per micro-batch, tensor-parallel seconds by where they are spent.
  struct TensorParallelParts {
    double block = 0, full_recompute = 0, embedding = 0, head = 0;
    double of(const RecomputeCounts& counts, bool first, bool last) const {
      return counts.layers() * block + counts.full * full_recompute + (first ? embedding : 0) +
             (last ? head : 0);
    }
    // The all-reduce layout's calls (Megatron's f and g): a block's forward
    // makes 2, its backward 2 more, a full recompute the forward's 2 again,
    // the vocab-parallel embedding 1, the head 2 of the loss's statistics
    // and, training, 1 of its input gradient; each call costs `per_call`
    // (`per_loss_call` for the loss's).
    static TensorParallelParts all_reduce_layout(double per_call, double per_loss_call,
                                                 bool train) {
      return {.block = (train ? 4 : 2) * per_call,
              .full_recompute = train ? 2 * per_call : 0,
              .embedding = per_call,
              .head = 2 * per_loss_call + (train ? per_call : 0)};
    }
  };
  // Per micro-batch, the context-parallel ring's exposed seconds: a block's
  // forward and backward, and the forward again where it recomputes.
  struct ContextParallelParts {
    double block = 0, recompute = 0;
    double of(const RecomputeCounts& counts) const {
      return counts.layers() * block + (counts.selective + counts.full) * recompute;
    }
  };
  ContextParallelParts context_parallel_;
  TensorParallelParts tensor_parallel_;       // the calls' transfers
  TensorParallelParts tensor_parallel_wait_;  // waiting for the group's last member
  std::vector<double> p2p_seconds_;           // per pipeline rank
  // Per pipeline rank, worked out on first use: a bound on the step needs
  // none, a stage's model state no micro-batches in flight (shape_terms()),
  // whose counts take long for some schedules' shapes (memory_terms()).
  mutable std::vector<StageMemoryTerms> memory_terms_;
  mutable std::once_flag shape_terms_once_, memory_terms_once_;
  const std::vector<StageMemoryTerms>& shape_terms() const;
  const std::vector<StageMemoryTerms>& memory_terms() const;
  void set_shape_terms() const;
  void set_in_flight() const;
  double interleave_send_ = 0;              // interleaved's extra sends per micro-batch
  double block_weight_gradient_ = 0;        // a block's W (its weight-gradient GEMMs)
  std::vector<double> tail_intercept_;      // per pipeline rank: tail at 0 layers
  std::vector<bool> reduction_crosses_[2];  // per rank: [0] ZeRO group, [1] all DP ranks
  double optimizer_seconds_per_parameter_ = 0;
  // Measured intra-node collectives (empty: the analytic ring).
  std::optional<CollectiveEntry> data_parallel_all_reduce_, zero_reduce_scatter_, zero_all_reduce_,
      zero_all_gather_;
  int element_bytes_ = 4;
  int zero_shards_ = 1;
  double norm_all_reduce_ = 0;  // the gradient norm's all-reduce over the world, per step
  // ZeRO-2, per pipeline rank: the reduce-scatter seconds of one block's
  // unit, of the streamed and of the resident end units (zero_memory.h),
  // and the elements the streamed ones reduce.
  struct ZeroTwoTail {
    double block_scatter = 0, streamed_ends_scatter = 0, resident_scatter = 0;
    int streamed_ends = 0;  // the ends reduce-scattered as units of their own
  };
  std::vector<ZeroTwoTail> zero_two_tail_;
  // ZeRO-3: the exposed gathers of a forward or backward pass as a function
  // of the rank's blocks, linear from one block on (each block more exposes
  // the same), and never below the figure of no blocks.
  struct GatherPass {
    double ends = 0, one = 0, per_block = 0;
    double other_chunks = 0;  // from a block per chunk on: the other chunks' first gathers
    double seconds(int blocks, int chunks) const {
      if (blocks <= 0) return ends;
      return std::max(ends, one + (blocks - 1) * per_block + (blocks >= chunks ? other_chunks : 0));
    }
  };
  // ZeRO-3, per pipeline rank: the all-gather seconds of one unit (of
  // zero_layers_per_unit blocks), of
  // the streamed embedding and head units (0: not streamed here), of the
  // resident units after the optimizer step, and the two passes' figures.
  struct ZeroThreeGathers {
    double block = 0, embedding = 0, head = 0, resident = 0;
    GatherPass forward, backward;
  };
  std::vector<ZeroThreeGathers> zero_three_gathers_;
  GatherPass gather_pass(int pipeline_rank, bool backward) const;
  // ZeRO-3: the exposed gathers of one forward (or backward) pass of a rank
  // of num_layers blocks, and those a rank freeing its parameters adds to
  // its slot.
  double gather_pass_seconds(int pipeline_rank, int num_layers, bool backward) const;
  double slot_gather_seconds(int pipeline_rank, const RecomputeCounts& counts) const;
  // The stage's reduction: exposed seconds, and the hidden part in *hidden.
  // backward_seconds: one micro-batch's backward compute without recomputation.
  double gradient_reduction(int pipeline_rank, int num_layers, double parameters,
                            double backward_seconds, double* hidden) const;
  // ZeRO-2's reduce-scatters of a step (exposed seconds; the hidden part in
  // *hidden): m of the streamed units, the resident units' once.
  double zero_two_scatters(int pipeline_rank, int num_layers, double backward_seconds,
                           double* hidden) const;
  // The buckets a reduction of `elements` runs in: gradient_bucket_size's,
  // where the cluster overlaps communication, else 1.
  int reduction_buckets(double elements) const;
  // The tail's parts of a stage of num_layers blocks (estimate, tail_seconds).
  void fill_tail(int pipeline_rank, int num_layers, StageEstimate& stage) const;
  // One micro-batch's backward compute of a stage of num_layers without
  // recomputation: what the bucketed reduction hides behind.
  double plain_backward_seconds(int pipeline_rank, int num_layers) const;
  // The constructor's parts, in order: the compute times (measured or
  // analytic; returns the tensor group's measured pace where it applies);
  // the tensor-parallel transfers; the context-parallel ring; the
  // pipeline's sends and the schedule's figures; the data-parallel
  // reduction, the gradient norm and the optimizer.
  const TensorGroupPace* set_compute_times(const MeasuredProfile* profile, double busy,
                                           const DeviceModel& device);
  void set_tensor_parallel(const MeasuredProfile* profile, double busy,
                           const TensorGroupPace* pace);
  void set_context_parallel(const MeasuredProfile* profile, double busy, const DeviceModel& device);
  void set_pipeline(const MeasuredProfile* profile, double busy, BubbleEstimate bubble);
  void set_data_parallel(const MeasuredProfile* profile, double busy, const DeviceModel& device);
  // One block's parameters on a tensor rank (ZeRO's block units); the share
  // of a block's backward that reads its weights (all, or a split
  // backward's B).
  int64_t zero_block_parameters() const;
  double weight_reading_share() const;
  double unit_scatter_seconds(int pipeline_rank, int64_t elements) const;
  double unit_gather_seconds(int pipeline_rank, int64_t elements) const;
  void set_zero_two_scatters();   // (stage_reduction.cc, as the tail)
  void set_zero_three_gathers();  // (stage_reduction.cc)
  // The four per-micro-batch time parts, summed the same way by every caller.
  void fill_time(int pipeline_rank, const RecomputeCounts& counts, StageEstimate& stage) const;
};

// The step time of stage estimates, as combine_stage_estimates computes it.
// The exposed part of a reduction of `seconds` cut into `buckets` equal buckets
// that start as backward (backward_seconds) finishes them, one after another
// beside compute: bucket i is ready at (i + 1) / k of backward, and the last
// can only start when backward ends. max(r / k, r - B (k - 1) / k); r for k = 1.
double exposed_reduction_seconds(double seconds, int buckets, double backward_seconds);

double step_seconds(const PlanSetting& setting, double slowest_slot, double slowest_tail);

// The pipeline bubble in slots (see the contract), and as a share of the step's
// pipeline part: bubble slots / (m + bubble slots).
double bubble_slots(const PlanSetting& setting);

// The bubble in slots of a kind's generated streams (schedule.h) played out
// (pipeline_simulation.h) for p identical stages, forward 1 and backward
// `backward_ratio` of which a weight_of_backward share is W, without
// communication: step / slot - m, what the streams really give. Where
// schedule_bubble_test proves the ideal exact (Megatron's (p - 1) / v when p
// divides m; Qi et al.'s (p - 1)(F + B_in - W) when W <= min(F, B_in) and
// m >= p), that closed form; else played out once per shape and ratios
// (rounded to 1/20) and cached.
double played_out_bubble_slots(schema::ScheduleKind kind, int p, int m, int v,
                               double backward_ratio, double weight_of_backward);
// The closed form where it is exact (played_out_bubble_slots takes it
// there), else -1: the streams must be played out.
double exact_bubble_slots(schema::ScheduleKind kind, int p, int m, int v, double backward_ratio,
                          double weight_of_backward);
// At most played_out_bubble_slots, without playing out: the exact closed
// form, else the pipeline's start (the last rank waits for p - 1 chunk
// forwards before its first: (p - 1) / (v (1 + B / F)) slots;
// schedule_time_test holds it below the played-out figure on a grid).
double bubble_slots_lower_bound(schema::ScheduleKind kind, int p, int m, int v,
                                double backward_ratio, double weight_of_backward);
double pipeline_bubble_ratio(const PlanSetting& setting);

// The schedules a setting may run: the fixed [planner] pipeline_scheduler
// (with pipeline_virtual_stages, or 2..4 chunks, for interleaved), or with
// 'auto' every kind (one rank: 1F1B only). Interleaved needs p >= 2, m >= p,
// at least v layers per rank and no pivots or pinned layers; ZB-V and
// DualPipe-V p >= 2, 2 layers per rank and no pivots or pinned layers, and
// DualPipe-V m >= 2p.
std::vector<ScheduleChoice> schedule_choices(const JobConfig& config, const PlanSetting& setting,
                                             bool boundaries_restricted);

// Why schedule_choices offers a fixed pipeline_scheduler none for this
// setting, as the search's rejection says it ("'dualpipe-v' runs at least
// 2 x p = 8 micro-batches; this setting has 4"); empty where it offers one.
std::string why_no_schedule_choice(const JobConfig& config, const PlanSetting& setting,
                                   bool boundaries_restricted);

// The larger ZeRO unit the search re-costs a setting's plan with
// (with_larger_zero_units): 1 (none) where [planner] zero_layers_per_unit is
// set or below ZeRO-2, else costs.larger_zero_unit at up to a pipeline
// stage's share of the layers.
int zero_unit_to_try(const JobConfig& config, const StageCostModel& costs);

}  // namespace paraplan
