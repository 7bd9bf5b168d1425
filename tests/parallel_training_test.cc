// parallel_training_test.cc: the project's main oracle. Every plan (pipeline,
// tensor and data parallelism, ZeRO-1 with one or two groups, ZeRO-1 to 3
// over three ranks (padded units), each recompute
// mode, 1F1B and GPipe, micro-batch counts below and off multiples of the
// stage count) trains the same tiny GPT to the same losses as the single-rank
// run, under mpirun with up to 8 ranks.
//
// Tolerance: plans differ only in the order floating-point sums are taken
// (GEMMs over other row counts, all-reduces over shards), which changes fp32
// results in the last bits. Measured: after 5 steps the per-step losses (about
// 5.5, averaged in double) of pp2, tp2, dp4 + ZeRO-1 and pp2 x dp2 x tp2 +
// ZeRO-1 differ from the single-rank run by at most 2.2e-8. kLossTolerance =
// 1e-6 leaves a 50x margin, while a real bug (a missing reduction, a wrong
// shard, a dropped micro-batch) moves the loss by 1e-3 or more. Recomputation
// changes nothing in the arithmetic, so recompute on and off agree bitwise.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "parallel_training_fixture.h"
#include "runtime/checkpoint/safetensors.h"

namespace {

using namespace paraplan::testing;

TEST_F(ParallelTraining, SingleRankLossFalls) {
  const std::vector<double>& losses = single_rank_losses();
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  EXPECT_NEAR(losses[0], std::log(256.0), 0.1);
  EXPECT_LT(losses.back(), losses.front() - 0.3);
}

TEST_F(ParallelTraining, PipelineTwoStages) {
  expect_same_losses({.name = "pp2", .pipeline = 2, .micro_batch_size = 3});
}

TEST_F(ParallelTraining, PipelineFourStagesFewerMicroBatchesThanStages) {
  expect_same_losses({.name = "pp4_m2", .pipeline = 4, .micro_batch_size = 6});
}

TEST_F(ParallelTraining, PipelineFourStagesManyMicroBatches) {
  expect_same_losses({.name = "pp4_m12", .pipeline = 4, .micro_batch_size = 1});
}

// An untied head on the last stage is its own parameter: nothing is summed
// with the first stage's embedding (a tied model sums the two copies).
TEST_F(ParallelTraining, PipelineWithUntiedEmbeddings) {
  expect_same_losses({.name = "pp2_tp2_untied",
                      .pipeline = 2,
                      .tensor = 2,
                      .micro_batch_size = 3,
                      .tied_embeddings = false});
}

TEST_F(ParallelTraining, PipelineGPipe) {
  expect_same_losses(
      {.name = "pp2_gpipe", .pipeline = 2, .micro_batch_size = 4, .scheduler = "gpipe"});
}

TEST_F(ParallelTraining, PlannedInterleavedAndZeroBubbleSchedules) {
  // Plans the planner writes itself (p x v stages, chunks, split backward);
  // tests/schedule_equivalence_test.cc covers the grid of schedules.
  expect_same_losses({.name = "pp2_interleaved",
                      .pipeline = 2,
                      .micro_batch_size = 4,
                      .scheduler = "interleaved"});
  expect_same_losses({.name = "pp2_dp2_zbh1_zero1",
                      .pipeline = 2,
                      .data = 2,
                      .micro_batch_size = 2,
                      .zero_stage = 1,
                      .scheduler = "zb-h1"});
}

TEST_F(ParallelTraining, TensorParallel) {
  expect_same_losses({.name = "tp2", .tensor = 2, .micro_batch_size = 6});
}

TEST_F(ParallelTraining, DataParallel) {
  expect_same_losses({.name = "dp2", .data = 2, .micro_batch_size = 3});
}

TEST_F(ParallelTraining, ZeroOneOverFourRanksInTwoGroups) {
  expect_same_losses({.name = "dp4_zero1_g2",
                      .data = 4,
                      .micro_batch_size = 3,
                      .zero_stage = 1,
                      .zero_groups = 2});
}

// Three ranks: most ZeRO-2/3 units are padded to a multiple of 24 elements,
// and ZeRO-2's in-place gathers spill the padding into the next unit's
// parameters (gathered from the last unit down: in buffer order the loss
// was 7.7e-5 off at step 2 and 1.7e-3 at step 5).
TEST_F(ParallelTraining, ZeroOverThreeRanksWithPaddedUnits) {
  for (int zero_stage : {1, 2, 3})
    expect_same_losses({.name = "dp3_zero" + std::to_string(zero_stage),
                        .data = 3,
                        .micro_batch_size = 2,
                        .zero_stage = zero_stage});
}

TEST_F(ParallelTraining, PipelineAndTensorParallel) {
  expect_same_losses({.name = "pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3});
}

TEST_F(ParallelTraining, PipelineDataZeroMicroBatchesNotAMultipleOfStages) {
  // dp 2 x m 3 x b 2 = 12; m = 3 is not a multiple of the 2 stages.
  expect_same_losses(
      {.name = "pp2_dp2_zero1", .pipeline = 2, .data = 2, .micro_batch_size = 2, .zero_stage = 1});
}

TEST_F(ParallelTraining, EightRanksEveryDimension) {
  expect_same_losses({.name = "pp2_dp2_tp2_zero1",
                      .pipeline = 2,
                      .data = 2,
                      .tensor = 2,
                      .micro_batch_size = 2,
                      .zero_stage = 1});
}

TEST_F(ParallelTraining, GradientBucketsAreBitwiseInvisible) {
  // 1000-element buckets cut the ~60k gradients of each stage into dozens,
  // reduced as backward passes them; the tied embedding's bucket waits for
  // the first/last stage sum. Every element is still summed in the same rank
  // order, so the parameters and moments after kSteps steps (the checkpoint)
  // are bitwise those of one bucket; the losses alone would hide last bits.
  for (const PlanCase& base :
       {PlanCase{.name = "dp2_one_bucket", .data = 2, .micro_batch_size = 3},
        PlanCase{.name = "pp2_dp2_one_bucket", .pipeline = 2, .data = 2, .micro_batch_size = 3}}) {
    PlanCase bucketed = base;
    bucketed.name = base.name + "_bucketed";
    bucketed.gradient_bucket_size = 1000;
    expect_same_checkpoints(base, "", bucketed, "");
  }
}

TEST_F(ParallelTraining, StagedTransportIsBitwiseThePlainMpiRun) {
  // The path for ranks sharing a GPU, exercised on the CPU backend: every
  // buffer goes through the host staging copy, then the same MPI calls.
  const PlanCase plain{.name = "tp2_dp2_zero1_mpi",
                       .data = 2,
                       .tensor = 2,
                       .micro_batch_size = 3,
                       .zero_stage = 1,
                       .gradient_bucket_size = 5000};
  PlanCase staged = plain;
  staged.name = "tp2_dp2_zero1_staged";
  expect_same_checkpoints(plain, "--transport mpi", staged, "--transport staged");
}

TEST_F(ParallelTraining, ZeroOneShardsEveryGradientBucket) {
  // Under ZeRO-1 each rank owns a chunk of every bucket (reduce-scattered and
  // all-gathered bucket by bucket); 999 is rounded up to a multiple of the
  // group size.
  expect_same_losses({.name = "pp2_dp2_zero1_buckets",
                      .pipeline = 2,
                      .data = 2,
                      .micro_batch_size = 2,
                      .zero_stage = 1,
                      .gradient_bucket_size = 999});
}

TEST_F(ParallelTraining, AStalledRankTimesOutNamingTheCollective) {
  // Rank 1 stops answering at step 2; rank 0 waits in the tensor-parallel
  // all-reduce of its forward until the 3 s collective timeout ends the job.
  const auto start = std::chrono::steady_clock::now();
  CommandResult result;
  train({.name = "tp2_stalled", .tensor = 2, .micro_batch_size = 6}, "--collective-timeout 3",
        &result, "PARAPLAN_STALL_RANK_AT_STEP=1:2");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("[rank 0] timeout: all_reduce of"), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("on group 'tensor' (rank 0 of 2) did not complete within 3 s"),
            std::string::npos)
      << result.output;
  // The launcher names the member that has not arrived, from the ranks' beats:
  // rank 0 waits in the tensor group's operation k, rank 1 entered k - 1.
  const size_t named = result.output.find("(operation ");
  ASSERT_NE(named, std::string::npos) << result.output;
  const long operation = std::atol(result.output.c_str() + named + 11);
  EXPECT_NE(result.output.find("(operation " + std::to_string(operation) +
                               " on that group), world rank 1 on "),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("has not arrived (it entered " + std::to_string(operation - 1) +
                               "): it is outside communication for "),
            std::string::npos)
      << result.output;
  EXPECT_LT(seconds, 60.0);
}

// A rank stopped outright (SIGSTOP, as a debugger or `kill -STOP` would): its
// heartbeat stops with it, so the launcher notices it after the heartbeat
// timeout instead of at the 600 s collective timeout, names it and the rank
// waiting for it, and leaves no process behind (the stopped one included).
TEST_F(ParallelTraining, AStoppedRankIsNoticedWithinTheHeartbeatTimeout) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult result;
  const PlanCase plan{.name = "tp2_stopped", .tensor = 2, .micro_batch_size = 6};
  write_file(*directory_ / "stopped.toml", job_toml(plan));
  ASSERT_EQ(run("plan --config " + *directory_ / "stopped.toml" + " --output " +
                *directory_ / "stopped.pplan")
                .exit_code,
            0);
  result = run_command("PARAPLAN_STOP_RANK_AT_STEP=1:2 " + std::string(PARAPLAN_BINARY) +
                       " launch --plan " + *directory_ / "stopped.pplan" +
                       " --heartbeat-timeout 4 -- train --data " + *directory_ / "data/train.bin" +
                       " --steps 5");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ figures  ] stopped rank: the job ended %.1f s after it started\n", seconds);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("paraplan: error: rank 1 on host "), std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("(heartbeat timeout 4.0 s): stopped (SIGSTOP), hung, or the host "
                               "is cut off the network; ending the job"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("pipeline stage 0 of 1, data rank 0 of 1, tensor rank 1 of 2"),
            std::string::npos)
      << result.output;
  EXPECT_NE(result.output.find("waiting for it: rank 0 on "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("in all_reduce of 3072 floats on group 'tensor' (rank 0 of 2)"),
            std::string::npos)
      << result.output;
  EXPECT_LT(seconds, 60.0) << "the collective timeout is 600 s: only the heartbeat ends it sooner";
  // The stopped rank's pid, from the launcher's message: it must be gone.
  const size_t at = result.output.find("rank 1 on ");
  const size_t pid = result.output.find("(pid ", at);
  ASSERT_NE(pid, std::string::npos) << result.output;
  const std::string stopped = std::to_string(std::atol(result.output.c_str() + pid + 5));
  EXPECT_FALSE(std::filesystem::exists("/proc/" + stopped))
      << "rank 1 (pid " << stopped << ") is still there";
}

