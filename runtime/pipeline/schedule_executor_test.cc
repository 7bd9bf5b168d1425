// schedule_executor_test.cc: the executor running streams with model chunks
// (virtual stages) and split backward (BackwardInput, BackwardWeight), under
// mpirun with one pipeline rank per process (2 and 4). Each step must give,
// bitwise, the whole model's gradients and loss computed in one process
// (untied embeddings: nothing is summed across ranks, so only the order of
// independent work differs), and every offset the executor reports through
// gradients_final_from must hold its final gradients from that moment on.
//
// The chunked streams are sequential (one micro-batch at a time through every
// virtual stage, each rank's stream the projection of one global order), so
// they cannot deadlock under any transport; the planner's schedules
// (GPipe, 1F1B, interleaved 1F1B, ZB-H1) run the same check in
// tests/schedule_equivalence_test.cc.
#include "runtime/pipeline/schedule_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/pipeline/executor_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using test_plans::instruction;
using Stream = std::vector<schema::Instruction>;
using testing::expect_whole_model_step;
using testing::kMicroBatches;

// Every rank's stream for p ranks of v chunks: micro-batches one at a time
// through the virtual stages forward, then backward (split: BackwardInput,
// with each BackwardWeight deferred until the next micro-batch's backward).
std::vector<Stream> sequential_streams(int p, int v, int m, bool split) {
  const int S = p * v;
  std::vector<Stream> streams(p);
  const auto at = [&](int s, OpCode op, int mb) {
    streams[s % p].push_back(instruction(op, mb, -1, static_cast<uint8_t>(s / p)));
  };
  for (int mb = 0; mb < m; ++mb)
    for (int s = 0; s < S; ++s) {
      if (s == 0 || s == S - 1) at(s, OpCode::LoadMicroBatch, mb);
      at(s, OpCode::Forward, mb);
      if (s + 1 < S) at(s, OpCode::SendActivation, mb), at(s + 1, OpCode::RecvActivation, mb);
    }
  const auto weights = [&](int mb) {
    for (int s = S - 1; s >= 0; --s) at(s, OpCode::BackwardWeight, mb);
  };
  for (int mb = 0; mb < m; ++mb) {
    for (int s = S - 1; s >= 0; --s) {
      at(s, split ? OpCode::BackwardInput : OpCode::Backward, mb);
      if (s > 0) at(s, OpCode::SendGradient, mb), at(s - 1, OpCode::RecvGradient, mb);
    }
    if (split && mb > 0) weights(mb - 1);
  }
  if (split) weights(m - 1);
  for (Stream& stream : streams) {
    stream.push_back(instruction(OpCode::ReduceGradients, -1));
    stream.push_back(instruction(OpCode::OptimizerStep, -1));
  }
  return streams;
}

// A 1F1B stream with its backwards split as ZB-H1 splits them: each
// BackwardWeight after the next micro-batch's BackwardInput.
Stream split_one_f_one_b(int stage, int p, int m) {
  Stream split;
  for (const schema::Instruction& ins :
       test_plans::one_f_one_b_stream(stage, p, m, stage == 0 || stage == p - 1)) {
    if (ins.op() != OpCode::Backward) {
      split.push_back(ins);
      continue;
    }
    split.push_back(instruction(OpCode::BackwardInput, ins.micro_batch()));
    if (ins.micro_batch() > 0)
      split.push_back(instruction(OpCode::BackwardWeight, ins.micro_batch() - 1));
    if (ins.micro_batch() == m - 1) split.push_back(instruction(OpCode::BackwardWeight, m - 1));
  }
  return split;
}

TEST(ScheduleExecutor, OneForwardOneBackwardGivesTheWholeModelsGradients) {
  const int p = testing::world_size(), r = testing::world_rank();
  expect_whole_model_step(test_plans::one_f_one_b_stream(r, p, kMicroBatches, r == 0 || r == p - 1),
                          1, "1f1b");
}

TEST(ScheduleExecutor, SplitBackwardWithDeferredWeightsGivesTheWholeModelsGradients) {
  const int p = testing::world_size(), r = testing::world_rank();
  expect_whole_model_step(split_one_f_one_b(r, p, kMicroBatches), 1, "1f1b split");
}

