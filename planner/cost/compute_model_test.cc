// compute_model_test.cc: the analytic compute model by hand: GEMM tile and
// wave quantization, the k overhead, the memory-bound roofline of small
// GEMMs, the causal attention core, memory-bound operations, the optimizer's
// bytes; the operation lists' shapes per tensor-parallel degree and that the
// FLOP counts are theirs.
#include "planner/cost/compute_model.h"

#include <gtest/gtest.h>

#include <string>

#include "planner/cost/cost_model.h"
#include "planner/cost/transformer_ops.h"

namespace paraplan {
namespace {

// A made-up device with round numbers: 100 TFLOP/s, 1 TB/s, 4 units of 128 x 128 tiles.
DeviceModel round_device() {
  DeviceModel device;
  device.peak_flops = 100e12;
  device.memory_bandwidth = 1e12;
  device.compute_units = 4;
  device.tile_m = device.tile_n = 128;
  device.gemm_efficiency = 0.5;
  device.k_overhead = 0;
  device.attention_efficiency = 0.25;
  device.memory_efficiency = 0.5;
  device.kernel_overhead_seconds = 1e-6;
  device.element_bytes = 2;
  return device;
}

TEST(ComputeModelTest, GemmTimeFollowsTilesWavesAndK) {
  const DeviceModel device = round_device();
  // 512 x 256: 4 x 2 = 8 full tiles, two full waves of 4 units.
  const Gemm full{"full", 512, 256, 4096};
  EXPECT_DOUBLE_EQ(gemm_seconds(full, device), full.flops() / (100e12 * 0.5) + 1e-6);
  // 640 x 256: 5 x 2 = 10 tiles, three waves of which the last is half busy.
  const Gemm waves{"waves", 640, 256, 4096};
  EXPECT_DOUBLE_EQ(gemm_seconds(waves, device),
                   waves.flops() / (100e12 * 0.5 * (10.0 / 12)) + 1e-6);
  // 520 x 256: 5 x 2 tiles again, the fifth row of tiles 8/128 used.
  const Gemm edge{"edge", 520, 256, 4096};
  EXPECT_DOUBLE_EQ(
      gemm_seconds(edge, device),
      edge.flops() / (100e12 * 0.5 * (520.0 * 256 / (640 * 256)) * (10.0 / 12)) + 1e-6);
  // The k overhead: k / (k + 64).
  DeviceModel short_k = device;
  short_k.k_overhead = 64;
  EXPECT_DOUBLE_EQ(gemm_seconds(full, short_k), full.flops() / (100e12 * 0.5 * 4096 / 4160) + 1e-6);
  // Batched: count multiplies tiles and FLOPs (8 x 8 = 64 tiles = 16 waves).
  const Gemm batched{"batched", 512, 256, 4096, 8};
  EXPECT_DOUBLE_EQ(gemm_seconds(batched, device), batched.flops() / (100e12 * 0.5) + 1e-6);
}

TEST(ComputeModelTest, SmallGemmsAreMemoryBound) {
  const DeviceModel device = round_device();
  // 4096 x 4096 x 16: 0.54 GFLOP take 10.7 us at 50 TFLOP/s, but reading and
  // writing (4096 x 16 x 2 + 4096 x 4096) bf16 elements takes 68 us at 0.5 TB/s.
  const Gemm thin{"thin", 4096, 4096, 16};
  const double bytes = (4096.0 * 16 * 2 + 4096.0 * 4096) * 2;
  EXPECT_DOUBLE_EQ(gemm_seconds(thin, device), bytes / 0.5e12 + 1e-6);
  EXPECT_GT(bytes / 0.5e12, thin.flops() / 50e12);
}

TEST(ComputeModelTest, AttentionCountsTheCausalTilesAndMemoryOpsTheirBytes) {
  const DeviceModel device = round_device();
  const AttentionCore core{.batch_heads = 16, .seq_len = 1024, .head_dim = 128};
  // 8 query tiles of 128: (1 + 1/8) / 2 of the full square.
  const double causal = (1 + 1.0 / 8) / 2;
  EXPECT_DOUBLE_EQ(attention_seconds(core, false, device),
                   core.forward_flops() * causal / (100e12 * 0.25) + 1e-6);
  EXPECT_DOUBLE_EQ(attention_seconds(core, true, device),
                   2.5 * core.forward_flops() * causal / (100e12 * 0.25) + 1e-6);
  EXPECT_DOUBLE_EQ(memory_seconds(1e9, device), 1e9 / 0.5e12);
  Operations list;
  list.memory = {{"a", 1e6}, {"b", 3e6}};
  list.gemms = {{"g", 512, 256, 4096}};
  EXPECT_DOUBLE_EQ(operations_seconds(list, false, device),
                   4e6 / 0.5e12 + 2e-6 + gemm_seconds(list.gemms[0], device));
}

// The CUDA backend's fused passes (GELU and the bias gradients in cuBLASLt
// epilogues, the residual as the projection GEMM's C operand without tensor
// parallelism, the loss's reread from L2) cost a GPU nothing and the CPU
// their bytes; the residual stream's gradient is added by the norms'
// backward on both, so it is no pass of its own.
TEST(ComputeModelTest, AGpuRunsTheFusedPassesInsideOtherKernels) {
  DeviceModel gpu = round_device(), cpu = round_device();
  gpu.fuses_on_gpu = true;
  ModelConfig model;
  model.seq_len = 1024, model.d_model = 768, model.num_heads = 12, model.ffn_size = 3072;
  model.vocab_size = 50304, model.dtype = schema::DType::BFloat16;
  const double T = 8 * 1024, hidden = T * 768 * 2, ffn = T * 3072 * 2;
  const PassOperations block = block_ops(model, 8, 1);
  // Forward: GELU (2 ffn) and both residual adds (3 hidden each).
  EXPECT_NEAR(
      operations_seconds(block.forward, false, cpu) - operations_seconds(block.forward, false, gpu),
      (2 * ffn + 6 * hidden) / 0.5e12 + 3e-6, 1e-12);
  // Backward: GELU (4 ffn) and the bias gradients (T x (3C + C + F + C)).
  EXPECT_NEAR(
      operations_seconds(block.backward, true, cpu) - operations_seconds(block.backward, true, gpu),
      (4 * ffn + T * (3 * 768 + 768 + 3072 + 768) * 2) / 0.5e12 + 2e-6, 1e-12);
  for (const MemoryOperation& pass : block.backward.memory)
    EXPECT_EQ(std::string(pass.name).find("residual"), std::string::npos) << pass.name;
  // With tensor parallelism the residual adds follow the all-reduce: passes;
  // GELU is fused still, over half the MLP (2 x ffn / 2).
  const PassOperations split = block_ops(model, 8, 2);
  EXPECT_NEAR(
      operations_seconds(split.forward, false, cpu) - operations_seconds(split.forward, false, gpu),
      ffn / 0.5e12 + 1e-6, 1e-12);
  // The fused loss reads its logits from memory once on a GPU, twice on the
  // CPU (and writes their gradient on both).
  const double logits = T * 50304 * 2;
  const PassOperations head = head_ops(model, 8, 1);
  EXPECT_NEAR(
      operations_seconds(head.forward, false, cpu) - operations_seconds(head.forward, false, gpu),
      logits / 0.5e12 + 1e-6, 1e-12);
  // The GPU presets fuse; the CPU's does not.
  ClusterConfig h100, host;
  h100.preset = "h100-sxm";
  host.preset = "cpu";
  EXPECT_TRUE(device_model(h100, schema::DType::BFloat16).fuses_on_gpu);
  EXPECT_FALSE(device_model(host, schema::DType::Float32).fuses_on_gpu);
}

TEST(ComputeModelTest, TheOptimizerStreamsItsBytesPerParameter) {
  const DeviceModel device = round_device();
  EXPECT_EQ(optimizer_bytes_per_parameter(schema::DType::Float32), 32);
  EXPECT_EQ(optimizer_bytes_per_parameter(schema::DType::BFloat16), 30);
  EXPECT_DOUBLE_EQ(optimizer_seconds_per_parameter(device, schema::DType::Float32), 32 / 0.5e12);
}

TEST(ComputeModelTest, PresetsCarryTheirDeviceFigures) {
  ClusterConfig h100;
  h100.preset = "h100-sxm";
  h100.peak_tflops_bf16 = 989, h100.memory_bandwidth_gbps = 3352, h100.compute_units = 132;
  const DeviceModel device = device_model(h100, schema::DType::BFloat16);
  EXPECT_EQ(device.peak_flops, 989e12);
  EXPECT_EQ(device.memory_bandwidth, 3352e9);
  EXPECT_EQ(device.compute_units, 132);
  EXPECT_EQ(device.element_bytes, 2);
  EXPECT_GT(device.tile_m, 1);
  EXPECT_LT(device.gemm_efficiency, 1);
}

TEST(TransformerOpsTest, Gpt2BlockGemmsSplitByTensorParallelismAndGiveTheFlopCount) {
  ModelConfig model;
  model.seq_len = 1024, model.d_model = 768, model.num_heads = 12, model.ffn_size = 3072;
  model.vocab_size = 50304;
  const PassOperations one = block_ops(model, 2, 1), four = block_ops(model, 2, 4);
  ASSERT_EQ(four.forward.gemms.size(), 4u);
  // qkv [2048 x 768] x [768 x 3 * 768 / 4]; mlp down [2048 x 3072/4] x [3072/4 x 768].
  EXPECT_EQ(four.forward.gemms[0].m, 2048);
  EXPECT_EQ(four.forward.gemms[0].n, 3 * 768 / 4);
  EXPECT_EQ(four.forward.gemms[0].k, 768);
  EXPECT_EQ(four.forward.gemms[3].n, 768);
  EXPECT_EQ(four.forward.gemms[3].k, 3072 / 4);
  EXPECT_EQ(four.forward.attention.batch_heads, 2 * 12 / 4);
  // Each device does a quarter of the model FLOPs.
  EXPECT_DOUBLE_EQ(4 * four.forward.model_flops(), one.forward.model_flops());
  EXPECT_DOUBLE_EQ(one.forward.model_flops(), block_forward_flops(model, 2));
  // Backward: an input and a weight gradient per GEMM, twice the FLOPs.
  ASSERT_EQ(one.backward.gemms.size(), 8u);
  double backward = 0;
  for (const Gemm& gemm : one.backward.gemms) backward += gemm.flops();
  double forward = 0;
  for (const Gemm& gemm : one.forward.gemms) forward += gemm.flops();
  EXPECT_DOUBLE_EQ(backward, 2 * forward);
  EXPECT_DOUBLE_EQ(head_ops(model, 2, 1).forward.model_flops(), head_forward_flops(model, 2));
  EXPECT_DOUBLE_EQ(4 * head_ops(model, 2, 4).forward.model_flops(), head_forward_flops(model, 2));
}

}  // namespace
}  // namespace paraplan
