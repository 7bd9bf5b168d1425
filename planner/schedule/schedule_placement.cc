// schedule_placement.cc: interleaved 1F1B, ZB-H1 and ZB-V. Each rank's compute order
// is played out in unit time; every transfer becomes one event on both ends
// at the moment its producer finishes, and the streams are projections of
// that one global sequence, so their sends and receives meet in order. The
// streams' transfers are posted (schedule.h): none waits for compute.
#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "planner/schedule/schedule.h"

namespace paraplan {

using schema::OpCode;
using schema::ScheduleKind;

namespace {

// What a rank has available and done, in the time the placement plays out.
struct RankProgress {
  // Per chunk and micro-batch: when its input activation / output gradient
  // arrived (-1: not yet), and whether F, B (input gradient) and W ran.
  std::vector<std::vector<int>> activation_at, gradient_at;
  std::vector<std::vector<char>> forwarded, input_done, weight_done;
  int busy_until = 0;
  size_t next = 0;  // position in a fixed compute order
};

struct Event {
  int time;
  int kind;  // 0: transfer (before a compute starting at the same time), 1: compute
  int sequence;
  int rank, chunk, micro_batch;
  OpCode op;  // compute op, or SendActivation / SendGradient for a transfer
  int to_rank, to_chunk;
};

class Placement {
 public:
  Placement(ScheduleKind kind, int p, int m, int v)
      : kind_(kind), p_(p), m_(m), v_(v), layout_(PipelineLayout::of(kind, p, v)), ranks_(p) {
    for (RankProgress& r : ranks_) {
      for (auto* table : {&r.activation_at, &r.gradient_at})
        table->assign(v, std::vector<int>(m, -1));
      for (auto* table : {&r.forwarded, &r.input_done, &r.weight_done})
        table->assign(v, std::vector<char>(m, 0));
    }
    // Virtual stage 0 reads its tokens itself.
    for (int mb = 0; mb < m; ++mb) ranks_[0].activation_at[0][mb] = 0;
  }

  int last_virtual_stage() const { return p_ * v_ - 1; }

  // Whether op (micro-batch, chunk) of rank r may start at time `now`.
  bool ready(int r, const PipelineInstruction& op, int now) const {
    const RankProgress& rp = ranks_[r];
    const int c = op.chunk, mb = op.micro_batch;
    const bool last = layout_.virtual_stage(r, c) == last_virtual_stage();
    auto arrived = [now](int at) { return at >= 0 && at <= now; };
    switch (op.op) {
      case OpCode::Forward:
        return !rp.forwarded[c][mb] && arrived(rp.activation_at[c][mb]);
      case OpCode::Backward:
      case OpCode::BackwardInput:
        return rp.forwarded[c][mb] && !rp.input_done[c][mb] &&
               (last ? true : arrived(rp.gradient_at[c][mb]));
      case OpCode::BackwardWeight:
        return rp.input_done[c][mb] && !rp.weight_done[c][mb];
      case OpCode::LoadMicroBatch:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
      case OpCode::OptimizerStep:
        return false;
    }
    return false;  // an op outside the enum: refused where plans are read
  }

  // Starts op on rank r at `now`: records it, and the transfer its result
  // makes when it finishes.
  void start(int r, const PipelineInstruction& op, int now) {
    RankProgress& rp = ranks_[r];
    const int c = op.chunk, mb = op.micro_batch;
    const int duration = op.op == OpCode::Backward ? 2 : 1;
    const int end = now + duration;
    rp.busy_until = end;
    events_.push_back({now, 1, sequence_++, r, c, mb, op.op, -1, -1});
    const int vs = layout_.virtual_stage(r, c);
    if (op.op == OpCode::Forward) {
      rp.forwarded[c][mb] = 1;
      if (vs < last_virtual_stage()) transfer(end, vs, vs + 1, mb, true);
    } else {
      if (op.op != OpCode::BackwardWeight) {
        rp.input_done[c][mb] = 1;
        if (vs > 0) transfer(end, vs, vs - 1, mb, false);
      }
      if (op.op != OpCode::BackwardInput) rp.weight_done[c][mb] = 1;
    }
  }

