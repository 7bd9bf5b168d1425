// stage_partition.cc: the stage-partition search for one plan setting (method
// in stage_partition.h).
#include "planner/search/stage_partition.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <queue>

namespace paraplan {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;

// A stage's slot is at most tau (an infinite slot, a stage that does not fit,
// never is, even for tau = infinity).
bool within(double slot, double tau) {
  return slot <= tau && slot < kInfinity;
}

std::string gigabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GB", bytes / kBytesPerGigabyte);
  return text;
}

// head: the rank holding the head (the last; ZB-V's first).
std::string stage_name(int s, int head) {
  std::string name = "stage " + std::to_string(s);
  if (s == 0 && s == head) return name + " (embedding and head)";
  if (s == 0) return name + " (embedding)";
  if (s == head) return name + " (head)";
  return name;
}

// How the stage recomputes when even that does not fit: all full, or as much
// as the recompute intervals (constraints file) allow.
const char* most_recompute_name(const RecomputeCounts& counts) {
  if (counts.layers() == 0) return "no blocks to recompute";
  if (counts.full == counts.layers()) return "full recompute";
  return "the most recompute its blocks allow";
}

// Shared state of one solve.
class Solver {
 public:
  explicit Solver(const PartitionProblem& problem)
      : problem_(problem),
        costs_(*problem.costs),
        layers_(*problem.layers),
        num_layers_(static_cast<int>(layers_.size())),
        num_stages_(costs_.num_stages()) {
    least_layers_.assign(num_stages_, 1);
    if (num_stages_ == 1) {
      least_layers_[0] = num_layers_;
    } else {
      least_layers_[0] = least_layers_[num_stages_ - 1] = 0;
      // Interleaved: every chunk of every rank holds a layer.
      const int chunks = costs_.setting_before_bubble().schedule.virtual_stages;
      if (chunks > 1)
        for (int& least : least_layers_) least = std::max(least, chunks);
    }
  }

  PartitionResult solve();

 private:
  const PartitionProblem& problem_;
  const StageCostModel& costs_;
  const std::vector<RecomputeRange>& layers_;
  const int num_layers_, num_stages_;
  // m + the bubble's slots, the step's multiple of tau: asked once a
  // partition may fit (a setting that does not fit plays no bubble out).
  double slots_per_tau_ = -1;
  double slots_per_tau() {
    if (slots_per_tau_ < 0)
      slots_per_tau_ = costs_.setting().num_micro_batches + bubble_slots(costs_.setting());
    return slots_per_tau_;
  }
  // Whether a slowest slot of tau and a tail of `tail` cannot beat `bound`:
  // first by m slots alone (no bubble played out), then with the bubble.
  bool cannot_beat(double tau, double tail, double bound) {
    if (bound == kInfinity) return false;
    const int m = costs_.setting_before_bubble().num_micro_batches;
    return m * tau + tail >= bound || slots_per_tau() * tau + tail >= bound;
  }
  std::vector<int> least_layers_;
  long long evaluated_ = 0;

  // ---- shared helpers ----
  RecomputeChoice choose(int s, int first, int count) {
    ++evaluated_;
    return choose_recompute(costs_, s, count_classes(layers_, first, count));
  }
  double tail(int s, int count) const { return costs_.tail_seconds(s, count); }
  std::string explain_does_not_fit();
  PartitionResult finish(int status_code, StagePartition partition, std::string reason);
  StagePartition build(const std::vector<int>& counts);

  // ---- uniform path ----
  int most_layers_by_state(int s) const;
  long long layers_by_state() const;
  bool model_state_leaves_room() const;
  std::string does_not_fit_by_state();
  // A refusal before any partition is tried: the model states, the
  // setting's own bound (prune_before_fit), a stage's least blocks.
  std::optional<PartitionResult> uniform_refusal();
  std::vector<std::vector<double>> uniform_slots_;  // [s][n], NaN = not yet computed
  double uniform_slot(int s, int n) {
    double& slot = uniform_slots_[s][n];
    if (std::isnan(slot)) {
      const RecomputeChoice choice = choose(s, 0, n);
      slot = choice.fits ? choice.slot_seconds : kInfinity;
    }
    return slot;
  }
  struct Bounds {
    bool feasible = false;
    double least_tail = kInfinity;
    std::vector<int> least, most;
  };
  Bounds uniform_check(double tau, double ratio);
  PartitionResult solve_uniform();

