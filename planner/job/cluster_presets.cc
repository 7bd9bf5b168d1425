// cluster_presets.cc: the device presets of [cluster] and the figures derived
// from a cluster (peak per dtype, the memory a plan may use).
#include "planner/job/cluster_presets.h"

#include <algorithm>
#include <sstream>

namespace paraplan {

std::vector<std::string> cluster_preset_names() {
  return {"cpu", "a100-80g", "h100-sxm", "h200"};
}

ClusterConfig cluster_preset(const std::string& name) {
  ClusterConfig c;  // the member defaults are the "cpu" preset
  c.preset = name;
  // device_memory_gb is what cudaMemGetInfo reports as total (nvidia-smi's
  // MiB / 1024): A100 80GB 81920 MiB, H100 SXM 80GB 81559 MiB, H200 143771 MiB.
  if (name == "a100-80g") {
    c.devices_per_node = 8, c.device_memory_gb = 80, c.reserved_memory_gb = 2;
    c.peak_tflops_fp32 = 19.5, c.peak_tflops_bf16 = 312;
    c.intra_node_bandwidth_gbps = 300, c.intra_node_latency_us = 5;
    c.inter_node_bandwidth_gbps = 25, c.inter_node_latency_us = 10;
    c.memory_bandwidth_gbps = 2039, c.compute_units = 108;  // HBM2e, SMs
    c.overlap_communication = true;
  } else if (name == "h100-sxm" || name == "h200") {
    c.devices_per_node = 8, c.device_memory_gb = name == "h200" ? 140.4 : 79.6;
    c.reserved_memory_gb = 2;
    c.peak_tflops_fp32 = 67, c.peak_tflops_bf16 = 989;
    c.intra_node_bandwidth_gbps = 450, c.intra_node_latency_us = 5;
    c.inter_node_bandwidth_gbps = 50, c.inter_node_latency_us = 10;
    c.memory_bandwidth_gbps = name == "h200" ? 4800 : 3352, c.compute_units = 132;
    c.overlap_communication = true;
  }
  return c;
}

double plan_memory_limit_gb(const JobConfig& config) {
  return std::min(config.planner.memory_constraint,
                  config.cluster.device_memory_gb - config.cluster.reserved_memory_gb);
}

bool memory_constraint_binds(const JobConfig& config) {
  return config.planner.memory_constraint <=
         config.cluster.device_memory_gb - config.cluster.reserved_memory_gb;
}

std::string memory_limit_text(const JobConfig& config) {
  const ClusterConfig& cluster = config.cluster;
  std::ostringstream text;
  text << plan_memory_limit_gb(config) << " GB (";
  if (memory_constraint_binds(config))
    text << "memory_constraint)";
  else
    text << "device_memory_gb " << cluster.device_memory_gb << " less reserved_memory_gb "
         << cluster.reserved_memory_gb << ")";
  return text.str();
}

double ClusterConfig::peak_flops(schema::DType dtype) const {
  return (dtype == schema::DType::BFloat16 ? peak_tflops_bf16 : peak_tflops_fp32) * 1e12;
}

}  // namespace paraplan
