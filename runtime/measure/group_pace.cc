// group_pace.cc: a piece's pace with its group against alone (group_pace.h).
#include "runtime/measure/group_pace.h"

#include <algorithm>

#include "runtime/measure/span_clock.h"

namespace paraplan {

namespace {

// A run's compute and wall seconds: the work outside the group's calls.
struct RunTimes {
  double compute = 0, wall = 0;
};

RunTimes time_run(kernels::Ops& ops, const std::function<void()>& work,
                  const std::function<void()>& prepare, const GroupCallTotals& totals) {
  if (prepare) {
    prepare();
    ops.synchronize();
  }
  const GroupCallTotals before = totals;
  SpanClock span;
  work();
  ops.synchronize();
  span.stop();
  const double calls_wall = totals.seconds - before.seconds;
  const double calls_cpu = totals.cpu_seconds - before.cpu_seconds;
  const double outside = span.wall() - calls_wall;
  const double compute = ops.backend() == kernels::Backend::kCpu
                             ? std::clamp(span.cpu() - calls_cpu, 0.0, outside)
                             : outside;
  return {compute, span.wall()};
}

}  // namespace

double time_in_group(kernels::Ops& ops, RecordingCommunicator& group, GroupCallTotals& totals,
                     int runs, int rounds, const std::vector<PacedPiece>& pieces) {
  totals.recording = false;
  for (const PacedPiece& piece : pieces) {  // warm-up, untimed
    time_run(ops, piece.alone, piece.alone_prepare, totals);
    time_run(ops, piece.grouped, piece.grouped_prepare, totals);
  }
  std::vector<double> alone(pieces.size(), 0.0), grouped(pieces.size(), 0.0);
  double grouped_wall = 0;
  for (int round = 0; round < std::max(rounds, 1); ++round)
    for (size_t i = 0; i < pieces.size(); ++i) {
      for (int run = 0; run < runs; ++run)
        alone[i] += time_run(ops, pieces[i].alone, pieces[i].alone_prepare, totals).compute;
      // The members leave the alone runs at different times: start together.
      group.barrier();
      for (int run = 0; run < runs; ++run) {
        if (pieces[i].grouped_prepare) {
          pieces[i].grouped_prepare();
          ops.synchronize();
        }
        totals.recording = true;
        const RunTimes times = time_run(ops, pieces[i].grouped, nullptr, totals);
        totals.recording = false;
        grouped[i] += times.compute;
        grouped_wall += times.wall;
      }
    }
  double compute = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    *pieces[i].ratio = alone[i] > 0 ? grouped[i] / alone[i] : 1;
    compute += grouped[i];
  }
  const size_t calls = group.recorded_calls();
  const TransferAndWait split = group.split_recorded_calls();
  if (calls == 0) return 0;
  return std::max(0.0, grouped_wall - compute - split.transfer) / static_cast<double>(calls);
}

}  // namespace paraplan
