// schedule_kinds_test.cc: interleaved 1F1B and ZB-H1 generators over a grid of
// shapes, a hand-checked interleaved stream, the in-flight counts the memory
// model uses, and the verifier on broken chunked and split-backward streams.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "planner/schedule/schedule.h"

namespace paraplan {
namespace {

using schema::OpCode;
using schema::ScheduleKind;

std::string describe(const InstructionStream& stream) {
  std::string text;
  for (const PipelineInstruction& ins : stream) {
    if (!text.empty()) text += ' ';
    text += format_instruction(ins);
  }
  return text;
}

int count(const InstructionStream& stream, OpCode op, int chunk) {
  return static_cast<int>(std::count_if(
      stream.begin(), stream.end(), [&](const auto& i) { return i.op == op && i.chunk == chunk; }));
}

const ScheduleKind kKinds[] = {ScheduleKind::OneForwardOneBackward, ScheduleKind::GPipe,
                               ScheduleKind::Interleaved1F1B, ScheduleKind::ZeroBubbleH1};

TEST(ScheduleKindsTest, EveryKindVerifiesOverTheGrid) {
  for (ScheduleKind kind : kKinds) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m = 1; m <= 16; ++m) {
        for (int v = 1; v <= 4; ++v) {
          const std::string shape = std::string(schema::EnumNameScheduleKind(kind)) +
                                    " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                                    " v=" + std::to_string(v);
          const bool interleaved = kind == ScheduleKind::Interleaved1F1B;
          if ((!interleaved && v != 1) || (interleaved && (p < 2 || m < p))) {
            EXPECT_THROW(generate_schedule(kind, p, m, v), std::invalid_argument) << shape;
            continue;
          }
          const PipelineSchedule schedule = generate_schedule(kind, p, m, v);
          ASSERT_EQ(schedule.stages.size(), static_cast<size_t>(p)) << shape;
          ASSERT_EQ(schedule.virtual_stages, v) << shape;
          EXPECT_EQ(schedule.kind, kind) << shape;
          const auto problem = verify_schedule(schedule);
          ASSERT_EQ(problem, std::nullopt) << shape << ": " << *problem;
          const bool split = kind == ScheduleKind::ZeroBubbleH1;
          for (int r = 0; r < p; ++r) {
            const InstructionStream& stream = schedule.stages[r];
            for (int c = 0; c < v; ++c) {
              const int vs = c * p + r;
              EXPECT_EQ(count(stream, OpCode::Forward, c), m) << shape;
              EXPECT_EQ(count(stream, OpCode::Backward, c), split ? 0 : m) << shape;
              EXPECT_EQ(count(stream, OpCode::BackwardInput, c), split ? m : 0) << shape;
              EXPECT_EQ(count(stream, OpCode::BackwardWeight, c), split ? m : 0) << shape;
              EXPECT_EQ(count(stream, OpCode::LoadMicroBatch, c),
                        vs == 0 || vs == p * v - 1 ? m : 0)
                  << shape;
            }
            const std::vector<int> peak = max_in_flight(schedule, r);
            ASSERT_EQ(peak.size(), static_cast<size_t>(v));
            const int total = std::accumulate(peak.begin(), peak.end(), 0);
            const int bound = in_flight_bound(kind, p, m, v, r);
            // Per chunk peaks may occur at different times: their sum bounds
            // the rank's peak from above, and each alone is within the bound.
            EXPECT_LE(*std::max_element(peak.begin(), peak.end()), bound) << shape;
            if (v == 1) {
              if (kind == ScheduleKind::ZeroBubbleH1)
                EXPECT_LE(total, bound) << shape << " rank " << r;
              else
                EXPECT_EQ(total, bound) << shape << " rank " << r;
            }
          }
        }
      }
    }
  }
}

