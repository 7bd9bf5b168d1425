// replan_test.cc: a saved plan's job planned again for fewer nodes (replan.h):
// the same job for the same nodes gives the same plan; for fewer nodes the
// mesh fits them and the training options stand; the data keeps the plan's
// absolute paths; plans without recorded options are refused by name.
#include "planner/replan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "planner/planner_test_support.h"
#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

// Two nodes of 4 devices, the degrees fixed by the user (dp 4 x tp 2): a
// replan must search them again.
JobConfig two_node_job() {
  return test_jobs::eight_device_job({{"planner.world_size", "8"},
                                      {"cluster.devices_per_node", "4"},
                                      {"cluster.num_nodes", "2"},
                                      {"planner.tensor_parallel_degree", "2"},
                                      {"planner.data_parallel_degree", "4"},
                                      {"training.seed", "77"},
                                      {"training.learning_rate", "0.0003"},
                                      {"data.train", "/corpus/shard_*.bin"},
                                      {"data.shuffle", "true"}});
}

LoadedPlan planned(const JobConfig& config) {
  return load_plan_from_bytes("job.pplan", plan_job(config).plan);
}

TEST(Replan, TheSameNodesGiveTheSamePlan) {
  const JobConfig job = test_jobs::eight_device_job();
  const LoadedPlan original = planned(job);
  const LoadedPlan again =
      load_plan_from_bytes("again.pplan", replan_for_nodes(original.plan(), "job.pplan", 1).plan);
  const schema::Mesh& a = *original.plan().mesh();
  const schema::Mesh& b = *again.plan().mesh();
  EXPECT_EQ(a.pipeline_parallel(), b.pipeline_parallel());
  EXPECT_EQ(a.data_parallel(), b.data_parallel());
  EXPECT_EQ(a.tensor_parallel(), b.tensor_parallel());
  EXPECT_EQ(original.plan().training()->micro_batch_size(),
            again.plan().training()->micro_batch_size());
  EXPECT_DOUBLE_EQ(original.plan().predictions()->step_seconds(),
                   again.plan().predictions()->step_seconds());
}

// A relative profile_dir or partition_constraints_path meant the directory
// `paraplan plan` ran in: the plan records them absolute, so a re-plan from
// another directory (the launcher's restart) reads the same files.
TEST(Replan, RelativePlannerPathsAreRecordedAbsolute) {
  const JobConfig job = test_jobs::eight_device_job({{"planner.profile_dir", "prof/../measured"}});
  const LoadedPlan original = planned(job);
  std::string recorded;
  for (const schema::KeyValue* option : *original.plan().header()->creation_options())
    if (option->key()->str() == "planner.profile_dir") recorded = option->value()->str();
  const std::string expected = (std::filesystem::current_path() / "measured").string();
  EXPECT_EQ(recorded, expected);
  EXPECT_EQ(job_for_nodes(original.plan(), "job.pplan", 1).planner.profile_dir, expected);
  // Reusing the plan from the same directory finds no difference in it.
  for (const auto& [key, value] : recorded_job_options(job)) {
    if (key == "planner.profile_dir") {
      EXPECT_EQ(value, expected);
    }
  }
}

// A constraints file named relative to where `paraplan plan` ran is the file
// a re-plan from another directory reads (it would fail to read it else),
// and it still narrows the search there.
TEST(Replan, ARelativeConstraintsFileIsReadAgainFromAnotherDirectory) {
  const std::filesystem::path made_in = std::filesystem::path(::testing::TempDir()) / "plan_here";
  std::filesystem::create_directories(made_in);
  std::ofstream(made_in / "constraints.toml")
      << "[[constraint]]\nmodule = \"transformer.h\"\ntensor_parallel = [1]\n";
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(made_in);
  const LoadedPlan original = planned(
      test_jobs::eight_device_job({{"planner.partition_constraints_path", "constraints.toml"}}));
  std::filesystem::current_path(made_in.parent_path());  // the launcher runs elsewhere
  PlanOutcome again;
  try {
    again = replan_for_nodes(original.plan(), "job.pplan", 1);
  } catch (const std::exception& error) {
    ADD_FAILURE() << error.what();
  }
  std::filesystem::current_path(before);
  EXPECT_EQ(job_for_nodes(original.plan(), "job.pplan", 1).planner.partition_constraints_path,
            (made_in / "constraints.toml").string());
  ASSERT_FALSE(again.plan.empty());
  EXPECT_EQ(load_plan_from_bytes("again.pplan", again.plan).plan().mesh()->tensor_parallel(), 1);
}

