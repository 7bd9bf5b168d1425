// context_parallel_cost.cc: a context-parallel rank's tokens, the attention
// ring's exposed transfers, its node placement and workspace (model in
// context_parallel_cost.h).
#include "planner/cost/context_parallel_cost.h"

#include <algorithm>

#include "planner/cost/communication_model.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/transformer_ops.h"

namespace paraplan {

ModelConfig context_parallel_tokens(const ModelConfig& model, int context_parallel) {
  ModelConfig local = model;
  if (context_parallel > 1) local.seq_len = model.seq_len / context_parallel;
  return local;
}

bool context_parallel_searchable(const ModelConfig& model, int context_parallel) {
  const int64_t chunks = 2 * int64_t{context_parallel};
  return context_parallel == 1 ||
         (model.seq_len % chunks == 0 && model.seq_len / chunks >= kAttentionTile);
}

double context_parallel_kv_block_elements(const ModelConfig& model, int micro_batch_size,
                                          int tensor_parallel, int context_parallel) {
  const double tokens = static_cast<double>(micro_batch_size) * model.seq_len / context_parallel;
  return tokens * 2.0 * kv_heads(model) / tensor_parallel * head_dim(model);
}

double ContextParallelRing::forward_exposed_seconds() const {
  if (ranks <= 1) return 0;
  return (ranks - 1) * std::max(0.0, kv_transfer_seconds - forward_step_seconds);
}

double ContextParallelRing::backward_exposed_seconds() const {
  if (ranks <= 1) return 0;
  // Each accumulator travels while the receiving rank computes its share, one
  // step behind the K/V blocks; the last one (to the owner) behind nothing.
  const double kv = kv_transfer_seconds, dkv = dkv_transfer_seconds;
  const double step = backward_step_seconds;
  return std::max(0.0, kv - step) + (ranks - 2) * std::max(0.0, kv + dkv - step) +
         std::max(0.0, dkv - step) + dkv;
}

ContextParallelRing context_parallel_ring(const ModelConfig& model, const ParallelShape& shape,
                                          int micro_batch_size, const DeviceModel& device,
                                          const std::function<double(double)>& transfer_seconds) {
  ContextParallelRing ring;
  const int cp = shape.context_parallel;
  if (cp <= 1) return ring;
  ring.ranks = cp;
  const double elements =
      context_parallel_kv_block_elements(model, micro_batch_size, shape.tensor_parallel, cp);
  ring.kv_transfer_seconds = transfer_seconds(elements * element_bytes(model.dtype));
  ring.dkv_transfer_seconds = transfer_seconds(elements * 4);
  // The rank's attention core, an equal block per step.
  const AttentionCore attention =
      block_ops(model, micro_batch_size, shape.tensor_parallel, false, cp).forward.attention;
  ring.forward_step_seconds = attention_seconds(attention, false, device) / cp;
  ring.backward_step_seconds = attention_seconds(attention, true, device) / cp;
  return ring;
}

bool context_parallel_group_crosses_nodes(const ParallelShape& shape, int devices_per_node) {
  if (shape.context_parallel <= 1) return false;
  // Group g holds the ranks [g tp cp, (g + 1) tp cp); the pattern of their
  // offsets within a node repeats within devices_per_node groups.
  const int64_t span = int64_t{shape.tensor_parallel} * shape.context_parallel;
  const int64_t groups = int64_t{shape.pipeline_stages} * shape.data_parallel;
  for (int64_t g = 0; g < std::min<int64_t>(groups, devices_per_node); ++g)
    if (rank_range_crosses_nodes(g * span, span, devices_per_node)) return true;
  return false;
}

int64_t context_parallel_workspace_bytes(const ModelConfig& model, int micro_batch_size,
                                         int tensor_parallel, int context_parallel,
                                         bool document_mask) {
  if (context_parallel <= 1 && !document_mask) return 0;
  const int64_t e = element_bytes(model.dtype);
  const int64_t kv = static_cast<int64_t>(context_parallel_kv_block_elements(
      model, micro_batch_size, tensor_parallel, context_parallel));
  const int64_t rows = int64_t{micro_batch_size} * (model.seq_len / context_parallel);
  const int64_t attention = rows * (model.num_heads / tensor_parallel) * head_dim(model);
  const int64_t blocks = context_parallel > 1 ? 2 : 1;
  const int64_t share = context_parallel > 1 ? 4 * kv : 0;
  // Positions, the fp32 accumulator and its storage copy, per block in
  // flight the packed block and its fp32 dK/dV, and a ring's fp32 share.
  return 4 * int64_t{model.seq_len} + attention * (4 + e) + blocks * kv * (e + 4) + share;
}

int64_t document_table_bytes(const ModelConfig& model, int micro_batch_size) {
  return int64_t{4} * micro_batch_size * model.seq_len;
}

}  // namespace paraplan
