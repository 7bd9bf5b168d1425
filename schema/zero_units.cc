// zero_units.cc: the units of a chunk, the unit ops a stream needs, and the
// check of a stream's unit ops (zero_units.h).
#include "schema/zero_units.h"

#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"
#include "schema/zero_stages.h"

namespace paraplan {

using schema::Instruction;
using schema::OpCode;

bool is_zero_unit_op(OpCode op) {
  return op == OpCode::GatherParameters || op == OpCode::ReleaseParameters ||
         op == OpCode::ReduceScatterGradients;
}

bool is_compute_op(OpCode op) {
  return op == OpCode::Forward || op == OpCode::Backward || op == OpCode::BackwardInput ||
         op == OpCode::BackwardWeight;
}

ChunkUnits chunk_units(bool has_embedding, bool has_head, int num_layers, bool tied_embeddings,
                       int layers_per_unit) {
  ChunkUnits units;
  units.has_embedding = has_embedding, units.has_head = has_head;
  units.num_layers = std::max(num_layers, 0);
  units.layers_per_unit = std::max(layers_per_unit, 1);
  if (has_embedding) units.resident.push_back(tied_embeddings);
  units.resident.insert(units.resident.end(), static_cast<size_t>(units.layer_units()), false);
  if (has_head) units.resident.push_back(tied_embeddings && !has_embedding);
  return units;
}

std::vector<ChunkUnits> rank_units(const schema::Plan& plan, int rank) {
  const int chunks = plan.schedule()->virtual_stages();
  const PipelineLayout layout =
      PipelineLayout::of(plan.schedule()->kind(), plan.mesh()->pipeline_parallel(), chunks);
  std::vector<ChunkUnits> units;
  for (int c = 0; c < chunks; ++c) {
    const schema::Stage& stage = *plan.stages()->Get(layout.virtual_stage(rank, c));
    units.push_back(chunk_units(stage.has_embedding(), stage.has_head(), stage.num_layers(),
                                plan.model()->tied_embeddings(),
                                plan.zero() != nullptr ? plan.zero()->layers_per_unit() : 1));
  }
  return units;
}

std::vector<UnitEvent> compute_unit_events(const ChunkUnits& units, OpCode compute) {
  const int first_layer = units.has_embedding ? 1 : 0;
  std::vector<int> backward_order;  // the head's unit, then the layers' in reverse
  if (units.has_head) backward_order.push_back(units.count() - 1);
  for (int l = units.layer_units() - 1; l >= 0; --l) backward_order.push_back(first_layer + l);
  std::vector<UnitEvent> events;
  switch (compute) {
    case OpCode::Forward:
      for (int u = 0; u < units.count(); ++u) events.push_back({true, u});
      break;
    case OpCode::Backward:
      for (int u : backward_order) {
        events.push_back({true, u});
        events.push_back({false, u});
      }
      if (units.has_embedding) events.push_back({false, 0});
      break;
    case OpCode::BackwardInput:
      for (int u : backward_order) events.push_back({true, u});
      break;
    case OpCode::BackwardWeight:
      for (int u : backward_order) events.push_back({false, u});
      if (units.has_embedding) events.push_back({false, 0});
      break;
    case OpCode::LoadMicroBatch:
    case OpCode::SendActivation:
    case OpCode::RecvActivation:
    case OpCode::SendGradient:
    case OpCode::RecvGradient:
    case OpCode::ReduceGradients:
    case OpCode::OptimizerStep:
    case OpCode::GatherParameters:
    case OpCode::ReleaseParameters:
    case OpCode::ReduceScatterGradients:
      break;
  }
  return events;
}

namespace {

using UnitKey = std::pair<int, int>;  // (chunk, unit)

Instruction unit_op(OpCode op, int chunk, int unit, int micro_batch) {
  return Instruction(op, static_cast<uint8_t>(chunk), static_cast<uint16_t>(unit), micro_batch, -1);
}

// The non-resident units compute `ins` reads, in order.
std::vector<int> streamed_reads(const ChunkUnits& units, OpCode op) {
  std::vector<int> reads;
  for (const UnitEvent& e : compute_unit_events(units, op))
    if (e.read && !units.resident[e.unit]) reads.push_back(e.unit);
  return reads;
}

}  // namespace

std::vector<Instruction> add_zero_unit_ops(const std::vector<Instruction>& stream,
                                           const std::vector<ChunkUnits>& chunks, int zero_stage,
                                           bool keep_gathered) {
  if (!shards_gradients(zero_stage)) return stream;
  const bool gathers = shards_parameters(zero_stage);
  // Every compute's chunk, micro-batch and streamed reads; where each unit is last read.
  struct Compute {
    OpCode op;
    int chunk, micro_batch;
    std::vector<int> reads;
  };
  std::vector<Compute> computes;
  std::map<UnitKey, size_t> last_read;
  for (const Instruction& ins : stream) {
    if (is_zero_unit_op(ins.op()))
      throw std::invalid_argument("add_zero_unit_ops: the stream already has unit ops");
    if (!is_compute_op(ins.op())) continue;
    if (ins.chunk() >= chunks.size())
      throw std::invalid_argument("add_zero_unit_ops: chunk " + std::to_string(ins.chunk()) +
                                  " of " + std::to_string(chunks.size()));
    Compute compute{ins.op(), ins.chunk(), ins.micro_batch(), {}};
    if (gathers) compute.reads = streamed_reads(chunks[ins.chunk()], ins.op());
    for (int u : compute.reads) last_read[{compute.chunk, u}] = computes.size();
    computes.push_back(std::move(compute));
  }
  // Each compute's own ops (after it), and the gathers of the first one's first unit.
  std::vector<std::vector<Instruction>> after(computes.size());
  std::vector<Instruction> before_first;
  std::set<UnitKey> gathered;
  for (size_t k = 0; k < computes.size(); ++k) {
    const Compute& x = computes[k];
    const ChunkUnits& units = chunks[x.chunk];
    auto gather = [&](std::vector<Instruction>& into, int chunk, int unit, int micro_batch) {
      if (gathered.insert({chunk, unit}).second)
        into.push_back(unit_op(OpCode::GatherParameters, chunk, unit, micro_batch));
    };
    if (!x.reads.empty())
      gather(k == 0 ? before_first : after[k - 1], x.chunk, x.reads.front(), x.micro_batch);
    std::vector<Instruction>& ops = after[k];
    size_t read_index = 0;
    for (const UnitEvent& e : compute_unit_events(units, x.op)) {
      if (units.resident[e.unit]) continue;
      if (!e.read) {
        ops.push_back(unit_op(OpCode::ReduceScatterGradients, x.chunk, e.unit, x.micro_batch));
        continue;
      }
      if (!gathers) continue;
      ++read_index;
      if (read_index < x.reads.size()) gather(ops, x.chunk, x.reads[read_index], x.micro_batch);
      const bool next_starts_with_it =
          !keep_gathered && read_index == x.reads.size() && k + 1 < computes.size() &&
          computes[k + 1].chunk == x.chunk && !computes[k + 1].reads.empty() &&
          computes[k + 1].reads.front() == e.unit;
      const bool release =
          keep_gathered ? last_read.at({x.chunk, e.unit}) == k : !next_starts_with_it;
      if (release) {
        ops.push_back(unit_op(OpCode::ReleaseParameters, x.chunk, e.unit, x.micro_batch));
        gathered.erase({x.chunk, e.unit});
      }
    }
  }
  std::vector<Instruction> out;
  out.reserve(stream.size() + 4 * computes.size());
  size_t k = 0;
  for (const Instruction& ins : stream) {
    if (is_compute_op(ins.op()) && k == 0)
      out.insert(out.end(), before_first.begin(), before_first.end());
    out.push_back(ins);
    if (is_compute_op(ins.op())) {
      out.insert(out.end(), after[k].begin(), after[k].end());
      ++k;
    }
  }
  return out;
}

bool has_zero_unit_ops(const flatbuffers::Vector<const Instruction*>& stream) {
  for (const Instruction* ins : stream)
    if (is_zero_unit_op(ins->op())) return true;
  return false;
}

std::vector<Instruction> stream_instructions(
    const flatbuffers::Vector<const Instruction*>& stream) {
  std::vector<Instruction> out;
  out.reserve(stream.size());
  for (const Instruction* ins : stream) out.push_back(*ins);
  return out;
}

namespace {

// Plays a stream's unit ops as the plan format says they run.
class UnitOpPlayer {
 public:
  UnitOpPlayer(const std::vector<ChunkUnits>& chunks, int zero_stage)
      : chunks_(chunks), zero_stage_(zero_stage) {}

