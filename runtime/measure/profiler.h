// profiler.h: `paraplan profile`'s measurements on this backend and device:
// per-layer forward and backward time for each (tensor-parallel degree,
// micro-batch size) the planner considers (the mean of two blocks in a row,
// as a stage runs them: one block run again and again keeps its weights in
// the cache; with tp > 1 also in lock-step with the real group where each
// rank has a core of its own, group_pace.h), the attention core alone, the
// embedding and the head, the optimizer step per parameter, GEMM throughput,
// and latency + bandwidth (alpha-beta) of each collective by group size
// (collective_profiler.h: the job's transport, on the backend's buffers).
//
// Every rank of the MPI job measures at once (AutoDist's parallel profiling:
// every local device busy, as in a real multi-rank run; on the CPU backend
// the ranks share the cores, and this is what captures it). A one-process
// run is a sequential profile. Compute is timed without its tensor-parallel
// all-reduces (a stand-in group of the right size that moves nothing), as the
// planner adds collectives from their own measurements. On the CPU backend
// compute, the optimizer and the collectives are timed by the CPU time a
// process got (profile.json's `clock: cpu`), as replay counts them; the
// planner adds what sharing the cores costs.
//
// The result is one device's section of profile.json
// (schema/profile_format.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/model/model_config.h"
#include "schema/profile_format.h"

namespace paraplan {

struct ProfileRequest {
  TransformerConfig model;  // only the shapes matter (num_layers is ignored)
  std::vector<int> tensor_parallel;
  std::vector<int> micro_batch_sizes;
  // (tensor_parallel, micro_batch_size) pairs already measured and kept: skipped.
  std::vector<std::pair<int, int>> already_measured;
  std::string backend = "cpu";
  kernels::DType dtype = kernels::DType::kFloat32;  // the storage dtype measured (model.dtype)
  int repetitions = 5;  // timed runs per measurement at least (mean), after one warm-up
  // Each measurement runs at least this long (time slices shared with other
  // processes average out over it).
  double minimum_window_seconds = 0.2;
  bool collectives = true;
  // The collectives' transport (as --transport) and largest message (the
  // job's gradient bucket; device backends only): collective_profiler.h.
  std::string transport = "auto";
  uint64_t largest_collective_bytes = uint64_t{4} << 20;
};

// Collective over the session's world. Returns the device entry on every rank.
DeviceProfile measure_device_profile(const ProfileRequest& request, MpiSession& session);

// The bytes a step's compute touches between two tensor-parallel
// collectives of a `tensor_parallel` group: half a block, the MLP's (its two
// weights' shards, its input and hidden activations for one micro-batch), in
// the backend's storage dtype. The CPU collective profile's stand-in compute
// streams this much before each timed call.
uint64_t bytes_between_collectives(const kernels::Ops& ops, const TransformerConfig& model,
                                   int micro_batch, int tensor_parallel);

// "Intel(R) Xeon(R) ... x 2 cores" (CPU) or the GPU's name and PCI bus id:
// what profile.json records as measured_on.description.
std::string describe_device(const kernels::Ops& ops);

}  // namespace paraplan
