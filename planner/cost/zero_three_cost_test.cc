// zero_three_cost_test.cc: ZeRO-3's parameter memory worked out by hand from the
// runtime's units (runtime/parallel/sharded_parameters.h: the shard,
// resident units whole, two gathered slots, or one per streamed unit where
// the rank keeps them gathered) for a single stage with tied embeddings, the
// first, a middle and the last pipeline stage, and an untied stage whose
// embedding is the largest unit; the shard through the same zero_sharding
// rule as the ZeRO paper's Table 1; then the gathers in the slot and tail.
#include <gtest/gtest.h>

#include "planner/cost/cost_model.h"
#include "planner/cost/model_counts.h"
#include "planner/cost/stage_cost.h"
#include "planner/cost/zero_memory.h"
#include "planner/cost/zero_test_support.h"
#include "planner/job/job_config_test_support.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

using zero_test::pad;
using zero_test::small_model;

// The ZeRO-3 parameter bytes of a rank by hand (weights and the gathered
// working set together): `slots` gathered slots.
int64_t parameter_bytes(const MemoryBreakdown& memory) {
  return static_cast<int64_t>(memory.weights + memory.gathered);
}

int64_t weights_by_hand(const std::vector<int64_t>& resident, const std::vector<int64_t>& streamed,
                        int64_t slots, int64_t z, int64_t element_bytes) {
  return zero_test::unit_storage_bytes(resident, streamed, slots, z, element_bytes, false);
}

// ZeRO-2's gradient bytes by hand (two pool slots): ZeRO-3 keeps them.
int64_t gradients_by_hand(const std::vector<int64_t>& resident,
                          const std::vector<int64_t>& streamed, int64_t z, int64_t element_bytes) {
  return zero_test::unit_storage_bytes(resident, streamed, 2, z, element_bytes, true);
}

PlannerOptions zero_three_options(int zero_ngroups) {
  PlannerOptions options;
  options.zero_stage = 3;
  options.zero_ngroups = zero_ngroups;
  options.memory_granularity = 1;
  options.opt_resident_coef = 2;
  return options;
}

StageLayout layout(int first, int layers, bool embedding, bool head, bool keep) {
  return StageLayout{
      first, layers, embedding, head, std::vector<RecomputeMode>(layers, RecomputeMode::Selective),
      keep};
}

TEST(ZeroThreeCostTest, SingleStageTiedKeptAndFreed) {
  const ModelConfig model = small_model(true, 6);
  const PlannerOptions options = zero_three_options(2);
  const ParallelShape shape{1, 8, 1};  // z = 4
  const int64_t z = 4, e = 4;
  // The tied embedding is resident (the head writes it first); the blocks and
  // the final norm (the head's own unit) stream.
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model), norm = 2 * 64;
  const std::vector<int64_t> streamed = {block, block, block, block, block, block, norm};
  const MemoryBreakdown freed =
      stage_memory(model, options, layout(0, 6, true, true, false), 0, shape, 2, 4);
  const MemoryBreakdown kept =
      stage_memory(model, options, layout(0, 6, true, true, true), 0, shape, 2, 4);
  EXPECT_EQ(parameter_bytes(freed), weights_by_hand({embedding}, streamed, 2, z, e));
  EXPECT_EQ(parameter_bytes(kept), weights_by_hand({embedding}, streamed, 7, z, e));
  // The gathered working set: slots of the largest streamed unit, a block.
  EXPECT_EQ(static_cast<int64_t>(freed.gathered), e * 2 * pad(block, z));
  EXPECT_EQ(static_cast<int64_t>(kept.gathered), e * 7 * pad(block, z));
  // Gradients and optimizer state are ZeRO-2's, whichever way.
  for (const MemoryBreakdown& memory : {freed, kept}) {
    EXPECT_EQ(static_cast<int64_t>(memory.gradients),
              gradients_by_hand({embedding}, streamed, z, e));
    const int64_t shard = (pad(embedding, z) + 6 * pad(block, z) + pad(norm, z)) / z;
    EXPECT_EQ(static_cast<int64_t>(memory.optimizer_state), 2 * e * shard);
  }
  // No parameter buffer: far below ZeRO-2's weights (whole, plus the spill).
  PlannerOptions two = options;
  two.zero_stage = 2;
  const MemoryBreakdown zero_two =
      stage_memory(model, two, layout(0, 6, true, true, false), 0, shape, 2, 4);
  EXPECT_EQ(zero_two.gradients, freed.gradients);
  EXPECT_EQ(static_cast<int64_t>(zero_two.weights), e * (embedding + 6 * block + norm + 8 * z - 1));
  EXPECT_LT(freed.weights + freed.gathered, zero_two.weights);
  EXPECT_EQ(freed.weights, kept.weights);
  EXPECT_LT(freed.gathered, kept.gathered);
}

