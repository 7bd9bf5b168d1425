// profile_test.cc: version 1 profiles in lookups, the process-count preference
// of lookups, measured
// collectives and optimizer in the time model (numbers by hand, solvers still
// agreeing), and the report's lines on what the profile supplied and missed
// (foreign, stale and missing profiles).
#include "planner/cost/profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "planner/cost/plan_estimate.h"
#include "planner/planner.h"
#include "planner/planner_test_support.h"
#include "planner/profile_report.h"
#include "planner/search/exhaustive_solver.h"
#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

using test_jobs::eight_device_job;

// The eight-device job's model (seq 128, d_model 256, 8 heads, ffn 1024, vocab 512).
constexpr const char* kModel =
    R"("seq_len": 128, "d_model": 256, "num_heads": 8, "ffn_size": 1024, "vocab_size": 512,
       "dtype": "float32")";

std::string compute_entry(int tp, int micro_batch, int processes, double block_forward) {
  return std::string("{") + kModel + ", \"tensor_parallel\": " + std::to_string(tp) +
         ", \"micro_batch_size\": " + std::to_string(micro_batch) +
         ", \"processes\": " + std::to_string(processes) +
         ", \"block_forward\": " + std::to_string(block_forward) +
         ", \"block_backward\": " + std::to_string(2 * block_forward) +
         ", \"head_forward\": 0.0005, \"head_backward\": 0.001}";
}

std::string collective(const char* operation, int group, int processes, double latency,
                       double seconds_per_byte) {
  char text[256];
  std::snprintf(text, sizeof(text),
                R"({"operation": "%s", "group_size": %d, "processes": %d, "latency": %.17g,
                    "seconds_per_byte": %.17g})",
                operation, group, processes, latency, seconds_per_byte);
  return text;
}

std::string version_2(const std::string& device, const std::string& body) {
  return R"({"format": "paraplan-profile", "version": 2, "devices": {")" + device + "\": {" + body +
         "}}}";
}

constexpr const char* kProvenance =
    R"("measured_on": {"backend": "cpu", "description": "Test Xeon x 2 cores", "host": "box1",
       "paraplan_version": "0.2.0", "date": "2026-11-22T10:00:00Z"})";

// Writes <TempDir>/<name>/profile.json; returns the directory.
std::string profile_dir(const std::string& name, const std::string& text) {
  const std::string dir = testing::TempDir() + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/profile.json") << text;
  return dir;
}

TEST(ProfileTest, Version1StillLoads) {
  const std::string text = R"({"format": "paraplan-profile", "version": 1, "devices": {"cpu": [
    {"seq_len": 128, "d_model": 256, "num_heads": 8, "vocab_size": 512, "micro_batch_size": 2,
     "block_forward": 0.001, "block_backward": 0.002},
    {"seq_len": 128, "d_model": 256, "num_heads": 8, "vocab_size": 512, "micro_batch_size": 2,
     "parallel": false, "block_forward": 0.003, "block_backward": 0.006}]}})";
  const ProfileDocument document = parse_profile_document(text, "profile.json", "cpu");
  EXPECT_EQ(document.version, 1);
  ASSERT_TRUE(document.device.has_value());
  EXPECT_EQ(document.device->compute[0].processes, kEveryLocalDevice);
  EXPECT_EQ(document.device->compute[1].processes, 1);
  EXPECT_TRUE(document.device->collectives.empty());
  const ModelConfig model = eight_device_job().model;
  // Version 1 "parallel": true counts as every local device busy.
  for (int per_node : {1, 8}) {
    EXPECT_EQ(parse_measured_profile(text, "p", "cpu", true, per_node)
                  ->lookup(model, 1, 2)
                  ->block_forward,
              0.001);
    EXPECT_EQ(parse_measured_profile(text, "p", "cpu", false, per_node)
                  ->lookup(model, 1, 2)
                  ->block_forward,
              0.003);
  }
}