TEST(ScheduleKindsTest, InterleavedTwoStagesTwoMicroBatchesTwoChunks) {
  // m == p: Megatron-core runs every forward before the first backward.
  const PipelineSchedule schedule = generate_interleaved(2, 2, 2);
  EXPECT_EQ(describe(schedule.stages[0]),
            "LoadMicroBatch(0) Forward(0) SendActivation(0) LoadMicroBatch(1) Forward(1) "
            "SendActivation(1) RecvActivation(0, chunk 1) Forward(0, chunk 1) "
            "SendActivation(0, chunk 1) RecvActivation(1, chunk 1) Forward(1, chunk 1) "
            "SendActivation(1, chunk 1) RecvGradient(0, chunk 1) Backward(0, chunk 1) "
            "SendGradient(0, chunk 1) RecvGradient(1, chunk 1) Backward(1, chunk 1) "
            "SendGradient(1, chunk 1) RecvGradient(0) Backward(0) RecvGradient(1) Backward(1) "
            "ReduceGradients OptimizerStep");
  EXPECT_EQ(describe(schedule.stages[1]),
            "RecvActivation(0) Forward(0) RecvActivation(1) SendActivation(0) Forward(1) "
            "RecvActivation(0, chunk 1) SendActivation(1) LoadMicroBatch(0, chunk 1) "
            "Forward(0, chunk 1) RecvActivation(1, chunk 1) LoadMicroBatch(1, chunk 1) "
            "Forward(1, chunk 1) Backward(0, chunk 1) SendGradient(0, chunk 1) "
            "Backward(1, chunk 1) RecvGradient(0) SendGradient(1, chunk 1) Backward(0) "
            "RecvGradient(1) SendGradient(0) Backward(1) SendGradient(1) "
            "ReduceGradients OptimizerStep");
  EXPECT_EQ(max_in_flight(schedule, 0), (std::vector<int>{2, 2}));
  EXPECT_EQ(in_flight_bound(ScheduleKind::Interleaved1F1B, 2, 2, 2, 0), 4);
}

TEST(ScheduleKindsTest, InterleavedGroupsFollowMegatronCore) {
  // p = 2, m = 5, v = 2: groups {0,1}, {2,3}, then the last group {4}.
  const PipelineSchedule schedule = generate_interleaved(2, 5, 2);
  std::string forwards;
  for (const PipelineInstruction& ins : schedule.stages[0])
    if (ins.op == OpCode::Forward) forwards += format_instruction(ins) + " ";
  EXPECT_EQ(forwards,
            "Forward(0) Forward(1) Forward(0, chunk 1) Forward(1, chunk 1) Forward(2) Forward(3) "
            "Forward(2, chunk 1) Forward(3, chunk 1) Forward(4) Forward(4, chunk 1) ");
  // Rank 0's warm-up: 2 (p - 1) + (v - 1) p = 4 forwards before the first backward.
  const auto& stream = schedule.stages[0];
  const auto first_backward = std::find_if(stream.begin(), stream.end(),
                                           [](const auto& i) { return i.op == OpCode::Backward; });
  EXPECT_EQ(std::count_if(stream.begin(), first_backward,
                          [](const auto& i) { return i.op == OpCode::Forward; }),
            5);  // the 4 of the warm-up and the steady state's first
  EXPECT_EQ(first_backward->chunk, 1);
  EXPECT_EQ(first_backward->micro_batch, 0);
}

TEST(ScheduleKindsTest, InterleavedRefusesWhatMegatronRefuses) {
  try {
    generate_interleaved(4, 3, 2);
    FAIL() << "m < p accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "interleaved 1F1B needs num_micro_batches >= pipeline stages (got 3 < 4): "
              "Megatron-core runs groups of p micro-batches per model chunk");
  }
  EXPECT_THROW(generate_interleaved(1, 4, 2), std::invalid_argument);
  EXPECT_THROW(generate_schedule(ScheduleKind::ZeroBubbleH1, 2, 4, 2), std::invalid_argument);
}

// The fewest extra warm-up forwards: the count runs, every smaller one
// leaves a cycle (more need not run either: p 4, m 9, v 2 runs with none,
// not with 4). From m = 3p on the count is found from 2p + m mod p's (the
// period rule in schedule_placement.cc): the grid reaches 6p to hold it.
TEST(ScheduleKindsTest, InterleavedExtraWarmupIsTheFewestThatRuns) {
  int shapes_needing_extra = 0;
  for (int v : {2, 3, 4})
    for (int p : {2, 3, 4, 5, 7, 8, 11})
      for (int m = p; m <= 6 * p + 3; ++m) {
        const int extra = interleaved_extra_warmup_forwards(p, m, v);
        shapes_needing_extra += extra > 0;
        EXPECT_TRUE(interleaved_warmup_runs(p, m, v, extra)) << p << " " << m << " " << v;
        for (int e = 0; e < extra; ++e)
          ASSERT_FALSE(interleaved_warmup_runs(p, m, v, e))
              << "p=" << p << " m=" << m << " v=" << v << " runs with " << e << " < " << extra;
      }
  EXPECT_GT(shapes_needing_extra, 0);  // the grid holds shapes that need some
  EXPECT_TRUE(interleaved_warmup_runs(4, 9, 2, 0));
  EXPECT_FALSE(interleaved_warmup_runs(4, 9, 2, 4));
}

