// plan_validate_bounds_test.cc: validate_plan on strings that are not UTF-8
// (`inspect --json` prints every string) and on sizes and counts past their
// bounds (schema/model_limits.h), one broken field at a time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "schema/plan_test_support.h"
#include "schema/plan_validate_test_support.h"

namespace paraplan {
namespace {

using test_plans::PlanSpec;
using test_plans::ViolationCase;

const std::vector<ViolationCase>& bound_cases() {
  static const std::vector<ViolationCase> cases = {
      // strings: `inspect --json` prints them, so each must be UTF-8
      {"TaskNameNotUtf8",
       [](PlanSpec& s) { s.task_name = "job\xff"; },
       {"header.task_name: byte 0xff at offset 3 is not valid UTF-8; plan strings must be UTF-8"}},
      {"CreationOptionOverlongUtf8",
       [](PlanSpec& s) { s.creation_options[1].second = "\xc0\xaf"; },
       {"header.creation_options[1].value: byte 0xc0 at offset 0 is not valid UTF-8"}},
      {"DataPathNotUtf8",
       [](PlanSpec& s) {
         s.has_data = true;
         s.data_train = {{"/data/a.bin", 1.0}, {"/data/\xff.bin", 1.0}};
       },
       {"training.data.train[1].paths: byte 0xff at offset 6 is not valid UTF-8"}},
      {"ValidationPathNotUtf8",
       [](PlanSpec& s) {
         s.has_data = true;
         s.data_train = {{"/data/a.bin", 1.0}};
         s.data_validation = "/data/v\xfe.bin";
       },
       {"training.data.validation: byte 0xfe at offset 7 is not valid UTF-8"}},
      {"ClusterNameSurrogate",
       [](PlanSpec& s) { s.cluster_name = "gpu\xed\xa0\x80"; },
       {"predictions.cluster.name: byte 0xa0 at offset 4 is not valid UTF-8"}},
      // sizes: bounded before anything is allocated for them (schema/model_limits.h)
      {"DModelAboveLimit",
       [](PlanSpec& s) { s.d_model = 16'777'344; },
       {"model.d_model: 16777344; must be at most 16777216 (2^24)"}},
      {"FfnSizeAboveLimit",
       [](PlanSpec& s) { s.ffn_size = 2'147'483'647; },
       {"model.ffn_size: 2147483647; must be at most 16777216"}},
      {"NumLayersAboveLimit",
       [](PlanSpec& s) { s.num_layers = 5000; },
       {"model.num_layers: 5000; must be at most 4096"}},
      {"PipelineStagesAboveLimit",
       [](PlanSpec& s) { s.pipeline_parallel = 300; },
       {"mesh.pipeline_parallel: 300; must be at most 256"}},
      {"MeshDegreesOverflowInt64",
       [](PlanSpec& s) {
         s.pipeline_parallel = s.data_parallel = s.tensor_parallel = 2'147'483'647;
       },
       {"mesh: pipeline_parallel 2147483647 x data_parallel 2147483647 x tensor_parallel "
        "2147483647 = more than 9223372036854775807 ranks"}},
      {"MicroBatchRowsAboveInt",
       [](PlanSpec& s) { s.micro_batch_size = 67'108'864; },
       {"training.micro_batch_size: 67108864; training.micro_batch_size x model.seq_len = "
        "67108864 x 64 = 4294967296 rows, more than the 2147483647"}},
      {"EvalBatchesAboveTheBound",
       [](PlanSpec& s) { s.eval_batches = 65537; },
       {"training.eval_batches: 65537; must be at most 65536 global batches per evaluation"}},
      {"EvalBatchesZero",  // the runtime would read 1 without a word
       [](PlanSpec& s) { s.eval_batches = 0; },
       {"training.eval_batches: 0; must be in 1..65536 global batches per evaluation"}},
      {"EvalIntervalAboveTheBound",
       [](PlanSpec& s) { s.eval_interval = 2147483647; },
       {"training.eval_interval: 2147483647; must be at most 2147483646 steps"}},
      {"TotalStepsAboveTheBound",
       [](PlanSpec& s) { s.total_steps = 2147483647; },
       {"training.optimizer.total_steps: 2147483647; must be in 1..2147483646"}},
  };
  return cases;
}

class BoundViolationTest : public ::testing::TestWithParam<ViolationCase> {};

TEST_P(BoundViolationTest, IsReportedWithItsField) {
  test_plans::expect_reported(GetParam());
}

INSTANTIATE_TEST_SUITE_P(OneBrokenField, BoundViolationTest, ::testing::ValuesIn(bound_cases()),
                         [](const ::testing::TestParamInfo<ViolationCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace paraplan
