// schedule_bubble_test.cc: the bubble of every generated schedule kind,
// played out in time (pipeline_simulation.h) with no communication time,
// against the published formulas and against the dependency bound of the
// schedule's own compute order (what it would take if no transfer ever
// waited on compute). PARAPLAN_PRINT_BUBBLES=1 prints the grid as a table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "planner/schedule/pipeline_simulation.h"
#include "planner/schedule/schedule_kinds.h"

namespace paraplan {
namespace {

using schema::OpCode;
using schema::ScheduleKind;

struct Times {
  double forward = 1, backward = 2;  // per micro-batch, all of a rank's chunks
  double weight_fraction = 0;        // the share of backward a BackwardWeight does
};

double duration(const PipelineInstruction& in, const Times& t, int v) {
  switch (in.op) {
    case OpCode::Forward:
      return t.forward / v;
    case OpCode::Backward:
      return t.backward / v;
    case OpCode::BackwardInput:
      return t.backward * (1 - t.weight_fraction) / v;
    case OpCode::BackwardWeight:
      return t.backward * t.weight_fraction / v;
    default:
      return -1;  // not compute
  }
}

double played_out(const PipelineSchedule& schedule, const Times& t) {
  std::vector<SimulatedStageInput> stages(schedule.num_stages);
  for (SimulatedStageInput& stage : stages) {
    stage.forward_work = t.forward;
    stage.backward_work = t.backward;
    stage.weight_fraction = t.weight_fraction;
  }
  return simulate_step(schedule, stages, 1, 0).step_seconds;
}

// Every rank runs its compute ops in its stream's order, each as soon as the
// rank is free and its input (the previous virtual stage's forward, the
// next one's input gradient) is done: the step's dependency bound.
// Per rank, optionally, when its first compute op starts and its last ends.
double dependency_bound(const PipelineSchedule& schedule, const Times& t,
                        std::vector<double>* first_start = nullptr) {
  const int p = schedule.num_stages, v = schedule.virtual_stages;
  const PipelineLayout layout = schedule.layout();
  const int last = layout.last_virtual_stage();
  if (first_start) first_start->assign(p, -1);
  std::map<std::tuple<int, int, int>, double> done;  // (forward?, vs, mb) -> end
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < p; ++r) {
      const InstructionStream& stream = schedule.stages[r];
      for (; next[r] < stream.size(); ++next[r]) {
        const PipelineInstruction& in = stream[next[r]];
        const double d = duration(in, t, v);
        if (d < 0) continue;
        const int vs = layout.virtual_stage(r, in.chunk), mb = in.micro_batch;
        double ready = free_at[r];
        if (in.op == OpCode::Forward && vs > 0) {
          auto it = done.find({1, vs - 1, mb});
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        const bool input = in.op == OpCode::Backward || in.op == OpCode::BackwardInput;
        if (input && vs < last) {
          auto it = done.find({0, vs + 1, mb});
          if (it == done.end()) break;
          ready = std::max(ready, it->second);
        }
        if (first_start && (*first_start)[r] < 0) (*first_start)[r] = ready;
        free_at[r] = ready + d;
        if (in.op == OpCode::Forward) done[{1, vs, mb}] = free_at[r];
        if (input) done[{0, vs, mb}] = free_at[r];
        moved = true;
      }
    }
  }
  if (first_start)  // then the end of each rank's last op
    first_start->insert(first_start->end(), free_at.begin(), free_at.end());
  return *std::max_element(free_at.begin(), free_at.end());
}

struct Case {
  ScheduleKind kind;
  int p, m, v;
  Times t;
};

std::string name(const Case& c) {
  char text[160];
  std::snprintf(text, sizeof text, "%s p=%d m=%d v=%d F=%g B=%g W/B=%g",
                schema::EnumNameScheduleKind(c.kind), c.p, c.m, c.v, c.t.forward, c.t.backward,
                c.t.weight_fraction);
  return text;
}

const int kStages[] = {2, 3, 4, 5, 7, 8, 16, 32};

std::vector<Times> full_backward_times() {
  std::vector<Times> times;
  for (double ratio : {1.0, 1.6, 2.0, 3.0}) times.push_back({1, ratio, 0});
  return times;
}

bool printing() {
  return std::getenv("PARAPLAN_PRINT_BUBBLES") != nullptr;
}

TEST(ScheduleBubbleTest, OneForwardOneBackwardAndGPipeReachTheirFormula) {
  for (ScheduleKind kind : {ScheduleKind::OneForwardOneBackward, ScheduleKind::GPipe})
    for (int p : kStages)
      for (int m : {p, 2 * p, 4 * p, 8 * p})
        for (const Times& t : full_backward_times()) {
          const Case c{kind, p, m, 1, t};
          const PipelineSchedule schedule = generate_schedule(kind, p, m);
          const double bubble = played_out(schedule, t) - m * (t.forward + t.backward);
          EXPECT_NEAR(bubble, (p - 1) * (t.forward + t.backward), 1e-9) << name(c);
        }
}

// Megatron-core's bubble (p - 1)(F + B) / v where p divides m; otherwise the
// dependency bound of its own order, whose excess over the formula is printed.
TEST(ScheduleBubbleTest, InterleavedReachesMegatronsBubbleAndItsOwnBound) {
  double worst_excess = 0;
  std::string worst;
  for (int v : {2, 3, 4})
    for (int p : kStages)
      for (int m : {p, 2 * p, 4 * p, 8 * p, 2 * p + 1})
        for (const Times& t : full_backward_times()) {
          if (p * m * v > 32 * 256 * 2 && t.backward != 2) continue;  // the big ones once
          const Case c{ScheduleKind::Interleaved1F1B, p, m, v, t};
          const PipelineSchedule schedule = generate_schedule(c.kind, p, m, v);
          const double step = played_out(schedule, t);
          EXPECT_NEAR(step, dependency_bound(schedule, t), 1e-9) << name(c);
          const double bubble = step - m * (t.forward + t.backward);
          const double ideal = (p - 1) * (t.forward + t.backward) / v;
          if (m % p == 0) {
            EXPECT_NEAR(bubble, ideal, 1e-9) << name(c);
          } else if (bubble - ideal > worst_excess) {
            worst_excess = bubble - ideal, worst = name(c);
          }
        }
  if (printing())
    std::printf("interleaved, p not dividing m: worst excess %.3f over the formula (%s)\n",
                worst_excess, worst.c_str());
}

// Where p does not divide m, the bubble depends on m mod p alone from m = 2p
// on: the planner plays out m = 2p + m mod p for every longer m.
TEST(ScheduleBubbleTest, InterleavedBubbleIsTheSameForEveryLongerStepOfOneRemainder) {
  for (int v : {2, 3})
    for (int p : {3, 4, 5, 8})
      for (double backward : {1.0, 3.0})
        for (int r = 1; r < p; ++r) {
          const Times t{1, backward, 0};
          double shortest = 0;
          for (int k : {2, 3, 5}) {
            const int m = k * p + r;
            const Case c{ScheduleKind::Interleaved1F1B, p, m, v, t};
            const double bubble =
                played_out(generate_schedule(c.kind, p, m, v), t) - m * (t.forward + t.backward);
            if (k == 2) shortest = bubble;
            EXPECT_NEAR(bubble, shortest, 1e-9) << name(c);
          }
        }
}

// The paper's ZB-H1: exactly p - 1 at F = B_in = W, at most
// (p - 1)(F + B_in - W) where W <= min(F, B_in), never worse than 1F1B, and
// played out at its own order's bound.
TEST(ScheduleBubbleTest, ZeroBubbleH1ReachesThePapersBubble) {
  double worst_share = 0;  // of 1F1B's bubble
  for (int p : kStages)
    for (int m : {1, p / 2 + 1, p, 2 * p, 4 * p, 8 * p})
      for (double ratio : {1.0, 1.6, 2.0, 3.0})
        for (double weight : {0.25, 0.5}) {
          const Times t{1, ratio, weight};
          const Case c{ScheduleKind::ZeroBubbleH1, p, m, 1, t};
          const PipelineSchedule schedule = generate_schedule(c.kind, p, m);
          ASSERT_EQ(verify_schedule(schedule), std::nullopt) << name(c);
          const double step = played_out(schedule, t);
          EXPECT_NEAR(step, dependency_bound(schedule, t), 1e-9) << name(c);
          const double bubble = step - m * (t.forward + t.backward);
          const double input = t.backward * (1 - weight), w = t.backward * weight;
          const double one_f_one_b = (p - 1) * (t.forward + t.backward);
          EXPECT_LE(bubble, one_f_one_b + 1e-9) << name(c);
          if (m < p) continue;
          if (w <= std::min(t.forward, input) + 1e-12) {
            EXPECT_LE(bubble, (p - 1) * (t.forward + input - w) + 1e-9) << name(c);
          }
          if (ratio == 2.0 && weight == 0.5) {
            EXPECT_NEAR(bubble, p - 1, 1e-9) << name(c);
          }
          if (p > 1) worst_share = std::max(worst_share, bubble / one_f_one_b);
        }
  if (printing()) std::printf("ZB-H1: bubble at most %.3f of 1F1B's\n", worst_share);
}

// Its bubble, where no closed form is exact too (W > min(F, B_in): short
// steps, context parallelism's), is the same for every m >= 2p: the planner
// plays out m = 2p for every longer step (zero_bubble_h1_bubble_micro_batches).
TEST(ScheduleBubbleTest, ZeroBubbleH1BubbleIsTheSameForEveryLongerStep) {
  for (int p : {2, 3, 4, 6, 8, 12, 16, 24, 32})
    for (double ratio : {1.5, 2.0, 2.2, 3.0})
      for (double weight : {0.25, 0.45, 0.5, 0.55, 0.6}) {
        const Times t{1, ratio, weight};
        double shortest = 0;
        for (int m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 3, 8 * p}) {
          const Case c{ScheduleKind::ZeroBubbleH1, p, m, 1, t};
          const double bubble =
              played_out(generate_schedule(c.kind, p, m), t) - m * (t.forward + t.backward);
          if (m == 2 * p) shortest = bubble;
          EXPECT_NEAR(bubble, shortest, 1e-9) << name(c);
        }
        EXPECT_EQ(schedule_kind_row(ScheduleKind::ZeroBubbleH1).bubble_micro_batches(p, 8 * p),
                  2 * p);
      }
}