TEST(ProfileTest, LookupsPreferTheJobsProcessCount) {
  const ModelConfig model = eight_device_job().model;
  auto profile_of = [](std::vector<int> counts, bool parallel, int per_node) {
    DeviceProfile data;
    for (int count : counts) {
      ProfileEntry entry;
      entry.seq_len = 128, entry.d_model = 256, entry.num_heads = 8, entry.ffn_size = 1024;
      entry.vocab_size = 512, entry.micro_batch_size = 2, entry.processes = count;
      entry.parallel = count > 1;
      entry.times.block_forward = count;  // names the entry
      data.compute.push_back(entry);
      data.optimizer.push_back({count, count * 1e-9});
      data.collectives.push_back({CollectiveOperation::AllReduce, 2, count, 1e-6 * count, 0});
    }
    return MeasuredProfile("p", "cpu", data, {parallel, per_node});
  };
  auto chosen = [&](const MeasuredProfile& profile) {
    const int compute = static_cast<int>(profile.lookup(model, 1, 2)->block_forward);
    EXPECT_EQ(profile.find_optimizer()->processes, compute);
    EXPECT_EQ(profile.find_collective(CollectiveOperation::AllReduce, 2)->processes, compute);
    EXPECT_EQ(profile.find_collective(CollectiveOperation::AllReduce, 4), nullptr);
    return compute;
  };
  // parallel_profile = true: the job's count, else the nearest parallel count,
  // else one process.
  EXPECT_EQ(chosen(profile_of({1, 2, 8, 4}, true, 8)), 8);
  EXPECT_EQ(chosen(profile_of({1, 2, 6, 16}, true, 8)), 6);
  EXPECT_EQ(chosen(profile_of({1, 2, 12}, true, 8)), 12);  // |12 - 8| < |2 - 8|
  EXPECT_EQ(chosen(profile_of({1}, true, 8)), 1);
  EXPECT_EQ(chosen(profile_of({4, 1, 2}, true, 1)), 1);  // a one-device job wants 1
  // parallel_profile = false: one process, else the fewest.
  EXPECT_EQ(chosen(profile_of({8, 4, 1}, false, 8)), 1);
  EXPECT_EQ(chosen(profile_of({8, 4, 2}, false, 8)), 2);
  // load_measured_profile takes the job's devices per node: world 4 on cpu -> 4.
  const std::string dir = profile_dir(
      "profile_processes", version_2("cpu", "\"compute\": [" + compute_entry(1, 2, 8, 0.008) +
                                                ", " + compute_entry(1, 2, 4, 0.004) + ", " +
                                                compute_entry(1, 2, 1, 0.001) + "]"));
  const auto with = [&](const char* world, const char* parallel) {
    return load_measured_profile(eight_device_job({{"planner.profile_dir", dir},
                                                   {"planner.world_size", world},
                                                   {"planner.parallel_profile", parallel}}))
        ->lookup(model, 1, 2)
        ->block_forward;
  };
  EXPECT_EQ(with("4", "true"), 0.004);
  EXPECT_EQ(with("8", "true"), 0.008);
  EXPECT_EQ(with("8", "false"), 0.001);
}

// all_reduce 2 / 4 / 8, send_receive 2, reduce_scatter and all_gather 4, optimizer.
constexpr double kLatency[] = {1.2e-5, 2e-5, 3e-5}, kPerByte[] = {3.4e-10, 5e-10, 7e-10};
std::string measured_communication() {
  return collective("all_reduce", 2, 8, kLatency[0], kPerByte[0]) + ", " +
         collective("all_reduce", 4, 8, kLatency[1], kPerByte[1]) + ", " +
         collective("all_reduce", 8, 8, kLatency[2], kPerByte[2]) + ", " +
         collective("send_receive", 2, 8, 4e-6, 1e-10) + ", " +
         collective("reduce_scatter", 4, 8, 5e-6, 2e-10) + ", " +
         collective("all_gather", 4, 8, 6e-6, 3e-10);
}

MeasuredProfile communication_profile() {
  return *parse_measured_profile(version_2("cpu", "\"collectives\": [" + measured_communication() +
                                                      "], \"optimizer\": [{\"processes\": 8, "
                                                      "\"seconds_per_parameter\": 2.5e-9}]"),
                                 "profile.json", "cpu", true, 8);
}

