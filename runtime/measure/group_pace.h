// group_pace.h: how a piece of work runs in lock-step with its group against
// alone, for `paraplan profile`'s tensor_group figures (TensorGroupPace,
// schema/profile_format.h). A tensor-parallel group moves at its slowest
// member's pace: at every synchronizing call the others wait for the last to
// arrive, and the compute between calls runs slower than the same compute
// with no calls (the transfers' buffers take the cache). Neither shows in a
// compute-only profile plus the collectives' own profile; replay measures
// both (the compute as compute, the rest as waits).
//
// Each piece runs `runs` times per round alone and then `runs` times with its
// group, in `rounds` rounds (so both see the same stretch of a machine whose
// speed drifts), counted as replay counts: compute is the work outside the
// calls (a CPU rank's CPU time, capped at the wall time), a call's transfer
// is the least work any member did in it (wait_attribution.h), and the rest
// of the grouped runs' wall time is waiting.
#pragma once

#include <functional>
#include <vector>

#include "kernels/ops.h"
#include "runtime/measure/call_recorder.h"

namespace paraplan {

// One piece timed both ways; the prepare functions run untimed before each
// run (what the run consumes; may be empty). `grouped` and its prepare make
// the same calls on every member of the group.
struct PacedPiece {
  std::function<void()> alone = nullptr, alone_prepare = nullptr;
  std::function<void()> grouped = nullptr, grouped_prepare = nullptr;
  double* ratio = nullptr;  // out: the grouped runs' compute over the alone runs'
};

// The recording communicator's running totals and switch (call_recorder.h),
// owned by the caller, which wraps its group with them.
struct GroupCallTotals {
  double seconds = 0, cpu_seconds = 0;
  bool recording = false;
  // What the recording communicator around the group is built with.
  RecordingCommunicator::Totals recorder_totals() { return {&seconds, &cpu_seconds, &recording}; }
};

// This member's seconds per synchronizing call of the grouped runs that are
// neither compute nor transfer. Collective over the group: every member must
// pass the same runs, rounds and pieces. group records into totals.
double time_in_group(kernels::Ops& ops, RecordingCommunicator& group, GroupCallTotals& totals,
                     int runs, int rounds, const std::vector<PacedPiece>& pieces);

}  // namespace paraplan