// ---- the same grid on the CUDA backend (skipped without a GPU) ---------------------
//
// Several ranks on one GPU: NCCL refuses them, so the transport falls back to
// MPI staged through pinned host memory; one rank uses NCCL. Strict fp32 GEMMs
// (PARAPLAN_CUDA_TF32=0), so the only differences from the CPU run are the
// orders of sums inside kernels: measured on the CPU side at 2e-8 between
// plans; 1e-4 leaves room for cuBLAS's other blockings while a wrong shard or
// a missing reduction still moves the loss by 1e-3 or more.
constexpr double kCudaLossTolerance = 1e-4;

class CudaParallelTraining : public ParallelTraining {
 protected:
  void SetUp() override {
    if (paraplan::kernels::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible: the CUDA training grid needs a GPU";
  }
  static void expect_cpu_losses(const PlanCase& plan, const std::string& transport) {
    expect_cuda_losses(plan, transport, single_rank_losses(), kCudaLossTolerance);
  }
};

TEST_F(CudaParallelTraining, SingleRankNccl) {
  expect_cpu_losses({.name = "cuda_single_nccl"}, "nccl");
}

TEST_F(CudaParallelTraining, RanksSharingOneGpuStageThroughHostMemory) {
  for (const PlanCase& plan :
       {PlanCase{.name = "cuda_dp2", .data = 2, .micro_batch_size = 3},
        PlanCase{.name = "cuda_tp2", .tensor = 2, .micro_batch_size = 6},
        PlanCase{.name = "cuda_pp2", .pipeline = 2, .micro_batch_size = 3},
        PlanCase{.name = "cuda_pp2_dp2_zero1_buckets",
        .pipeline = 2,
        .data = 2,
        .micro_batch_size = 2,
        .zero_stage = 1,
        .gradient_bucket_size = 999},
        PlanCase{.name = "cuda_dp2_tp2", .data = 2, .tensor = 2, .micro_batch_size = 3}})
    expect_cpu_losses(plan, "auto");
}

TEST_F(CudaParallelTraining, AStalledRankTimesOut) {
  CommandResult result;
  train({.name = "cuda_tp2_stalled", .tensor = 2, .micro_batch_size = 6},
        "--backend cuda --collective-timeout 3", &result, "PARAPLAN_STALL_RANK_AT_STEP=1:2");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("[rank 0] timeout: all_reduce of"), std::string::npos)
      << result.output;
}