TEST(ProfileTest, MeasuredCollectivesReplaceTheRing) {
  const JobConfig config = eight_device_job();
  const MeasuredProfile profile = communication_profile();
  // pp 2 x dp 1 x tp 4, micro-batch 2: a TP all-reduce moves s*b*h*4 = 262144 bytes.
  const PlanSetting tensor{{2, 1, 4}, {1, 8}, 2, 8, 0, 1, {}};
  const StageEstimate first = StageCostModel(config, tensor, &profile).estimate(0, {4, 0, 0});
  const StageEstimate last = StageCostModel(config, tensor, &profile).estimate(1, {4, 0, 0});
  const double all_reduce = 2e-5 + 262144 * 5e-10;  // = 1.5107200e-4
  EXPECT_DOUBLE_EQ(all_reduce, 1.510720e-4);
  // 4 blocks x 4 all-reduces, + the embedding's one.
  EXPECT_DOUBLE_EQ(first.tensor_parallel_seconds, 4 * (4 * all_reduce) + all_reduce);
  // The head: its input gradient plus two reductions of 4 bytes per token.
  const double loss = 2e-5 + 4.0 * 2 * 128 * 5e-10;
  EXPECT_DOUBLE_EQ(last.tensor_parallel_seconds, 4 * (4 * all_reduce) + 2 * loss + all_reduce);
  EXPECT_DOUBLE_EQ(first.pipeline_p2p_seconds, 4e-6 + 262144 * 1e-10);
  EXPECT_DOUBLE_EQ(last.pipeline_p2p_seconds, 4e-6 + 262144 * 1e-10);
  // Without the profile: the analytic ring (cpu: 5 us, 5 GB/s).
  const StageEstimate analytic = StageCostModel(config, tensor).estimate(0, {4, 0, 0});
  EXPECT_DOUBLE_EQ(analytic.tensor_parallel_seconds,
                   17 * ring_all_reduce_seconds({5e-6, 5e9}, 4, 262144));

  // dp 8: the gradient all-reduce of the stage's parameters, and the optimizer.
  const PlanSetting data{{1, 8, 1}, {1, 8}, 2, 1, 0, 1, {}};
  const StageLayout whole{0, 8, true, true, {}};
  const double parameters = static_cast<double>(stage_parameters(config.model, whole));
  const StageEstimate replica = StageCostModel(config, data, &profile).estimate(0, {8, 0, 0});
  // ... and the gradient norm's all-reduce of one double over the 8 ranks.
  const double norm = 3e-5 + 8 * 7e-10;
  EXPECT_DOUBLE_EQ(replica.gradient_reduction_seconds, 3e-5 + parameters * 4 * 7e-10 + norm);
  EXPECT_DOUBLE_EQ(replica.optimizer_seconds, parameters * 2.5e-9);
  // ZeRO-1 in 2 groups of 4: reduce-scatter + all-reduce of a quarter over 2 + all-gather.
  const PlanSetting zero{{1, 8, 1}, {1, 8}, 2, 1, 1, 2, {}};
  const StageEstimate shard = StageCostModel(config, zero, &profile).estimate(0, {8, 0, 0});
  const double bytes = parameters * 4;
  EXPECT_DOUBLE_EQ(
      shard.gradient_reduction_seconds,
      (5e-6 + bytes * 2e-10) + (1.2e-5 + bytes / 4 * 3.4e-10) + (6e-6 + bytes * 3e-10) + norm);
  EXPECT_DOUBLE_EQ(shard.optimizer_seconds, parameters / 4 * 2.5e-9);
  EXPECT_EQ(shard.tail_seconds(), StageCostModel(config, zero, &profile).tail_seconds(0, 8));
  // Across nodes (2 nodes of 4) the data-parallel group keeps the analytic link.
  const PlanSetting nodes{{1, 8, 1}, {2, 4}, 2, 1, 0, 1, {}};
  const StageEstimate spanning = StageCostModel(config, nodes, &profile).estimate(0, {8, 0, 0});
  EXPECT_DOUBLE_EQ(spanning.gradient_reduction_seconds,
                   ring_all_reduce_seconds({50e-6, 1.25e9}, 8, bytes) + 2 * 3 * 50e-6);
  const std::vector<ChargedCollective> charged =
      StageCostModel(config, nodes, &profile).charged_collectives();
  ASSERT_EQ(charged.size(), 1u);
  EXPECT_TRUE(charged[0].inter_node);
}

