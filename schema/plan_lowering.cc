// plan_lowering.cc: Rendezvous plans (before schema version 8) lowered to
// Posted transfers, and ZeRO-2/3 plans before version 10 given their unit
// ops, at load (plan_lowering.h).
#include "schema/plan_lowering.h"

#include <memory>

#include "schema/plan_io.h"
#include "schema/zero_stages.h"
#include "schema/zero_units.h"

namespace paraplan {

using schema::Instruction;
using schema::OpCode;

bool has_rendezvous_transfers_to_lower(const schema::Plan& plan) {
  return plan.header() != nullptr &&
         plan.header()->schema_version() < kPostedOnlyPlanSchemaVersion &&
         plan.schedule() != nullptr &&
         plan.schedule()->transfers() == schema::Transfers::Rendezvous;
}

namespace {

// One stream with each combined op split into its send and its receive;
// every other instruction as it was (a stray peer_micro_batch stays for the
// validator to name).
std::vector<Instruction> lowered_stream(const std::vector<Instruction>& stream) {
  std::vector<Instruction> lowered;
  lowered.reserve(stream.size() + stream.size() / 2);
  for (const Instruction& ins : stream) {
    const int op = static_cast<int>(ins.op());
    if (op == kRetiredSendActivationRecvGradient) {
      lowered.emplace_back(OpCode::SendActivation, ins.chunk(), 0, ins.micro_batch(), -1);
      lowered.emplace_back(OpCode::RecvGradient, ins.chunk(), 0, ins.peer_micro_batch(), -1);
    } else if (op == kRetiredSendGradientRecvActivation) {
      lowered.emplace_back(OpCode::SendGradient, ins.chunk(), 0, ins.micro_batch(), -1);
      lowered.emplace_back(OpCode::RecvActivation, ins.chunk(), 0, ins.peer_micro_batch(), -1);
    } else {
      lowered.push_back(ins);
    }
  }
  return lowered;
}

}  // namespace

std::vector<uint8_t> lower_rendezvous_plan(const schema::Plan& plan) {
  std::unique_ptr<schema::PlanT> object(plan.UnPack());
  if (object->schedule) {
    object->schedule->transfers = schema::Transfers::Posted;
    for (std::unique_ptr<schema::StageScheduleT>& stage : object->schedule->stages)
      if (stage) stage->instructions = lowered_stream(stage->instructions);
  }
  flatbuffers::FlatBufferBuilder builder;
  schema::FinishPlanBuffer(builder, schema::Plan::Pack(builder, object.get()));
  return {builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize()};
}

bool has_zero_unit_ops_to_add(const schema::Plan& plan) {
  if (plan.header() == nullptr || plan.zero() == nullptr || plan.schedule() == nullptr ||
      plan.header()->schema_version() >= kZeroUnitOpsPlanSchemaVersion ||
      !shards_gradients(plan.zero()->stage()))
    return false;
  for (const schema::StageSchedule* stage : *plan.schedule()->stages())
    if (has_zero_unit_ops(*stage->instructions())) return false;
  return true;
}

std::vector<uint8_t> add_plan_zero_unit_ops(const schema::Plan& plan) {
  std::unique_ptr<schema::PlanT> object(plan.UnPack());
  const int zero_stage = plan.zero()->stage();
  for (std::unique_ptr<schema::StageScheduleT>& stage : object->schedule->stages)
    stage->instructions = add_zero_unit_ops(stage->instructions, rank_units(plan, stage->stage),
                                            zero_stage, stage->keep_parameters_gathered);
  flatbuffers::FlatBufferBuilder builder;
  schema::FinishPlanBuffer(builder, schema::Plan::Pack(builder, object.get()));
  return {builder.GetBufferPointer(), builder.GetBufferPointer() + builder.GetSize()};
}

}  // namespace paraplan
