// plan_lowering.h: plans written before schema version 8 with Rendezvous
// transfers (1F1B and GPipe, and every plan before v5), lowered at load to
// the one transfer model since v8, Posted (plan.fbs, Transfers).
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

}  // namespace paraplan
