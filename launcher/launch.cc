// launch.cc: `paraplan launch`: hostfile parsing, its check against the plan's
// mesh, and the mpirun command (arguments and environment) that starts one
// rank per device.
#include "launcher/launch.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "common/bounded_file.h"
#include "common/data_list.h"
#include "kernels/ops.h"
#include "schema/plan_io.h"

extern char** environ;

namespace paraplan {
namespace {

std::string counted(long long count, const std::string& noun) {
  return std::to_string(count) + " " + noun + (count == 1 ? "" : "s");
}

// A positive decimal number, or nullopt.
std::optional<int> parse_count(const std::string& text) {
  if (text.empty() || text.size() > 9 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoi(text);
}

bool is_plan_flag(const std::string& argument) {
  return argument == "--plan" || argument.rfind("--plan=", 0) == 0;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  const auto canonical_a = std::filesystem::weakly_canonical(a, error);
  if (error) return a == b;
  const auto canonical_b = std::filesystem::weakly_canonical(b, error);
  if (error) return a == b;
  return canonical_a == canonical_b;
}

}  // namespace

std::string this_executable() {
  std::error_code error;
  const std::filesystem::path path = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error)
    throw std::runtime_error("launch: cannot find this executable (/proc/self/exe): " +
                             error.message());
  return path.string();
}

std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& name) {
  std::vector<HostEntry> hosts;
  std::map<std::string, int> first_line;  // host -> line it was listed on
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string where = name + ":" + std::to_string(number) + ": ";
    if (const size_t comment = line.find('#'); comment != std::string::npos) line.resize(comment);
    std::istringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;  // blank or comment only
    if (host.find('=') != std::string::npos)
      throw std::runtime_error(where + "a line starts with the host name, got '" + host +
                               "'; write 'hostname slots=N'");
    std::optional<int> slots;
    while (words >> word) {
      const size_t equals = word.find('=');
      const std::string key = word.substr(0, equals);
      if (equals == std::string::npos || (key != "slots" && key != "max_slots"))
        throw std::runtime_error(where + "unexpected '" + word +
                                 "'; a line is 'hostname slots=N' (optionally max_slots=M)");
      const std::optional<int> value = parse_count(word.substr(equals + 1));
      if (!value) throw std::runtime_error(where + "'" + word + "' is not a number");
      if (*value < 1) throw std::runtime_error(where + "'" + word + "' must be at least 1");
      if (key == "slots") slots = value;
    }
    if (!slots)
      throw std::runtime_error(where + "host '" + host + "' has no slots=N; write '" + host +
                               " slots=<devices per node>'");
    if (const auto [it, inserted] = first_line.emplace(host, number); !inserted)
      throw std::runtime_error(where + "host '" + host + "' is listed again (first on line " +
                               std::to_string(it->second) + "); list each host once");
    hosts.push_back({host, *slots, number});
  }
  if (hosts.empty())
    throw std::runtime_error(name +
                             ": no hosts listed; write one line 'hostname slots=N' per node");
  return hosts;
}

std::vector<HostEntry> parse_hostfile(const std::string& path) {
  // A named pipe or a device as --hostfile is refused, not read forever.
  return parse_hostfile_text(read_bounded_file(path, kHostfile), path);
}

void check_hosts_match_mesh(const std::vector<HostEntry>& hosts, const std::string& hostfile,
                            int num_nodes, int devices_per_node) {
  const bool every_host_fits = std::all_of(hosts.begin(), hosts.end(), [&](const HostEntry& host) {
    return host.slots == devices_per_node;
  });
  if (static_cast<int>(hosts.size()) == num_nodes && every_host_fits) return;
  long long total = 0;
  std::string each;  // "4 + 2 + 4" when the hosts differ
  for (const HostEntry& host : hosts) {
    total += host.slots;
    each += (each.empty() ? "" : " + ") + std::to_string(host.slots);
  }
  const bool uniform = std::all_of(hosts.begin(), hosts.end(), [&](const HostEntry& host) {
    return host.slots == hosts.front().slots;
  });
  const std::string found = uniform ? counted(static_cast<long long>(hosts.size()), "host") +
                                          " x " + counted(hosts.front().slots, "slot") + " = " +
                                          counted(total, "slot")
                                    : counted(static_cast<long long>(hosts.size()), "host") +
                                          " with " + each + " = " + counted(total, "slot");
  throw std::runtime_error(
      hostfile + ": " + found + ", but the plan needs " + counted(num_nodes, "node") + " x " +
      counted(devices_per_node, "device") + "; list " + counted(num_nodes, "host") +
      " with slots=" + std::to_string(devices_per_node) +
      " each, or plan for this cluster (cluster.num_nodes, "
      "cluster.devices_per_node)");
}

