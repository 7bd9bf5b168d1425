// schedule_kinds.cc: the schedule catalogue (schedule_kinds.h): each kind's
// generator, bounds and bubble, and the counts the memory model reads.
#include "planner/schedule/schedule_kinds.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>

namespace paraplan {

namespace {

using schema::ScheduleKind;

// Interleaved 1F1B: what the runtime allocates on a rank, the most
// micro-batches each chunk holds at once in its stream, summed over the
// chunks (their peaks need not coincide, but each chunk keeps its own
// buffers); the largest over the ranks, as the runtime also holds a slot from
// the activation's receipt, before its forward. Counted once per shape;
// the search asks from many threads.
int interleaved_slots(int num_stages, int num_micro_batches, int virtual_stages) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, int> cache;
  // Where p divides m, the peaks are those of m = 2p from m = 2p on (every
  // chunk's warm-up is done by then; CostModelTest.InterleavedSlots checks
  // it against the whole stream): a short stream to generate, one entry.
  const int p = num_stages;
  if (num_micro_batches % p == 0 && num_micro_batches > 2 * p) num_micro_batches = 2 * p;
  const auto key = std::make_tuple(num_stages, num_micro_batches, virtual_stages);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = cache.find(key);
    if (found != cache.end()) return found->second;
  }
  // The compute orders alone: placing the transfers would not change them.
  const PipelineSchedule compute_only{
      schema::ScheduleKind::Interleaved1F1B, num_stages, num_micro_batches,
      interleaved_compute_orders(num_stages, num_micro_batches, virtual_stages), virtual_stages};
  int slots = 0;
  for (int rank = 0; rank < num_stages; ++rank) {
    int rank_slots = 0;
    for (int most : max_in_flight(compute_only, rank)) rank_slots += most;
    slots = std::max(slots, rank_slots);
  }
  const std::lock_guard<std::mutex> lock(mutex);
  cache.emplace(key, slots);
  return slots;
}

int none(int, int, int) {
  return 0;
}
int same_micro_batches(int, int m) {
  return m;
}
double not_exact(int, int, int, double, double, double) {
  return -1;
}
// 1F1B and GPipe: (p - 1) slots of F + B, whatever the backward's split.
double whole_stages_bubble(int p, int, double) {
  return p - 1;
}

// 1F1B: stage r runs p - r warm-up forwards at most.
PipelineSchedule one_forward_one_backward(int p, int m, int) {
  return generate_one_forward_one_backward(p, m);
}
int one_forward_one_backward_bound(int p, int m, int, int rank) {
  return std::min(p - rank, m);
}

// GPipe: every forward before any backward.
PipelineSchedule gpipe(int p, int m, int) {
  return generate_gpipe(p, m);
}
int gpipe_bound(int, int m, int, int) {
  return m;
}

// Interleaved 1F1B (Megatron-core's order over v chunks).
int interleaved_bound(int p, int m, int v, int rank) {
  return interleaved_in_flight_bound(p, m, v, rank);
}
int interleaved_slots_held(int p, int m, int v, int) {
  if (p < 2 || m < p) return m * std::max(v, 1);  // no such schedule: all of them
  return interleaved_slots(p, m, std::max(v, 1));
}
double interleaved_bubble(int p, int v, double) {
  return static_cast<double>(p - 1) / std::max(v, 1);
}
// Megatron's (p - 1)(F + B) / v where p divides m (schedule_bubble_test).
double interleaved_exact_bubble(int p, int m, int v, double, double, double) {
  return m >= p && m % p == 0 ? (p - 1.0) / std::max(v, 1) : -1;
}
// The steady state adds no bubble for every m >= 2p of one m mod p.
int interleaved_bubble_micro_batches(int p, int m) {
  return m >= 2 * p ? 2 * p + m % p : m;
}

// The split-backward kinds: the runtime's slots and pending W's, from the
// generated stream (zero_bubble_counts).
int split_slots_held(ScheduleKind kind, int p, int m, int rank) {
  return zero_bubble_counts(kind, p, m).at(rank).slots;
}
int split_weight_pending(ScheduleKind kind, int p, int m, int rank) {
  return zero_bubble_counts(kind, p, m).at(rank).weight_pending;
}

// ZB-H1 (the zero-bubble paper's order, one chunk).
PipelineSchedule zero_bubble_h1(int p, int m, int) {
  return generate_zero_bubble_h1(p, m);
}
int zero_bubble_h1_bound(int p, int m, int, int) {
  return std::min(p, m);
}
int zero_bubble_h1_slots(int p, int m, int, int rank) {
  return split_slots_held(ScheduleKind::ZeroBubbleH1, p, m, rank);
}
int zero_bubble_h1_pending(int p, int m, int rank) {
  return split_weight_pending(ScheduleKind::ZeroBubbleH1, p, m, rank);
}
double zero_bubble_h1_bubble(int p, int, double weight_fraction) {
  return (p - 1) * std::max(0.0, 1 - 2 * weight_fraction);
}
// The paper's (p - 1)(F + B_in - W) where W <= min(F, B_in) and m >= p.
double zero_bubble_h1_exact_bubble(int p, int m, int, double backward_ratio, double input,
                                   double weight) {
  if (m >= p && weight <= std::min(1.0, input))
    return (p - 1) * (1 + input - weight) / (1 + backward_ratio);
  return -1;
}

