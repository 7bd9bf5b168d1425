// plan_validate_chunks_test.cc: validate_plan on schema v3's schedules: model
// chunks per pipeline rank (Interleaved1F1B) and split backward (ZeroBubbleH1),
// valid plans accepted, and each broken field or stream named with its fix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using test_plans::instruction;
using test_plans::joined;
using test_plans::make_chunked_plan_spec;
using test_plans::PlanSpec;
using test_plans::violations_of;
using ScheduleKind = schema::ScheduleKind;

PlanSpec interleaved(int32_t pp = 2, int32_t chunks = 2) {
  return make_chunked_plan_spec(pp, chunks, 24, 4, ScheduleKind::Interleaved1F1B, false);
}
PlanSpec zero_bubble(int32_t pp = 2) {
  return make_chunked_plan_spec(pp, 1, 24, 4, ScheduleKind::ZeroBubbleH1, true);
}

// The index of (op, micro_batch, chunk) in rank's stream.
size_t at(const PlanSpec& spec, int rank, OpCode op, int mb, int chunk) {
  const auto& stream = spec.schedule[rank].instructions;
  for (size_t i = 0; i < stream.size(); ++i)
    if (stream[i].op() == op && stream[i].micro_batch() == mb && stream[i].chunk() == chunk)
      return i;
  throw std::logic_error("no such instruction");
}

// spec without rank's (op, micro_batch, chunk).
PlanSpec without(PlanSpec spec, int rank, OpCode op, int mb, int chunk) {
  auto& stream = spec.schedule[rank].instructions;
  stream.erase(stream.begin() + at(spec, rank, op, mb, chunk));
  return spec;
}

void expect_only(const PlanSpec& spec, const std::string& violation) {
  const std::vector<std::string> violations = violations_of(spec);
  ASSERT_EQ(violations.size(), 1u) << joined(violations);
  EXPECT_EQ(violations[0], violation);
}

TEST(ValidateChunkedPlan, AcceptsInterleavedAndZeroBubblePlans) {
  for (const PlanSpec& spec : {interleaved(2, 2), interleaved(3, 2), interleaved(2, 4),
                               interleaved(4, 3), zero_bubble(1), zero_bubble(2), zero_bubble(4),
                               // Interleaved with one chunk is plain data too.
                               interleaved(2, 1)}) {
    const std::vector<std::string> violations = violations_of(spec);
    EXPECT_TRUE(violations.empty()) << joined(violations);
  }
}

TEST(ValidateChunkedPlan, EmbeddingAndHeadSitOnTheFirstAndLastVirtualStage) {
  PlanSpec spec = interleaved(2, 2);
  spec.stages[1].has_head = true;  // rank 1's chunk 0: not the last virtual stage
  const std::vector<std::string> violations = violations_of(spec);
  ASSERT_EQ(violations.size(), 2u) << joined(violations);
  EXPECT_EQ(violations[0], "stages[1].has_head: true; only the last stage holds the head");
  // And the stream of a chunk holding the head must load its targets.
  EXPECT_EQ(violations[1],
            "schedule.stages[1]: micro-batches 0-3 of chunk 0 are never loaded; chunk 0 of stage "
            "1 holds the embedding or the head, so it must load_micro_batch each micro-batch "
            "once, before its forward");
}

