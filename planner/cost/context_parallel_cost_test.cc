// context_parallel_cost_test.cc: context parallelism's cost model, by hand:
// a rank's activations and compute at 1 / cp of the whole sequence's, the
// ring's exposed transfers (none where each step's block attention hides
// them, the excess where it does not; backward, the dK/dV accumulators one
// step behind the K/V blocks and the last one whole), the ring's workspace
// and document masking's table, the group's node placement, and the
// gradient reduction and ZeRO over the data x context-parallel ranks.
#include "planner/cost/context_parallel_cost.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/cost/communication_model.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/stage_cost.h"
#include "planner/cost/transformer_ops.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

// Llama 3 8B (32 blocks, d_model 4096, 32 heads of 128, 8 KV heads) at
// seq_len tokens on a node of 8 H100s, bf16 with fp32 master weights.
JobConfig llama3_8b(int seq_len, int global_batch = 8) {
  return parse_job_config("", "cp.toml",
                          {{"model.architecture", "llama"},
                           {"model.num_layers", "32"},
                           {"model.d_model", "4096"},
                           {"model.num_heads", "32"},
                           {"model.num_kv_heads", "8"},
                           {"model.ffn_size", "14336"},
                           {"model.vocab_size", "128256"},
                           {"model.seq_len", std::to_string(seq_len)},
                           {"model.dtype", "bfloat16"},
                           {"training.global_batch_size", std::to_string(global_batch)},
                           {"training.total_steps", "10"},
                           {"cluster.preset", "h100-sxm"},
                           {"cluster.num_nodes", "1"},
                           {"planner.memory_constraint", "77.6"},
                           {"planner.opt_resident_coef", "6"}});
}

// One node of 8 devices, micro-batches of one sequence.
PlanSetting setting_of(ParallelShape shape, int micro_batches) {
  PlanSetting setting;
  setting.shape = shape;
  setting.layout.num_nodes = 1;
  setting.layout.devices_per_node = 8;
  setting.micro_batch_size = 1;
  setting.num_micro_batches = micro_batches;
  return setting;
}

TEST(ContextParallelCost, ARanksActivationsAreOneCpthOfTheSequences) {
  const JobConfig config = llama3_8b(32768);
  // One stage of 32 blocks, dp x cp = 8: each block's kept bytes, the stage's
  // activations (one micro-batch in flight) and its compute fall as 1 / cp.
  const StageCostModel whole(config, setting_of({1, 8, 1, false, 1}, 1));
  const MemoryBreakdown one = whole.memory(0, {32, 0, 0});
  for (int cp : {2, 4, 8}) {
    SCOPED_TRACE("cp " + std::to_string(cp));
    const StageCostModel split(config, setting_of({1, 8 / cp, 1, false, cp}, 1));
    const MemoryBreakdown memory = split.memory(0, {32, 0, 0});
    EXPECT_EQ(memory.activations * cp, one.activations);  // every term is per token
    for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::Selective, RecomputeMode::Full})
      EXPECT_EQ(block_activation_bytes(context_parallel_tokens(config.model, cp), 1, mode) * cp,
                block_activation_bytes(config.model, 1, mode));
    // The model state is the whole model's (no ZeRO here: not divided).
    EXPECT_EQ(memory.weights, one.weights);
    EXPECT_EQ(memory.optimizer_state, one.optimizer_state);
    // Beside the transient peak, the ring's buffers (runtime/model/
    // context_attention.h): the positions (int32), the output's and then dq's
    // fp32 accumulator with its bf16 copy, two K/V blocks (bf16) with their
    // fp32 dK/dV, and a step's fp32 dK/dV share.
    const int64_t tokens = 32768 / cp, kv = tokens * 2 * 8 * 128, q = tokens * 32 * 128;
    EXPECT_EQ(context_parallel_workspace_bytes(config.model, 1, 1, cp),
              4 * 32768 + q * (4 + 2) + 2 * kv * (2 + 4) + kv * 4);
    const StageMemoryTerms terms = stage_memory_terms(config.model, config.planner, true, true, 0,
                                                      {1, 8 / cp, 1, false, cp}, 1, 1);
    EXPECT_EQ(terms.ring_workspace,
              static_cast<double>(context_parallel_workspace_bytes(config.model, 1, 1, cp)));
    // And the GEMM lanes' workspaces and the kernels' scratch, as on every
    // GPU preset (here with the block attention's row terms of the ring).
    const int64_t scratch =
        cuda_kernel_scratch_bytes(config.model, config.cluster.preset, config.cluster.compute_units,
                                  1, 1, cp, false, false, true, true);
    EXPECT_EQ(static_cast<double>(memory.transient),
              std::max(config.planner.transient_mem_coef * terms.largest_two_with_blocks,
                       terms.workspace) +
                  terms.ring_workspace +
                  static_cast<double>(gemm_workspace_bytes(config.cluster.preset) + scratch));
    // Compute: GEMMs on 1 / cp of the tokens, and 1 / cp of the causal
    // attention's FLOPs (the balanced chunks).
    const PassOperations ops = block_ops(config.model, 1, 1, false, cp);
    const PassOperations all = block_ops(config.model, 1, 1);
    EXPECT_NEAR(ops.forward.model_flops() * cp, all.forward.model_flops(),
                1e-12 * all.forward.model_flops());
    EXPECT_NEAR(ops.forward.attention.forward_flops() * cp, all.forward.attention.forward_flops(),
                1e-12 * all.forward.attention.forward_flops());
  }
  EXPECT_EQ(context_parallel_workspace_bytes(config.model, 1, 1, 1), 0);
  // Document masking runs the same block attention without a ring: one block
  // (its dK/dV summed in place: no share).
  EXPECT_EQ(context_parallel_workspace_bytes(config.model, 1, 1, 1, true),
            4 * 32768 + int64_t{32768} * 32 * 128 * 6 + int64_t{32768} * 2 * 8 * 128 * 6);
}