  // "" or the problem of the unit op at `at`.
  std::string check_op(const Instruction& ins) const {
    const std::string name = opcode_name(ins.op());
    const bool parameters = ins.op() != OpCode::ReduceScatterGradients;
    if (parameters ? !shards_parameters(zero_stage_) : !shards_gradients(zero_stage_))
      return name + " under zero.stage " + std::to_string(zero_stage_) + "; only ZeRO-" +
             (parameters ? "3" : "2 and 3") +
             (parameters ? " gathers parameters" : " scatter gradients");
    if (ins.chunk() >= chunks_.size())
      return name + " chunk " + std::to_string(ins.chunk()) + " is out of range";
    const ChunkUnits& units = chunks_[ins.chunk()];
    if (ins.unit() >= units.count())
      return name + " unit " + std::to_string(ins.unit()) + " is out of range; chunk " +
             std::to_string(ins.chunk()) + " has units 0.." + std::to_string(units.count() - 1) +
             " (zero_units.h)";
    if (units.resident[ins.unit()])
      return name + " of unit " + std::to_string(ins.unit()) +
             ", which holds the tied embedding and stays whole (zero_units.h)";
    return "";
  }

  // Runs a gather or release now; "" or its problem.
  std::string run(const Instruction& ins) {
    const UnitKey key{ins.chunk(), ins.unit()};
    if (ins.op() == OpCode::GatherParameters && !gathered_.insert(key).second)
      return "gather_parameters of unit " + std::to_string(ins.unit()) + " of chunk " +
             std::to_string(ins.chunk()) + ", which is gathered already";
    if (ins.op() == OpCode::ReleaseParameters && gathered_.erase(key) == 0)
      return "release_parameters of unit " + std::to_string(ins.unit()) + " of chunk " +
             std::to_string(ins.chunk()) + ", which is not gathered";
    return "";
  }

