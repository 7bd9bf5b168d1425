// plan_validate_fields_test.cc: validate_plan on one broken field at a time
// of a plan's header, model, training, mesh, stages and ZeRO settings, each
// violation naming its field, the problem and what would be valid (the
// schedule's and predictions' fields: plan_validate_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "schema/plan_test_support.h"
#include "schema/plan_validate_test_support.h"

namespace paraplan {
namespace {

using schema::OpCode;
using test_plans::expect_reported;
using test_plans::make_plan_spec;
using test_plans::PlanSpec;
using test_plans::ViolationCase;

// One broken field on a valid 2-stage, dp 2, tp 2, 8-layer, 4-micro-batch 1F1B plan.
const std::vector<ViolationCase>& field_cases() {
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
       [](PlanSpec& s) { s.schema_version = 14; },
       {"header.schema_version: 14", "reads versions 1 to 13"}},
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
      {"Gpt2WithQkvBias",
       [](PlanSpec& s) { s.qkv_bias = true; },
       {"model.qkv_bias: true; a llama field"}},
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
      {"WarmupStableDecayWithoutDecaySteps",
       [](PlanSpec& s) { s.decay_style = schema::LrDecayStyle::WarmupStableDecay; },
       {"training.optimizer.wsd_decay_steps: 0; must be in 1..990 (the steps after warm-up)"}},
      {"WarmupStableDecayLongerThanTheSteps",
       [](PlanSpec& s) {
         s.decay_style = schema::LrDecayStyle::WarmupStableDecay;
         s.wsd_decay_steps = 991;
       },
       {"training.optimizer.wsd_decay_steps: 991; must be in 1..990"}},
      {"UnknownWsdDecayStyle",
       [](PlanSpec& s) {
         s.decay_style = schema::LrDecayStyle::WarmupStableDecay;
         s.wsd_decay_steps = 100;
         s.wsd_decay_style = schema::WsdDecayStyle(7);
       },
       {"training.optimizer.wsd_decay_style: unknown value 7; valid are linear (0), cosine (1) "
        "and minus_sqrt (2)"}},
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
  };
  return cases;
}

class FieldViolationTest : public ::testing::TestWithParam<ViolationCase> {};

TEST_P(FieldViolationTest, IsReportedWithItsField) {
  expect_reported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(OneBrokenField, FieldViolationTest, ::testing::ValuesIn(field_cases()),
                         [](const ::testing::TestParamInfo<ViolationCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace paraplan