  // Runs time forward, starting each free rank's next op of its compute
  // order as soon as it is ready, until every order is done.
  PipelineSchedule run(const std::vector<InstructionStream>& orders) {
    const int ops_per_rank = static_cast<int>(orders[0].size());
    std::vector<size_t> next(p_, 0);
    int finished = 0;
    for (int now = 0; finished < p_; ++now) {
      if (now > 8 * (ops_per_rank + p_ * v_) + 16)
        throw std::logic_error(std::string(schema::EnumNameScheduleKind(kind_)) +
                               " p=" + std::to_string(p_) + " m=" + std::to_string(m_) + " v=" +
                               std::to_string(v_) + ": the compute orders cannot be played out");
      for (int r = 0; r < p_; ++r) {
        if (next[r] == orders[r].size() || ranks_[r].busy_until > now) continue;
        const PipelineInstruction& op = orders[r][next[r]];
        if (!ready(r, op, now)) continue;
        start(r, op, now);
        if (++next[r] == orders[r].size()) ++finished;
      }
    }
    return project();
  }

 private:
  void transfer(int time, int from_vs, int to_vs, int mb, bool activation) {
    const int from_rank = layout_.rank_of(from_vs), to_rank = layout_.rank_of(to_vs);
    const int to_chunk = layout_.chunk_of(to_vs);
    events_.push_back({time, 0, sequence_++, from_rank, layout_.chunk_of(from_vs), mb,
                       activation ? OpCode::SendActivation : OpCode::SendGradient, to_rank,
                       to_chunk});
    auto& at = activation ? ranks_[to_rank].activation_at : ranks_[to_rank].gradient_at;
    at[to_chunk][mb] = time;
  }

  PipelineSchedule project() {
    // Ordered by (time, kind, sequence): a counting sort on time x 2 + kind,
    // stable, so events of one slot keep their sequence (insertion) order.
    // Times are small integers; a comparison sort cost a tenth of planning.
    int latest = 0;
    for (const Event& e : events_) latest = std::max(latest, e.time);
    std::vector<int> slot_start(2 * static_cast<size_t>(latest) + 3, 0);
    for (const Event& e : events_) ++slot_start[2 * e.time + e.kind + 1];
    for (size_t i = 1; i < slot_start.size(); ++i) slot_start[i] += slot_start[i - 1];
    std::vector<Event> ordered(events_.size());
    for (const Event& e : events_) ordered[slot_start[2 * e.time + e.kind]++] = e;
    events_.swap(ordered);
    PipelineSchedule schedule{kind_, p_, m_, std::vector<InstructionStream>(p_), v_};
    for (const Event& e : events_) {
      InstructionStream& own = schedule.stages[e.rank];
      if (e.kind == 1) {
        const int vs = layout_.virtual_stage(e.rank, e.chunk);
        if (e.op == OpCode::Forward && (vs == 0 || vs == last_virtual_stage()))
          own.push_back({OpCode::LoadMicroBatch, e.micro_batch, e.chunk});
        own.push_back({e.op, e.micro_batch, e.chunk});
        continue;
      }
      // A hand-off between two chunks of one rank lands right after its
      // send: the local copy plan.fbs asks for.
      own.push_back({e.op, e.micro_batch, e.chunk});
      const OpCode receive =
          e.op == OpCode::SendActivation ? OpCode::RecvActivation : OpCode::RecvGradient;
      schedule.stages[e.to_rank].push_back({receive, e.micro_batch, e.to_chunk});
    }
    for (InstructionStream& stream : schedule.stages) {
      stream.push_back({OpCode::ReduceGradients, -1, 0});
      stream.push_back({OpCode::OptimizerStep, -1, 0});
    }
    return schedule;
  }

