// transfer_order.h: a plan's pipeline transfers checked pairwise before any
// of them runs. For every two pipeline ranks, the messages one sends the
// other (activations and gradients, of which virtual stage and micro-batch),
// in the order its instruction stream posts them, must be the messages the
// other receives from it, in the order its stream posts those receives.
// Then matching by posting order, which is all NCCL has (ncclSend/ncclRecv
// carry no tag), pairs every buffer as matching by tag does under MPI. The
// planner's verifier guarantees this for the plans it writes; a plan edited
// by hand may not, and under NCCL would swap two same-sized messages
// silently (wrong losses, no error), so every transport refuses it.
// Then the streams are played together (schema/stream_check.h, question 3):
// streams that pair but wait on each other, as a hand-written GPipe order of
// two chunks does (each rank's one input-gradient buffer waits for a send
// the other receives only later), would hang until the collective timeout
// under NCCL or under MPI above its eager limit, so they are refused too.
#pragma once

#include <string>

#include "schema/plan_io.h"

namespace paraplan {

// Throws std::invalid_argument naming plan_name, both ranks, the instructions
// and the first pair of messages that would be mismatched; or, for streams
// that would deadlock, each stage's blocked instruction.
void check_transfer_order(const schema::Schedule& schedule, const std::string& plan_name);

}  // namespace paraplan
