// profile_command.h: `paraplan profile --config job.toml [--backend cpu|cuda]
// [--profile-dir DIR]`: measures this backend and device for the shapes the
// planner will consider for the job and stores them in
// <profile_dir>/profile.json under the job's device ([cluster] preset).
//
// AutoDist's options keep their meaning: parallel_profile = true measures
// with every local device busy (one rank per device of the node, started
// with mpirun when this process was not); false measures in one process.
// re_profile = false keeps the entries already stored for this device and
// measures only the missing shapes; true measures everything again. Other
// devices' entries in the file are kept. The file is replaced atomically.
#pragma once

#include <string>
#include <vector>

namespace paraplan {

struct ProfileArguments {
  std::string config;
  std::string model_from;  // launcher/model_from.h
  std::string backend = "cpu";
  std::string profile_dir;  // overrides [planner] profile_dir
  int repetitions = 5;
  double minimum_window_seconds = 0.2;
  std::string mpirun = "mpirun";
  std::string transport = "auto";  // the collectives' (as the job's --transport)
};

// extras: --section.key value overrides of the job file. self_arguments:
// this process's arguments after the program name (re-run under mpirun).
void run_profile(const ProfileArguments& arguments, const std::vector<std::string>& extras,
                 const std::vector<std::string>& self_arguments);

}  // namespace paraplan
