// schedule_kinds.h: what each pipeline schedule kind is, one row per kind,
// for every folder that reads plans: its name (job files, reports, inspect),
// how many model chunks a pipeline rank holds and in which layout, and
// whether it splits the backward into input and weight gradients. The
// planner's catalogue (planner/schedule/schedule_kinds.h) adds how a kind is
// generated, bounded and costed; nothing else names a kind.
#pragma once

#include <vector>

#include "plan_generated.h"

namespace paraplan {

// Model chunks per pipeline rank.
enum class ChunkRule {
  kOne,      // one chunk: 1F1B, GPipe, ZB-H1
  kChosen,   // v >= 2 chunks, round robin (Megatron's interleaving); v is searched or set
  kTwoInAV,  // two chunks in a V: chunk 1 runs backwards (ZB-V, DualPipe-V)
};

struct ScheduleKindTraits {
  schema::ScheduleKind kind;
  const char* name;  // "1f1b", "gpipe", "interleaved", "zb-h1", "zb-v", "dualpipe-v"
  ChunkRule chunks;
  bool splits_backward;  // BackwardInput and BackwardWeight instead of Backward
  bool v_shaped() const { return chunks == ChunkRule::kTwoInAV; }
  bool chunked() const { return chunks != ChunkRule::kOne; }
};

// Whether `kind` is one of the enum's kinds (a corrupt plan's may not be).
bool is_schedule_kind(schema::ScheduleKind kind);

// The row of a kind; std::invalid_argument for a value outside the enum.
const ScheduleKindTraits& schedule_kind_traits(schema::ScheduleKind kind);

// Every kind's row, in the enum's order.
const std::vector<ScheduleKindTraits>& every_schedule_kind();

}  // namespace paraplan