TEST(Replan, FewerNodesGetAMeshThatFitsThemAndKeepTheTraining) {
  const LoadedPlan original = planned(two_node_job());
  ASSERT_EQ(original.plan().mesh()->num_nodes(), 2);
  ASSERT_EQ(original.plan().mesh()->data_parallel(), 4);
  const JobConfig survivors = job_for_nodes(original.plan(), "job.pplan", 1);
  EXPECT_EQ(survivors.cluster.num_nodes, 1);
  EXPECT_EQ(survivors.cluster.devices_per_node, 4);
  EXPECT_EQ(survivors.training.global_batch_size, 16);
  EXPECT_EQ(survivors.training.seed, 77u);
  EXPECT_FLOAT_EQ(survivors.training.learning_rate, 0.0003f);
  ASSERT_EQ(survivors.data.train.size(), 1u);
  EXPECT_EQ(survivors.data.train[0].path, "/corpus/shard_*.bin");
  EXPECT_TRUE(survivors.data.shuffle);

  const LoadedPlan replanned =
      load_plan_from_bytes("lost.pplan", replan_for_nodes(original.plan(), "job.pplan", 1).plan);
  const schema::Mesh& mesh = *replanned.plan().mesh();
  EXPECT_EQ(mesh.num_nodes(), 1);
  EXPECT_EQ(mesh.pipeline_parallel() * mesh.data_parallel() * mesh.tensor_parallel(), 4);
  const schema::Training& training = *replanned.plan().training();
  EXPECT_EQ(training.global_batch_size(), 16);
  EXPECT_EQ(training.seed(), 77u);
  EXPECT_EQ(training.micro_batch_size() * training.num_micro_batches() * mesh.data_parallel(), 16);
  EXPECT_GT(replanned.plan().predictions()->step_seconds(),
            original.plan().predictions()->step_seconds());
}

// A job that fixed its ZeRO stage is planned again with it: the restart of
// a ZeRO-2 run goes on sharding its gradients, on the data-parallel ranks
// left.
TEST(Replan, AFixedZeroStageIsKeptOnTheNodesLeft) {
  JobConfig job = test_jobs::eight_device_job({{"planner.world_size", "8"},
                                               {"cluster.devices_per_node", "4"},
                                               {"cluster.num_nodes", "2"},
                                               {"planner.data_parallel_degree", "8"},
                                               {"planner.zero_stage", "2"}});
  const LoadedPlan original = planned(job);
  ASSERT_EQ(original.plan().zero()->stage(), 2);
  const LoadedPlan replanned =
      load_plan_from_bytes("lost.pplan", replan_for_nodes(original.plan(), "job.pplan", 1).plan);
  EXPECT_EQ(replanned.plan().mesh()->num_nodes(), 1);
  EXPECT_EQ(replanned.plan().mesh()->data_parallel(), 4);
  EXPECT_EQ(replanned.plan().zero()->stage(), 2);
}

TEST(Replan, ValuesWhoseDefaultsComeFromOtherOptionsAreKept) {
  // Each equals JobConfig{}'s value, but not what the job's own defaults
  // would give: a tied Llama, a schedule decaying to 0, an H100 with no
  // reserve.
  const LoadedPlan original =
      planned(test_jobs::eight_device_job({{"model.architecture", "llama"},
                                           {"model.tied_embeddings", "true"},
                                           {"training.min_learning_rate", "0"},
                                           {"cluster.preset", "h100-sxm"},
                                           {"cluster.reserved_memory_gb", "0"}}));
  const JobConfig again = job_for_nodes(original.plan(), "job.pplan", 1);
  EXPECT_TRUE(again.model.tied_embeddings);
  EXPECT_EQ(again.training.min_learning_rate, 0.0);
  EXPECT_EQ(again.cluster.reserved_memory_gb, 0.0);
  EXPECT_EQ(again.model.architecture, schema::Architecture::Llama);
}

// Two blocks (at most 4 stages), 8 heads, a batch of 24, one device per
// node: 6 devices fit (dp 6), 5 fit no (pp, dp, tp), 4 do.
LoadedPlan six_one_device_nodes() {
  return planned(test_jobs::eight_device_job({{"model.num_layers", "2"},
                                              {"training.global_batch_size", "24"},
                                              {"planner.world_size", "6"},
                                              {"cluster.devices_per_node", "1"},
                                              {"cluster.num_nodes", "6"}}));
}

TEST(Replan, NodesLeftThatFitNoMeshGiveWayToTheMostThatDo) {
  const LoadedPlan original = six_one_device_nodes();
  const FallbackPlan fallback = plan_for_nodes_left(original.plan(), "job.pplan", 5);
  EXPECT_EQ(fallback.num_nodes, 4);
  ASSERT_EQ(fallback.passed_over.size(), 1u);
  EXPECT_NE(fallback.passed_over[0].find("5 nodes: job.pplan (the options it was planned with): "
                                         "no (pipeline, data, tensor) parallel mesh fits the world "
                                         "size 5"),
            std::string::npos)
      << fallback.passed_over[0];
  // With --min-nodes 5 nothing is left to try: the planner's own reason.
  try {
    plan_for_nodes_left(original.plan(), "job.pplan", 5, 0, 5);
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("no (pipeline, data, tensor) parallel mesh fits"),
              std::string::npos)
        << error.what();
  }
}

