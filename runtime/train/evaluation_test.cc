// evaluation_test.cc: how many global batches an evaluation reads
// (evaluation.h): eval_batches, at most one pass over the validation data,
// at least one batch; and the line that says when eval_batches was cut or
// the data holds less than one batch.
#include "runtime/train/evaluation.h"

#include <gtest/gtest.h>

#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

// A plan whose global batch is 8 sequences, asking for eval_batches.
LoadedPlan plan_asking_for(int32_t eval_batches) {
  test_plans::PlanSpec spec = test_plans::make_plan_spec(1, 1, 1, 2, 4);
  spec.eval_batches = eval_batches;
  return load_plan_from_bytes("job.pplan", test_plans::build_plan(spec));
}

TEST(Evaluation, ReadsAtMostOnePassOfTheValidationData) {
  // 183 validation samples: 22 whole global batches of 8.
  for (const int32_t asked : {65536, 23, 22, 5, 1}) {
    const LoadedPlan plan = plan_asking_for(asked);
    ASSERT_EQ(plan.plan().training()->global_batch_size(), 8);
    EXPECT_EQ(evaluation_batches(*plan.plan().training(), 183), std::min(asked, 22)) << asked;
  }
  // Less than a global batch: one batch, which wraps around the data.
  EXPECT_EQ(evaluation_batches(*plan_asking_for(10).plan().training(), 5), 1);
}

TEST(Evaluation, SaysOnceWhenEvalBatchesAskedForMoreThanOnePass) {
  EXPECT_EQ(evaluation_batches_note(*plan_asking_for(65536).plan().training(), 183,
                                    "--val-data data/val.bin"),
            "evaluation: training.eval_batches = 65536 asks for more than one pass over "
            "--val-data data/val.bin (183 samples = 22 global batches of 8): each evaluation "
            "reads 22 batch(es), one pass");
  EXPECT_EQ(evaluation_batches_note(*plan_asking_for(22).plan().training(), 183, "val"), "");
  // Less than one global batch: said whatever eval_batches asks, 1 included.
  for (const int32_t asked : {1, 65536})
    EXPECT_EQ(
        evaluation_batches_note(*plan_asking_for(asked).plan().training(), 5, "[data] validation"),
        "evaluation: [data] validation holds 5 samples, fewer than one global batch of 8: "
        "each evaluation reads 1 batch, which wraps around them")
        << asked;
  EXPECT_EQ(evaluation_batches_note(*plan_asking_for(1).plan().training(), 8, "val"), "");
}

}  // namespace
}  // namespace paraplan
