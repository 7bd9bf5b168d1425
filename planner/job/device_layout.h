// device_layout.h: the job's devices (num_nodes x devices_per_node, the plan's
// mesh fields) resolved from its options, before any search.
//
// World size and devices (first rule that applies):
//   world_size = [planner] world_size if set; else mesh_row x mesh_col if either
//   is set; else [cluster] num_nodes x devices_per_node if num_nodes is set; else
//   the product of the fixed degrees (pipeline_nstages, tensor_parallel_degree,
//   data_parallel_degree, context_parallel_degree; unset ones count 1).
//   devices per node = mesh_col if mesh_row or mesh_col is set; else the world
//   when it fits in one cluster node; else [cluster] devices_per_node (which must
//   divide the world). nodes = world / devices per node.
// Every inconsistency is a std::runtime_error naming the file and the field.
#pragma once

#include "planner/job/job_config.h"

namespace paraplan {

// The job's devices: num_nodes x devices_per_node (the plan's mesh fields).
struct DeviceLayout {
  int num_nodes = 1;
  int devices_per_node = 1;
  int world_size() const { return num_nodes * devices_per_node; }
};

// The job's devices and world size (the rules above); throws on inconsistency.
DeviceLayout resolve_device_layout(const JobConfig& config);

}  // namespace paraplan
