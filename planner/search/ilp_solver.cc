// ilp_solver.cc: the stage-partition ILP built and solved with CBC's C
// interface (formulation in ilp_solver.h).
#include "planner/search/ilp_solver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "planner/search/cbc_library.h"

namespace paraplan {
namespace {

thread_local IlpSize last_size;

struct Column {
  int stage = 0, first = 0, end = 0;
  RecomputeChoice choice;
  double tail = 0;
  // The segment's fastest fitting slot: max_pipeline_unbalance_ratio judges a
  // partition by it (as the dynamic program does), so slowing a stage down with
  // extra recompute never makes an unbalanced partition pass.
  double fastest_slot = 0;
};

struct ModelDeleter {
  void operator()(Cbc_Model* model) const { cbc_library().Cbc_deleteModel(model); }
};

// Pins as a stage per block (-2 none); impossible when one names a stage
// past the last.
struct LayerPins {
  std::vector<int> stage_of_layer;
  bool possible = true;
};

LayerPins pins_of(const PartitionProblem& problem, int p, int L) {
  LayerPins pins{std::vector<int>(L, -2), true};
  if (problem.pinned_layers != nullptr)
    for (const auto& [layer, stage] : *problem.pinned_layers) {
      const int resolved = stage < 0 ? p - 1 : stage;
      if (resolved >= p) pins.possible = false;
      pins.stage_of_layer[layer] = resolved;
    }
  return pins;
}

struct ColumnSet {
  std::vector<Column> columns;
  double largest_slot = 0;
};

// Columns: every valid (stage, range, fitting recompute option).
ColumnSet enumerate_columns(const PartitionProblem& problem, const LayerPins& pins) {
  const StageCostModel& costs = *problem.costs;
  const std::vector<RecomputeRange>& layers = *problem.layers;
  const int p = costs.num_stages(), L = static_cast<int>(layers.size());
  // Interleaved: every chunk of every rank holds a layer.
  const int chunks =
      costs.setting().schedule.virtual_stages > 1 ? costs.setting().schedule.virtual_stages : 0;
  ColumnSet set;
  for (int s = 0; s < p && pins.possible; ++s) {
    const int least = p == 1                   ? L
                      : (s == 0 || s == p - 1) ? std::max(0, chunks)
                                               : std::max(1, chunks);
    for (int i = 0; i <= L; ++i) {
      if (s == 0 && i != 0) break;
      for (int j = i + least; j <= L; ++j) {
        if (s == p - 1 && j != L) continue;
        if (s < p - 1 && problem.boundary_allowed != nullptr && !(*problem.boundary_allowed)[j])
          continue;
        bool pinned_elsewhere = false;
        for (int k = i; k < j; ++k)
          pinned_elsewhere |= pins.stage_of_layer[k] != -2 && pins.stage_of_layer[k] != s;
        if (pinned_elsewhere) continue;
        const double tail = costs.tail_seconds(s, j - i);
        const std::vector<RecomputeChoice> options =
            fitting_recompute_options(costs, s, count_classes(layers, i, j - i));
        double fastest = std::numeric_limits<double>::infinity();
        for (const RecomputeChoice& choice : options)
          fastest = std::min(fastest, choice.slot_seconds);
        for (const RecomputeChoice& choice : options) {
          set.columns.push_back({s, i, j, choice, tail, fastest});
          set.largest_slot = std::max(set.largest_slot, choice.slot_seconds);
        }
      }
    }
  }
  return set;
}

// The dynamic program explains which constraint binds; it must agree.
PartitionResult explain_infeasible(const PartitionProblem& problem) {
  PartitionProblem unpruned = problem;
  unpruned.prune_at_or_above = std::numeric_limits<double>::infinity();
  PartitionResult explained = solve_partition(unpruned);
  if (explained.status == PartitionStatus::Found)
    throw std::logic_error("ILP infeasible but the dynamic program found a partition");
  return explained;
}

// The CBC model: a 0/1 variable per column, then T (the slowest slot), U
// (the slowest tail) and Tmin (the fastest stage's fastest slot), scaled so
// the largest slot is 1.
struct PartitionIlp {
  const std::vector<Column>& columns;
  int p, L, n, T, U, Tmin;
  double scale;
  std::unique_ptr<Cbc_Model, ModelDeleter> model{cbc_library().Cbc_newModel()};
  int rows = 0;