// Where W > min(F, B_in) the played-out bubble is the same for every
// m >= 2p (schedule_bubble_test): the planner plays out m = 2p.
int zero_bubble_h1_bubble_micro_batches(int p, int m) {
  return m > 2 * p ? 2 * p : m;
}

// The V kinds: two chunks per rank; before the backward's split is known,
// ZB-H1's bubble at half the slot (each chunk is half a stage).
double v_bubble(int p, int, double weight_fraction) {
  return (p - 1) * std::max(0.0, 1 - 2 * weight_fraction) / 2;
}
// The same bubble for every m >= 2p.
int v_bubble_micro_batches(int p, int m) {
  return m > 2 * p ? 2 * p : m;
}

PipelineSchedule zero_bubble_v(int p, int m, int) {
  return generate_zero_bubble_v(p, m);
}
int zero_bubble_v_bound(int p, int m, int, int) {
  return 2 * std::min(p, m);
}
int zero_bubble_v_slots(int p, int m, int, int rank) {
  return split_slots_held(ScheduleKind::ZeroBubbleV, p, m, rank);
}
int zero_bubble_v_pending(int p, int m, int rank) {
  return split_weight_pending(ScheduleKind::ZeroBubbleV, p, m, rank);
}

PipelineSchedule dualpipe_v(int p, int m, int) {
  return generate_dualpipe_v(p, m);
}
int dualpipe_v_bound(int p, int m, int, int) {
  return std::min(2 * p + 1, 2 * m);
}
int dualpipe_v_slots(int p, int m, int, int rank) {
  return split_slots_held(ScheduleKind::DualPipeV, p, m, rank);
}
int dualpipe_v_pending(int p, int m, int rank) {
  return split_weight_pending(ScheduleKind::DualPipeV, p, m, rank);
}

ScheduleKindRow make_row(ScheduleKind kind) {
  const ScheduleKindTraits& traits = schedule_kind_traits(kind);
  switch (kind) {
    case ScheduleKind::OneForwardOneBackward:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 0,
              .runs_every_setting = true,
              .generate = one_forward_one_backward,
              .in_flight_bound = one_forward_one_backward_bound,
              .slots_held = one_forward_one_backward_bound,
              .weight_pending = none,
              .closed_form_bubble = whole_stages_bubble,
              .exact_bubble = not_exact,
              .bubble_micro_batches = same_micro_batches};
    case ScheduleKind::GPipe:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 0,
              .runs_every_setting = false,
              .generate = gpipe,
              .in_flight_bound = gpipe_bound,
              .slots_held = gpipe_bound,
              .weight_pending = none,
              .closed_form_bubble = whole_stages_bubble,
              .exact_bubble = not_exact,
              .bubble_micro_batches = same_micro_batches};
    case ScheduleKind::Interleaved1F1B:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 1,
              .runs_every_setting = false,
              .generate = generate_interleaved,
              .in_flight_bound = interleaved_bound,
              .slots_held = interleaved_slots_held,
              .weight_pending = none,
              .closed_form_bubble = interleaved_bubble,
              .exact_bubble = interleaved_exact_bubble,
              .bubble_micro_batches = interleaved_bubble_micro_batches};
    case ScheduleKind::ZeroBubbleH1:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 0,
              .runs_every_setting = false,
              .generate = zero_bubble_h1,
              .in_flight_bound = zero_bubble_h1_bound,
              .slots_held = zero_bubble_h1_slots,
              .weight_pending = zero_bubble_h1_pending,
              .closed_form_bubble = zero_bubble_h1_bubble,
              .exact_bubble = zero_bubble_h1_exact_bubble,
              .bubble_micro_batches = zero_bubble_h1_bubble_micro_batches};
    case ScheduleKind::ZeroBubbleV:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 0,
              .runs_every_setting = false,
              .generate = zero_bubble_v,
              .in_flight_bound = zero_bubble_v_bound,
              .slots_held = zero_bubble_v_slots,
              .weight_pending = zero_bubble_v_pending,
              .closed_form_bubble = v_bubble,
              .exact_bubble = not_exact,
              .bubble_micro_batches = v_bubble_micro_batches};
    case ScheduleKind::DualPipeV:
      return {.traits = traits,
              .fewest_micro_batches_per_stage = 2,
              .runs_every_setting = false,
              .generate = dualpipe_v,
              .in_flight_bound = dualpipe_v_bound,
              .slots_held = dualpipe_v_slots,
              .weight_pending = dualpipe_v_pending,
              .closed_form_bubble = v_bubble,
              .exact_bubble = not_exact,
              .bubble_micro_batches = v_bubble_micro_batches};
  }
  throw std::logic_error("schedule kind without a catalogue row");  // traits threw first
}

}  // namespace

