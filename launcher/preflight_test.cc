// preflight_test.cc: what a host answers (`paraplan preflight`), how the
// launcher asks every host through mpirun's remote shell (a fake ssh here),
// and the one line per problem it refuses a job with.
#include "launcher/preflight.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "launcher/launch.h"
#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

HostFindings good_host(const std::string& name) {
  HostFindings host;
  host.host = name;
  host.hostname = name;
  host.version = "0.1.0";
  host.build_id = "abcdef0123456789";
  host.files = {{"/shared/job.pplan", ""}, {"/shared/train.bin", ""}};
  host.cores = 8;
  return host;
}

TEST(Preflight, ThisHostAnswersWithItsBuildFilesAndInterfaces) {
  testing::TempDir directory;
  const std::string file = (directory.path() / "train.bin").string();
  std::ofstream(file) << "tokens";
  const std::string pipe = (directory.path() / "pipe").string();
  ASSERT_EQ(mkfifo(pipe.c_str(), 0600), 0);
  const std::string missing = (directory.path() / "absent").string();
  // Globs (--data lists): one that matches readable files, one that matches
  // nothing, one that matches a pipe.
  const std::string shards = (directory.path() / "train*.bin").string();
  const std::string no_shards = (directory.path() / "fineweb_*.bin").string();
  const std::string pipes = (directory.path() / "pip?").string();

  const HostFindings findings = findings_from_json(
      "here",
      nlohmann::json::parse(
          this_host_findings({file, pipe, missing, shards, no_shards, pipes}, false).dump()));
  EXPECT_EQ(findings.host, "here");
  EXPECT_FALSE(findings.hostname.empty());
  EXPECT_EQ(findings.version, paraplan_version());
  EXPECT_EQ(findings.build_id, this_build_id());
  EXPECT_EQ(findings.build_id.size(), 40u) << "a GNU build id (sha1) is linked in";
  EXPECT_GT(findings.cores, 0);
  EXPECT_EQ(findings.cuda_devices, -1) << "not asked";
  ASSERT_EQ(findings.files.size(), 6u);
  EXPECT_EQ(findings.files[3], std::make_pair(shards, std::string()));
  EXPECT_EQ(findings.files[4], std::make_pair(no_shards, std::string("no file matches the glob")));
  EXPECT_EQ(findings.files[5], std::make_pair(pipes, pipe + ": not a regular file"));
  EXPECT_EQ(findings.files[0], std::make_pair(file, std::string()));
  EXPECT_EQ(findings.files[1], std::make_pair(pipe, std::string("not a regular file")));
  EXPECT_EQ(findings.files[2], std::make_pair(missing, std::string("No such file or directory")));
  EXPECT_EQ(findings.interfaces, this_host_interfaces());
}

TEST(Preflight, EveryProblemIsOneLineNamingTheHostAndTheFix) {
  PreflightRequest request;
  request.binary = "/opt/paraplan/bin/paraplan";
  request.hosts = {{"node1", 4, 1}, {"node2", 4, 2}, {"node3", 4, 3}, {"node4", 4, 4}};
  request.count_gpus = true;
  std::vector<HostFindings> findings = {good_host("node1"), good_host("node2"), good_host("node3"),
                                        good_host("node4")};
  findings[0].cuda_devices = 4;
  findings[1].cuda_devices = 2;
  findings[1].build_id = "0123456789abcdef";
  findings[2].cuda_devices = 4;
  findings[2].files[1].second = "No such file or directory";
  findings[3].failure =
      "cannot reach it over ssh (ssh: connect to host node4 port 22: No route "
      "to host); passwordless ssh from this host must work (`ssh node4 true`), "
      "or set mpirun's agent (OMPI_MCA_plm_rsh_agent)";
  EXPECT_EQ(preflight_problems(findings, request, "0.1.0", "abcdef0123456789"),
            (std::vector<std::string>{
                "node2: paraplan 0.1.0 (build 0123456789ab) at /opt/paraplan/bin/paraplan "
                "differs from this host's 0.1.0 (build abcdef012345); install the same build at "
                "that path on every host",
                "node2: 2 CUDA device(s) but the hostfile gives it slots=4 (one rank per "
                "device); lower its slots and plan for that, or use --backend cpu",
                "node3: cannot read /shared/train.bin: No such file or directory; put it on a "
                "filesystem every host shares, or copy it to the same path on each",
                "node4: cannot reach it over ssh (ssh: connect to host node4 port 22: No route to "
                "host); passwordless ssh from this host must work (`ssh node4 true`), or set "
                "mpirun's agent (OMPI_MCA_plm_rsh_agent)"}));
  findings.pop_back();
  findings[1] = good_host("node2");
  findings[1].cuda_devices = 4;
  findings[2] = good_host("node3");
  findings[2].cuda_devices = 4;
  request.hosts.pop_back();
  EXPECT_TRUE(preflight_problems(findings, request, "0.1.0", "abcdef0123456789").empty());
}