  ScheduleKind kind_;
  int p_, m_, v_;
  PipelineLayout layout_;
  std::vector<RankProgress> ranks_;
  std::vector<Event> events_;
  int sequence_ = 0;
};

void check_shape(const char* what, int p, int m, int v) {
  if (p < 1 || m < 1 || v < 1)
    throw std::invalid_argument(
        std::string(what) + ": num_stages (" + std::to_string(p) + "), num_micro_batches (" +
        std::to_string(m) + ") and virtual_stages (" + std::to_string(v) + ") must all be >= 1");
}

// Megatron-core's get_schedule_table: (micro-batch, chunk) of each forward.
std::vector<std::pair<int, int>> interleaved_table(int p, int m, int v) {
  std::vector<std::pair<int, int>> table;
  for (int first = 0; first < m; first += p) {
    const int end = first + p >= m ? m : first + p;  // the last group takes the rest
    for (int chunk = 0; chunk < v; ++chunk)
      for (int mb = first; mb < end; ++mb) table.emplace_back(mb, chunk);
  }
  return table;
}

// Each rank's compute order: warm-up forwards, then one forward and one
// backward, then the remaining backwards.
std::vector<InstructionStream> interleaved_orders(int p, int m, int v, int extra_warmup);

// Whether the compute orders can run at all: every op's inputs come from ops
// that can run first (no cycle through the ranks' orders).
bool orders_can_run(int p, int m, int v, const std::vector<InstructionStream>& orders) {
  std::vector<std::vector<char>> forwarded(p * v, std::vector<char>(m, 0)),
      backwarded(p * v, std::vector<char>(m, 0));
  std::vector<size_t> next(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      for (; next[r] < orders[r].size(); ++next[r], progress = true) {
        const PipelineInstruction& op = orders[r][next[r]];
        const int vs = op.chunk * p + r, mb = op.micro_batch;
        if (op.op == OpCode::Forward) {
          if (vs > 0 && !forwarded[vs - 1][mb]) break;
          forwarded[vs][mb] = 1;
        } else {
          if (vs + 1 < p * v && !backwarded[vs + 1][mb]) break;
          backwarded[vs][mb] = 1;
        }
      }
    }
  }
  for (int r = 0; r < p; ++r)
    if (next[r] < orders[r].size()) return false;
  return true;
}

int interleaved_warmup(int p, int m, int v, int rank, int extra);

// orders_can_run on interleaved_orders(p, m, v, extra) without building the
// orders: rank r's i-th compute op is worked out from the table, and the
// buffers serve every count tried. The search for the fewest extra warm-up
// forwards tries hundreds on odd meshes (p 24, m 128, v 4: 407).
class InterleavedRunCheck {
 public:
  InterleavedRunCheck(int p, int m, int v)
      : p_(p),
        m_(m),
        v_(v),
        table_(interleaved_table(p, m, v)),
        forwarded_(static_cast<size_t>(p) * v * m),
        backwarded_(forwarded_.size()),
        next_(p),
        warmup_(p) {}

  bool runs(int extra) {
    std::fill(forwarded_.begin(), forwarded_.end(), 0);
    std::fill(backwarded_.begin(), backwarded_.end(), 0);
    std::fill(next_.begin(), next_.end(), 0);
    for (int r = 0; r < p_; ++r) warmup_[r] = interleaved_warmup(p_, m_, v_, r, extra);
    const int ops = 2 * m_ * v_, last = p_ * v_ - 1;
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < p_; ++r) {
        for (; next_[r] < ops; ++next_[r], progress = true) {
          const auto [forward, k] = op_at(r, next_[r]);
          const auto [mb, table_chunk] = table_[k];
          const int vs = (forward ? table_chunk : v_ - 1 - table_chunk) * p_ + r;
          const size_t at = static_cast<size_t>(vs) * m_ + mb;
          if (forward) {
            if (vs > 0 && !forwarded_[at - m_]) break;
            forwarded_[at] = 1;
          } else {
            if (vs < last && !backwarded_[at + m_]) break;
            backwarded_[at] = 1;
          }
        }
      }
    }
    for (int r = 0; r < p_; ++r)
      if (next_[r] < ops) return false;
    return true;
  }

 private:
  // Rank r's i-th op (interleaved_orders): (a forward?, its table entry).
  std::pair<bool, int> op_at(int r, int i) const {
    const int w = warmup_[r], steady = 2 * (m_ * v_ - w);
    if (i < w) return {true, i};
    const int j = i - w;
    if (j < steady) return {j % 2 == 0, j % 2 == 0 ? w + j / 2 : j / 2};
    return {false, m_ * v_ - w + (j - steady)};
  }

  int p_, m_, v_;
  std::vector<std::pair<int, int>> table_;
  std::vector<char> forwarded_, backwarded_;  // [virtual stage x m + micro-batch]
  std::vector<int> next_, warmup_;
};