  // ---- general path ----
  std::vector<double> general_slots_;  // [(s * (L + 1) + i) * (L + 1) + j]
  std::vector<int> range_pin_;         // [i * (L + 1) + j]: -2 none, -3 conflict, else stage
  bool general_valid(int s, int i, int j) const;
  double general_slot(int s, int i, int j) {
    double& slot =
        general_slots_[(static_cast<size_t>(s) * (num_layers_ + 1) + i) * (num_layers_ + 1) + j];
    if (std::isnan(slot)) {
      const RecomputeChoice choice = choose(s, i, j - i);
      slot = choice.fits ? choice.slot_seconds : kInfinity;
    }
    return slot;
  }
  // Min over partitions with every slot in [low, high] of the max tail; fills
  // the layer counts of an optimal partition.
  double general_least_tail(double low, double high, std::vector<int>* counts);
  double general_least_slowest_slot();
  PartitionResult solve_general();
};

PartitionResult Solver::finish(int status_code, StagePartition partition, std::string reason) {
  PartitionResult result;
  result.status = static_cast<PartitionStatus>(status_code);
  result.partition = std::move(partition);
  result.reason = std::move(reason);
  result.slots_evaluated = evaluated_;
  return result;
}

StagePartition Solver::build(const std::vector<int>& counts) {
  StagePartition partition;
  int first = 0;
  double slowest_slot = 0, slowest_tail = 0;
  for (int s = 0; s < num_stages_; ++s) {
    partition.first_layer.push_back(first);
    partition.num_layers.push_back(counts[s]);
    partition.recompute.push_back(choose(s, first, counts[s]));
    slowest_slot = std::max(slowest_slot, partition.recompute.back().slot_seconds);
    slowest_tail = std::max(slowest_tail, tail(s, counts[s]));
    first += counts[s];
  }
  partition.step_seconds = step_seconds(costs_.setting(), slowest_slot, slowest_tail);
  return partition;
}

std::string Solver::explain_does_not_fit() {
  const PlanSetting& setting = costs_.setting_before_bubble();
  const double limit = costs_.memory_limit_bytes();
  const std::string at = " at micro-batch " + std::to_string(setting.micro_batch_size);
  const std::string limit_text = "; the limit is " + memory_limit_text(costs_.config());
  // A stage that cannot hold even its least share.
  for (int s = 0; s < num_stages_; ++s) {
    const RecomputeChoice choice = choose(s, 0, least_layers_[s]);
    if (!choice.fits)
      return stage_name(s, costs_.head_rank()) + " needs " + gigabytes(choice.memory.total()) +
             " with " + std::to_string(least_layers_[s]) + " blocks" + at + " with " +
             most_recompute_name(choice.counts) + limit_text;
  }
  // Otherwise the blocks do not fit in total: name the stage of an even split
  // furthest over the limit.
  int worst = 0;
  RecomputeChoice worst_choice;
  double worst_excess = -kInfinity;
  int first = 0;
  for (int s = 0; s < num_stages_; ++s) {
    const int count = num_layers_ / num_stages_ + (s < num_layers_ % num_stages_ ? 1 : 0);
    const RecomputeChoice choice = choose(s, first, count);
    first += count;
    if (static_cast<double>(choice.memory.total()) - limit > worst_excess) {
      worst_excess = static_cast<double>(choice.memory.total()) - limit;
      worst = s;
      worst_choice = choice;
    }
  }
  return stage_name(worst, costs_.head_rank()) + " needs " +
         gigabytes(worst_choice.memory.total()) + " with " +
         std::to_string(worst_choice.counts.layers()) + " of the " + std::to_string(num_layers_) +
         " blocks" + at + " with " + most_recompute_name(worst_choice.counts) + limit_text;
}

