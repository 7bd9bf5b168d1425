// interleaved_timing.h: how `paraplan profile` times a piece of work: the
// mean of repeated runs after a warm-up, by wall clock or, on the CPU
// backend, by the work a rank does (span_clock.h); and several pieces timed
// in rounds that visit each in turn, so that all of them see the same
// stretch of a machine whose speed drifts.
#pragma once

#include <functional>
#include <vector>

#include "kernels/ops.h"

namespace paraplan {

// kWall: the seconds a run took. kWork: on the CPU backend the CPU time the
// process got, capped at the wall time (a dedicated core's seconds, what
// replay counts: with ranks sharing cores the planner adds the sharing); on a
// device the wall time.
enum class Timing { kWall, kWork };

// Mean seconds of one run of `work`, after one warm-up run, over at least
// `repetitions` runs and at least `window` seconds of wall time. `prepare`,
// when given, runs untimed before each run (what work consumes).
double mean_seconds(kernels::Ops& ops, int repetitions, double window, Timing timing,
                    const std::function<void()>& work,
                    const std::function<void()>& prepare = nullptr);

// A piece of work to time, what it consumes (untimed before each run, may be
// empty), and where its mean seconds go.
struct TimedPiece {
  std::function<void()> work, prepare;
  double* seconds;
};

// Every piece's mean seconds, each after one warm-up run, over at least
// `repetitions` runs and `window` seconds of wall time in all, taken in
// `rounds` rounds that visit the pieces in turn (each round at least
// ceil(repetitions / rounds) runs and window / rounds seconds of each).
void time_interleaved(kernels::Ops& ops, int repetitions, double window, int rounds, Timing timing,
                      const std::vector<TimedPiece>& pieces);

}  // namespace paraplan