TEST_F(ParallelTraining, CudaWithoutAGpuFailsWithOneClearMessage) {
  if (paraplan::kernels::cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible here";
  CommandResult result;
  train({.name = "dp2_cuda_without_gpu", .data = 2, .micro_batch_size = 3}, "--backend cuda",
        &result, "PARAPLAN_UNUSED=1");
  EXPECT_NE(result.exit_code, 0);
  // Built with nvcc: no device; built without: no CUDA backend. Either way
  // the fix is named, and the job ends instead of hanging.
  const bool no_device = result.output.find("no CUDA device is visible") != std::string::npos;
  const bool no_backend = result.output.find("built without CUDA") != std::string::npos;
  EXPECT_TRUE(no_device || no_backend) << result.output;
  EXPECT_NE(result.output.find("--backend cpu"), std::string::npos) << result.output;
}

TEST_F(ParallelTraining, RecomputationIsBitwiseInvisible) {
  const PlanCase base{.name = "pp2_tp2_none", .pipeline = 2, .tensor = 2, .micro_batch_size = 2};
  const std::vector<double> none = train(base);
  PlanCase full = base;
  full.name = "pp2_tp2_full";
  full.recompute_modules = "ROOT";
  PlanCase selective = base;
  selective.name = "pp2_tp2_selective";
  selective.recompute_modules = "core_attention";
  ASSERT_EQ(none.size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(train(full), none);
  EXPECT_EQ(train(selective), none);
}

TEST_F(ParallelTraining, AWorldOfTheWrongSizeIsRefused) {
  const PlanCase plan{.name = "pp2_tp2_refused", .pipeline = 2, .tensor = 2, .micro_batch_size = 3};
  write_file(*directory_ / "refused.toml", job_toml(plan));
  ASSERT_EQ(run("plan --config " + *directory_ / "refused.toml" + " --output " +
                *directory_ / "refused.pplan")
                .exit_code,
            0);
  const CommandResult result = run_command(
      std::string(MPIEXEC) + " --oversubscribe -np 2 " + PARAPLAN_BINARY + " train --plan " +
      *directory_ / "refused.pplan" + " --data " + *directory_ / "data/train.bin");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("needs 4 ranks"), std::string::npos) << result.output;
  // Without mpirun, the same plan is refused too.
  const CommandResult alone = run("train --plan " + *directory_ / "refused.pplan" + " --data " +
                                  *directory_ / "data/train.bin");
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.output.find("4 ranks"), std::string::npos) << alone.output;
}

