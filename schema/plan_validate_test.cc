// plan_validate_test.cc: validate_plan on valid plans of several shapes and on one
// broken schedule or prediction field at a time, checking that each violation
// names its field and says what is wrong and what would be valid (the header's,
// model's, training's, mesh's, stages' and ZeRO's fields:
// plan_validate_fields_test.cc; strings, and sizes and counts past their
// bounds: plan_validate_bounds_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "schema/plan_test_support.h"
#include "schema/plan_validate_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using schema::ScheduleKind;
using test_plans::expect_reported;
using test_plans::find_instruction;
using test_plans::has_violation;
using test_plans::instruction;
using test_plans::joined;
using test_plans::make_plan_spec;
using test_plans::PlanSpec;
using test_plans::ViolationCase;
using test_plans::violations_of;

struct ValidShape {
  int32_t pp, dp, tp, layers, micro_batches;
  ScheduleKind kind;
};

class ValidPlanTest : public ::testing::TestWithParam<ValidShape> {};

TEST_P(ValidPlanTest, HasNoViolations) {
  const ValidShape& s = GetParam();
  const PlanSpec spec = make_plan_spec(s.pp, s.dp, s.tp, s.layers, s.micro_batches, s.kind);
  const std::vector<std::string> violations = violations_of(spec);
  EXPECT_TRUE(violations.empty()) << joined(violations);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ValidPlanTest,
    ::testing::Values(ValidShape{1, 1, 1, 4, 1, ScheduleKind::OneForwardOneBackward},
                      ValidShape{1, 2, 2, 4, 4, ScheduleKind::OneForwardOneBackward},
                      ValidShape{2, 2, 2, 8, 4, ScheduleKind::OneForwardOneBackward},
                      ValidShape{2, 2, 2, 8, 4, ScheduleKind::GPipe},
                      ValidShape{4, 1, 1, 8, 8, ScheduleKind::OneForwardOneBackward},
                      ValidShape{4, 1, 1, 8, 2, ScheduleKind::OneForwardOneBackward},
                      ValidShape{4, 1, 4, 8, 2, ScheduleKind::GPipe},
                      ValidShape{3, 2, 1, 8, 5, ScheduleKind::OneForwardOneBackward}));

TEST(ValidatePlan, AcceptsSequenceParallelWithTensorParallel) {
  for (schema::Architecture architecture :
       {schema::Architecture::Gpt2, schema::Architecture::Llama}) {
    PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
    spec.architecture = architecture;
    spec.sequence_parallel = true;
    EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
  }
}

TEST(ValidatePlan, AcceptsContextParallelWithEveryOtherDimension) {
  // pp 2 x dp 2 x cp 2 x tp 2 on 2 nodes of 8, sequence parallel, ZeRO over
  // the 4 data x context ranks in 2 groups, documents masked.
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.context_parallel = 2;
  spec.devices_per_node = 8;
  spec.sequence_parallel = true;
  spec.zero_stage = 3;
  spec.zero_num_groups = 2;
  spec.has_data = true;
  spec.document_separator = 0;
  EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
}

TEST(ValidatePlan, AcceptsPlanWithoutPredictions) {
  PlanSpec spec = make_plan_spec(2, 1, 1, 4, 2);
  spec.has_predictions = false;
  EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
}

TEST(ValidatePlan, AcceptsZeroStageOneWithOneDataParallelRank) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 4, 2);
  spec.zero_stage = 1;
  EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
}

TEST(ValidatePlan, AcceptsStageHoldingOnlyTheEmbedding) {
  PlanSpec spec = make_plan_spec(2, 1, 1, 4, 2);
  spec.stages[0].num_layers = 0;
  spec.stages[0].recompute.clear();
  spec.stages[1].first_layer = 0;
  spec.stages[1].num_layers = 4;
  spec.stages[1].recompute.assign(4, schema::RecomputeMode::Full);
  EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
}

TEST(ValidatePlan, AcceptsStepOpsNamingAMicroBatch) {
  PlanSpec spec = make_plan_spec(2, 1, 1, 4, 2);
  for (auto& stage : spec.schedule) {
    const size_t n = stage.instructions.size();
    stage.instructions[n - 2] = instruction(OpCode::ReduceGradients, 0);
    stage.instructions[n - 1] = instruction(OpCode::OptimizerStep, 0);
  }
  EXPECT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
}