// Ranks on every host write their share of a checkpoint into
// --checkpoint-dir: each host must see the marker the launcher put there, and
// create files of its own.
TEST(Preflight, TheCheckpointDirectoryIsOneDirectoryEveryHostWritesIn) {
  testing::TempDir directory;
  const std::string checkpoints = (directory.path() / "checkpoints").string();
  {
    SharedDirectoryMarker unchecked(checkpoints, /*create=*/false);  // --dry-run
    EXPECT_FALSE(unchecked.shared().has_value());
    EXPECT_EQ(unchecked.problem(), "");
    EXPECT_FALSE(std::filesystem::exists(checkpoints)) << "--dry-run makes nothing";
  }
  std::optional<SharedDirectory> shared;
  {
    SharedDirectoryMarker marker(checkpoints, /*create=*/true);
    ASSERT_TRUE(marker.shared().has_value()) << marker.problem();
    shared = marker.shared();
    EXPECT_EQ(shared->path, checkpoints);
    EXPECT_EQ(shared->marker.rfind(".paraplan-launch-", 0), 0u) << shared->marker;
    EXPECT_TRUE(std::filesystem::exists(checkpoints + "/" + shared->marker));
    const HostFindings here = findings_from_json(
        "here", nlohmann::json::parse(this_host_findings({}, false, shared).dump()));
    EXPECT_EQ(here.shared_directory_problem, std::optional<std::string>(""));
  }
  EXPECT_TRUE(std::filesystem::is_empty(checkpoints)) << "the marker and the probe are gone";

  // Another host's own directory at that path: it lacks the marker.
  shared->placed_by = "node1";
  const std::string fix =
      "; ranks on every host write their share of each checkpoint into it: put it on a "
      "filesystem every host mounts at that path (NFS, Lustre), or give another --checkpoint-dir";
  const auto problem = [](const SharedDirectory& asked) {
    return findings_from_json("node2",
                              nlohmann::json::parse(this_host_findings({}, false, asked).dump()))
        .shared_directory_problem.value_or("not asked");
  };
  const std::string not_shared = problem(*shared);  // after 2 s of looking
  EXPECT_EQ(not_shared, "--checkpoint-dir " + checkpoints +
                            " is not the directory node1 sees at that path (the file "
                            "launch put there, " +
                            shared->marker + ", is not here)" + fix);
  SharedDirectory missing = *shared;
  missing.path = checkpoints + "/absent";
  EXPECT_EQ(problem(missing),
            "--checkpoint-dir " + missing.path + " is missing here, but exists on node1" + fix);
  SharedDirectory file = *shared;
  file.path = (directory.path() / "plain").string();
  std::ofstream(file.path) << "x";
  EXPECT_EQ(problem(file), "--checkpoint-dir " + file.path + " is not a directory here" + fix);

  PreflightRequest request;
  request.binary = "/opt/paraplan/bin/paraplan";
  request.hosts = {{"node1", 4, 1}, {"node2", 4, 2}};
  request.shared_directory = shared;
  std::vector<HostFindings> findings = {good_host("node1"), good_host("node2")};
  findings[0].shared_directory_problem = "";
  findings[1].shared_directory_problem = not_shared;
  EXPECT_EQ(preflight_problems(findings, request, "0.1.0", "abcdef0123456789"),
            (std::vector<std::string>{"node2: " + *findings[1].shared_directory_problem}));
  EXPECT_EQ(describe_findings(findings),
            "preflight: node1: hostname node1, paraplan 0.1.0 (build abcdef012345), 8 cores, 2 "
            "of 2 files readable, the checkpoint directory shared; interfaces\n"
            "preflight: node2: hostname node2, paraplan 0.1.0 (build abcdef012345), 8 cores, 2 "
            "of 2 files readable, the checkpoint directory not shared; interfaces\n");
}