// ---------------------------------------------------------------- uniform path

Solver::Bounds Solver::uniform_check(double tau, double ratio) {
  Bounds bounds;
  bounds.least.resize(num_stages_);
  bounds.most.resize(num_stages_);
  long long least_total = 0, most_total = 0;
  for (int s = 0; s < num_stages_; ++s) {
    const int lo = least_layers_[s];
    if (!within(uniform_slot(s, lo), tau)) return bounds;
    // Largest n with slot <= tau (slots grow with n).
    int low = lo, high = num_layers_;
    while (low < high) {
      const int mid = low + (high - low + 1) / 2;
      if (within(uniform_slot(s, mid), tau)) {
        low = mid;
      } else {
        high = mid - 1;
      }
    }
    bounds.most[s] = low;
    int least = lo;
    if (ratio > 0 && uniform_slot(s, lo) < ratio * tau) {
      // Smallest n with slot >= ratio x tau.
      int a = lo, b = bounds.most[s] + 1;
      while (a < b) {
        const int mid = a + (b - a) / 2;
        if (uniform_slot(s, mid) >= ratio * tau) {
          b = mid;
        } else {
          a = mid + 1;
        }
      }
      least = a;
      if (least > bounds.most[s]) return bounds;
    }
    bounds.least[s] = least;
    least_total += least;
    most_total += bounds.most[s];
  }
  if (least_total > num_layers_ || most_total < num_layers_) return bounds;
  // Least slowest tail: the K-th smallest tail increment above the minimum counts.
  double slowest = 0;
  for (int s = 0; s < num_stages_; ++s) slowest = std::max(slowest, tail(s, bounds.least[s]));
  using Item = std::pair<double, int>;  // tail, stage
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  std::vector<int> next(bounds.least);
  for (int s = 0; s < num_stages_; ++s)
    if (next[s] < bounds.most[s]) heap.push({tail(s, next[s] + 1), s});
  for (long long k = least_total; k < num_layers_; ++k) {
    const auto [value, s] = heap.top();
    heap.pop();
    slowest = std::max(slowest, value);
    if (++next[s] < bounds.most[s]) heap.push({tail(s, next[s] + 1), s});
  }
  bounds.feasible = true;
  bounds.least_tail = slowest;
  return bounds;
}

// The most blocks stage s can hold by its model state alone (weights,
// gradients, optimizer state: what no recompute choice changes, and the
// least of ZeRO-3's two ways), at least least_layers_[s] - 1: a bound above
// the blocks any fitting choice holds.
int Solver::most_layers_by_state(int s) const {
  const auto state_fits = [&](int n) {
    return costs_.model_state_bytes(s, n) <= costs_.memory_limit_bytes();
  };
  int low = least_layers_[s] - 1, high = num_layers_;  // the last n that fits, or low
  while (low < high) {
    const int mid = low + (high - low + 1) / 2;
    if (state_fits(mid)) {
      low = mid;
    } else {
      high = mid - 1;
    }
  }
  return low;
}

// The blocks the stages' model states alone leave room for: the first, the
// last and the middle ranks' (whose model states are alike).
long long Solver::layers_by_state() const {
  const int p = num_stages_;
  long long most = most_layers_by_state(0);
  if (p > 1) most += most_layers_by_state(p - 1);
  if (p > 2) most += static_cast<long long>(p - 2) * most_layers_by_state(1);
  return most;
}

bool Solver::model_state_leaves_room() const {
  return layers_by_state() >= num_layers_;
}

// Why the model states leave too little room: explain_does_not_fit's
// numbers, except for settings whose rejection nothing explains
// (prune_before_fit), which spare the micro-batches' activations.
std::string Solver::does_not_fit_by_state() {
  if (!problem_.prune_before_fit) return explain_does_not_fit();
  return "the model state alone (weights, gradients, optimizer state) leaves room for " +
         std::to_string(std::max(layers_by_state(), 0LL)) + " of the " +
         std::to_string(num_layers_) + " blocks; the limit is " +
         memory_limit_text(costs_.config());
}

