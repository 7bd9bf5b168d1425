// ilp_solver.h: solver = 'ilp', the stage-partition problem of
// stage_partition.h as an integer linear program solved exactly by CBC
// (COIN-OR branch and cut, through its C interface).
//
// Formulation (L blocks, p stages). A column is one complete stage: stage s
// holds blocks [i, j) with recompute option c, where the options are every
// non-dominated assignment that fits the stage's memory limit
// (fitting_recompute_options: for each count of fully recomputed blocks, the
// fewest selective ones), so the memory limit is enforced column by column.
//   x[s,i,j,c] in {0,1}
//   sum_{i,j,c} x[s,i,j,c] = 1                       each stage takes one column
//   sum_{i,c} x[s,i,k,c] = sum_{j,c} x[s+1,k,j,c]    stage s+1 begins where s ends
//   (stage 0 columns begin at 0, last-stage columns end at L; pivots and pins
//    remove columns)
//   T >= sum_{cols of s} slot * x                    slowest slot
//   U >= sum_{cols of s} tail * x                    slowest tail
//   Tmin <= sum_{cols of s} fastest slot * x,        max_pipeline_unbalance_ratio r,
//   Tmin >= r T                                      judged on fastest fitting slots
//   minimise (m + p - 1) T + U                       the step time
// Times are scaled to O(1) for the solver's tolerances and the gap is set to 0;
// the chosen columns are re-estimated with the cost model, so the reported step
// is the model's, not the solver's. The same objective and constraints as the
// dynamic program: the two agree (tested). When the ILP is infeasible, the
// dynamic program names the binding constraint. A solution that meets
// Tmin >= r T only within the solver's tolerance is cut off (a no-good row on
// its columns) and the ILP solved again, so the ratio holds exactly.
#pragma once

#include "planner/search/stage_partition.h"

namespace paraplan {

PartitionResult solve_partition_ilp(const PartitionProblem& problem);

// Columns and rows of the last ILP built on this thread (for tests and reports).
struct IlpSize {
  int columns = 0, rows = 0;
};
IlpSize last_ilp_size();

}  // namespace paraplan
