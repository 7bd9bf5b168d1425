// stage_cost_test.cc: the alpha-beta communication model, node placement of mesh
// groups, the per-stage time and memory model and the step formula, with numbers
// worked out by hand.
#include "planner/cost/stage_cost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "planner/cost/compute_model.h"
#include "planner/cost/transformer_ops.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

TEST(CommunicationModelTest, AlphaBetaRingVolumes) {
  const Link nvlink{5e-6, 300e9};
  // All-reduce: 2 (n - 1) steps of B / n bytes.
  EXPECT_DOUBLE_EQ(ring_all_reduce_seconds(nvlink, 8, 1e9), 14 * 5e-6 + 14.0 / 8 * 1e9 / 300e9);
  EXPECT_DOUBLE_EQ(ring_reduce_scatter_seconds(nvlink, 8, 1e9), 7 * 5e-6 + 7.0 / 8 * 1e9 / 300e9);
  EXPECT_DOUBLE_EQ(ring_all_gather_seconds(nvlink, 4, 4e6), 3 * 5e-6 + 3.0 / 4 * 4e6 / 300e9);
  EXPECT_EQ(ring_all_reduce_seconds(nvlink, 1, 1e9), 0.0);
  EXPECT_DOUBLE_EQ(point_to_point_seconds({10e-6, 25e9}, 50e6), 10e-6 + 2e-3);

  ClusterConfig a100;
  a100.intra_node_bandwidth_gbps = 300, a100.intra_node_latency_us = 5;
  a100.inter_node_bandwidth_gbps = 25, a100.inter_node_latency_us = 10;
  const LinkModel links = LinkModel::from_cluster(a100);
  EXPECT_DOUBLE_EQ(links.link(false).bandwidth_bytes_per_second, 300e9);
  EXPECT_DOUBLE_EQ(links.link(true).latency_seconds, 10e-6);
}

TEST(CommunicationModelTest, GroupsCrossNodesWhereTheirRanksDo) {
  // pp 4 x dp 2 x tp 2 on nodes of 8: stages hold ranks [0,4), [4,8), [8,12), [12,16).
  const ParallelShape shape{4, 2, 2};
  EXPECT_FALSE(pipeline_boundary_crosses_nodes(shape, 0, 8));  // ranks 0-7
  EXPECT_TRUE(pipeline_boundary_crosses_nodes(shape, 1, 8));   // 4-11 spans nodes 0 and 1
  EXPECT_FALSE(pipeline_boundary_crosses_nodes(shape, 2, 8));
  // dp 16 on nodes of 8 crosses; ZeRO groups of 8 consecutive ranks do not.
  EXPECT_TRUE(data_parallel_group_crosses_nodes({1, 16, 1}, 0, 16, 8));
  EXPECT_FALSE(data_parallel_group_crosses_nodes({1, 16, 1}, 0, 8, 8));
  // With tp 2 a ZeRO group of 8 data-parallel ranks spans 16 ranks.
  EXPECT_TRUE(data_parallel_group_crosses_nodes({1, 8, 2}, 0, 8, 8));
  EXPECT_FALSE(data_parallel_group_crosses_nodes({1, 8, 2}, 0, 4, 8));
}

using job_config_test::gpt3_175b;

