// cbc_library_test.cc: CBC (cbc_library.h; and OpenBLAS, which it brings) is
// opened by the first ILP solve, not at start-up, and the ILP still solves.
#include <gtest/gtest.h>

#include <string>

#include "common/shared_library.h"
#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

// ctest runs each test in its own process: nothing has solved an ILP here.
TEST(CbcLibrary, IsOpenedByTheFirstIlpSolve) {
  EXPECT_FALSE(process_has_mapped("libCbcSolver")) << "linked, or opened at start-up";
  EXPECT_FALSE(process_has_mapped("libopenblas"));
  // 8 blocks on 4 devices: pipelines whose partitions the ILP solves.
  JobConfig config = parse_job_config("", "cbc.toml",
                                      {{"model.num_layers", "8"},
                                       {"model.d_model", "64"},
                                       {"model.num_heads", "4"},
                                       {"model.seq_len", "32"},
                                       {"model.vocab_size", "128"},
                                       {"training.global_batch_size", "8"},
                                       {"training.total_steps", "10"},
                                       {"cluster.num_nodes", "1"},
                                       {"cluster.devices_per_node", "4"},
                                       {"planner.solver", "ilp"}});
  const SearchResult ilp = search_plans(config);
  ASSERT_FALSE(ilp.ranked.empty());
  EXPECT_TRUE(process_has_mapped("libCbcSolver")) << "no partition went through the ILP";
  // The dynamic program finds the same best step.
  apply_override(config, "planner.solver", "dp");
  const double best = search_plans(config).ranked.front().estimate.prediction.step_seconds;
  EXPECT_NEAR(ilp.ranked.front().estimate.prediction.step_seconds, best, best * 1e-9);
}

}  // namespace
}  // namespace paraplan
