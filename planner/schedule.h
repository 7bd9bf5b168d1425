// schedule.h: per-stage pipeline instruction streams (1F1B and GPipe) and the
// verifier that simulates all stages together.
//
// Op semantics are those of schema::OpCode (plan.fbs). Stage 0 holds the
// embedding and the last stage the head; both LoadMicroBatch a micro-batch right
// before its Forward (stage 0 for the tokens, the last stage for the targets).
// Every stream ends with ReduceGradients then OptimizerStep, whose micro_batch is
// -1 (they act on the whole step).
//
// Communication model of the verifier: sends and receives are rendezvous (a
// send completes only when the neighbour's matching receive is posted, and the
// reverse), never buffered. A combined op (SendActivationRecvGradient,
// SendGradientRecvActivation) posts its send and its receive at once and completes
// when both halves have matched, possibly with two different instructions of the
// neighbour. This is the strictest model the runtime's non-blocking pairs or
// grouped NCCL calls satisfy, so a schedule that passes it cannot deadlock there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

struct PipelineInstruction {
  schema::OpCode op = schema::OpCode::Forward;
  int micro_batch = -1;
  // The micro-batch received by a combined send-and-receive op; -1 otherwise.
  int peer_micro_batch = -1;

  bool operator==(const PipelineInstruction&) const = default;
};

using InstructionStream = std::vector<PipelineInstruction>;

struct PipelineSchedule {
  schema::ScheduleKind kind = schema::ScheduleKind::OneForwardOneBackward;
  int num_stages = 1;
  int num_micro_batches = 1;
  std::vector<InstructionStream> stages;  // indexed by pipeline rank
};

// Megatron's non-interleaved 1F1B: stage s runs min(p - s - 1, m) warm-up
// forwards, then one forward and one backward per step using the combined
// send/receive pairs, then the remaining backwards.
PipelineSchedule generate_one_forward_one_backward(int num_stages, int num_micro_batches);

// GPipe: every forward, then every backward (micro-batches in ascending order).
PipelineSchedule generate_gpipe(int num_stages, int num_micro_batches);

// Dispatches on kind. Throws std::invalid_argument for num_stages or
// num_micro_batches < 1.
PipelineSchedule generate_schedule(schema::ScheduleKind kind, int num_stages,
                                   int num_micro_batches);

// Simulates every stage's stream together and returns the first problem found
// (deadlock with each stage's blocked instruction, unmatched send or receive,
// messages matched out of order, a micro-batch not forwarded then backwarded
// exactly once on a stage, a misplaced load, reduce or optimizer step), or
// nullopt when the schedule is sound.
std::optional<std::string> verify_schedule(const PipelineSchedule& schedule);

// "SendActivationRecvGradient(3, peer 1)", "Forward(2)", "OptimizerStep".
std::string format_instruction(const PipelineInstruction& instruction);

}  // namespace paraplan