TEST(Preflight, AsksHostsThroughMpirunsRemoteShell) {
  EXPECT_EQ(remote_shell({}, {"PATH=/usr/bin"}), (std::vector<std::string>{"ssh"}));
  const std::vector<std::string> agent = {
      "OMPI_MCA_plm_rsh_agent=ssh -F /tmp/bed/ssh_config : rsh"};
  EXPECT_EQ(remote_shell({}, agent),
            (std::vector<std::string>{"ssh", "-F", "/tmp/bed/ssh_config"}));
  EXPECT_EQ(remote_shell({"--mca", "plm_rsh_agent", "/usr/bin/ssh -p 2222"}, agent),
            (std::vector<std::string>{"/usr/bin/ssh", "-p", "2222"}));
  // Open MPI's documented way to give ssh its options, in either form.
  EXPECT_EQ(remote_shell({"--mca", "plm_rsh_args", "-F cluster_ssh_config"}, {}),
            (std::vector<std::string>{"ssh", "-F", "cluster_ssh_config"}));
  EXPECT_EQ(remote_shell({"--mca", "plm_rsh_agent", "/usr/bin/ssh"},
                         {"OMPI_MCA_plm_rsh_args=-F /etc/cluster/ssh_config -o User=train"}),
            (std::vector<std::string>{"/usr/bin/ssh", "-F", "/etc/cluster/ssh_config", "-o",
                                      "User=train"}));
}

// `paraplan launch --env OMPI_MCA_plm_rsh_args=...` reaches mpirun's own
// environment, so it reaches every ssh the launcher makes too.
TEST(Preflight, RemoteShellFollowsWhatEnvGivesMpirun) {
  unsetenv("OMPI_MCA_plm_rsh_args");
  LaunchOptions options;
  options.pass_environment = {"OMPI_MCA_plm_rsh_args=-F cluster_ssh_config"};
  EXPECT_EQ(remote_shell({}, launch_environment(options)),
            (std::vector<std::string>{"ssh", "-F", "cluster_ssh_config"}));
  setenv("OMPI_MCA_plm_rsh_args", "-p 2222", 1);  // this shell's, as mpirun inherits it
  EXPECT_EQ(remote_shell({}, launch_environment(LaunchOptions{})),
            (std::vector<std::string>{"ssh", "-p", "2222"}));
  unsetenv("OMPI_MCA_plm_rsh_args");
}

// `--env SSH_AUTH_SOCK=...` (or any variable the agent needs) reaches
// mpirun's ssh through its environment: the preflight's ssh runs in the same
// one, not in this process's.
TEST(Preflight, TheRemoteShellRunsInTheEnvironmentGivenToMpirun) {
  testing::TempDir directory;
  const std::string agent = (directory.path() / "fake_ssh").string();
  std::ofstream(agent) << "#!/bin/sh\n"
                          "[ \"$FAKE_SSH_AGENT_SOCK\" = granted ] || "
                          "{ echo 'Permission denied (publickey).' >&2; exit 255; }\n"
                          "shift; exec sh -c \"$*\"\n";
  const std::string binary = (directory.path() / "paraplan").string();
  std::ofstream(binary) << "#!/bin/sh\n"
                           "echo '{\"hostname\":\"far\",\"version\":\"0.1.0\",\"build_id\":"
                           "\"abc\",\"cores\":2,\"cuda_devices\":-1,\"files\":[],"
                           "\"interfaces\":[]}'\n";
  chmod(agent.c_str(), 0755);
  chmod(binary.c_str(), 0755);
  unsetenv("FAKE_SSH_AGENT_SOCK");
  PreflightRequest request;
  request.binary = binary;
  request.remote_shell = {agent};
  request.hosts = {{"far", 2, 1}};
  EXPECT_NE(run_preflight(request)[0].failure.find("Permission denied (publickey)"),
            std::string::npos);
  LaunchOptions options;
  options.pass_environment = {"FAKE_SSH_AGENT_SOCK=granted"};
  request.environment = launch_environment(options);
  const HostFindings answered = run_preflight(request)[0];
  EXPECT_EQ(answered.failure, "");
  EXPECT_EQ(answered.hostname, "far");
  // An agent that cannot be started is this host's problem, not the binary's.
  request.remote_shell = {"/nonexistent/ssh"};
  EXPECT_EQ(run_preflight(request)[0].failure.rfind(
                "cannot start the remote shell /nonexistent/ssh (/usr/bin/env: ", 0),
            0u)
      << run_preflight(request)[0].failure;
}