TEST(ContextParallelCost, DocumentMaskingKeepsEachMicroBatchsDocumentsTable) {
  const JobConfig config = llama3_8b(32768);
  JobConfig masking = config;
  apply_override(masking, "data.document_mask", "true");
  EXPECT_EQ(masking.data.document_separator, 128000);  // Llama 3's <|begin_of_text|>
  const StageCostModel plain(config, setting_of({1, 4, 1, false, 2}, 2));
  const StageCostModel masked(masking, setting_of({1, 4, 1, false, 2}, 2));
  // [B, T] int32 of the whole sequence per micro-batch in flight (1F1B, one
  // stage: 1); the ring's workspace is the same.
  EXPECT_EQ(masked.memory(0, {32, 0, 0}).activations - plain.memory(0, {32, 0, 0}).activations,
            uint64_t{4} * 32768);
  EXPECT_EQ(masked.memory(0, {32, 0, 0}).transient, plain.memory(0, {32, 0, 0}).transient);
}

TEST(ContextParallelCost, TheRingIsExposedOnlyWhereTheBlockAttentionCannotHideIt) {
  const Link nvlink{5e-6, 450e9}, infiniband{10e-6, 50e9};
  const DeviceModel h100 = device_model(llama3_8b(8192).cluster, schema::DType::BFloat16);
  const auto transfer = [](const Link& link) {
    return [link](double bytes) { return point_to_point_seconds(link, bytes); };
  };
  // 128k tokens over 8 ranks in a node: a K/V block is 16384 tokens x 2 x 8
  // KV heads x 128 bf16 = 67 MB, 154 us over NVLink; each step's block
  // attention 17.8 ms forward, 44.5 ms backward: the ring is hidden but for
  // the last dK/dV accumulator, 134 MB of fp32 in 303 us to its owner after
  // the last step.
  const JobConfig long_context = llama3_8b(131072);
  const ContextParallelRing hidden =
      context_parallel_ring(long_context.model, {1, 1, 1, false, 8}, 1, h100, transfer(nvlink));
  const double kv_bytes = 16384.0 * 2 * 8 * 128 * 2;
  EXPECT_DOUBLE_EQ(hidden.kv_transfer_seconds, 5e-6 + kv_bytes / 450e9);
  EXPECT_DOUBLE_EQ(hidden.dkv_transfer_seconds, 5e-6 + kv_bytes * 2 / 450e9);  // fp32
  const AttentionCore attention = block_ops(long_context.model, 1, 1, false, 8).forward.attention;
  EXPECT_DOUBLE_EQ(hidden.forward_step_seconds, attention_seconds(attention, false, h100) / 8);
  EXPECT_GT(hidden.forward_step_seconds, 100 * hidden.kv_transfer_seconds);
  EXPECT_EQ(hidden.forward_exposed_seconds(), 0.0);
  EXPECT_GT(hidden.backward_step_seconds, 100 * hidden.dkv_transfer_seconds);
  EXPECT_DOUBLE_EQ(hidden.backward_exposed_seconds(), hidden.dkv_transfer_seconds);
  EXPECT_NEAR(hidden.backward_exposed_seconds(), 303.26e-6, 0.01e-6);

  // 4k tokens over 8 ranks across nodes: a 2 MB block takes 52 us over
  // InfiniBand, a step's block attention 22 us: 7 steps expose the difference
  // forward. Backward (dK/dV 94 us, a step's block backward b = 48.8 us):
  // step 0 exposes K - b = 3.2 us, steps 1 to 6 K + dK/dV - b = 97.0 us each,
  // step 7 dK/dV - b = 45.1 us, and the last accumulator its 93.9 us:
  // 724.4 us.
  const JobConfig short_context = llama3_8b(4096);
  const ContextParallelRing exposed = context_parallel_ring(
      short_context.model, {1, 1, 1, false, 8}, 1, h100, transfer(infiniband));
  const double block = 512.0 * 2 * 8 * 128 * 2;
  const double kv = 10e-6 + block / 50e9, dkv = 10e-6 + 2 * block / 50e9;
  EXPECT_DOUBLE_EQ(exposed.kv_transfer_seconds, kv);
  EXPECT_LT(exposed.forward_step_seconds, kv);
  EXPECT_DOUBLE_EQ(exposed.forward_exposed_seconds(), 7 * (kv - exposed.forward_step_seconds));
  const double b = exposed.backward_step_seconds;
  EXPECT_NEAR(b, 48.78e-6, 0.01e-6);
  EXPECT_DOUBLE_EQ(exposed.backward_exposed_seconds(),
                   (kv - b) + 6 * (kv + dkv - b) + (dkv - b) + dkv);
  EXPECT_NEAR(exposed.backward_exposed_seconds(), 724.41e-6, 0.01e-6);
  EXPECT_GT(exposed.forward_exposed_seconds(), 100e-6);

  // One rank: no ring.
  const ContextParallelRing none =
      context_parallel_ring(short_context.model, {1, 8, 1}, 1, h100, transfer(infiniband));
  EXPECT_EQ(none.forward_exposed_seconds() + none.backward_exposed_seconds(), 0.0);
}

