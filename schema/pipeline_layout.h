// pipeline_layout.h: which virtual stage (model chunk, in model order) each
// chunk of each pipeline rank holds, the one mapping the planner, the plan
// checks and the runtime share.
//
// Megatron's interleaving (and v = 1) puts chunk c of rank r at virtual stage
// c p + r: chunk c of the last rank feeds chunk c + 1 of rank 0. ZB-V's V
// (ScheduleKind ZeroBubbleV, and DualPipeV's, in another order) runs odd
// chunks backwards: chunk 1 of rank r is virtual stage 2p - 1 - r, so rank 0
// holds the embedding and the head and the last rank's two chunks are
// neighbours (a hand-off on one rank: plan.fbs).
#pragma once

#include "plan_generated.h"
#include "schema/schedule_kinds.h"

namespace paraplan {

// Whether a schedule kind runs two chunks per rank in a V (its row in
// schedule_kinds.h; false for a value outside the enum).
inline bool v_shaped(schema::ScheduleKind kind) {
  return is_schedule_kind(kind) && schedule_kind_traits(kind).v_shaped();
}

// The layers chunk c of a rank of rank_layers holds: an equal share, the
// earlier chunks one more where chunks does not divide them (so rank_layers
// % chunks chunks hold one layer more than the rest).
inline int chunk_layers(int rank_layers, int chunks, int c) {
  return rank_layers / chunks + (c < rank_layers % chunks ? 1 : 0);
}

class PipelineLayout {
 public:
  PipelineLayout() = default;
  PipelineLayout(int ranks, int chunks, bool v_shape)
      : ranks_(ranks), chunks_(chunks), v_shape_(v_shape) {}
  // The layout a schedule kind runs: a V (v_shaped), else round robin.
  static PipelineLayout of(schema::ScheduleKind kind, int ranks, int chunks) {
    return {ranks, chunks, v_shaped(kind)};
  }

  int ranks() const { return ranks_; }
  int chunks() const { return chunks_; }
  bool v_shape() const { return v_shape_; }
  int num_virtual_stages() const { return ranks_ * chunks_; }
  int last_virtual_stage() const { return ranks_ * chunks_ - 1; }

  int virtual_stage(int rank, int chunk) const {
    return chunk * ranks_ + (reversed(chunk) ? ranks_ - 1 - rank : rank);
  }
  int rank_of(int virtual_stage) const {
    const int chunk = virtual_stage / ranks_, position = virtual_stage % ranks_;
    return reversed(chunk) ? ranks_ - 1 - position : position;
  }
  int chunk_of(int virtual_stage) const { return virtual_stage / ranks_; }
  // The chunk of this rank holding the virtual stage after (towards_next) or
  // before chunk `chunk`'s, or -1 where that is on another rank or none: a
  // link within the rank (ZB-V's turn on the last rank) is a local copy.
  int local_neighbour(int rank, int chunk, bool towards_next) const {
    const int to = virtual_stage(rank, chunk) + (towards_next ? 1 : -1);
    if (to < 0 || to > last_virtual_stage() || rank_of(to) != rank) return -1;
    return chunk_of(to);
  }

 private:
  bool reversed(int chunk) const { return v_shape_ && chunk % 2 == 1; }

  int ranks_ = 1, chunks_ = 1;
  bool v_shape_ = false;
};

}  // namespace paraplan