// Where the profile kept its measured sizes, a call costs the interpolation
// between the two nearest, not the line (which here would say 2e-5 + 262144 x
// 5e-10 = 151 us); on the CPU clock with ranks sharing cores, the points are
// scaled by the busy factor like the line.
TEST(ProfileTest, MeasuredSizesAreInterpolatedBetween) {
  auto profile_with = [](const char* clock) {
    const std::string all_reduce = collective("all_reduce", 4, 8, 2e-5, 5e-10);
    return *parse_measured_profile(
        version_2("cpu", "\"collectives\": [{\"clock\": \"" + std::string(clock) + "\", " +
                             "\"points\": [{\"bytes\": 131072, \"seconds\": 1e-4}, "
                             "{\"bytes\": 524288, \"seconds\": 2.2e-4}], " +
                             all_reduce.substr(1) + "]"),
        "profile.json", "cpu", true, 8);
  };
  // pp 2 x dp 1 x tp 4, micro-batch 2: a TP all-reduce moves 262144 bytes, a
  // third of the way from 131072 to 524288; the head's loss reductions (1024
  // bytes) sit below the first point: 1e-4 less the line's slope over the gap.
  const double all_reduce = 1e-4 + (262144.0 - 131072) / (524288 - 131072) * 1.2e-4;
  const double loss = 1e-4 - (131072 - 1024) * 5e-10;
  const PlanSetting tensor{{2, 1, 4}, {1, 8}, 2, 8, 0, 1, {}};
  const MeasuredProfile wall = profile_with("wall");
  EXPECT_DOUBLE_EQ(StageCostModel(eight_device_job(), tensor, &wall)
                       .estimate(1, {4, 0, 0})
                       .tensor_parallel_seconds,
                   17 * all_reduce + 2 * loss);
  const JobConfig shared = eight_device_job({{"cluster.cores_per_node", "2"}});
  ASSERT_DOUBLE_EQ(busy_wall_factor(shared, tensor), 4);
  const MeasuredProfile cpu = profile_with("cpu");
  EXPECT_DOUBLE_EQ(
      StageCostModel(shared, tensor, &cpu).estimate(1, {4, 0, 0}).tensor_parallel_seconds,
      4 * (17 * all_reduce + 2 * loss));
}

