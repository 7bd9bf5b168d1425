// zero_memory_test.cc: the ZeRO paper's Table 1 from the model-state rule
// the planner's memory model uses, and ZeRO-2's gradient memory worked out
// by hand from the runtime's units (resident units, two pool slots with
// their receive chunks, the shard) for a single stage, the first, a middle
// and the last pipeline stage with tied embeddings, and a split-backward
// schedule; then ZeRO-2's reduce-scatters in the step's tail.
#include "planner/cost/zero_memory.h"

#include <gtest/gtest.h>

#include "planner/cost/cost_model.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/stage_cost.h"
#include "planner/cost/zero_test_support.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

// Rajbhandari et al. 2020, Table 1: Psi = 7.5B, Nd = 64, K = 12.
TEST(ZeroMemoryTest, PaperTableOneFromTheShardingRule) {
  const double psi = 7.5e9, gigabyte = 1e9;
  EXPECT_DOUBLE_EQ(zero_paper_model_state_bytes(psi, 0, 64), 120e9);        // (2 + 2 + K) psi
  EXPECT_DOUBLE_EQ(zero_paper_model_state_bytes(psi, 1, 64), 31.40625e9);   // 4 psi + K psi / Nd
  EXPECT_DOUBLE_EQ(zero_paper_model_state_bytes(psi, 2, 64), 16.640625e9);  // 2 psi + 14 psi / Nd
  EXPECT_DOUBLE_EQ(zero_paper_model_state_bytes(psi, 3, 64), 1.875e9);      // 16 psi / Nd
  const double table[] = {120, 31.4, 16.6, 1.9};                            // as printed, GB
  for (int stage = 0; stage <= kHighestZeroStage; ++stage)
    EXPECT_NEAR(zero_paper_model_state_bytes(psi, stage, 64) / gigabyte, table[stage], 0.05)
        << stage;
  // The rule itself: each stage divides one more part.
  EXPECT_EQ(zero_sharding(0, 64), (ZeroSharding{1, 1, 1}));
  EXPECT_EQ(zero_sharding(1, 64), (ZeroSharding{1, 1, 64}));
  EXPECT_EQ(zero_sharding(2, 64), (ZeroSharding{1, 64, 64}));
  EXPECT_EQ(zero_sharding(3, 64), (ZeroSharding{64, 64, 64}));
}

using zero_test::pad;
using zero_test::small_model;

// The ZeRO-2 gradient bytes of a stage by hand: `slots` pool slots with
// their receive chunks.
int64_t by_hand(const std::vector<int64_t>& resident, const std::vector<int64_t>& streamed,
                int64_t slots, int64_t z, int64_t element_bytes) {
  return zero_test::unit_storage_bytes(resident, streamed, slots, z, element_bytes, true);
}

struct ZeroTwoCase {
  PlannerOptions options;
  ParallelShape shape;
};

ZeroTwoCase zero_two_case(int pipeline_stages, int data_parallel, int zero_ngroups) {
  ZeroTwoCase c;
  c.options.zero_stage = 2;
  c.options.zero_ngroups = zero_ngroups;
  c.options.memory_granularity = 1;
  c.options.opt_resident_coef = 2;
  c.shape = {pipeline_stages, data_parallel, 1};
  return c;
}

TEST(ZeroMemoryTest, SingleStageTiedEmbeddingIsResident) {
  const ModelConfig model = small_model(true);
  const ZeroTwoCase c = zero_two_case(1, 8, 2);  // z = 4
  const int64_t z = 4, e = 4, blocks = 6;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model);
  const int64_t head = 2 * 64;  // the final norm: the head is the embedding, written first
  const StageLayout stage{0, 6, true, true, std::vector<RecomputeMode>(6, RecomputeMode::None)};
  const MemoryBreakdown memory = stage_memory(model, c.options, stage, 0, c.shape, 2, 4);
  std::vector<int64_t> streamed(blocks, block);
  streamed.push_back(head);
  EXPECT_EQ(static_cast<int64_t>(memory.gradients), by_hand({embedding}, streamed, 2, z, e));
  // The shard's optimizer state (2 x its bytes) and the parameters' spill.
  const int64_t parameters = embedding + blocks * block + head;
  const int64_t shard = (pad(embedding, z) + blocks * pad(block, z) + pad(head, z)) / z;
  EXPECT_EQ(static_cast<int64_t>(memory.optimizer_state), 2 * e * shard);
  EXPECT_EQ(static_cast<int64_t>(memory.weights), e * (parameters + 8 * z - 1));
  // Below ZeRO-1's whole gradients and shard.
  PlannerOptions one = c.options;
  one.zero_stage = 1;
  const MemoryBreakdown zero_one = stage_memory(model, one, stage, 0, c.shape, 2, 4);
  EXPECT_EQ(static_cast<int64_t>(zero_one.gradients), e * parameters + e * parameters / z);
  EXPECT_LT(memory.gradients, zero_one.gradients);
}

