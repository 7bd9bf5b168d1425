// schedule_verify.cc: the verifier, asking the stream checker
// (schema/stream_check.h) each stream on its own, every link's order and
// whether the streams finish played together, with the memory model's
// in-flight bound in between; and the in-flight counts the memory model
// shares with it.
#include <algorithm>
#include <set>
#include <string>

#include "planner/schedule/schedule.h"
#include "schema/stream_check.h"

namespace paraplan {

using schema::OpCode;

namespace {

// The first instruction of rank s that holds more micro-batches in flight
// (forwarded, their Backward or BackwardWeight not yet done; all chunks
// together) than the kind's bound the memory model assumes.
std::optional<std::string> above_in_flight_bound(const PipelineSchedule& schedule, int s) {
  const int bound = in_flight_bound(schedule.kind, schedule.num_stages, schedule.num_micro_batches,
                                    schedule.virtual_stages, s);
  int in_flight = 0;
  for (size_t i = 0; i < schedule.stages[s].size(); ++i) {
    const PipelineInstruction& ins = schedule.stages[s][i];
    if (ins.op == OpCode::Backward || ins.op == OpCode::BackwardWeight) --in_flight;
    if (ins.op != OpCode::Forward || ++in_flight <= bound) continue;
    return "stage " + std::to_string(s) + " instruction " + std::to_string(i) + " " +
           format_instruction(ins) + ": " + std::to_string(in_flight) +
           " micro-batches in flight, above the bound of " + std::to_string(bound) +
           " the memory model assumes for " + schema::EnumNameScheduleKind(schedule.kind) +
           " on this stage";
  }
  return std::nullopt;
}

// Walks a rank's stream, calling visit(activations, weight_pending) per chunk
// after each compute op: micro-batches forwarded but not yet through
// Backward / BackwardInput, and through BackwardInput but not BackwardWeight.
template <typename Visit>
void walk_in_flight(const PipelineSchedule& schedule, int pipeline_rank, Visit visit) {
  const int v = std::max(schedule.virtual_stages, 1);
  std::vector<int> activations(v, 0), weight_pending(v, 0);
  for (const PipelineInstruction& ins : schedule.stages.at(pipeline_rank)) {
    if (ins.chunk < 0 || ins.chunk >= v) continue;
    switch (ins.op) {
      case OpCode::Forward:
        activations[ins.chunk]++;
        break;
      case OpCode::Backward:
        activations[ins.chunk]--;
        break;
      case OpCode::BackwardInput:
        activations[ins.chunk]--;
        weight_pending[ins.chunk]++;
        break;
      case OpCode::BackwardWeight:
        weight_pending[ins.chunk]--;
        break;
      case OpCode::LoadMicroBatch:
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
      case OpCode::OptimizerStep:
        continue;
    }
    visit(activations, weight_pending);
  }
}

}  // namespace

std::optional<std::string> verify_schedule(const PipelineSchedule& schedule) {
  const int p = static_cast<int>(schedule.stages.size()), m = schedule.num_micro_batches;
  if (p != schedule.num_stages || p < 1 || m < 1)
    return "schedule has " + std::to_string(p) + " streams for num_stages " +
           std::to_string(schedule.num_stages) + " and num_micro_batches " + std::to_string(m) +
           "; need one stream per stage, m >= 1";
  if (schedule.virtual_stages < 1)
    return "virtual_stages " + std::to_string(schedule.virtual_stages) + " must be >= 1";
  if (schedule.virtual_stages > 1 && p < 2)
    return "virtual_stages " + std::to_string(schedule.virtual_stages) +
           " needs at least 2 pipeline stages";
  const PipelineLayout layout = schedule.layout();
  // Each stream on its own (the plan validator's question), then the
  // memory model's bound, then the streams together.
  for (int s = 0; s < p; ++s) {
    const std::vector<StreamProblem> problems = check_stream(layout, s, m, schedule.stages[s]);
    if (problems.empty()) continue;
    const StreamProblem& first = problems.front();
    return "stage " + std::to_string(s) +
           (first.instruction >= 0 ? " instruction " + std::to_string(first.instruction) + " " +
                                         format_instruction(schedule.stages[s][first.instruction])
                                   : std::string()) +
           ": " + first.text;
  }
  for (int s = 0; s < p; ++s)
    if (std::optional<std::string> problem = above_in_flight_bound(schedule, s)) return problem;
  if (std::optional<std::string> problem = check_link_order(layout, schedule.stages))
    return "messages matched out of order: " + *problem;
  return check_streams_finish(layout, schedule.stages);
}

std::vector<int> max_in_flight(const PipelineSchedule& schedule, int pipeline_rank) {
  std::vector<int> peak(std::max(schedule.virtual_stages, 1), 0);
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>& activations, const std::vector<int>& pending) {
                   for (size_t c = 0; c < peak.size(); ++c)
                     peak[c] = std::max(peak[c], activations[c] + pending[c]);
                 });
  return peak;
}

std::vector<int> max_slots_held(const PipelineSchedule& schedule, int pipeline_rank) {
  const int v = std::max(schedule.virtual_stages, 1);
  std::vector<std::set<int>> held(v);
  std::vector<int> peak(v, 0);
  for (const PipelineInstruction& ins : schedule.stages.at(pipeline_rank)) {
    if (ins.chunk < 0 || ins.chunk >= v) continue;
    std::set<int>& chunk = held[ins.chunk];
    switch (ins.op) {
      case OpCode::LoadMicroBatch:
      case OpCode::RecvActivation:
      case OpCode::Forward:
        chunk.insert(ins.micro_batch);
        break;
      case OpCode::Backward:
      case OpCode::BackwardWeight:
        chunk.erase(ins.micro_batch);
        break;
      case OpCode::SendActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:
      case OpCode::ReduceGradients:
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
      case OpCode::OptimizerStep:
      case OpCode::BackwardInput:
        break;
    }
    peak[ins.chunk] = std::max(peak[ins.chunk], static_cast<int>(chunk.size()));
  }
  return peak;
}

std::vector<int> max_weight_pending(const PipelineSchedule& schedule, int pipeline_rank) {
  std::vector<int> peak(std::max(schedule.virtual_stages, 1), 0);
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>&, const std::vector<int>& pending) {
                   for (size_t c = 0; c < peak.size(); ++c) peak[c] = std::max(peak[c], pending[c]);
                 });
  return peak;
}

double peak_in_flight_bytes(const PipelineSchedule& schedule, int pipeline_rank,
                            const std::vector<double>& activation_bytes,
                            const std::vector<double>& weight_pending_bytes) {
  double peak = 0;
  walk_in_flight(schedule, pipeline_rank,
                 [&](const std::vector<int>& activations, const std::vector<int>& pending) {
                   double bytes = 0;
                   for (size_t c = 0; c < activations.size(); ++c)
                     bytes += activations[c] * activation_bytes.at(c) +
                              pending[c] * weight_pending_bytes.at(c);
                   peak = std::max(peak, bytes);
                 });
  return peak;
}

}  // namespace paraplan