// The CPU backend's profile is CPU time (a dedicated core's seconds). With 8
// ranks on 2 cores each of those seconds takes 4 with every rank busy (the
// units of the closed form); the plan's compute, collective and optimizer
// times are the work itself, and all 8 ranks working at once, the step is 4 x
// the work. A wall-clock entry of the same numbers was measured with every
// rank busy already: a quarter of the work.
TEST(ProfileTest, CpuClockTimesAreADedicatedCoresWorkWhereRanksShareCores) {
  const JobConfig config = eight_device_job({{"cluster.cores_per_node", "2"}});
  const PlanSetting data{{1, 8, 1}, {1, 8}, 2, 1, 0, 1, {}};
  ASSERT_TRUE(ranks_share_cores(config, data));
  EXPECT_DOUBLE_EQ(busy_wall_factor(config, data), 4);
  auto profile_with = [](const char* clock) {
    const std::string entry = compute_entry(1, 2, 8, 0.001);
    const std::string clocked = "{\"clock\": \"" + std::string(clock) + "\", " + entry.substr(1);
    const std::string all_reduce = collective("all_reduce", 8, 8, 3e-5, 7e-10);
    return *parse_measured_profile(
        version_2("cpu", "\"compute\": [" + clocked + "], \"collectives\": [{\"clock\": \"" +
                             clock + "\", " + all_reduce.substr(1) +
                             "], \"optimizer\": [{\"processes\": 8, \"clock\": \"" + clock +
                             "\", \"seconds_per_parameter\": 2.5e-9}]"),
        "profile.json", "cpu", true, 8);
  };
  const StageLayout whole{0, 8, true, true, {}};
  const double parameters = static_cast<double>(stage_parameters(config.model, whole));
  // Forward: 8 blocks of 1 ms and the head's 0.5 ms (the embedding unmeasured: 0).
  const double forward_work = 8 * 0.001 + 0.0005, backward_work = 8 * 0.002 + 0.001;
  const double reduction_work = 3e-5 + parameters * 4 * 7e-10 + (3e-5 + 8 * 7e-10);
  const double optimizer_work = parameters * 2.5e-9;

  const MeasuredProfile cpu = profile_with("cpu");
  const StageEstimate busy = StageCostModel(config, data, &cpu).estimate(0, {8, 0, 0});
  EXPECT_DOUBLE_EQ(busy.forward_seconds, 4 * forward_work);
  EXPECT_DOUBLE_EQ(busy.gradient_reduction_seconds, 4 * reduction_work);
  EXPECT_DOUBLE_EQ(busy.optimizer_seconds, 4 * optimizer_work);
  const PlanEstimate plan = evaluate_plan(config, data, {whole}, &cpu);
  EXPECT_NEAR(plan.stages[0].forward_seconds, forward_work, 1e-15);
  EXPECT_NEAR(plan.stages[0].backward_seconds, backward_work, 1e-15);
  EXPECT_NEAR(plan.stages[0].gradient_reduction_seconds, reduction_work, 1e-15);
  EXPECT_NEAR(plan.stages[0].optimizer_seconds, optimizer_work, 1e-15);
  const double work = forward_work + backward_work + reduction_work + optimizer_work;
  EXPECT_NEAR(plan.prediction.step_seconds, 4 * work, 1e-12);
  EXPECT_NEAR(plan.stages[0].bubble_seconds, 3 * work, 1e-12);  // waiting for a core

  const MeasuredProfile wall = profile_with("wall");
  const PlanEstimate measured_busy = evaluate_plan(config, data, {whole}, &wall);
  EXPECT_NEAR(measured_busy.stages[0].forward_seconds, forward_work / 4, 1e-15);
  EXPECT_NEAR(measured_busy.prediction.step_seconds, work, 1e-12);
}