std::string single_machine_note(int num_nodes, int devices_per_node) {
  if (num_nodes <= 1) return "";
  return "hosts: the plan is for " + std::to_string(num_nodes) + " nodes x " +
         std::to_string(devices_per_node) + " devices, and without --hostfile its " +
         std::to_string(1LL * num_nodes * devices_per_node) +
         " ranks all start on this machine (--oversubscribe); give --hostfile to run them "
         "across the cluster";
}

std::vector<std::string> passthrough_variables(const std::vector<std::string>& environment,
                                               const std::vector<std::string>& also) {
  // UCX_ and FI_ (libfabric: AWS EFA's aws-ofi-nccl) steer NCCL's network
  // plugins as NCCL_ does NCCL.
  static const char* const kPrefixes[] = {"PARAPLAN_", "OMP_", "OPENBLAS_", "NCCL_", "UCX_", "FI_"};
  // Not CUDA_VISIBLE_DEVICES: each host keeps its own (a scheduler's list
  // per node); `--env CUDA_VISIBLE_DEVICES` forces this host's everywhere.
  // The CUDA settings a user sets for the whole job (the runtime sets
  // CUDA_DEVICE_MAX_CONNECTIONS to 32 where none is given).
  static const char* const kNames[] = {"PATH", "LD_LIBRARY_PATH", "CUDA_DEVICE_MAX_CONNECTIONS",
                                       "CUDA_LAUNCH_BLOCKING"};
  std::vector<std::string> names(also.begin(), also.end());
  for (const std::string& entry : environment) {
    const size_t equals = entry.find('=');
    if (equals == std::string::npos || equals == 0) continue;
    const std::string name = entry.substr(0, equals);
    const bool passes = std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames) ||
                        std::any_of(std::begin(kPrefixes), std::end(kPrefixes),
                                    [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
    if (passes) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

namespace {

constexpr const char* kEnvList = "OMPI_MCA_mca_base_env_list";

std::vector<std::string> base_environment(const LaunchOptions& options) {
  if (options.environment) return *options.environment;
  std::vector<std::string> variables;
  for (char** entry = environ; entry && *entry; ++entry) variables.emplace_back(*entry);
  // The CUDA backend's own default in this process (not the user's): each
  // rank sets its own, and a remote host's setting stands.
  if (kernels::cuda_connections_defaulted())
    std::erase_if(variables, [](const std::string& entry) {
      return entry.rfind("CUDA_DEVICE_MAX_CONNECTIONS=", 0) == 0;
    });
  return variables;
}

// Sets NAME=VALUE in a list of entries, replacing an earlier value.
void set_variable(std::vector<std::string>& environment, const std::string& entry) {
  const std::string prefix = entry.substr(0, entry.find('=') + 1);
  std::erase_if(environment,
                [&](const std::string& existing) { return existing.rfind(prefix, 0) == 0; });
  environment.push_back(entry);
}

// The entries of OMPI_MCA_mca_base_env_list ("A=1;B"), which Open MPI will not
// combine with -x: launch passes them as -x instead.
std::vector<std::string> env_list_entries(const std::vector<std::string>& environment) {
  std::vector<std::string> entries;
  const std::string prefix = std::string(kEnvList) + "=";
  for (const std::string& entry : environment) {
    if (entry.rfind(prefix, 0) != 0) continue;
    std::stringstream list(entry.substr(prefix.size()));
    for (std::string item; std::getline(list, item, ';');)
      if (!item.empty()) entries.push_back(item);
  }
  return entries;
}

// mpirun -np N, the hosts, the mapping, the network, the user's mpirun
// arguments and the variables passed on.
std::vector<std::string> mpirun_prefix(const std::string& mpirun, long long ranks,
                                       const std::string& hostfile, const LaunchOptions& options,
                                       const LaunchAdditions& additions) {
  std::vector<std::string> arguments = {mpirun, "-np", std::to_string(ranks)};
  if (!hostfile.empty()) {
    arguments.insert(arguments.end(), {"--hostfile", hostfile});
  } else {
    arguments.push_back("--oversubscribe");  // this machine may have fewer cores than ranks
  }
  // --map-by slot gives rank r to the node holding slot r: ranks fill a node's
  // devices_per_node slots in order. Ranks are tensor-parallel innermost and the
  // plan guarantees devices_per_node % tp == 0, so a TP group (tp consecutive
  // ranks) never straddles two nodes. Binding is left to the runtime (threads,
  // the device picked by local rank), so --bind-to none.
  arguments.insert(arguments.end(), {"--map-by", "slot", "--bind-to", "none"});
  if (!additions.mpi_network.empty())
    arguments.insert(arguments.end(), {"--mca", "btl_tcp_if_include", additions.mpi_network,
                                       "--mca", "oob_tcp_if_include", additions.mpi_network});
  arguments.insert(arguments.end(), options.mpirun_arguments.begin(),
                   options.mpirun_arguments.end());
  const std::vector<std::string> environment = launch_environment(options, additions);
  std::vector<std::string> also;
  for (const std::string& entry : options.pass_environment) {
    const std::string name = entry.substr(0, entry.find('='));
    const bool set = std::any_of(environment.begin(), environment.end(),
                                 [&](const std::string& e) { return e.rfind(name + "=", 0) == 0; });
    if (name.empty() || !set)
      throw std::runtime_error(
          "launch: --env " + entry + ": " +
          (name.empty() ? std::string("no variable name") : name + " is not set here") +
          "; give --env NAME (a variable set here) or --env NAME=VALUE");
    also.push_back(name);
  }
  for (const std::string& name : passthrough_variables(environment, also))
    arguments.insert(arguments.end(), {"-x", name});
  for (const std::string& entry : env_list_entries(base_environment(options)))
    arguments.insert(arguments.end(), {"-x", entry});
  return arguments;
}

bool is_path_flag(const std::string& flag) {
  static const char* const kPathFlags[] = {
      "--plan",      "--data",      "--val-data",  "--checkpoint-dir", "--log-json",
      "--report",    "--trace",     "--timeline",  "--init-from",      "--tensorboard-dir",
      "--tokenizer", "--hellaswag", "--checkpoint"};
  return std::find(std::begin(kPathFlags), std::end(kPathFlags), flag) != std::end(kPathFlags);
}

std::string absolute(const std::string& path) {
  if (path.empty()) return path;
  return std::filesystem::absolute(path).lexically_normal().string();
}

// --data and --val-data take comma-separated lists (of paths and globs).
std::string absolute_path_value(const std::string& flag, const std::string& value) {
  return flag == "--data" || flag == "--val-data" ? absolute_data_list(value) : absolute(value);
}

}  // namespace

std::vector<std::string> launch_environment(const LaunchOptions& options,
                                            const LaunchAdditions& additions) {
  std::vector<std::string> environment = base_environment(options);
  const std::string env_list = std::string(kEnvList) + "=";
  std::erase_if(environment,
                [&](const std::string& entry) { return entry.rfind(env_list, 0) == 0; });
  for (const std::string& entry : additions.variables) set_variable(environment, entry);
  for (const std::string& entry : options.pass_environment)
    if (entry.find('=') != std::string::npos) set_variable(environment, entry);
  return environment;
}

std::string command_flag_value(const std::vector<std::string>& command, const std::string& flag) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == flag) return i + 1 < command.size() ? command[i + 1] : std::string();
    if (command[i].rfind(flag + "=", 0) == 0) return command[i].substr(flag.size() + 1);
  }
  return "";
}

