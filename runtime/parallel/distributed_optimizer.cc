// distributed_optimizer.cc: DP / ZeRO-1 / ZeRO-2 gradient reduction,
// clipping, AdamW.
#include "runtime/parallel/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "schema/plan_io.h"

namespace paraplan {

size_t DistributedOptimizer::buffer_elements(size_t num_elements, int zero_stage,
                                             int zero_group_size) {
  if (zero_stage == 0 || zero_group_size <= 1) return num_elements;
  const size_t unit = shard_unit_elements(zero_group_size);  // aligned shards
  // ZeRO-2 pads each unit: the last one's all-gather writes at most unit - 1
  // elements past the end (sharded_gradients.h).
  if (shards_gradients(zero_stage)) return num_elements + unit - 1;
  return (num_elements + unit - 1) / unit * unit;
}

DistributedOptimizer::DistributedOptimizer(ModelStage& stage, kernels::Ops& ops,
                                           MemoryTracker& memory, ProcessGroups& groups,
                                           const AdamWSettings& settings, int zero_stage,
                                           size_t bucket_elements)
    : stage_(stage),
      layout_(stage.layout()),
      ops_(ops),
      memory_(memory),
      groups_(groups),
      settings_(settings),
      sharded_(shards_optimizer_state(zero_stage)),
      dtype_(stage.dtype()),
      gradient_dtype_(shards_gradients(zero_stage) ? kernels::DType::kFloat32 : stage.dtype()) {
  const size_t n = layout_.num_elements();
  const int z = sharded_ ? groups.zero->size() : 1;
  if (stage.buffer_elements() < buffer_elements(n, zero_stage, z))
    throw std::invalid_argument("DistributedOptimizer: stage buffers are not padded for ZeRO");
  find_tied_ranges();
  if (shards_gradients(zero_stage)) {
    make_sharded_gradients(shards_parameters(zero_stage));
  } else {
    const size_t padded = buffer_elements(n, sharded_ ? 1 : 0, z);
    buckets_ = plan_gradient_buckets(padded, bucket_elements, z);
    shard_elements_ = sharded_ ? padded / z : n;
  }
  started_.assign(buckets_.size(), false);
  if (sharded_) {
    for (const GradientBucket& bucket : buckets_) owned_.push_back(owned(bucket));
  } else {
    // Everything is this rank's, as one range: the norm and the update then
    // run exactly as without buckets, which stay bitwise invisible.
    owned_.push_back(OwnedRange{0, n, 0});
  }
  if (sharded_) {
    if (!sharded_gradients_)
      gradient_shard_ = memory.allocate(ops.storage_bytes(std::max<size_t>(shard_elements_, 1)),
                                        MemoryCategory::kGradients);
    // Replicas of a shard sit in the other ZeRO groups; the first counts it.
    counts_replicas_ = groups.zero_replicas->rank() == 0;
  } else {
    counts_replicas_ = groups.data->rank() == 0;
  }
  squares_ = static_cast<double*>(memory.allocate(sizeof(double), MemoryCategory::kWorkspace));
  ops.zero_bytes(squares_, sizeof(double));
  const size_t bytes = std::max<size_t>(shard_elements_, 1) * sizeof(float);
  first_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  second_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  ops.zero_bytes(first_moment_, bytes);
  ops.zero_bytes(second_moment_, bytes);
  if (dtype_ != kernels::DType::kFloat32) {
    master_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
    ops.zero_bytes(master_, bytes);
  }
}

void DistributedOptimizer::find_tied_ranges() {
  // The tied tensor (the embedding of the first and the last stage) is
  // summed over the embedding group before its buckets reduce; where this
  // rank holds the head's copy too, with that copy here. Untied models hold
  // none: then neither end of the group sums anything.
  const ParameterTensor* tied = layout_.tied_tensor();
  if (tied && groups_.embedding) held_ = {{tied->offset, tied->offset + tied->size}};
  for (const ParameterTensor& tensor : layout_.tensors())
    if (tied && tensor.tied_copy && &tensor != tied && tensor.name == tied->name)
      held_ = {{tied->offset, tied->offset + tied->size},
               {tensor.offset, tensor.offset + tensor.size}};
}

void DistributedOptimizer::make_sharded_gradients(bool shard_parameters) {
  // Units written over the whole backward, or holding a tied tensor summed
  // with another stage's, stay whole for the step.
  const std::vector<GradientUnit> units = stage_.gradient_units();
  std::vector<bool> resident(units.size());
  for (size_t i = 0; i < units.size(); ++i) {
    const size_t end = i + 1 < units.size() ? units[i + 1].begin : layout_.num_elements();
    resident[i] = units[i].written_early;
    for (const HeldRange& held : held_)
      resident[i] = resident[i] || (units[i].begin < held.end && held.begin < end);
  }
  sharded_gradients_ = std::make_unique<ShardedGradients>(units, layout_.num_elements(), resident,
                                                          ops_, memory_, *groups_.zero);
  buckets_ = sharded_gradients_->buckets();
  shard_elements_ = sharded_gradients_->shard_elements();
  gradient_shard_ = sharded_gradients_->shard();
  stage_.use_gradient_storage(sharded_gradients_.get());
  resident_ = resident;
  // Each chunk's first unit (the units are the chunks' in buffer order).
  for (int c = 0; c < stage_.num_chunks(); ++c)
    chunk_first_unit_.push_back(unit_holding(buckets_, stage_.chunk_offset(c), "optimizer"));
  if (!shard_parameters) return;
  // ZeRO-3: the parameters too, the same units resident.
  sharded_parameters_ = std::make_unique<ShardedParameters>(units, layout_.num_elements(), resident,
                                                            ops_, memory_, *groups_.zero);
  stage_.use_parameter_storage(sharded_parameters_.get());
}

size_t DistributedOptimizer::unit_index(int chunk, int unit) const {
  const size_t first = chunk_first_unit_.at(static_cast<size_t>(chunk));
  const size_t end = static_cast<size_t>(chunk) + 1 < chunk_first_unit_.size()
                         ? chunk_first_unit_[chunk + 1]
                         : buckets_.size();
  if (unit < 0 || first + static_cast<size_t>(unit) >= end)
    throw std::runtime_error("ZeRO unit op: unit " + std::to_string(unit) + " of chunk " +
                             std::to_string(chunk) + ", which has " + std::to_string(end - first) +
                             " units on this rank");
  return first + static_cast<size_t>(unit);
}

std::pair<int, int> DistributedOptimizer::chunk_unit(size_t index) const {
  const auto after = std::upper_bound(chunk_first_unit_.begin(), chunk_first_unit_.end(), index);
  const int chunk = static_cast<int>(after - chunk_first_unit_.begin()) - 1;
  return {chunk, static_cast<int>(index - chunk_first_unit_[chunk])};
}

std::pair<int, int> DistributedOptimizer::unit_of(size_t offset) const {
  return chunk_unit(unit_holding(buckets_, offset, "optimizer"));
}

void DistributedOptimizer::run_unit_op(schema::OpCode op, int chunk, int unit) {
  const size_t index = unit_index(chunk, unit);
  switch (op) {
    case schema::OpCode::GatherParameters:
    case schema::OpCode::ReleaseParameters:
      if (!sharded_parameters_)
        throw std::runtime_error(std::string("ZeRO unit op ") + opcode_name(op) +
                                 " on a rank whose parameters are not sharded (ZeRO-3)");
      if (op == schema::OpCode::GatherParameters)
        sharded_parameters_->gather(index);
      else
        sharded_parameters_->release(index);
      return;
    case schema::OpCode::ReduceScatterGradients:
      if (!sharded_gradients_)
        throw std::runtime_error(
            "ZeRO unit op reduce_scatter_gradients on a rank whose "
            "gradients are not sharded (ZeRO-2, 3)");
      sharded_gradients_->unit_done(buckets_[index].begin);
      return;
    case schema::OpCode::LoadMicroBatch:
    case schema::OpCode::Forward:
    case schema::OpCode::Backward:
    case schema::OpCode::SendActivation:
    case schema::OpCode::RecvActivation:
    case schema::OpCode::SendGradient:
    case schema::OpCode::RecvGradient:
    case schema::OpCode::ReduceGradients:
    case schema::OpCode::OptimizerStep:
    case schema::OpCode::BackwardInput:
    case schema::OpCode::BackwardWeight:
      break;
  }
  throw std::logic_error(std::string("run_unit_op: ") + opcode_name(op) + " is no unit op");
}

void DistributedOptimizer::watch_unit_reads(std::function<void(int, int)> read) {
  if (!sharded_parameters_) return;
  sharded_parameters_->set_planned(static_cast<bool>(read));
  if (!read) {
    sharded_parameters_->set_unit_used_listener(nullptr);
    return;
  }
  sharded_parameters_->set_unit_used_listener([this, read = std::move(read)](size_t index) {
    const auto [chunk, unit] = chunk_unit(index);
    read(chunk, unit);
  });
}

void DistributedOptimizer::check_units(const std::vector<ChunkUnits>& plan_units) const {
  if (!sharded_gradients_) return;
  const auto refuse = [](const std::string& what) {
    throw std::runtime_error("ZeRO units: " + what +
                             "; the runtime's stage and schema/zero_units.h disagree");
  };
  if (plan_units.size() != chunk_first_unit_.size())
    refuse(std::to_string(plan_units.size()) + " chunks in the plan, " +
           std::to_string(chunk_first_unit_.size()) + " on this rank");
  for (size_t c = 0; c < plan_units.size(); ++c) {
    const size_t first = chunk_first_unit_[c];
    const size_t end =
        c + 1 < chunk_first_unit_.size() ? chunk_first_unit_[c + 1] : buckets_.size();
    if (end - first != static_cast<size_t>(plan_units[c].count()))
      refuse("chunk " + std::to_string(c) + " has " + std::to_string(end - first) +
             " units, the plan " + std::to_string(plan_units[c].count()));
    for (size_t u = 0; u < end - first; ++u)
      if (resident_[first + u] != plan_units[c].resident[u])
        refuse("unit " + std::to_string(u) + " of chunk " + std::to_string(c) +
               (resident_[first + u] ? " is resident here, not in the plan"
                                     : " is resident in the plan, not here"));
  }
}

void* DistributedOptimizer::owned_parameters(size_t bucket, size_t offset, size_t shard_at) {
  return sharded_parameters_ ? sharded_parameters_->owned(bucket, offset, shard_at)
                             : kernels::element_at(stage_.parameters(), offset, dtype_);
}

DistributedOptimizer::~DistributedOptimizer() {
  // The last step's all-gathers write into the stage's parameters, which
  // the stage frees after this: they finish first (on NCCL the stream
  // waits; nothing blocks the host). A failing communicator has thrown
  // already; its error is the one that ends the job.
  try {
    wait_for_parameters();
  } catch (...) {
  }
  if (sharded_gradients_) stage_.use_gradient_storage(nullptr);
  if (sharded_parameters_) stage_.use_parameter_storage(nullptr);
  memory_.release(squares_);
  memory_.release(first_moment_);
  memory_.release(second_moment_);
  if (gradient_shard_ && !sharded_gradients_) memory_.release(gradient_shard_);
  if (master_) memory_.release(master_);
}

float* DistributedOptimizer::master_at(size_t at) const {
  return master_ + at;
}

void DistributedOptimizer::initialize_master() {
  if (!master_ || master_valid_) return;
  wait_for_parameters();
  for (size_t i = 0; i < owned_.size(); ++i)
    ops_.convert_to_float(master_at(owned_[i].shard_offset),
                          owned_parameters(i, owned_[i].begin, owned_[i].shard_offset),
                          owned_[i].end - owned_[i].begin);
  master_valid_ = true;
}

DistributedOptimizer::OwnedRange DistributedOptimizer::owned(const GradientBucket& bucket) const {
  return owned_by(bucket, groups_.zero->rank());
}

DistributedOptimizer::OwnedRange DistributedOptimizer::owned_by(const GradientBucket& bucket,
                                                                int zero_rank) const {
  const size_t n = layout_.num_elements();
  OwnedRange range;
  const size_t first = bucket.begin + bucket.chunk * static_cast<size_t>(zero_rank);
  // ZeRO-2's units are padded one by one: the last owner's chunk may reach
  // past its unit.
  range.end = std::min({n, bucket.end, first + bucket.chunk});
  range.begin = std::min(first, range.end);
  range.shard_offset = bucket.shard_offset;
  return range;
}

void DistributedOptimizer::start_bucket(size_t index) {
  started_[index] = true;
  const GradientBucket& bucket = buckets_[index];
  void* gradients = stage_.gradients();
  if (sharded_) {
    groups_.zero->start_reduce_scatter(
        kernels::element_at(gradients, bucket.begin, dtype_),
        kernels::element_at(gradient_shard_, bucket.shard_offset, dtype_), bucket.chunk, dtype_);
  } else if (groups_.data->size() > 1) {
    groups_.data->start_all_reduce(kernels::element_at(gradients, bucket.begin, dtype_),
                                   bucket.end - bucket.begin, dtype_);
  }
}

void DistributedOptimizer::zero_gradients() {
  if (sharded_gradients_)
    sharded_gradients_->zero();
  else
    ops_.zero_bytes(stage_.gradients(), ops_.storage_bytes(stage_.buffer_elements()));
}

void DistributedOptimizer::gradients_final_from(size_t offset) {
  if (sharded_gradients_) return;  // reduced unit by unit (the stream's unit ops)
  // From the end of the buffer down, as backward finishes them. Buckets with
  // the tied embedding wait for its sum across the pipeline (reduce_gradients),
  // so the order of additions does not depend on the bucketing.
  for (size_t i = buckets_.size(); i-- > 0;) {
    const GradientBucket& bucket = buckets_[i];
    if (bucket.begin < offset) break;
    bool holds_embedding = false;
    for (const HeldRange& held : held_)
      holds_embedding |= bucket.begin < held.end && held.begin < bucket.end;
    if (!started_[i] && !holds_embedding) start_bucket(i);
  }
}

void* DistributedOptimizer::gradient_at(size_t offset) {
  return sharded_gradients_ ? sharded_gradients_->gradient(offset)
                            : kernels::element_at(stage_.gradients(), offset, dtype_);
}

void DistributedOptimizer::reduce_gradients() {
  // The embedding and the tied head are one parameter: both copies receive
  // the sum of both gradients.
  if (held_.size() == 2) {  // both on this rank
    void* owner = gradient_at(held_[0].begin);
    void* copy = gradient_at(held_[1].begin);
    const size_t n = held_[0].end - held_[0].begin;
    ops_.accumulate(owner, copy, n);
    ops_.copy(copy, owner, n * kernels::dtype_bytes(dtype_));
  } else if (!held_.empty()) {
    groups_.embedding->all_reduce(gradient_at(held_[0].begin), held_[0].end - held_[0].begin,
                                  dtype_, ReduceOp::kSum);
  }
  if (sharded_gradients_) {
    sharded_gradients_->finish();
    // The fp32 shard summed in fp32: no rounding to the storage dtype here.
    if (groups_.zero_replicas->size() > 1)
      groups_.zero_replicas->all_reduce(gradient_shard_, shard_elements_, gradient_dtype_,
                                        ReduceOp::kSum);
    return;
  }
  for (size_t i = buckets_.size(); i-- > 0;)
    if (!started_[i]) start_bucket(i);
  started_.assign(buckets_.size(), false);
  if (sharded_) {
    groups_.zero->wait_pending();
    if (groups_.zero_replicas->size() > 1)
      groups_.zero_replicas->all_reduce(gradient_shard_, shard_elements_, dtype_, ReduceOp::kSum);
  } else {
    groups_.data->wait_pending();
  }
}

void DistributedOptimizer::accumulate_counted_squares(const void* gradients,
                                                      const OwnedRange& range) {
  if (!counts_replicas_) return;
  // Adjacent counted tensors are summed as one run (fewer, longer kernels);
  // every run adds to one device accumulator, read once per step.
  size_t run_begin = 0, run_end = 0;
  auto flush = [&] {
    if (run_begin >= run_end) return;
    const void* at = kernels::element_at(gradients, run_begin - range.begin + range.shard_offset,
                                         gradient_dtype_);
    if (sharded_gradients_)  // ZeRO-2 and 3: the fp32 shard
      ops_.accumulate_float_sum_of_squares(squares_, static_cast<const float*>(at),
                                           run_end - run_begin);
    else
      ops_.accumulate_sum_of_squares(squares_, at, run_end - run_begin);
  };
  for (const ParameterTensor& tensor : layout_.tensors()) {
    // Counted once: tensor-parallel replicas by tensor rank 0, the tied copy
    // on the last stage not at all (the first stage counts the embedding).
    if (tensor.shard == ShardKind::kReplicated && layout_.tensor_rank() != 0) continue;
    if (tensor.tied_copy) continue;
    const size_t from = std::max(range.begin, tensor.offset);
    const size_t to = std::min(range.end, tensor.offset + tensor.size);
    if (from >= to) continue;
    if (from != run_end) {
      flush();
      run_begin = from;
    }
    run_end = to;
  }
  flush();
}

void DistributedOptimizer::step(float learning_rate, int step) {
  // This rank's gradients: its shard under ZeRO-1 to 3 (fp32 under 2 and 3),
  // else the whole buffer; either is indexed by OwnedRange::shard_offset.
  void* gradients = sharded_ ? gradient_shard_ : stage_.gradients();
  ops_.zero_bytes(squares_, sizeof(double));
  for (const OwnedRange& range : owned_) accumulate_counted_squares(gradients, range);
  // Summed where it lies (the device under NCCL): nothing here waits for the
  // device, and every rank derives the same clip factor from the same sum.
  groups_.world->all_reduce(squares_, 1, ReduceOp::kSum);
  initialize_master();
  collect_adamw_runs(gradients);
  // torch's clip_grad_norm_ rule, the factor applied as AdamW reads each
  // gradient (no pass of its own over the gradients); while the backend
  // holds a deferred error (a bad loss target) AdamW changes nothing.
  const kernels::AdamWStep hyperparameters{.learning_rate = learning_rate,
                                           .beta1 = settings_.beta1,
                                           .beta2 = settings_.beta2,
                                           .epsilon = settings_.epsilon,
                                           .step = step};
  // ZeRO-3: AdamW writes the shard, which a prefetch no read took may still read.
  if (sharded_parameters_) sharded_parameters_->settle_prefetches();
  ops_.adamw_runs(adamw_runs_, sharded_gradients_ != nullptr, hyperparameters,
                  {.sum_of_squares = squares_, .max_norm = settings_.grad_clip});
  if (sharded_parameters_) {
    // ZeRO-3: each unit is gathered when it is read next.
    sharded_parameters_->parameters_updated();
    parameters_pending_ = true;
  } else if (sharded_) {
    // From the last bucket down: under ZeRO-2 a unit's padding spills into
    // the next unit's first elements (sharded_gradients.h), so that unit must
    // hold its gathered values before the spill copies them from the last
    // rank (gathered first, they would be sent stale). The next forward waits
    // for all of them (wait_for_parameters), so the order costs nothing.
    const int rank = groups_.zero->rank();
    void* parameters = stage_.parameters();
    for (auto bucket = buckets_.rbegin(); bucket != buckets_.rend(); ++bucket)
      groups_.zero->start_all_gather(
          kernels::element_at(parameters, bucket->begin + bucket->chunk * rank, dtype_),
          kernels::element_at(parameters, bucket->begin, dtype_), bucket->chunk, dtype_);
    parameters_pending_ = true;
  }
}

double DistributedOptimizer::finish_step() {
  double squares = 0;
  ops_.copy_to_host(&squares, squares_, sizeof(double));
  // A bad target the loss kernels found (the CUDA backend reports it late)
  // ends the step here; step()'s AdamW saw it pending and changed nothing.
  ops_.check_deferred_errors();
  memory_.sample_backend();
  return std::sqrt(squares);
}

void DistributedOptimizer::collect_adamw_runs(void* gradients) {
  adamw_runs_.clear();
  const size_t gradient_bytes = kernels::dtype_bytes(gradient_dtype_);
  const size_t param_bytes = kernels::dtype_bytes(dtype_);
  for (size_t i = 0; i < owned_.size(); ++i) {
    const OwnedRange& range = owned_[i];
    for (const ParameterTensor& tensor : layout_.tensors()) {
      const size_t from = std::max(range.begin, tensor.offset);
      const size_t to = std::min(range.end, tensor.offset + tensor.size);
      if (from >= to) continue;
      const size_t at = from - range.begin + range.shard_offset;
      void* params = owned_parameters(i, from, at);
      kernels::AdamWRun run{// fp32 storage: the parameters are the master weights.
                            .master = master_ ? master_at(at) : static_cast<float*>(params),
                            .params = params,
                            .grads = kernels::element_at(gradients, at, gradient_dtype_),
                            .first_moment = first_moment_ + at,
                            .second_moment = second_moment_ + at,
                            .n = to - from,
                            .weight_decay = tensor.weight_decay ? settings_.weight_decay : 0.0f};
      // Neighbours with the same decay that continue each other in all five
      // buffers are one run (AdamW is elementwise: the same bits).
      if (!adamw_runs_.empty()) {
        kernels::AdamWRun& last = adamw_runs_.back();
        const auto follows = [&](const void* next, const void* previous, size_t bytes) {
          return static_cast<const char*>(next) ==
                 static_cast<const char*>(previous) + last.n * bytes;
        };
        if (last.weight_decay == run.weight_decay &&
            follows(run.master, last.master, sizeof(float)) &&
            follows(run.params, last.params, param_bytes) &&
            follows(run.grads, last.grads, gradient_bytes) &&
            follows(run.first_moment, last.first_moment, sizeof(float)) &&
            follows(run.second_moment, last.second_moment, sizeof(float))) {
          last.n += run.n;
          continue;
        }
      }
      adamw_runs_.push_back(run);
    }
  }
}

void DistributedOptimizer::wait_for_parameters() {
  if (!parameters_pending_) return;
  if (sharded_parameters_)
    sharded_parameters_->wait_for_resident();
  else
    groups_.zero->wait_pending();
  parameters_pending_ = false;
}

}  // namespace paraplan
