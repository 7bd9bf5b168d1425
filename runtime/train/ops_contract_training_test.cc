// ops_contract_training_test.cc: what the runtime promises the op set,
// checked over whole training steps (three, under mpirun with 4 ranks) by
// decorators that do on the CPU what the CUDA backend may do:
// - Weight gradients queued beside the backward (kernels/ops.h
//   linear_weight_gradients) held as late as the contract allows
//   (runtime/testing/delayed_weight_gradient_ops.h) give bitwise the steps
//   that run them at once: each rank's losses, gradient norms and
//   parameters. So every consumer the executor adds (the data-parallel
//   buckets started while backward runs, ZeRO-2 and 3's unit reduce-scatters
//   and gathers, the tied embedding's sum across the pipeline, pipeline
//   sends, split backward's deferred weights, model chunks) finds them joined.
// - Compute steps offered to run_recorded, recorded once and replayed
//   without their host code (runtime/testing/recording_ops.h, as CUDA graphs
//   are), give bitwise the same steps; offered only where the stage replays
//   (no collective inside, no ZeRO-2/3 storage) and never for the backward
//   that reports gradients final.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/mpi_session.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/testing/delayed_weight_gradient_ops.h"
#include "runtime/testing/mpi_test_support.h"
#include "runtime/testing/recording_ops.h"
#include "runtime/train/training_step.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

constexpr int kSteps = 3;

struct TrainingRun {
  std::vector<double> losses, norms;
  std::vector<unsigned char> parameters;
  int weight_gradients_queued = 0;
  int replays = 0;
};

// Which decorator the rank's CPU ops get.
enum class Wrap { kNone, kDelayedWeightGradients, kRecordedSteps };

// kSteps steps of the plan on this rank's CPU ops, wrapped as asked.
TrainingRun train(const test_plans::PlanSpec& spec, Wrap wrap) {
  const LoadedPlan loaded = load_plan_from_bytes("overlap", test_plans::build_plan(spec));
  MpiSession session;
  const MeshCoordinates mesh = place_this_rank(loaded, session);
  const StageModelSpec model = stage_model_from_plan(loaded, mesh.pipeline_rank);
  RankBuildOptions options;
  testing::DelayedWeightGradientOps* held = nullptr;
  testing::RecordingOps* recording = nullptr;
  if (wrap == Wrap::kDelayedWeightGradients) {
    options.wrap_ops = [&held](std::unique_ptr<kernels::Ops> ops) -> std::unique_ptr<kernels::Ops> {
      auto wrapped = std::make_unique<testing::DelayedWeightGradientOps>(std::move(ops));
      held = wrapped.get();
      return wrapped;
    };
  } else if (wrap == Wrap::kRecordedSteps) {
    options.wrap_ops =
        [&recording](std::unique_ptr<kernels::Ops> ops) -> std::unique_ptr<kernels::Ops> {
      auto wrapped = std::make_unique<testing::RecordingOps>(std::move(ops));
      recording = wrapped.get();
      return wrapped;
    };
  }
  RankState rank = build_rank_state(loaded, model, mesh, session, options);
  initialize_parameters(rank, 1234);
  const SyntheticSamples samples(spec.vocab_size, spec.seq_len);
  const float loss_scale = 1.0f / static_cast<float>(spec.global_batch_size * spec.seq_len);
  TrainingRun run;
  for (int step = 1; step <= kSteps; ++step) {
    const TrainingStep result = run_training_step(
        rank, samples, int64_t{step - 1} * spec.global_batch_size, loss_scale, 1e-2, step);
    run.losses.push_back(result.loss_sum);
    run.norms.push_back(result.grad_norm);
  }
  run.parameters.resize(rank.ops->storage_bytes(rank.stage->buffer_elements()));
  if (rank.stage->parameters() != nullptr)  // ZeRO-3 keeps no parameter buffer
    rank.ops->copy_to_host(run.parameters.data(), rank.stage->parameters(), run.parameters.size());
  if (held != nullptr) run.weight_gradients_queued = held->queued();
  if (recording != nullptr) run.replays = recording->replays();
  return run;
}

