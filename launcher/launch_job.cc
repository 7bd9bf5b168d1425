// launch_job.cc: `paraplan launch` from start to end (run_launch in launch.h):
// the preflight on every host, the network, the command, and the supervised
// job.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <stdexcept>

#include "common/data_list.h"
#include "launcher/launch.h"
#include "launcher/network.h"
#include "launcher/preflight.h"
#include "launcher/restart.h"
#include "launcher/supervisor.h"
#include "runtime/comm/supervision_protocol.h"
#include "runtime/tokenizer/hellaswag.h"
#include "schema/plan_io.h"

namespace paraplan {
namespace {

// True when the user already chose Open MPI's TCP interfaces (mpirun arguments
// or OMPI_MCA_ variables): launch then adds none of its own, as Open MPI
// refuses include and exclude together.
bool user_chose_mpi_interfaces(const LaunchOptions& options,
                               const std::vector<std::string>& environment) {
  const auto names_interfaces = [](const std::string& text) {
    return text.find("btl_tcp_if_") != std::string::npos ||
           text.find("oob_tcp_if_") != std::string::npos;
  };
  return std::any_of(options.mpirun_arguments.begin(), options.mpirun_arguments.end(),
                     names_interfaces) ||
         std::any_of(environment.begin(), environment.end(), [&](const std::string& entry) {
           return entry.rfind("OMPI_MCA_", 0) == 0 &&
                  names_interfaces(entry.substr(0, entry.find('=')));
         });
}

bool has_variable(const std::vector<std::string>& environment, const std::string& name) {
  return std::any_of(environment.begin(), environment.end(),
                     [&](const std::string& entry) { return entry.rfind(name + "=", 0) == 0; });
}

// Open MPI's mpirun refuses root with a banner of dashes unless both
// variables are set (or --allow-run-as-root is given): say so in one line
// before starting it, as a container's root user meets it first.
void refuse_root_without_consent(const LaunchOptions& options,
                                 const std::vector<std::string>& environment) {
  if (geteuid() != 0) return;
  const auto given = [&](const std::string& entry) {
    return std::find(environment.begin(), environment.end(), entry) != environment.end();
  };
  if (given("OMPI_ALLOW_RUN_AS_ROOT=1") && given("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")) return;
  if (std::find(options.mpirun_arguments.begin(), options.mpirun_arguments.end(),
                "--allow-run-as-root") != options.mpirun_arguments.end())
    return;
  throw std::runtime_error(
      "launch: running as root, which Open MPI's mpirun refuses: set "
      "OMPI_ALLOW_RUN_AS_ROOT=1 and OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (as containers do), or "
      "run as another user");
}

}  // namespace

namespace {

// Every value of `wanted` in the command, in order, as given ("--flag value"
// or "--flag=value").
std::vector<std::string> flag_values(const std::vector<std::string>& command,
                                     const std::string& wanted) {
  std::vector<std::string> values;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& argument = command[i];
    const size_t equals = argument.find('=');
    if (argument.substr(0, equals) != wanted) continue;
    values.push_back(equals != std::string::npos ? argument.substr(equals + 1)
                                                 : (i + 1 < command.size() ? command[i + 1] : ""));
  }
  return values;
}

}  // namespace

std::string checkpoint_directory(const LaunchOptions& options) {
  const std::vector<std::string> values =
      flag_values(with_absolute_paths(options.command), "--checkpoint-dir");
  return values.empty() ? "" : values.back();
}

std::vector<std::string> files_every_rank_reads(const LaunchOptions& options) {
  const std::vector<std::string> command = with_absolute_paths(options.command);
  std::vector<std::string> files = flag_values(command, "--plan");
  if (files.empty()) files.push_back(with_absolute_paths({"--plan", options.plan_path})[1]);
  for (const std::string& list : flag_values(command, "--data"))  // a list: each file or glob
    for (const std::string& entry : data_list_entries(list)) files.push_back(entry);
  for (const std::string& list : flag_values(command, "--val-data"))
    for (const std::string& entry : data_list_entries(list)) files.push_back(entry);
  const bool resume = std::any_of(command.begin(), command.end(), [](const std::string& argument) {
    return argument.substr(0, argument.find('=')) == "--resume";
  });
  const std::string checkpoint_dir = checkpoint_directory(options);
  if (resume && !checkpoint_dir.empty()) files.push_back(checkpoint_dir);
  // Weights every rank loads its slice of (train --init-from, evaluate
  // --checkpoint), and the HellaSwag set every rank scores (a .jsonl with the
  // tokenizer that encodes it).
  for (const char* flag : {"--init-from", "--checkpoint", "--hellaswag"})
    for (const std::string& path : flag_values(command, flag)) files.push_back(path);
  const std::vector<std::string> hellaswag = flag_values(command, "--hellaswag");
  if (!hellaswag.empty() && is_hellaswag_text(hellaswag.back()))
    for (const std::string& path : flag_values(command, "--tokenizer")) files.push_back(path);
  return files;
}

