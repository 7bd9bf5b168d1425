// preflight.cc: every host's findings before a job starts (preflight.h).
#include "launcher/preflight.h"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/ops.h"
#include "launcher/subprocess.h"
#include "runtime/data/data_paths.h"

#ifndef PARAPLAN_VERSION
#define PARAPLAN_VERSION "unknown"
#endif

namespace paraplan {
namespace {

// "" when path can be read here (a regular file, or a directory), else why not.
// Opened without blocking, so a named pipe cannot stall the answer.
std::string why_unreadable(const std::string& path);

// A glob (a --data list's entry): it must match, and each match be readable.
std::string why_glob_unreadable(const std::string& pattern) {
  std::vector<std::string> matches;
  try {
    matches = expand_data_paths(pattern, "glob");
  } catch (const std::exception&) {
    return "no file matches the glob";
  }
  for (const std::string& match : matches) {
    const std::string reason = why_unreadable(match);
    if (!reason.empty()) return match + ": " + reason;
  }
  return "";
}

std::string why_unreadable(const std::string& path) {
  if (is_glob(path)) return why_glob_unreadable(path);
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return std::strerror(errno);
  struct stat status {};
  const bool stat_ok = fstat(fd, &status) == 0;
  close(fd);
  if (!stat_ok) return std::strerror(errno);
  if (!S_ISREG(status.st_mode) && !S_ISDIR(status.st_mode)) return "not a regular file";
  return "";
}

// Appends the GNU build id of the main program's notes, as hex.
int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* id = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& header = info->dlpi_phdr[i];
    if (header.p_type != PT_NOTE) continue;
    const char* note = reinterpret_cast<const char*>(info->dlpi_addr + header.p_vaddr);
    const char* end = note + header.p_memsz;
    while (note + sizeof(ElfW(Nhdr)) <= end) {
      const auto* entry = reinterpret_cast<const ElfW(Nhdr)*>(note);
      const char* name = note + sizeof(ElfW(Nhdr));
      const auto* description =
          reinterpret_cast<const unsigned char*>(name + ((entry->n_namesz + 3) & ~3u));
      if (entry->n_type == NT_GNU_BUILD_ID && entry->n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        static const char kHex[] = "0123456789abcdef";
        for (unsigned k = 0; k < entry->n_descsz; ++k) {
          *id += kHex[description[k] >> 4];
          *id += kHex[description[k] & 15];
        }
        return 1;
      }
      note = reinterpret_cast<const char*>(description) + ((entry->n_descsz + 3) & ~3u);
    }
  }
  return 1;  // only the first object (the executable) is looked at
}

std::string this_hostname() {
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  return hostname;
}

// Creates a file of this host's in `directory` and removes it: "" when that
// works, else why not.
std::string why_unwritable(const std::string& directory, const std::string& marker) {
  const std::string probe = directory + "/" + marker + "." + this_hostname() + "." +
                            std::to_string(static_cast<long>(getpid()));
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  const bool written = write(fd, "1", 1) == 1;
  const std::string reason = written ? "" : std::strerror(errno);
  close(fd);
  unlink(probe.c_str());
  return reason;
}

// What keeps this host from sharing the launcher's directory: "" when it sees
// the marker and can create files there. A networked filesystem may show a
// directory or file another host made a moment late, so both are looked for
// twice a second for 2 s.
std::string shared_directory_problem(const SharedDirectory& shared) {
  const std::string fix =
      "; ranks on every host write their share of each checkpoint into it: put it on a "
      "filesystem every host mounts at that path (NFS, Lustre), or give another --checkpoint-dir";
  const std::string marker = shared.path + "/" + shared.marker;
  struct stat status {};
  int stat_error = 0;
  bool seen = false;
  for (int attempt = 0; attempt < 5 && !seen; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    stat_error = stat(shared.path.c_str(), &status) == 0 ? 0 : errno;
    if (stat_error == 0 && !S_ISDIR(status.st_mode)) break;  // waiting will not change that
    seen = stat_error == 0 && access(marker.c_str(), F_OK) == 0;
  }
  if (stat_error == ENOENT)
    return "--checkpoint-dir " + shared.path + " is missing here, but exists on " +
           shared.placed_by + fix;
  if (stat_error != 0)
    return "cannot look at --checkpoint-dir " + shared.path +
           " here: " + std::strerror(stat_error) + fix;
  if (!S_ISDIR(status.st_mode))
    return "--checkpoint-dir " + shared.path + " is not a directory here" + fix;
  if (!seen)
    return "--checkpoint-dir " + shared.path + " is not the directory " + shared.placed_by +
           " sees at that path (the file launch put there, " + shared.marker + ", is not here)" +
           fix;
  const std::string unwritable = why_unwritable(shared.path, shared.marker);
  if (!unwritable.empty())
    return "cannot create a file in --checkpoint-dir " + shared.path + ": " + unwritable +
           "; ranks on every host write their share of each checkpoint there: give every "
           "host's user write access, or another --checkpoint-dir";
  return "";
}

