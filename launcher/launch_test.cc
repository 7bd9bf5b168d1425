// launch_test.cc: tests of `paraplan launch`: hostfile parsing and its errors, the
// check of hosts against the plan's mesh, the exact mpirun argument lists, the
// environment passthrough, --dry-run output and a missing mpirun.
#include "launcher/launch.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "runtime/testing/test_temp_dir.h"
#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using Strings = std::vector<std::string>;

// How every command over a hostfile starts: mpirun -np N --hostfile F --map-by
// slot --bind-to none, then `rest`.
Strings hostfile_command(const std::string& ranks, const std::string& hostfile,
                         const Strings& rest) {
  Strings command = {"mpirun",   "-np",  ranks,       "--hostfile", hostfile,
                     "--map-by", "slot", "--bind-to", "none"};
  command.insert(command.end(), rest.begin(), rest.end());
  return command;
}

// The error message of calling f, or "" if it did not throw.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

class LaunchTest : public ::testing::Test {
 protected:
  // A valid plan of pp x dp x tp on pp nodes of dp * tp devices.
  std::string write_plan_file(int pp, int dp, int tp, const std::string& name = "job.pplan") {
    const test_plans::PlanSpec spec = test_plans::make_plan_spec(pp, dp, tp, 4, 4);
    const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
    const std::string path = (directory_.path() / name).string();
    write_plan(path, bytes.data(), bytes.size());
    return path;
  }
  std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = (directory_.path() / name).string();
    std::ofstream(path) << text;
    return path;
  }
  testing::TempDir directory_;
};

// ------------------------------------------------------------------ hostfiles

TEST(LaunchHostfile, ReadsOpenMpiAndDeepSpeedLinesCommentsAndBlankLines) {
  const std::vector<HostEntry> hosts = parse_hostfile_text(
      "# two nodes\n"
      "\n"
      "node-a slots=4\n"
      "  node-b\tslots=4 max_slots=8   # trailing comment\n"
      "   \n",
      "hosts");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].name, "node-a");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[0].line, 3);
  EXPECT_EQ(hosts[1].name, "node-b");
  EXPECT_EQ(hosts[1].slots, 4);
  EXPECT_EQ(hosts[1].line, 4);
}

TEST(LaunchHostfile, ErrorsNameTheFileAndTheLine) {
  EXPECT_EQ(error_of([] { parse_hostfile_text("a slots=4\n# b\nc slots=x\n", "hosts"); }),
            "hosts:3: 'slots=x' is not a number");
  EXPECT_EQ(error_of([] { parse_hostfile_text("a slots=0\n", "hosts"); }),
            "hosts:1: 'slots=0' must be at least 1");
  EXPECT_EQ(error_of([] { parse_hostfile_text("a slots=-2\n", "hosts"); }),
            "hosts:1: 'slots=-2' is not a number");
  EXPECT_EQ(error_of([] { parse_hostfile_text("a\n", "hosts"); }),
            "hosts:1: host 'a' has no slots=N; write 'a slots=<devices per node>'");
  EXPECT_EQ(error_of([] { parse_hostfile_text("a slots=4 cpus=8\n", "hosts"); }),
            "hosts:1: unexpected 'cpus=8'; a line is 'hostname slots=N' (optionally max_slots=M)");
  EXPECT_EQ(error_of([] { parse_hostfile_text("slots=4\n", "hosts"); }),
            "hosts:1: a line starts with the host name, got 'slots=4'; write 'hostname slots=N'");
  EXPECT_EQ(error_of([] { parse_hostfile_text("a slots=4\nb slots=4\na slots=4\n", "hosts"); }),
            "hosts:3: host 'a' is listed again (first on line 1); list each host once");
  EXPECT_EQ(error_of([] { parse_hostfile_text("# nothing\n\n", "hosts"); }),
            "hosts: no hosts listed; write one line 'hostname slots=N' per node");
}

TEST_F(LaunchTest, HostfileFromDiskAndAMissingOne) {
  const std::string path = write_file("hosts", "a slots=2\nb slots=x\n");
  EXPECT_EQ(error_of([&] { parse_hostfile(path); }), path + ":2: 'slots=x' is not a number");
  const std::string missing = (directory_.path() / "absent").string();
  EXPECT_EQ(error_of([&] { parse_hostfile(missing); }),
            missing + ": cannot read the hostfile: No such file or directory");
}