// However the original mesh was made, a re-plan is for the nodes and the
// devices per node it is given (the hosts left and their slots), and the
// what-if names the plan a restart would run. Each way made 2 nodes; one is
// lost.
TEST(Replan, EveryWayOfMakingTheMeshReplansOnTheDevicesLeft) {
  struct Way {
    const char* name;
    std::vector<ConfigOverride> options;
    int devices_per_node;  // what the plan's mesh (and so each host) has
  };
  const std::vector<Way> ways = {
      {"mesh_row x mesh_col",
       {{"planner.mesh_row", "2"},
        {"planner.mesh_col", "2"},
        {"planner.world_size", "4"},
        {"planner.pipeline_nstages", "2"},
        {"planner.tensor_parallel_degree", "2"}},
       2},
      {"[cluster]",
       {{"cluster.num_nodes", "2"}, {"cluster.devices_per_node", "2"}, {"planner.world_size", "4"}},
       2},
      {"a preset", {{"cluster.preset", "h100-sxm"}, {"planner.world_size", "16"}}, 8},
      {"world_size alone", {{"planner.world_size", "16"}}, 8},
  };
  for (const Way& way : ways) {
    const LoadedPlan original = planned(test_jobs::eight_device_job(way.options));
    ASSERT_EQ(original.plan().mesh()->num_nodes(), 2) << way.name;
    ASSERT_EQ(original.plan().mesh()->devices_per_node(), way.devices_per_node) << way.name;
    const FallbackPlan fallback =
        plan_for_nodes_left(original.plan(), "job.pplan", 1, way.devices_per_node);
    const LoadedPlan replanned = load_plan_from_bytes("lost.pplan", fallback.outcome.plan);
    const schema::Mesh& mesh = *replanned.plan().mesh();
    EXPECT_EQ(mesh.num_nodes(), 1) << way.name;
    EXPECT_EQ(mesh.devices_per_node(), way.devices_per_node) << way.name;
    EXPECT_EQ(mesh.pipeline_parallel() * mesh.data_parallel() * mesh.tensor_parallel(),
              way.devices_per_node)
        << way.name;
    const std::string what_if = what_if_lost_nodes(original.plan(), "job.pplan", 1);
    EXPECT_NE(what_if.find(plan_summary(replanned.plan())), std::string::npos)
        << way.name << ": " << what_if;
    std::printf("[ figures  ] %s: %s -> %s\n", way.name, plan_summary(original.plan()).c_str(),
                plan_summary(replanned.plan()).c_str());
    // Hosts with other slots than the plan's nodes had (more, or fewer than
    // a preset's 8): planned for theirs, whatever the options said.
    const int other = way.devices_per_node == 2 ? 4 : 2;
    const LoadedPlan resized = load_plan_from_bytes(
        "resized.pplan", plan_for_nodes_left(original.plan(), "job.pplan", 2, other).outcome.plan);
    EXPECT_EQ(resized.plan().mesh()->num_nodes(), 2) << way.name;
    EXPECT_EQ(resized.plan().mesh()->devices_per_node(), other) << way.name;
  }
}

TEST(Replan, APlanWithoutRecordedOptionsIsRefusedByName) {
  test_plans::PlanSpec spec = test_plans::make_plan_spec(1, 1, 1, 2, 1);
  spec.creation_options.clear();
  const LoadedPlan bare = load_plan_from_bytes("old.pplan", test_plans::build_plan(spec));
  try {
    job_for_nodes(bare.plan(), "old.pplan", 1);
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("old.pplan: the plan records no job options"),
              std::string::npos)
        << error.what();
  }
}

TEST(Replan, AWhatIfDecidesAsTheWholePlanWould) {
  // The what-if searches only; a restart writes the plan. Same counts tried,
  // same decisions, the same predicted step; the what-if holds no plan.
  const LoadedPlan original = six_one_device_nodes();
  for (const int nodes_left : {5, 3}) {
    const FallbackPlan whole = plan_for_nodes_left(original.plan(), "job.pplan", nodes_left);
    const FallbackPlan decided = plan_for_nodes_left(original.plan(), "job.pplan", nodes_left, 0, 1,
                                                     FallbackDepth::kDecisionsOnly);
    const LoadedPlan written = load_plan_from_bytes("fallback.pplan", whole.outcome.plan);
    EXPECT_EQ(plan_summary(decided.decisions), plan_summary(written.plan())) << nodes_left;
    EXPECT_EQ(plan_summary(whole.decisions), plan_summary(written.plan())) << nodes_left;
    EXPECT_EQ(decided.decisions.step_seconds, written.plan().predictions()->step_seconds());
    EXPECT_EQ(decided.num_nodes, whole.num_nodes);
    EXPECT_EQ(decided.passed_over, whole.passed_over);
    EXPECT_TRUE(decided.outcome.plan.empty());
  }
}

}  // namespace
}  // namespace paraplan
