// data_paths.h: the files a data argument names. `--data`, `--val-data` and
// the job file's [data] entries take one path, a glob, or a comma-separated
// list of them, as llm.c's trainer takes "fineweb_train_*.bin":
//   "train.bin"   "shards/fineweb_train_*.bin"   "a.bin,b_*.bin"
// A glob expands in sorted name order (byte order, not the locale's); a list
// keeps the order given, so the files and their order are the same on every
// rank and every run.
#pragma once

#include <string>
#include <vector>

#include "common/data_list.h"  // data_list_entries

namespace paraplan {

// The files of `spec`, in order. Throws std::runtime_error naming `what` (the
// flag or job-file key) and the entry when an entry is empty, a glob matches
// no file, or a file is named twice (it would silently double its weight).
// Plain paths are not checked here: opening them names what is wrong.
std::vector<std::string> expand_data_paths(const std::string& spec, const std::string& what);

// True when `entry` holds a glob character (*, ? or [).
bool is_glob(const std::string& entry);

}  // namespace paraplan