const std::vector<ScheduleKindRow>& schedule_catalogue() {
  // The search's order: 1F1B first (it runs every setting), then the others.
  static const std::vector<ScheduleKindRow> rows = {
      make_row(ScheduleKind::OneForwardOneBackward), make_row(ScheduleKind::GPipe),
      make_row(ScheduleKind::ZeroBubbleH1),          make_row(ScheduleKind::Interleaved1F1B),
      make_row(ScheduleKind::ZeroBubbleV),           make_row(ScheduleKind::DualPipeV)};
  return rows;
}

const ScheduleKindRow& schedule_kind_row(ScheduleKind kind) {
  for (const ScheduleKindRow& row : schedule_catalogue())
    if (row.traits.kind == kind) return row;
  schedule_kind_traits(kind);  // throws, naming the value
  throw std::logic_error("schedule kind without a catalogue row");
}

schema::ScheduleKind default_schedule_kind() {
  for (const ScheduleKindRow& row : schedule_catalogue())
    if (row.runs_every_setting) return row.traits.kind;
  throw std::logic_error("no schedule kind runs every setting");
}

const ScheduleKindRow* schedule_kind_named(std::string_view name) {
  for (const ScheduleKindRow& row : schedule_catalogue())
    if (name == row.traits.name) return &row;
  return nullptr;
}

const std::vector<ZeroBubbleCounts>& zero_bubble_counts(schema::ScheduleKind kind, int num_stages,
                                                        int num_micro_batches) {
  const int p = num_stages;
  // From m = 2p on every rank's counts are those of m = 2p (warm-up and
  // cool-down are then whole; CostModelTest.ZeroBubbleCounts checks it).
  const int m = std::min(num_micro_batches, 2 * p);
  static std::mutex mutex;
  // Entries are never erased, so references to them stay valid.
  static std::map<std::tuple<schema::ScheduleKind, int, int>, std::vector<ZeroBubbleCounts>> cache;
  const auto key = std::make_tuple(kind, p, m);
  {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto found = cache.find(key);
    if (found != cache.end()) return found->second;
  }
  std::vector<ZeroBubbleCounts> counts(std::max(p, 1));
  if (kind == schema::ScheduleKind::ZeroBubbleH1 && m >= p) {
    // The paper's order as generated: every rank holds p slots, rank r
    // defers r weight gradients to the cool-down (the grid test holds it
    // to the stream).
    for (int rank = 0; rank < p; ++rank) counts[rank] = {p, rank + 1};
  } else if (v_shaped(kind) &&
             (p < 2 ||
              num_micro_batches < schedule_kind_row(kind).fewest_micro_batches_per_stage * p)) {
    for (ZeroBubbleCounts& rank : counts)  // no such schedule: all of them
      rank = {2 * num_micro_batches, 2 * num_micro_batches};
  } else {
    const std::shared_ptr<const PipelineSchedule> schedule =
        shared_schedule(kind, p, m, v_shaped(kind) ? 2 : 1);
    for (int rank = 0; rank < p; ++rank) {
      for (int most : max_slots_held(*schedule, rank)) counts[rank].slots += most;
      for (int most : max_weight_pending(*schedule, rank)) counts[rank].weight_pending += most;
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(counts)).first->second;
}

int in_flight_bound(ScheduleKind kind, int num_stages, int num_micro_batches, int virtual_stages,
                    int pipeline_rank) {
  return schedule_kind_row(kind).in_flight_bound(num_stages, num_micro_batches, virtual_stages,
                                                 pipeline_rank);
}

PipelineSchedule generate_schedule(ScheduleKind kind, int num_stages, int num_micro_batches,
                                   int virtual_stages) {
  const ScheduleKindRow& row = schedule_kind_row(kind);
  switch (row.traits.chunks) {
    case ChunkRule::kOne:
      if (virtual_stages != 1)
        throw std::invalid_argument(std::string(schema::EnumNameScheduleKind(kind)) +
                                    " runs one model chunk per pipeline rank (virtual_stages " +
                                    std::to_string(virtual_stages) + " needs Interleaved1F1B)");
      break;
    case ChunkRule::kTwoInAV:
      if (virtual_stages != 2)
        throw std::invalid_argument(std::string(row.traits.name) +
                                    " runs two model chunks per pipeline rank (virtual_stages " +
                                    std::to_string(virtual_stages) + " must be 2)");
      break;
    case ChunkRule::kChosen:
      break;
  }
  return row.generate(num_stages, num_micro_batches, virtual_stages);
}

}  // namespace paraplan