TEST(LaunchHostfile, MustMatchTheMeshOfThePlan) {
  const std::vector<HostEntry> two_by_four = parse_hostfile_text("a slots=4\nb slots=4\n", "hosts");
  EXPECT_NO_THROW(check_hosts_match_mesh(two_by_four, "hosts", 2, 4));
  EXPECT_EQ(error_of([&] { check_hosts_match_mesh(two_by_four, "hosts", 1, 4); }),
            "hosts: 2 hosts x 4 slots = 8 slots, but the plan needs 1 node x 4 devices; list 1 "
            "host with slots=4 each, or plan for this cluster (cluster.num_nodes, "
            "cluster.devices_per_node)");
  EXPECT_EQ(error_of([&] { check_hosts_match_mesh(two_by_four, "hosts", 2, 8); }),
            "hosts: 2 hosts x 4 slots = 8 slots, but the plan needs 2 nodes x 8 devices; list 2 "
            "hosts with slots=8 each, or plan for this cluster (cluster.num_nodes, "
            "cluster.devices_per_node)");
  const std::vector<HostEntry> uneven = parse_hostfile_text("a slots=4\nb slots=2\n", "hosts");
  EXPECT_EQ(error_of([&] { check_hosts_match_mesh(uneven, "hosts", 2, 4); }),
            "hosts: 2 hosts with 4 + 2 = 6 slots, but the plan needs 2 nodes x 4 devices; list 2 "
            "hosts with slots=4 each, or plan for this cluster (cluster.num_nodes, "
            "cluster.devices_per_node)");
}

// ------------------------------------------------------------------ the command

TEST_F(LaunchTest, TwoNodeCommandWithHostfile) {
  LaunchOptions options;
  options.plan_path = write_plan_file(2, 2, 2);  // 2 nodes x 4 devices
  options.hostfile = write_file("hosts", "node-a slots=4\nnode-b slots=4\n");
  options.command = {"train", "--data", "data/train.bin", "--steps", "5"};
  options.paraplan_binary = "/opt/paraplan/bin/paraplan";
  options.environment = Strings{"HOME=/root",
                                "PARAPLAN_LOG=debug",
                                "OMP_NUM_THREADS=2",
                                "OPENBLAS_NUM_THREADS=1",
                                "NCCL_DEBUG=INFO",
                                "CUDA_VISIBLE_DEVICES=0,1,2,3",
                                "CUDA_HOME=/usr/local/cuda",
                                "MY_OMP_THING=1"};
  EXPECT_EQ(build_launch_command(options),
            hostfile_command(
                "8", options.hostfile,
                {"-x", "NCCL_DEBUG", "-x", "OMP_NUM_THREADS", "-x", "OPENBLAS_NUM_THREADS", "-x",
                 "PARAPLAN_LOG", "/opt/paraplan/bin/paraplan", "train", "--plan", options.plan_path,
                 "--data", (std::filesystem::current_path() / "data/train.bin").string(), "--steps",
                 "5"}));
}

TEST(LaunchHosts, APlanOfSeveralNodesWithoutHostfileSaysItRunsHere) {
  EXPECT_EQ(single_machine_note(1, 8), "");
  EXPECT_EQ(single_machine_note(2, 8),
            "hosts: the plan is for 2 nodes x 8 devices, and without --hostfile its 16 ranks all "
            "start on this machine (--oversubscribe); give --hostfile to run them across the "
            "cluster");
}

TEST_F(LaunchTest, LocalCommandWithoutHostfile) {
  LaunchOptions options;
  options.plan_path = write_plan_file(2, 2, 1);
  options.command = {"replay", "--steps", "3"};
  options.paraplan_binary = "/bin/paraplan";
  options.mpirun = "/usr/bin/mpirun";
  options.environment = Strings{};
  EXPECT_EQ(
      build_launch_command(options),
      (Strings{"/usr/bin/mpirun", "-np", "4", "--oversubscribe", "--map-by", "slot", "--bind-to",
               "none", "/bin/paraplan", "replay", "--plan", options.plan_path, "--steps", "3"}));
}