// Megatron-core's warm-up leaves a dependency cycle for some m not a multiple
// of p, where its shorter last group changes chunk sooner (p = 4, m = 5, v = 3:
// rank 0 forwards micro-batch 4's last chunk before its first backward, which
// waits on rank 3, whose forward of micro-batch 4's middle chunk comes after
// its own first backward). The fewest extra warm-up forwards on every rank
// that remove it (0 when m is a multiple of p).
int interleaved_extra_warmup(int p, int m, int v) {
  if (m % p == 0) return 0;
  // The memory model asks for every shape it prices: remember the answers.
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, int> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find({p, m, v}); it != known.end()) return it->second;
  }
  InterleavedRunCheck check(p, m, v);
  int extra = -1;
  if (m >= 3 * p) {
    // A group of p micro-batches more keeps the count of m - p, or adds p v
    // (a group more on every chunk's warm-up): from m = 2p on it is the
    // count of 2p + m mod p, or that plus p v per group more, the first if it
    // runs (ScheduleKindsTest holds this to counting up on a grid; the 1T
    // search's p 24, m 128, v 4 counted up to 407 over the whole stream).
    const int base_m = 2 * p + m % p;
    const int base = interleaved_extra_warmup(p, base_m, v);
    const int grown = base + (m - base_m) / p * p * v;
    if (check.runs(base))
      extra = base;
    else if (grown <= m * v && check.runs(grown))
      extra = grown;
  }
  // Counting up: whether a count runs is not monotone in it (p 4, m 9, v 2
  // runs with none, not with 4), so no bisection.
  if (extra < 0)
    for (extra = 0; extra < m * v && !check.runs(extra);) ++extra;
  std::lock_guard<std::mutex> lock(mutex);
  known[{p, m, v}] = extra;
  return extra;
}

int interleaved_warmup(int p, int m, int v, int rank, int extra) {
  const int total = m * v;
  if (m == p) return total;
  return std::min(2 * (p - rank - 1) + (v - 1) * p + extra, total);
}

std::vector<InstructionStream> interleaved_orders(int p, int m, int v, int extra_warmup) {
  const std::vector<std::pair<int, int>> table = interleaved_table(p, m, v);
  const int total = m * v;
  std::vector<InstructionStream> orders(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = interleaved_warmup(p, m, v, r, extra_warmup);
    auto forward = [&](int k) {
      orders[r].push_back({OpCode::Forward, table[k].first, table[k].second});
    };
    auto backward = [&](int k) {
      orders[r].push_back({OpCode::Backward, table[k].first, v - 1 - table[k].second});
    };
    for (int k = 0; k < warmup; ++k) forward(k);
    for (int k = warmup; k < total; ++k) {
      forward(k);
      backward(k - warmup);
    }
    for (int k = total - warmup; k < total; ++k) backward(k);
  }
  return orders;
}

}  // namespace

int interleaved_extra_warmup_forwards(int p, int m, int v) {
  return interleaved_extra_warmup(p, m, v);
}

bool interleaved_warmup_runs(int p, int m, int v, int extra) {
  return orders_can_run(p, m, v, interleaved_orders(p, m, v, extra));
}