bool command_wants_gpus(const std::vector<std::string>& command) {
  return command_flag_value(command, "--backend") == "cuda";
}

std::vector<std::string> with_absolute_paths(const std::vector<std::string>& command) {
  std::vector<std::string> result;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& argument = command[i];
    const size_t equals = argument.find('=');
    if (equals != std::string::npos && is_path_flag(argument.substr(0, equals))) {
      result.push_back(
          argument.substr(0, equals + 1) +
          absolute_path_value(argument.substr(0, equals), argument.substr(equals + 1)));
    } else if (is_path_flag(argument) && i + 1 < command.size()) {
      result.push_back(argument);
      result.push_back(absolute_path_value(argument, command[++i]));
    } else {
      result.push_back(argument);
    }
  }
  return result;
}

std::vector<std::string> local_mpirun_command(int ranks,
                                              const std::vector<std::string>& paraplan_arguments,
                                              const std::string& mpirun) {
  std::vector<std::string> arguments = mpirun_prefix(mpirun, ranks, "", LaunchOptions{}, {});
  arguments.push_back(this_executable());
  arguments.insert(arguments.end(), paraplan_arguments.begin(), paraplan_arguments.end());
  return arguments;
}

std::vector<std::string> build_launch_command(const LaunchOptions& options,
                                              const LaunchAdditions& additions) {
  if (options.plan_path.empty()) throw std::runtime_error("launch: --plan FILE is required");
  if (options.command.empty())
    throw std::runtime_error(
        "launch: nothing after --; give the command every rank runs, e.g. "
        "`paraplan launch --plan job.pplan -- train --data data/train.bin`");
  const std::string& subcommand = options.command.front();
  if (subcommand != "train" && subcommand != "evaluate" && subcommand != "replay")
    throw std::runtime_error(
        "launch: the command after -- must start with 'train', 'evaluate' or 'replay', "
        "got '" +
        subcommand + "'");
  const std::string named_plan = command_flag_value(options.command, "--plan");
  const bool has_plan = std::any_of(options.command.begin(), options.command.end(), is_plan_flag);
  if (has_plan && named_plan.empty())
    throw std::runtime_error(
        "launch: --plan in the command after -- names no file; leave it "
        "out (launch adds --plan " +
        options.plan_path + ")");
  if (has_plan && !same_file(named_plan, options.plan_path))
    throw std::runtime_error("launch: --plan " + options.plan_path +
                             " but the command after -- has --plan " + named_plan +
                             "; give the plan once (launch adds it to the command)");

  const LoadedPlan loaded = load_plan(options.plan_path);
  const schema::Mesh* mesh = loaded.plan().mesh();  // present: load_plan validated the plan
  const long long ranks = 1LL * mesh->pipeline_parallel() * mesh->data_parallel() *
                          mesh->context_parallel() * mesh->tensor_parallel();
  if (!options.hostfile.empty()) {
    check_hosts_match_mesh(parse_hostfile(options.hostfile), options.hostfile, mesh->num_nodes(),
                           mesh->devices_per_node());
  }

  std::vector<std::string> arguments =
      mpirun_prefix(options.mpirun, ranks, absolute(options.hostfile), options, additions);
  arguments.push_back(options.paraplan_binary.empty() ? this_executable()
                                                      : options.paraplan_binary);
  arguments.push_back(subcommand);
  if (!has_plan) arguments.insert(arguments.end(), {"--plan", absolute(options.plan_path)});
  const std::vector<std::string> rest = with_absolute_paths(options.command);
  arguments.insert(arguments.end(), rest.begin() + 1, rest.end());
  return arguments;
}