std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream lines(text);
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  return last;
}

std::string short_build(const std::string& build_id) {
  return build_id.empty() ? "no build id" : "build " + build_id.substr(0, 12);
}

// What an unanswered ssh call means, as one line naming the fix.
std::string failure_of(const std::string& host, const ProcessOutput& output,
                       const PreflightRequest& request) {
  const std::string said = last_line(output.err.empty() ? output.out : output.err);
  const std::string detail = said.empty() ? "" : " (" + said + ")";
  if (output.timed_out)
    return "no answer over " + request.remote_shell.front() + " within " +
           std::to_string(static_cast<int>(request.timeout_seconds)) + " s" + detail;
  if (output.exit_code == 255)
    return "cannot reach it over " + request.remote_shell.front() + detail +
           "; passwordless ssh from this host must work (`ssh " + host +
           " true`), or set mpirun's agent (OMPI_MCA_plm_rsh_agent)";
  // The environment's wrapper (run_preflight) says so when it cannot start
  // the agent itself: not the remote paraplan missing.
  if (output.exit_code == 127 && !request.environment.empty() &&
      said.rfind("/usr/bin/env: ", 0) == 0)
    return "cannot start the remote shell " + request.remote_shell.front() + detail +
           " on this host; install it, or set mpirun's agent (OMPI_MCA_plm_rsh_agent)";
  if (output.exit_code == 127)
    return request.binary + " is not there" + detail +
           "; install paraplan at the same path on every host (or share its directory)";
  return "`paraplan preflight` failed with status " + std::to_string(output.exit_code) + detail +
         "; install the same paraplan build on every host";
}

}  // namespace

std::string paraplan_version() {
  return PARAPLAN_VERSION;
}

std::string this_build_id() {
  std::string id;
  dl_iterate_phdr(find_build_id, &id);
  return id;
}

nlohmann::json this_host_findings(const std::vector<std::string>& files, bool count_gpus,
                                  const std::optional<SharedDirectory>& shared) {
  nlohmann::json answer = {{"hostname", this_hostname()},
                           {"version", paraplan_version()},
                           {"build_id", this_build_id()},
                           {"cores", static_cast<int>(std::thread::hardware_concurrency())}};
  nlohmann::json readable = nlohmann::json::array();
  for (const std::string& file : files) readable.push_back({file, why_unreadable(file)});
  answer["files"] = readable;
  nlohmann::json interfaces = nlohmann::json::array();
  for (const InterfaceAddress& interface : this_host_interfaces())
    interfaces.push_back({{"name", interface.name},
                          {"address", ipv4_text(interface.address)},
                          {"prefix", interface.prefix}});
  answer["interfaces"] = interfaces;
  answer["cuda_devices"] = count_gpus ? kernels::cuda_device_count() : -1;
  if (shared) answer["shared_directory"] = {shared->path, shared_directory_problem(*shared)};
  return answer;
}

SharedDirectoryMarker::SharedDirectoryMarker(const std::string& directory, bool create) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::exists(directory, error)) {
    if (!create) return;  // --dry-run makes nothing; launch checks it once it exists
    fs::create_directories(directory, error);
    if (error) {
      problem_ = "cannot create --checkpoint-dir " + directory + ": " + error.message() +
                 "; launch checks from here that every host sees it, so run launch on a host "
                 "that mounts it";
      return;
    }
  }
  std::random_device random;
  // The hosts' messages name this one as where launch runs: a launch host
  // outside the hostfile that lacks the shared mount is then plain to see.
  SharedDirectory shared{directory,
                         ".paraplan-launch-" + this_hostname() + "-" +
                             std::to_string(static_cast<long>(getpid())) + "-" +
                             std::to_string(random()),
                         this_hostname() + " (where launch runs)"};
  const std::string marker = directory + "/" + shared.marker;
  const int fd = open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    problem_ = "cannot create a file in --checkpoint-dir " + directory + ": " +
               std::strerror(errno) +
               "; ranks on every host write their share of each "
               "checkpoint there";
    return;
  }
  close(fd);
  shared_ = shared;
}

SharedDirectoryMarker::~SharedDirectoryMarker() {
  if (shared_) unlink((shared_->path + "/" + shared_->marker).c_str());
}

void ask_about_checkpoint_directory(const LaunchOptions& options, PreflightRequest& request,
                                    std::optional<SharedDirectoryMarker>& marker) {
  const std::string directory = checkpoint_directory(options);
  if (directory.empty()) return;
  marker.emplace(directory, !options.dry_run);
  request.shared_directory = marker->shared();
}