// ZB-V at F = B_in = W (per chunk) and m >= 2p: every rank computes without
// a gap from its first op to its last, so the step's only idle time is rank
// r's start behind r chunk forwards, (p - 1) F / 2 with F a whole rank's
// forward; never more micro-batch activations alive than 1F1B's; at every
// ratio played out at its own order's bound and below ZB-H1's and 1F1B's.
TEST(ScheduleBubbleTest, ZeroBubbleVComputesWithoutGapsInOneForwardOneBackwardsMemory) {
  double worst_share = 0;  // of ZB-H1's bubble
  for (int p : kStages)
    for (int m : {1, p, 2 * p, 4 * p, 8 * p})
      for (double ratio : {1.0, 1.6, 2.0, 3.0})
        for (double weight : {0.25, 0.5}) {
          const Times t{1, ratio, weight};
          const Case c{ScheduleKind::ZeroBubbleV, p, m, 2, t};
          const PipelineSchedule schedule = generate_schedule(c.kind, p, m, 2);
          ASSERT_EQ(verify_schedule(schedule), std::nullopt) << name(c);
          std::vector<double> span;
          const double step = played_out(schedule, t);
          EXPECT_NEAR(step, dependency_bound(schedule, t, &span), 1e-9) << name(c);
          const double work = m * (t.forward + t.backward);
          const double bubble = step - work;
          const double h1 =
              played_out(generate_schedule(ScheduleKind::ZeroBubbleH1, p, m), t) - work;
          const double one_f_one_b = (p - 1) * (t.forward + t.backward);
          EXPECT_LE(bubble, one_f_one_b + 1e-9) << name(c);
          if (m >= 2 * p) {
            EXPECT_LE(bubble, h1 + 1e-9) << name(c);
            worst_share = std::max(worst_share, bubble / h1);
            // The steady state adds no bubble: m = 2p's is every longer m's
            // (the planner plays out m = 2p alone).
            const PipelineSchedule shortest = generate_schedule(c.kind, p, 2 * p, 2);
            EXPECT_NEAR(bubble, played_out(shortest, t) - 2 * p * (t.forward + t.backward), 1e-9)
                << name(c);
            if (m == 2 * p && p <= 8) {  // and between the multiples of p
              const PipelineSchedule odd = generate_schedule(c.kind, p, 2 * p + 1, 2);
              EXPECT_NEAR(bubble, played_out(odd, t) - (2 * p + 1) * (t.forward + t.backward), 1e-9)
                  << name(c) << " m + 1";
            }
          }
          if (m >= 2 * p && ratio == 2.0 && weight == 0.5) {  // F = B_in = W per chunk
            for (int r = 0; r < p; ++r)
              EXPECT_NEAR(span[p + r] - span[r], work, 1e-9) << name(c) << " rank " << r;
            EXPECT_NEAR(bubble, (p - 1) * t.forward / 2, 1e-9) << name(c);
          }
          // Activations alive from a chunk's forward to its weight gradient,
          // each chunk half a stage's; 1F1B's peak is min(p, m) stages' worth.
          for (int r = 0; r < p; ++r)
            EXPECT_LE(peak_in_flight_bytes(schedule, r, {0.5, 0.5}, {0.5, 0.5}),
                      std::min(p, m) + 1e-9)
                << name(c) << " rank " << r;
        }
  if (printing()) std::printf("ZB-V: bubble at most %.3f of ZB-H1's (m >= 2p)\n", worst_share);
}

