// training_step_test.cc: what a training step costs beyond its compute, and
// where it stops on bad data.
// - Host synchronizations: a step of GPT-2 124M's shape (vocab 50304, seq
//   1024, d_model 768, 12 heads) waits for the device a small, fixed number of
//   times, the same with 2 or 12 layers and with 1 or 8 micro-batches — on one
//   rank, and with tensor parallelism over 2 ranks (where the gradient norm's
//   runs of counted tensors are cut at every replicated one).
// - Bytes zeroed (one rank, bf16, micro-batch size 1): the gradient buffer
//   once (weights accumulate over the micro-batches), the two 8-byte device
//   accumulators the step reads back and resets (the loss sum, the norm's sum
//   of squares), and per micro-batch the head's residual_gradient_ [B*T, C]
//   before the final norm's backward adds into it (norm backwards accumulate
//   their input gradient, and that one starts the residual stream's). No
//   block zeroes anything: every activation gradient a block makes is
//   overwritten (GradientWrite::kOverwrite). Before, each block also zeroed
//   per micro-batch its fch_gelu and fch gradients [B*T, F], norm_gradient_
//   [B*T, C] twice, atty [B*T, C] and qkv [B*T, 3C] (B*T*(2F + 6C) elements,
//   22,020,096 bytes per layer; 352 MB at B = 16), and the head its
//   norm_gradient_: bytes_zeroed_before below.
// Counted by the runtime's own SyncCountingOps; the compute is stubbed
// (NoComputeOps), so the model's size costs neither time nor memory.
// - A bad loss target, reported late as the CUDA backend reports it
//   (DeferringOps), stops the step before the optimizer changes a weight, and
//   evaluation names its data.
// Runs under mpirun with 1 and 2 ranks.
#include "runtime/train/training_step.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <iostream>
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
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

struct Case {
  int layers, micro_batches;
};

constexpr uint64_t kVocab = 50304, kSeq = 1024, kModel = 768, kFfn = 3072, kBf16 = 2;

struct StepCounts {
  uint64_t synchronizations = 0, bytes_zeroed = 0;
  uint64_t gradient_bytes = 0;  // the stage's gradient buffer
};

// The second step's counts (the first also builds caches) at GPT-2 124M's
// shape, micro-batch size 1, tensor parallel over the world.
StepCounts counts_per_step(const Case& shape, schema::DType dtype = schema::DType::Float32) {
  const int world = testing::world_size();
  test_plans::PlanSpec spec =
      test_plans::make_plan_spec(1, 1, world, shape.layers, shape.micro_batches);
  spec.vocab_size = kVocab;
  spec.seq_len = kSeq;
  spec.d_model = kModel;
  spec.num_heads = 12;
  spec.ffn_size = kFfn;
  spec.dtype = dtype;
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
  const TrainingStep step =
      run_training_step(rank, samples, shape.micro_batches, loss_scale, 1e-4, 2);
  return {step.host_synchronizations, step.bytes_zeroed,
          rank.ops->storage_bytes(rank.stage->buffer_elements())};
}

uint64_t synchronizations_per_step(const Case& shape) {
  return counts_per_step(shape).synchronizations;
}

TEST(TrainingStep, HostSynchronizationsDoNotGrowWithMicroBatchesOrLayers) {
  const uint64_t base = synchronizations_per_step({2, 1});
  // The gradient norm, the loss and the deferred-error check: one each.
  EXPECT_EQ(base, 3u);
  EXPECT_EQ(synchronizations_per_step({12, 1}), base) << "12 layers";
  EXPECT_EQ(synchronizations_per_step({2, 8}), base) << "8 micro-batches";
}

// GPT-2's parameters with L layers: wte and wpe, per block two layer norms
// (2C each), qkv (3C^2 + 3C), the projection (C^2 + C), the MLP (2 C F + F +
// C), and the final layer norm; the head is tied to wte.
uint64_t gpt2_parameters(uint64_t layers) {
  const uint64_t block = 4 * kModel * kModel + 2 * kModel * kFfn + 9 * kModel + kFfn;
  return kVocab * kModel + kSeq * kModel + layers * block + 2 * kModel;
}

// What zero-then-accumulate zeroed per step (the gradient buffer, the two
// accumulators, and per micro-batch every block's six gradient buffers and the
// head's norm and residual gradients).
uint64_t bytes_zeroed_before(const Case& shape) {
  const uint64_t per_layer = kSeq * (2 * kFfn + 6 * kModel) * kBf16;
  const uint64_t head = 2 * kSeq * kModel * kBf16;
  return gpt2_parameters(shape.layers) * kBf16 + 16 +
         shape.micro_batches * (shape.layers * per_layer + head);
}

// Now: the gradient buffer, the two accumulators and the head's residual gradient.
uint64_t bytes_zeroed_now(const Case& shape) {
  return gpt2_parameters(shape.layers) * kBf16 + 16 + shape.micro_batches * kSeq * kModel * kBf16;
}

TEST(TrainingStep, ZeroesOnlyTheGradientBufferAndTheHeadsResidualGradient) {
  // The figures below are one rank's; tensor parallelism shards them.
  if (testing::world_size() != 1) GTEST_SKIP() << "bytes zeroed: counted on 1 rank";
  EXPECT_EQ(gpt2_parameters(12), 124475904u);  // GPT-2 124M with its vocabulary padded to 50304
  for (const Case& shape : {Case{1, 1}, Case{1, 8}, Case{12, 1}, Case{12, 8}}) {
    const StepCounts step = counts_per_step(shape, schema::DType::BFloat16);
    const std::string what = std::to_string(shape.layers) + " layers, " +
                             std::to_string(shape.micro_batches) + " micro-batches";
    EXPECT_EQ(step.gradient_bytes, gpt2_parameters(shape.layers) * kBf16) << what;
    EXPECT_EQ(step.bytes_zeroed, bytes_zeroed_now(shape)) << what;
    // What is zeroed beyond the gradient buffer does not grow with the layers.
    std::cout << "[ zeroed ] " << what << ": " << step.bytes_zeroed << " bytes per step (before "
              << bytes_zeroed_before(shape) << "); beyond the gradient buffer "
              << step.bytes_zeroed - step.gradient_bytes << " (before "
              << bytes_zeroed_before(shape) - step.gradient_bytes << ")" << std::endl;
  }
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
    evaluate(*small.rank, bad, *small.loaded.plan().training(), 1, "--val-data data/val.bin");
  });
  EXPECT_EQ(error.rfind("--val-data data/val.bin: ", 0), 0u) << error;
  EXPECT_NE(error.find("is outside the vocabulary"), std::string::npos) << error;
  // Not left for the next training step to report.
  const SyntheticSamples good(DeferringRank::spec().vocab_size, DeferringRank::spec().seq_len);
  EXPECT_NO_THROW(run_training_step(*small.rank, good, 0, 1e-3f, 1e-2, 1));
}

}  // namespace
}  // namespace paraplan