TEST_F(ParallelTraining, AFailingRankEndsTheWholeJob) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult result;
  train({.name = "pp2_tp2_failing", .pipeline = 2, .tensor = 2, .micro_batch_size = 3}, "", &result,
        "PARAPLAN_FAIL_RANK_AT_STEP=3:2");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("[rank 3] injected failure at step 2"), std::string::npos)
      << result.output;
  EXPECT_LT(seconds, 60.0);
}

// Issue 46, 7: with communicators that block on destroy as NCCL's do
// (PARAPLAN_TEST_NCCL_TEARDOWN, nccl_like_teardown.h) and no collective
// timeout, a rank that fails with its peers waiting still ends the job within
// seconds, with its own error: it ends the job before unwinding through them.
TEST_F(ParallelTraining, AFailingRankEndsTheJobBeforeItsCommunicatorsCouldWait) {
  const auto start = std::chrono::steady_clock::now();
  CommandResult result;
  train({.name = "dp2_tp2_failing_nccl_like", .data = 2, .tensor = 2, .micro_batch_size = 3},
        "--collective-timeout 0", &result,
        "PARAPLAN_TEST_NCCL_TEARDOWN=1 PARAPLAN_FAIL_RANK_AT_STEP=1:2 timeout 60");
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.exit_code, 124) << "timed out: the failing rank waited in its teardown";
  EXPECT_NE(result.output.find("[rank 1] injected failure at step 2"), std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find("timeout:"), std::string::npos) << result.output;
  std::printf("[ figures  ] failing rank with NCCL-like teardown: the job ended in %.1f s\n",
              seconds);
  EXPECT_LT(seconds, 30.0);
}