// DualPipe-V (dualpipev.py's order on ZB-V's V), m >= 2p: played out at its
// own order's bound; at F = B_in = W its bubble is ZB-V's, (p - 1) F / 2 (the
// pairing of a forward with a backward exists to overlap their
// communication, not to fill more of the bubble); below 1F1B's at every
// ratio; the same for every m >= 2p (the planner plays out m = 2p); at most
// 2p + 1 chunk micro-batches alive at once, DualPipe's PP + 1, one more than
// ZB-V, and at most p weight gradients waiting (ZB-V: up to 2p - 1).
TEST(ScheduleBubbleTest, DualPipeVHasZeroBubbleVsBubbleAtEqualTimesAndOneMoreInFlight) {
  double least = 1e300, most = 0;  // its bubble over ZB-V's
  for (int p : kStages)
    for (int m : {2 * p, 2 * p + 1, 4 * p, 8 * p})
      for (double ratio : {1.0, 1.6, 2.0, 3.0})
        for (double weight : {0.25, 0.5}) {
          const Times t{1, ratio, weight};
          const Case c{ScheduleKind::DualPipeV, p, m, 2, t};
          const PipelineSchedule schedule = generate_schedule(c.kind, p, m, 2);
          ASSERT_EQ(verify_schedule(schedule), std::nullopt) << name(c);
          const double step = played_out(schedule, t);
          EXPECT_NEAR(step, dependency_bound(schedule, t), 1e-9) << name(c);
          const double work = m * (t.forward + t.backward);
          const double bubble = step - work;
          EXPECT_LE(bubble, (p - 1) * (t.forward + t.backward) + 1e-9) << name(c);
          const double shortest = played_out(generate_schedule(c.kind, p, 2 * p, 2), t) -
                                  2 * p * (t.forward + t.backward);
          EXPECT_NEAR(bubble, shortest, 1e-9) << name(c);
          const double zero_bubble_v =
              played_out(generate_schedule(ScheduleKind::ZeroBubbleV, p, m, 2), t) - work;
          if (ratio == 2.0 && weight == 0.5) {  // F = B_in = W per chunk
            EXPECT_NEAR(bubble, (p - 1) * t.forward / 2, 1e-9) << name(c);
            EXPECT_NEAR(bubble, zero_bubble_v, 1e-9) << name(c);
          }
          least = std::min(least, bubble / zero_bubble_v);
          most = std::max(most, bubble / zero_bubble_v);
          if (ratio != 2.0 || weight != 0.5 || m > 4 * p) continue;
          double alive = 0;
          int waiting = 0;
          for (int r = 0; r < p; ++r) {
            alive = std::max(alive, peak_in_flight_bytes(schedule, r, {1, 1}, {1, 1}));
            int rank_waiting = 0;
            for (int most_waiting : max_weight_pending(schedule, r)) rank_waiting += most_waiting;
            waiting = std::max(waiting, rank_waiting);
          }
          EXPECT_EQ(alive, 2 * p + 1) << name(c);
          EXPECT_EQ(waiting, p) << name(c);
        }
  if (printing()) std::printf("DualPipe-V: bubble %.3f to %.3f of ZB-V's (m >= 2p)\n", least, most);
}

