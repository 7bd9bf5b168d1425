// zero_unit_program.cc: one compute's ZeRO unit ops, each as soon as it may.
#include "runtime/pipeline/zero_unit_program.h"

namespace paraplan {

using schema::OpCode;

void ZeroUnitProgram::begin(const schema::Instruction& compute,
                            std::vector<schema::Instruction> ops, Run run) {
  active_ = true;
  chunk_ = compute.chunk();
  ops_ = std::move(ops);
  next_ = 0;
  run_ = std::move(run);
  read_.clear();
  finished_.clear();
  advance(false);
}

void ZeroUnitProgram::read(int chunk, int unit) {
  if (!active_) return;
  read_.insert({chunk, unit});
  advance(false);
}

void ZeroUnitProgram::finished(int chunk, int unit) {
  if (!active_) return;
  finished_.insert({chunk, unit});
  advance(false);
}

void ZeroUnitProgram::end() {
  if (!active_) return;
  advance(true);
  active_ = false;
  ops_.clear();
  run_ = nullptr;
}

void ZeroUnitProgram::advance(bool at_end) {
  for (; next_ < ops_.size(); ++next_) {
    const schema::Instruction& op = ops_[next_];
    const std::pair<int, int> key{op.chunk(), op.unit()};
    if (!at_end && op.chunk() == chunk_) {
      if (op.op() == OpCode::ReleaseParameters && !read_.count(key)) return;
      if (op.op() == OpCode::ReduceScatterGradients && !finished_.count(key)) return;
    }
    run_(op);
  }
}

}  // namespace paraplan
