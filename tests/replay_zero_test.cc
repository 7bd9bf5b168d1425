// replay_zero_test.cc: ZeRO-2 and 3's memory replayed under mpirun, part by
// part (weights, gradients, optimizer state, gathered working set), equal to
// the planner's prediction and to the counts by hand of sharded_gradients.h
// and sharded_parameters.h, for units of one layer and of several.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>

#include "kernels/ops.h"
#include "replay_test_support.h"

namespace {

using namespace paraplan::testing;
using nlohmann::json;

// ZeRO-1 against ZeRO-2 on 8 blocks over 2 ranks, bf16: weights, gradients
// and optimizer state measured equal the planner's prediction for each, and
// ZeRO-2's gradients are what sharded_gradients.h says, counted by hand.
TEST_F(Replay, ZeroTwoModelStateIsWhatThePlannerPredicts) {
  std::map<int, double> gradients;
  for (int zero : {1, 2}) {
    const std::string name = "bf16-zero" + std::to_string(zero) + "-8-blocks";
    const std::string plan_file = plan(name, 2,
                                       "data_parallel_degree = 2\nmicro_batch_size = 4\n"
                                       "zero_layers_per_unit = 1\nzero_stage = " +
                                           std::to_string(zero) + "\nopt_resident_coef = 6\n",
                                       "--model.dtype bfloat16 --model.num_layers 8");
    const json memory = model_state_as_predicted(plan_file, name);
    ASSERT_FALSE(memory.is_null()) << name;
    gradients[zero] = memory["gradients"]["measured"].get<double>();
  }
  // 110400 parameters: wte 256x32 + wpe 16x32 = 8704, 8 blocks of 12704, the
  // final norm's 64 (every unit a multiple of 16 = 8 x 2 ranks: no padding).
  // ZeRO-1: the whole bf16 gradients and the shard, 2 x 110400 x 1.5.
  EXPECT_EQ(gradients[1], 2.0 * 110400 * 3 / 2);
  // ZeRO-2: the fp32 shard (110400 / 2), the embedding unit whole (the tied
  // head writes it first) with its receive half, two slots of a block with
  // theirs.
  EXPECT_EQ(gradients[2], 4.0 * (110400 / 2) + 2.0 * (8704 + 8704 / 2 + 2 * (12704 + 12704 / 2)));
  std::printf("[ figures  ] gradients per rank: ZeRO-1 %.0f bytes, ZeRO-2 %.0f bytes\n",
              gradients[1], gradients[2]);
}

// ZeRO-3 on the same 8 blocks over 2 ranks, bf16: weights, gradients and
// optimizer state measured equal the prediction, with the parameters kept
// gathered (the planner's choice where it fits) and freed after each read
// (a memory limit that keeping them exceeds even with every block
// recomputed), and the weights are what sharded_parameters.h says, counted
// by hand.
TEST_F(Replay, ZeroThreeModelStateIsWhatThePlannerPredicts) {
  const std::string lines =
      "data_parallel_degree = 2\nmicro_batch_size = 4\nzero_stage = 3\nopt_resident_coef = 6\n"
      "zero_layers_per_unit = 1\n";
  const std::string model = "--model.dtype bfloat16 --model.num_layers 8";
  // Weights: the shard (110400 / 2) and the embedding whole (resident: the
  // tied head writes it first). Gathered: slots of a block (the largest
  // streamed unit), one per streamed unit kept (8 blocks and the final
  // norm), else two.
  const double weights = 2.0 * (110400 / 2 + 8704);
  const double kept_gathered = 2.0 * 9 * 12704, freed_gathered = 2.0 * 2 * 12704;
  // The least a rank keeping them needs: every block recomputed (planned only).
  const json least =
      inspect_json(plan("bf16-zero3-least", 2, lines + "recompute_modules = \"ROOT\"\n",
                        model + " --planner.consider_mem false"));
  ASSERT_TRUE(least["schedule"]["stages"][0]["keep_parameters_gathered"].get<bool>());
  char limit[96];
  std::snprintf(limit, sizeof limit, " --planner.memory_constraint %.9f",
                (least["predictions"]["stages"][0]["memory"]["total"].get<double>() -
                 (kept_gathered - freed_gathered) / 2) /
                    (1 << 30));
  for (const bool kept : {true, false}) {
    const std::string name = kept ? "bf16-zero3-kept" : "bf16-zero3-freed";
    const std::string plan_file = plan(name, 2, lines, model + (kept ? "" : limit));
    const json plan_json = inspect_json(plan_file);
    EXPECT_EQ(plan_json["zero"]["stage"], 3);
    EXPECT_EQ(plan_json["schedule"]["stages"][0]["keep_parameters_gathered"], kept) << name;
    const json memory = model_state_as_predicted(plan_file, name);
    ASSERT_FALSE(memory.is_null()) << name;
    EXPECT_EQ(memory["weights"]["measured"].get<double>(), weights) << name;
    EXPECT_EQ(memory["gathered"]["measured"].get<double>(), kept ? kept_gathered : freed_gathered)
        << name;
    EXPECT_EQ(plan_json["predictions"]["stages"][0]["memory"]["gathered"].get<double>(),
              kept ? kept_gathered : freed_gathered)
        << name;
    // ZeRO-2's gradients (the ZeRO-2 test's 323,136 bytes) and optimizer state.
    EXPECT_EQ(memory["gradients"]["measured"].get<double>(),
              4.0 * (110400 / 2) + 2.0 * (8704 + 8704 / 2 + 2 * (12704 + 12704 / 2)));
    EXPECT_EQ(memory["optimizer_state"]["measured"].get<double>(), 12.0 * 110400 / 2);
  }
  std::printf("[ figures  ] ZeRO-3 per rank: weights %.0f bytes, gathered kept %.0f, freed %.0f\n",
              weights, kept_gathered, freed_gathered);
}

// Units of several layers ([planner] zero_layers_per_unit, plan.fbs
// Zero.layers_per_unit) on the same 8 blocks over 2 ranks, bf16: ZeRO-2 in
// units of 4 blocks and ZeRO-3 in units of 3 (3 + 3 + 2: the last holds what
// is left), each part measured equal to the prediction and to the count by
// hand: the pool's slots and ZeRO-3's gathered slots are of the largest unit.
TEST_F(Replay, ZeroUnitsOfSeveralLayersAreWhatThePlannerPredicts) {
  const std::string model = "--model.dtype bfloat16 --model.num_layers 8";
  const double block = 12704, embedding = 8704, parameters = 110400;
  for (const int zero : {2, 3}) {
    const int layers_per_unit = zero == 2 ? 4 : 3;
    const std::string name =
        "bf16-zero" + std::to_string(zero) + "-units-of-" + std::to_string(layers_per_unit);
    const std::string plan_file =
        plan(name, 2,
             "data_parallel_degree = 2\nmicro_batch_size = 4\nopt_resident_coef = 6\n"
             "zero_stage = " +
                 std::to_string(zero) +
                 "\nzero_layers_per_unit = " + std::to_string(layers_per_unit) + "\n",
             model);
    const json plan_json = inspect_json(plan_file);
    EXPECT_EQ(plan_json["zero"]["layers_per_unit"], layers_per_unit) << name;
    const json memory = model_state_as_predicted(plan_file, name);
    ASSERT_FALSE(memory.is_null()) << name;
    // The largest unit (every unit a multiple of 16: no padding). Gradients:
    // the fp32 shard, the resident embedding with its receive half, and two
    // slots of the largest unit with theirs.
    const double unit = layers_per_unit * block;
    EXPECT_EQ(memory["gradients"]["measured"].get<double>(),
              4.0 * (parameters / 2) + 2.0 * (embedding + embedding / 2 + 2 * (unit + unit / 2)))
        << name;
    if (zero == 3) {
      // Gathered: one slot per streamed unit kept (3 of blocks and the final
      // norm's), else two; the weights the shard and the embedding whole.
      const bool kept = plan_json["schedule"]["stages"][0]["keep_parameters_gathered"].get<bool>();
      EXPECT_EQ(memory["gathered"]["measured"].get<double>(), 2.0 * (kept ? 4 : 2) * unit) << name;
      EXPECT_EQ(memory["weights"]["measured"].get<double>(), 2.0 * (parameters / 2 + embedding));
    }
    std::printf("[ figures  ] ZeRO-%d in units of %d blocks: gradients %.0f bytes, gathered %.0f\n",
                zero, layers_per_unit, memory["gradients"]["measured"].get<double>(),
                memory["gathered"]["measured"].get<double>());
  }
}

// A rank of two model chunks (ZB-V, pp 2 x dp 2) with 6 blocks in units of
// 2: each chunk makes its own units, 2 + 2, so its split backward holds 4
// streamed units' slots, not the 3 that ceil(6 / 2) counts (which had
// predicted the last rank's gradients 76,224 bytes below the measured
// 457,344). Rank 1 (no resident unit) measures what the plan says; rank 0
// (the embedding's and the head's) no more than it says.
TEST_F(Replay, ZeroTwoUnitsAreCountedPerModelChunk) {
  const std::string name = "bf16-zero2-zbv-units-of-2";
  const std::string plan_file =
      plan(name, 4,
           "pipeline_nstages = 2\ndata_parallel_degree = 2\npipeline_scheduler = \"zb-v\"\n"
           "micro_batch_size = 2\nzero_stage = 2\nzero_layers_per_unit = 2\n"
           "opt_resident_coef = 6\n",
           "--model.dtype bfloat16 --model.num_layers 12");
  const json report = replay_report(plan_file, name);
  ASSERT_EQ(report.value("stages", json::array()).size(), 2u) << report;
  EXPECT_TRUE(report["memory_within_prediction"].get<bool>()) << report;
  for (int rank = 0; rank < 2; ++rank) {
    const json& gradients = report["stages"][rank]["memory_bytes"]["gradients"];
    EXPECT_LE(gradients["measured"].get<double>(), gradients["predicted"].get<double>()) << rank;
  }
  const json& last = report["stages"][1]["memory_bytes"]["gradients"];
  EXPECT_EQ(last["measured"], last["predicted"]);
  std::printf("[ figures  ] ZB-V, ZeRO-2 units of 2: last rank's gradients %.0f bytes\n",
              last["measured"].get<double>());
}

// On a GPU (the device check's tests phase): ZeRO-1, 2 and 3 plans of the
// same bf16 model replayed by 2 ranks sharing the GPU through the staged
// transport. Weights, gradients, optimizer state and the gathered working
// set are what the plan says, as on the CPU; the peak, the backend's own
// memory (cuBLAS workspace) included, never above the prediction: planned
// for an H100, whose preset counts the GEMM workspaces and kernel scratch
// (the cpu preset's plan has none of them).
TEST_F(Replay, CudaZeroStagesMemoryIsWhatThePlannerPredicts) {
  if (paraplan::kernels::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible: ZeRO's memory on a GPU needs one";
  for (int zero : {1, 2, 3}) {
    const std::string name = "cuda-bf16-zero" + std::to_string(zero);
    const std::string plan_file = plan(
        name, 2,
        "data_parallel_degree = 2\nmicro_batch_size = 4\nopt_resident_coef = 6\nzero_stage = " +
            std::to_string(zero) + "\n",
        "--model.dtype bfloat16 --model.num_layers 8 --cluster.preset h100-sxm");
    const json memory =
        model_state_as_predicted(plan_file, name, "--backend cuda --transport auto");
    ASSERT_FALSE(memory.is_null()) << name;
    std::printf("[ figures  ] %s on CUDA: peak %.0f bytes measured, %.0f predicted\n", name.c_str(),
                memory["total"]["measured"].get<double>(),
                memory["total"]["predicted"].get<double>());
  }
}

}  // namespace