// dependency_bound_step, which the cost model plays bubbles out with, is
// simulate_step's step for every posted kind at every ratio, between and
// beyond the grid's. Where a backward waits for its chunk's previous
// input-gradient send to be received (the buffer it writes again), that step
// can exceed the compute orders' dependency bound; how much is printed.
TEST(ScheduleBubbleTest, DependencyBoundStepIsSimulateStepsStepAtEveryRatio) {
  double worst = 0;
  std::string worst_case;
  int cases = 0;
  const auto check = [&](const Case& c) {
    const PipelineSchedule schedule = generate_schedule(c.kind, c.p, c.m, c.v);
    const double step = played_out(schedule, c.t);
    ASSERT_NEAR(dependency_bound_step(schedule, c.t.forward, c.t.backward, c.t.weight_fraction),
                step, 1e-9 * step)
        << name(c);
    ++cases;
    const double excess = step / dependency_bound(schedule, c.t) - 1;
    if (excess > worst) worst = excess, worst_case = name(c);
  };
  for (int p : {2, 3, 4, 5, 8})
    for (int m : {p, p + 1, 2 * p, 2 * p + 1, 3 * p + 2})
      for (double ratio : {0.5, 1.1, 1.4, 1.85, 3.0, 5.0}) {
        for (int v : {2, 3, 4}) check({ScheduleKind::Interleaved1F1B, p, m, v, {1, ratio, 0}});
        for (double weight : {0.0, 0.25, 0.55, 0.8, 1.0}) {
          const Times t{1, ratio, weight};
          check({ScheduleKind::ZeroBubbleH1, p, m, 1, t});
          check({ScheduleKind::ZeroBubbleV, p, m, 2, t});
          if (m >= 2 * p) check({ScheduleKind::DualPipeV, p, m, 2, t});
        }
      }
  EXPECT_GT(cases, 2000);
  // 1F1B and GPipe, lowered at their consumers: (m + p - 1)(F + B).
  for (const ScheduleKind kind : {ScheduleKind::OneForwardOneBackward, ScheduleKind::GPipe})
    for (int p = 2; p <= 6; ++p)
      for (int m = 1; m <= 12; ++m)
        for (double ratio : {0.5, 2.0, 3.0})
          EXPECT_NEAR(dependency_bound_step(generate_schedule(kind, p, m), 1, ratio, 0),
                      (m + p - 1) * (1 + ratio), 1e-9)
              << schedule_kind_row(kind).traits.name << " p " << p << " m " << m;
  if (printing())
    std::printf(
        "posted streams: played out at most %.2f%% over their compute orders' "
        "dependency bound (%s)\n",
        100 * worst, worst_case.c_str());
}

}  // namespace
}  // namespace paraplan