std::string shell_quote_command(const std::vector<std::string>& arguments) {
  std::string line;
  for (const std::string& argument : arguments) {
    if (!line.empty()) line += ' ';
    const bool plain =
        !argument.empty() && std::all_of(argument.begin(), argument.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./=:,+@%", c);
        });
    if (plain) {
      line += argument;
      continue;
    }
    line += '\'';
    for (const char c : argument) line += c == '\'' ? std::string("'\\''") : std::string(1, c);
    line += '\'';
  }
  return line;
}

std::string find_program(const std::string& program) {
  const auto runnable = [](const std::string& path) { return access(path.c_str(), X_OK) == 0; };
  if (program.find('/') != std::string::npos) {
    if (runnable(program)) return program;
  } else if (const char* path = std::getenv("PATH")) {
    std::stringstream directories(path);
    for (std::string directory; std::getline(directories, directory, ':');) {
      const std::string candidate = (directory.empty() ? "." : directory) + "/" + program;
      if (runnable(candidate)) return candidate;
    }
  }
  throw std::runtime_error("cannot run '" + program +
                           "': not found; install Open MPI (mpirun on PATH) or pass "
                           "--mpirun PATH");
}

void exec_command(const std::vector<std::string>& arguments) {
  std::vector<char*> argv;
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  execvp(argv[0], argv.data());  // returns only on failure
  const int error = errno;
  if (error == ENOENT)
    throw std::runtime_error("cannot run '" + arguments.front() +
                             "': not found; install Open MPI (mpirun on PATH) or pass "
                             "--mpirun PATH");
  throw std::runtime_error("cannot run '" + arguments.front() + "': " + std::strerror(error));
}

}  // namespace paraplan
