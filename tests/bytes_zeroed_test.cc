// bytes_zeroed_test.cc: the bytes a training step zeroes (Ops::zero_bytes,
// counted by the runtime's own SyncCountingOps::bytes_zeroed) at GPT-2
// 124M's shape (vocab 50304, seq 1024, d_model 768, 12 heads, ffn 3072,
// tied embeddings), bf16 storage, micro-batch size 1, one rank, with 1 and 12
// layers and 1 and 8 micro-batches. The compute is stubbed (NoComputeOps), so
// the model's size costs neither time nor memory; the step is
// run_training_step, as `paraplan train` runs it. Runs under mpirun, 1 rank.
//
// Per step now: the gradient buffer once (weights accumulate over the
// micro-batches), the two 8-byte device accumulators the step reads back and
// resets (the loss sum, the gradient norm's sum of squares), and per
// micro-batch the head stage's residual_gradient_ [B*T, C] before the final
// norm's backward adds into it (norm backwards accumulate their input
// gradient, and that one starts the residual stream's). No block zeroes
// anything: every activation gradient a block makes is overwritten
// (GradientWrite::kOverwrite).
//
// Before (zero-then-accumulate), each block also zeroed per micro-batch
// fch_gelu and fch gradients [B*T, F] and norm_gradient_ [B*T, C] twice,
// atty [B*T, C] and qkv [B*T, 3C]: B*T*(2F + 6C) elements = 1024 * 10752 *
// 2 bytes = 22,020,096 bytes per layer and micro-batch (352 MB at B = 16),
// and the head zeroed norm_gradient_ [B*T, C] too: bytes_zeroed_before below.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <memory>

#include "runtime/comm/mpi_session.h"
#include "runtime/data/sample_source.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/testing/mpi_test_support.h"
#include "runtime/testing/no_compute_ops.h"
#include "runtime/train/training_step.h"
#include "schema/plan_test_builder.h"

namespace paraplan {
namespace {

constexpr uint64_t kVocab = 50304, kSeq = 1024, kModel = 768, kFfn = 3072, kBf16 = 2;
constexpr uint64_t kRows = kSeq;  // B * T with micro-batch size 1

struct Case {
  int layers, micro_batches;
};

struct StepZeroes {
  uint64_t bytes_zeroed = 0;
  uint64_t gradient_bytes = 0;  // the stage's gradient buffer
};

// GPT-2's parameters with L layers: wte and wpe, per block two layer norms
// (2C each), qkv (3C^2 + 3C), the projection (C^2 + C), the MLP (2 C F + F +
// C), and the final layer norm; the head is tied to wte.
uint64_t gpt2_parameters(uint64_t layers) {
  const uint64_t block = 4 * kModel * kModel + 2 * kModel * kFfn + 9 * kModel + kFfn;
  return kVocab * kModel + kSeq * kModel + layers * block + 2 * kModel;
}

// The bytes the second step zeroes (the first also builds caches).
StepZeroes bytes_zeroed_per_step(const Case& shape) {
  test_plans::PlanSpec spec =
      test_plans::make_plan_spec(1, 1, 1, shape.layers, shape.micro_batches);
  spec.vocab_size = static_cast<int32_t>(kVocab);
  spec.seq_len = static_cast<int32_t>(kSeq);
  spec.d_model = static_cast<int32_t>(kModel);
  spec.num_heads = 12;
  spec.ffn_size = static_cast<int32_t>(kFfn);
  spec.dtype = schema::DType::BFloat16;
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
  // As the step reports it (--log-json's bytes_zeroed).
  return {run_training_step(rank, samples, shape.micro_batches, loss_scale, 1e-4, 2).bytes_zeroed,
          rank.ops->storage_bytes(rank.stage->buffer_elements())};
}

// What zero-then-accumulate zeroed per step (the gradient buffer, the two
// accumulators, and per micro-batch every block's six gradient buffers and the
// head's norm and residual gradients).
uint64_t bytes_zeroed_before(const Case& shape) {
  const uint64_t per_layer = kRows * (2 * kFfn + 6 * kModel) * kBf16;
  const uint64_t head = 2 * kRows * kModel * kBf16;
  return gpt2_parameters(shape.layers) * kBf16 + 16 +
         shape.micro_batches * (shape.layers * per_layer + head);
}

// Now: the gradient buffer, the two accumulators and the head's residual gradient.
uint64_t bytes_zeroed_now(const Case& shape) {
  return gpt2_parameters(shape.layers) * kBf16 + 16 + shape.micro_batches * kRows * kModel * kBf16;
}

TEST(BytesZeroed, OnlyTheGradientBufferAndTheHeadsResidualGradient) {
  ASSERT_EQ(testing::world_size(), 1);
  EXPECT_EQ(gpt2_parameters(12), 124475904u);  // GPT-2 124M with its vocabulary padded to 50304
  for (const Case& shape : {Case{1, 1}, Case{1, 8}, Case{12, 1}, Case{12, 8}}) {
    const StepZeroes step = bytes_zeroed_per_step(shape);
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

}  // namespace
}  // namespace paraplan
