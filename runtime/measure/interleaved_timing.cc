// interleaved_timing.cc: repeated and interleaved timing for the profiler
// (interleaved_timing.h).
#include "runtime/measure/interleaved_timing.h"

#include <algorithm>

#include "runtime/measure/span_clock.h"

namespace paraplan {

namespace {

// Runs of one piece so far.
struct Tally {
  int runs = 0;
  double elapsed = 0, timed = 0;  // wall seconds, and the seconds counted
  double mean() const { return runs > 0 ? timed / runs : 0; }
};

// Adds at least `runs` runs of work and `window` seconds of wall time to tally.
void time_runs(kernels::Ops& ops, Timing timing, const TimedPiece& piece, int runs, double window,
               Tally& tally) {
  const bool cpu_time = timing == Timing::kWork && ops.backend() == kernels::Backend::kCpu;
  const double elapsed_before = tally.elapsed;
  for (int run = 0; run < runs || tally.elapsed - elapsed_before < window; ++run) {
    if (piece.prepare) {
      piece.prepare();
      ops.synchronize();
    }
    SpanClock span;
    piece.work();
    ops.synchronize();
    span.stop();
    ++tally.runs;
    tally.elapsed += span.wall();
    tally.timed += cpu_time ? span.work() : span.wall();
  }
}

}  // namespace

double mean_seconds(kernels::Ops& ops, int repetitions, double window, Timing timing,
                    const std::function<void()>& work, const std::function<void()>& prepare) {
  double seconds = 0;
  time_interleaved(ops, repetitions, window, 1, timing, {TimedPiece{work, prepare, &seconds}});
  return seconds;
}

void time_interleaved(kernels::Ops& ops, int repetitions, double window, int rounds, Timing timing,
                      const std::vector<TimedPiece>& pieces) {
  rounds = std::max(rounds, 1);
  for (const TimedPiece& piece : pieces) {
    if (piece.prepare) piece.prepare();
    piece.work();
  }
  ops.synchronize();
  std::vector<Tally> tallies(pieces.size());
  const int runs_per_round = (repetitions + rounds - 1) / rounds;
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < pieces.size(); ++i)
      time_runs(ops, timing, pieces[i], runs_per_round, window / rounds, tallies[i]);
  for (size_t i = 0; i < pieces.size(); ++i) *pieces[i].seconds = tallies[i].mean();
}

}  // namespace paraplan
