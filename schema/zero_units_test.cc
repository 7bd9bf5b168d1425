// zero_units_test.cc: the units of a chunk, the unit ops add_zero_unit_ops
// writes (ZeRO-2's reduce-scatters, ZeRO-3's gathers one unit ahead and
// releases, or each unit kept for the step), and the checker that accepts
// them and names what is wrong in a stream that is not.
#include "schema/zero_units.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "schema/plan_io.h"
#include "schema/plan_test_support.h"

namespace paraplan {
namespace {

using schema::Instruction;
using schema::OpCode;

Instruction op(OpCode code, int micro_batch, int chunk = 0, int unit = 0) {
  return Instruction(code, static_cast<uint8_t>(chunk), static_cast<uint16_t>(unit), micro_batch,
                     -1);
}

// One pipeline rank holding the whole model, two micro-batches, in 1F1B's
// order: load and forward each, then backward each.
std::vector<Instruction> one_rank_stream(bool split_backward = false) {
  std::vector<Instruction> stream;
  for (int m = 0; m < 2; ++m) {
    stream.push_back(op(OpCode::LoadMicroBatch, m));
    stream.push_back(op(OpCode::Forward, m));
    if (split_backward) {
      stream.push_back(op(OpCode::BackwardInput, m));
      stream.push_back(op(OpCode::BackwardWeight, m));
    } else {
      stream.push_back(op(OpCode::Backward, m));
    }
  }
  stream.push_back(op(OpCode::ReduceGradients, -1));
  stream.push_back(op(OpCode::OptimizerStep, -1));
  return stream;
}

// "F0 G2 R1 ..." : computes by letter and micro-batch, unit ops by letter and unit.
std::string text(const std::vector<Instruction>& stream) {
  std::string out;
  for (const Instruction& ins : stream) {
    char letter = 0;
    int number = ins.unit();
    switch (ins.op()) {
      case OpCode::Forward:
        letter = 'F', number = ins.micro_batch();
        break;
      case OpCode::Backward:
        letter = 'B', number = ins.micro_batch();
        break;
      case OpCode::BackwardInput:
        letter = 'I', number = ins.micro_batch();
        break;
      case OpCode::BackwardWeight:
        letter = 'W', number = ins.micro_batch();
        break;
      case OpCode::GatherParameters:
        letter = 'g';
        break;
      case OpCode::ReleaseParameters:
        letter = 'r';
        break;
      case OpCode::ReduceScatterGradients:
        letter = 's';
        break;
      case OpCode::LoadMicroBatch:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::OptimizerStep:
        continue;
    }
    if (!out.empty()) out += ' ';
    out += letter;
    out.append(std::to_string(number));
  }
  return out;
}

// The most units the stream holds gathered at once, playing each compute's
// ops as early as the plan format lets them run (releases after the read,
// which in this stream's order is the op just before them).
size_t most_gathered(const std::vector<Instruction>& stream) {
  std::set<int> held;
  size_t most = 0;
  for (const Instruction& ins : stream) {
    if (ins.op() == OpCode::GatherParameters) held.insert(ins.unit());
    if (ins.op() == OpCode::ReleaseParameters) held.erase(ins.unit());
    most = std::max(most, held.size());
  }
  return most;
}

TEST(ZeroUnits, ATiedEmbeddingsUnitsAreResidentWhereverTheyAre) {
  // GPT-2, one stage: the embedding resident (the head writes it first).
  EXPECT_EQ(chunk_units(true, true, 2, true).resident,
            (std::vector<bool>{true, false, false, false}));
  // Across stages: the first stage's embedding, the last stage's copy.
  EXPECT_EQ(chunk_units(true, false, 2, true).resident, (std::vector<bool>{true, false, false}));
  EXPECT_EQ(chunk_units(false, true, 2, true).resident, (std::vector<bool>{false, false, true}));
  // Untied (Llama): every unit streams; a middle stage has its layers only.
  EXPECT_EQ(chunk_units(true, true, 1, false).resident, (std::vector<bool>{false, false, false}));
  EXPECT_EQ(chunk_units(false, false, 3, false).count(), 3);
}

TEST(ZeroUnits, LayersGroupIntoUnitsOfLayersPerUnitTheLastHoldingWhatIsLeft) {
  // 5 layers in units of 2: the embedding, layers 0-1, 2-3, 4, the head.
  const ChunkUnits units = chunk_units(true, true, 5, false, 2);
  EXPECT_EQ(units.count(), 5);
  EXPECT_EQ(units.layer_units(), 3);
  EXPECT_EQ(units.unit_of_layer(0), 1);
  EXPECT_EQ(units.unit_of_layer(1), 1);
  EXPECT_EQ(units.unit_of_layer(4), 3);
  // A unit larger than the chunk holds all its layers.
  EXPECT_EQ(chunk_units(false, false, 3, false, 8).count(), 1);
  // Backward reads the head, then the layer units in reverse, each finished
  // right after; then finishes the embedding.
  std::string events;
  for (const UnitEvent& e : compute_unit_events(units, OpCode::Backward))
    events.append(e.read ? "r" : "f").append(std::to_string(e.unit)).append(" ");
  EXPECT_EQ(events, "r4 f4 r3 f3 r2 f2 r1 f1 f0 ");
  // ZeRO-3 over them: one unit ahead, as with a unit per layer.
  const std::vector<ChunkUnits> chunks{units};
  const std::vector<Instruction> stream = add_zero_unit_ops(one_rank_stream(), chunks, 3, false);
  EXPECT_EQ(zero_unit_ops_problem(stream, chunks, 3), "");
  EXPECT_EQ(most_gathered(stream), 2u);
  EXPECT_EQ(text(stream).substr(0, 26), "g0 F0 g1 r0 g2 r1 g3 r2 g4");
}

// A ZeRO-3 plan written before its streams listed their unit ops (schema
// version 9) gets them at load (plan_lowering.h), as the planner writes them
// now, each rank its own: every reader sees the same stream.
TEST(ZeroUnits, APlanBeforeVersionTenGetsItsUnitOpsAtLoad) {
  test_plans::PlanSpec spec = test_plans::make_plan_spec(2, 2, 1, 4, 4);
  spec.zero_stage = 3;
  spec.schema_version = 9;
  spec.add_zero_unit_ops = false;
  spec.schedule[1].keep_parameters_gathered = true;
  const LoadedPlan loaded = load_plan_from_bytes("v9.pplan", test_plans::build_plan(spec));
  const schema::Plan& plan = loaded.plan();
  EXPECT_EQ(plan.header()->schema_version(), 9u);
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<Instruction> written =
        add_zero_unit_ops(spec.schedule[rank].instructions, rank_units(plan, rank), 3, rank == 1);
    EXPECT_EQ(text(stream_instructions(*plan.schedule()->stages()->Get(rank)->instructions())),
              text(written))
        << "rank " << rank;
    EXPECT_TRUE(has_zero_unit_ops(*plan.schedule()->stages()->Get(rank)->instructions()));
  }
}

TEST(ZeroUnits, ZeroThreeGathersOneUnitAheadAndReleasesAfterTheRead) {
  const std::vector<ChunkUnits> units{chunk_units(true, true, 2, false)};  // units 0..3
  const std::vector<Instruction> stream = add_zero_unit_ops(one_rank_stream(), units, 3, false);
  // Forward reads 0 1 2 3; backward reads 3 2 1 and finishes 3 2 1 0. The
  // head's unit ends a forward and starts the backward: kept between them.
  EXPECT_EQ(text(stream),
            "g0 F0 g1 r0 g2 r1 g3 r2 B0 g2 r3 s3 g1 r2 s2 r1 s1 s0 g0 F1 g1 r0 g2 r1 g3 r2 B1 g2 "
            "r3 s3 g1 r2 s2 r1 s1 s0");
  EXPECT_EQ(zero_unit_ops_problem(stream, units, 3), "");
  EXPECT_EQ(most_gathered(stream), 2u);
}

TEST(ZeroUnits, KeptParametersAreGatheredOnceAStepAndReleasedAfterTheirLastRead) {
  const std::vector<ChunkUnits> units{chunk_units(true, true, 2, false)};
  const std::vector<Instruction> stream = add_zero_unit_ops(one_rank_stream(), units, 3, true);
  EXPECT_EQ(text(stream), "g0 F0 g1 g2 g3 B0 s3 s2 s1 s0 F1 r0 B1 r3 s3 r2 s2 r1 s1 s0");
  EXPECT_EQ(zero_unit_ops_problem(stream, units, 3), "");
}

TEST(ZeroUnits, ZeroTwoReduceScattersEachUnitAsTheBackwardFinishesIt) {
  // Tied GPT-2 on one stage: the embedding is resident, never named.
  const std::vector<ChunkUnits> units{chunk_units(true, true, 2, true)};
  const std::vector<Instruction> stream = add_zero_unit_ops(one_rank_stream(), units, 2, false);
  EXPECT_EQ(text(stream), "F0 B0 s3 s2 s1 F1 B1 s3 s2 s1");
  EXPECT_EQ(zero_unit_ops_problem(stream, units, 2), "");
  // Split backward: after the weight gradients, none after the input's.
  const std::vector<Instruction> split = add_zero_unit_ops(one_rank_stream(true), units, 2, false);
  EXPECT_EQ(text(split), "F0 I0 W0 s3 s2 s1 F1 I1 W1 s3 s2 s1");
  EXPECT_EQ(zero_unit_ops_problem(split, units, 2), "");
  // Below ZeRO-2 nothing is added.
  EXPECT_EQ(add_zero_unit_ops(one_rank_stream(), units, 1, false).size(), one_rank_stream().size());
}

TEST(ZeroUnits, SplitBackwardUnderZeroThreeReadsInTheInputHalfAndScattersAfterTheWeights) {
  const std::vector<ChunkUnits> units{chunk_units(false, false, 2, false)};  // a middle stage
  const std::vector<Instruction> stream = add_zero_unit_ops(one_rank_stream(true), units, 3, false);
  EXPECT_EQ(text(stream), "g0 F0 g1 r0 I0 g0 r1 r0 W0 s1 s0 g0 F1 g1 r0 I1 g0 r1 r0 W1 s1 s0");
  EXPECT_EQ(zero_unit_ops_problem(stream, units, 3), "");
}

TEST(ZeroUnits, TheCheckerNamesTheInstructionAndWhatIsWrong) {
  const std::vector<ChunkUnits> units{chunk_units(true, true, 2, false)};
  const std::vector<Instruction> good = add_zero_unit_ops(one_rank_stream(), units, 3, false);
  auto without = [&](size_t index) {
    std::vector<Instruction> stream = good;
    stream.erase(stream.begin() + static_cast<std::ptrdiff_t>(index));
    return stream;
  };
  auto find = [&](OpCode code, int unit, size_t from = 0) {
    for (size_t i = from; i < good.size(); ++i)
      if (good[i].op() == code && good[i].unit() == unit) return i;
    return good.size();
  };
  // A missing prefetch: the forward reads unit 1 ungathered.
  EXPECT_NE(zero_unit_ops_problem(without(find(OpCode::GatherParameters, 1)), units, 3)
                .find("forward of micro-batch 0 reads unit 1 of chunk 0, which no "
                      "gather_parameters before that read has gathered"),
            std::string::npos);
  // A missing reduce-scatter.
  EXPECT_NE(zero_unit_ops_problem(without(find(OpCode::ReduceScatterGradients, 2)), units, 3)
                .find("finishes the gradients of unit 2 of chunk 0 without a "
                      "reduce_scatter_gradients after it"),
            std::string::npos);
  // A missing release: still gathered at the reduction.
  const size_t last_release = [&] {
    size_t at = 0;
    for (size_t i = 0; i < good.size(); ++i)
      if (good[i].op() == OpCode::ReleaseParameters) at = i;
    return at;
  }();
  EXPECT_NE(zero_unit_ops_problem(without(last_release), units, 3).find("still gathered"),
            std::string::npos);
  // Gathers under ZeRO-2, a unit out of range, a resident unit.
  EXPECT_NE(zero_unit_ops_problem(good, units, 2).find("only ZeRO-3 gathers parameters"),
            std::string::npos);
  std::vector<Instruction> out_of_range = good;
  out_of_range.insert(out_of_range.begin(), op(OpCode::GatherParameters, 0, 0, 9));
  EXPECT_NE(zero_unit_ops_problem(out_of_range, units, 3).find("unit 9 is out of range"),
            std::string::npos);
  const std::vector<ChunkUnits> tied{chunk_units(true, true, 2, true)};
  std::vector<Instruction> resident = add_zero_unit_ops(one_rank_stream(), tied, 3, false);
  resident.insert(resident.begin(), op(OpCode::GatherParameters, 0, 0, 0));
  EXPECT_NE(zero_unit_ops_problem(resident, tied, 3).find("holds the tied embedding"),
            std::string::npos);
  // A gather of a gathered unit.
  std::vector<Instruction> twice = good;
  twice.insert(twice.begin(), op(OpCode::GatherParameters, 0, 0, 0));
  EXPECT_NE(zero_unit_ops_problem(twice, units, 3).find("gathered already"), std::string::npos);
}

}  // namespace
}  // namespace paraplan