TEST(ContextParallelCost, TheStageSlotCarriesTheExposedRing) {
  // 4k tokens, cp 8 over two nodes of 4 (the group spans them): the slot
  // counts each block's exposed ring, forward and backward, and the forward
  // again where it recomputes.
  JobConfig config = llama3_8b(4096);
  PlanSetting setting = setting_of({1, 1, 1, false, 8}, 8);
  setting.layout.num_nodes = 2;
  setting.layout.devices_per_node = 4;
  ASSERT_TRUE(context_parallel_group_crosses_nodes(setting.shape, 4));
  const StageCostModel costs(config, setting);
  const DeviceModel h100 = device_model(config.cluster, schema::DType::BFloat16);
  const Link infiniband{10e-6, 50e9};
  const ContextParallelRing ring = context_parallel_ring(
      config.model, setting.shape, 1, h100,
      [&](double bytes) { return point_to_point_seconds(infiniband, bytes); });
  const double block = ring.forward_exposed_seconds() + ring.backward_exposed_seconds();
  EXPECT_DOUBLE_EQ(costs.estimate(0, {32, 0, 0}).context_parallel_seconds, 32 * block);
  EXPECT_DOUBLE_EQ(costs.estimate(0, {30, 1, 1}).context_parallel_seconds,
                   32 * block + 2 * ring.forward_exposed_seconds());
  // The tensor-parallel and pipeline messages are the rank's 512 tokens.
  EXPECT_GT(costs.estimate(0, {32, 0, 0}).slot_seconds(),
            costs.estimate(0, {32, 0, 0}).forward_seconds +
                costs.estimate(0, {32, 0, 0}).backward_seconds);
}

TEST(ContextParallelCost, GroupsSpanNodesWhereTheirRanksDo) {
  // A group is tp x cp consecutive ranks (its cp ranks at stride tp).
  EXPECT_FALSE(context_parallel_group_crosses_nodes({1, 2, 4, false, 2}, 8));  // 8 in a node
  EXPECT_TRUE(context_parallel_group_crosses_nodes({1, 1, 8, false, 2}, 8));   // 16 ranks
  EXPECT_TRUE(context_parallel_group_crosses_nodes({1, 8, 1, false, 3}, 8));   // 3..5 at 6, 7, 8
  EXPECT_FALSE(context_parallel_group_crosses_nodes({4, 2, 2, false, 1}, 8));  // no ring
}

TEST(ContextParallelCost, GradientsReduceAndZeroShardsOverDataTimesContextRanks) {
  const JobConfig config = llama3_8b(32768);
  PlanSetting setting = setting_of({1, 2, 1, false, 4}, 4);
  std::vector<ChargedCollective> charged = StageCostModel(config, setting).charged_collectives();
  EXPECT_NE(std::find(charged.begin(), charged.end(),
                      ChargedCollective{CollectiveOperation::AllReduce, 8, false}),
            charged.end());
  // ZeRO-1 over the 8 ranks: a rank's optimizer state is 1 / 8 of the stage's.
  const MemoryBreakdown replicated = StageCostModel(config, setting).memory(0, {32, 0, 0});
  setting.zero_stage = 1;
  const MemoryBreakdown sharded = StageCostModel(config, setting).memory(0, {32, 0, 0});
  EXPECT_NEAR(static_cast<double>(sharded.optimizer_state),
              static_cast<double>(replicated.optimizer_state) / 8, 1.0);
}

TEST(ContextParallelCost, TheSearchTriesChunksOfAnAttentionTileOrMore) {
  ModelConfig model = llama3_8b(2048).model;
  EXPECT_TRUE(context_parallel_searchable(model, 1));
  EXPECT_TRUE(context_parallel_searchable(model, 8));    // 128-token chunks
  EXPECT_FALSE(context_parallel_searchable(model, 16));  // 64-token chunks
  model.seq_len = 2046;
  EXPECT_FALSE(context_parallel_searchable(model, 2));  // 4 does not divide 2046
}

}  // namespace
}  // namespace paraplan