TEST_F(LaunchTest, UsesThisExecutableAndThisEnvironmentByDefault) {
  LaunchOptions options;
  options.plan_path = write_plan_file(1, 1, 1);
  options.command = {"train"};
  setenv("PARAPLAN_LAUNCH_TEST", "1", 1);
  const Strings command = build_launch_command(options);
  unsetenv("PARAPLAN_LAUNCH_TEST");
  const auto binary = std::find(command.begin(), command.end(), "train") - 1;
  EXPECT_EQ(*binary, std::filesystem::read_symlink("/proc/self/exe").string());
  EXPECT_NE(std::find(command.begin(), command.end(), "PARAPLAN_LAUNCH_TEST"), command.end());
}

TEST_F(LaunchTest, KeepsThePlanTheCommandAlreadyNames) {
  LaunchOptions options;
  options.plan_path = write_plan_file(1, 2, 1);
  options.paraplan_binary = "paraplan";
  options.environment = Strings{};
  options.command = {"train", "--plan=" + options.plan_path, "--steps", "1"};
  const Strings command = build_launch_command(options);
  EXPECT_EQ(Strings(command.end() - 4, command.end()),
            (Strings{"train", "--plan=" + options.plan_path, "--steps", "1"}));

  const std::string other = write_plan_file(1, 2, 1, "other.pplan");
  options.command = {"train", "--plan", other};
  EXPECT_EQ(error_of([&] { build_launch_command(options); }),
            "launch: --plan " + options.plan_path + " but the command after -- has --plan " +
                other + "; give the plan once (launch adds it to the command)");
}

TEST_F(LaunchTest, RefusesOtherCommandsAndMismatchedHosts) {
  LaunchOptions options;
  options.plan_path = write_plan_file(1, 4, 1);  // 1 node x 4 devices
  options.environment = Strings{};
  options.paraplan_binary = "paraplan";
  options.command = {};
  EXPECT_EQ(error_of([&] { build_launch_command(options); }),
            "launch: nothing after --; give the command every rank runs, e.g. `paraplan launch "
            "--plan job.pplan -- train --data data/train.bin`");
  options.command = {"plan", "--config", "job.toml"};
  EXPECT_EQ(error_of([&] { build_launch_command(options); }),
            "launch: the command after -- must start with 'train', 'evaluate' or 'replay', got "
            "'plan'");
  options.command = {"train"};
  options.hostfile = write_file("hosts", "a slots=4\nb slots=4\n");
  EXPECT_EQ(error_of([&] { build_launch_command(options); }),
            options.hostfile +
                ": 2 hosts x 4 slots = 8 slots, but the plan needs 1 node x 4 devices; list 1 "
                "host with slots=4 each, or plan for this cluster (cluster.num_nodes, "
                "cluster.devices_per_node)");
  options.hostfile.clear();
  options.plan_path = (directory_.path() / "absent.pplan").string();
  EXPECT_NE(error_of([&] { build_launch_command(options); }).find("absent.pplan"),
            std::string::npos);
}

// CUDA_VISIBLE_DEVICES stays each host's own (a scheduler's per-node GPU
// list), unless --env names it; the job-wide CUDA settings go everywhere.
TEST(LaunchEnvironment, PassesParaplanOmpOpenblasNcclButNotVisibleDevices) {
  EXPECT_EQ(passthrough_variables({"PATH=/bin", "OMP_NUM_THREADS=4", "NCCL_IB_HCA=mlx5",
                                   "PARAPLAN_X=", "CUDA_VISIBLE_DEVICES=1", "CUDA_PATH=/c",
                                   "OPENBLAS_VERBOSE=2", "OMP_NUM_THREADS=4", "LD_OMP_X=1",
                                   "CUDA_DEVICE_MAX_CONNECTIONS=1", "CUDA_LAUNCH_BLOCKING=1",
                                   "=weird", "NOEQUALS"}),
            (Strings{"CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING", "NCCL_IB_HCA",
                     "OMP_NUM_THREADS", "OPENBLAS_VERBOSE", "PARAPLAN_X", "PATH"}));
  EXPECT_EQ(passthrough_variables({"CUDA_VISIBLE_DEVICES=1"}, {"CUDA_VISIBLE_DEVICES"}),
            (Strings{"CUDA_VISIBLE_DEVICES"}));
  EXPECT_EQ(passthrough_variables({"LD_LIBRARY_PATH=/opt/lib", "HOME=/root"}, {"HOME", "UCX_TLS"}),
            (Strings{"HOME", "LD_LIBRARY_PATH", "UCX_TLS"}));
}

