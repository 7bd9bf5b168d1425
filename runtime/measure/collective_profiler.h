// collective_profiler.h: `paraplan profile`'s collective measurements: the
// time of all-reduce, reduce-scatter and all-gather by group size and message
// size (each size measured, and latency and bandwidth fitted to them), and of
// a pipeline neighbours' exchange, each
// through the communicators a job of this transport builds (NCCL or staged MPI
// on device buffers for CUDA, MPI on host buffers for the CPU), with messages
// up to the gradient bucket a step reduces at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "schema/profile_format.h"

namespace paraplan {

struct CollectiveProfileRequest {
  std::string transport = "auto";  // as --transport (runtime/comm/transport.h)
  // The largest message measured on a device backend: the gradient bucket.
  // The CPU backend measures up to 4 MB (its bandwidth is flat beyond).
  uint64_t largest_bytes = uint64_t{4} << 20;
  int repetitions = 5;
  double minimum_window_seconds = 0.2;
  // CPU backend: the bytes a step's compute touches between two collectives
  // of a group of this many ranks, which the stand-in compute before each
  // timed call streams through (empty: 8 MiB, out of a core's caches).
  std::function<uint64_t(int group_size)> compute_bytes;
};

// The message sizes measured: every power of two from 16 KiB to 4 MiB (a
// step's activations and pipeline messages lie there, and its curve bends
// there: caches on a CPU, protocols on a GPU), then x4 up to largest_bytes
// (device backends only), the last one largest_bytes itself.
std::vector<double> collective_message_bytes(kernels::Backend backend, uint64_t largest_bytes);

// Collective over MPI_COMM_WORLD (more than one process). Every group of each
// size is measured at once, as the groups of a step run at once; the
// communicators it builds are freed before it returns.
std::vector<CollectiveEntry> measure_collectives(kernels::Ops& ops,
                                                 const CollectiveProfileRequest& request);

}  // namespace paraplan
