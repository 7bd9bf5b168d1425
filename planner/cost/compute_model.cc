// compute_model.cc: the analytic time of GEMMs, the attention core,
// memory-bound operations and the optimizer step (model in compute_model.h),
// and each preset's calibration.
#include "planner/cost/compute_model.h"

#include <algorithm>
#include <cmath>

namespace paraplan {

namespace {

// What a preset's hardware figures leave to calibration: tile shape,
// efficiencies and per-kernel overhead. Fitted once per GPU generation to
// published end-to-end step times (planner/published_calibration_test.cc
// lists them with their sources and errors), not per model.
DeviceModel calibrated(const std::string& preset) {
  // GPUs: cuBLAS's large half-precision GEMMs run 256 x 128 CTA tiles, one per
  // SM at a time, each with a fixed prologue and epilogue (worth ~64 of k);
  // streaming kernels reach ~85% of HBM bandwidth (STREAM-like copies on
  // A100 and H100). The GEMM and attention efficiencies are fitted, two per
  // GPU, to published end-to-end iteration times
  // (planner/published_calibration_test.cc: A100 to Korthikanti et al.'s
  // eight Megatron-LM runs, H100 to Megatron-Core's four one-stage weak-scaling
  // runs): 85% of the A100's 312 TFLOP/s and 70% of the H100's 989 for
  // GEMMs (what cuBLAS reaches on large GEMMs on each), 12.5% of either for
  // the attention core as a whole (softmax, masking and its memory traffic
  // included; it is a few percent of a large model's step, a third of a
  // 4096-token 2048-wide one's).
  const bool a100 = preset == "a100-80g", h100 = preset == "h100-sxm" || preset == "h200";
  if (a100 || h100)
    return {.tile_m = 256,
            .tile_n = 128,
            .gemm_efficiency = a100 ? 0.85 : 0.70,
            .k_overhead = 64,
            .attention_efficiency = 0.125,
            .memory_efficiency = 0.85,
            .kernel_overhead_seconds = 4e-6,
            .fuses_on_gpu = true};
  // CPU: the peak is the machine's measured GEMM rate (paraplan profile) and
  // the bandwidth its measured streaming rate, so no further efficiency;
  // OpenBLAS's register tiles are small enough that quantization is noise.
  return {.attention_efficiency = 0.5};
}

double ceil_div(double a, double b) {
  return std::ceil(a / b);
}

}  // namespace

DeviceModel device_model(const ClusterConfig& cluster, schema::DType dtype) {
  DeviceModel device = calibrated(cluster.preset);
  device.preset = cluster.preset;
  device.peak_flops = cluster.peak_flops(dtype);
  device.memory_bandwidth = cluster.memory_bandwidth_gbps * 1e9;
  device.compute_units = std::max(1, cluster.compute_units);
  device.element_bytes = dtype == schema::DType::BFloat16 ? 2 : 4;
  return device;
}

double memory_seconds(double bytes, const DeviceModel& device) {
  return bytes / (device.memory_bandwidth * device.memory_efficiency);
}

double gemm_seconds(const Gemm& gemm, const DeviceModel& device) {
  if (gemm.m <= 0 || gemm.n <= 0 || gemm.k <= 0) return 0;
  const double tiles_m = ceil_div(gemm.m, device.tile_m), tiles_n = ceil_div(gemm.n, device.tile_n);
  const double tile_utilisation =
      gemm.m * gemm.n / (tiles_m * device.tile_m * tiles_n * device.tile_n);
  const double tiles = tiles_m * tiles_n * gemm.count;
  const double waves = ceil_div(tiles, device.compute_units);
  const double wave_utilisation = tiles / (waves * device.compute_units);
  const double k_utilisation = gemm.k / (gemm.k + device.k_overhead);
  const double compute = gemm.flops() / (device.peak_flops * device.gemm_efficiency *
                                         tile_utilisation * wave_utilisation * k_utilisation);
  const double bytes =
      (gemm.m * gemm.k + gemm.k * gemm.n + gemm.m * gemm.n) * gemm.count * device.element_bytes;
  return std::max(compute, memory_seconds(bytes, device)) + device.kernel_overhead_seconds;
}

double attention_seconds(const AttentionCore& attention, bool backward, const DeviceModel& device) {
  if (attention.batch_heads <= 0) return 0;
  // Query and key tiles of 128: the diagonal tiles are computed whole (a
  // context-parallel rank's balanced chunks have the same share of them).
  const double tiles = ceil_div(attention.seq_len, kAttentionTile);
  const double causal = (1 + 1 / tiles) / 2;
  const double flops = (backward ? attention.backward_flops() : attention.forward_flops()) * causal;
  const double bytes = backward ? attention.backward_bytes(device.element_bytes)
                                : attention.forward_bytes(device.element_bytes);
  // (Context parallelism: a kernel per ring step.)
  return std::max(flops / (device.peak_flops * device.attention_efficiency),
                  memory_seconds(bytes, device)) +
         device.kernel_overhead_seconds * attention.query_shards;
}

double operations_seconds(const Operations& operations, bool backward, const DeviceModel& device) {
  double seconds = 0;
  for (const Gemm& gemm : operations.gemms) seconds += gemm_seconds(gemm, device);
  for (const MemoryOperation& operation : operations.memory)
    if (!(operation.fused_on_gpu && device.fuses_on_gpu))
      seconds += memory_seconds(operation.bytes, device) + device.kernel_overhead_seconds;
  if (operations.has_attention)
    seconds += attention_seconds(operations.attention, backward, device);
  return seconds;
}

double optimizer_bytes_per_parameter(schema::DType dtype) {
  // fp32: norm 4; AdamW reads gradient, weight, two moments (16), writes
  // weight and moments (12). bf16: the gradient is 2 bytes (norm 2, AdamW 2),
  // the fp32 master weight is read and written, and the bf16 copy written (2).
  return dtype == schema::DType::BFloat16 ? 2 + 14 + 12 + 2 : 4 + 16 + 12;
}

double optimizer_seconds_per_parameter(const DeviceModel& device, schema::DType dtype) {
  return memory_seconds(optimizer_bytes_per_parameter(dtype), device);
}

}  // namespace paraplan