// A checkpoint of pp 2 x tp 2 has four writers, one per stage and tensor
// rank: each writes whole tensors (its tensor peers send it their slices) to
// a file of its own, and the index names the file of every tensor, as
// transformers' sharded checkpoints do. No rank holds more than its stage and
// one whole tensor; the values are the single-rank run's.
TEST_F(ParallelTraining, EachStageAndTensorRankWritesItsShareOfWholeTensors) {
  const PlanCase single{.name = "shards_single", .micro_batch_size = 3};
  const PlanCase sharded{
      .name = "shards_pp2_tp2", .pipeline = 2, .tensor = 2, .micro_batch_size = 3};
  std::map<std::string, std::string> tensors[2];
  for (const PlanCase* plan : {&single, &sharded}) {
    const std::string checkpoints = *directory_ / (plan->name + "_checkpoints");
    ASSERT_EQ(train(*plan, "--checkpoint-dir " + checkpoints).size(), static_cast<size_t>(kSteps));
    tensors[plan == &sharded] = last_checkpoint(checkpoints);
  }
  // Every tensor and moment placed right: a misplaced slice would differ by
  // the tensor's own scale, summation order by far less.
  const double worst = largest_relative_difference(tensors[0], tensors[1]);
  std::printf(
      "[ figures  ] pp2 x tp2 checkpoint against the single rank's: largest difference "
      "%.3g of the tensor's largest value\n",
      worst);
  EXPECT_LT(worst, 1e-2);

  // The files: four of each kind, every tensor in the file the index names.
  const std::string step = *directory_ / "shards_pp2_tp2_checkpoints/step_00000005";
  for (const std::string base : {"model", "optimizer"}) {
    const nlohmann::json index =
        nlohmann::json::parse(read_file(step + "/" + base + ".safetensors.index.json"));
    EXPECT_FALSE(std::filesystem::exists(step + "/" + base + ".safetensors"));
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [name, file] : index["weight_map"].items())
      by_file[file.get<std::string>()].push_back(name);
    ASSERT_EQ(by_file.size(), 4u) << base;
    int64_t total_bytes = 0;
    for (int k = 1; k <= 4; ++k) {
      const std::string file = base + "-0000" + std::to_string(k) + "-of-00004.safetensors";
      ASSERT_EQ(by_file.count(file), 1u) << file;
      const paraplan::SafetensorsFile shard = paraplan::SafetensorsFile::open(step + "/" + file);
      EXPECT_EQ(shard.tensors().size(), by_file[file].size()) << file;
      for (const std::string& name : by_file[file]) {
        EXPECT_TRUE(shard.has(name)) << file << " lacks " << name;
        total_bytes += shard.tensor(name).num_elements() * 4;
      }
    }
    if (base == "model") {
      EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total_bytes);
    }
  }
}