PipelineSchedule schedule_from_orders(ScheduleKind kind, int num_stages, int num_micro_batches,
                                      int virtual_stages,
                                      const std::vector<InstructionStream>& compute_orders) {
  check_shape("schedule_from_orders", num_stages, num_micro_batches, virtual_stages);
  if (static_cast<int>(compute_orders.size()) != num_stages)
    throw std::invalid_argument("schedule_from_orders: one compute order per rank needed");
  const size_t ops = compute_orders[0].size();
  for (const InstructionStream& order : compute_orders)
    if (order.size() != ops)
      throw std::invalid_argument("schedule_from_orders: every rank needs as many compute ops");
  Placement placement(kind, num_stages, num_micro_batches, virtual_stages);
  return placement.run(compute_orders);
}

std::vector<InstructionStream> interleaved_compute_orders(int p, int m, int v) {
  check_shape("interleaved 1F1B", p, m, v);
  if (p < 2)
    throw std::invalid_argument("interleaved 1F1B needs at least 2 pipeline stages (got " +
                                std::to_string(p) + "); with one, use 1F1B");
  if (m < p)
    throw std::invalid_argument(
        "interleaved 1F1B needs num_micro_batches >= pipeline stages (got " + std::to_string(m) +
        " < " + std::to_string(p) +
        "): Megatron-core runs groups of p micro-batches per model chunk");
  return interleaved_orders(p, m, v, interleaved_extra_warmup(p, m, v));
}

PipelineSchedule generate_interleaved(int num_stages, int num_micro_batches, int virtual_stages) {
  const int p = num_stages, m = num_micro_batches, v = virtual_stages;
  return schedule_from_orders(ScheduleKind::Interleaved1F1B, p, m, v,
                              interleaved_compute_orders(p, m, v));
}

PipelineSchedule generate_zero_bubble_h1(int num_stages, int num_micro_batches) {
  const int p = num_stages, m = num_micro_batches;
  check_shape("ZB-H1", p, m, 1);
  std::vector<InstructionStream> orders(p);
  for (int rank = 0; rank < p; ++rank) {
    InstructionStream& order = orders[rank];
    int weights_done = 0;
    const auto forward = [&](int mb) { order.push_back({OpCode::Forward, mb, 0}); };
    const auto input = [&](int mb) { order.push_back({OpCode::BackwardInput, mb, 0}); };
    const auto weight = [&] { order.push_back({OpCode::BackwardWeight, weights_done++, 0}); };
    const int warmup = std::min(p - rank - 1, m);
    for (int mb = 0; mb < warmup; ++mb) forward(mb);
    for (int k = 0; k < m - warmup; ++k) {
      forward(warmup + k);
      input(k);
      if (k >= rank) weight();  // rank r's first r weight gradients wait for the cool-down
    }
    for (int mb = m - warmup; mb < m; ++mb) {
      input(mb);
      weight();
    }
    while (weights_done < m) weight();
  }
  return schedule_from_orders(ScheduleKind::ZeroBubbleH1, p, m, 1, orders);
}

PipelineSchedule generate_zero_bubble_v(int num_stages, int num_micro_batches) {
  const int p = num_stages, m = num_micro_batches;
  check_shape("ZB-V", p, m, 1);
  if (p < 2)
    throw std::invalid_argument("ZB-V needs at least 2 pipeline stages (got " + std::to_string(p) +
                                "); with one, use 1F1B");
  // Written for at least 2p - 1 micro-batches, the ops of those past m left out.
  const int planned = std::max(2 * p - 1, m);
  std::vector<InstructionStream> orders(p);
  for (int rank = 0; rank < p; ++rank) {
    InstructionStream& order = orders[rank];
    int forwarded[2] = {0, 0}, input_done[2] = {0, 0}, weight_done[2] = {0, 0};
    const auto add = [&](OpCode op, int chunk, int* counter) {
      const int mb = counter[chunk]++;
      if (mb < m) order.push_back({op, mb, chunk});
    };
    const auto forward = [&](int chunk) { add(OpCode::Forward, chunk, forwarded); };
    const auto input = [&](int chunk) { add(OpCode::BackwardInput, chunk, input_done); };
    const auto weight = [&](int chunk) { add(OpCode::BackwardWeight, chunk, weight_done); };
    for (int i = 0; i < 2 * (p - rank) - 1; ++i) forward(0);
    for (int i = 0; i < rank; ++i) forward(1), forward(0);
    for (int i = 0; i < p - rank; ++i) forward(1), input(1), weight(1);
    while (forwarded[1] < forwarded[0] || forwarded[0] < planned) {
      if (forwarded[0] < planned) forward(0);
      input(0), weight(0);
      forward(1), input(1), weight(1);
    }
    // Cool-down: the backwards left, each chunk 0 one before chunk 1's; the
    // last p - rank of chunk 0 each followed by a deferred weight gradient.
    for (int i = 0; i < rank; ++i) input(0), input(1);
    for (int i = 0; i < p - rank; ++i) input(0), weight(0);
    while (weight_done[1] < planned) weight(1);
    while (weight_done[0] < planned) weight(0);
  }
  return schedule_from_orders(ScheduleKind::ZeroBubbleV, p, m, 2, orders);
}

