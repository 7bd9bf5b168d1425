// data_list.h: a data argument's list form. `--data`, `--val-data` and the
// job file's [data] paths are one path, a glob, or a comma-separated list of
// them; the runtime expands the entries (runtime/data/data_paths.h), and the
// planner and the launcher make them absolute so that ranks on other hosts,
// whose working directory is their home, find them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace paraplan {

// The entries as given, empty ones kept ("a.bin,,b" -> "a.bin", "", "b") so
// that the reader can name them.
inline std::vector<std::string> data_list_entries(const std::string& list) {
  std::vector<std::string> entries;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    entries.push_back(list.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) return entries;
    start = comma + 1;
  }
}

// The list with each non-empty entry made absolute and normalized; "" stays "".
inline std::string absolute_data_list(const std::string& list) {
  std::string result;
  const std::vector<std::string> entries = data_list_entries(list);
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) result += ',';
    if (!entries[i].empty())
      result += std::filesystem::absolute(entries[i]).lexically_normal().string();
  }
  return result;
}

}  // namespace paraplan