TEST(StageCostTest, Gpt3MiddleStageTimeByHand) {
  // The whole reduction is exposed (overlap has its own test below).
  const JobConfig config = gpt3_175b({{"cluster.overlap_communication", "false"}});
  // pp 8 x dp 16 x tp 8 on 128 nodes of 8, micro-batch 1 x 96.
  const PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, 0, 1, {}};
  const StageCostModel costs(config, setting);
  const StageEstimate stage = costs.estimate(3, {12, 0, 0});
  // Compute: the A100's analytic model of one tp-8 shard's operations
  // (compute_model_test.cc checks that model by hand).
  const DeviceModel a100 = device_model(config.cluster, schema::DType::BFloat16);
  const PassOperations block = block_ops(config.model, 1, 8);
  EXPECT_DOUBLE_EQ(stage.forward_seconds, 12 * operations_seconds(block.forward, false, a100));
  EXPECT_DOUBLE_EQ(stage.backward_seconds, 12 * operations_seconds(block.backward, true, a100));
  // The qkv GEMM [2048 x 12288] x [12288 x 4608]: 8 x 36 tiles of 256 x 128
  // in 3 waves of 108 SMs (the last two-thirds busy), long k.
  const double qkv = 2.0 * 2048 * 4608 * 12288 /
                     (312e12 * a100.gemm_efficiency * (288.0 / 324) * 12288 / (12288 + 64));
  EXPECT_DOUBLE_EQ(gemm_seconds(block.forward.gemms[0], a100), qkv + 4e-6);
  // 4 all-reduces of s*b*h*2 bytes per block over 8 NVLink ranks.
  const double all_reduce = 14 * 5e-6 + 14.0 / 8 * (2048.0 * 12288 * 2) / 300e9;
  EXPECT_DOUBLE_EQ(stage.tensor_parallel_seconds, 12 * (4 * all_reduce));
  // Stage 3 holds ranks [384, 512) of nodes of 8: both neighbours are on other
  // nodes; it sends an activation forward and a gradient back.
  const double send = 10e-6 + 2048.0 * 12288 * 2 / 25e9;
  EXPECT_DOUBLE_EQ(stage.pipeline_p2p_seconds, 2 * send);
  // Gradients: 12 blocks of the tp-8 shard, bf16, ring all-reduce over 16 ranks
  // spanning 16 nodes; then the gradient norm's all-reduce over the 1024
  // ranks, a tree's 2 x 10 inter-node latencies.
  const double parameters = 12.0 * block_parameters(config.model, 8);
  const double norm = 2 * 10 * 10e-6;
  EXPECT_DOUBLE_EQ(stage.gradient_reduction_seconds,
                   30 * 10e-6 + 30.0 / 16 * parameters * 2 / 25e9 + norm);
  // The optimizer streams 30 bytes per bf16 parameter at 85% of 2039 GB/s.
  EXPECT_DOUBLE_EQ(stage.optimizer_seconds, parameters * (30 / (2039e9 * 0.85)));
  EXPECT_DOUBLE_EQ(costs.slot_seconds(3, {12, 0, 0}), stage.slot_seconds());
  EXPECT_DOUBLE_EQ(costs.tail_seconds(3, 12), stage.tail_seconds());
  // The step: (m + p - 1) slots plus the slowest tail.
  EXPECT_DOUBLE_EQ(step_seconds(setting, 2.0, 0.5), (96 + 8 - 1) * 2.0 + 0.5);
}

TEST(StageCostTest, SequenceParallelismByHand) {
  const JobConfig config = gpt3_175b({{"cluster.overlap_communication", "false"}});
  const PlanSetting plain{{8, 16, 8}, {128, 8}, 1, 96, 0, 1, {}};
  PlanSetting sequence = plain;
  sequence.shape.sequence_parallel = true;
  const StageEstimate without = StageCostModel(config, plain).estimate(3, {12, 0, 0});
  const StageEstimate with = StageCostModel(config, sequence).estimate(3, {12, 0, 0});
  // Per block: forward 2 x (all-gather + reduce-scatter); backward 2 x (two
  // all-gathers, a reduce-scatter and the norm weights' all-reduce of 2h bf16).
  const double bytes = 2048.0 * 12288 * 2, per_rank = bytes / 8;
  const double gather = 7 * 5e-6 + 7 * per_rank / 300e9;  // = the reduce-scatter's ring
  const double norm_weights = 14 * 5e-6 + 14.0 / 8 * (2 * 12288 * 2) / 300e9;
  EXPECT_DOUBLE_EQ(with.tensor_parallel_seconds,
                   12 * (2 * (2 * gather) + 2 * (3 * gather + norm_weights)));
  // The forward volume equals the all-reduces' (to the latency terms).
  const double all_reduce = 14 * 5e-6 + 14.0 / 8 * bytes / 300e9;
  EXPECT_NEAR(2 * (2 * gather), 2 * all_reduce, 1e-12);
  // The pipeline messages are token shards.
  const double send = 10e-6 + bytes / 8 / 25e9;
  EXPECT_DOUBLE_EQ(with.pipeline_p2p_seconds, 2 * send);
  // The norms and residual adds move 1/8 of their bytes: less compute.
  EXPECT_LT(with.forward_seconds, without.forward_seconds);
  EXPECT_LT(with.backward_seconds, without.backward_seconds);
  // And activations: replicated terms / 8.
  EXPECT_LT(with.memory.activations, without.memory.activations);
}