// What a real cluster needs: mpirun's own options, the network launch chose,
// variables for every rank (--env), the user's OMPI_MCA_mca_base_env_list
// turned into -x (Open MPI refuses both at once), paths made absolute.
TEST_F(LaunchTest, MpirunArgumentsNetworkEnvironmentAndAbsolutePaths) {
  LaunchOptions options;
  options.plan_path = write_plan_file(2, 1, 2);
  options.hostfile = write_file("hosts", "node1 slots=2\nnode2 slots=2\n");
  options.paraplan_binary = "/opt/paraplan";
  options.command = {"train",
                     "--data=data/train.bin",
                     "--val-data",
                     "/abs/val.bin",
                     "--checkpoint-dir",
                     "./ckpt/../checkpoints",
                     "--init-from",
                     "hf/gpt2",
                     "--steps",
                     "5"};
  options.environment =
      Strings{"PATH=/usr/bin", "HOME=/root",      "UCX_TLS=tcp",
              "SECRET=1",      "FI_PROVIDER=efa", "OMPI_MCA_mca_base_env_list=FOO=bar;LD_PRELOAD"};
  options.mpirun_arguments = {"--mca", "plm_rsh_agent", "ssh -p 2222"};
  options.pass_environment = {"UCX_TLS", "MY_FLAG=on"};
  const LaunchAdditions additions{
      "10.77.0.0/24", {"PARAPLAN_SUPERVISOR=10.77.0.1:4000", "NCCL_SOCKET_IFNAME==eth0"}};
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(build_launch_command(options, additions),
            hostfile_command("4", options.hostfile,
                             {"--mca",
                              "btl_tcp_if_include",
                              "10.77.0.0/24",
                              "--mca",
                              "oob_tcp_if_include",
                              "10.77.0.0/24",
                              "--mca",
                              "plm_rsh_agent",
                              "ssh -p 2222",
                              "-x",
                              "FI_PROVIDER",
                              "-x",
                              "MY_FLAG",
                              "-x",
                              "NCCL_SOCKET_IFNAME",
                              "-x",
                              "PARAPLAN_SUPERVISOR",
                              "-x",
                              "PATH",
                              "-x",
                              "UCX_TLS",
                              "-x",
                              "FOO=bar",
                              "-x",
                              "LD_PRELOAD",
                              "/opt/paraplan",
                              "train",
                              "--plan",
                              options.plan_path,
                              "--data=" + cwd + "/data/train.bin",
                              "--val-data",
                              "/abs/val.bin",
                              "--checkpoint-dir",
                              cwd + "/checkpoints",
                              "--init-from",
                              cwd + "/hf/gpt2",
                              "--steps",
                              "5"}));
  // --env naming a variable that is not set is refused.
  LaunchOptions unset = options;
  unset.pass_environment = {"NOT_SET_HERE"};
  EXPECT_EQ(error_of([&] { build_launch_command(unset, additions); }),
            "launch: --env NOT_SET_HERE: NOT_SET_HERE is not set here; give --env NAME (a "
            "variable set here) or --env NAME=VALUE");
  // mpirun's environment: the variables set, the env list gone.
  EXPECT_EQ(
      launch_environment(options, additions),
      (Strings{"PATH=/usr/bin", "HOME=/root", "UCX_TLS=tcp", "SECRET=1", "FI_PROVIDER=efa",
               "PARAPLAN_SUPERVISOR=10.77.0.1:4000", "NCCL_SOCKET_IFNAME==eth0", "MY_FLAG=on"}));
}

TEST(LaunchQuoting, QuotesOnlyWhatAShellWouldSplit) {
  EXPECT_EQ(shell_quote_command(
                {"mpirun", "-np", "4", "--data", "my data.bin", "it's", "", "a=b,c:d/e.f"}),
            "mpirun -np 4 --data 'my data.bin' 'it'\\''s' '' a=b,c:d/e.f");
}

