// cpu_threads.cc: the CPU backend's worker pool (contract in cpu_threads.h).
#include "kernels/cpu/cpu_threads.h"

#include <stdexcept>

namespace paraplan::kernels::cpu {

CpuThreadPool::CpuThreadPool(int threads) : threads_(threads) {
  if (threads < 1) throw std::invalid_argument("CpuThreadPool: threads must be >= 1");
}

CpuThreadPool::~CpuThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void CpuThreadPool::take_tasks() {
  // Tasks are claimed under the lock: they are large (tens of thousands of
  // elements), so the lock is not what limits the pool.
  std::unique_lock<std::mutex> lock(mutex_);
  while (next_ < tasks_) {
    const size_t index = next_++;
    const std::function<void(size_t)>& task = *task_;
    lock.unlock();
    task(index);
    lock.lock();
    if (++finished_ == tasks_) done_.notify_all();
  }
}

void CpuThreadPool::work() {
  unsigned long seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    take_tasks();
  }
}

void CpuThreadPool::run(size_t tasks, const std::function<void(size_t)>& task) {
  if (tasks == 0) return;
  if (threads_ == 1 || tasks == 1) {
    for (size_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  if (workers_.empty())
    for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work(); });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    task_ = &task;
    tasks_ = tasks;
    next_ = finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  take_tasks();
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_ == tasks_; });
  task_ = nullptr;
  tasks_ = next_ = finished_ = 0;
}

}  // namespace paraplan::kernels::cpu