// Units of several layers (Zero.layers_per_unit): 6 blocks in units of 4
// are a unit of 4 blocks and one of 2, each padded once; the pool's slots
// and ZeRO-3's gathered slots hold the largest; the shard every unit's chunk.
TEST(ZeroMemoryTest, UnitsOfSeveralLayersArePaddedOnceAndSlotTheLargest) {
  const ModelConfig model = small_model(true);
  ZeroTwoCase c = zero_two_case(1, 8, 2);  // z = 4
  c.options.zero_layers_per_unit = 4;
  const int64_t z = 4, e = 4;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model), head = 2 * 64;
  const StageLayout stage{0, 6, true, true, std::vector<RecomputeMode>(6, RecomputeMode::None)};
  const MemoryBreakdown memory = stage_memory(model, c.options, stage, 0, c.shape, 2, 4);
  EXPECT_EQ(static_cast<int64_t>(memory.gradients),
            by_hand({embedding}, {4 * block, 2 * block, head}, 2, z, e));
  const int64_t shard =
      (pad(embedding, z) + pad(4 * block, z) + pad(2 * block, z) + pad(head, z)) / z;
  EXPECT_EQ(static_cast<int64_t>(memory.optimizer_state), 2 * e * shard);
  // ZeRO-3: the shard and the resident embedding; two slots of the largest
  // unit freed, one per streamed unit (3) kept.
  c.options.zero_stage = 3;
  const MemoryBreakdown freed = stage_memory(model, c.options, stage, 0, c.shape, 2, 4);
  EXPECT_EQ(static_cast<int64_t>(freed.weights), e * (pad(embedding, z) + shard));
  EXPECT_EQ(static_cast<int64_t>(freed.gathered), e * 2 * pad(4 * block, z));
  StageLayout kept = stage;
  kept.keep_parameters_gathered = true;
  EXPECT_EQ(static_cast<int64_t>(stage_memory(model, c.options, kept, 0, c.shape, 2, 4).gathered),
            e * 3 * pad(4 * block, z));
  // A unit larger than the stage holds it all: one unit of 6 blocks.
  c.options.zero_layers_per_unit = 8;
  EXPECT_EQ(static_cast<int64_t>(stage_memory(model, c.options, stage, 0, c.shape, 2, 4).gathered),
            e * 2 * pad(6 * block, z));
}

TEST(ZeroMemoryTest, PipelineStagesWithTiedEmbeddings) {
  const ModelConfig model = small_model(true);
  const ZeroTwoCase c = zero_two_case(3, 16, 2);  // z = 8
  const int64_t z = 8, e = 4;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model);
  const int64_t head = 2 * 64 + 1000 * 64;  // the final norm and the tied copy
  const auto layout = [](int first, int layers, bool embedding_here, bool head_here) {
    return StageLayout{first, layers, embedding_here, head_here,
                       std::vector<RecomputeMode>(layers, RecomputeMode::Selective)};
  };
  // First: the tied embedding resident, two blocks streamed.
  EXPECT_EQ(
      static_cast<int64_t>(
          stage_memory(model, c.options, layout(0, 2, true, false), 0, c.shape, 1, 6).gradients),
      by_hand({embedding}, {block, block}, 2, z, e));
  // Middle: only blocks.
  EXPECT_EQ(
      static_cast<int64_t>(
          stage_memory(model, c.options, layout(2, 2, false, false), 1, c.shape, 1, 6).gradients),
      by_hand({}, {block, block}, 2, z, e));
  // Last: the head with the tied copy resident.
  EXPECT_EQ(
      static_cast<int64_t>(
          stage_memory(model, c.options, layout(4, 2, false, true), 2, c.shape, 1, 6).gradients),
      by_hand({head}, {block, block}, 2, z, e));
  // A last stage without blocks streams nothing: no pool.
  EXPECT_EQ(
      static_cast<int64_t>(
          stage_memory(model, c.options, layout(6, 0, false, true), 2, c.shape, 1, 6).gradients),
      by_hand({head}, {}, 0, z, e));
}