HostFindings findings_from_json(const std::string& host, const nlohmann::json& answer) {
  HostFindings findings;
  findings.host = host;
  findings.hostname = answer.at("hostname").get<std::string>();
  findings.version = answer.at("version").get<std::string>();
  findings.build_id = answer.at("build_id").get<std::string>();
  findings.cores = answer.at("cores").get<int>();
  findings.cuda_devices = answer.at("cuda_devices").get<int>();
  if (answer.contains("shared_directory"))
    findings.shared_directory_problem = answer.at("shared_directory").at(1).get<std::string>();
  for (const auto& file : answer.at("files"))
    findings.files.emplace_back(file.at(0).get<std::string>(), file.at(1).get<std::string>());
  for (const auto& interface : answer.at("interfaces")) {
    const auto address = parse_ipv4(interface.at("address").get<std::string>());
    if (!address) throw std::runtime_error("bad address in the answer");
    findings.interfaces.push_back(
        {interface.at("name").get<std::string>(), *address, interface.at("prefix").get<int>()});
  }
  return findings;
}

bool is_this_host(const std::string& host) {
  if (host == "localhost") return true;
  char hostname[256] = {};
  gethostname(hostname, sizeof hostname - 1);
  const std::string name = hostname;
  if (host == name || host == name.substr(0, name.find('.'))) return true;
  const std::vector<InterfaceAddress> interfaces = this_host_interfaces();
  for (const uint32_t address : resolve_ipv4(host)) {
    if ((address >> 24) == 127) return true;
    for (const InterfaceAddress& interface : interfaces)
      if (interface.address == address) return true;
  }
  return false;
}

namespace {

// An MCA parameter as mpirun would see it: --mca NAME VALUE among the
// arguments (the last wins), else OMPI_MCA_NAME in the environment mpirun
// runs with; "" when neither.
std::string mca_parameter(const std::vector<std::string>& mpirun_arguments,
                          const std::vector<std::string>& environment,
                          const std::vector<std::string>& names) {
  std::string value;
  for (size_t i = 0; i + 2 < mpirun_arguments.size(); ++i)
    if ((mpirun_arguments[i] == "--mca" || mpirun_arguments[i] == "-mca") &&
        std::find(names.begin(), names.end(), mpirun_arguments[i + 1]) != names.end())
      value = mpirun_arguments[i + 2];
  for (const std::string& name : names) {
    if (!value.empty()) break;
    const std::string prefix = "OMPI_MCA_" + name + "=";
    for (const std::string& entry : environment)
      if (entry.rfind(prefix, 0) == 0) value = entry.substr(prefix.size());
  }
  return value;
}

}  // namespace

std::vector<std::string> remote_shell(const std::vector<std::string>& mpirun_arguments,
                                      const std::vector<std::string>& environment) {
  std::string agent =
      mca_parameter(mpirun_arguments, environment, {"plm_rsh_agent", "orte_rsh_agent"});
  agent = agent.substr(0, agent.find(':'));  // "ssh : rsh": the first that exists; ssh here
  std::vector<std::string> words;
  std::istringstream split(agent);
  for (std::string word; split >> word;) words.push_back(word);
  if (words.empty()) words.push_back("ssh");
  // plm_rsh_args: Open MPI puts them after the agent (e.g. "-F cluster_ssh_config").
  std::istringstream arguments(
      mca_parameter(mpirun_arguments, environment, {"plm_rsh_args", "orte_rsh_args"}));
  for (std::string word; arguments >> word;) words.push_back(word);
  return words;
}

