// zero_unit_program.cc: one compute's ZeRO unit ops, each as soon as it may.
#include "runtime/pipeline/zero_unit_program.h"

#include <algorithm>

namespace paraplan {

using schema::OpCode;

void ZeroUnitProgram::begin(const schema::Instruction& compute, const schema::Instruction* first,
                            size_t count, const Run& run) {
  active_ = true;
  chunk_ = compute.chunk();
  ops_.assign(first, first + count);
  next_ = 0;
  run_ = &run;
  read_.clear();
  finished_.clear();
  advance(false);
}

void ZeroUnitProgram::read(int chunk, int unit) {
  if (!active_) return;
  read_.emplace_back(chunk, unit);
  advance(false);
}

void ZeroUnitProgram::finished(int chunk, int unit) {
  if (!active_) return;
  finished_.emplace_back(chunk, unit);
  advance(false);
}

void ZeroUnitProgram::end() {
  if (!active_) return;
  advance(true);
  active_ = false;
  run_ = nullptr;
}

bool ZeroUnitProgram::holds(const std::vector<std::pair<int, int>>& keys, std::pair<int, int> key) {
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

void ZeroUnitProgram::advance(bool at_end) {
  for (; next_ < ops_.size(); ++next_) {
    const schema::Instruction& op = ops_[next_];
    const std::pair<int, int> key{op.chunk(), op.unit()};
    if (!at_end && op.chunk() == chunk_) {
      if (op.op() == OpCode::ReleaseParameters && !holds(read_, key)) return;
      if (op.op() == OpCode::ReduceScatterGradients && !holds(finished_, key)) return;
    }
    (*run_)(op);
  }
}

}  // namespace paraplan