// Every unit here is a multiple of 8 z (no padding), so the shard is the
// paper's weights / Nd: the part zero_sharding(3, z) divides, as its Table 1.
TEST(ZeroThreeCostTest, ShardIsTheShardingRulesWeights) {
  const ModelConfig model = small_model(true, 6);
  const int64_t z = 8, e = 4;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model), norm = 2 * 64;
  for (int64_t unit : {embedding, block, norm}) ASSERT_EQ(unit % (8 * z), 0) << unit;
  const MemoryBreakdown freed = stage_memory(model, zero_three_options(2),
                                             layout(0, 6, true, true, false), 0, {1, 16, 1}, 2, 4);
  const double parameters = static_cast<double>(embedding + 6 * block + norm);
  const ModelStateMemory rule = model_state_memory(parameters, e, 2, 0, zero_sharding(3, z));
  EXPECT_DOUBLE_EQ(rule.weights, e * parameters / z);
  // Besides: the resident embedding whole, and gathered two slots of a block.
  EXPECT_DOUBLE_EQ(static_cast<double>(freed.weights) - e * embedding, rule.weights);
  EXPECT_DOUBLE_EQ(static_cast<double>(freed.gathered), e * 2 * block);
  EXPECT_DOUBLE_EQ(static_cast<double>(freed.optimizer_state), rule.optimizer_state);
  // And the paper's idealized figure for stage 3, 16 psi / Nd, from the same rule.
  EXPECT_DOUBLE_EQ(zero_paper_model_state_bytes(7.5e9, 3, 64), 16 * 7.5e9 / 64);
}

TEST(ZeroThreeCostTest, PipelineStagesFirstMiddleLast) {
  const ModelConfig model = small_model(true, 9);
  const PlannerOptions options = zero_three_options(2);
  const ParallelShape shape{3, 16, 1};  // z = 8
  const int64_t z = 8, e = 4;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model);
  const int64_t head = 2 * 64 + 1000 * 64;  // the final norm and the tied copy: resident
  const std::vector<int64_t> three = {block, block, block};
  const auto weights = [&](const StageLayout& stage, int rank) {
    return parameter_bytes(stage_memory(model, options, stage, rank, shape, 1, 6));
  };
  for (const bool keep : {false, true}) {
    const int64_t slots = keep ? 3 : 2;  // a slot per streamed block, or two
    EXPECT_EQ(weights(layout(0, 3, true, false, keep), 0),
              weights_by_hand({embedding}, three, slots, z, e))
        << keep;
    EXPECT_EQ(weights(layout(3, 3, false, false, keep), 1), weights_by_hand({}, three, slots, z, e))
        << keep;
    EXPECT_EQ(weights(layout(6, 3, false, true, keep), 2),
              weights_by_hand({head}, three, slots, z, e))
        << keep;
    // A last stage of no blocks streams nothing: no slots.
    EXPECT_EQ(weights(layout(9, 0, false, true, keep), 2), weights_by_hand({head}, {}, 0, z, e));
    // One streamed block: the storage's two slots all the same.
    EXPECT_EQ(weights(layout(3, 1, false, false, keep), 1), weights_by_hand({}, {block}, 2, z, e));
  }
}

