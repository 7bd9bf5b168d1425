// plan_validate_test.cc: validate_plan on valid plans of several shapes and on one
// broken field at a time, checking that each violation names its field and says
// what is wrong and what would be valid (strings, and sizes and counts past
// their bounds: plan_validate_bounds_test.cc).
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
  using M = schema::RecomputeMode;
  static const std::vector<ViolationCase> cases = {
      {"MissingHeader", [](PlanSpec& s) { s.has_header = false; }, {"header: missing"}},
      {"MissingModel", [](PlanSpec& s) { s.has_model = false; }, {"model: missing"}},
      {"MissingTraining", [](PlanSpec& s) { s.has_training = false; }, {"training: missing"}},
      {"MissingOptimizer",
       [](PlanSpec& s) { s.has_optimizer = false; },
       {"training.optimizer: missing"}},
      {"MissingMesh", [](PlanSpec& s) { s.has_mesh = false; }, {"mesh: missing"}},
      {"MissingStages", [](PlanSpec& s) { s.has_stages = false; }, {"stages: missing"}},
      {"MissingZero", [](PlanSpec& s) { s.has_zero = false; }, {"zero: missing"}},
      {"MissingSchedule", [](PlanSpec& s) { s.has_schedule = false; }, {"schedule: missing"}},
      {"SchemaVersion",
       [](PlanSpec& s) { s.schema_version = 12; },
       {"header.schema_version: 12", "reads versions 1 to 11"}},
      {"DataSourceWithoutPaths",
       [](PlanSpec& s) {
         s.has_data = true;
         s.data_train = {{"a_*.bin", 0.7}, {"", -1.0}};
       },
       {"training.data.train[1].paths: empty; give a token file, a glob"}},
      {"DataSourceWeightNotPositive",
       [](PlanSpec& s) {
         s.has_data = true;
         s.data_train = {{"a_*.bin", -1.0}};
       },
       {"training.data.train[0].weight: -1; must be a positive finite number"}},
      // model
      {"VocabSizeZero",
       [](PlanSpec& s) { s.vocab_size = 0; },
       {"model.vocab_size: 0; must be positive"}},
      {"SeqLenNegative", [](PlanSpec& s) { s.seq_len = -4; }, {"model.seq_len: -4"}},
      {"NumLayersZero", [](PlanSpec& s) { s.num_layers = 0; }, {"model.num_layers: 0"}},
      {"NumHeadsZero", [](PlanSpec& s) { s.num_heads = 0; }, {"model.num_heads: 0"}},
      {"FfnSizeZero", [](PlanSpec& s) { s.ffn_size = 0; }, {"model.ffn_size: 0"}},
      {"DModelNotMultipleOfHeads",
       [](PlanSpec& s) { s.d_model = 66; },
       {"model.d_model: 66 is not divisible by num_heads 4"}},
      {"Gpt2WithGroupedKvHeads",
       [](PlanSpec& s) { s.num_kv_heads = 2; },
       {"model.num_kv_heads: 2; gpt2 has multi-head attention"}},
      {"LlamaKvHeadsNotDividingHeads",
       [](PlanSpec& s) {
         s.architecture = schema::Architecture::Llama;
         s.num_kv_heads = 3;
       },
       {"model.num_kv_heads: 3 does not divide num_heads 4"}},
      {"LlamaOddHeadDim",
       [](PlanSpec& s) {
         s.architecture = schema::Architecture::Llama;
         s.d_model = 68;
       },
       {"model.d_model: 68 / num_heads 4 is an odd head_dim", "rotary"}},
      {"LlamaRopeThetaZero",
       [](PlanSpec& s) {
         s.architecture = schema::Architecture::Llama;
         s.rope_theta = 0;
       },
       {"model.rope_theta: 0"}},
      {"UnknownArchitecture",
       [](PlanSpec& s) { s.architecture = schema::Architecture(9); },
       {"model.architecture: unknown value 9", "gpt2"}},
      {"UnknownDType",
       [](PlanSpec& s) { s.dtype = schema::DType(5); },
       {"model.dtype: unknown value 5", "bfloat16"}},
      {"LayernormEpsilonZero",
       [](PlanSpec& s) { s.layernorm_epsilon = 0; },
       {"model.layernorm_epsilon: 0"}},
      // training
      {"GlobalBatchMismatch",
       [](PlanSpec& s) { s.global_batch_size = 12; },
       {"training.global_batch_size: 12, but micro_batch_size 2 x num_micro_batches 4 x "
        "mesh.data_parallel 2 = 16"}},
      {"MicroBatchSizeZero",
       [](PlanSpec& s) { s.micro_batch_size = 0; },
       {"training.micro_batch_size: 0"}},
      {"NumMicroBatchesZero",
       [](PlanSpec& s) { s.num_micro_batches = 0; },
       {"training.num_micro_batches: 0"}},
      {"EvalBatchesNegative",
       [](PlanSpec& s) { s.eval_batches = -1; },
       {"training.eval_batches: -1"}},
      {"LearningRateNegative",
       [](PlanSpec& s) { s.learning_rate = -0.1f; },
       {"training.optimizer.learning_rate: -0.1"}},
      {"LearningRateNan",
       [](PlanSpec& s) { s.learning_rate = std::nanf(""); },
       {"training.optimizer.learning_rate: nan"}},
      {"MinLearningRateAboveLearningRate",
       [](PlanSpec& s) { s.min_learning_rate = 0.01f; },
       {"training.optimizer.min_learning_rate: 0.01 is above learning_rate 0.0003"}},
      {"Beta1One",
       [](PlanSpec& s) { s.beta1 = 1.0f; },
       {"training.optimizer.beta1: 1; must be in [0, 1)"}},
      {"Beta2Negative", [](PlanSpec& s) { s.beta2 = -0.5f; }, {"training.optimizer.beta2: -0.5"}},
      {"EpsilonZero", [](PlanSpec& s) { s.epsilon = 0; }, {"training.optimizer.epsilon: 0"}},
      {"WeightDecayNegative",
       [](PlanSpec& s) { s.weight_decay = -1; },
       {"training.optimizer.weight_decay: -1"}},
      {"GradClipNegative",
       [](PlanSpec& s) { s.grad_clip = -1; },
       {"training.optimizer.grad_clip: -1"}},
      {"WarmupNegative",
       [](PlanSpec& s) { s.warmup_steps = -5; },
       {"training.optimizer.warmup_steps: -5"}},
      {"TotalStepsZero",
       [](PlanSpec& s) { s.total_steps = 0; },
       {"training.optimizer.total_steps: 0; must be in 1..2147483646"}},
      {"UnknownDecayStyle",
       [](PlanSpec& s) { s.decay_style = schema::LrDecayStyle(8); },
       {"training.optimizer.decay_style: unknown value 8"}},
      // mesh
      {"MeshDoesNotFillDevices",
       [](PlanSpec& s) {
         s.data_parallel = 1;
         s.num_nodes = 1;
         s.devices_per_node = 2;
         s.global_batch_size = 8;
       },
       {"mesh: pipeline_parallel 2 x data_parallel 1 x tensor_parallel 2 = 4 ranks, but "
        "num_nodes 1 x devices_per_node 2 = 2 devices"}},
      {"MeshDegreeZero",
       [](PlanSpec& s) { s.data_parallel = 0; },
       {"mesh.data_parallel: 0; must be at least 1"}},
      {"TensorParallelNotDividingHeads",
       [](PlanSpec& s) {
         s.tensor_parallel = 3;
         s.devices_per_node = 6;
       },
       {"mesh.tensor_parallel: 3 does not divide model.num_heads 4"}},
      {"TensorParallelNotDividingVocab",
       [](PlanSpec& s) { s.vocab_size = 511; },
       {"mesh.tensor_parallel: 2 does not divide model.vocab_size 511", "pad"}},
      {"TensorParallelNotDividingKvHeads",
       [](PlanSpec& s) {
         s.architecture = schema::Architecture::Llama;
         s.num_kv_heads = 1;
       },
       {"mesh.tensor_parallel: 2 does not divide model.num_kv_heads 1", "whole KV heads"}},
      {"TensorParallelNotDividingFfn",
       [](PlanSpec& s) { s.ffn_size = 255; },
       {"mesh.tensor_parallel: 2 does not divide model.ffn_size 255"}},
      {"TensorParallelAcrossNodes",
       [](PlanSpec& s) {
         s.tensor_parallel = 4;
         s.data_parallel = 1;
         s.num_nodes = 4;
         s.devices_per_node = 2;
         s.global_batch_size = 8;
       },
       {"mesh.tensor_parallel: 4 does not divide devices_per_node 2", "inside one node"}},
      // stages
      {"StageCountMismatch",
       [](PlanSpec& s) { s.stages.pop_back(); },
       {"stages: 1 entry, but mesh.pipeline_parallel is 2"}},
      {"StageIndexOutOfOrder",
       [](PlanSpec& s) { s.stages[1].index = 5; },
       {"stages[1].index: 5", "must be 1"}},
      {"StageLayerGap",
       [](PlanSpec& s) { s.stages[1].first_layer = 5; },
       {"stages[1].first_layer: 5", "must be 4"}},
      {"StagesCoverTooFewLayers",
       [](PlanSpec& s) {
         s.stages[1].num_layers = 3;
         s.stages[1].recompute.resize(3);
       },
       {"stages: cover layers [0, 7), but model.num_layers is 8"}},
      {"StageNumLayersNegative",
       [](PlanSpec& s) { s.stages[1].num_layers = -1; },
       {"stages[1].num_layers: -1"}},
      {"StageHoldsNothing",
       [](PlanSpec& s) {
         s = make_plan_spec(3, 1, 1, 8, 4);
         s.stages[1].num_layers = 0;
         s.stages[1].recompute.clear();
         s.stages[2].first_layer = s.stages[1].first_layer;
         s.stages[2].num_layers = 8 - s.stages[0].num_layers;
         s.stages[2].recompute.assign(s.stages[2].num_layers, M::None);
       },
       {"stages[1]: holds no layers and neither the embedding nor the head"}},
      {"RecomputeLengthMismatch",
       [](PlanSpec& s) { s.stages[0].recompute.pop_back(); },
       {"stages[0].recompute: 3 entries, but the stage has 4 layers"}},
      {"RecomputeUnknownMode",
       [](PlanSpec& s) { s.stages[0].recompute[1] = M(5); },
       {"stages[0].recompute[1]: unknown value 5", "selective"}},
      {"EmbeddingOnLaterStage",
       [](PlanSpec& s) { s.stages[1].has_embedding = true; },
       {"stages[1].has_embedding: true", "only the first stage"}},
      {"EmbeddingMissing",
       [](PlanSpec& s) { s.stages[0].has_embedding = false; },
       {"stages[0].has_embedding: false"}},
      {"HeadOnEarlierStage",
       [](PlanSpec& s) { s.stages[0].has_head = true; },
       {"stages[0].has_head: true", "only the last stage"}},
      {"HeadMissing",
       [](PlanSpec& s) { s.stages[1].has_head = false; },
       {"stages[1].has_head: false"}},
      // zero
      {"ZeroStageFour",
       [](PlanSpec& s) { s.zero_stage = 4; },
       {"zero.stage: 4", "3 (parameters too)"}},
      {"ZeroStageNegative", [](PlanSpec& s) { s.zero_stage = -1; }, {"zero.stage: -1", "0 (off)"}},
      {"KeepGatheredWithoutZeroThree",
       [](PlanSpec& s) {
         s.zero_stage = 2;
         s.schedule[0].keep_parameters_gathered = true;
       },
       {"schedule.stages[0].keep_parameters_gathered: true", "only ZeRO-3"}},
      {"ZeroTwoStreamWithoutItsUnitOps",
       [](PlanSpec& s) {
         s.zero_stage = 2;
         s.add_zero_unit_ops = false;
       },
       {"schedule.stages[0].instructions: no reduce_scatter_gradients", "schema version 10"}},
      {"GatherUnderZeroTwo",
       [](PlanSpec& s) {
         s.zero_stage = 2;
         s.schedule[1].instructions.insert(
             s.schedule[1].instructions.begin(),
             schema::Instruction(OpCode::GatherParameters, 0, 1, 0, -1));
       },
       {"schedule.stages[1].instructions: instruction 0: gather_parameters under zero.stage 2",
        "only ZeRO-3 gathers parameters"}},
      {"ZeroThreeReadOfAReleasedUnit",
       [](PlanSpec& s) {
         s.zero_stage = 3;
         auto& stream = s.schedule[1].instructions;
         s.schedule[1].instructions = test_plans::with_zero_unit_ops(s, s.schedule[1]);
         s.add_zero_unit_ops = false;
         // Drop the first gather: the stage's first forward reads its unit 0 ungathered.
         stream.erase(std::find_if(stream.begin(), stream.end(), [](const schema::Instruction& i) {
           return i.op() == OpCode::GatherParameters;
         }));
       },
       {"schedule.stages[1].instructions: instruction",
        "reads unit 0 of chunk 0, which no "
        "gather_parameters"}},
      {"ZeroGroupsZero", [](PlanSpec& s) { s.zero_num_groups = 0; }, {"zero.num_groups: 0"}},
      {"ZeroLayersPerUnitZero",
       [](PlanSpec& s) {
         s.zero_stage = 2;
         s.zero_layers_per_unit = 0;
       },
       {"zero.layers_per_unit: 0; must be at least 1"}},
      {"ZeroLayersPerUnitBelowZeroTwo",
       [](PlanSpec& s) { s.zero_layers_per_unit = 2; },
       {"zero.layers_per_unit: 2 under zero.stage 0; units of several layers are ZeRO-2 and 3's"}},
      {"ZeroLayersPerUnitAboveTheLayers",
       [](PlanSpec& s) {
         s.zero_stage = 3;
         s.zero_layers_per_unit = 9;
       },
       {"zero.layers_per_unit: 9 exceeds model.num_layers 8; at most that"}},
      {"ZeroGroupsNotDividingDataParallel",
       [](PlanSpec& s) {
         s.zero_stage = 1;
         s.zero_num_groups = 3;
       },
       {"zero.num_groups: 3 does not divide mesh.data_parallel 2"}},
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