TEST(ScheduleKindsTest, ZeroBubbleDefersWeightGradients) {
  const PipelineSchedule schedule = generate_zero_bubble_h1(4, 8);
  // Rank r runs micro-batch k's W after the B of micro-batch k + r (the
  // paper's order): rank 0 at once, the last rank 3 B's later.
  for (int r = 0; r < 4; ++r) {
    const auto& stream = schedule.stages[r];
    auto position = [&](OpCode op, int mb) {
      return std::find_if(stream.begin(), stream.end(),
                          [&](const auto& i) { return i.op == op && i.micro_batch == mb; }) -
             stream.begin();
    };
    for (int mb = 0; mb + r < 8; ++mb) {
      EXPECT_GT(position(OpCode::BackwardWeight, mb), position(OpCode::BackwardInput, mb + r))
          << "rank " << r << ": " << describe(stream);
      if (mb + r + 1 < 8) {
        EXPECT_LT(position(OpCode::BackwardWeight, mb), position(OpCode::BackwardInput, mb + r + 1))
            << "rank " << r << ": " << describe(stream);
      }
    }
  }
  for (int r = 0; r < 4; ++r) EXPECT_LE(max_in_flight(schedule, r)[0], 4);
  // Bytes: the deferred W's state counts from BackwardInput to BackwardWeight.
  // The last rank forwards ahead while its W's wait: its peak holds deferred
  // W state beside full activations.
  const double activations = peak_in_flight_bytes(schedule, 3, {10.0}, {0.0});
  const double with_pending = peak_in_flight_bytes(schedule, 3, {10.0}, {10.0});
  EXPECT_EQ(with_pending, 10.0 * max_in_flight(schedule, 3)[0]);
  EXPECT_LT(activations, with_pending) << describe(schedule.stages[3]);
}

PipelineInstruction* find(PipelineSchedule& schedule, int rank, OpCode op, int mb, int chunk) {
  for (PipelineInstruction& ins : schedule.stages[rank])
    if (ins.op == op && ins.micro_batch == mb && ins.chunk == chunk) return &ins;
  ADD_FAILURE() << "no such instruction";
  return nullptr;
}

std::string problem_of(const PipelineSchedule& schedule) {
  return verify_schedule(schedule).value_or("(sound)");
}

TEST(ScheduleKindsVerifierTest, BrokenChunkedStreamsAreCaught) {
  // Rank 0 posts chunk 1's receives in the wrong order (both before the
  // forward needing the first): its receive of micro-batch 1 meets rank 1's
  // send of micro-batch 0.
  PipelineSchedule wrong_order = generate_interleaved(2, 2, 2);
  {
    InstructionStream& stream = wrong_order.stages[0];
    auto first =
        std::find(stream.begin(), stream.end(), PipelineInstruction{OpCode::RecvActivation, 0, 1});
    auto second =
        std::find(stream.begin(), stream.end(), PipelineInstruction{OpCode::RecvActivation, 1, 1});
    ASSERT_LT(first, second);
    std::rotate(first, second, second + 1);
  }
  EXPECT_NE(problem_of(wrong_order)
                .find("messages matched out of order: pipeline rank 1's instruction 3 "
                      "(send_activation) sends the activation of virtual stage 1, micro-batch 0 "
                      "as its message 1 to rank 0, but pipeline rank 0's instruction 6 "
                      "(recv_activation) receives the activation of virtual stage 1, "
                      "micro-batch 1 there"),
            std::string::npos)
      << problem_of(wrong_order);
  // A forward whose receive comes after it.
  PipelineSchedule receive_late = generate_interleaved(2, 2, 2);
  std::swap(*find(receive_late, 0, OpCode::RecvActivation, 0, 1),
            *find(receive_late, 0, OpCode::RecvActivation, 1, 1));
  EXPECT_NE(problem_of(receive_late)
                .find("stage 0: micro-batch 0 of chunk 1 is received after its forward"),
            std::string::npos)
      << problem_of(receive_late);

  // A receive naming the wrong chunk: chunk 0 of rank 1 already has it.
  PipelineSchedule wrong_chunk = generate_interleaved(2, 2, 2);
  find(wrong_chunk, 1, OpCode::RecvActivation, 0, 1)->chunk = 0;
  EXPECT_NE(problem_of(wrong_chunk)
                .find("stage 1: micro-batch 0 of chunk 0 is received from the previous stage "
                      "more than once"),
            std::string::npos)
      << problem_of(wrong_chunk);

  PipelineSchedule out_of_range = generate_interleaved(2, 2, 2);
  find(out_of_range, 0, OpCode::Forward, 1, 1)->chunk = 2;
  EXPECT_NE(problem_of(out_of_range)
                .find("Forward(1, chunk 2): forward chunk 2 is out of range; valid are 0..1"),
            std::string::npos)
      << problem_of(out_of_range);

  PipelineSchedule one_rank = generate_one_forward_one_backward(1, 2);
  one_rank.virtual_stages = 2;
  EXPECT_EQ(problem_of(one_rank), "virtual_stages 2 needs at least 2 pipeline stages");

  // The last virtual stage (chunk 1 of rank 1) has nothing after it.
  PipelineSchedule no_next = generate_interleaved(2, 2, 2);
  *find(no_next, 1, OpCode::Backward, 0, 1) = {OpCode::RecvGradient, 0, 1};
  EXPECT_NE(problem_of(no_next).find("RecvGradient(0, chunk 1): recv_gradient on the last chunk "
                                     "of the last stage (1), which has no next stage"),
            std::string::npos)
      << problem_of(no_next);

  // Chunk 0 of rank 1 holds neither end of the model.
  PipelineSchedule middle_load = generate_interleaved(2, 2, 2);
  *find(middle_load, 1, OpCode::Forward, 0, 0) = {OpCode::LoadMicroBatch, 0, 0};
  EXPECT_NE(problem_of(middle_load)
                .find("LoadMicroBatch(0): load_micro_batch on chunk 0 of stage 1, which holds "
                      "neither the embedding nor the head"),
            std::string::npos)
      << problem_of(middle_load);
}