// Every data rank holds all the state without ZeRO, so each writes a share
// of the checkpoint; under ZeRO each tensor reaches the checkpoint from the
// ranks that own its parts (DistributedOptimizer::read_range) and is written
// by one rank of the first ZeRO group, each of which writes a file; the
// other ZeRO groups, holding replicas, send nothing. Either way the
// checkpoint holds plain data parallelism's tensors: ZeRO-1 in two groups of
// two (two writers), ZeRO-3 over three ranks (padded units, each tensor's
// parts on several ranks).
TEST_F(ParallelTraining, ZeroCheckpointsHoldPlainDataParallelismsTensors) {
  const struct {
    PlanCase plain, zero;
    int plain_files, zero_files;
  } cases[] = {
      {{.name = "ckpt_dp4", .data = 4, .micro_batch_size = 3},
       {.name = "ckpt_dp4_zero1_g2",
        .data = 4,
        .micro_batch_size = 3,
        .zero_stage = 1,
        .zero_groups = 2},
       4,
       2},
      {{.name = "ckpt_dp3", .data = 3, .micro_batch_size = 2},
       {.name = "ckpt_dp3_zero3", .data = 3, .micro_batch_size = 2, .zero_stage = 3},
       3,
       3},
  };
  for (const auto& [plain, zero, plain_files, zero_files] : cases) {
    std::map<std::string, std::string> tensors[2];
    for (const PlanCase* plan : {&plain, &zero}) {
      const std::string checkpoints = *directory_ / (plan->name + "_checkpoints");
      ASSERT_EQ(train(*plan, "--checkpoint-dir " + checkpoints).size(),
                static_cast<size_t>(kSteps));
      tensors[plan == &zero] = last_checkpoint(checkpoints);
      const int files = plan == &zero ? zero_files : plain_files;
      for (int k = 1; k <= files; ++k)
        EXPECT_TRUE(std::filesystem::exists(checkpoints + "/step_00000005/model-0000" +
                                            std::to_string(k) + "-of-0000" + std::to_string(files) +
                                            ".safetensors"))
            << plan->name << " file " << k;
    }
    const double worst = largest_relative_difference(tensors[0], tensors[1]);
    std::printf(
        "[ figures  ] %s checkpoint against %s's: largest difference %.3g of the "
        "tensor's largest value\n",
        zero.name.c_str(), plain.name.c_str(), worst);
    EXPECT_LT(worst, 1e-2) << zero.name;
  }
}

