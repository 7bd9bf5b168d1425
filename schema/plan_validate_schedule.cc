// plan_validate_schedule.cc: the schedule part of validate_plan: the kind, its
// transfers and chunks, one instruction stream per pipeline rank, and each
// stream checked on its own by the stream checker (stream_check.h, question
// 1), its problems on their fields. Whether the streams together pair and
// finish is asked of all of them at once, by the planner's verifier and the
// runtime (runtime/pipeline/transfer_order.h), not by this file.
#include <algorithm>
#include <string>
#include <vector>

#include "schema/model_limits.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_validate_internal.h"
#include "schema/schedule_kinds.h"
#include "schema/stream_check.h"
#include "schema/zero_stages.h"
#include "schema/zero_units.h"

namespace paraplan::plan_validation {
namespace {

using schema::OpCode;

// Instruction-level problems listed per stage before the rest are only counted,
// so one systematically broken stream does not bury every other message.
constexpr int kMaxInstructionProblemsPerStage = 8;

// One stage's stream checked on its own (stream_check.h), each problem on
// its field: the stream's, or its instruction's.
void check_stage_stream(const schema::StageSchedule& stage, const PipelineLayout& layout,
                        int32_t num_micro_batches, std::vector<bool> needs_load,
                        const std::string& field, Violations& v) {
  const auto& instructions = *stage.instructions();
  int listed = 0, hidden = 0;
  const auto instruction_problem = [&](int64_t at, const std::string& problem) {
    if (listed++ < kMaxInstructionProblemsPerStage)
      v.add(field + ".instructions[" + std::to_string(at) + "]", problem);
    else
      ++hidden;
  };
  // The retired combined ops' field (schema version 8), which a stream
  // never reads.
  for (uint32_t i = 0; i < instructions.size(); ++i)
    if (instructions.Get(i)->peer_micro_batch() != -1)
      instruction_problem(i, std::string(opcode_name(instructions.Get(i)->op())) +
                                 " peer_micro_batch " +
                                 std::to_string(instructions.Get(i)->peer_micro_batch()) +
                                 "; it was used by the combined send-and-receive ops, retired in "
                                 "schema version 8, so it must be -1");
  std::vector<std::string> stream_problems;
  for (const StreamProblem& problem : check_stream(layout, stage.stage(), num_micro_batches,
                                                   stream_ops(instructions), needs_load)) {
    if (problem.instruction >= 0)
      instruction_problem(problem.instruction, problem.text);
    else
      stream_problems.push_back(problem.text);
  }
  if (hidden > 0)
    v.add(field, std::to_string(hidden) +
                     " more instruction problems not listed; fix the ones above first");
  for (const std::string& problem : stream_problems) v.add(field, problem);
}

}  // namespace

int32_t virtual_stages_of(const schema::Plan& plan) {
  const schema::Schedule* schedule = plan.schedule();
  return schedule != nullptr && schedule->virtual_stages() >= 1 &&
                 schedule->virtual_stages() <= kMaxVirtualStages
             ? schedule->virtual_stages()
             : 1;
}

namespace {

// "1f1b (0), gpipe (1), ... and dualpipe-v (5)": every kind, from the catalogue.
std::string valid_kinds() {
  const std::vector<ScheduleKindTraits>& kinds = every_schedule_kind();
  std::string text;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (i > 0) text += i + 1 == kinds.size() ? " and " : ", ";
    text +=
        std::string(kinds[i].name) + " (" + std::to_string(static_cast<int>(kinds[i].kind)) + ")";
  }
  return text;
}

void check_kind_and_transfers(const schema::Schedule& schedule, Violations& v) {
  const schema::ScheduleKind kind = schedule.kind();
  if (std::string(schedule_kind_name(kind)) == "unknown") {
    v.add("schedule.kind", "unknown value " + std::to_string(static_cast<int>(kind)) +
                               "; valid are " + valid_kinds());
  }
  // One transfer model since schema version 8; load_plan lowers older
  // Rendezvous plans before validating them (plan_lowering.h).
  const schema::Transfers transfers = schedule.transfers();
  if (transfers == schema::Transfers::Rendezvous) {
    v.add("schedule.transfers",
          "rendezvous (0), retired in plan schema version 8; plans of version 8 or later use "
          "posted (1) transfers (older plans are lowered when loaded): re-create the plan "
          "with 'paraplan plan'");
  } else if (transfers != schema::Transfers::Posted) {
    v.add("schedule.transfers",
          "unknown value " + std::to_string(static_cast<int>(transfers)) + "; valid is posted (1)");
  }
}

// The chunks per rank against the kind's chunk rule and the pipeline.
void check_virtual_stages(const schema::Plan& plan, const schema::Schedule& schedule,
                          Violations& v) {
  const schema::ScheduleKind kind = schedule.kind();
  const std::string kind_name = schedule_kind_name(kind);
  const int32_t virtual_stages = schedule.virtual_stages();
  const int32_t pipeline_parallel = plan.mesh() != nullptr ? plan.mesh()->pipeline_parallel() : 0;
  if (virtual_stages < 1 || virtual_stages > kMaxVirtualStages) {
    v.add("schedule.virtual_stages", number(virtual_stages) + "; valid are 1.." +
                                         std::to_string(kMaxVirtualStages) +
                                         " model chunks per pipeline rank");
  } else if (v_shaped(kind) && virtual_stages != 2) {
    v.add("schedule.virtual_stages", number(virtual_stages) + " with schedule.kind " + kind_name +
                                         ", which runs two model chunks per pipeline rank in a "
                                         "V; it must be 2");
  } else if (virtual_stages > 1 &&
             (!is_schedule_kind(kind) || schedule_kind_traits(kind).chunks == ChunkRule::kOne)) {
    v.add("schedule.virtual_stages",
          number(virtual_stages) + " with schedule.kind " + kind_name +
              ", which runs one model chunk per pipeline rank; it must be 1, or the kind "
              "interleaved (2)");
  } else if (virtual_stages > 1 && pipeline_parallel == 1) {
    v.add("schedule.virtual_stages",
          number(virtual_stages) +
              " with mesh.pipeline_parallel 1; interleaving needs at least 2 pipeline ranks, so "
              "it must be 1");
  }
}

// ZeRO's unit ops in one rank's stream (zero_units.h): required under ZeRO-2
// and 3 from schema version 10 (older plans get them at load).
void check_zero_unit_ops(const schema::Plan& plan, const schema::StageSchedule& stage_schedule,
                         int rank, const std::string& field, Violations& v) {
  const int zero_stage = plan.zero() != nullptr ? plan.zero()->stage() : 0;
  const auto& instructions = *stage_schedule.instructions();
  const bool has_ops = has_zero_unit_ops(instructions);
  const uint32_t version = plan.header() != nullptr ? plan.header()->schema_version() : 0;
  if (!has_ops && (!shards_gradients(zero_stage) || version < kZeroUnitOpsPlanSchemaVersion))
    return;
  if (!has_ops) {
    v.add(field + ".instructions",
          "no reduce_scatter_gradients or gather_parameters under zero.stage " +
              std::to_string(zero_stage) +
              "; from schema version 10 a ZeRO-2 or ZeRO-3 stream lists its unit ops "
              "(plan.fbs, schema/zero_units.h)");
    return;
  }
  if (plan.model() == nullptr || plan.mesh() == nullptr) return;  // reported on their fields
  const std::string problem =
      zero_unit_ops_problem(stream_instructions(instructions), rank_units(plan, rank), zero_stage);
  if (!problem.empty()) v.add(field + ".instructions", problem);
}

// One stream per pipeline rank, each checked on its own.
void check_stage_streams(const schema::Plan& plan, const schema::Schedule& schedule,
                         Violations& v) {
  const schema::ScheduleKind kind = schedule.kind();
  const int32_t pipeline_parallel = plan.mesh() != nullptr ? plan.mesh()->pipeline_parallel() : 0;
  const int32_t chunks = virtual_stages_of(plan);
  const auto* stage_schedules = schedule.stages();
  if (stage_schedules == nullptr) {
    v.add("schedule.stages", "missing; the plan must give every stage its instruction stream");
    return;
  }
  const auto* stages = plan.stages();
  const int32_t num_stages = pipeline_parallel >= 1 ? pipeline_parallel
                             : stages != nullptr    ? static_cast<int32_t>(stages->size()) / chunks
                                                    : 0;
  // Plan.stages in model order: virtual stage c x p + r is chunk c of rank r.
  const bool stages_match = stages != nullptr && int64_t{num_stages} * chunks == stages->size();
  const int32_t count = static_cast<int32_t>(stage_schedules->size());
  if (count != num_stages) {
    v.add("schedule.stages", count_of(count, "entry", "entries") + ", but the plan has " +
                                 count_of(num_stages, "pipeline stage", "pipeline stages") +
                                 "; it needs one per stage, in order");
  }
  const int32_t num_micro_batches =
      plan.training() != nullptr ? plan.training()->num_micro_batches() : 0;
  for (int32_t i = 0; i < count; ++i) {
    const schema::StageSchedule& stage_schedule = *stage_schedules->Get(i);
    const std::string f = "schedule.stages[" + std::to_string(i) + "]";
    if (stage_schedule.keep_parameters_gathered() &&
        (plan.zero() == nullptr || !shards_parameters(plan.zero()->stage())))
      v.add(f + ".keep_parameters_gathered",
            "true, but zero.stage is " +
                (plan.zero() != nullptr ? number(plan.zero()->stage()) : std::string("missing")) +
                "; only ZeRO-3 gathers parameters (set it false, or zero.stage 3)");
    if (stage_schedule.stage() != i) {
      v.add(f + ".stage", number(stage_schedule.stage()) +
                              "; stage schedules are listed in order, so it must be " +
                              std::to_string(i));
    }
    if (stage_schedule.instructions() == nullptr) {
      v.add(f + ".instructions", "missing; every stage needs an instruction stream");
      continue;
    }
    // Without a valid micro-batch count or stage list the stream cannot be judged;
    // those are reported on their own fields.
    if (num_micro_batches <= 0 || num_micro_batches > kMaxMicroBatches || i >= num_stages) continue;
    if (chunks > 1 && num_stages < 2) continue;  // reported on schedule.virtual_stages
    // Checked before any per-micro-batch bookkeeping, which would otherwise be sized by
    // an unchecked count (a corrupt file could ask for billions of micro-batches).
    const int64_t num_instructions = stage_schedule.instructions()->size();
    if (num_instructions < 2 * int64_t{num_micro_batches} * chunks) {
      v.add(f + ".instructions",
            count_of(num_instructions, "instruction", "instructions") +
                " cannot forward and backward all " + std::to_string(num_micro_batches) +
                " micro-batches (training.num_micro_batches)" +
                (chunks > 1 ? " of its " + std::to_string(chunks) + " chunks" : "") +
                "; each needs at least a forward and a backward");
      continue;
    }
    const PipelineLayout layout = PipelineLayout::of(kind, num_stages, chunks);
    std::vector<bool> needs_load(chunks);
    for (int32_t c = 0; c < chunks; ++c) {
      const int32_t virtual_stage = layout.virtual_stage(i, c);
      needs_load[c] = stages_match ? stages->Get(virtual_stage)->has_embedding() ||
                                         stages->Get(virtual_stage)->has_head()
                                   : virtual_stage == 0 || virtual_stage == num_stages * chunks - 1;
    }
    check_stage_stream(stage_schedule, layout, num_micro_batches, std::move(needs_load), f, v);
    if (stages_match) check_zero_unit_ops(plan, stage_schedule, i, f, v);
  }
}

}  // namespace

void check_schedule(const schema::Plan& plan, Violations& v) {
  const schema::Schedule* schedule = plan.schedule();
  if (schedule == nullptr) {
    v.add("schedule", "missing; the plan must give every stage its instruction stream");
    return;
  }
  check_kind_and_transfers(*schedule, v);
  check_virtual_stages(plan, *schedule, v);
  check_stage_streams(plan, *schedule, v);
}

}  // namespace paraplan::plan_validation