// A tensor-parallel group at its slowest member's pace (profile_format.h's
// TensorGroupPace): where every rank has a core of its own, a block's compute
// is scaled by the measured ratios and each tensor-parallel call waits the
// measured time per call, which the stage's slot carries and its bubble
// reports as waiting; where ranks share cores the simulation's sharing is the
// waiting, and the figures are not used.
TEST(ProfileTest, TensorGroupPaceScalesBlocksAndWaitsPerCallWhereRanksHaveTheirCores) {
  auto profile_with = [](const std::string& pace) {
    const std::string entry = compute_entry(2, 2, 8, 0.001);
    return *parse_measured_profile(
        version_2("cpu", "\"compute\": [{\"clock\": \"cpu\", " + pace + entry.substr(1) +
                             "], \"collectives\": [{\"clock\": \"cpu\", " +
                             collective("all_reduce", 2, 8, 1e-5, 0).substr(1) + "]"),
        "profile.json", "cpu", true, 8);
  };
  const MeasuredProfile paced = profile_with(
      R"("tensor_group": {"forward_ratio": 1.1, "backward_ratio": 1.2, "wait_per_call": 1e-4}, )");
  const MeasuredProfile unpaced = profile_with("");
  const PlanSetting tensor{{1, 4, 2}, {1, 8}, 2, 2, 0, 1, {}};  // tp 2 x dp 4, 2 micro-batches
  const StageLayout whole{0, 8, true, true, {}};

  const JobConfig own_cores = eight_device_job({{"cluster.cores_per_node", "8"}});
  ASSERT_FALSE(ranks_share_cores(own_cores, tensor));
  const StageEstimate stage = StageCostModel(own_cores, tensor, &paced).estimate(0, {8, 0, 0});
  EXPECT_DOUBLE_EQ(stage.forward_seconds, 8 * 0.001 * 1.1 + 0.0005);
  EXPECT_DOUBLE_EQ(stage.backward_seconds, 8 * 0.002 * 1.2 + 0.001);
  // 4 calls per block, the embedding's 1, the head's 3 (two loss reductions
  // and its input gradient); each call's transfer is its 10 us latency.
  EXPECT_DOUBLE_EQ(stage.tensor_parallel_wait_seconds, (8 * 4 + 1 + 3) * 1e-4);
  EXPECT_DOUBLE_EQ(stage.tensor_parallel_seconds, (8 * 4 + 1 + 3) * 1e-5);
  // A fully recomputed block repeats its forward's 2 calls.
  EXPECT_DOUBLE_EQ(
      StageCostModel(own_cores, tensor, &paced).estimate(0, {6, 0, 2}).tensor_parallel_wait_seconds,
      (8 * 4 + 2 * 2 + 1 + 3) * 1e-4);
  const StageEstimate plain = StageCostModel(own_cores, tensor, &unpaced).estimate(0, {8, 0, 0});
  EXPECT_EQ(plain.tensor_parallel_wait_seconds, 0);
  EXPECT_DOUBLE_EQ(plain.forward_seconds, 8 * 0.001 + 0.0005);
  const PlanEstimate plan = evaluate_plan(own_cores, tensor, {whole}, &paced);
  const PlanEstimate plain_plan = evaluate_plan(own_cores, tensor, {whole}, &unpaced);
  EXPECT_NEAR(plan.prediction.step_seconds - plain_plan.prediction.step_seconds,
              2 * (8 * 0.001 * 0.1 + 8 * 0.002 * 0.2 + 36e-4), 1e-12);
  EXPECT_NEAR(plan.stages[0].bubble_seconds, 2 * 36e-4, 1e-12);
  EXPECT_EQ(plain_plan.stages[0].bubble_seconds, 0);

  // 8 ranks on a measured 7.9 cores have a core each, played out at 7.9 / 8
  // of a core's speed (pipeline_simulation.h): the waits stay wall time.
  const JobConfig nearly = eight_device_job({{"cluster.cores_per_node", "7.9"}});
  ASSERT_TRUE(ranks_share_cores(nearly, tensor));
  ASSERT_TRUE(ranks_have_own_cores(nearly, tensor));
  const double speed = 7.9 / 8, extra = 8 * 0.001 * 0.1 + 8 * 0.002 * 0.2;
  const PlanEstimate played = evaluate_plan(nearly, tensor, {whole}, &paced);
  const PlanEstimate played_plain = evaluate_plan(nearly, tensor, {whole}, &unpaced);
  EXPECT_NEAR(played.prediction.step_seconds - played_plain.prediction.step_seconds,
              2 * (extra / speed + 36e-4), 1e-12);
  EXPECT_NEAR(played.stages[0].bubble_seconds - played_plain.stages[0].bubble_seconds,
              2 * (extra / speed - extra + 36e-4), 1e-12);

  // 8 ranks on 2 cores: the pace is not used.
  const JobConfig shared = eight_device_job({{"cluster.cores_per_node", "2"}});
  ASSERT_TRUE(ranks_share_cores(shared, tensor));
  const StageEstimate sharing = StageCostModel(shared, tensor, &paced).estimate(0, {8, 0, 0});
  const StageEstimate sharing_plain =
      StageCostModel(shared, tensor, &unpaced).estimate(0, {8, 0, 0});
  EXPECT_EQ(sharing.tensor_parallel_wait_seconds, 0);
  EXPECT_EQ(sharing.forward_seconds, sharing_plain.forward_seconds);
  EXPECT_EQ(sharing.backward_seconds, sharing_plain.backward_seconds);
}

