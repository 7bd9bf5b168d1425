// distributed_optimizer.h: the optimizer step of one rank: data-parallel
// gradient reduction, ZeRO 1-3, global-norm clipping and AdamW.
//
// Per step:
//   gradients_final_from(offset)
//                       called by the last backward of the step as it passes
//                       each block: starts the data-parallel reduction of every
//                       bucket (gradient_buckets.h) backward no longer writes,
//                       an all-reduce, or under ZeRO-1 a reduce-scatter within
//                       this rank's ZeRO group, so it runs beside the rest of
//                       backward where the communicator is asynchronous (NCCL);
//   reduce_gradients()  the tied embedding's gradient summed between the first
//                       and last pipeline stage, then the buckets not started
//                       yet (those holding the tied embedding wait for that
//                       sum), then waits for all of them; under ZeRO-1 also the
//                       all-reduce of the shard across the zero_ngroups groups,
//                       so each rank holds the summed gradient of its shard;
//   step()              queued, the host waiting for nothing: the global L2
//                       norm over every parameter of the model, each counted
//                       once (tensor-parallel replicas, data-parallel replicas
//                       and the last stage's tied copy excluded), clip, AdamW
//                       on this rank's part in one Ops::adamw_runs with fp32
//                       moments sized to that part, and under ZeRO-1 the start
//                       of the all-gathers of the updated parameters within
//                       the ZeRO group, bucket by bucket, which the next
//                       step's first forward waits for (wait_for_parameters()),
//                       so they overlap what comes between: data loading and,
//                       on later pipeline stages, the wait for the first
//                       activation;
//   finish_step()       after the step's loss read: the norm, the
//                       backend's deferred errors, and the backend's own
//                       memory grown in the step brought to the tracker.
// ZeRO-2 (zero_stage 2): the stage has no gradient buffer; its gradients
// live in a ShardedGradients (sharded_gradients.h) whose units are the
// buckets: each backward reduce-scatters every unit as it finishes it
// (the stream's ReduceScatterGradients: run_unit_op), adding its
// chunk into the fp32 shard; reduce_gradients() then sums the tied embedding,
// reduce-scatters the resident units, waits, and all-reduces the shard over
// the zero_ngroups groups; the step and the all-gathers are ZeRO-1's.
// ZeRO-3 (zero_stage 3): the stage has no parameter buffer either; its
// parameters live in a ShardedParameters (sharded_parameters.h) over the
// same units: AdamW writes this rank's chunks there, and each unit is
// gathered and released where the stream says (GatherParameters,
// ReleaseParameters: run_unit_op), so step() starts no all-gather but the
// resident units'.
// Weight decay applies to matrices and embeddings only (the layout's flag).
//
// Mixed precision (bf16 storage): gradients are reduced in bf16 (over MPI
// and staged: sums computed in fp32 and rounded once; NCCL rounds on its own
// way; communicator.h). ZeRO-0 and 1 accumulate them over micro-batches in
// bf16 (one rounding per backward, as llm.c); ZeRO-2 and 3 add each
// micro-batch's reduced chunks into the rank's fp32 gradient shard
// (sharded_gradients.h; Megatron's fp32 main_grad, for the shard; a
// resident unit still sums its micro-batches in bf16, as backward writes
// it), so there AdamW and the norm read fp32 gradients
// (Ops::adamw_float_gradients, accumulate_float_sum_of_squares) and the
// shard's all-reduce across the zero_ngroups groups moves fp32. The update
// runs on fp32 master weights, which this class owns with the moments and
// shards like them under ZeRO-1, and rewrites the stage's bf16 parameters
// from them, so the optimizer state is 12 bytes per parameter (master, two
// moments). With fp32 storage the stage's parameters are the master weights.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/model/model_stage.h"
#include "runtime/model/parameter_layout.h"
#include "runtime/parallel/gradient_buckets.h"
#include "runtime/parallel/parallel_state.h"
#include "runtime/parallel/sharded_gradients.h"
#include "runtime/parallel/sharded_parameters.h"
#include "schema/zero_stages.h"
#include "schema/zero_units.h"

namespace paraplan {

struct AdamWSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float epsilon = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;  // 0 disables clipping
};

class DistributedOptimizer {
 public:
  // Buffer elements a stage needs so that ZeRO-1 shards it evenly, each
  // shard 16-byte aligned (shard_unit_elements: 8 x the group size), or
  // that ZeRO-2's last unit gathers into.
  static size_t buffer_elements(size_t num_elements, int zero_stage, int zero_group_size);