TEST(StageCostTest, ZeroOneReducesScattersAndGathersInsideGroups) {
  const JobConfig config = gpt3_175b({{"cluster.overlap_communication", "false"}});
  const PlanSetting plain{{8, 16, 8}, {128, 8}, 1, 96, 0, 1, {}};
  const PlanSetting zero{{8, 16, 8}, {128, 8}, 1, 96, 1, 4, {}};
  const StageEstimate a = StageCostModel(config, plain).estimate(3, {12, 0, 0});
  const StageEstimate b = StageCostModel(config, zero).estimate(3, {12, 0, 0});
  const double bytes = 12.0 * block_parameters(config.model, 8) * 2;
  const Link ib{10e-6, 25e9};
  // Groups of 4 data-parallel ranks (32 ranks, 4 nodes): reduce-scatter, all-reduce
  // of a quarter across the 4 groups, all-gather.
  EXPECT_DOUBLE_EQ(b.gradient_reduction_seconds, ring_reduce_scatter_seconds(ib, 4, bytes) +
                                                     ring_all_reduce_seconds(ib, 4, bytes / 4) +
                                                     ring_all_gather_seconds(ib, 4, bytes) +
                                                     2 * 10 * 10e-6);  // the norm
  // Optimizer state sharded 4 ways, and the step updates a quarter.
  EXPECT_EQ(b.memory.optimizer_state, (a.memory.optimizer_state + 3) / 4);
  EXPECT_DOUBLE_EQ(b.optimizer_seconds, a.optimizer_seconds / 4);
}

TEST(StageCostTest, ExposedPartOfABucketedReduction) {
  // One bucket: nothing hides. Compute-bound (r / k <= B / k): only the last
  // bucket shows. Communication-bound: all but the backward it overlaps.
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(3.0, 1, 10.0), 3.0);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(3.0, 4, 10.0), 0.75);
  EXPECT_DOUBLE_EQ(exposed_reduction_seconds(12.0, 4, 8.0), 12.0 - 8.0 * 3 / 4);
}

TEST(StageCostTest, BucketedReductionHidesBehindTheLastBackward) {
  // The a100 preset overlaps communication; 40M-element buckets.
  const JobConfig overlapped = gpt3_175b();
  const JobConfig serial = gpt3_175b({{"cluster.overlap_communication", "false"}});
  ASSERT_TRUE(overlapped.cluster.overlap_communication);
  for (int zero_stage : {0, 1}) {
    const PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, zero_stage, 4, {}};
    const StageEstimate a = StageCostModel(serial, setting).estimate(3, {12, 0, 0});
    const StageEstimate b = StageCostModel(overlapped, setting).estimate(3, {12, 0, 0});
    EXPECT_EQ(a.hidden_reduction_seconds, 0.0);
    EXPECT_GT(b.hidden_reduction_seconds, 0.0) << zero_stage;
    // The hidden part is taken off the same total.
    EXPECT_NEAR(b.gradient_reduction_seconds + b.hidden_reduction_seconds,
                a.gradient_reduction_seconds, 1e-12);
    // 12 blocks of the tp-8 shard in 40M buckets, behind one backward without
    // recomputation (the plain 2x forward here).
    const double parameters = 12.0 * block_parameters(overlapped.model, 8);
    const int buckets = static_cast<int>(std::ceil(parameters / 40e6));
    const Link ib{10e-6, 25e9};
    const double bucketed = zero_stage == 0 ? ring_all_reduce_seconds(ib, 16, parameters * 2)
                                            : ring_reduce_scatter_seconds(ib, 4, parameters * 2);
    EXPECT_NEAR(b.hidden_reduction_seconds,
                bucketed - exposed_reduction_seconds(bucketed, buckets, b.backward_seconds), 1e-12);
  }
  // A full-recompute stage backwards longer, but only the plain backward is
  // counted on, so the tail does not depend on the recompute choice.
  const PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, 0, 1, {}};
  const StageCostModel costs(overlapped, setting);
  EXPECT_DOUBLE_EQ(costs.estimate(3, {0, 0, 12}).tail_seconds(), costs.tail_seconds(3, 12));
}