TEST(ProfileTest, SolversAgreeUnderAMeasuredProfile) {
  const std::string dir = profile_dir(
      "profile_agree",
      version_2("cpu", std::string(kProvenance) + ", \"compute\": [" +
                           compute_entry(1, 1, 8, 0.002) + ", " + compute_entry(2, 2, 8, 0.0021) +
                           ", " + compute_entry(4, 1, 8, 0.0004) + "], \"collectives\": [" +
                           measured_communication() +
                           "], \"optimizer\": [{\"processes\": 8, "
                           "\"seconds_per_parameter\": 2.5e-9}]"));
  for (const char* layers : {"3", "5"}) {
    const std::vector<ConfigOverride> job = {
        {"planner.profile_dir", dir}, {"model.num_layers", layers}, {"planner.topk", "1"}};
    const JobConfig config = eight_device_job(job);
    const std::optional<MeasuredProfile> profile = load_measured_profile(config);
    ASSERT_TRUE(profile.has_value());
    const double dp =
        search_plans(config, &*profile).ranked.front().estimate.prediction.step_seconds;
    std::vector<ConfigOverride> ilp = job;
    ilp.push_back({"planner.solver", "ilp"});
    EXPECT_EQ(search_plans(eight_device_job(ilp), &*profile)
                  .ranked.front()
                  .estimate.prediction.step_seconds,
              dp);
    EXPECT_EQ(exhaustive_best_plan(config, &*profile).best->estimate.prediction.step_seconds, dp);
    EXPECT_NE(dp, search_plans(config).ranked.front().estimate.prediction.step_seconds);
  }
}

std::string report_of(const std::string& dir, std::vector<ConfigOverride> extra = {}) {
  extra.push_back({"planner.profile_dir", dir});
  return plan_job(eight_device_job(extra)).report;
}

TEST(ProfileTest, ReportSaysWhatWasMeasuredAndWhatWasMissed) {
  const std::string dir = profile_dir(
      "profile_used",
      version_2("cpu", std::string(kProvenance) + ", \"compute\": [" +
                           compute_entry(1, 1, 8, 0.002) + ", " + compute_entry(1, 2, 8, 0.004) +
                           ", " + compute_entry(2, 1, 8, 0.001) + ", " +
                           compute_entry(2, 2, 4, 0.002) + "], \"collectives\": [" +
                           collective("all_reduce", 2, 8, 1e-5, 1e-10) +
                           "], \"gemm\": [{\"m\": 512, \"n\": 512, \"k\": 128, \"processes\": 8, "
                           "\"flops_per_second\": 3.1e10}]"));
  // (Without sequence parallelism, whose settings would double those counted.)
  const std::string report = report_of(dir, {{"planner.tensor_parallel_degree", "2"},
                                             {"planner.pipeline_nstages", "1"},
                                             {"planner.zero_stage", "0"},
                                             {"planner.sequence_parallel", "false"}});
  const std::string path = dir + "/profile.json";
  EXPECT_NE(report.find("time model: measured profile " + path + " (cpu);"), std::string::npos);
  for (const std::string& line :
       {std::string("profile: format version 2, measured on Test Xeon x 2 cores, "
                    "2026-11-22T10:00:00Z (backend cpu, host box1, paraplan 0.2.0)"),
        // dp 4 x tp 2: micro-batches 1, 2 and 4 (global batch 16).
        std::string("profile compute: measured for 2 of 3 settings considered; no compute entry "
                    "for tp 2 x micro-batch 4 (measured: tp 1, 2 x micro-batch 1, 2); analytic "
                    "compute time for those"),
        std::string("profile collectives: measured all_reduce (groups 2); analytic, no entry: "
                    "all_reduce (groups 4)"),
        std::string("profile optimizer: no entry; analytic (32 bytes per parameter at 10 "
                    "GB/s)"),
        std::string("profile gemm (informational): 512 x 512 x 128 float32 3.1e+10 FLOP/s "
                    "(processes 8)"),
        std::string("profile processes: wanted 8 (parallel_profile = true: this job's devices "
                    "per node); entries measured with 4 processes used for lack of exact ones")})
    EXPECT_NE(report.find(line + "\n"), std::string::npos) << line << "\n---\n" << report;
  EXPECT_EQ(format_shapes({{1, 1}, {1, 2}, {2, 1}, {2, 2}, {4, 8}}),
            "tp 1, 2 x micro-batch 1, 2; tp 4 x micro-batch 8");
}

