// attention_workspace_test.cc: cuDNN's SDPA workspace in plans
// (model_counts.h cudnn_attention_workspace_bytes): a bf16 plan on a GPU
// preset counts it once in each stage's transient memory, the same plan in
// fp32 or on the cpu preset does not.
#include "common/attention_workspace.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/cost/model_counts.h"
#include "planner/cost/plan_estimate.h"
#include "planner/planner_test_support.h"

namespace paraplan {
namespace {

// GPT-2 124M's widths, 4 layers, on one H100 (or the cpu preset).
JobConfig gpt2(const std::string& preset, const std::string& dtype) {
  return parse_job_config("", "gpt2.toml",
                          {{"model.num_layers", "4"},
                           {"model.d_model", "768"},
                           {"model.num_heads", "12"},
                           {"model.ffn_size", "3072"},
                           {"model.vocab_size", "50304"},
                           {"model.seq_len", "1024"},
                           {"model.dtype", dtype},
                           {"training.global_batch_size", "8"},
                           {"training.total_steps", "10"},
                           {"cluster.preset", preset},
                           {"cluster.num_nodes", "1"},
                           {"cluster.devices_per_node", "1"},
                           {"planner.pipeline_nstages", "1"}});
}

MemoryBreakdown memory(const JobConfig& job) {
  const PlanSetting setting{{1, 1, 1}, {1, 1}, 8, 1, 0, 1, {}};
  const std::vector<StageLayout> stages = {
      StageLayout{0, 4, true, true, std::vector<schema::RecomputeMode>(4)}};
  return evaluate_plan(job, setting, stages).stages.front().memory;
}

TEST(AttentionWorkspace, ABf16GpuPlanCountsCudnnsWorkspaceOnce) {
  const MemoryBreakdown bf16 = memory(gpt2("h100-sxm", "bfloat16"));
  const MemoryBreakdown cpu = memory(gpt2("cpu", "bfloat16"));
  // About 217 MiB: the 16-bit dP of B 8 x H 12 x 1024 x 1024 and the rest.
  const int64_t workspace = cudnn_sdpa_workspace_bytes(8, 1024, 12, 64, true);
  // Transient is the op-output peak (or the gradient scratch) plus the
  // workspace, once for the stage's 4 blocks, the GEMM lanes' two
  // workspaces and the kernels' scratch (any GPU preset: 16.2 MiB here,
  // model_counts_test.cc); nothing else moves.
  const uint64_t gpu_fixed = static_cast<uint64_t>(gemm_workspace_bytes("h100-sxm")) + 16'998'400;
  EXPECT_EQ(bf16.transient, cpu.transient + static_cast<uint64_t>(workspace) + gpu_fixed);
  EXPECT_EQ(bf16.activations, cpu.activations);
  EXPECT_EQ(bf16.weights, cpu.weights);
  // fp32 stays on paraplan's kernels: no attention workspace on the GPU
  // preset either, only the GEMMs'.
  EXPECT_EQ(memory(gpt2("h100-sxm", "float32")).transient,
            memory(gpt2("cpu", "float32")).transient + gpu_fixed);
}

}  // namespace
}  // namespace paraplan
