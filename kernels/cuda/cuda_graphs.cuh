// cuda_graphs.cuh: Ops::run_recorded on the CUDA backend (PARAPLAN_CUDA_GRAPHS=1):
// per key, the first run is plain (it fills the cuBLASLt and cuDNN caches,
// the scratch and the attention choice), the second is captured from the
// ops' stream into a CUDA graph (relaxed mode, so a cache that still grows
// may allocate; streams forked from it by events, the weight gradients'
// among them, join the graph), instantiated and launched; later runs launch
// the graph. A capture that fails (a call inside that waits for the device
// or copies from the host) is ended, said once on stderr, and that key runs
// plain from then on. Launching a graph of hundreds of kernels costs about
// what one kernel launch does on the host, which is where small
// micro-batches spend their step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <unordered_map>

namespace paraplan::kernels::cuda {

class LaunchGraphs {
 public:
  explicit LaunchGraphs(cudaStream_t stream) : stream_(stream) {}
  ~LaunchGraphs();
  LaunchGraphs(const LaunchGraphs&) = delete;
  LaunchGraphs& operator=(const LaunchGraphs&) = delete;

  void run(uint64_t key, const std::function<void()>& launches);
  // Drops every key's graph (one still running is freed when it ends).
  void forget();

 private:
  struct Entry {
    int runs = 0;
    bool plain = false;  // its capture failed: always run plainly
    cudaGraphExec_t graph = nullptr;
  };
  // Captures launches() into entry's graph; false (capture ended, nothing
  // left queued) when the capture broke.
  bool capture(Entry& entry, const std::function<void()>& launches);

  cudaStream_t stream_;
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace paraplan::kernels::cuda
