// gradient_storage.h: where a stage's parameter gradients (ZeRO-2:
// parallel/sharded_gradients.h) and parameters (ZeRO-3:
// parallel/sharded_parameters.h) live when not in its own whole buffers,
// and the units backward finishes them in.
//
// A stage addresses each gradient tensor by its offset in the rank's buffer;
// with a GradientStorage installed (ModelStage::use_gradient_storage), every
// address comes from gradient(offset), called as the op that writes it is
// queued, once per tensor and op: the storage may hand out a different place
// for the same tensor after the tensor's unit was released.
#pragma once

#include <cstddef>

namespace paraplan {

class GradientStorage {
 public:
  virtual ~GradientStorage() = default;
  // The gradient tensor starting at `offset` (elements into the rank's
  // buffer), within the unit holding it: storage for the whole unit, which
  // stays put until the unit is released (ShardedGradients::unit_done).
  virtual void* gradient(size_t offset) = 0;
};

// Parameters held elsewhere (ZeRO-3): parameter(offset) is the tensor at
// `offset` of the rank's buffer, in storage for its whole unit, gathered
// before the call returns (the op reading it is queued after); the stage
// tells unit_used(begin) once a forward or backward has queued the last op
// reading the unit, after which the storage may free it (the reads already
// queued still see it: the next gather into that memory is queued after
// them).
class ParameterStorage {
 public:
  virtual ~ParameterStorage() = default;
  virtual const void* parameter(size_t offset) = 0;
  virtual void unit_used(size_t unit_begin) = 0;
};

// A range of the rank's buffer that backward finishes at once: from `begin`
// to the next unit's begin (an embedding, a block, the final norm and head).
// Backward reports `begin` (ModelStage::backward's gradients_final_from) once
// it has written the unit's last gradient. written_early: backward writes
// this unit before it reaches it too (a tied head on the embedding's stage
// writes the embedding's gradient first), so it is written over the whole
// backward.
struct GradientUnit {
  size_t begin = 0;
  bool written_early = false;
};

}  // namespace paraplan
