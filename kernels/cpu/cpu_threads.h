// cpu_threads.h: the CPU backend's worker threads for its memory-bound
// passes (AdamW, the sum of squares), which OpenBLAS's pool does not run.
//
// Contract: run(tasks, task) calls task(i) exactly once for every i in
// [0, tasks), spread over the pool's threads (the caller is one of them), and
// returns when every call has finished. Which thread runs which task is not
// fixed, so a task must compute the same bits whoever runs it: callers cut
// their work into tasks of a fixed size that does not depend on the thread
// count, and combine per-task results in task order. One run at a time (an
// Ops object is not thread-safe either). Workers start on the first run with
// more than one task and sleep between runs.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace paraplan::kernels::cpu {

class CpuThreadPool {
 public:
  // threads >= 1: the caller plus threads - 1 workers.
  explicit CpuThreadPool(int threads);
  ~CpuThreadPool();
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int threads() const { return threads_; }
  void run(size_t tasks, const std::function<void(size_t)>& task);

 private:
  void work();        // a worker's loop
  void take_tasks();  // claims and runs tasks of the current run until none is left
  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(size_t)>* task_ = nullptr;
  size_t tasks_ = 0, next_ = 0, finished_ = 0;
  unsigned long generation_ = 0;
  bool stopping_ = false;
};

}  // namespace paraplan::kernels::cpu
