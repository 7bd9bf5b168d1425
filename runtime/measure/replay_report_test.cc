// replay_report_test.cc: the replay's per-stage figures from known
// measurements; synthetic samples; the memory tracker's device capacity.
#include "runtime/measure/replay_report.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/data/sample_source.h"
#include "runtime/model/memory_tracker.h"
#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

TEST(ReplayReport, StagePartsAreMeansOverItsRanksAndAddUpToTheStep) {
  // One stage over two data-parallel ranks, two micro-batches, two steps.
  test_plans::PlanSpec spec = test_plans::make_plan_spec(1, 2, 1, 2, 2);
  spec.step_seconds = 1.0;
  spec.stage_predictions[0].forward_seconds = 0.1;
  spec.stage_predictions[0].backward_seconds = 0.2;
  const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
  const schema::Plan& plan = *schema::GetPlan(bytes.data());

  RankMeasurement first;
  first.forward_seconds = 0.44, first.forward_count = 4;  // 2 steps x 2 micro-batches
  first.backward_seconds = 0.8, first.backward_count = 4;
  first.tensor = {.transfer = 0.04, .wait = 0.02};
  first.reduction = {.transfer = 0.04, .wait = 0.2};
  first.world = {.transfer = 0.002, .wait = 0.1};
  first.optimizer_seconds = 0.1;
  first.load_seconds = 0.01;
  first.core_wait_seconds = 0.06;  // compute spans waiting for a core
  first.step_seconds = 2.0;        // 1.0 per step
  first.memory_peak_total = 1000;
  RankMeasurement second = first;
  second.reduction.wait = 0.0, second.step_seconds = 1.8;  // the slower replica: nobody to wait for
  const ReplayRun run{.plan_path = "p",
                      .backend = "cpu",
                      .steps = 2,
                      .warmup = 1,
                      .job_step_seconds = 1.1,
                      .each_step_seconds = {1.2, 1.0},
                      .each_step_loss = {10.8, 10.75, std::nan("")}};
  const nlohmann::json report = replay_report(plan, run, {first, second});
  const nlohmann::json& stage = report["stages"][0];
  EXPECT_DOUBLE_EQ(stage["forward"]["measured"].get<double>(), 0.11);  // per micro-batch
  EXPECT_NEAR(stage["forward"]["error"].get<double>(), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(stage["backward"]["measured"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(stage["tensor_parallel"]["measured"].get<double>(), 0.01);
  const nlohmann::json& parts = stage["per_step"];
  EXPECT_DOUBLE_EQ(parts["forward"]["measured"].get<double>(), 0.22);
  EXPECT_DOUBLE_EQ(parts["forward"]["predicted"].get<double>(), 0.2);
  // The data-parallel transfers and the norm's all-reduce: (0.04 + 0.002) / 2.
  EXPECT_DOUBLE_EQ(parts["gradient_reduction"]["measured"].get<double>(), 0.021);
  EXPECT_DOUBLE_EQ(parts["optimizer"]["measured"].get<double>(), 0.05);
  // Waits: tensor 0.01, reduction (0.1 + 0) / 2, world 0.05, a core 0.03,
  // and the end of the step: 1.1 - 1.0 on the first rank, 1.1 - 0.9 on the
  // second.
  EXPECT_NEAR(parts["wait"]["measured"].get<double>(), 0.01 + 0.05 + 0.05 + 0.03 + 0.15, 1e-12);
  EXPECT_NEAR(stage["waits"]["core"].get<double>(), 0.03, 1e-12);
  EXPECT_NEAR(stage["waits"]["end_of_step"].get<double>(), 0.15, 1e-12);
  // The parts add up to the job's step.
  double sum = 0;
  for (const auto& [name, part] : parts.items()) sum += part["measured"].get<double>();
  EXPECT_NEAR(sum, 1.1, 1e-12);
  // The plan has no bubble term: the step less the other predicted parts.
  EXPECT_NEAR(parts["wait"]["predicted"].get<double>(), 1.0 - 0.2 - 0.4, 1e-12);
  EXPECT_NEAR(report["step_seconds"]["error"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(report["step_seconds_measured"].get<double>(), 1.1);
  EXPECT_EQ(report["each_step_seconds_measured"], nlohmann::json({1.2, 1.0}));
  // Warm-up first; a NaN (a broken model) is null, which JSON can hold.
  EXPECT_EQ(report["each_step_loss"], nlohmann::json({10.8, 10.75, nullptr}));
  EXPECT_NE(replay_table(report).find("loss per step (warm-up first): 10.8000 10.7500 nan"),
            std::string::npos);
}

TEST(ReplayReport, MeasurementsSurviveTheirArrayForm) {
  RankMeasurement m;
  m.forward_seconds = 1, m.backward_count = 2, m.step_seconds = 3, m.memory_peak[4] = 5;
  m.memory_peak_total = 6, m.pipeline.wait = 7, m.world.transfer = 8;
  double array[RankMeasurement::kFields];
  m.to_array(array);
  const RankMeasurement back = RankMeasurement::from_array(array);
  EXPECT_EQ(back.forward_seconds, 1);
  EXPECT_EQ(back.backward_count, 2);
  EXPECT_EQ(back.step_seconds, 3);
  EXPECT_EQ(back.memory_peak[4], 5);
  EXPECT_EQ(back.memory_peak_total, 6);
  EXPECT_EQ(back.pipeline.wait, 7);
  EXPECT_EQ(back.world.transfer, 8);
}

TEST(SyntheticSamples, SameSamplesEveryTimeTargetsShiftedInRange) {
  const SyntheticSamples samples(50, 8, 7);
  std::vector<int32_t> a(16), b(16), ta(16), tb(16), one(8), tone(8);
  samples.load(3, 2, a.data(), ta.data());
  samples.load(3, 2, b.data(), tb.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(ta, tb);
  samples.load(4, 1, one.data(), tone.data());  // sample 4 alone = the second of (3, 4)
  EXPECT_EQ(std::vector<int32_t>(a.begin() + 8, a.end()), one);
  for (int t = 0; t + 1 < 8; ++t) EXPECT_EQ(ta[t], a[t + 1]);
  for (int32_t token : a) {
    EXPECT_GE(token, 0);
    EXPECT_LT(token, 50);
  }
}

TEST(MemoryTracker, CapacityRefusesTheAllocationThatWouldPassIt) {
  auto ops = kernels::make_cpu_ops();
  MemoryTracker memory(*ops, 1000);
  void* kept = memory.allocate(600, MemoryCategory::kWeights);
  try {
    memory.allocate(500, MemoryCategory::kActivations);
    FAIL() << "no OutOfDeviceMemory";
  } catch (const OutOfDeviceMemory& error) {
    EXPECT_NE(std::string(error.what()).find("out of device memory"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("activations"), std::string::npos);
  }
  EXPECT_EQ(memory.current_total(), 600u);
  memory.release(kept);
  memory.release(memory.allocate(1000, MemoryCategory::kActivations));  // exactly full fits
}

}  // namespace
}  // namespace paraplan