TEST(ProfileTest, ForeignStaleAndMissingProfilesAreNamed) {
  // (a) Entries for another device only.
  const std::string other =
      profile_dir("profile_other_device",
                  version_2("h100-sxm", "\"compute\": [" + compute_entry(1, 1, 8, 0.001) + "]"));
  std::string report = report_of(other);
  EXPECT_NE(report.find("time model: analytic"), std::string::npos);
  EXPECT_NE(report.find("profile " + other +
                        "/profile.json has devices [h100-sxm], none for this job's device 'cpu': "
                        "analytic time model used\n"),
            std::string::npos)
      << report;
  EXPECT_FALSE(load_measured_profile(eight_device_job({{"planner.profile_dir", other}})));

  // (b) Entries for the device, but for another model.
  const std::string stale = profile_dir("profile_stale", version_2("cpu", std::string(kProvenance) +
                                                                              R"(, "compute": [
        {"seq_len": 1024, "d_model": 768, "num_heads": 12, "vocab_size": 50257,
         "micro_batch_size": 1, "processes": 8, "block_forward": 0.1, "block_backward": 0.2}],
        "collectives": [)" + collective("all_reduce", 8, 8, 1e-5, 1e-10) + "]"));
  report = report_of(stale);
  EXPECT_NE(report.find("profile " + stale +
                        "/profile.json (cpu) was measured for other model shapes (seq 1024, "
                        "d_model 768, heads 12, ffn 3072, vocab 50257, float32); analytic "
                        "compute time used — run `paraplan profile --config job.toml` (this "
                        "job: seq 128, d_model 256, heads 8, ffn 1024, vocab 512, float32)\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("profile collectives: measured all_reduce (groups 8)"), std::string::npos);

  // (c) Measured on a CUDA backend for the cpu preset, and on the CPU for a GPU preset.
  const std::string cuda = profile_dir(
      "profile_cuda",
      version_2("cpu", R"("measured_on": {"backend": "cuda", "description": "NVIDIA H100"},
                          "compute": [)" +
                           compute_entry(1, 1, 8, 0.001) + "]"));
  report = report_of(cuda);
  EXPECT_NE(report.find("profile " + cuda +
                        "/profile.json (cpu) is foreign: measured on backend 'cuda' (NVIDIA "
                        "H100) for the CPU preset 'cpu'; analytic time model used — run "
                        "`paraplan profile --config job.toml` on this device\n"),
            std::string::npos)
      << report;
  const std::string on_cpu = profile_dir(
      "profile_on_cpu", version_2("h100-sxm", std::string(kProvenance) + ", \"compute\": [" +
                                                  compute_entry(1, 1, 8, 0.001) + "]"));
  report = report_of(on_cpu, {{"cluster.preset", "h100-sxm"}});
  EXPECT_NE(report.find("profile " + on_cpu +
                        "/profile.json (h100-sxm) is foreign: measured on backend 'cpu' (Test "
                        "Xeon x 2 cores) for GPU preset 'h100-sxm'; analytic time model used"),
            std::string::npos)
      << report;

  // No file at all, and re_profile = true.
  const std::string none = testing::TempDir() + "profile_none";
  EXPECT_NE(report_of(none).find("profile: none at " + none +
                                 "/profile.json; analytic time model — run `paraplan profile "
                                 "--config job.toml` to measure\n"),
            std::string::npos);
  EXPECT_NE(report_of(stale, {{"planner.re_profile", "true"}})
                .find("re_profile = true: profile " + stale +
                      "/profile.json is ignored (to be measured again); analytic time model used"),
            std::string::npos);
}

}  // namespace
}  // namespace paraplan