std::optional<PartitionResult> Solver::uniform_refusal() {
  // The model states first: no micro-batch's activations need counting.
  if (!model_state_leaves_room()) return finish(2, {}, does_not_fit_by_state());
  // prune_before_fit: the setting's own bound with its bubble played out
  // (the search's counted a lower bound of it), before the activations.
  if (problem_.prune_before_fit && problem_.prune_at_or_above < kInfinity &&
      partition_step_lower_bound(costs_) >= problem_.prune_at_or_above)
    return finish(1, {}, "cannot beat the plans already found");
  for (int s = 0; s < num_stages_; ++s)
    if (std::isinf(uniform_slot(s, least_layers_[s]))) return finish(2, {}, explain_does_not_fit());
  return std::nullopt;
}

PartitionResult Solver::solve_uniform() {
  const int p = num_stages_, L = num_layers_;
  uniform_slots_.assign(p, std::vector<double>(L + 1, std::nan("")));
  if (std::optional<PartitionResult> refused = uniform_refusal()) return std::move(*refused);

  // Candidate taus: every stage's slot sequence merged in increasing order.
  using Item = std::tuple<double, int, int>;  // slot, stage, layers
  std::priority_queue<Item, std::vector<Item>, std::greater<>> heap;
  double tau0 = 0;
  long long need = L;
  for (int s = 0; s < p; ++s) {
    tau0 = std::max(tau0, uniform_slot(s, least_layers_[s]));
    need -= least_layers_[s];
    if (least_layers_[s] < L)
      heap.push({uniform_slot(s, least_layers_[s] + 1), s, least_layers_[s] + 1});
  }
  auto pop = [&]() {
    const Item item = heap.top();
    heap.pop();
    const auto [value, s, n] = item;
    if (n < L && !std::isinf(value)) heap.push({uniform_slot(s, n + 1), s, n + 1});
    return std::get<0>(item);
  };
  // (prune_before_fit: the least tau grows with every pop, and no partition
  // has a tail below every stage's tail at its least blocks.)
  double least_tail = 0;
  if (problem_.prune_before_fit)
    for (int s = 0; s < p; ++s) least_tail = std::max(least_tail, tail(s, least_layers_[s]));
  const double bound = problem_.prune_at_or_above;
  for (long long k = 0; k < need; ++k) {
    if (heap.empty() || std::isinf(std::get<0>(heap.top())))
      return finish(2, {}, explain_does_not_fit());
    tau0 = std::max(tau0, pop());
    if (problem_.prune_before_fit && cannot_beat(tau0, least_tail, bound))
      return finish(1, {}, "cannot beat the plans already found");
  }

  const double ratio = problem_.min_unbalance_ratio;
  const Bounds unbounded = uniform_check(kInfinity, 0);
  const double least_tail_any = unbounded.least_tail;
  // Under the unbalance filter tau cannot exceed (smallest stage maximum) / ratio.
  double tau_limit = kInfinity;
  if (ratio > 0)
    for (int s = 0; s < p; ++s)
      tau_limit = std::min(tau_limit, uniform_slot(s, unbounded.most[s]) / ratio);

  double best_step = kInfinity;
  std::vector<int> best_counts;
  double tau = tau0;
  while (true) {
    if (slots_per_tau() * tau + least_tail_any >= std::min(best_step, bound) || tau > tau_limit)
      break;
    const Bounds bounds = uniform_check(tau, ratio);
    if (bounds.feasible && slots_per_tau() * tau + bounds.least_tail < best_step) {
      best_step = slots_per_tau() * tau + bounds.least_tail;
      // Fill the least counts up to the tail bound, last stage first.
      std::vector<int> counts(bounds.least);
      int remaining = L;
      for (int n : counts) remaining -= n;
      for (int s = p - 1; s >= 0 && remaining > 0; --s) {
        while (counts[s] < bounds.most[s] && remaining > 0 &&
               tail(s, counts[s] + 1) <= bounds.least_tail)
          ++counts[s], --remaining;
      }
      best_counts = counts;
    }
    // Next larger candidate.
    double next = kInfinity;
    while (!heap.empty()) {
      const double value = pop();
      if (value > tau) {
        next = value;
        break;
      }
    }
    if (std::isinf(next)) break;
    tau = next;
  }
  if (best_counts.empty()) {
    if (bound < kInfinity && slots_per_tau() * tau0 + least_tail_any >= bound)
      return finish(1, {}, "cannot beat the plans already found");
    if (ratio > 0) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "no partition keeps the fastest stage within max_pipeline_unbalance_ratio = "
                    "%g of the slowest",
                    ratio);
      return finish(3, {}, text);
    }
    return finish(1, {}, "cannot beat the plans already found");
  }
  return finish(0, build(best_counts), "");
}

