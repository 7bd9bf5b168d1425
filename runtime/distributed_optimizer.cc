// distributed_optimizer.cc: DP / ZeRO-1 gradient reduction, clipping, AdamW.
#include "runtime/distributed_optimizer.h"

#include <algorithm>
#include <cmath>

namespace paraplan {

size_t DistributedOptimizer::buffer_elements(size_t num_elements, int zero_stage,
                                             int zero_group_size) {
  if (zero_stage == 0 || zero_group_size <= 1) return num_elements;
  const size_t chunk = (num_elements + zero_group_size - 1) / zero_group_size;
  return chunk * zero_group_size;
}

DistributedOptimizer::DistributedOptimizer(GptStage& stage, kernels::Ops& ops,
                                           MemoryTracker& memory, ProcessGroups& groups,
                                           const AdamWSettings& settings, int zero_stage)
    : stage_(stage),
      layout_(stage.layout()),
      ops_(ops),
      memory_(memory),
      groups_(groups),
      settings_(settings),
      sharded_(zero_stage == 1) {
  const size_t n = layout_.num_elements();
  if (sharded_) {
    const int z = groups.zero->size();
    shard_elements_ = buffer_elements(n, 1, z) / z;
    if (stage.buffer_elements() < shard_elements_ * z)
      throw std::invalid_argument("DistributedOptimizer: stage buffers are not padded for ZeRO");
    begin_ = std::min(n, shard_elements_ * groups.zero->rank());
    end_ = std::min(n, begin_ + shard_elements_);
    gradient_shard_ = static_cast<float*>(
        memory.allocate(shard_elements_ * sizeof(float), MemoryCategory::kGradients));
    // Replicas of a shard sit in the other ZeRO groups; the first counts it.
    counts_replicas_ = groups.zero_replicas->rank() == 0;
  } else {
    begin_ = 0;
    end_ = n;
    shard_elements_ = n;
    counts_replicas_ = groups.data->rank() == 0;
  }
  const size_t bytes = std::max<size_t>(shard_elements_, 1) * sizeof(float);
  first_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  second_moment_ = static_cast<float*>(memory.allocate(bytes, MemoryCategory::kOptimizerState));
  ops.fill_zero(first_moment_, shard_elements_);
  ops.fill_zero(second_moment_, shard_elements_);
}

DistributedOptimizer::~DistributedOptimizer() {
  memory_.release(first_moment_);
  memory_.release(second_moment_);
  if (gradient_shard_) memory_.release(gradient_shard_);
}

void DistributedOptimizer::reduce_gradients() {
  float* gradients = stage_.gradients();
  if (groups_.embedding) {
    // The first stage's embedding and the last stage's tied head are one
    // parameter: both receive the sum of both gradients.
    const StageSpec& spec = layout_.stage();
    const size_t offset = spec.has_embedding ? layout_.token_embedding() : layout_.head_weight();
    const size_t count = static_cast<size_t>(layout_.local_vocab()) * layout_.config().d_model;
    groups_.embedding->all_reduce(gradients + offset, count, ReduceOp::kSum);
  }
  if (!sharded_) {
    if (groups_.data->size() > 1)
      groups_.data->all_reduce(gradients, layout_.num_elements(), ReduceOp::kSum);
    return;
  }
  groups_.zero->reduce_scatter(gradients, gradient_shard_, shard_elements_);
  if (groups_.zero_replicas->size() > 1)
    groups_.zero_replicas->all_reduce(gradient_shard_, shard_elements_, ReduceOp::kSum);
}

double DistributedOptimizer::counted_sum_of_squares(const float* gradients, size_t begin,
                                                    size_t end) const {
  if (!counts_replicas_) return 0.0;
  double sum = 0;
  for (const ParameterTensor& tensor : layout_.tensors()) {
    // Counted once: tensor-parallel replicas by tensor rank 0, the tied copy
    // on the last stage not at all (the first stage counts the embedding).
    if (tensor.shard == ShardKind::kReplicated && layout_.tensor_rank() != 0) continue;
    if (tensor.name == "transformer.wte.weight" && !layout_.stage().has_embedding) continue;
    const size_t from = std::max(begin, tensor.offset);
    const size_t to = std::min(end, tensor.offset + tensor.size);
    if (from < to) sum += ops_.sum_of_squares(gradients + (from - begin), to - from);
  }
  return sum;
}

double DistributedOptimizer::step(float learning_rate, int step) {
  // This rank's gradients: its shard under ZeRO-1, else the whole buffer.
  float* gradients = sharded_ ? gradient_shard_ : stage_.gradients();
  double squares = counted_sum_of_squares(gradients, begin_, end_);
  groups_.world->all_reduce(&squares, 1, ReduceOp::kSum);
  const double norm = std::sqrt(squares);
  // torch's clip_grad_norm_ rule, the same factor on every rank.
  if (settings_.grad_clip > 0) {
    const double factor = settings_.grad_clip / (norm + 1e-6);
    if (factor < 1.0) ops_.scale(gradients, static_cast<float>(factor), end_ - begin_);
  }
  float* parameters = stage_.parameters();
  for (const ParameterTensor& tensor : layout_.tensors()) {
    const size_t from = std::max(begin_, tensor.offset);
    const size_t to = std::min(end_, tensor.offset + tensor.size);
    if (from >= to) continue;
    const float decay = tensor.weight_decay ? settings_.weight_decay : 0.0f;
    ops_.adamw(parameters + from, gradients + (from - begin_), first_moment_ + (from - begin_),
               second_moment_ + (from - begin_), to - from, learning_rate, settings_.beta1,
               settings_.beta2, settings_.epsilon, decay, step);
  }
  if (sharded_)
    groups_.zero->all_gather(parameters + shard_elements_ * groups_.zero->rank(), parameters,
                             shard_elements_);
  return norm;
}

void DistributedOptimizer::gather_moments(std::vector<float>& first, std::vector<float>& second) {
  const size_t n = layout_.num_elements();
  const size_t whole = sharded_ ? shard_elements_ * groups_.zero->size() : n;
  float* gathered = static_cast<float*>(
      memory_.allocate(std::max<size_t>(whole, 1) * sizeof(float), MemoryCategory::kWorkspace));
  first.resize(n);
  second.resize(n);
  for (int which = 0; which < 2; ++which) {
    const float* moment = which == 0 ? first_moment_ : second_moment_;
    std::vector<float>& out = which == 0 ? first : second;
    if (sharded_)
      groups_.zero->all_gather(moment, gathered, shard_elements_);
    else
      ops_.copy(gathered, moment, n * sizeof(float));
    ops_.copy_to_host(out.data(), gathered, n * sizeof(float));
  }
  memory_.release(gathered);
}

void DistributedOptimizer::load_moments(const float* first, const float* second) {
  const size_t count = end_ - begin_;
  ops_.copy_from_host(first_moment_, first + begin_, count * sizeof(float));
  ops_.copy_from_host(second_moment_, second + begin_, count * sizeof(float));
}

}  // namespace paraplan
