// compute_model.h: the analytic time of a device's work (transformer_ops.h)
// when no measured profile covers it, and of the optimizer step.
//
// Model:
// - A GEMM [m x k] x [k x n] is cut into output tiles of tile_m x tile_n, one
//   per compute unit (SM; CPU core) at a time, in waves of compute_units
//   tiles. Its compute time is 2mnk / (peak x gemm_efficiency x tile
//   utilisation x wave utilisation x k / (k + k_overhead)): partial tiles at
//   the edges (tile quantization) and a last wave that leaves units idle
//   (wave quantization) waste their share, and each tile pays a fixed
//   prologue and epilogue (worth k_overhead of k). Its memory time is
//   (mk + kn + mn) elements / (bandwidth x memory_efficiency); the GEMM
//   takes the longer of the two (a roofline: small GEMMs are memory-bound).
// - The fused attention core computes only the tiles on or below the
//   diagonal: forward FLOPs x (1 + 1/tiles) / 2, at peak x
//   attention_efficiency, or its bytes at the memory rate if longer; under
//   context parallelism the rank's share, a kernel per ring step.
// - Memory-bound operations (norms, activations, residuals, lookups, the
//   loss) move their bytes at bandwidth x memory_efficiency, except those a
//   GPU runs inside another kernel (GELU, the residual adds without tensor
//   parallelism and the bias gradients in GEMM epilogues, the loss's second
//   read of its logits from L2): their bytes hide under that kernel's, and
//   they launch no kernel of their own.
// - Every kernel (each GEMM, attention core and memory-bound operation) adds
//   kernel_overhead_seconds (launch and tail).
// - The optimizer step (gradient norm, AdamW, the storage copy of the
//   weights) streams optimizer_bytes_per_parameter bytes per parameter of the
//   rank's shard at the memory rate: it is memory-bound on every device.
//
// The device figures come from the cluster (peak per dtype, memory bandwidth,
// compute units, its preset's calibration: calibrated_device in
// compute_model.cc cites what each preset was calibrated against), or for the
// `cpu` preset from the profile's measured peak and bandwidth
// (schema/profile_format.h), so the analytic model and MFU use the machine's
// real figures.
#pragma once

#include <string>

#include "planner/cost/transformer_ops.h"
#include "planner/job/job_config.h"

namespace paraplan {

// The fused attention core's query and key tiles (tokens).
inline constexpr int kAttentionTile = 128;

struct DeviceModel {
  std::string preset{};
  double peak_flops = 1e11;        // dense FLOP/s for the job's dtype
  double memory_bandwidth = 1e10;  // bytes/s
  int compute_units = 1;
  int tile_m = 1, tile_n = 1;
  double gemm_efficiency = 1;       // of peak, for full waves of full tiles and long k
  double k_overhead = 0;            // elements of k one tile's fixed cost is worth
  double attention_efficiency = 1;  // of peak, the fused attention core
  double memory_efficiency = 1;     // of bandwidth, streaming kernels
  double kernel_overhead_seconds = 0;
  int element_bytes = 4;
  // The memory operations marked fused_on_gpu cost nothing: the GPUs'
  // backend runs them inside other kernels, the CPU's as passes.
  bool fuses_on_gpu = false;
};

// The model of one device of cluster for dtype: the cluster's figures and its
// preset's calibration (an unknown preset name gets the `cpu` one).
DeviceModel device_model(const ClusterConfig& cluster, schema::DType dtype);

double gemm_seconds(const Gemm& gemm, const DeviceModel& device);
double attention_seconds(const AttentionCore& attention, bool backward, const DeviceModel& device);
double memory_seconds(double bytes, const DeviceModel& device);
// Everything listed, one after another.
double operations_seconds(const Operations& operations, bool backward, const DeviceModel& device);

// Bytes the optimizer step reads and writes per parameter of a shard: the
// gradient norm's read of the gradient, AdamW's read of gradient, master
// weight and both moments and its write of weight and moments, and, where
// the storage weights are a separate bf16 copy, that write.
double optimizer_bytes_per_parameter(schema::DType dtype);
double optimizer_seconds_per_parameter(const DeviceModel& device, schema::DType dtype);

}  // namespace paraplan
