// recompute_choice.cc: the exact (x, y) upgrade search of recompute_choice.h.
#include "planner/search/recompute_choice.h"

#include <algorithm>

namespace paraplan {

using schema::RecomputeMode;

namespace {
constexpr int N = 0, S = 1, F = 2;
}  // namespace

void RecomputeClassCounts::add(const RecomputeRange& range, int layers) {
  count[static_cast<int>(range.lowest)][static_cast<int>(range.highest)] += layers;
}

int RecomputeClassCounts::layers() const {
  int total = 0;
  for (const auto& row : count)
    for (int value : row) total += value;
  return total;
}

RecomputeClassCounts count_classes(const std::vector<RecomputeRange>& layers, int first,
                                   int count) {
  RecomputeClassCounts classes;
  for (int i = first; i < first + count; ++i) classes.add(layers[i]);
  return classes;
}

namespace {

// The fastest fitting (x, y) with the rank's parameters kept gathered or not.
RecomputeChoice choose_with(const StageCostModel& model, int pipeline_rank,
                            const RecomputeClassCounts& classes, bool keep_gathered) {
  const auto& c = classes.count;
  const int can_select = c[N][S] + c[N][F];  // candidates for x
  auto counts_of = [&](int x, int y) {
    RecomputeCounts counts;
    counts.keep_parameters_gathered = keep_gathered;
    counts.full = c[F][F] + y;
    counts.selective = c[S][S] + c[S][F] + x - y;
    counts.none = c[N][N] + c[N][S] + c[N][F] - x;
    return counts;
  };
  // Largest y possible with x upgrades: [S, F] layers plus the [N, F] ones x moved.
  auto max_full = [&](int x) { return c[S][F] + std::min(x, c[N][F]); };
  // The stage's block count is fixed here, so only its activations change
  // with (x, y): the rest of its memory is worked out once.
  const MemoryBreakdown at_none = model.memory(pipeline_rank, counts_of(0, 0));
  const uint64_t all_but_activations = at_none.total() - at_none.activations;
  const StageCostModel::RankActivations activations = model.activations_of(pipeline_rank);
  auto fits = [&](int x, int y) {
    return model.fits(all_but_activations + activations(counts_of(x, y)));
  };

  RecomputeChoice best;
  // The walk below skips every y at which even every x upgrade does not
  // fit: start at the least y that fits, found by bisection from y = 1 on
  // (from there memory falls with y; the first full recompute also brings
  // its rebuild scratch, which can outweigh what it saves: y = 0 alone).
  int first_y = 0;
  if (!fits(can_select, 0)) first_y = 1;
  for (int high = c[S][F] + c[N][F]; first_y > 0 && first_y < high;) {
    const int mid = first_y + (high - first_y) / 2;
    if (fits(can_select, mid)) {
      high = mid;
    } else {
      first_y = mid + 1;
    }
  }
  for (int y = first_y; y <= c[S][F] + c[N][F]; ++y) {
    const int least_x = std::max(0, y - c[S][F]);  // y needs min(x, NF) >= y - SF
    if (least_x > can_select) break;
    if (best.fits && model.slot_seconds(pipeline_rank, counts_of(least_x, y)) >= best.slot_seconds)
      break;                               // slot grows with x and y: nothing further can be faster
    if (!fits(can_select, y)) continue;    // even every x upgrade is not enough at this y
    int low = least_x, high = can_select;  // fits(high)
    while (low < high) {
      const int mid = low + (high - low) / 2;
      if (fits(mid, y)) {
        high = mid;
      } else {
        low = mid + 1;
      }
    }
    const double slot = model.slot_seconds(pipeline_rank, counts_of(low, y));
    if (!best.fits || slot < best.slot_seconds) {
      best.fits = true;
      best.to_selective = low;
      best.to_full = y;
      best.slot_seconds = slot;
    }
  }
  if (!best.fits) {  // report the most recompute possible
    best.to_selective = can_select;
    best.to_full = max_full(can_select);
  }
  best.counts = counts_of(best.to_selective, best.to_full);
  best.memory = at_none;
  best.memory.activations = activations(best.counts);
  best.slot_seconds = model.slot_seconds(pipeline_rank, best.counts);
  return best;
}

}  // namespace

RecomputeChoice choose_recompute(const StageCostModel& model, int pipeline_rank,
                                 const RecomputeClassCounts& classes) {
  RecomputeChoice freed = choose_with(model, pipeline_rank, classes, false);
  if (!model.gathers_parameters(pipeline_rank, classes.layers())) return freed;
  // ZeRO-3: keeping the parameters gathered takes a slot per unit and saves
  // gathers that do not depend on the recompute, so where it fits with the
  // recompute chosen freeing them it is the fastest kept choice too (every
  // kept choice that fits also fits freed).
  if (freed.fits) {
    RecomputeChoice kept = freed;
    kept.counts.keep_parameters_gathered = true;
    kept.memory = model.memory(pipeline_rank, kept.counts);
    if (model.fits(kept.memory)) {
      kept.slot_seconds = model.slot_seconds(pipeline_rank, kept.counts);
      return kept;
    }
  }
  // Otherwise kept needs more recompute, if any fits (the most recompute
  // holds the least): the faster of the two.
  const auto& c = classes.count;
  RecomputeCounts most;
  most.keep_parameters_gathered = true;
  most.full = c[F][F] + c[S][F] + c[N][F];
  most.selective = c[S][S] + c[N][S];
  most.none = c[N][N];
  if (!model.fits(model.memory(pipeline_rank, most))) return freed;
  RecomputeChoice kept = choose_with(model, pipeline_rank, classes, true);
  return kept.fits && (!freed.fits || kept.slot_seconds < freed.slot_seconds) ? kept : freed;
}

std::vector<RecomputeChoice> fitting_recompute_options(const StageCostModel& model,
                                                       int pipeline_rank,
                                                       const RecomputeClassCounts& classes) {
  const auto& c = classes.count;
  const int can_select = c[N][S] + c[N][F];
  std::vector<RecomputeChoice> options;
  // ZeRO-3: each (x, y) freeing the parameters or keeping them gathered.
  const bool keeping_is_a_choice = model.gathers_parameters(pipeline_rank, classes.layers());
  for (const bool keep : {false, true}) {
    if (keep && !keeping_is_a_choice) break;
    for (int y = 0; y <= c[S][F] + c[N][F]; ++y) {
      const int least_x = std::max(0, y - c[S][F]);
      if (least_x > can_select) break;
      for (int x = least_x; x <= can_select; ++x) {
        RecomputeChoice choice;
        choice.to_selective = x;
        choice.to_full = y;
        choice.counts.keep_parameters_gathered = keep;
        choice.counts.full = c[F][F] + y;
        choice.counts.selective = c[S][S] + c[S][F] + x - y;
        choice.counts.none = c[N][N] + c[N][S] + c[N][F] - x;
        choice.memory = model.memory(pipeline_rank, choice.counts);
        if (!model.fits(choice.memory)) continue;
        choice.fits = true;
        choice.slot_seconds = model.slot_seconds(pipeline_rank, choice.counts);
        options.push_back(choice);
        break;  // the least fitting x at this y
      }
    }
  }
  return options;
}

std::vector<RecomputeMode> assign_recompute(const std::vector<RecomputeRange>& layers,
                                            int to_selective, int to_full) {
  std::vector<RecomputeMode> modes(layers.size());
  std::vector<size_t> full_candidates_first, full_candidates_moved;
  // x: [None, Full] layers first, then [None, Selective].
  int remaining_selective = to_selective;
  for (int pass = 0; pass < 2; ++pass) {
    const RecomputeMode highest = pass == 0 ? RecomputeMode::Full : RecomputeMode::Selective;
    for (size_t i = 0; i < layers.size(); ++i) {
      if (layers[i].lowest != RecomputeMode::None || layers[i].highest != highest) continue;
      if (remaining_selective > 0) {
        modes[i] = RecomputeMode::Selective;
        --remaining_selective;
        if (pass == 0) full_candidates_moved.push_back(i);
      }
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const RecomputeRange& range = layers[i];
    if (range.lowest == RecomputeMode::None) {
      if (modes[i] != RecomputeMode::Selective) modes[i] = RecomputeMode::None;
    } else {
      modes[i] = range.lowest;
      if (range.lowest == RecomputeMode::Selective && range.highest == RecomputeMode::Full)
        full_candidates_first.push_back(i);
    }
  }
  // y: [Selective, Full] layers first, then the [None, Full] layers x moved.
  int remaining_full = to_full;
  for (const auto* candidates : {&full_candidates_first, &full_candidates_moved})
    for (size_t i : *candidates)
      if (remaining_full > 0) modes[i] = RecomputeMode::Full, --remaining_full;
  return modes;
}

}  // namespace paraplan