  void add_row(const std::vector<int>& cols, const std::vector<double>& coefs, char sense,
               double rhs) {
    cbc_library().Cbc_addRow(model.get(), "", static_cast<int>(cols.size()), cols.data(),
                             coefs.data(), sense, rhs);
    ++rows;
  }
};

void add_variables(PartitionIlp& ilp, const StageCostModel& costs) {
  cbc_library().Cbc_setLogLevel(ilp.model.get(), 0);
  const double slots_per_tau = costs.setting().num_micro_batches + bubble_slots(costs.setting());
  for (int c = 0; c < ilp.n; ++c)
    cbc_library().Cbc_addCol(ilp.model.get(), "", 0, 1, 0, 1, 0, nullptr, nullptr);
  cbc_library().Cbc_addCol(ilp.model.get(), "T", 0, 1e30, slots_per_tau, 0, 0, nullptr, nullptr);
  cbc_library().Cbc_addCol(ilp.model.get(), "U", 0, 1e30, 1, 0, 0, nullptr, nullptr);
  cbc_library().Cbc_addCol(ilp.model.get(), "Tmin", 0, 1e30, 0, 0, 0, nullptr, nullptr);
}

// Stage s's rows; false when no column can fill it.
bool add_stage_rows(PartitionIlp& ilp, int s) {
  const std::vector<Column>& columns = ilp.columns;
  const double tail_scale = ilp.scale;
  std::vector<int> one_cols, slot_cols = {ilp.T}, tail_cols = {ilp.U}, min_cols = {ilp.Tmin};
  std::vector<double> one_coefs, slot_coefs = {1}, tail_coefs = {1}, min_coefs = {1};
  for (int c = 0; c < ilp.n; ++c) {
    if (columns[c].stage != s) continue;
    one_cols.push_back(c), one_coefs.push_back(1);
    slot_cols.push_back(c), slot_coefs.push_back(-columns[c].choice.slot_seconds * ilp.scale);
    tail_cols.push_back(c), tail_coefs.push_back(-columns[c].tail * tail_scale);
    min_cols.push_back(c), min_coefs.push_back(-columns[c].fastest_slot * ilp.scale);
  }
  if (one_cols.empty()) return false;
  ilp.add_row(one_cols, one_coefs, 'E', 1);    // one column per stage
  ilp.add_row(slot_cols, slot_coefs, 'G', 0);  // T >= slot of s
  ilp.add_row(tail_cols, tail_coefs, 'G', 0);  // U >= tail of s
  ilp.add_row(min_cols, min_coefs, 'L', 0);    // Tmin <= slot of s
  if (s + 1 < ilp.p)
    for (int k = 0; k <= ilp.L; ++k) {  // stage s ends at k <=> stage s + 1 begins at k
      std::vector<int> cols;
      std::vector<double> coefs;
      for (int c = 0; c < ilp.n; ++c) {
        if (columns[c].stage == s && columns[c].end == k) cols.push_back(c), coefs.push_back(1);
        if (columns[c].stage == s + 1 && columns[c].first == k)
          cols.push_back(c), coefs.push_back(-1);
      }
      if (!cols.empty()) ilp.add_row(cols, coefs, 'E', 0);
    }
  return true;
}

void solve_exclusively(Cbc_Model* model) {
  // CBC's driver keeps global state: one solve at a time (nproc threads share it).
  static std::mutex cbc_mutex;
  std::lock_guard<std::mutex> lock(cbc_mutex);
  cbc_library().Cbc_solve(model);
}

// The column the solution picks for each stage.
std::vector<int> chosen_columns(const PartitionIlp& ilp) {
  const double* solution = cbc_library().Cbc_getColSolution(ilp.model.get());
  std::vector<int> chosen(ilp.p, -1);
  for (int c = 0; c < ilp.n; ++c)
    if (solution[c] > 0.5) chosen[ilp.columns[c].stage] = c;
  return chosen;
}

PartitionResult partition_of(const StageCostModel& costs, const std::vector<Column>& columns,
                             const std::vector<int>& chosen, double slowest) {
  PartitionResult result;
  result.status = PartitionStatus::Found;
  double slowest_tail = 0;
  for (size_t s = 0; s < chosen.size(); ++s) {
    const Column& column = columns[chosen[s]];
    result.partition.first_layer.push_back(column.first);
    result.partition.num_layers.push_back(column.end - column.first);
    result.partition.recompute.push_back(column.choice);
    slowest_tail = std::max(slowest_tail, column.tail);
  }
  result.partition.step_seconds = step_seconds(costs.setting(), slowest, slowest_tail);
  result.slots_evaluated = static_cast<int>(columns.size());
  return result;
}

}  // namespace

IlpSize last_ilp_size() {
  return last_size;
}

PartitionResult solve_partition_ilp(const PartitionProblem& problem) {
  const StageCostModel& costs = *problem.costs;
  const int p = costs.num_stages(), L = static_cast<int>(problem.layers->size());
  const ColumnSet set = enumerate_columns(problem, pins_of(problem, p, L));
  const std::vector<Column>& columns = set.columns;
  if (columns.empty()) return explain_infeasible(problem);

  const int n = static_cast<int>(columns.size());
  PartitionIlp ilp{.columns = columns,
                   .p = p,
                   .L = L,
                   .n = n,
                   .T = n,
                   .U = n + 1,
                   .Tmin = n + 2,
                   .scale = 1.0 / std::max(set.largest_slot, 1e-300)};
  add_variables(ilp, costs);
  for (int s = 0; s < p; ++s)
    if (!add_stage_rows(ilp, s)) return explain_infeasible(problem);
  if (problem.min_unbalance_ratio > 0)
    ilp.add_row({ilp.Tmin, ilp.T}, {1, -problem.min_unbalance_ratio}, 'G', 0);
  cbc_library().Cbc_setAllowableGap(ilp.model.get(), 0);
  cbc_library().Cbc_setAllowableFractionGap(ilp.model.get(), 0);
  // The solver checks Tmin >= r T within its tolerance; the model's check is
  // exact, so a solution violating it is cut off and the ILP solved again.
  for (int round = 0;; ++round) {
    last_size = {n + 3, ilp.rows};
    solve_exclusively(ilp.model.get());
    if (!cbc_library().Cbc_isProvenOptimal(ilp.model.get())) {
      if (cbc_library().Cbc_isProvenInfeasible(ilp.model.get())) return explain_infeasible(problem);
      throw std::runtime_error("CBC did not prove the partition ILP optimal (status " +
                               std::to_string(cbc_library().Cbc_status(ilp.model.get())) + ")");
    }
    const std::vector<int> chosen = chosen_columns(ilp);
    double slowest = 0, fastest = std::numeric_limits<double>::infinity(), slowest_fastest = 0;
    for (int s = 0; s < p; ++s) {
      if (chosen[s] < 0) throw std::logic_error("ILP solution leaves a stage empty");
      slowest = std::max(slowest, columns[chosen[s]].choice.slot_seconds);
      slowest_fastest = std::max(slowest_fastest, columns[chosen[s]].fastest_slot);
      fastest = std::min(fastest, columns[chosen[s]].fastest_slot);
    }
    if (p > 1 && fastest < problem.min_unbalance_ratio * slowest_fastest && round < 1000) {
      ilp.add_row(chosen, std::vector<double>(p, 1.0), 'L', p - 1);
      continue;
    }
    return partition_of(costs, columns, chosen, slowest);
  }
}

}  // namespace paraplan