// The spec on 4 ranks: data parallel over what the pipeline and tensor
// groups leave.
test_plans::PlanSpec on_four_ranks(test_plans::PlanSpec spec) {
  spec.vocab_size = 96;
  spec.seq_len = 16;
  spec.d_model = 32;
  spec.num_heads = 4;
  spec.ffn_size = 64;
  spec.data_parallel = 4 / (spec.pipeline_parallel * spec.tensor_parallel);
  spec.devices_per_node = spec.data_parallel * spec.tensor_parallel;
  spec.global_batch_size = spec.micro_batch_size * spec.num_micro_batches * spec.data_parallel;
  return spec;
}

struct Case {
  std::string name;
  std::function<test_plans::PlanSpec()> spec;
  // Split backward defers every weight gradient to its W instead.
  bool queues_weight_gradients = true;
  // Whether its stages' compute replays (no tensor group, no ZeRO-2 or 3).
  bool replays = true;
};

std::vector<Case> cases() {
  using schema::ScheduleKind;
  return {
      {"pp2 dp2 1F1B ZeRO-1, tied across stages",
       [] {
         test_plans::PlanSpec spec = test_plans::make_plan_spec(2, 2, 1, 4, 4);
         spec.zero_stage = 1;
         return on_four_ranks(spec);
       }},
      {"dp4 ZeRO-2",
       [] {
         test_plans::PlanSpec spec = test_plans::make_plan_spec(1, 4, 1, 4, 2);
         spec.zero_stage = 2;
         return on_four_ranks(spec);
       },
       true, false},
      {"dp2 tp2 sequence-parallel ZeRO-3",
       [] {
         test_plans::PlanSpec spec = test_plans::make_plan_spec(1, 2, 2, 4, 2);
         spec.sequence_parallel = true;
         spec.zero_stage = 3;
         return on_four_ranks(spec);
       },
       true, false},
      {"pp2 dp2 interleaved, 2 chunks",
       [] {
         return on_four_ranks(
             test_plans::make_chunked_plan_spec(2, 2, 8, 4, ScheduleKind::Interleaved1F1B, false));
       }},
      {"pp4 interleaved, 2 chunks",
       [] {
         return on_four_ranks(
             test_plans::make_chunked_plan_spec(4, 2, 8, 4, ScheduleKind::Interleaved1F1B, false));
       }},
      {"pp4 ZB-H1 (split backward)",
       [] {
         return on_four_ranks(
             test_plans::make_chunked_plan_spec(4, 1, 4, 4, ScheduleKind::ZeroBubbleH1, true));
       },
       false},
  };
}

TEST(OpsContractTraining, WeightGradientsHeldAsLateAsAllowedAreBitwiseTheStepsRunAtOnce) {
  if (testing::world_size() != 4) GTEST_SKIP() << "needs exactly 4 ranks";
  for (const Case& c : cases()) {
    const test_plans::PlanSpec spec = c.spec();
    const TrainingRun now = train(spec, Wrap::kNone);
    const TrainingRun late = train(spec, Wrap::kDelayedWeightGradients);
    if (c.queues_weight_gradients) {
      EXPECT_GT(late.weight_gradients_queued, 0) << c.name;
    }
    EXPECT_EQ(now.losses, late.losses) << c.name;
    EXPECT_EQ(now.norms, late.norms) << c.name;
    EXPECT_TRUE(now.parameters == late.parameters) << c.name << ": parameters differ";
    EXPECT_GT(now.norms.front(), 0.0) << c.name;
  }
}

TEST(OpsContractTraining, RecordedAndReplayedStepsAreBitwiseTheStepsRunAtOnce) {
  if (testing::world_size() != 4) GTEST_SKIP() << "needs exactly 4 ranks";
  for (const Case& c : cases()) {
    const test_plans::PlanSpec spec = c.spec();
    const TrainingRun plain = train(spec, Wrap::kNone);
    const TrainingRun replayed = train(spec, Wrap::kRecordedSteps);
    // Steps 2 and 3 record and replay every forward and every backward but
    // the last of each step (it reports gradients final); none where the
    // stage does not replay.
    if (c.replays) {
      EXPECT_GT(replayed.replays, 0) << c.name;
    } else {
      EXPECT_EQ(replayed.replays, 0) << c.name;
    }
    EXPECT_EQ(plain.losses, replayed.losses) << c.name;
    EXPECT_EQ(plain.norms, replayed.norms) << c.name;
    EXPECT_TRUE(plain.parameters == replayed.parameters) << c.name << ": parameters differ";
  }
}

}  // namespace
}  // namespace paraplan