// Forward and backward offered to run_recorded, recorded on the second step
// and replayed on the third (as CUDA graphs), and not the backward that
// reports gradients final: each step the whole model's gradients, with
// every report made.
TEST(ScheduleExecutor, RecordedStepsGiveTheWholeModelsGradients) {
  const int p = testing::world_size(), r = testing::world_rank();
  expect_whole_model_step(test_plans::one_f_one_b_stream(r, p, kMicroBatches, r == 0 || r == p - 1),
                          1, "1f1b recorded", schema::ScheduleKind::OneForwardOneBackward,
                          kMicroBatches, true);
  expect_whole_model_step(sequential_streams(p, 2, kMicroBatches, false)[r], 2, "2 chunks recorded",
                          schema::ScheduleKind::OneForwardOneBackward, kMicroBatches, true);
}

TEST(ScheduleExecutor, TwoChunksPerRankGiveTheWholeModelsGradients) {
  const int p = testing::world_size(), r = testing::world_rank();
  expect_whole_model_step(sequential_streams(p, 2, kMicroBatches, false)[r], 2, "2 chunks");
  expect_whole_model_step(sequential_streams(p, 2, kMicroBatches, true)[r], 2, "2 chunks split");
}

TEST(ScheduleExecutor, SlotsLastUntilTheWeightGradient) {
  const int p = testing::world_size();
  using Buffers = ScheduleExecutor::ChunkBuffers;
  test_plans::PlanSpec spec = test_plans::make_plan_spec(p, 1, 1, 2 * p, kMicroBatches);
  spec.schedule[0].instructions = split_one_f_one_b(0, p, kMicroBatches);
  spec.schedule[1].instructions = sequential_streams(p, 2, kMicroBatches, true)[1];
  const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
  const auto* stages = schema::GetPlan(bytes.data())->schedule()->stages();
  // Rank 0 of 1F1B holds p micro-batches at once (min(p, m)), one more while
  // a W waits; the sequential streams forward all m first. Both receive each
  // gradient right before its backward: one buffer serves it and the input
  // gradient (stream_check.h).
  EXPECT_EQ(ScheduleExecutor::buffers_needed(*stages->Get(0), 1),
            (std::vector<Buffers>{{std::min(p + 1, kMicroBatches), false}}));
  EXPECT_EQ(ScheduleExecutor::buffers_needed(*stages->Get(1), 2),
            (std::vector<Buffers>{{kMicroBatches, false}, {kMicroBatches, false}}));
  // A middle stage receiving micro-batch 1's gradient before sending 0's
  // input gradient, not at its backward, needs a received gradient per slot.
  spec.schedule[1].instructions = {
      instruction(OpCode::RecvActivation, 0), instruction(OpCode::Forward, 0),
      instruction(OpCode::RecvActivation, 1), instruction(OpCode::Forward, 1),
      instruction(OpCode::RecvGradient, 0),   instruction(OpCode::Backward, 0),
      instruction(OpCode::RecvGradient, 1),   instruction(OpCode::SendGradient, 0),
      instruction(OpCode::Backward, 1),       instruction(OpCode::SendGradient, 1)};
  const std::vector<uint8_t> early_bytes = test_plans::build_plan(spec);
  EXPECT_EQ(ScheduleExecutor::buffers_needed(
                *schema::GetPlan(early_bytes.data())->schedule()->stages()->Get(1), 1),
            (std::vector<Buffers>{{2, true}}));
  // A BackwardWeight before its BackwardInput is refused.
  Stream bad = split_one_f_one_b(0, p, kMicroBatches);
  std::swap(bad[test_plans::find_instruction(bad, OpCode::BackwardInput, 0)],
            bad[test_plans::find_instruction(bad, OpCode::BackwardWeight, 0)]);
  spec.schedule[0].instructions = bad;
  const std::vector<uint8_t> bad_bytes = test_plans::build_plan(spec);
  EXPECT_THROW(ScheduleExecutor::buffers_needed(
                   *schema::GetPlan(bad_bytes.data())->schedule()->stages()->Get(0), 1),
               std::runtime_error);
}

}  // namespace
}  // namespace paraplan