// --checkpoint-async: each writer writes its file from its copy in host
// memory while training goes on (under dp 2 x tp 2 with ZeRO-3 every rank
// writes one; under ZeRO-1 in two groups of two the second group writes
// none and has no thread); the files equal those written in line, bit for
// bit. A writer that fails ends the job with its reason, and nothing is
// published.
TEST_F(ParallelTraining, CheckpointsWrittenInTheBackgroundEqualThoseWrittenInLine) {
  const PlanCase zero3{.name = "async_dp2_tp2_zero3",
                       .data = 2,
                       .tensor = 2,
                       .micro_batch_size = 3,
                       .zero_stage = 3};
  const PlanCase replicas{.name = "async_dp4_zero1_g2",
                          .data = 4,
                          .micro_batch_size = 3,
                          .zero_stage = 1,
                          .zero_groups = 2};
  for (const auto& [plan, shards] : {std::pair{zero3, 4}, std::pair{replicas, 2}}) {
    const std::string in_line = *directory_ / (plan.name + "_in_line");
    const std::string background = *directory_ / (plan.name + "_background");
    const std::vector<double> expected =
        train(plan, "--checkpoint-every 2 --checkpoint-dir " + in_line);
    CommandResult result;
    EXPECT_EQ(train(plan, "--checkpoint-every 2 --checkpoint-async --checkpoint-dir " + background,
                    &result),
              expected);
    EXPECT_NE(result.output.find("checkpoint: " + background +
                                 "/step_00000004 (written in the background: "),
              std::string::npos)
        << result.output;
    for (const char* step : {"step_00000002", "step_00000004", "step_00000005"}) {
      int files = 0;
      for (const auto& entry : std::filesystem::directory_iterator(in_line + "/" + step)) {
        const std::string name = entry.path().filename();
        EXPECT_TRUE(read_file(entry.path()) == read_file(background + "/" + step + "/" + name))
            << plan.name << " " << step << "/" << name;
        ++files;
      }
      EXPECT_EQ(files, 2 * shards + 2 + 2)
          << plan.name << " " << step
          << ": the shards of each kind, two indexes, config.json and train_state.json";
    }
  }

  const std::string failed = *directory_ / "async_failed_checkpoints";
  CommandResult result;
  train(zero3, "--checkpoint-every 2 --checkpoint-async --checkpoint-dir " + failed, &result,
        "PARAPLAN_FAIL_CHECKPOINT_WRITE_AT_STEP=3:2");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.output.find("ended the job: checkpoint of step 2 (written in the background) "
                               "failed on world rank 3: injected failure writing the checkpoint "
                               "of step 2 (PARAPLAN_FAIL_CHECKPOINT_WRITE_AT_STEP)"),
            std::string::npos)
      << result.output;
  EXPECT_FALSE(std::filesystem::exists(failed + "/latest"));
  EXPECT_FALSE(std::filesystem::exists(failed + "/step_00000002"));
}

TEST_F(ParallelTraining, ResumeUnderAnotherPlanContinuesTheSameRun) {
  // 3 steps under pp2 x tp2, then steps 4-5 under dp4 with ZeRO-1: the
  // checkpoint holds whole tensors, so the run goes on as if uninterrupted.
  const std::string checkpoints = *directory_ / "cross_plan_checkpoints";
  const PlanCase first{
      .name = "resume_first_half", .pipeline = 2, .tensor = 2, .micro_batch_size = 3};
  write_file(*directory_ / "half.toml", job_toml(first));
  ASSERT_EQ(
      run("plan --config " + *directory_ / "half.toml" + " --output " + *directory_ / "half.pplan")
          .exit_code,
      0);
  const CommandResult half = run_command(
      std::string(MPIEXEC) + " --oversubscribe -np 4 " + PARAPLAN_BINARY + " train --plan " +
      *directory_ / "half.pplan" + " --data " + *directory_ / "data/train.bin" +
      " --steps 3 --checkpoint-dir " + checkpoints + " --log-json " + *directory_ / "half.jsonl");
  ASSERT_EQ(half.exit_code, 0) << half.output;
  const PlanCase second{
      .name = "resume_dp4_zero1", .data = 4, .micro_batch_size = 3, .zero_stage = 1};
  CommandResult resumed;
  train(second, "--resume --checkpoint-dir " + checkpoints, &resumed);
  EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
  std::vector<double> losses;
  for (const auto& line : read_json_lines(*directory_ / "half.jsonl"))
    losses.push_back(line["loss"].get<double>());
  for (const auto& line : read_json_lines(*directory_ / "resume_dp4_zero1.jsonl"))
    losses.push_back(line["loss"].get<double>());
  const std::vector<double>& expected = single_rank_losses();
  ASSERT_EQ(losses.size(), expected.size());
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], expected[i], kLossTolerance) << "step " << i + 1;
}

}  // namespace