TEST(ZeroThreeCostTest, UntiedEmbeddingIsTheLargestSlot) {
  ModelConfig model = small_model(false, 6);
  model.dtype = schema::DType::BFloat16;
  const PlannerOptions options = zero_three_options(1);
  const ParallelShape shape{2, 4, 1};  // z = 4
  const int64_t z = 4, e = 2;
  const int64_t embedding = 1000 * 64 + 32 * 64, block = block_parameters(model);
  const int64_t head = 2 * 64 + 1000 * 64;
  EXPECT_EQ(parameter_bytes(
                stage_memory(model, options, layout(0, 3, true, false, false), 0, shape, 1, 8)),
            weights_by_hand({}, {embedding, block, block, block}, 2, z, e));
  EXPECT_EQ(parameter_bytes(
                stage_memory(model, options, layout(3, 3, false, true, true), 1, shape, 1, 8)),
            weights_by_hand({}, {block, block, block, head}, 4, z, e));
}

// Without overlap every gather is exposed: a rank freeing its parameters
// gathers each block in every forward and backward (the first forward's in
// the tail), a rank keeping them only in the tail; the tail gathers no
// updated weights after the step (no resident unit on a middle stage).
TEST(ZeroThreeCostTest, GathersInTheSlotAndTail) {
  using job_config_test::gpt3_175b;
  const JobConfig serial = gpt3_175b({{"cluster.overlap_communication", "false"}});
  const PlanSetting two{{8, 16, 8}, {128, 8}, 1, 96, 2, 4, {}};
  PlanSetting three = two;
  three.zero_stage = 3;
  const StageCostModel zero_two(serial, two), zero_three(serial, three);
  const Link ib{10e-6, 25e9};  // a ZeRO group of 4 with tp 8 spans nodes
  const int64_t block = block_parameters(serial.model, 8);
  const double gather = ring_all_gather_seconds(ib, 4, 2.0 * pad(block, 4));
  const double whole = ring_all_gather_seconds(ib, 4, 2.0 * 12 * block);
  EXPECT_NEAR(zero_three.tail_seconds(3, 12) - zero_two.tail_seconds(3, 12), 12 * gather - whole,
              1e-9);
  RecomputeCounts freed{12, 0, 0, false}, kept{12, 0, 0, true};
  EXPECT_NEAR(zero_three.slot_seconds(3, freed) - zero_two.slot_seconds(3, freed),
              12 * gather + 12 * gather * 95 / 96, 1e-9);
  EXPECT_DOUBLE_EQ(zero_three.slot_seconds(3, kept), zero_two.slot_seconds(3, kept));
  EXPECT_TRUE(zero_three.gathers_parameters(3, 12));
  EXPECT_FALSE(zero_two.gathers_parameters(3, 12));
  // With overlap, each gather hides behind the block read before it: less,
  // and a pass's figure never below its ends' as blocks are added.
  const JobConfig overlapped = gpt3_175b();
  const StageCostModel hidden(overlapped, three);
  EXPECT_LT(hidden.slot_seconds(3, freed) - hidden.slot_seconds(3, kept),
            zero_three.slot_seconds(3, freed) - zero_three.slot_seconds(3, kept));
  for (int rank : {0, 7})
    for (int layers = 1; layers <= 12; ++layers) {
      EXPECT_GE(hidden.tail_seconds(rank, layers), hidden.tail_seconds(rank, layers - 1));
      const RecomputeCounts more{layers, 0, 0, false}, fewer{layers - 1, 0, 0, false};
      EXPECT_GT(hidden.slot_seconds(rank, more), hidden.slot_seconds(rank, fewer));
    }
}

}  // namespace
}  // namespace paraplan
