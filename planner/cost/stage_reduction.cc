// stage_reduction.cc: a stage's tail (stage_cost.h): the data-parallel
// gradient reduction (all-reduce; ZeRO-1's reduce-scatter, cross-group
// all-reduce and all-gather; ZeRO-2's reduce-scatters per unit and
// micro-batch; ZeRO-3's, with the resident units' all-gathers), the gradient
// norm's all-reduce and the optimizer step; and ZeRO-3's parameter
// all-gathers, in the tail (the first forward's) and the slot (the rest).
#include <algorithm>
#include <cmath>

#include "planner/cost/compute_model.h"
#include "planner/cost/stage_collectives.h"
#include "planner/cost/stage_cost.h"

namespace paraplan {

using stage_collectives::collective_seconds;
using stage_collectives::measured_collective;

void StageCostModel::set_data_parallel(const MeasuredProfile* profile, double busy,
                                       const DeviceModel& device) {
  const ModelConfig& model = config_->model;
  const ParallelShape& shape = setting_.shape;
  const int p = shape.pipeline_stages;
  const bool train = options_.is_train;
  const bool sharded = shards_optimizer_state(setting_.zero_stage);
  const LinkModel& links = links_;
  // Data-parallel reduction placement per stage: over the data- x
  // context-parallel ranks that hold the same parameters.
  const int replicas = shape.gradient_replicas();
  const int group = sharded ? zero_shards_ : replicas;
  for (auto& crosses : reduction_crosses_) crosses.assign(p, false);
  for (int s = 0; s < p; ++s) {
    reduction_crosses_[0][s] =
        data_parallel_group_crosses_nodes(shape, s, group, setting_.layout.devices_per_node);
    reduction_crosses_[1][s] =
        data_parallel_group_crosses_nodes(shape, s, replicas, setting_.layout.devices_per_node);
  }
  if (train) {
    const int d = replicas;
    if (sharded) {
      zero_reduce_scatter_ =
          measured_collective(profile, CollectiveOperation::ReduceScatter, zero_shards_, busy);
      zero_all_reduce_ =
          measured_collective(profile, CollectiveOperation::AllReduce, d / zero_shards_, busy);
      zero_all_gather_ =
          measured_collective(profile, CollectiveOperation::AllGather, zero_shards_, busy);
    } else {
      data_parallel_all_reduce_ =
          measured_collective(profile, CollectiveOperation::AllReduce, d, busy);
    }
    if (shards_gradients(setting_.zero_stage)) set_zero_two_scatters();
  }
  if (shards_parameters(setting_.zero_stage)) {
    // Forward gathers the parameters whether or not the plan trains.
    if (!train)
      zero_all_gather_ =
          measured_collective(profile, CollectiveOperation::AllGather, zero_shards_, busy);
    set_zero_three_gathers();
  }

  // The gradient norm's all-reduce of one double over the world: measured
  // inside a node, else a tree's 2 log2(n) latencies (a message this small
  // costs its latency only).
  const int world = p * shape.stage_ranks();
  if (train && world > 1) {
    const bool crosses = setting_.layout.num_nodes > 1;
    const std::optional<CollectiveEntry> norm =
        measured_collective(profile, CollectiveOperation::AllReduce, world, busy);
    norm_all_reduce_ = norm && !crosses
                           ? norm->seconds(sizeof(double))
                           : 2 * std::ceil(std::log2(world)) * links.link(crosses).latency_seconds;
  }

  // The optimizer step on this rank's shard of the stage's parameters.
  const OptimizerEntry* optimizer = profile != nullptr ? profile->find_optimizer() : nullptr;
  if (!train)
    optimizer_seconds_per_parameter_ = 0;
  else if (optimizer != nullptr)
    optimizer_seconds_per_parameter_ = optimizer->seconds_per_parameter *
                                       (optimizer->clock == ProfileClock::kCpu ? busy : 1) /
                                       zero_shards_;
  else
    optimizer_seconds_per_parameter_ =
        optimizer_seconds_per_parameter(device, model.dtype) / zero_shards_;
}

namespace {

// What a gather of `gather` seconds exposes behind `hiding` seconds of
// compute (< 0: nothing runs beside it) with `ahead` seconds queued before
// it on the group: beyond what `ahead` alone exceeds the compute by.
double exposed_gather(double gather, double hiding, double ahead, bool overlap) {
  if (!overlap || hiding < 0) return gather;
  return std::max(0.0, ahead + gather - hiding) - std::max(0.0, ahead - hiding);
}

}  // namespace

// Each unit is one reduce-scatter (all-gather) of its padded elements in the group.
double StageCostModel::unit_scatter_seconds(int pipeline_rank, int64_t elements) const {
  const int z = zero_shards_;
  return collective_seconds(
      zero_reduce_scatter_, ring_reduce_scatter_seconds, links_,
      reduction_crosses_[0][pipeline_rank], z,
      static_cast<double>(padded_to_shard_unit(elements, z)) * element_bytes_);
}

double StageCostModel::unit_gather_seconds(int pipeline_rank, int64_t elements) const {
  const int z = zero_shards_;
  return collective_seconds(
      zero_all_gather_, ring_all_gather_seconds, links_, reduction_crosses_[0][pipeline_rank], z,
      static_cast<double>(padded_to_shard_unit(elements, z)) * element_bytes_);
}

int fixed_zero_unit(const JobConfig& config, int zero_stage) {
  const int fixed = config.planner.zero_layers_per_unit;
  return shards_gradients(zero_stage) && fixed > 0 ? fixed : 1;
}

int zero_unit_to_try(const JobConfig& config, const StageCostModel& costs) {
  // (Not costs.setting(): the bubble is not needed here, so not played out.)
  const PlanSetting& setting = costs.setting_before_bubble();
  if (!shards_gradients(setting.zero_stage) || config.planner.zero_layers_per_unit > 0) return 1;
  const int p = setting.shape.pipeline_stages;
  return costs.larger_zero_unit((config.model.num_layers + p - 1) / p);
}

int64_t StageCostModel::zero_block_parameters() const {
  return stage_parameters(config_->model, {0, 1, false, false, {}}, setting_.shape.tensor_parallel,
                          options_.ignore_small_tensor_threshold);
}

double StageCostModel::weight_reading_share() const {
  return splits_backward(setting_.schedule.kind) ? 1 - setting_.schedule.weight_of_backward : 1.0;
}

double StageCostModel::zero_unit_seconds_per_block(int k) const {
  if (!shards_gradients(setting_.zero_stage)) return 0;
  k = std::max(k, 1);
  const int64_t block = zero_block_parameters();
  const bool overlap = config_->cluster.overlap_communication;
  const bool gathers = shards_parameters(setting_.zero_stage);
  const double reading = weight_reading_share();
  const double scatter = unit_scatter_seconds(0, block * k);
  const double backward = block_backward_[0] * k;
  double exposed = overlap ? std::max(0.0, scatter - backward) : scatter;
  if (gathers) {
    const double gather = unit_gather_seconds(0, block * k);
    exposed += exposed_gather(gather, block_forward_ * k, 0, overlap) +
               exposed_gather(gather, backward * reading, scatter, overlap);
  }
  return exposed / k;
}

int StageCostModel::larger_zero_unit(int max_blocks) const {
  if (!shards_gradients(setting_.zero_stage) || max_blocks < 2) return 1;
  // A larger unit costs gathered memory and a longer first gather: only one
  // that saves a block a hundredth of its compute.
  const double one = zero_unit_seconds_per_block(1);
  const double worth = one - 0.01 * (block_forward_ + block_backward_[0]);
  int best = 1;
  double best_seconds = one;
  for (int k = 2; k <= std::min(max_blocks, kLargestZeroUnit); k *= 2) {
    const double seconds = zero_unit_seconds_per_block(k);
    if (seconds < best_seconds && seconds < worth) best = k, best_seconds = seconds;
  }
  return best;
}

void StageCostModel::set_zero_two_scatters() {
  const ModelConfig& model = config_->model;
  const int t = setting_.shape.tensor_parallel;
  const int64_t replicate_below = options_.ignore_small_tensor_threshold;
  const int64_t block = zero_block_parameters();
  const int units = std::max(setting_.zero_layers_per_unit, 1);
  zero_two_tail_.assign(num_stages(), {});
  for (int s = 0; s < num_stages(); ++s) {
    const auto scatter = [&](int64_t elements) { return unit_scatter_seconds(s, elements); };
    // A block's share of its unit's reduce-scatter (a unit of k blocks is one).
    ZeroTwoTail& tail = zero_two_tail_[s];
    tail.block_scatter = scatter(block * units) / static_cast<double>(units);
    const ZeroTwoEnds ends =
        zero_two_ends(model, s == 0, s == head_rank(), separate_ends(), t, replicate_below);
    for (int i = 0; i < ends.count; ++i) {
      if (ends.resident[i]) {
        tail.resident_scatter += scatter(ends.elements[i]);
      } else {
        tail.streamed_ends_scatter += scatter(ends.elements[i]);
        ++tail.streamed_ends;
      }
    }
  }
}

void StageCostModel::set_zero_three_gathers() {
  const ModelConfig& model = config_->model;
  const int t = setting_.shape.tensor_parallel;
  const int64_t replicate_below = options_.ignore_small_tensor_threshold;
  const int64_t block = zero_block_parameters();
  zero_three_gathers_.assign(num_stages(), {});
  for (int s = 0; s < num_stages(); ++s) {
    const auto gather = [&](int64_t elements) { return unit_gather_seconds(s, elements); };
    ZeroThreeGathers& gathers = zero_three_gathers_[s];
    gathers.block = gather(block * std::max(setting_.zero_layers_per_unit, 1));
    const bool has_embedding = s == 0;
    const ZeroTwoEnds ends =
        zero_two_ends(model, has_embedding, s == head_rank(), separate_ends(), t, replicate_below);
    for (int i = 0; i < ends.count; ++i) {
      const double seconds = gather(ends.elements[i]);
      if (ends.resident[i])
        gathers.resident += seconds;  // once, after the optimizer step
      else if (has_embedding && i == 0)
        gathers.embedding = seconds;
      else
        gathers.head = seconds;
    }
    gathers.forward = gather_pass(s, false);
    gathers.backward = gather_pass(s, true);
  }
}

bool StageCostModel::gathers_parameters(int pipeline_rank, int num_layers) const {
  return shards_parameters(setting_.zero_stage) &&
         (num_layers > 0 || shape_terms().at(pipeline_rank).zero_two.streamed_ends > 0);
}

StageCostModel::GatherPass StageCostModel::gather_pass(int pipeline_rank, bool backward) const {
  const ZeroThreeGathers& gathers = zero_three_gathers_[pipeline_rank];
  const bool overlap = config_->cluster.overlap_communication;
  const int chunks = std::max(setting_.schedule.virtual_stages, 1);
  // A split backward's B reads the weights; its W (a share of the backward)
  // reads none and hides nothing.
  const double reading = weight_reading_share();
  // A unit of k blocks: one gather behind k blocks' compute.
  const int k = std::max(setting_.zero_layers_per_unit, 1);
  const double block_compute = (backward ? block_backward_[0] * reading : block_forward_) * k;
  // The units in the order the pass reads them (a backward reads no
  // embedding), each behind the compute of the streamed unit read before.
  const auto pass = [&](int blocks) {
    double exposed = 0, before = -1;
    const auto read = [&](double gather, double compute) {
      if (gather <= 0) return;
      exposed += exposed_gather(gather, before, 0, overlap);
      before = compute;
    };
    if (!backward) read(gathers.embedding, embedding_forward_);
    if (backward) read(gathers.head, head_backward_ * reading);
    if (blocks > 0) read(gathers.block, block_compute);
    if (!backward) read(gathers.head, head_forward_);
    return exposed;
  };
  GatherPass figures;
  figures.ends = pass(0);
  figures.one = pass(1);
  // In a backward a block's gather queues on the ZeRO group behind the
  // reduce-scatter of the block finished before (one communicator, one
  // stream): it adds what the two exceed the compute by, beyond what the
  // reduce-scatter alone exceeds it by (ZeRO-2's tail counts that).
  // Per block: a unit's exposure over its k blocks.
  const double scatter =
      backward && !zero_two_tail_.empty() ? zero_two_tail_[pipeline_rank].block_scatter * k : 0;
  figures.per_block =
      gathers.block > 0 ? exposed_gather(gathers.block, block_compute, scatter, overlap) / k : 0;
  // The rank's other chunks start passes of their own, their first block
  // gathered with nothing to hide behind.
  if (overlap && chunks > 1)
    figures.other_chunks = (chunks - 1) * std::min(gathers.block, block_compute);
  return figures;
}

double StageCostModel::gather_pass_seconds(int pipeline_rank, int num_layers, bool backward) const {
  const ZeroThreeGathers& gathers = zero_three_gathers_[pipeline_rank];
  const int chunks = std::max(setting_.schedule.virtual_stages, 1);
  return (backward ? gathers.backward : gathers.forward).seconds(num_layers, chunks);
}

double StageCostModel::slot_gather_seconds(int pipeline_rank, const RecomputeCounts& counts) const {
  if (!shards_parameters(setting_.zero_stage) || counts.keep_parameters_gathered) return 0;
  // Freed: every backward's gathers and every forward's but the first
  // micro-batch's, which the tail counts for every rank alike.
  const int layers = counts.layers(), m = setting_.num_micro_batches;
  const double backward = options_.is_train ? gather_pass_seconds(pipeline_rank, layers, true) : 0;
  return backward + gather_pass_seconds(pipeline_rank, layers, false) * (m - 1) / m;
}

double exposed_reduction_seconds(double seconds, int buckets, double backward_seconds) {
  if (buckets <= 1) return seconds;
  const double k = buckets;
  return std::max(seconds / k, seconds - backward_seconds * (k - 1) / k);
}

double StageCostModel::plain_backward_seconds(int pipeline_rank, int num_layers) const {
  double seconds = num_layers * block_backward_[0];
  if (pipeline_rank == 0) seconds += embedding_backward_;
  if (pipeline_rank == head_rank()) seconds += head_backward_;
  return seconds;
}

int StageCostModel::reduction_buckets(double elements) const {
  const int64_t bucket_size = config_->training.gradient_bucket_size;
  return config_->cluster.overlap_communication && bucket_size > 0
             ? static_cast<int>(std::ceil(elements / static_cast<double>(bucket_size)))
             : 1;
}

double StageCostModel::zero_two_scatters(int pipeline_rank, int num_layers, double backward_seconds,
                                         double* hidden) const {
  const ZeroTwoTail& tail = zero_two_tail_[pipeline_rank];
  // One micro-batch's reduce-scatters of the streamed units.
  const double streamed = num_layers * tail.block_scatter + tail.streamed_ends_scatter;
  // The first m - 1 micro-batches' run beside the next ones' compute where the
  // cluster overlaps communication: only what exceeds a micro-batch's backward
  // counts. (What the ends' reduce-scatters exceed the ends' own backward by
  // counts at any block count, which keeps the tail from falling as blocks
  // are added: the search's bounds rely on it.)
  double excess = streamed;
  if (config_->cluster.overlap_communication)
    excess = std::max({0.0, tail.streamed_ends_scatter - plain_backward_seconds(pipeline_rank, 0),
                       streamed - backward_seconds});
  const int earlier = setting_.num_micro_batches - 1;
  // The last micro-batch's behind the step's last backward, as ZeRO-1's
  // reduce-scatter, but unit by unit: the runtime reduce-scatters each unit
  // as its backward ends (runtime/parallel/sharded_gradients.h), so the
  // buckets are the units, not [training] gradient_bucket_size.
  // (Each model chunk makes its own units: zero_memory.h.)
  const int64_t units =
      shape_terms().at(pipeline_rank).zero_two.block_units(num_layers) + tail.streamed_ends;
  const double last = exposed_reduction_seconds(
      streamed, config_->cluster.overlap_communication ? static_cast<int>(units) : 1,
      backward_seconds);
  *hidden = earlier * (streamed - excess) + (streamed - last);
  // The resident units once, at the step's end (the tied ones after their sum).
  return earlier * excess + last + tail.resident_scatter;
}

double StageCostModel::gradient_reduction(int pipeline_rank, int num_layers, double parameters,
                                          double backward_seconds, double* hidden) const {
  *hidden = 0;
  if (!options_.is_train) return 0;
  const int d = setting_.shape.gradient_replicas();
  const double bytes = parameters * element_bytes_;
  const bool group_crosses = reduction_crosses_[0][pipeline_rank];
  const bool all_cross = reduction_crosses_[1][pipeline_rank];
  double exposed = 0;
  if (shards_gradients(setting_.zero_stage)) {
    exposed = zero_two_scatters(pipeline_rank, num_layers, backward_seconds, hidden);
  } else {
    // The part reduced bucket by bucket during backward.
    const double bucketed =
        !shards_optimizer_state(setting_.zero_stage)
            ? collective_seconds(data_parallel_all_reduce_, ring_all_reduce_seconds, links_,
                                 all_cross, d, bytes)
            : collective_seconds(zero_reduce_scatter_, ring_reduce_scatter_seconds, links_,
                                 group_crosses, zero_shards_, bytes);
    exposed = exposed_reduction_seconds(bucketed, reduction_buckets(parameters), backward_seconds);
    *hidden = bucketed - exposed;
  }
  if (!shards_optimizer_state(setting_.zero_stage)) return exposed + norm_all_reduce_;
  // ZeRO-1 and 2: then all-reduce each shard across the groups, and all-gather
  // the updated weights inside the group; ZeRO-3 gathers only the resident
  // units (the others are gathered as the next step reads them).
  const int z = zero_shards_, groups = d / z;
  const double gathered = shards_parameters(setting_.zero_stage)
                              ? zero_three_gathers_[pipeline_rank].resident
                              : collective_seconds(zero_all_gather_, ring_all_gather_seconds,
                                                   links_, group_crosses, z, bytes);
  // ZeRO-2 and 3 all-reduce their fp32 shard (runtime/parallel/sharded_gradients.h).
  const double shard_bytes = (shards_gradients(setting_.zero_stage) ? parameters * 4 : bytes) / z;
  return exposed + norm_all_reduce_ +
         collective_seconds(zero_all_reduce_, ring_all_reduce_seconds, links_, all_cross, groups,
                            shard_bytes) +
         gathered;
}

void StageCostModel::fill_tail(int pipeline_rank, int num_layers, StageEstimate& stage) const {
  const StageLayout layout{0, num_layers, pipeline_rank == 0, pipeline_rank == head_rank(), {}};
  const double parameters = static_cast<double>(
      rank_parameters(config_->model, layout, separate_ends(), setting_.shape.tensor_parallel,
                      options_.ignore_small_tensor_threshold));
  stage.gradient_reduction_seconds = gradient_reduction(
      pipeline_rank, num_layers, parameters, plain_backward_seconds(pipeline_rank, num_layers),
      &stage.hidden_reduction_seconds);
  stage.optimizer_seconds = parameters * optimizer_seconds_per_parameter_;
  // ZeRO-3: the first forward's gathers, which every rank makes, kept or not.
  if (shards_parameters(setting_.zero_stage))
    stage.gradient_reduction_seconds += gather_pass_seconds(pipeline_rank, num_layers, false);
}

double StageCostModel::tail_seconds(int pipeline_rank, int num_layers) const {
  StageEstimate stage;
  fill_tail(pipeline_rank, num_layers, stage);
  return stage.tail_seconds();
}

std::vector<ChargedCollective> StageCostModel::charged_collectives() const {
  std::vector<ChargedCollective> charged;
  charged.reserve(8);  // (also keeps GCC 12's -Wstringop-overflow from a false alarm here)
  auto add = [&](CollectiveOperation operation, int ranks, bool inter_node) {
    const ChargedCollective item{operation, ranks, inter_node};
    if (ranks > 1 && std::find(charged.begin(), charged.end(), item) == charged.end())
      charged.push_back(item);
  };
  const ParallelShape& shape = setting_.shape;
  const int p = shape.pipeline_stages, d = shape.gradient_replicas(), z = zero_shards_;
  add(CollectiveOperation::AllReduce, shape.tensor_parallel, false);
  if (shape.sequence_parallel) {
    add(CollectiveOperation::AllGather, shape.tensor_parallel, false);
    add(CollectiveOperation::ReduceScatter, shape.tensor_parallel, false);
  }
  for (int s = 0; s + 1 < p; ++s)
    add(CollectiveOperation::SendReceive, 2,
        pipeline_boundary_crosses_nodes(shape, s, setting_.layout.devices_per_node));
  if (!options_.is_train) return charged;
  for (int s = 0; s < p; ++s) {
    if (!shards_optimizer_state(setting_.zero_stage)) {
      add(CollectiveOperation::AllReduce, d, reduction_crosses_[1][s]);
      continue;
    }
    add(CollectiveOperation::ReduceScatter, z, reduction_crosses_[0][s]);
    add(CollectiveOperation::AllReduce, d / z, reduction_crosses_[1][s]);
    add(CollectiveOperation::AllGather, z, reduction_crosses_[0][s]);
  }
  return charged;
}

}  // namespace paraplan
