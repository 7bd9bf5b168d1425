// span_clock.h: a span of wall time and the CPU time the process got in it
// (all its threads), and a CPU rank's work in it: that CPU time capped at the
// span. Replay, its recording communicators and the profiler count a CPU
// rank's compute and transfers this way (ranks may outnumber the cores; time
// off a core is waiting). The CPU clock is read inside the wall-clock span, so
// that a preemption at a clock read counts as waiting for a core, not as work.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>

namespace paraplan {

inline double process_cpu_seconds() {
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
}

class SpanClock {
 public:
  SpanClock() : wall_start_(Clock::now()), cpu_start_(process_cpu_seconds()) {}
  // Ends the span; wall(), cpu() and work() are its figures from then on.
  void stop() {
    cpu_ = process_cpu_seconds() - cpu_start_;
    wall_ = std::chrono::duration<double>(Clock::now() - wall_start_).count();
  }
  double wall() const { return wall_; }
  double cpu() const { return cpu_; }
  double work() const { return std::clamp(cpu_, 0.0, wall_); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point wall_start_;
  double cpu_start_;
  double wall_ = 0, cpu_ = 0;
};

}  // namespace paraplan
