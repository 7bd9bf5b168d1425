// wait_attribution.h: splitting the time a rank spends in a collective or a
// pipeline transfer into waiting for its peers and the transfer itself, from
// durations alone (no clock shared across hosts needed).
//
// Rule: the peer that arrives last waits for nobody, so what it spent working
// in the call is the transfer; every other member's extra time is waiting. A
// member's work is its duration on a device, and on the CPU backend the CPU
// time it got (MPI over shared memory copies and reduces on the caller's
// core; time off a core, taken by another rank or asleep between polls, is
// waiting). A collective call's transfer is the least work any member of its
// group did in that call (the calls match one to one: every member makes the
// same calls in the same order), its wait the rest of the member's duration.
// A pipeline transfer instruction's transfer is the least work among it and
// the instructions on the neighbouring stage that carry its messages (the
// activation or gradient it sends or receives), its wait the rest. Calls that
// do not synchronize the group (a deferred operation's wait_pending, which on
// MPI only collects what already finished) are all transfer.
#pragma once

#include <vector>

namespace paraplan {

struct TransferAndWait {
  double transfer = 0;
  double wait = 0;
  TransferAndWait& operator+=(const TransferAndWait& other) {
    transfer += other.transfer, wait += other.wait;
    return *this;
  }
};

// One member's calls: its durations, the group's least work in each call,
// and which calls synchronize the group (the others count as transfer).
TransferAndWait split_collective_calls(const std::vector<double>& durations,
                                       const std::vector<double>& group_least_work,
                                       const std::vector<bool>& synchronizing);

// A pipeline transfer instruction of one rank: its opcode (schema::OpCode),
// micro-batch, the step, its duration and its work (<= seconds; the rule
// above).
struct TransferRecord {
  int op = 0, micro_batch = -1, step = 0;
  double seconds = 0;
  int chunk = 0;  // the model chunk (virtual stage of the rank) it belongs to
  double work = 0;
};

// Every rank's transfers (ranks in world order, mesh as plan.fbs lays it out:
// tensor-parallel innermost, then data-parallel, then pipeline) split into
// transfer and wait per rank. With virtual_stages chunks per rank, a chunk's
// neighbours are the virtual stages beside it in the schedule's layout
// (schema/pipeline_layout.h; v_shape for ZB-V's V).
std::vector<TransferAndWait> split_pipeline_transfers(
    const std::vector<std::vector<TransferRecord>>& ranks, int pipeline_parallel, int data_parallel,
    int tensor_parallel, int virtual_stages = 1, bool v_shape = false);

}  // namespace paraplan
