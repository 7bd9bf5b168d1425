// schedule.h: per-pipeline-rank instruction streams (1F1B, GPipe, interleaved
// 1F1B, ZB-H1, ZB-V, DualPipe-V) and the verifier that simulates all ranks
// together.
//
// Op semantics are those of schema::OpCode (plan.fbs). With virtual_stages = v
// model chunks per rank, virtual stage s (model order, 0 <= s < p x v) is chunk
// s / p of pipeline rank s % p; every instruction names its chunk. "Next" and
// "previous" are virtual stages: chunk c of the last rank sends activations to
// chunk c + 1 of rank 0. Virtual stage 0 holds the embedding and the last one
// the head; the rank holding it LoadMicroBatch-es a micro-batch right before
// that chunk's Forward (tokens, targets). Backward is BackwardInput (the input
// gradient the previous virtual stage waits for) and BackwardWeight (the weight
// gradients) at once; a schedule uses either Backward or the split pair for a
// micro-batch, W after its B. Every stream ends with ReduceGradients then
// OptimizerStep, whose micro_batch is -1 (they act on the whole step).
//
// Transfers (schema::Transfers): one model, Posted, for every kind. Each
// kind is a compute order per rank (Forward, Backward, BackwardInput,
// BackwardWeight) lowered to streams with plain sends and receives: 1F1B and
// GPipe at their consumers (lower_at_consumers), the others where the
// producer finishes in unit time (schedule_from_orders). Every Send / Recv
// only posts its transfer. A Forward waits for its activation's receive to
// have matched, a Backward / BackwardInput for its output gradient's and for
// the chunk's previous input-gradient send (it writes that buffer again),
// ReduceGradients for all the rank's sends. The messages from one rank to
// another match in the order they are posted (whatever chunks they link), as
// NCCL matches them. A schedule that passes the verifier cannot deadlock in
// the runtime.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan_generated.h"
#include "schema/pipeline_layout.h"
#include "schema/stream_check.h"

namespace paraplan {

// An instruction (op, micro-batch, chunk) and a rank's stream: the stream
// checker's types (schema/stream_check.h), which the verifier asks.
using PipelineInstruction = StreamOp;
using InstructionStream = StreamOps;

struct PipelineSchedule {
  schema::ScheduleKind kind = schema::ScheduleKind::OneForwardOneBackward;
  int num_stages = 1;
  int num_micro_batches = 1;
  std::vector<InstructionStream> stages;  // indexed by pipeline rank
  int virtual_stages = 1;                 // model chunks per pipeline rank