// ---------------------------------------------------------------- general path

bool Solver::general_valid(int s, int i, int j) const {
  const int p = num_stages_, L = num_layers_;
  if (j - i < least_layers_[s]) return false;
  if (s == 0 && i != 0) return false;
  if (s == p - 1 && j != L) return false;
  if (s < p - 1 && problem_.boundary_allowed != nullptr && !(*problem_.boundary_allowed)[j])
    return false;
  const int pin = range_pin_[static_cast<size_t>(i) * (L + 1) + j];
  return pin == -2 || pin == s;
}

double Solver::general_least_slowest_slot() {
  const int p = num_stages_, L = num_layers_;
  std::vector<double> previous(L + 1, kInfinity), current(L + 1);
  previous[0] = 0;
  for (int s = 0; s < p; ++s) {
    std::fill(current.begin(), current.end(), kInfinity);
    for (int j = 0; j <= L; ++j)
      for (int i = 0; i <= j; ++i) {
        if (std::isinf(previous[i]) || !general_valid(s, i, j)) continue;
        current[j] = std::min(current[j], std::max(previous[i], general_slot(s, i, j)));
      }
    std::swap(previous, current);
  }
  return previous[L];
}

double Solver::general_least_tail(double low, double high, std::vector<int>* counts) {
  const int p = num_stages_, L = num_layers_;
  std::vector<std::vector<double>> best(p + 1, std::vector<double>(L + 1, kInfinity));
  std::vector<std::vector<int>> from(p + 1, std::vector<int>(L + 1, -1));
  best[0][0] = 0;
  for (int s = 0; s < p; ++s)
    for (int j = 0; j <= L; ++j)
      for (int i = 0; i <= j; ++i) {
        if (std::isinf(best[s][i]) || !general_valid(s, i, j)) continue;
        const double slot = general_slot(s, i, j);
        if (!within(slot, high) || slot < low) continue;
        const double value = std::max(best[s][i], tail(s, j - i));
        if (value < best[s + 1][j]) best[s + 1][j] = value, from[s + 1][j] = i;
      }
  if (counts != nullptr && !std::isinf(best[p][L])) {
    counts->assign(p, 0);
    int j = L;
    for (int s = p; s > 0; --s) {
      const int i = from[s][j];
      (*counts)[s - 1] = j - i;
      j = i;
    }
  }
  return best[p][L];
}