TEST(StageCostTest, MemoryFromCountsEqualsTheLayerByLayerModel) {
  std::mt19937 rng(3);
  const JobConfig config = gpt3_175b({{"planner.memory_granularity", "4096"}});
  for (int trial = 0; trial < 50; ++trial) {
    const int p = 1 + rng() % 8;
    const PlanSetting setting{
        {p, 16, 8}, {128, 8}, 1 + static_cast<int>(rng() % 4), 8, static_cast<int>(rng() % 2),
        1,          {}};
    const StageCostModel costs(config, setting);
    const int rank = rng() % p;
    StageLayout layout{0, static_cast<int>(rng() % 6), rank == 0, rank == p - 1, {}};
    for (int i = 0; i < layout.num_layers; ++i)
      layout.recompute.push_back(static_cast<RecomputeMode>(rng() % 3));
    PlannerOptions options = config.planner;
    options.zero_stage = setting.zero_stage;
    // Plus NCCL's buffers, cuDNN's attention workspace (bf16, head_dim 128
    // on the A100 preset), the GEMM lanes' workspaces and the kernels'
    // scratch, which the layer-by-layer model (no cluster) has not.
    const MemoryBreakdown memory = costs.memory(rank, count_recompute(layout));
    EXPECT_GT(memory.communicator_buffers, 0u);
    const int64_t attention_workspace = cudnn_attention_workspace_bytes(
        config.model, config.cluster.preset, setting.micro_batch_size,
        setting.shape.tensor_parallel, 1, false, true);
    EXPECT_GT(attention_workspace, 0);
    EXPECT_EQ(gemm_workspace_bytes(config.cluster.preset), 64 << 20);  // two 32 MiB lanes
    const int64_t kernel_scratch = cuda_kernel_scratch_bytes(
        config.model, config.cluster.preset, config.cluster.compute_units, setting.micro_batch_size,
        setting.shape.tensor_parallel, 1, setting.shape.sequence_parallel, false, rank == 0, true);
    EXPECT_GT(kernel_scratch, 0);
    // Within memory_granularity (4096): the transient's sum is rounded up once.
    const double extra = static_cast<double>(
        attention_workspace + gemm_workspace_bytes(config.cluster.preset) + kernel_scratch);
    EXPECT_NEAR(
        static_cast<double>(memory.total() - memory.communicator_buffers) - extra,
        static_cast<double>(stage_memory(config.model, options, layout, rank, setting.shape,
                                         setting.micro_batch_size, setting.num_micro_batches)
                                .total()),
        4096);
  }
}

TEST(StageCostTest, InferenceMemoryAndForwardOnlyTime) {
  const JobConfig config = gpt3_175b({{"planner.is_train", "false"}});
  const PlanSetting setting{{8, 16, 8}, {128, 8}, 1, 96, 0, 1, {}};
  const StageEstimate stage = StageCostModel(config, setting).estimate(3, {12, 0, 0});
  EXPECT_EQ(stage.memory.gradients + stage.memory.optimizer_state + stage.memory.activations, 0u);
  EXPECT_GT(stage.memory.weights, 0u);
  EXPECT_EQ(stage.backward_seconds, 0.0);
  EXPECT_EQ(stage.tail_seconds(), 0.0);
  EXPECT_DOUBLE_EQ(stage.pipeline_p2p_seconds, 10e-6 + 2048.0 * 12288 * 2 / 25e9);
}

}  // namespace
}  // namespace paraplan
