// replay.h: `paraplan replay`: runs a plan for N steps on synthetic tokens and
// puts what it measured beside what the plan predicted.
//
// Every rank of the job runs this (start it with `paraplan launch`). The first
// `warmup` steps are run and not measured. Each instruction is timed (the
// device synchronized around it) and the collectives inside it are timed
// apart, so each stage's time splits into forward and backward compute per
// micro-batch, tensor-parallel all-reduces, the data-parallel reduction and
// optimizer step, and what is left of the step: pipeline transfers and the
// waits of the bubble. Peak memory is measured per category. The memory
// tracker holds each rank to the plan's device memory, so a plan that does
// not fit fails here as it would on the device ("out of device memory").
//
// Rank 0 prints the table, and writes the same as JSON (--report), a Chrome
// trace with one track per rank (--trace) and an SVG of the timeline
// (--timeline).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace paraplan {

struct ReplayOptions {
  std::string plan_path;
  int steps = 10;  // measured
  int warmup = 2;  // run first, not measured
  std::string backend = "cpu";
  std::string report_path;    // optional: JSON
  std::string trace_path;     // optional: Chrome trace-event JSON
  std::string timeline_path;  // optional: SVG
  bool enforce_device_memory = true;
  double collective_timeout_seconds = 600;  // 0: wait forever (rank_state.h)
  std::string transport = "auto";           // auto | mpi | nccl | staged (transport.h)
};

// Returns the report (complete on rank 0; other ranks get {}). Throws on bad
// input before allocating; a failure on one rank ends the whole job.
nlohmann::json replay(const ReplayOptions& options);

}  // namespace paraplan