TEST(ValidatePlan, CollectsEveryViolationInFieldProblemFixForm) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  spec.vocab_size = 0;
  spec.beta1 = 2.0f;
  spec.zero_stage = 5;
  spec.stages[1].has_embedding = true;
  spec.schedule[0].instructions.erase(
      spec.schedule[0].instructions.begin() +
      find_instruction(spec.schedule[0].instructions, OpCode::Forward, 2));
  const std::vector<std::string> violations = violations_of(spec);
  EXPECT_TRUE(has_violation(violations, {"model.vocab_size: 0"})) << joined(violations);
  EXPECT_TRUE(has_violation(violations, {"training.optimizer.beta1: 2"})) << joined(violations);
  EXPECT_TRUE(has_violation(violations, {"zero.stage: 5"})) << joined(violations);
  EXPECT_TRUE(has_violation(violations, {"stages[1].has_embedding: true"})) << joined(violations);
  EXPECT_TRUE(has_violation(violations, {"schedule.stages[0]: micro-batch 2 is never forwarded"}))
      << joined(violations);
  for (const std::string& violation : violations) {
    EXPECT_NE(violation.find(": "), std::string::npos) << violation;
    EXPECT_NE(violation.find("; "), std::string::npos) << "no fix given: " << violation;
  }
}

TEST(ValidatePlan, ListsAtMostEightInstructionProblemsPerStage) {
  PlanSpec spec = make_plan_spec(1, 1, 1, 4, 2);
  for (int i = 0; i < 20; ++i) {
    spec.schedule[0].instructions.insert(spec.schedule[0].instructions.begin(),
                                         instruction(OpCode::Forward, 100 + i));
  }
  const std::vector<std::string> violations = violations_of(spec);
  int listed = 0;
  for (const std::string& v : violations) listed += v.find("is out of range") != std::string::npos;
  EXPECT_EQ(listed, 8) << joined(violations);
  EXPECT_TRUE(has_violation(violations, {"schedule.stages[0]: 12 more instruction problems"}))
      << joined(violations);
}

// One broken field on a valid 2-stage, dp 2, tp 2, 8-layer, 4-micro-batch 1F1B plan.
void erase_op(PlanSpec& spec, int stage, OpCode op, int32_t micro_batch) {
  auto& stream = spec.schedule[stage].instructions;
  stream.erase(stream.begin() + find_instruction(stream, op, micro_batch));
}

void swap_ops(PlanSpec& spec, int stage, OpCode op_a, int32_t mb_a, OpCode op_b, int32_t mb_b) {
  auto& stream = spec.schedule[stage].instructions;
  std::swap(stream[find_instruction(stream, op_a, mb_a)],
            stream[find_instruction(stream, op_b, mb_b)]);
}

void replace_op(PlanSpec& spec, int stage, OpCode op, int32_t micro_batch,
                schema::Instruction with) {
  auto& stream = spec.schedule[stage].instructions;
  stream[find_instruction(stream, op, micro_batch)] = with;
}

void insert_before_step_ops(PlanSpec& spec, int stage, schema::Instruction ins) {
  auto& stream = spec.schedule[stage].instructions;
  stream.insert(stream.end() - 2, ins);
}

