// communication_model.h: the alpha-beta communication model: link classes
// (intra-node, inter-node), ring collective volumes, and which of a mesh's
// groups cross a node boundary.
//
// Contract:
// - A transfer of B bytes over a link costs latency + B / bandwidth (alpha-beta).
// - Ring collectives over n ranks of a B-byte buffer: all-reduce 2(n-1) steps of
//   B/n bytes; reduce-scatter and all-gather (n-1) steps of B/n bytes. n = 1 is free.
// - A group uses the inter-node link when its ranks span more than one node (the
//   ring's slowest hop sets its pace), else the intra-node link.
// - Ranks are laid out as plan.fbs says: tensor-parallel innermost, then
//   context parallel, data parallel, then pipeline; node k holds ranks
//   [k * devices_per_node, (k+1) * ...). (A context-parallel group's ring:
//   context_parallel_cost.h.)
#pragma once

#include <cstdint>

#include "planner/cost/cost_model.h"
#include "planner/job/device_layout.h"
#include "planner/job/job_config.h"

namespace paraplan {

struct Link {
  double latency_seconds = 0;
  double bandwidth_bytes_per_second = 1;  // per direction, per device
};

struct LinkModel {
  Link intra_node;
  Link inter_node;
  static LinkModel from_cluster(const ClusterConfig& cluster);
  const Link& link(bool crosses_nodes) const { return crosses_nodes ? inter_node : intra_node; }
};

double point_to_point_seconds(const Link& link, double bytes);
double ring_all_reduce_seconds(const Link& link, int ranks, double bytes);
double ring_reduce_scatter_seconds(const Link& link, int ranks, double bytes);
double ring_all_gather_seconds(const Link& link, int ranks, double bytes);

// True when the contiguous rank range [first_rank, first_rank + count) spans
// more than one node.
bool rank_range_crosses_nodes(int64_t first_rank, int64_t count, int devices_per_node);

// Whether pipeline stages pipeline_rank and pipeline_rank + 1 sit on different
// nodes for some of their peer pairs (rank r of one sends to r + dp * cp * tp).
bool pipeline_boundary_crosses_nodes(const ParallelShape& shape, int pipeline_rank,
                                     int devices_per_node);

// Whether the data-parallel ranks of stage pipeline_rank (with context
// parallelism the data x context-parallel ranks, which hold the same
// parameters) span nodes, taken in groups of group_size consecutive ones
// (ZeRO groups) or all of them (group_size = gradient_replicas()).
bool data_parallel_group_crosses_nodes(const ParallelShape& shape, int pipeline_rank,
                                       int group_size, int devices_per_node);

}  // namespace paraplan