TEST_F(LaunchTest, DryRunPrintsTheCommandOnOneLine) {
  LaunchOptions options;
  options.plan_path = write_plan_file(1, 2, 1);
  options.command = {"train", "--data", "my data.bin"};
  options.paraplan_binary = "/bin/paraplan";
  options.environment = Strings{"OMP_NUM_THREADS=1"};
  options.dry_run = true;
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_launch(options), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "mpirun -np 2 --oversubscribe --map-by slot --bind-to none -x OMP_NUM_THREADS -x "
            "PARAPLAN_SUPERVISOR -x PARAPLAN_SUPERVISOR_TOKEN /bin/paraplan train --plan " +
                options.plan_path + " --data '" + std::filesystem::current_path().string() +
                "/my data.bin'\n");
}

TEST_F(LaunchTest, MissingMpirunIsReported) {
  LaunchOptions options;
  options.plan_path = write_plan_file(1, 1, 1);
  options.command = {"train"};
  options.environment = Strings{};
  options.mpirun = (directory_.path() / "no-such-mpirun").string();
  EXPECT_EQ(error_of([&] { run_launch(options); }),
            "launch: cannot run '" + options.mpirun +
                "': not found; install Open MPI (mpirun on PATH) or pass --mpirun PATH");
}

}  // namespace
}  // namespace paraplan

namespace paraplan {
namespace {

// --data and --val-data take comma-separated lists of files and globs: every
// entry is made absolute, the globs left for the ranks to expand.
TEST(WithAbsolutePaths, MakesEachEntryOfADataListAbsolute) {
  const std::string cwd = std::filesystem::current_path().string();
  EXPECT_EQ(with_absolute_paths({"train", "--data", "shards/train_*.bin,extra.bin",
                                 "--val-data=val/*.bin", "--steps", "5"}),
            (std::vector<std::string>{"train", "--data",
                                      cwd + "/shards/train_*.bin," + cwd + "/extra.bin",
                                      "--val-data=" + cwd + "/val/*.bin", "--steps", "5"}));
  // Other path flags take one path, commas and all.
  EXPECT_EQ(with_absolute_paths({"train", "--log-json", "a,b.json"}),
            (std::vector<std::string>{"train", "--log-json", cwd + "/a,b.json"}));
}

// What the preflight asks every host for: the files it reads, and the
// checkpoint directory it must share.
TEST(FilesEveryRankReads, ThePlanTheDataAndTheCheckpointDirectoryOnResume) {
  const std::string cwd = std::filesystem::current_path().string();
  LaunchOptions options;
  options.plan_path = "job.pplan";
  options.command = {"train", "--data", "a.bin,b_*.bin", "--val-data=v.bin", "--checkpoint-dir",
                     "ckpt"};
  EXPECT_EQ(files_every_rank_reads(options),
            (std::vector<std::string>{cwd + "/job.pplan", cwd + "/a.bin", cwd + "/b_*.bin",
                                      cwd + "/v.bin"}));
  EXPECT_EQ(checkpoint_directory(options), cwd + "/ckpt");
  options.command.push_back("--resume");
  options.command.insert(options.command.begin() + 1, {"--plan", "/plans/other.pplan"});
  EXPECT_EQ(files_every_rank_reads(options),
            (std::vector<std::string>{"/plans/other.pplan", cwd + "/a.bin", cwd + "/b_*.bin",
                                      cwd + "/v.bin", cwd + "/ckpt"}));
  // What evaluate's ranks read: the weights, the HellaSwag set and, for a
  // .jsonl, the tokenizer that encodes it.
  options.command = {"evaluate",    "--checkpoint", "ckpt",
                     "--hellaswag", "hs.jsonl",     "--tokenizer=/t/gpt2.tiktoken"};
  EXPECT_EQ(files_every_rank_reads(options),
            (std::vector<std::string>{cwd + "/job.pplan", cwd + "/ckpt", cwd + "/hs.jsonl",
                                      "/t/gpt2.tiktoken"}));
  options.command = {"train",  "--init-from", "/w/gpt2", "--hellaswag",
                     "hs.bin", "--tokenizer", "t.json"};
  EXPECT_EQ(files_every_rank_reads(options),
            (std::vector<std::string>{cwd + "/job.pplan", "/w/gpt2", cwd + "/hs.bin"}));
  options.command = {"train", "--checkpoint-dir=/scratch/ckpt"};
  EXPECT_EQ(checkpoint_directory(options), "/scratch/ckpt");
  options.command = {"replay", "--steps", "3"};
  EXPECT_EQ(checkpoint_directory(options), "");
}

}  // namespace
}  // namespace paraplan
