// zero_unit_program.h: runs the ZeRO unit ops that belong to one compute
// instruction (plan.fbs: GatherParameters, ReleaseParameters,
// ReduceScatterGradients after a Forward, Backward, BackwardInput or
// BackwardWeight) as the plan format says: in their order, each as soon as
// it may. A gather at once; a release of a unit of the compute's chunk once
// the compute has read it for the last time; a reduce-scatter once the
// compute has finished the unit's gradients; an op on a unit the compute
// does not read or write, and every op still waiting, when it ends. The
// executor tells it the compute's reads and finished units as the stage
// reports them (schema/zero_units.h plays the same rules to check a plan).
#pragma once

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

class ZeroUnitProgram {
 public:
  using Run = std::function<void(const schema::Instruction&)>;

  // The `count` ops of `compute` from `first` (copied into storage reused
  // every step), run through `run` (which outlives the compute): those that
  // may run now do.
  void begin(const schema::Instruction& compute, const schema::Instruction* first, size_t count,
             const Run& run);
  // The compute has read unit `unit` of `chunk` for the last time / finished
  // its gradients. Ignored between computes.
  void read(int chunk, int unit);
  void finished(int chunk, int unit);
  // The compute has ended: the ops left run, in order.
  void end();
  bool active() const { return active_; }

 private:
  void advance(bool at_end);
  static bool holds(const std::vector<std::pair<int, int>>& keys, std::pair<int, int> key);

  bool active_ = false;
  int chunk_ = 0;
  std::vector<schema::Instruction> ops_;
  size_t next_ = 0;
  const Run* run_ = nullptr;
  // This compute's last reads and finished units (cleared, not freed, per compute).
  std::vector<std::pair<int, int>> read_, finished_;
};

}  // namespace paraplan