int run_launch(const LaunchOptions& options) {
  if (options.max_restarts > 0 && !options.dry_run) return run_launch_with_restarts(options);
  return run_launch_once(options, nullptr);
}

int run_launch_once(const LaunchOptions& options, std::optional<JobFailure>* failure) {
  // Everything the command needs is checked before any host is asked.
  build_launch_command(options);
  const LoadedPlan loaded = load_plan(options.plan_path);
  const schema::Mesh& mesh = *loaded.plan().mesh();
  const std::string binary =
      options.paraplan_binary.empty() ? this_executable() : options.paraplan_binary;
  if (!options.dry_run) {
    try {
      find_program(options.mpirun);
    } catch (const std::exception& error) {
      throw std::runtime_error(std::string("launch: ") + error.what());
    }
    refuse_root_without_consent(options, launch_environment(options));
  }

  LaunchAdditions additions;
  std::vector<HostFindings> findings;
  std::vector<std::string> problems;
  std::string listen_address = "127.0.0.1", network_line, unchecked_line;
  if (!options.hostfile.empty()) {
    PreflightRequest request;
    request.hosts = parse_hostfile(options.hostfile);
    request.binary = binary;
    request.files = files_every_rank_reads(options);
    request.count_gpus = command_wants_gpus(options.command);
    request.environment = launch_environment(options);
    request.remote_shell = remote_shell(options.mpirun_arguments, request.environment);
    std::optional<SharedDirectoryMarker> marker;
    ask_about_checkpoint_directory(options, request, marker);
    findings = run_preflight(request);
    problems = preflight_problems(findings, request, paraplan_version(), this_build_id());
    if (marker && !marker->problem().empty())
      problems.insert(problems.begin(), "this host: " + marker->problem());
    if (marker && !marker->shared() && marker->problem().empty())
      unchecked_line = "preflight: --checkpoint-dir " + checkpoint_directory(options) +
                       " does not exist yet; launch creates it and checks that every host sees "
                       "it\n";
    std::vector<HostNetwork> networks;
    for (const HostFindings& host : findings)
      if (host.failure.empty())
        networks.push_back({host.host, resolve_ipv4(host.host), host.interfaces});
    const std::vector<std::string> environment = launch_environment(options);
    NetworkChoice network = choose_network(options.network_interface, networks);
    if (user_chose_mpi_interfaces(options, environment) && !network.mpi.empty()) {
      network.mpi.clear();
      network.reason =
          "network: Open MPI's interfaces as the mpirun arguments or OMPI_MCA_ "
          "variables say; " +
          network.reason;
    }
    problems.insert(problems.end(), network.problems.begin(), network.problems.end());
    additions.mpi_network = network.mpi;
    if (!network.nccl_socket_ifname.empty() && !has_variable(environment, "NCCL_SOCKET_IFNAME"))
      additions.variables.push_back("NCCL_SOCKET_IFNAME=" + network.nccl_socket_ifname);
    listen_address = launcher_address(network, networks, this_host_interfaces());
    network_line = network.reason;
  } else {
    network_line = single_machine_note(mesh.num_nodes(), mesh.devices_per_node());
  }

  if (options.dry_run) {
    additions.variables.push_back(std::string(supervision::kAddressVariable) + "=" +
                                  listen_address + ":<port>");
    additions.variables.push_back(std::string(supervision::kTokenVariable) + "=<token>");
    std::cout << shell_quote_command(build_launch_command(options, additions)) << "\n";
    if (!network_line.empty()) std::cout << network_line << "\n";
    std::cout << describe_findings(findings) << unchecked_line;
    for (const std::string& problem : problems)
      std::cout << "preflight: problem: " << problem << "\n";
    std::cout.flush();
    return problems.empty() ? 0 : 1;
  }
  if (!problems.empty()) {
    std::string text = "launch: the preflight found " + std::to_string(problems.size()) +
                       " problem(s); nothing was started:";
    for (const std::string& problem : problems) text += "\n  " + problem;
    throw std::runtime_error(text);
  }

  SupervisorOptions supervision;
  supervision.mesh = {mesh.pipeline_parallel(), mesh.data_parallel(), mesh.tensor_parallel(),
                      mesh.context_parallel()};
  supervision.heartbeat_timeout =
      std::chrono::milliseconds(static_cast<long long>(options.heartbeat_timeout_seconds * 1000));
  supervision.listen_address = listen_address;
  Supervisor supervisor(supervision);
  additions.variables.push_back(std::string(supervision::kAddressVariable) + "=" +
                                supervisor.address());
  additions.variables.push_back(std::string(supervision::kTokenVariable) + "=" +
                                supervisor.token());
  if (!network_line.empty()) std::cout << "paraplan launch: " << network_line << std::endl;
  const int status = supervisor.run(build_launch_command(options, additions),
                                    launch_environment(options, additions));
  if (failure != nullptr) *failure = supervisor.last_failure();
  return status;
}

}  // namespace paraplan