PipelineSchedule generate_dualpipe_v(int num_stages, int num_micro_batches) {
  const int p = num_stages, m = num_micro_batches;
  check_shape("DualPipe-V", p, m, 1);
  if (p < 2 || m < 2 * p)
    throw std::invalid_argument(
        "DualPipe-V needs at least 2 pipeline stages and "
        "num_micro_batches >= 2 x stages (got " +
        std::to_string(p) + " stages, " + std::to_string(m) +
        " micro-batches); with fewer, use zb-v or 1f1b");
  std::vector<InstructionStream> orders(p);
  for (int rank = 0; rank < p; ++rank) {
    InstructionStream& order = orders[rank];
    int forwarded[2] = {0, 0}, backwarded[2] = {0, 0};
    std::deque<std::pair<int, int>> deferred;  // (micro-batch, chunk), oldest first
    const auto forward = [&](int chunk) {
      order.push_back({OpCode::Forward, forwarded[chunk]++, chunk});
    };
    // A backward; its weight gradient deferred, or right after it.
    const auto backward = [&](int chunk, bool defer) {
      const int mb = backwarded[chunk]++;
      order.push_back({OpCode::BackwardInput, mb, chunk});
      if (defer)
        deferred.emplace_back(mb, chunk);
      else
        order.push_back({OpCode::BackwardWeight, mb, chunk});
    };
    const auto weight = [&] {
      order.push_back({OpCode::BackwardWeight, deferred.front().first, deferred.front().second});
      deferred.pop_front();
    };
    const int down = p - rank - 1;  // ranks after this one
    for (int i = 0; i < 2 * down; ++i) forward(0);
    for (int i = 0; i <= rank; ++i) forward(0), forward(1);
    for (int i = 0; i < down; ++i) backward(1, true), weight(), forward(1);
    for (int i = 0; i < m - 2 * p + rank + 1; ++i)
      forward(0), backward(1, false), forward(1), backward(0, false);
    for (int i = 0; i < down; ++i) backward(1, false), forward(1), backward(0, false);
    // The second half of these backwards defers its weight gradients: odd
    // ranks from chunk 1's, even ranks from chunk 0's.
    for (int i = 0, half = (rank + 1) / 2; i <= rank; ++i) {
      backward(1, i > half || (i == half && rank % 2 == 1));
      backward(0, i >= half);
    }
    for (int i = 0; i < down; ++i) weight(), backward(0, true);
    while (!deferred.empty()) weight();
  }
  return schedule_from_orders(ScheduleKind::DualPipeV, p, m, 2, orders);
}

int interleaved_in_flight_bound(int p, int m, int v, int pipeline_rank) {
  if (p < 2 || m < p || v < 1) return m * std::max(v, 1);  // no such schedule
  return std::min(interleaved_warmup(p, m, v, pipeline_rank, interleaved_extra_warmup(p, m, v)) + 1,
                  m * v);
}

}  // namespace paraplan