  PipelineLayout layout() const { return PipelineLayout::of(kind, num_stages, virtual_stages); }
};

// Megatron's non-interleaved 1F1B: stage s runs min(p - s - 1, m) warm-up
// forwards, then one forward and one backward per step, then the remaining
// backwards; lowered at the consumers, so a rank holds min(p - s, m)
// micro-batches' activations, receipt to backward.
PipelineSchedule generate_one_forward_one_backward(int num_stages, int num_micro_batches);

// GPipe: every forward, then every backward (micro-batches in ascending
// order), lowered at the consumers.
PipelineSchedule generate_gpipe(int num_stages, int num_micro_batches);

// Megatron-core's interleaved 1F1B over v chunks per rank. Forwards run in
// groups of p micro-batches per chunk (chunk 0 of micro-batches 0..p-1, then
// chunk 1 of the same, ...); a last group shorter than p takes the
// micro-batches left when m is not a multiple of p (Megatron-core's
// get_schedule_table); backwards run the same table with chunks reversed.
// Rank r warms up with min(2 (p - r - 1) + (v - 1) p, m v) forwards, all m v
// when m == p. Requires p >= 2 and m >= p (Megatron-core refuses a group of p
// larger than m): std::invalid_argument otherwise, saying so. Communication is
// plain sends and receives placed by schedule_from_orders (below).
PipelineSchedule generate_interleaved(int num_stages, int num_micro_batches, int virtual_stages);

// Interleaved 1F1B where p does not divide m: Megatron-core's warm-up can
// leave a dependency cycle, so every rank warms up by the fewest extra
// forwards that leave none (0 where p divides m); and whether `extra` does,
// checked on the orders built in full (the reference the search, which
// works them out op by op, is tested against).
int interleaved_extra_warmup_forwards(int p, int m, int v);
bool interleaved_warmup_runs(int p, int m, int v, int extra);

// Interleaved 1F1B's compute orders, the extra warm-up included: each rank's
// Forwards and Backwards in the order generate_interleaved's streams run
// them, without the transfers. What a rank keeps in flight (max_in_flight)
// follows from its order alone, so the memory model reads it here instead of
// placing every transfer. Same requirements as generate_interleaved.
std::vector<InstructionStream> interleaved_compute_orders(int p, int m, int v);

// ZB-H1 (Qi et al.), the paper's order: backward split into BackwardInput
// (B) and BackwardWeight (W). Rank r runs 1F1B's min(p - r - 1, m) warm-up
// forwards, then F, B and W per step, except that its first r steps leave
// their W out; those r weight gradients run last, in the cool-down where
// 1F1B idles. Every rank keeps at most min(p, m) micro-batches in flight
// (forwarded, W not done: 1F1B's peak, that of its rank 0), and the bubble is
// (p - 1)(F + B - W) where W <= min(F, B). One chunk per rank.
PipelineSchedule generate_zero_bubble_h1(int num_stages, int num_micro_batches);

// ZB-V (Qi et al., "Pipeline Parallelism with Controllable Memory"): two
// chunks per rank in a V (chunk 0 of rank r is virtual stage r, chunk 1 is
// 2p - 1 - r: pipeline_layout.h), split backward. Rank r idles r forwards,
// runs 2(p - r) - 1 forwards of chunk 0, r pairs of chunk 1 then chunk 0
// forwards, then p - r of chunk 1's F, B, W; the steady state is chunk 0's
// F, B, W then chunk 1's; the cool-down runs the backwards left, chunk 0
// then 1, and the weight gradients they defer. At F = B = W and m >= 2p every
// rank computes without a gap from its first op to its last (the step's only
// idle time is rank r's r-forward start), holding at most 2p chunk
// micro-batches in flight: 1F1B's activation memory. Rank p - 1 hands chunk
// 0's output to its own chunk 1 (a local Send then Recv). p >= 1, m >= 1.
PipelineSchedule generate_zero_bubble_v(int num_stages, int num_micro_batches);

// DualPipe-V (DeepSeek's DualPipe "cut in half", deepseek-ai/DualPipe
// dualpipev.py): ZB-V's V, in DualPipe's order. Rank r runs 2(p - r - 1)
// forwards of chunk 0, r + 1 pairs of chunk 0 then 1 forwards, p - r - 1 of
// chunk 1's B (W deferred), a deferred W and chunk 1's F; the steady state
// pairs a forward with a whole backward (F0 B1, F1 B0: DualPipe overlaps
// each pair's communication, here they run in turn); the cool-down defers
// the second half's weight gradients into its gaps. A whole backward is a
// BackwardInput with its BackwardWeight right after; deferred ones run
// oldest first. At F = B_in = W its bubble is ZB-V's; it holds one chunk
// micro-batch more (2p + 1) and at most p weight gradients waiting (ZB-V:
// up to 2p - 1). p >= 2, m >= 2p (as dualpipev.py asks), else
// std::invalid_argument saying so.
PipelineSchedule generate_dualpipe_v(int num_stages, int num_micro_batches);

// The kind's generator (its row in schedule_kinds.h). Throws
// std::invalid_argument for num_stages or num_micro_batches < 1,
// virtual_stages < 1, or virtual_stages outside the kind's chunk rule.
PipelineSchedule generate_schedule(schema::ScheduleKind kind, int num_stages, int num_micro_batches,
                                   int virtual_stages = 1);

// generate_schedule's result, shared: the cost model plays out and counts
// the same few shapes for thousands of settings (each bubble ratio, each
// ZB count), in the order of their bounds, so a shape comes back after
// others. The shapes asked for most recently are kept up to
// kSharedScheduleInstructions in all (12 bytes each: about 50 MB; the 1T
// GPT's search asks for 63 shapes, up to 300k instructions each, and keeps
// them all; with only its last 16 it generated 151); safe from many threads.
inline constexpr size_t kSharedScheduleInstructions = size_t{1} << 22;
std::shared_ptr<const PipelineSchedule> shared_schedule(schema::ScheduleKind kind, int num_stages,
                                                        int num_micro_batches,
                                                        int virtual_stages = 1);

// The bound the verifier holds every rank to: micro-batches in flight on the
// rank at once, all chunks together (forwarded, their Backward or
// BackwardWeight not yet done): the kind's row (schedule_kinds.h). 1F1B:
// min(p - r, m); GPipe: m; interleaved: min(warm-up + 1, m v); ZB-H1:
// min(p, m); ZB-V: min(2p, 2m) chunk micro-batches, each half a stage's;
// DualPipe-V: min(2p + 1, 2m).
int in_flight_bound(schema::ScheduleKind kind, int num_stages, int num_micro_batches,
                    int virtual_stages, int pipeline_rank);
// Interleaved 1F1B's bound on rank pipeline_rank: its warm-up forwards + 1
// (m v where no such schedule runs: p < 2 or m < p).
int interleaved_in_flight_bound(int p, int m, int v, int pipeline_rank);

// Per chunk of `pipeline_rank`: the most micro-batches in flight at once in its
// stream (forwarded, Backward / BackwardWeight not yet done).
std::vector<int> max_in_flight(const PipelineSchedule& schedule, int pipeline_rank);

// Per chunk of `pipeline_rank`: the most micro-batches holding an activation
// slot at once, as the runtime allocates them (runtime/pipeline/
// schedule_executor.h buffers_needed): from the first instruction writing
// into it (a load, a received activation, the forward) to the Backward, or
// the BackwardWeight after a BackwardInput.
std::vector<int> max_slots_held(const PipelineSchedule& schedule, int pipeline_rank);

// Per chunk of `pipeline_rank`: the most micro-batches at once through
// BackwardInput and not yet through BackwardWeight (0 without a split
// backward): how many deferred weight gradients' copies a chunk keeps.
std::vector<int> max_weight_pending(const PipelineSchedule& schedule, int pipeline_rank);

// The peak, over the rank's stream, of the memory its micro-batches keep: per
// chunk c, activation_bytes[c] from Forward to Backward / BackwardInput and
// weight_pending_bytes[c] from BackwardInput to BackwardWeight (what the
// deferred weight gradients still read). Exact for the stream's order, which
// alone decides what is alive on a rank.
double peak_in_flight_bytes(const PipelineSchedule& schedule, int pipeline_rank,
                            const std::vector<double>& activation_bytes,
                            const std::vector<double>& weight_pending_bytes);

// Builds the streams of a one-chunk-per-rank schedule from each rank's
// compute order, every transfer at its consumer: a rank's stream is its
// order with each forward preceded by its activation's receive (and the
// LoadMicroBatch of a stage holding data) and followed by its send, each
// Backward / BackwardInput preceded by its output gradient's receive and
// followed by its input gradient's send. A receive posted only when its
// consumer is next holds no slot early: the slots are the compute order's
// in-flight counts. Each link carries its messages in its producer's order,
// which must be its consumer's (the verifier checks it). virtual_stages must
// be 1: a local hand-off needs its Send and Recv adjacent.
PipelineSchedule lower_at_consumers(schema::ScheduleKind kind, int num_stages,
                                    int num_micro_batches,
                                    const std::vector<InstructionStream>& compute_orders);

// Builds the streams of a schedule from each rank's compute order (Forward,
// Backward, BackwardInput, BackwardWeight with micro-batch and chunk): plays them out in
// time (F, B, W one unit each, Backward two), adds LoadMicroBatch before the
// data-holding chunks' forwards, and puts each transfer on both ends at the
// moment its producer finishes, as one global sequence of events. The streams
// are that sequence's projections, so sends and receives always meet in the
// order posted. Its transfers are Posted (a stream waits only for the data it
// consumes, as the placement assumed). Throws std::logic_error if the
// orders cannot be played out (a data dependency cycle).
PipelineSchedule schedule_from_orders(schema::ScheduleKind kind, int num_stages,
                                      int num_micro_batches, int virtual_stages,
                                      const std::vector<InstructionStream>& compute_orders);

// Simulates every stage's stream together and returns the first problem found
// (deadlock with each stage's blocked instruction, unmatched send or receive,
// messages matched out of order, a micro-batch not forwarded then backwarded
// exactly once on a stage, a misplaced load, reduce or optimizer step), or
// nullopt when the schedule is sound.
std::optional<std::string> verify_schedule(const PipelineSchedule& schedule);

// "Forward(2)", "OptimizerStep"; with a chunk > 0: "Forward(2, chunk 1)".
std::string format_instruction(const PipelineInstruction& instruction);

}  // namespace paraplan
