// cuda_graphs.cu: LaunchGraphs (cuda_graphs.cuh), the CUDA backend's
// recorded launches.
#include <cstdio>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_graphs.cuh"

namespace paraplan::kernels::cuda {

LaunchGraphs::~LaunchGraphs() {
  forget();
}

void LaunchGraphs::forget() {
  for (auto& [key, entry] : entries_)
    if (entry.graph != nullptr) cudaGraphExecDestroy(entry.graph);
  entries_.clear();
}

void LaunchGraphs::run(uint64_t key, const std::function<void()>& launches) {
  Entry& entry = entries_[key];
  if (entry.graph != nullptr) {
    PARAPLAN_CUDA_CHECK(cudaGraphLaunch(entry.graph, stream_));
    return;
  }
  // The first run warms every cache; a key whose capture failed stays plain.
  if (entry.plain || entry.runs++ == 0) {
    launches();
    return;
  }
  if (capture(entry, launches)) {
    PARAPLAN_CUDA_CHECK(cudaGraphLaunch(entry.graph, stream_));
    return;
  }
  entry.plain = true;
  launches();  // nothing of the broken capture ran
}

bool LaunchGraphs::capture(Entry& entry, const std::function<void()>& launches) {
  PARAPLAN_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  bool broke = false;
  try {
    launches();
  } catch (const std::exception& error) {
    // A call that cannot be captured fails with its own error; the capture
    // is then invalidated and ends below.
    std::fprintf(stderr,
                 "paraplan: CUDA graphs: a compute step could not be recorded (%s); it "
                 "runs without a graph\n",
                 error.what());
    broke = true;
  } catch (...) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);  // the stream (and any joined) usable again
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (broke || ended != cudaSuccess || graph == nullptr) {
    if (!broke)
      std::fprintf(stderr,
                   "paraplan: CUDA graphs: capture ended with %s; the step runs without "
                   "a graph\n",
                   cudaGetErrorString(ended));
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is not the next call's
    return false;
  }
  const cudaError_t made = cudaGraphInstantiate(&entry.graph, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) {
    entry.graph = nullptr;
    cudaGetLastError();
    std::fprintf(stderr,
                 "paraplan: CUDA graphs: instantiating failed with %s; the step runs "
                 "without a graph\n",
                 cudaGetErrorString(made));
    return false;
  }
  return true;
}

}  // namespace paraplan::kernels::cuda
