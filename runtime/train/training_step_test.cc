// training_step_test.cc: host synchronizations per training step. A step of
// GPT-2 124M's shape (vocab 50304, seq 1024, d_model 768, 12 heads) waits for
// the device a small, fixed number of times, the same with 2 or 12 layers
// and with 1 or 8 micro-batches — on one rank, and with tensor
// parallelism over 2 ranks (where the gradient norm's runs of counted
// tensors are cut at every replicated one). Counted by the runtime's own
// SyncCountingOps; the compute is stubbed (NoComputeOps), so the model's size
// costs neither time nor memory. Runs under mpirun with 1 and 2 ranks.
#include "runtime/train/training_step.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/comm/mpi_session.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/testing/mpi_test_support.h"
#include "runtime/testing/no_compute_ops.h"
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

}  // namespace
}  // namespace paraplan
