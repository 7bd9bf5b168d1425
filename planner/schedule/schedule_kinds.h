// schedule_kinds.h: the schedule catalogue, one row per pipeline schedule
// kind holding everything the planner asks of a kind. The plan-level part
// (name, chunk rule, V, split backward) is schema/schedule_kinds.h, which
// plans and the runtime read too; this row adds the fewest micro-batches the
// kind runs, its generator, its in-flight and weight-pending bounds and its
// bubble. Cost, search, job parsing and reports read the rows, and nothing
// else in the planner names a kind: a new kind is its enum value in
// plan.fbs, a row in each of the two files and its generator.
#pragma once

#include <string_view>
#include <vector>

#include "planner/schedule/schedule.h"
#include "schema/schedule_kinds.h"

namespace paraplan {

struct ScheduleKindRow {
  ScheduleKindTraits traits;
  // The kind runs m >= fewest_micro_batches_per_stage x p micro-batches on
  // p stages (0: any m).
  int fewest_micro_batches_per_stage;
  // Whether the search tries it where no other kind applies (one pipeline
  // stage, inference): 1F1B only.
  bool runs_every_setting;
  // Its instruction streams: p ranks, m micro-batches, v chunks per rank.
  PipelineSchedule (*generate)(int p, int m, int v);
  // The most micro-batches a rank holds between a forward and its backward:
  // the verifier's bound (schedule_verify.cc).
  int (*in_flight_bound)(int p, int m, int v, int rank);
  // What the runtime allocates on a rank, for the memory model: micro-batch
  // slots (chunks summed), and micro-batches waiting for their weight
  // gradient (0 without a split backward).
  int (*slots_held)(int p, int m, int v, int rank);
  int (*weight_pending)(int p, int m, int rank);
  // Its bubble in slots of F + B before the split of the backward is known
  // (weight_fraction: W's share of a slot); the played-out figure replaces it.
  double (*closed_form_bubble)(int p, int v, double weight_fraction);
  // Its bubble where a closed form is exact (B = backward_ratio x F,
  // B_in = input, W = weight); negative: play it out.
  double (*exact_bubble)(int p, int m, int v, double backward_ratio, double input, double weight);
  // The fewest micro-batches whose played-out bubble is m's: the steady
  // state adds none, so the shortest such schedule plays it out.
  int (*bubble_micro_batches)(int p, int m);
};

// The row of a kind; std::invalid_argument for a value outside the enum.
const ScheduleKindRow& schedule_kind_row(schema::ScheduleKind kind);

// Every row, in the order the search tries the kinds.
const std::vector<ScheduleKindRow>& schedule_catalogue();

// The kind the search tries where no other applies (runs_every_setting: 1F1B).
schema::ScheduleKind default_schedule_kind();

// The row named `name` ("zb-v"), or nullptr.
const ScheduleKindRow* schedule_kind_named(std::string_view name);

// Both counts the memory model reads of every rank of a split-backward kind
// at once (ranks in order; the search takes a setting's p ranks in one
// look-up): slots_held and weight_pending.
struct ZeroBubbleCounts {
  int slots = 0, weight_pending = 0;
};
const std::vector<ZeroBubbleCounts>& zero_bubble_counts(schema::ScheduleKind kind, int num_stages,
                                                        int num_micro_batches);

}  // namespace paraplan