PartitionResult Solver::solve_general() {
  const int p = num_stages_, L = num_layers_;
  general_slots_.assign(static_cast<size_t>(p) * (L + 1) * (L + 1), std::nan(""));
  std::vector<int> pin_of_layer(L, -2);
  if (problem_.pinned_layers != nullptr)
    for (const auto& [layer, stage] : *problem_.pinned_layers) {
      const int resolved = stage < 0 ? p - 1 : stage;
      if (resolved >= p)
        return finish(4, {},
                      "block " + std::to_string(layer) + " is pinned to stage " +
                          std::to_string(stage) + ", but the pipeline has " + std::to_string(p) +
                          " stages");
      pin_of_layer[layer] = resolved;
    }
  range_pin_.assign(static_cast<size_t>(L + 1) * (L + 1), -2);
  for (int i = 0; i <= L; ++i) {
    int pin = -2;
    for (int j = i; j <= L; ++j) {
      if (j > i && pin_of_layer[j - 1] != -2)
        pin = pin == -2 || pin == pin_of_layer[j - 1] ? pin_of_layer[j - 1] : -3;
      range_pin_[static_cast<size_t>(i) * (L + 1) + j] = pin;
    }
  }
  const double tau0 = general_least_slowest_slot();
  if (std::isinf(tau0)) {
    // Memory, or no boundaries at all? Try without memory.
    bool any_partition = false;
    {
      std::vector<char> reach(L + 1, 0), next(L + 1);
      reach[0] = 1;
      for (int s = 0; s < p; ++s) {
        std::fill(next.begin(), next.end(), 0);
        for (int j = 0; j <= L; ++j)
          for (int i = 0; i <= j; ++i)
            if (reach[i] && general_valid(s, i, j)) next[j] = 1;
        reach.swap(next);
      }
      any_partition = reach[L];
    }
    if (!any_partition)
      return finish(4, {},
                    "no split of the " + std::to_string(L) + " blocks into " + std::to_string(p) +
                        " stages satisfies pipeline_pivots and the partition constraints");
    return finish(2, {}, explain_does_not_fit());
  }
  const double least_tail_any = general_least_tail(-kInfinity, kInfinity, nullptr);
  std::vector<double> candidates;
  for (int s = 0; s < p; ++s)
    for (int i = 0; i <= L; ++i)
      for (int j = i; j <= L; ++j)
        if (general_valid(s, i, j)) {
          const double slot = general_slot(s, i, j);
          if (!std::isinf(slot) && slot >= tau0) candidates.push_back(slot);
        }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  const double ratio = problem_.min_unbalance_ratio;
  double best_step = kInfinity;
  std::vector<int> best_counts;
  for (double tau : candidates) {
    if (slots_per_tau() * tau + least_tail_any >= std::min(best_step, problem_.prune_at_or_above))
      break;
    std::vector<int> counts;
    const double least_tail = general_least_tail(ratio * tau, tau, &counts);
    if (!std::isinf(least_tail) && slots_per_tau() * tau + least_tail < best_step) {
      best_step = slots_per_tau() * tau + least_tail;
      best_counts = counts;
    }
  }
  if (best_counts.empty()) {
    if (slots_per_tau() * tau0 + least_tail_any >= problem_.prune_at_or_above)
      return finish(1, {}, "cannot beat the plans already found");
    char text[160];
    std::snprintf(text, sizeof(text),
                  "no partition keeps the fastest stage within max_pipeline_unbalance_ratio = "
                  "%g of the slowest",
                  ratio);
    return finish(3, {}, text);
  }
  return finish(0, build(best_counts), "");
}

PartitionResult Solver::solve() {
  bool uniform = !problem_.force_general_path;
  for (const RecomputeRange& range : layers_) uniform &= range == layers_.front();
  if (problem_.boundary_allowed != nullptr)
    for (char allowed : *problem_.boundary_allowed) uniform &= allowed != 0;
  if (problem_.pinned_layers != nullptr && !problem_.pinned_layers->empty()) uniform = false;
  return uniform ? solve_uniform() : solve_general();
}

}  // namespace

PartitionResult solve_partition(const PartitionProblem& problem) {
  Solver solver(problem);
  return solver.solve();
}

double partition_step_lower_bound(const StageCostModel& costs) {
  const int p = costs.num_stages();
  const int L = costs.config().model.num_layers;
  // (ZeRO-3: parameters kept gathered, the faster slot.)
  const RecomputeCounts none{0, 0, 0, true}, one{1, 0, 0, true};
  // Sum of all slots with no recompute: the blocks plus each stage's fixed part.
  double total = L * (costs.slot_seconds(0, one) - costs.slot_seconds(0, none));
  for (int s = 0; s < p; ++s) total += costs.slot_seconds(s, none);
  const double slowest_slot = std::max(total / p, costs.slot_seconds(p - 1, none));
  double slowest_tail = costs.tail_seconds(0, p == 1 ? L : 0);
  if (p > 1) slowest_tail = std::max(slowest_tail, costs.tail_seconds(p - 1, 0));
  return step_seconds(costs.setting(), slowest_slot, slowest_tail);
}

}  // namespace paraplan
