// stream_check.h: the one checker of a pipeline step's instruction streams
// (plan.fbs Schedule), asked three questions by three callers:
//   1. check_stream: one rank's stream on its own: each micro-batch of each
//      chunk loaded, received, forwarded, sent, given its gradient,
//      backwarded (and its weight gradient) once each and in order; one
//      ReduceGradients after every backward and OptimizerStep last; a local
//      hand-off's Send directly followed by its Recv. The plan validator
//      reports every problem; the planner's verifier the first.
//   2. check_link_order: every link's messages received in the order they
//      are sent, as posting order (NCCL) matches them. The runtime asks it
//      before allocating anything; the verifier too.
//   3. check_streams_finish: all ranks' streams played together under
//      posted transfers (plan.fbs Transfers) finish, or where they block.
//      The planner's verifier asks it (schedule_verify.cc), after 1 and 2,
//      and the runtime at load (runtime/pipeline/transfer_order.cc).
// What an instruction sends or receives (message_of) is decided here once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan_generated.h"
#include "schema/pipeline_layout.h"

namespace paraplan {

// One instruction of a stream: the planner's PipelineInstruction, and a
// plan's schema::Instruction without its retired peer_micro_batch.
struct StreamOp {
  schema::OpCode op = schema::OpCode::Forward;
  int micro_batch = -1;
  int chunk = 0;  // the model chunk (virtual stage of this rank) it works on

  bool operator==(const StreamOp&) const = default;
};
using StreamOps = std::vector<StreamOp>;

// A plan's stream as StreamOps.
StreamOps stream_ops(const flatbuffers::Vector<const schema::Instruction*>& instructions);

// What a Send / Recv instruction moves between two virtual stages.
struct StreamMessage {
  bool activation = true;  // else a gradient
  bool is_send = true;
  int micro_batch = 0;
  int from_virtual_stage = 0, to_virtual_stage = 0;  // the producer and the consumer
  bool local = false;                                // both on one rank: a hand-off, no link
};

// The message instruction `op` of pipeline rank `rank` posts; nullopt for an
// op that moves none, or a transfer past the pipeline's ends.
std::optional<StreamMessage> message_of(const PipelineLayout& layout, int rank, const StreamOp& op);

// Per chunk of a rank's stream (num_chunks of them): whether each of its slots needs a received
// output gradient of its own: the chunk posts a RecvGradient not directly followed by the Backward
// / BackwardInput it feeds, so a receive may land while the input gradient, in the buffer they
// would share, is in use. Otherwise (1F1B, GPipe: receives at their consumers) one buffer serves
// both, and each RecvGradient first waits for the chunk's last input-gradient send to be received,
// as the backward after it would (plan.fbs Transfers).
std::vector<bool> output_gradient_per_slot(int num_chunks, const StreamOps& stream);

// A problem of one stream: at an instruction (its index), or of the stream
// as a whole (instruction -1).
struct StreamProblem {
  int64_t instruction = -1;
  std::string text;
};

// Question 1. needs_load: per chunk, whether it holds the embedding or the
// head (empty: the first and last virtual stages). Problems in the order
// found: instruction-level ones, then per chunk, then the step's.
std::vector<StreamProblem> check_stream(const PipelineLayout& layout, int rank,
                                        int num_micro_batches, const StreamOps& stream,
                                        const std::vector<bool>& needs_load = {});

// Question 2: the first link whose messages would pair wrongly, as "pipeline
// rank 0's instruction 5 (send_activation) sends the activation of virtual
// stage 0, micro-batch 2 as its message 3 to rank 1, but ..."; nullopt when
// every link pairs. streams: one per pipeline rank.
std::optional<std::string> check_link_order(const PipelineLayout& layout,
                                            const std::vector<StreamOps>& streams);

// Question 3, for streams that pass 1 and 2: played together, every Send /
// Recv only posting, a Forward waiting for its activation's sender, a
// Backward / BackwardInput for its output gradient's sender and for its
// chunk's last input-gradient send to be received, so too a RecvGradient
// into a chunk's one buffer (output_gradient_per_slot), ReduceGradients for
// every send to be received. nullopt when all finish; else "deadlock:" and
// each rank's blocked instruction.
std::optional<std::string> check_streams_finish(const PipelineLayout& layout,
                                                const std::vector<StreamOps>& streams);

// Question 3's answer as data: where each rank's stream stopped when all
// were played together (its size where it finished); nullopt when all did.
struct StreamStall {
  std::vector<size_t> stopped_at;  // per pipeline rank
};
std::optional<StreamStall> find_stream_stall(const PipelineLayout& layout,
                                             const std::vector<StreamOps>& streams);

// One line per rank: "stage 0 instruction 3 Backward(0) (blocked)" or
// "stage 1: finished".
std::vector<std::string> stall_lines(const StreamStall& stall,
                                     const std::vector<StreamOps>& streams);

// "Forward(2)", "OptimizerStep"; with a chunk > 0: "Forward(2, chunk 1)".
std::string stream_op_text(const StreamOp& op);

}  // namespace paraplan
