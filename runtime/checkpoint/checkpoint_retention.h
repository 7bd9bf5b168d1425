// checkpoint_retention.h: keeping only the newest K checkpoints of a
// directory (`train --checkpoint-keep-latest K`, torchtitan's keep_latest_k).
// A 70B model's checkpoint with its optimizer state is about a terabyte, so a
// run that saves every hour fills its filesystem within a day unless old ones
// go.
//
// Only step directories at or before the step just saved count: a directory
// of a later step belongs to a run that went further before this one resumed
// from an earlier checkpoint, and is left for the user to judge. A run that
// did not resume counts only what it saved itself (the directory may hold an
// earlier, unrelated run's). Each one removed is first renamed aside
// (step_N.tmp-<pid>-<n>), so a removal cut short never leaves a partial step
// directory that looks like a checkpoint; a later run's first save clears
// what is left once this process is gone (checkpoint.h).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace paraplan {

// Removes the step directories of `dir` at or before `current_step` beyond
// the newest `keep` of them (keep >= 1), and returns their names, oldest
// first. With `only`, just the names it holds count. The directory 'latest'
// names is never removed.
std::vector<std::string> remove_old_checkpoints(const std::string& dir, int64_t current_step,
                                                int keep,
                                                const std::set<std::string>* only = nullptr);

}  // namespace paraplan