TEST(ScheduleKindsVerifierTest, BrokenSplitBackwardIsCaught) {
  PipelineSchedule early_w = generate_zero_bubble_h1(2, 3);
  auto& stream = early_w.stages[1];
  auto w = std::find_if(stream.begin(), stream.end(), [](const auto& i) {
    return i.op == OpCode::BackwardWeight && i.micro_batch == 2;
  });
  const PipelineInstruction moved = *w;
  stream.erase(w);
  stream.insert(stream.begin(), moved);
  EXPECT_NE(problem_of(early_w).find("stage 1: micro-batch 2 is given its backward_weight "
                                     "before its backward_input"),
            std::string::npos)
      << problem_of(early_w);

  PipelineSchedule no_w = generate_zero_bubble_h1(2, 3);
  auto& s0 = no_w.stages[0];
  s0.erase(std::find_if(s0.begin(), s0.end(), [](const auto& i) {
    return i.op == OpCode::BackwardWeight && i.micro_batch == 1;
  }));
  EXPECT_NE(problem_of(no_w).find("stage 0: micro-batch 1 is never given its backward_weight"),
            std::string::npos)
      << problem_of(no_w);

  PipelineSchedule mixed = generate_zero_bubble_h1(2, 3);
  find(mixed, 0, OpCode::BackwardWeight, 0, 0)->op = OpCode::Backward;
  EXPECT_NE(problem_of(mixed).find("stage 0: micro-batch 0 is backwarded more than once"),
            std::string::npos)
      << problem_of(mixed);

  PipelineSchedule twice = generate_zero_bubble_h1(2, 3);
  auto& s1 = twice.stages[1];
  s1.insert(s1.end() - 2, {OpCode::BackwardWeight, 0, 0});
  EXPECT_NE(problem_of(twice).find("stage 1: micro-batch 0 is given too many backward_weight"),
            std::string::npos)
      << problem_of(twice);
}

TEST(ScheduleKindsVerifierTest, InFlightAboveTheBoundIsCaught) {
  // GPipe's streams keep all 4 micro-batches alive; labelled 1F1B, rank 0
  // may keep only min(p, m) = 2 (its sends never wait: it runs ahead).
  PipelineSchedule schedule = generate_gpipe(2, 4);
  schedule.kind = ScheduleKind::OneForwardOneBackward;
  EXPECT_NE(problem_of(schedule).find("stage 0 instruction 7 Forward(2): 3 micro-batches in "
                                      "flight, above the bound of 2 the memory model assumes "
                                      "for OneForwardOneBackward on this stage"),
            std::string::npos)
      << problem_of(schedule);
}

}  // namespace
}  // namespace paraplan
