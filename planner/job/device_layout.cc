// device_layout.cc: resolve_device_layout, the job's world size and nodes
// (rules in device_layout.h).
#include "planner/job/device_layout.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

std::string str(int64_t value) {
  return std::to_string(value);
}

[[noreturn]] void fail(const JobConfig& config, const std::string& message) {
  throw std::runtime_error(config.source + ": " + message);
}

}  // namespace

DeviceLayout resolve_device_layout(const JobConfig& config) {
  const PlannerOptions& p = config.planner;
  const ClusterConfig& cluster = config.cluster;
  const bool mesh_given = config.was_set("planner.mesh_row") || config.was_set("planner.mesh_col");
  int64_t world = 0;
  std::string world_source;
  if (config.was_set("planner.world_size")) {
    world = p.world_size, world_source = "[planner] world_size";
  } else if (mesh_given) {
    world = int64_t{p.mesh_row} * p.mesh_col, world_source = "[planner] mesh_row x mesh_col";
  } else if (config.was_set("cluster.num_nodes")) {
    world = int64_t{cluster.num_nodes} * cluster.devices_per_node;
    world_source = "[cluster] num_nodes x devices_per_node";
  } else {
    world = int64_t{std::max(p.pipeline_nstages, 1)} * std::max(p.tensor_parallel_degree, 1) *
            std::max(p.data_parallel_degree, 1) * std::max(p.context_parallel_degree, 1);
    world_source = "the fixed degrees";
  }
  if (world > (1 << 24)) fail(config, world_source + " = " + str(world) + " is too large");

  DeviceLayout layout;
  if (mesh_given) {
    layout.devices_per_node = p.mesh_col;
  } else if (world <= cluster.devices_per_node) {
    layout.devices_per_node = static_cast<int>(world);
  } else {
    layout.devices_per_node = cluster.devices_per_node;
  }
  if (world % layout.devices_per_node != 0)
    fail(config,
         "the world size " + str(world) + " (" + world_source +
             ") is not a multiple of [cluster] devices_per_node = " + str(layout.devices_per_node) +
             "; use whole nodes or set [planner] mesh_row and mesh_col");
  layout.num_nodes = static_cast<int>(world / layout.devices_per_node);
  if (config.was_set("cluster.num_nodes") && layout.num_nodes > cluster.num_nodes)
    fail(config, "the job needs " + str(layout.num_nodes) + " nodes of " +
                     str(layout.devices_per_node) + " devices (world size " + str(world) +
                     "), but [cluster] num_nodes = " + str(cluster.num_nodes));
  if (layout.devices_per_node > cluster.devices_per_node && mesh_given)
    fail(config, "[planner] mesh_col = " + str(p.mesh_col) +
                     " exceeds [cluster] devices_per_node = " + str(cluster.devices_per_node));
  return layout;
}

}  // namespace paraplan