  // Plays compute `x` with its ops stream[first, last); "" or the problem
  // and, in `where`, the instruction it is on.
  std::string play_compute(const std::vector<Instruction>& stream, size_t x, size_t first,
                           size_t last, size_t& where) {
    const Instruction& compute = stream[x];
    const ChunkUnits& units = chunks_[compute.chunk()];
    std::set<int> read, finished, scattered;
    size_t next = first;
    std::string problem;
    // Runs the ops that may run now (all at the compute's end).
    auto advance = [&](bool at_end) {
      for (; next < last && problem.empty(); ++next) {
        const Instruction& op = stream[next];
        const bool own = op.chunk() == compute.chunk();
        if (op.op() == OpCode::ReleaseParameters && !at_end && own && !read.count(op.unit())) break;
        if (op.op() == OpCode::ReduceScatterGradients) {
          if (!at_end && own && !finished.count(op.unit())) break;
          if (!own || !finished.count(op.unit())) {
            problem = "reduce_scatter_gradients of unit " + std::to_string(op.unit()) +
                      " of chunk " + std::to_string(op.chunk()) + ", which its compute (" +
                      opcode_name(compute.op()) + ") does not finish";
          }
          scattered.insert(op.unit());
        } else {
          problem = run(op);
        }
        where = next;
      }
    };
    for (const UnitEvent& e : compute_unit_events(units, compute.op())) {
      advance(false);
      if (!problem.empty()) return problem;
      if (e.read) {
        if (shards_parameters(zero_stage_) && !units.resident[e.unit] &&
            !gathered_.count({compute.chunk(), e.unit})) {
          where = x;
          return std::string(opcode_name(compute.op())) + " of micro-batch " +
                 std::to_string(compute.micro_batch()) + " reads unit " + std::to_string(e.unit) +
                 " of chunk " + std::to_string(compute.chunk()) +
                 ", which no gather_parameters before that read has gathered";
        }
        read.insert(e.unit);
      } else {
        finished.insert(e.unit);
      }
    }
    advance(true);
    if (!problem.empty()) return problem;
    for (int u : finished) {
      if (units.resident[u] || scattered.count(u)) continue;
      where = x;
      return std::string(opcode_name(compute.op())) + " of micro-batch " +
             std::to_string(compute.micro_batch()) + " finishes the gradients of unit " +
             std::to_string(u) + " of chunk " + std::to_string(compute.chunk()) +
             " without a reduce_scatter_gradients after it";
    }
    return "";
  }

  const std::set<UnitKey>& gathered() const { return gathered_; }

 private:
  const std::vector<ChunkUnits>& chunks_;
  int zero_stage_;
  std::set<UnitKey> gathered_;
};

}  // namespace

std::string zero_unit_ops_problem(const std::vector<Instruction>& stream,
                                  const std::vector<ChunkUnits>& chunks, int zero_stage) {
  UnitOpPlayer player(chunks, zero_stage);
  auto at = [&](size_t i, const std::string& problem) {
    return "instruction " + std::to_string(i) + ": " + problem;
  };
  for (size_t i = 0; i < stream.size(); ++i) {
    const Instruction& ins = stream[i];
    if (is_zero_unit_op(ins.op())) {
      if (std::string problem = player.check_op(ins); !problem.empty()) return at(i, problem);
      // Not after a compute: runs as it is reached.
      if (ins.op() == OpCode::ReduceScatterGradients)
        return at(i, "reduce_scatter_gradients must follow the compute that finishes the unit");
      if (std::string problem = player.run(ins); !problem.empty()) return at(i, problem);
      continue;
    }
    if (ins.op() == OpCode::ReduceGradients && !player.gathered().empty()) {
      const UnitKey key = *player.gathered().begin();
      return at(i, "reduce_gradients with unit " + std::to_string(key.second) + " of chunk " +
                       std::to_string(key.first) + " still gathered; release it before");
    }
    if (!is_compute_op(ins.op()) || ins.chunk() >= chunks.size()) continue;
    size_t last = i + 1;
    while (last < stream.size() && is_zero_unit_op(stream[last].op())) {
      if (std::string problem = player.check_op(stream[last]); !problem.empty())
        return at(last, problem);
      ++last;
    }
    size_t where = i;
    if (std::string problem = player.play_compute(stream, i, i + 1, last, where); !problem.empty())
      return at(where, problem);
    i = last - 1;
  }
  return "";
}

}  // namespace paraplan