TEST(ZeroMemoryTest, SplitBackwardKeepsASlotPerUnit) {
  // Untied: the embedding streams too, and is the largest unit.
  ModelConfig model = small_model(false);
  model.dtype = schema::DType::BFloat16;
  ZeroTwoCase c = zero_two_case(2, 4, 1);  // z = 4
  c.options.pipeline_scheduler = schema::ScheduleKind::ZeroBubbleH1;
  const int64_t z = 4, e = 2;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model);
  const int64_t head = 2 * 64 + 1000 * 64;
  const StageLayout first{0, 3, true, false, std::vector<RecomputeMode>(3, RecomputeMode::None)};
  const StageLayout last{3, 3, false, true, std::vector<RecomputeMode>(3, RecomputeMode::None)};
  // Every unit lives from its B to its W: a slot each, sized to the largest.
  EXPECT_EQ(static_cast<int64_t>(stage_memory(model, c.options, first, 0, c.shape, 1, 8).gradients),
            by_hand({}, {embedding, block, block, block}, 4, z, e));
  EXPECT_EQ(static_cast<int64_t>(stage_memory(model, c.options, last, 1, c.shape, 1, 8).gradients),
            by_hand({}, {block, block, block, head}, 4, z, e));
  // 1F1B: two slots.
  c.options.pipeline_scheduler = schema::ScheduleKind::OneForwardOneBackward;
  EXPECT_EQ(static_cast<int64_t>(stage_memory(model, c.options, first, 0, c.shape, 1, 8).gradients),
            by_hand({}, {embedding, block, block, block}, 2, z, e));
}

// The tail: ZeRO-1's reduction plus, per micro-batch but the last, the
// streamed units' reduce-scatters (one per unit, padded), and the fp32
// shard's all-reduce across groups, where nothing overlaps; with overlap
// never less than ZeRO-1's.
TEST(ZeroMemoryTest, ZeroTwoReduceScattersEveryMicroBatch) {
  using job_config_test::gpt3_175b;
  const JobConfig serial = gpt3_175b({{"cluster.overlap_communication", "false"}});
  const PlanSetting one{{8, 16, 8}, {128, 8}, 1, 96, 1, 4, {}};
  PlanSetting two = one;
  two.zero_stage = 2;
  const double zero_one = StageCostModel(serial, one).tail_seconds(3, 12);
  const double zero_two = StageCostModel(serial, two).tail_seconds(3, 12);
  // A ZeRO group of 4 data-parallel ranks with tp 8 spans nodes: the IB link.
  const Link ib{10e-6, 25e9};
  const int64_t block = block_parameters(serial.model, 8);
  const double unit = ring_reduce_scatter_seconds(ib, 4, 2.0 * pad(block, 4));
  const double whole = ring_reduce_scatter_seconds(ib, 4, 2.0 * 12 * block);
  // And the shard's all-reduce across the 4 groups moves fp32 (ZeRO-1: bf16).
  const double across = ring_all_reduce_seconds(ib, 4, 4.0 * 12 * block / 4) -
                        ring_all_reduce_seconds(ib, 4, 2.0 * 12 * block / 4);
  EXPECT_NEAR(zero_two - zero_one, 96 * 12 * unit - whole + across, 1e-9);
  const JobConfig overlapped = gpt3_175b();
  for (int layers : {0, 1, 6, 12})
    for (int rank : {0, 3, 7}) {
      if (layers == 0 && rank == 3) continue;  // a middle stage holds a block
      EXPECT_GE(StageCostModel(overlapped, two).tail_seconds(rank, layers),
                StageCostModel(overlapped, one).tail_seconds(rank, layers))
          << rank << " " << layers;
    }
}

}  // namespace
}  // namespace paraplan