const std::vector<ViolationCase>& violation_cases() {
  static const std::vector<ViolationCase> cases = {
      // schedule structure
      {"ScheduleStageCountMismatch",
       [](PlanSpec& s) { s.schedule.pop_back(); },
       {"schedule.stages: 1 entry, but the plan has 2 pipeline stages"}},
      {"ScheduleStageIndexWrong",
       [](PlanSpec& s) { s.schedule[1].stage = 0; },
       {"schedule.stages[1].stage: 0", "must be 1"}},
      {"ScheduleInstructionsMissing",
       [](PlanSpec& s) { s.schedule[1].has_instructions = false; },
       {"schedule.stages[1].instructions: missing"}},
      {"UnknownScheduleKind",
       [](PlanSpec& s) { s.schedule_kind = ScheduleKind(6); },
       {"schedule.kind: unknown value 6", "dualpipe-v (5)"}},
      // Schema v5: posted transfers; v8: only posted ones.
      {"UnknownTransfers",
       [](PlanSpec& s) { s.transfers = schema::Transfers(2); },
       {"schedule.transfers: unknown value 2", "valid is posted (1)"}},
      {"RendezvousTransfersRetired",
       [](PlanSpec& s) { s.transfers = schema::Transfers::Rendezvous; },
       {"schedule.transfers: rendezvous (0), retired in plan schema version 8",
        "re-create the plan with 'paraplan plan'"}},
      // Schema v3: kinds and chunks that do not fit together.
      {"VirtualStagesWithOneChunkKind",
       [](PlanSpec& s) { s.virtual_stages = 2; },
       {"schedule.virtual_stages: 2 with schedule.kind 1f1b, which runs one model chunk per "
        "pipeline rank; it must be 1, or the kind interleaved (2)"}},
      {"VirtualStagesOutOfRange",
       [](PlanSpec& s) { s.virtual_stages = 0; },
       {"schedule.virtual_stages: 0; valid are 1..256 model chunks per pipeline rank"}},
      {"InterleavedWithTooFewStages",
       [](PlanSpec& s) {
         s.schedule_kind = ScheduleKind::Interleaved1F1B;
         s.virtual_stages = 2;
       },
       {"stages: 2 entries, but mesh.pipeline_parallel 2 x schedule.virtual_stages 2 virtual "
        "stages; there must be one per virtual stage, in model order"}},
      {"SequenceParallelWithoutTensorParallel",
       [](PlanSpec& s) {
         s.sequence_parallel = true;
         s.tensor_parallel = 1;
         s.devices_per_node = 2;
         s.num_nodes = 4;
       },
       {"mesh.sequence_parallel: true with tensor_parallel 1", "needs tensor_parallel > 1"}},
      {"SequenceParallelSeqLenNotDivisible",
       [](PlanSpec& s) {
         s.sequence_parallel = true;
         s.seq_len = 63;
       },
       {"mesh.sequence_parallel: true, but tensor_parallel 2 does not divide model.seq_len 63"}},
      {"ContextParallelZero",
       [](PlanSpec& s) { s.context_parallel = 0; },
       {"mesh.context_parallel: 0; must be at least 1"}},
      {"ContextParallelRanksNotDevices",
       [](PlanSpec& s) { s.context_parallel = 2; },
       {"mesh: pipeline_parallel 2 x data_parallel 2 x context_parallel 2 x tensor_parallel 2 = "
        "16 ranks, but num_nodes 2 x devices_per_node 4 = 8 devices"}},
      {"ContextParallelChunksNotDividingSequence",
       [](PlanSpec& s) {
         s.context_parallel = 2;
         s.data_parallel = 1;
         s.global_batch_size = s.micro_batch_size * s.num_micro_batches;
         s.seq_len = 66;
       },
       {"mesh.context_parallel: 2, but 2 x context_parallel = 4 does not divide model.seq_len 66"}},
      {"ContextParallelSequenceShardNotDividingTensorRanks",
       [](PlanSpec& s) {
         s.context_parallel = 2;
         s.data_parallel = 1;
         s.global_batch_size = s.micro_batch_size * s.num_micro_batches;
         s.sequence_parallel = true;
         s.seq_len = 12;
         s.tensor_parallel = 4;
         s.devices_per_node = 8;
         s.num_nodes = 2;
       },
       {"mesh.sequence_parallel: true, but tensor_parallel 4 does not divide "
        "model.seq_len / context_parallel 6"}},
      {"ZeroGroupsNotDividingDataTimesContextRanks",
       [](PlanSpec& s) {
         s.context_parallel = 2;
         s.data_parallel = 1;
         s.global_batch_size = s.micro_batch_size * s.num_micro_batches;
         s.zero_stage = 1;
         s.zero_num_groups = 4;
       },
       {"zero.num_groups: 4 does not divide mesh.data_parallel x context_parallel 2"}},
      {"DocumentSeparatorOutsideVocabulary",
       [](PlanSpec& s) {
         s.has_data = true;
         s.document_separator = s.vocab_size;
       },
       {"training.data.document_separator: ",
        "must be -1 (no document masking) or a token id in [0, "}},
      {"ChunkBeyondVirtualStages",
       [](PlanSpec& s) { s.schedule[0].instructions[1] = instruction(OpCode::Forward, 0, -1, 1); },
       {"schedule.stages[0].instructions[1]: forward chunk 1 is out of range; valid are 0..0 "
        "(schedule.virtual_stages 1)"}},
      {"TooFewInstructionsForMicroBatches",
       [](PlanSpec& s) {
         s.num_micro_batches = 16384;
         s.global_batch_size = 4 * 16384;
       },
       {"schedule.stages[0].instructions: 22 instructions cannot forward and backward all "
        "16384 micro-batches"}},
      {"MoreMicroBatchesThanAPlanHolds",
       [](PlanSpec& s) {
         s.num_micro_batches = 1'000'000;
         s.global_batch_size = 4'000'000;
       },
       {"training.num_micro_batches: 1000000; must be at most 16384"}},
      // instructions
      {"MicroBatchOutOfRange",
       [](PlanSpec& s) { replace_op(s, 0, OpCode::Forward, 0, instruction(OpCode::Forward, 9)); },
       {"schedule.stages[0].instructions[1]: forward micro_batch 9 is out of range",
        "valid are 0..3"}},
      {"PeerOnPlainOp",
       [](PlanSpec& s) {
         replace_op(s, 0, OpCode::Forward, 0, instruction(OpCode::Forward, 0, 2));
       },
       {"schedule.stages[0].instructions[1]: forward peer_micro_batch 2", "must be -1"}},
      {"RetiredCombinedOp",
       [](PlanSpec& s) {
         replace_op(s, 0, OpCode::SendActivation, 1, instruction(OpCode(7), 1, 0));
       },
       {"schedule.stages[0].instructions[5]: op: unknown value 7",
        "6 (recv_gradient) and 9 (reduce_gradients)"}},
      {"UnknownOpcode",
       [](PlanSpec& s) { replace_op(s, 1, OpCode::Forward, 2, instruction(OpCode(42), 2)); },
       {"schedule.stages[1].instructions[", "op: unknown value 42"}},
      {"ForwardMissing",
       [](PlanSpec& s) { erase_op(s, 0, OpCode::Forward, 2); },
       {"schedule.stages[0]: micro-batch 2 is never forwarded", "exactly one forward"}},
      {"SeveralForwardsMissing",
       [](PlanSpec& s) {
         for (int32_t mb : {0, 1, 2}) erase_op(s, 0, OpCode::Forward, mb);
       },
       {"schedule.stages[0]: micro-batches 0-2 are never forwarded"}},
      {"ForwardTwice",
       [](PlanSpec& s) { insert_before_step_ops(s, 1, instruction(OpCode::Forward, 1)); },
       {"schedule.stages[1]: micro-batch 1 is forwarded more than once"}},
      {"BackwardMissing",
       [](PlanSpec& s) { erase_op(s, 1, OpCode::Backward, 3); },
       {"schedule.stages[1]: micro-batch 3 is never backwarded"}},
      {"BackwardBeforeForward",
       [](PlanSpec& s) { swap_ops(s, 1, OpCode::Forward, 0, OpCode::Backward, 0); },
       {"schedule.stages[1]: micro-batch 0 is backwarded before its forward"}},
      {"LoadMissingOnFirstStage",
       [](PlanSpec& s) { erase_op(s, 0, OpCode::LoadMicroBatch, 2); },
       {"schedule.stages[0]: micro-batch 2 is never loaded", "holds the embedding or the head"}},
      {"LoadMissingOnLastStage",
       [](PlanSpec& s) { erase_op(s, 1, OpCode::LoadMicroBatch, 0); },
       {"schedule.stages[1]: micro-batch 0 is never loaded"}},
      {"LoadAfterForward",
       [](PlanSpec& s) { swap_ops(s, 0, OpCode::LoadMicroBatch, 1, OpCode::Forward, 1); },
       {"schedule.stages[0]: micro-batch 1 is loaded after its forward"}},
      {"RecvActivationMissing",
       [](PlanSpec& s) { erase_op(s, 1, OpCode::RecvActivation, 0); },
       {"schedule.stages[1]: micro-batch 0 is never received from the previous stage"}},
      {"SendActivationMissing",
       [](PlanSpec& s) { erase_op(s, 0, OpCode::SendActivation, 0); },
       {"schedule.stages[0]: micro-batch 0 is never sent to the next stage"}},
      {"SendActivationBeforeForward",
       [](PlanSpec& s) { swap_ops(s, 0, OpCode::Forward, 0, OpCode::SendActivation, 0); },
       {"schedule.stages[0]: micro-batch 0 is sent before its forward"}},
      {"RecvGradientMissing",
       [](PlanSpec& s) { erase_op(s, 0, OpCode::RecvGradient, 3); },
       {"schedule.stages[0]: micro-batch 3 is never given its gradient by the next stage"}},
      {"SendGradientMissing",
       [](PlanSpec& s) { erase_op(s, 1, OpCode::SendGradient, 3); },
       {"schedule.stages[1]: micro-batch 3 is never sent back to the previous stage"}},
      {"RecvActivationOnFirstStage",
       [](PlanSpec& s) { insert_before_step_ops(s, 0, instruction(OpCode::RecvActivation, 0)); },
       {"recv_activation on stage 0, which has no previous stage"}},
      {"SendActivationOnLastStage",
       [](PlanSpec& s) { insert_before_step_ops(s, 1, instruction(OpCode::SendActivation, 0)); },
       {"send_activation on the last stage (1), which has no next stage"}},
      {"ReduceGradientsMissing",
       [](PlanSpec& s) { erase_op(s, 0, OpCode::ReduceGradients, -1); },
       {"schedule.stages[0]: 0 reduce_gradients instructions", "exactly one"}},
      {"ReduceGradientsBeforeLastBackward",
       [](PlanSpec& s) { swap_ops(s, 0, OpCode::Backward, 3, OpCode::ReduceGradients, -1); },
       {"reduce_gradients comes before the backward", "must follow every backward"}},
      {"SendGradientAfterReduceGradients",
       [](PlanSpec& s) { swap_ops(s, 1, OpCode::SendGradient, 3, OpCode::ReduceGradients, -1); },
       {"schedule.stages[1].instructions[",
        "a pipeline transfer after reduce_gradients (at instructions["}},
      {"OptimizerStepNotLast",
       [](PlanSpec& s) { swap_ops(s, 1, OpCode::ReduceGradients, -1, OpCode::OptimizerStep, -1); },
       {"schedule.stages[1].instructions[", "optimizer_step is not the last instruction"}},
      {"OptimizerStepTwice",
       [](PlanSpec& s) {
         s.schedule[1].instructions.push_back(instruction(OpCode::OptimizerStep, -1));
       },
       {"schedule.stages[1]: 2 optimizer_step instructions"}},
      // predictions
      {"PredictionStageCountMismatch",
       [](PlanSpec& s) { s.stage_predictions.pop_back(); },
       {"predictions.stages: 1 entry, but the plan has 2 pipeline stages"}},
      {"PredictionStageIndexWrong",
       [](PlanSpec& s) { s.stage_predictions[1].stage = 3; },
       {"predictions.stages[1].stage: 3"}},
      {"PredictionBubbleRatioAboveOne",
       [](PlanSpec& s) { s.bubble_ratio = 1.5; },
       {"predictions.bubble_ratio: 1.5; must be in [0, 1]"}},
      {"PredictionStepSecondsNegative",
       [](PlanSpec& s) { s.step_seconds = -1; },
       {"predictions.step_seconds: -1"}},
      {"PredictionForwardSecondsNegative",
       [](PlanSpec& s) { s.stage_predictions[0].forward_seconds = -2; },
       {"predictions.stages[0].forward_seconds: -2"}},
      // The runtime's memory report and autotune read every stage's memory.
      {"PredictionWithoutMemory",
       [](PlanSpec& s) { s.stage_predictions[1].has_memory = false; },
       {"predictions.stages[1].memory: missing; every stage's prediction needs its memory "
        "breakdown"}},
      // Replay measures against the memory less the reserve, a part of transient.
      {"PredictionTransientReserveAboveTransient",
       [](PlanSpec& s) {
         s.stage_predictions[0].transient = 100;
         s.stage_predictions[0].transient_reserve = 101;
       },
       {"predictions.stages[0].memory.transient_reserve: 101; must be at most transient (100)"}},
  };
  return cases;
}

class ViolationTest : public ::testing::TestWithParam<ViolationCase> {};

TEST_P(ViolationTest, IsReportedWithItsField) {
  expect_reported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(OneBrokenField, ViolationTest, ::testing::ValuesIn(violation_cases()),
                         [](const ::testing::TestParamInfo<ViolationCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace paraplan
