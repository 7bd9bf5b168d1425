// checkpoint_retention.cc: removing all but the newest checkpoints
// (checkpoint_retention.h).
#include "runtime/checkpoint/checkpoint_retention.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "common/atomic_file.h"
#include "runtime/checkpoint/checkpoint.h"

namespace paraplan {
namespace fs = std::filesystem;

namespace {

// The step directory name 'latest' holds, or "" when there is none.
std::string latest_name(const fs::path& dir) {
  std::ifstream latest(dir / "latest");
  std::string name;
  std::getline(latest, name);
  return name;
}

}  // namespace

std::vector<std::string> remove_old_checkpoints(const std::string& dir, int64_t current_step,
                                                int keep, const std::set<std::string>* only) {
  if (keep < 1)
    throw std::invalid_argument("remove_old_checkpoints: keep " + std::to_string(keep) +
                                " (at least 1)");
  std::vector<std::pair<int64_t, std::string>> steps;  // at or before current_step
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const std::optional<int64_t> step = parse_step_directory_name(name);
    if (step && *step <= current_step && (!only || only->count(name)) && entry.is_directory(error))
      steps.emplace_back(*step, name);
  }
  if (error)
    throw std::runtime_error(dir + ": cannot list the checkpoints to keep the newest " +
                             std::to_string(keep) + ": " + error.message());
  std::sort(steps.begin(), steps.end());
  const std::string latest = latest_name(dir);
  std::vector<std::string> removed;
  for (size_t i = 0; i + keep < steps.size(); ++i) {
    const std::string& name = steps[i].second;
    if (name == latest) continue;
    const fs::path aside = unique_temp_path(fs::path(dir) / name);
    fs::rename(fs::path(dir) / name, aside, error);
    if (error)
      throw std::runtime_error(dir + "/" + name +
                               ": cannot remove an old checkpoint: " + error.message());
    fs::remove_all(aside, error);
    if (error)
      throw std::runtime_error(aside.string() +
                               ": cannot remove an old checkpoint: " + error.message());
    removed.push_back(name);
  }
  if (!removed.empty()) fsync_directory(dir);
  return removed;
}

}  // namespace paraplan