// A remote shell whose hosts answer, cannot be reached, or lack the binary;
// the answering host runs a paraplan of another build.
TEST(Preflight, RunsEveryHostAtOnceAndClassifiesWhatWentWrong) {
  testing::TempDir directory;
  const std::string agent = (directory.path() / "fake_ssh").string();
  std::ofstream(agent) << "#!/bin/sh\n"
                          "host=$1; shift\n"
                          "case \"$host\" in\n"
                          "  unreachable) echo 'ssh: connect to host unreachable port 22: "
                          "Connection refused' >&2; exit 255;;\n"
                          "  nobinary) echo 'sh: 1: /x/paraplan: not found' >&2; exit 127;;\n"
                          "  garbled) echo 'Usage: paraplan [OPTIONS]'; exit 0;;\n"
                          "  *) exec sh -c \"$*\";;\n"
                          "esac\n";
  const std::string binary = (directory.path() / "paraplan").string();
  std::ofstream(binary) << "#!/bin/sh\n"
                           "echo '{\"hostname\":\"far\",\"version\":\"0.0.9\",\"build_id\":\"old\","
                           "\"cores\":2,\"cuda_devices\":-1,\"files\":[[\"/f\",\"\"]],"
                           "\"interfaces\":[{\"name\":\"eth0\",\"address\":\"10.1.2.3\","
                           "\"prefix\":16}]}'\n";
  chmod(agent.c_str(), 0755);
  chmod(binary.c_str(), 0755);
  PreflightRequest request;
  request.binary = binary;
  request.files = {"/f"};
  request.remote_shell = {agent};
  request.hosts = {{"far", 2, 1}, {"unreachable", 2, 2}, {"nobinary", 2, 3}, {"garbled", 2, 4}};
  const std::vector<HostFindings> findings = run_preflight(request);
  ASSERT_EQ(findings.size(), 4u);
  EXPECT_EQ(findings[0].failure, "");
  EXPECT_EQ(findings[0].hostname, "far");
  EXPECT_EQ(findings[0].interfaces,
            (std::vector<InterfaceAddress>{{"eth0", *parse_ipv4("10.1.2.3"), 16}}));
  EXPECT_EQ(findings[1].failure,
            "cannot reach it over " + agent +
                " (ssh: connect to host unreachable port 22: Connection refused); passwordless "
                "ssh from this host must work (`ssh unreachable true`), or set mpirun's agent "
                "(OMPI_MCA_plm_rsh_agent)");
  EXPECT_EQ(findings[2].failure, binary +
                                     " is not there (sh: 1: /x/paraplan: not found); install "
                                     "paraplan at the same path on every host (or share its "
                                     "directory)");
  EXPECT_EQ(findings[3].failure,
            "its paraplan answered `paraplan preflight` with something else; install the same "
            "paraplan build on every host");
  const std::vector<std::string> problems = preflight_problems(findings, request, "0.1.0", "new");
  ASSERT_EQ(problems.size(), 4u);
  EXPECT_EQ(problems[0], "far: paraplan 0.0.9 (build old) at " + binary +
                             " differs from this host's 0.1.0 (build new); install the same "
                             "build at that path on every host");
  EXPECT_EQ(describe_findings({findings[0], findings[1]}),
            "preflight: far: hostname far, paraplan 0.0.9 (build old), 2 cores, 1 of 1 files "
            "readable; interfaces eth0 10.1.2.3/16\n"
            "preflight: unreachable: " +
                findings[1].failure + "\n");
}

}  // namespace
}  // namespace paraplan
