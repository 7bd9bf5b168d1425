// plan_lowering.h: older plans lowered at load to what the planner writes
// now, so every reader (the runtime, inspect, the verifier) sees one form:
// plans before schema version 8 with Rendezvous transfers (1F1B and GPipe,
// and every plan before v5) to the one transfer model since v8, Posted
// (plan.fbs, Transfers); and ZeRO-2 and 3 plans before version 10 to
// streams with their unit ops (below).
//
// Lowered, not refused: the two combined ops (SendActivationRecvGradient,
// SendGradientRecvActivation, retired values 7 and 8) become their send then
// their receive at the same place in the stream, and the schedule's
// transfers Posted. A stream that ran under Rendezvous runs under Posted
// (the posted model only waits less: a send no longer waits for its
// receive), in the same order, holding the same activation slots, so a
// user's plans and the runs resumed from them stay valid. The arithmetic is
// the same; only when transfers complete changes.
#pragma once

#include <cstdint>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

// The retired combined ops' values in plans before v8.
inline constexpr int kRetiredSendActivationRecvGradient = 7;
inline constexpr int kRetiredSendGradientRecvActivation = 8;

// Whether a verified plan is one lower_rendezvous_plan rewrites: schema
// version below kPostedOnlyPlanSchemaVersion with Rendezvous transfers.
bool has_rendezvous_transfers_to_lower(const schema::Plan& plan);

// The plan's bytes with its schedule lowered as above (every other field as
// it was, the header's schema version included). Call only where
// has_rendezvous_transfers_to_lower.
std::vector<uint8_t> lower_rendezvous_plan(const schema::Plan& plan);

// Whether a plan the validator accepted is one add_plan_zero_unit_ops
// rewrites: ZeRO-2 or 3 written before kZeroUnitOpsPlanSchemaVersion, its
// streams without unit ops.
bool has_zero_unit_ops_to_add(const schema::Plan& plan);

// The plan's bytes with each pipeline rank's stream given the unit ops the
// planner writes now (zero_units.h's add_zero_unit_ops over rank_units, the
// rank's own keep_parameters_gathered); every other field as it was, the
// schema version included. The same arithmetic, bitwise: the runtime ran
// these ops for such plans before they were written in them.
std::vector<uint8_t> add_plan_zero_unit_ops(const schema::Plan& plan);

}  // namespace paraplan
