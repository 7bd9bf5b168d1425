// zero_unit_program_test.cc: a compute's unit ops run in their order, each
// as soon as the plan format lets it: gathers at once, a release after the
// compute's last read of its unit, a reduce-scatter after the unit's
// gradients are finished, ops on units of another chunk (and everything
// left) when the compute ends; reads between computes change nothing.
#include "runtime/pipeline/zero_unit_program.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace paraplan {
namespace {

using schema::Instruction;
using schema::OpCode;

Instruction op(OpCode code, int unit, int chunk = 0) {
  return Instruction(code, static_cast<uint8_t>(chunk), static_cast<uint16_t>(unit), 0, -1);
}

struct Recorder {
  std::vector<std::string> ran;
  ZeroUnitProgram::Run run = [this](const Instruction& i) {
    const char* name = i.op() == OpCode::GatherParameters    ? "g"
                       : i.op() == OpCode::ReleaseParameters ? "r"
                                                             : "s";
    ran.push_back(std::string(name).append(std::to_string(i.unit())).append(i.chunk() ? "c1" : ""));
  };
  std::string text() const {
    std::string out;
    for (const std::string& word : ran) out += (out.empty() ? "" : " ") + word;
    return out;
  }
};

TEST(ZeroUnitProgram, GathersRunAtOnceAndReleasesWaitForTheLastRead) {
  Recorder r;
  ZeroUnitProgram program;
  const std::vector<Instruction> ops{
      op(OpCode::GatherParameters, 1),  op(OpCode::ReleaseParameters, 0),
      op(OpCode::GatherParameters, 2),  op(OpCode::ReleaseParameters, 1),
      op(OpCode::ReleaseParameters, 2), op(OpCode::GatherParameters, 0, 1)};
  program.begin(op(OpCode::Forward, 0), ops.data(), ops.size(), r.run);
  EXPECT_EQ(r.text(), "g1");  // prefetched; release 0 waits
  program.read(0, 1);         // out of order: unit 0 still read
  EXPECT_EQ(r.text(), "g1");
  program.read(0, 0);
  EXPECT_EQ(r.text(), "g1 r0 g2 r1");  // unit 1 was read already
  program.end();                       // the rest, the next compute's gather included
  EXPECT_EQ(r.text(), "g1 r0 g2 r1 r2 g0c1");
  program.read(0, 2);  // between computes: nothing runs
  EXPECT_FALSE(program.active());
  EXPECT_EQ(r.ran.size(), 6u);
}

TEST(ZeroUnitProgram, ReduceScattersWaitForTheFinishedGradients) {
  Recorder r;
  ZeroUnitProgram program;
  const std::vector<Instruction> ops{op(OpCode::ReduceScatterGradients, 3),
                                     op(OpCode::ReduceScatterGradients, 2),
                                     op(OpCode::ReleaseParameters, 0, 1)};
  program.begin(op(OpCode::BackwardWeight, 0), ops.data(), ops.size(), r.run);
  EXPECT_EQ(r.text(), "");
  program.finished(0, 2);  // in order: 3 first
  EXPECT_EQ(r.text(), "");
  program.finished(0, 3);
  // Both reduce-scatters; the release of another chunk's unit runs at once.
  EXPECT_EQ(r.text(), "s3 s2 r0c1");
  program.end();
  EXPECT_EQ(r.ran.size(), 3u);
}

}  // namespace
}  // namespace paraplan
