// zero_units.h: ZeRO-2 and ZeRO-3's parameter units and the unit ops that
// gather, release and reduce-scatter them in a rank's stream (plan.fbs:
// GatherParameters, ReleaseParameters, ReduceScatterGradients), in one
// place: the planner writes the ops (add_zero_unit_ops), the validator
// checks them (zero_unit_ops_problem), the runtime runs them and checks its
// own units against these, and plans before v10 get them at load
// (plan_lowering.h).
//
// A model chunk's units, in model order: the embedding (on a chunk holding
// it), its layers in groups of the plan's Zero.layers_per_unit (the last
// group holding what is left), the final norm with the head (on a chunk
// holding it).
// A unit holding a tied embedding is resident: kept whole, never named by a
// unit op (ReduceGradients reduces it): the embedding's unit when embeddings
// are tied (the head writes its gradient first on the same chunk, or the
// head's chunk sums its copy with it), and the head's unit on a chunk
// holding the head but not the embedding (that copy).
//
// What each compute does to the units (the order the runtime's stages keep):
// Forward reads every unit in model order. Backward reads the head's unit
// and the layers' in reverse, finishing each one's gradients right after
// reading it (a group of layers: after its first layer's backward), then
// finishes the embedding's (its backward reads no parameter). BackwardInput reads as Backward and
// finishes nothing; BackwardWeight reads nothing and finishes as Backward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan_generated.h"

namespace paraplan {

bool is_zero_unit_op(schema::OpCode op);
// Forward, Backward, BackwardInput, BackwardWeight: the ops unit ops belong to.
bool is_compute_op(schema::OpCode op);

// One model chunk's units.
struct ChunkUnits {
  bool has_embedding = false, has_head = false;
  int num_layers = 0;
  int layers_per_unit = 1;
  std::vector<bool> resident;  // one per unit
  int count() const { return static_cast<int>(resident.size()); }
  // The layer units (groups of layers_per_unit layers).
  int layer_units() const { return (num_layers + layers_per_unit - 1) / layers_per_unit; }
  // The unit holding layer `layer` of the chunk (0 <= layer < num_layers).
  int unit_of_layer(int layer) const { return (has_embedding ? 1 : 0) + layer / layers_per_unit; }
  bool operator==(const ChunkUnits&) const = default;
};
// layers_per_unit >= 1 (Zero.layers_per_unit; validated).
ChunkUnits chunk_units(bool has_embedding, bool has_head, int num_layers, bool tied_embeddings,
                       int layers_per_unit = 1);
// The units of each chunk of pipeline rank `rank` of a plan whose stages,
// mesh, schedule and model the validator accepted.
std::vector<ChunkUnits> rank_units(const schema::Plan& plan, int rank);

// What a compute does, in order: reads a unit (ZeRO-3 needs it gathered) or
// finishes its gradients (ZeRO-2 reduce-scatters them). Resident units
// included.
struct UnitEvent {
  bool read = false;  // else: its gradients finished
  int unit = 0;
};
std::vector<UnitEvent> compute_unit_events(const ChunkUnits& units, schema::OpCode compute);

// The stream with the unit ops zero_stage needs (none below 2): ZeRO-2 a
// reduce-scatter of each unit a Backward or BackwardWeight finishes, right
// as it finishes; ZeRO-3 also the gathers and releases: each compute's
// units gathered one ahead of its reads and released after them, its first
// unit gathered as the compute before it on the rank ends (so the gather
// overlaps the transfers between them), no release and re-gather where the
// next compute starts with the unit the last one ended with; with
// keep_gathered, each unit gathered once, before its first read in the
// step, and released after its last. Throws std::invalid_argument if the
// stream already has unit ops or names a chunk outside `chunks`.
std::vector<schema::Instruction> add_zero_unit_ops(const std::vector<schema::Instruction>& stream,
                                                   const std::vector<ChunkUnits>& chunks,
                                                   int zero_stage, bool keep_gathered);

// Whether a stream has any unit op.
bool has_zero_unit_ops(const flatbuffers::Vector<const schema::Instruction*>& stream);
// A plan's stream as values.
std::vector<schema::Instruction> stream_instructions(
    const flatbuffers::Vector<const schema::Instruction*>& stream);

// "" when the stream's unit ops are what zero_stage allows and run as the
// plan format says without a compute reading a unit not gathered (ZeRO-3),
// else the first problem, naming the instruction: a unit op below its
// stage, a unit out of range or resident, a gather of a gathered unit, a
// release of one not gathered, a unit still gathered at ReduceGradients, a
// finished unit without its reduce-scatter (or one reduce-scattered that
// its compute does not finish).
std::string zero_unit_ops_problem(const std::vector<schema::Instruction>& stream,
                                  const std::vector<ChunkUnits>& chunks, int zero_stage);

}  // namespace paraplan
