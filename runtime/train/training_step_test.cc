// training_step_test.cc: host synchronizations per training step. A step of
// GPT-2 124M's shape (vocab 50304, seq 1024, d_model 768, 12 heads) waits for
// the device a small, fixed number of times, the same with 2 or 12 layers
// and with 1 or 8 micro-batches — on one rank, and with tensor
// parallelism over 2 ranks (where the gradient norm's runs of counted
// tensors are cut at every replicated one). Counted by the runtime's own
// SyncCountingOps; the compute is stubbed (NoComputeOps), so the model's size
// costs neither time nor memory. And a bad loss target, reported late as
// the CUDA backend reports it (DeferringOps), stops the step before the
// optimizer changes a weight, and evaluation names its data. Runs under
// mpirun with 1 and 2 ranks.
#include "runtime/train/training_step.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/comm/mpi_session.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/testing/deferring_ops.h"
#include "runtime/testing/mpi_test_support.h"
#include "runtime/testing/no_compute_ops.h"
#include "runtime/train/evaluation.h"
#include "schema/plan_test_builder.h"

namespace paraplan {
namespace {

struct Case {
  int layers, micro_batches;
};

// Synchronizations of the second step (the first also builds caches).
uint64_t synchronizations_per_step(const Case& shape) {
  const int world = testing::world_size();
  test_plans::PlanSpec spec =
      test_plans::make_plan_spec(1, 1, world, shape.layers, shape.micro_batches);
  spec.vocab_size = 50304;
  spec.seq_len = 1024;
  spec.d_model = 768;
  spec.num_heads = 12;
  spec.ffn_size = 3072;
  spec.micro_batch_size = 1;
  spec.global_batch_size = shape.micro_batches;
  const LoadedPlan loaded = load_plan_from_bytes("gpt2_124m_shape", test_plans::build_plan(spec));
  MpiSession session;
  const MeshCoordinates mesh = place_this_rank(loaded, session);
  const StageModelSpec model = stage_model_from_plan(loaded, mesh.pipeline_rank);
  RankBuildOptions options;
  options.wrap_ops = [](std::unique_ptr<kernels::Ops> ops) -> std::unique_ptr<kernels::Ops> {
    return std::make_unique<testing::NoComputeOps>(std::move(ops));
  };
  RankState rank = build_rank_state(loaded, model, mesh, session, options);
  const SyntheticSamples samples(spec.vocab_size, spec.seq_len);
  const float loss_scale = 1.0f / static_cast<float>(shape.micro_batches * spec.seq_len);
  run_training_step(rank, samples, 0, loss_scale, 1e-4, 1);
  return run_training_step(rank, samples, shape.micro_batches, loss_scale, 1e-4, 2)
      .host_synchronizations;
}

TEST(TrainingStep, HostSynchronizationsDoNotGrowWithMicroBatchesOrLayers) {
  const uint64_t base = synchronizations_per_step({2, 1});
  // The gradient norm, the loss and the deferred-error check: one each.
  EXPECT_EQ(base, 3u);
  EXPECT_EQ(synchronizations_per_step({12, 1}), base) << "12 layers";
  EXPECT_EQ(synchronizations_per_step({2, 8}), base) << "8 micro-batches";
}

// A small model on this rank (data parallel over the world: every rank's
// loss sees its own bad targets) whose ops report bad targets late, as the
// CUDA backend does.
struct DeferringRank {
  DeferringRank()
      : loaded(load_plan_from_bytes("small", test_plans::build_plan(spec()))),
        state(build(loaded, session)) {
    rank = &state;
    initialize_parameters(state, 1234);
  }
  static test_plans::PlanSpec spec() {
    return test_plans::make_plan_spec(1, testing::world_size(), 1, 2, 2);
  }
  // Built in place: a RankState's executor refers into it, so it cannot move.
  static RankState build(const LoadedPlan& loaded, MpiSession& session) {
    const MeshCoordinates mesh = place_this_rank(loaded, session);
    const StageModelSpec model = stage_model_from_plan(loaded, mesh.pipeline_rank);
    RankBuildOptions options;
    options.wrap_ops = [](std::unique_ptr<kernels::Ops> ops) -> std::unique_ptr<kernels::Ops> {
      return std::make_unique<testing::DeferringOps>(std::move(ops));
    };
    return build_rank_state(loaded, model, mesh, session, options);
  }
  std::vector<unsigned char> parameters() {
    std::vector<unsigned char> bytes(rank->ops->storage_bytes(rank->stage->buffer_elements()));
    rank->ops->copy_to_host(bytes.data(), rank->stage->parameters(), bytes.size());
    return bytes;
  }
  MpiSession session;
  LoadedPlan loaded;
  RankState state;
  RankState* rank = nullptr;
};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

TEST(TrainingStep, ABadTargetReportedLateStopsTheStepBeforeTheUpdate) {
  DeferringRank small;
  const std::vector<unsigned char> before = small.parameters();
  // Drawn from twice the model's vocabulary: about half the targets are outside it.
  const SyntheticSamples bad(2 * DeferringRank::spec().vocab_size, DeferringRank::spec().seq_len);
  const std::string error =
      error_of([&] { run_training_step(*small.rank, bad, 0, 1e-3f, 1e-2, 1); });
  EXPECT_NE(error.find("is outside the vocabulary [0, 512)"), std::string::npos) << error;
  // Before the fix the check came after AdamW: one update with bad gradients.
  EXPECT_TRUE(small.parameters() == before) << "the optimizer stepped before the error";
  // The same rank trains on good data afterwards (the error was cleared).
  const SyntheticSamples good(DeferringRank::spec().vocab_size, DeferringRank::spec().seq_len);
  EXPECT_NO_THROW(run_training_step(*small.rank, good, 0, 1e-3f, 1e-2, 1));
  EXPECT_FALSE(small.parameters() == before);
}

TEST(TrainingStep, EvaluationNamesTheValidationDataOfABadTarget) {
  DeferringRank small;
  const SyntheticSamples bad(2 * DeferringRank::spec().vocab_size, DeferringRank::spec().seq_len);
  const std::string error = error_of([&] {
    evaluate(*small.rank, bad, *small.loaded.plan().training(), "--val-data data/val.bin");
  });
  EXPECT_EQ(error.rfind("--val-data data/val.bin: ", 0), 0u) << error;
  EXPECT_NE(error.find("is outside the vocabulary"), std::string::npos) << error;
  // Not left for the next training step to report.
  const SyntheticSamples good(DeferringRank::spec().vocab_size, DeferringRank::spec().seq_len);
  EXPECT_NO_THROW(run_training_step(*small.rank, good, 0, 1e-3f, 1e-2, 1));
}

}  // namespace
}  // namespace paraplan
