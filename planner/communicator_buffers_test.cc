// communicator_buffers_test.cc: NCCL's buffers in plans: the category in a
// GPU plan's stages (and its total) and not in a CPU plan's, and a search
// that no longer picks a plan that fitted only without them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/cost/plan_estimate.h"
#include "planner/planner_test_support.h"
#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

// Llama 3 8B on one node of 8 H100s (bf16, fp32 Adam state).
JobConfig llama3_8b(double memory_constraint_gb, const std::string& preset = "h100-sxm") {
  return parse_job_config("", "llama3_8b.toml",
                          {{"model.architecture", "llama"},
                           {"model.num_layers", "32"},
                           {"model.d_model", "4096"},
                           {"model.num_heads", "32"},
                           {"model.num_kv_heads", "8"},
                           {"model.ffn_size", "14336"},
                           {"model.vocab_size", "32000"},
                           {"model.seq_len", "4096"},
                           {"model.dtype", "bfloat16"},
                           {"training.global_batch_size", "64"},
                           {"training.total_steps", "10"},
                           {"cluster.preset", preset},
                           {"cluster.num_nodes", "1"},
                           {"planner.tensor_parallel_degree", "8"},
                           {"planner.pipeline_nstages", "1"},
                           {"planner.memory_constraint", std::to_string(memory_constraint_gb)},
                           {"planner.opt_resident_coef", "6"}});
}

TEST(CommunicatorMemory, AGpuPlanCountsTheBuffersAndACpuPlanDoesNot) {
  const JobConfig gpu = llama3_8b(77.6);
  const PlanSetting setting{{1, 1, 8}, {1, 8}, 1, 64, 0, 1, {}};
  const std::vector<StageLayout> stages = {StageLayout{
      0, 32, true, true, std::vector<schema::RecomputeMode>(32, schema::RecomputeMode::Full)}};
  const MemoryBreakdown memory = evaluate_plan(gpu, setting, stages).stages.front().memory;
  // The tensor group's ring and NVLS, and the world's ring (the gradient norm).
  const uint64_t buffers = 576716800u + 308281344u;
  EXPECT_EQ(memory.communicator_buffers, buffers);
  EXPECT_EQ(memory.total(), memory.weights + memory.gradients + memory.optimizer_state +
                                memory.optimizer_transient + memory.gathered + memory.activations +
                                memory.transient + buffers);
  const JobConfig cpu = test_jobs::eight_device_job();
  const PlanSetting cpu_setting{{2, 2, 2}, {1, 8}, 1, 8, 0, 1, {}};
  const PlanEstimate cpu_plan =
      evaluate_plan(cpu, cpu_setting,
                    {StageLayout{0, 4, true, false, std::vector<schema::RecomputeMode>(4)},
                     StageLayout{4, 4, false, true, std::vector<schema::RecomputeMode>(4)}});
  for (const StageEstimate& stage : cpu_plan.stages)
    EXPECT_EQ(stage.memory.communicator_buffers, 0u);
}

TEST(CommunicatorMemory, APlanThatFitOnlyWithoutTheBuffersIsNoLongerChosen) {
  const SearchResult before = search_plans(llama3_8b(77.6));
  ASSERT_FALSE(before.ranked.empty());
  const PlanCandidate& was = before.ranked.front();
  const MemoryBreakdown peak = was.estimate.stages.at(was.estimate.peak_memory_stage).memory;
  ASSERT_EQ(peak.communicator_buffers, 576716800u + 308281344u);
  // A limit the old model's figure (without the buffers) fits by half the
  // buffers: the same plan now needs more.
  const double old_peak = static_cast<double>(peak.total() - peak.communicator_buffers);
  const double limit = old_peak + 0.5 * static_cast<double>(peak.communicator_buffers);
  const SearchResult after = search_plans(llama3_8b(limit / (1024.0 * 1024.0 * 1024.0)));
  ASSERT_FALSE(after.ranked.empty());
  for (const PlanCandidate& candidate : after.ranked)
    EXPECT_LE(static_cast<double>(candidate.estimate.peak_memory), limit);
  const PlanCandidate& now = after.ranked.front();
  const bool same = now.setting.micro_batch_size == was.setting.micro_batch_size &&
                    now.stages.front().recompute == was.stages.front().recompute;
  EXPECT_FALSE(same) << "the plan that fitted only without NCCL's buffers was chosen again";
}

}  // namespace
}  // namespace paraplan