std::vector<HostFindings> run_preflight(const PreflightRequest& request) {
  std::vector<HostFindings> findings(request.hosts.size());
  std::vector<std::vector<std::string>> commands;
  std::vector<size_t> remote;  // indices of the hosts asked over ssh
  std::vector<std::string> remote_command = {request.binary, "preflight"};
  for (const std::string& file : request.files)
    remote_command.insert(remote_command.end(), {"--file", file});
  if (request.count_gpus) remote_command.push_back("--count-gpus");
  if (request.shared_directory)
    remote_command.insert(remote_command.end(),
                          {"--shared-directory", request.shared_directory->path, "--marker",
                           request.shared_directory->marker, "--marker-placed-by",
                           request.shared_directory->placed_by});
  for (size_t i = 0; i < request.hosts.size(); ++i) {
    const std::string& host = request.hosts[i].name;
    if (is_this_host(host)) {
      findings[i] = findings_from_json(
          host, this_host_findings(request.files, request.count_gpus, request.shared_directory));
      findings[i].this_host = true;
      continue;
    }
    std::vector<std::string> command = request.remote_shell;
    const std::string agent = command.front().substr(command.front().find_last_of('/') + 1);
    if (agent == "ssh")  // never prompt; give up on a dead host in seconds
      command.insert(command.end(), {"-o", "BatchMode=yes", "-o", "ConnectTimeout=10"});
    command.push_back(host);
    command.push_back(shell_quote_command(remote_command));  // ssh hands it to a shell
    if (!request.environment.empty()) {  // as mpirun starts its agent: in its environment
      std::vector<std::string> in_environment = {"/usr/bin/env", "-i"};
      in_environment.insert(in_environment.end(), request.environment.begin(),
                            request.environment.end());
      command.insert(command.begin(), in_environment.begin(), in_environment.end());
    }
    commands.push_back(command);
    remote.push_back(i);
  }
  const std::vector<ProcessOutput> outputs = run_concurrently(commands, request.timeout_seconds);
  for (size_t k = 0; k < remote.size(); ++k) {
    HostFindings& host = findings[remote[k]];
    const std::string& name = request.hosts[remote[k]].name;
    const ProcessOutput& output = outputs[k];
    if (output.exit_code == 0 && !output.timed_out) {
      try {
        host = findings_from_json(name, nlohmann::json::parse(last_line(output.out)));
        continue;
      } catch (const std::exception&) {  // an answer of another paraplan
      }
    }
    host.host = name;
    host.failure = output.exit_code == 0 ? "its paraplan answered `paraplan preflight` with " +
                                               std::string("something else; install the same ") +
                                               "paraplan build on every host"
                                         : failure_of(name, output, request);
  }
  return findings;
}

std::vector<std::string> host_problems(const HostFindings& host, int slots,
                                       const PreflightRequest& request, const std::string& version,
                                       const std::string& build_id) {
  if (!host.failure.empty()) return {host.failure};
  std::vector<std::string> problems;
  if (host.version != version || host.build_id != build_id)
    problems.push_back("paraplan " + host.version + " (" + short_build(host.build_id) + ") at " +
                       request.binary + " differs from this host's " + version + " (" +
                       short_build(build_id) +
                       "); install the same build at that path on every "
                       "host");
  for (const auto& [file, reason] : host.files)
    if (!reason.empty())
      problems.push_back("cannot read " + file + ": " + reason +
                         "; put it on a filesystem every host shares, or copy it to the same "
                         "path on each");
  if (request.count_gpus && host.cuda_devices < slots)
    problems.push_back(std::to_string(host.cuda_devices) +
                       " CUDA device(s) but the hostfile gives it slots=" + std::to_string(slots) +
                       " (one rank per device); lower its slots and plan for that, or use "
                       "--backend cpu");
  if (request.shared_directory && host.shared_directory_problem &&
      !host.shared_directory_problem->empty())
    problems.push_back(*host.shared_directory_problem);
  return problems;
}

std::vector<std::string> preflight_problems(const std::vector<HostFindings>& findings,
                                            const PreflightRequest& request,
                                            const std::string& version,
                                            const std::string& build_id) {
  std::vector<std::string> problems;
  for (size_t i = 0; i < findings.size(); ++i) {
    const int slots = i < request.hosts.size() ? request.hosts[i].slots : 0;
    for (const std::string& problem : host_problems(findings[i], slots, request, version, build_id))
      problems.push_back(findings[i].host + ": " + problem);
  }
  return problems;
}

std::string describe_findings(const std::vector<HostFindings>& findings) {
  std::string text;
  for (const HostFindings& host : findings) {
    text += "preflight: " + host.host + (host.this_host ? " (this host)" : "") + ": ";
    if (!host.failure.empty()) {
      text += host.failure + "\n";
      continue;
    }
    text += "hostname " + host.hostname + ", paraplan " + host.version + " (" +
            short_build(host.build_id) + "), " + std::to_string(host.cores) + " cores";
    if (host.cuda_devices >= 0) text += ", " + std::to_string(host.cuda_devices) + " CUDA devices";
    size_t readable = 0;
    for (const auto& file : host.files) readable += file.second.empty() ? 1 : 0;
    text += ", " + std::to_string(readable) + " of " + std::to_string(host.files.size()) +
            " files readable";
    if (host.shared_directory_problem)
      text += host.shared_directory_problem->empty() ? ", the checkpoint directory shared"
                                                     : ", the checkpoint directory not shared";
    text += "; interfaces";
    for (const InterfaceAddress& interface : host.interfaces)
      text += " " + interface.name + " " + ipv4_text(interface.address) + "/" +
              std::to_string(interface.prefix);
    text += "\n";
  }
  return text;
}

}  // namespace paraplan
