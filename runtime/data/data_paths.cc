// data_paths.cc: comma-separated paths and globs -> files (data_paths.h).
#include "runtime/data/data_paths.h"

#include <glob.h>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace paraplan {

namespace {

std::vector<std::string> glob_files(const std::string& pattern, const std::string& what) {
  glob_t found{};
  const int result = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  std::vector<std::string> files;
  for (size_t i = 0; result == 0 && i < found.gl_pathc; ++i) files.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  if (result == GLOB_NOMATCH || (result == 0 && files.empty()))
    throw std::runtime_error(what + " '" + pattern +
                             "': the glob matches no file (is the path right, relative to the "
                             "directory the job runs in?)");
  if (result != 0)
    throw std::runtime_error(
        what + " '" + pattern + "': cannot expand the glob (" +
        (result == GLOB_NOSPACE ? "out of memory" : "a directory is unreadable") + ")");
  // glob(3) sorts by the locale's collation; byte order is the same everywhere.
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool is_glob(const std::string& entry) {
  return entry.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> expand_data_paths(const std::string& spec, const std::string& what) {
  if (spec.empty()) throw std::runtime_error(what + ": no file named (an empty path)");
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const std::string& entry : data_list_entries(spec)) {
    if (entry.empty())
      throw std::runtime_error(what + " '" + spec +
                               "': an empty entry in the list (separate files with single commas)");
    for (std::string& file : is_glob(entry) ? glob_files(entry, what) : std::vector{entry}) {
      if (!seen.insert(file).second)
        throw std::runtime_error(what + " '" + spec + "': " + file +
                                 " is named twice (a list's entries and globs must not overlap)");
      files.push_back(std::move(file));
    }
  }
  return files;
}

}  // namespace paraplan
