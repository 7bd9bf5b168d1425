// communication_model.cc: alpha-beta link costs, ring collectives and the node
// placement of mesh groups (contract in communication_model.h).
#include "planner/cost/communication_model.h"

namespace paraplan {

LinkModel LinkModel::from_cluster(const ClusterConfig& cluster) {
  LinkModel links;
  links.intra_node = {cluster.intra_node_latency_us * 1e-6,
                      cluster.intra_node_bandwidth_gbps * 1e9};
  links.inter_node = {cluster.inter_node_latency_us * 1e-6,
                      cluster.inter_node_bandwidth_gbps * 1e9};
  return links;
}

double point_to_point_seconds(const Link& link, double bytes) {
  return link.latency_seconds + bytes / link.bandwidth_bytes_per_second;
}

double ring_all_reduce_seconds(const Link& link, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double steps = 2.0 * (ranks - 1);
  return steps * link.latency_seconds + steps * bytes / ranks / link.bandwidth_bytes_per_second;
}

double ring_reduce_scatter_seconds(const Link& link, int ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double steps = ranks - 1.0;
  return steps * link.latency_seconds + steps * bytes / ranks / link.bandwidth_bytes_per_second;
}

double ring_all_gather_seconds(const Link& link, int ranks, double bytes) {
  return ring_reduce_scatter_seconds(link, ranks, bytes);
}

bool rank_range_crosses_nodes(int64_t first_rank, int64_t count, int devices_per_node) {
  if (count <= 1) return false;
  return first_rank / devices_per_node != (first_rank + count - 1) / devices_per_node;
}

bool pipeline_boundary_crosses_nodes(const ParallelShape& shape, int pipeline_rank,
                                     int devices_per_node) {
  // Stage s holds the contiguous ranks [s * dp * tp, (s + 1) * dp * tp); a peer
  // pair (r, r + dp * tp) crosses a node boundary exactly when the two stages'
  // ranges together do (see the planner README).
  const int64_t stage_ranks = shape.stage_ranks();
  return rank_range_crosses_nodes(pipeline_rank * stage_ranks, 2 * stage_ranks, devices_per_node);
}

bool data_parallel_group_crosses_nodes(const ParallelShape& shape, int pipeline_rank,
                                       int group_size, int devices_per_node) {
  const int64_t t = shape.tensor_parallel;
  const int64_t stage_first = pipeline_rank * int64_t{shape.stage_ranks()};
  // Groups of group_size consecutive data- x context-parallel ranks; any
  // group crossing sets the pace of the collective they run together.
  for (int64_t group = 0; group < shape.gradient_replicas() / group_size; ++group)
    if (rank_range_crosses_nodes(stage_first + group * group_size * t, group_size * t,
                                 devices_per_node))
      return true;
  return false;
}

}  // namespace paraplan