  // bucket_elements: the gradient bucket size (0: one bucket, reduced after
  // backward).
  DistributedOptimizer(ModelStage& stage, kernels::Ops& ops, MemoryTracker& memory,
                       ProcessGroups& groups, const AdamWSettings& settings, int zero_stage,
                       size_t bucket_elements = 0);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Start of a step: the gradients zeroed (the stage's buffer, or under
  // ZeRO-2 the shard and the resident units).
  void zero_gradients();
  // Backward of the step's last micro-batch no longer writes the gradients at
  // buffer offsets >= offset: start the reduction of the buckets above it.
  void gradients_final_from(size_t offset);
  // ZeRO-2 and 3's unit ops (plan.fbs, schema/zero_units.h) on unit `unit`
  // of model chunk `chunk`: the gather or release of its parameters
  // (ZeRO-3), the reduce-scatter of its gradients. Throws on a unit that
  // does not exist, an op this stage does not shard for, or a gather of a
  // gathered unit (a release of one not gathered).
  void run_unit_op(schema::OpCode op, int chunk, int unit);
  // The (chunk, unit) holding a rank-buffer offset.
  std::pair<int, int> unit_of(size_t offset) const;
  // ZeRO-3: told each (chunk, unit) the stage has read for the last time in
  // a forward or backward, and reads must then find their units gathered;
  // null: neither (evaluation gathers on demand). A no-op below ZeRO-3.
  void watch_unit_reads(std::function<void(int, int)> read);
  // Throws unless this rank's units are the plan's, chunk by chunk.
  void check_units(const std::vector<ChunkUnits>& plan_units) const;
  void reduce_gradients();
  // Queues the step; the host waits for nothing (on NCCL the norm's sum is
  // all-reduced on the device, and the backend computes the clip factor
  // from it there): one Ops::adamw_runs over every run this rank owns.
  void step(float learning_rate, int step);
  // After step(), where the host waits anyway (the step's loss read has
  // drained the device): returns the gradient norm before clipping (the
  // same on every rank) and raises the backend's deferred errors (a bad
  // loss target: step()'s AdamW saw it pending and changed nothing). Then
  // samples the backend's own memory (MemoryTracker::sample_backend: kernel
  // scratch, cuDNN's workspace, grown inside the step), so every caller
  // (train, replay, profile) measures the same peak.
  double finish_step();
  // Waits for the parameter all-gathers step() started (ZeRO-1); a no-op when
  // none is pending. Call before anything reads the parameters.
  void wait_for_parameters();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // ZeRO-2 and 3's gradient storage (null below): where backward's units go.
  ShardedGradients* sharded_gradients() { return sharded_gradients_.get(); }

  // The optimizer's state to and from host memory, a range of the stage's
  // buffer at a time (distributed_optimizer_state.cc): checkpoints and
  // initialization hold one tensor at a time, never the stage (a ZeRO-3
  // rank's stage is the whole model when nothing else splits it).
  //
  // The arrays: the fp32 master weights (the stage's own parameters under
  // fp32 storage) and AdamW's two moments.
  enum class StateArray { kParameters, kFirstMoment, kSecondMoment };
  // Whether this rank takes part in read_range: the first ZeRO group (the
  // others hold replicas of its shards), or without ZeRO sharding every
  // rank of the data (x context) group, each of which holds all the state.
  bool reads_state() const { return sharded_ ? counts_replicas_ : true; }
  // How many ranks read state (the first ZeRO group's size, or the data
  // group's) and this one's place among them (its ZeRO or data-group rank:
  // its gradient rank either way).
  int state_readers() const { return sharded_ ? groups_.zero->size() : groups_.data->size(); }
  int state_reader_rank() const { return sharded_ ? groups_.zero->rank() : groups_.data->rank(); }
  // Elements [begin, end) of one array in fp32, whole, into `host` on reader
  // `destination` (a ZeRO rank of the first group: gradient rank
  // `destination`); every rank that reads_state() calls it with the same
  // ranges and destinations in the same order and sends the part it owns
  // there (point to point, through host memory). Without sharding the
  // destination copies its own state and the others do nothing.
  void read_range(StateArray array, size_t begin, size_t end, float* host, int destination = 0);
  // Sets elements [begin, end) of one array from fp32 host values: this rank
  // keeps what it holds of them (its owned part; for kParameters also the
  // stage's storage copy, or ZeRO-3's chunk and resident units). Not
  // collective; every rank loads every range of its stage before the next
  // step.
  void load_range(StateArray array, size_t begin, size_t end, const float* host);
  // The parts of [begin, end) load_range keeps on this rank, ascending: a
  // loader reads only these from a checkpoint (a ZeRO-3 rank its chunks and
  // resident units; moments the owned part; parameters stored whole, all).
  std::vector<std::pair<size_t, size_t>> held_ranges(StateArray array, size_t begin,
                                                     size_t end) const;
  // Every range at once (tests and small stages): whole host arrays of
  // layout().num_elements() floats.
  void load_parameters(const float* whole);
  void load_moments(const float* first, const float* second);

 private:
  // A part of the buffer this rank updates: [begin, end), clipped to the
  // layout's elements (the padding at the end is no parameter). Under ZeRO-1
  // its chunk of each bucket; else the whole buffer.
  struct OwnedRange {
    size_t begin = 0, end = 0;
    size_t shard_offset = 0;  // where it sits in the rank's shard buffers
  };
  OwnedRange owned(const GradientBucket& bucket) const;
  void find_tied_ranges();
  // ZeRO-2: the stage's gradients move into a ShardedGradients, whose units
  // are the buckets; ZeRO-3 (shard_parameters): its parameters into a
  // ShardedParameters over the same units.
  void make_sharded_gradients(bool shard_parameters);
  size_t unit_index(int chunk, int unit) const;
  std::pair<int, int> chunk_unit(size_t index) const;  // unit_index's inverse
  // Where this rank's part of bucket `bucket` at buffer `offset` (shard
  // offset `shard_at`) is stored: the stage's buffer, or ZeRO-3's shard.
  void* owned_parameters(size_t bucket, size_t offset, size_t shard_at);
  // The gradient at a buffer offset (the stage's buffer, or ZeRO-2's unit).
  void* gradient_at(size_t offset);
  void start_bucket(size_t index);
  // Adds the squares of the gradient elements of range this rank counts to
  // squares_; gradients holds them at range.shard_offset (or the whole buffer).
  void accumulate_counted_squares(const void* gradients, const OwnedRange& range);
  // adamw_runs_ = this rank's owned tensors as AdamW runs (contiguous
  // neighbours of one weight decay merged); gradients as in step().
  void collect_adamw_runs(void* gradients);
  // The fp32 master weights of an owned element (at = its shard offset).
  float* master_at(size_t at) const;
  // Parameters set on the stage directly (not through load_parameters): the
  // master weights start as their widened copy (Megatron's float16 optimizer
  // does the same). A no-op once they are set.
  void initialize_master();
  // Where rank `zero_rank` of the ZeRO group keeps bucket `bucket`'s part
  // (owned(bucket) is this rank's).
  OwnedRange owned_by(const GradientBucket& bucket, int zero_rank) const;
  // This rank's owned elements [begin, end) of `array` (fp32) and the
  // device memory they sit in: `range` is the owned range holding them,
  // `bucket` its index.
  float* state_at(StateArray array, size_t bucket, const OwnedRange& range, size_t begin);

  ModelStage& stage_;
  const ParameterLayout& layout_;
  kernels::Ops& ops_;
  MemoryTracker& memory_;
  ProcessGroups& groups_;
  AdamWSettings settings_;
  bool sharded_;
  std::vector<GradientBucket> buckets_;
  std::vector<OwnedRange> owned_;  // per bucket under ZeRO-1, else one
  std::vector<bool> started_;      // per bucket, this step
  // The tied embedding's ranges, summed before their buckets reduce: the
  // owner (summed over the embedding group), and its copy where this rank
  // holds both (ZB-V's first rank: summed here).
  struct HeldRange {
    size_t begin = 0, end = 0;
  };
  std::vector<HeldRange> held_;  // one (the owner), or two (the owner, the copy)
  bool parameters_pending_ = false;
  size_t shard_elements_ = 0;  // this rank's part: the whole buffer, or its ZeRO chunks
  double* squares_ = nullptr;  // the gradient norm's sum of squares, on the device
  std::vector<kernels::AdamWRun> adamw_runs_;  // step()'s, kept to reuse its memory
  float* first_moment_ = nullptr;
  float* second_moment_ = nullptr;
  kernels::DType dtype_;            // the stage's storage dtype
  float* master_ = nullptr;         // bf16 storage: fp32 master weights of shard_elements_
  bool master_valid_ = false;       // set by load_parameters, else by the first step
  void* gradient_shard_ = nullptr;  // ZeRO-1-3: this rank's summed gradients (below)
  // gradient_shard_'s elements: the storage dtype under ZeRO-1, fp32 under
  // ZeRO-2 and 3 (ShardedGradients::shard); the whole buffer's without ZeRO.
  kernels::DType gradient_dtype_;
  std::unique_ptr<ShardedGradients> sharded_gradients_;    // ZeRO-2 and 3
  std::unique_ptr<ShardedParameters> sharded_parameters_;  // ZeRO-3
  std::vector<bool> resident_;                             // ZeRO-2 and 3: per unit
  std::vector<size_t> chunk_first_unit_;                   // ZeRO-2 and 3: per model chunk
  bool counts_replicas_;  // this data-parallel replica counts in the norm
};

}  // namespace paraplan