TEST(ValidateChunkedPlan, ChunkedStreamsAreCheckedPerChunk) {
  // Rank 1's chunk 1 is the last virtual stage: it loads targets.
  expect_only(without(interleaved(2, 2), 1, OpCode::LoadMicroBatch, 2, 1),
              "schedule.stages[1]: micro-batch 2 of chunk 1 is never loaded; chunk 1 of stage 1 "
              "holds the embedding or the head, so it must load_micro_batch each micro-batch "
              "once, before its forward");

  // Rank 0's chunk 1 (virtual stage 2) receives from rank 1's chunk 0.
  expect_only(without(interleaved(2, 2), 0, OpCode::RecvActivation, 3, 1),
              "schedule.stages[0]: micro-batch 3 of chunk 1 is never received from the previous "
              "stage; chunk 1 of stage 0 must recv_activation once before each forward");

  // Chunk 0 of rank 0 is virtual stage 0: nothing before it.
  PlanSpec first = interleaved(2, 2);
  first.schedule[0].instructions.insert(first.schedule[0].instructions.begin(),
                                        instruction(OpCode::RecvActivation, 0, -1, 0));
  EXPECT_EQ(violations_of(first).at(0),
            "schedule.stages[0].instructions[0]: recv_activation on chunk 0 of stage 0, which "
            "has no previous stage");

  // Chunk 0 of rank 1 (virtual stage 1) holds neither end: it loads nothing.
  PlanSpec middle_load = interleaved(2, 2);
  auto& middle = middle_load.schedule[1].instructions;
  const size_t forward = at(middle_load, 1, OpCode::Forward, 0, 0);
  middle.insert(middle.begin() + forward, instruction(OpCode::LoadMicroBatch, 0, -1, 0));
  expect_only(middle_load, "schedule.stages[1].instructions[" + std::to_string(forward) +
                               "]: load_micro_batch on chunk 0 of stage 1, which holds neither "
                               "the embedding nor the head; only those load micro-batches");

  PlanSpec beyond = interleaved(2, 2);
  beyond.schedule[1].instructions[0] = instruction(OpCode::RecvActivation, 0, -1, 2);
  EXPECT_EQ(violations_of(beyond).at(0),
            "schedule.stages[1].instructions[0]: recv_activation chunk 2 is out of range; valid "
            "are 0..1 (schedule.virtual_stages 2)");
}

TEST(ValidateChunkedPlan, PlanLevelChunkRules) {
  PlanSpec one_rank = make_chunked_plan_spec(1, 2, 8, 4, ScheduleKind::Interleaved1F1B, false);
  const std::vector<std::string> violations = violations_of(one_rank);
  ASSERT_FALSE(violations.empty());
  EXPECT_EQ(violations[0],
            "schedule.virtual_stages: 2 with mesh.pipeline_parallel 1; interleaving needs at "
            "least 2 pipeline ranks, so it must be 1");

  // Predictions stay one per pipeline rank.
  PlanSpec extra_prediction = interleaved(2, 2);
  extra_prediction.stage_predictions.push_back(extra_prediction.stage_predictions.back());
  extra_prediction.stage_predictions.back().stage = 2;
  expect_only(extra_prediction,
              "predictions.stages: 3 entries, but the plan has 2 pipeline stages; it needs one "
              "per stage");
}

TEST(ValidateChunkedPlan, SplitBackwardNeedsOneWeightGradientAfterItsInputGradient) {
  PlanSpec early = zero_bubble(2);
  auto& e = early.schedule[1].instructions;
  std::swap(e[at(early, 1, OpCode::BackwardInput, 2, 0)],
            e[at(early, 1, OpCode::BackwardWeight, 2, 0)]);
  const std::vector<std::string> violations = violations_of(early);
  ASSERT_EQ(violations.size(), 2u) << joined(violations);
  EXPECT_EQ(violations[0],
            "schedule.stages[1]: micro-batch 2 is given its backward_weight before its "
            "backward_input; a micro-batch backwarded by backward_input needs exactly one "
            "backward_weight after it, one backwarded by backward none");
  // The gradient it sends now precedes its input gradient too.
  EXPECT_NE(violations[1].find("sent back before its backward"), std::string::npos)
      << violations[1];

  expect_only(without(zero_bubble(2), 0, OpCode::BackwardWeight, 1, 0),
              "schedule.stages[0]: micro-batch 1 is never given its backward_weight; a micro-batch "
              "backwarded by backward_input needs exactly one backward_weight after it, one "
              "backwarded by backward none");

  // A backward_weight for a micro-batch Backward already finished.
  PlanSpec extra = zero_bubble(2);
  auto& x = extra.schedule[0].instructions;
  x[at(extra, 0, OpCode::BackwardInput, 3, 0)] = instruction(OpCode::Backward, 3);
  expect_only(extra,
              "schedule.stages[0]: micro-batch 3 is given too many backward_weight; a micro-batch "
              "backwarded by backward_input needs exactly one backward_weight after it, one "
              "backwarded by backward none");

  // reduce_gradients must follow the deferred weight gradients too.
  PlanSpec late = zero_bubble(2);
  auto& l = late.schedule[0].instructions;
  const size_t w = at(late, 0, OpCode::BackwardWeight, 3, 0);
  std::swap(l[w], l[l.size() - 2]);
  const std::vector<std::string> late_violations = violations_of(late);
  ASSERT_FALSE(late_violations.empty());
  EXPECT_NE(late_violations[0].find("reduce_gradients comes before the backward"),
            std::string::npos)
      << joined(late_violations);
}

}  // namespace
}  // namespace paraplan
