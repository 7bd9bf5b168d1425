// plan_validate_schedule.cc: the schedule part of validate_plan: one instruction
// stream per pipeline rank, and each stream on its own forwarding and
// backwarding every micro-batch exactly once per model chunk (Backward, or
// BackwardInput then BackwardWeight), with its loads, receives and sends on the
// right side of them and one reduce_gradients and optimizer_step at the end. Whether the streams
// together can deadlock is the planner verifier's job, not this file's.
#include <algorithm>
#include <string>
#include <vector>

#include "schema/model_limits.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_validate_internal.h"
#include "schema/schedule_kinds.h"

namespace paraplan::plan_validation {
namespace {

using schema::OpCode;

// Instruction-level problems listed per stage before the rest are only counted,
// so one systematically broken stream does not bury every other message.
constexpr int kMaxInstructionProblemsPerStage = 8;

// "0-3, 5, 7-8" for sorted ids.
std::string id_ranges(const std::vector<int32_t>& ids) {
  std::string text;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!text.empty()) text += ", ";
    text += std::to_string(ids[i]);
    if (j > i) {
      text += '-';
      text += std::to_string(ids[j]);
    }
    i = j + 1;
  }
  return text;
}

// "micro-batch 3 is" or "micro-batches 0-3, 5 are"; of_chunk (" of chunk 1")
// goes before the verb.
std::string micro_batches_subject(const std::vector<int32_t>& ids,
                                  const std::string& of_chunk = "") {
  if (ids.size() == 1) return "micro-batch " + std::to_string(ids[0]) + of_chunk + " is";
  return "micro-batches " + id_ranges(ids) + of_chunk + " are";
}

bool is_known(OpCode op) {
  return std::string(opcode_name(op)) != "unknown";
}

// Where each event of one micro-batch happens in a stage's stream (instruction indices).
// backward: Backward or BackwardInput (the input gradient); weight:
// BackwardWeight; full: Backward.
struct MicroBatchEvents {
  std::vector<int64_t> load, forward, backward, weight, full;
  std::vector<int64_t> recv_activation, send_activation, recv_gradient, send_gradient;
};

// Checks one pipeline rank's instruction stream on its own, per model chunk.
class StageStreamChecker {
 public:
  // needs_load: per chunk, whether it holds the embedding or the head.
  StageStreamChecker(int32_t stage, const PipelineLayout& layout, int32_t num_micro_batches,
                     std::vector<bool> needs_load, Violations& v)
      : layout_(layout),
        stage_(stage),
        num_stages_(layout.ranks()),
        virtual_stages_(layout.chunks()),
        num_micro_batches_(num_micro_batches),
        needs_load_(std::move(needs_load)),
        v_(v),
        field_("schedule.stages[" + std::to_string(stage) + "]"),
        events_(layout.chunks(), std::vector<MicroBatchEvents>(num_micro_batches)) {}

  void check(const flatbuffers::Vector<const schema::Instruction*>& instructions) {
    for (int64_t pos = 0; pos < instructions.size(); ++pos) record(pos, *instructions.Get(pos));
    if (hidden_problems_ > 0) {
      v_.add(field_, std::to_string(hidden_problems_) +
                         " more instruction problems not listed; fix the ones above first");
    }
    for (int32_t c = 0; c < virtual_stages_; ++c) check_micro_batches(c);
    check_step_ops(instructions.size());
  }

 private:
  bool in_range(int32_t mb) const { return mb >= 0 && mb < num_micro_batches_; }
  std::string valid_range() const {
    return "0.." + std::to_string(num_micro_batches_ - 1) + " (training.num_micro_batches " +
           std::to_string(num_micro_batches_) + ")";
  }

  void instruction_problem(int64_t pos, const std::string& problem) {
    if (listed_problems_ < kMaxInstructionProblemsPerStage) {
      v_.add(field_ + ".instructions[" + std::to_string(pos) + "]", problem);
      ++listed_problems_;
    } else {
      ++hidden_problems_;
    }
  }

  void record(int64_t pos, const schema::Instruction& ins) {
    const OpCode op = ins.op();
    if (!is_known(op)) {
      instruction_problem(pos, "op: unknown value " + std::to_string(static_cast<int>(op)) +
                                   "; valid are 0 (load_micro_batch) to 6 (recv_gradient) and 9 "
                                   "(reduce_gradients) to 12 (backward_weight)");
      return;
    }
    const std::string name = opcode_name(op);
    if (ins.chunk() >= virtual_stages_) {
      instruction_problem(
          pos, name + " chunk " + std::to_string(ins.chunk()) + " is out of range; valid are 0.." +
                   std::to_string(virtual_stages_ - 1) + " (schedule.virtual_stages " +
                   std::to_string(virtual_stages_) + ")");
      return;
    }
    const int32_t chunk = ins.chunk();
    // Position in model order (pipeline_layout.h).
    const int64_t virtual_stage = layout_.virtual_stage(stage_, chunk);
    const int64_t last_virtual_stage = int64_t{num_stages_} * virtual_stages_ - 1;
    const int32_t mb = ins.micro_batch(), peer = ins.peer_micro_batch();
    const bool step_level = op == OpCode::ReduceGradients || op == OpCode::OptimizerStep;
    // Step-level ops act on no micro-batch; -1 and any valid index are both accepted.
    if (step_level ? (mb != -1 && !in_range(mb)) : !in_range(mb)) {
      instruction_problem(pos, name + " micro_batch " + std::to_string(mb) +
                                   " is out of range; valid are " + valid_range());
      return;
    }
    if (peer != -1) {
      instruction_problem(pos, name + " peer_micro_batch " + std::to_string(peer) +
                                   "; it was used by the combined send-and-receive ops, retired "
                                   "in schema version 8, so it must be -1");
    }
    const bool talks_to_previous = op == OpCode::RecvActivation || op == OpCode::SendGradient;
    const bool talks_to_next = op == OpCode::SendActivation || op == OpCode::RecvGradient;
    if (talks_to_previous && virtual_stage == 0) {
      instruction_problem(pos,
                          name + (virtual_stages_ > 1 ? " on chunk 0 of stage 0" : " on stage 0") +
                              ", which has no previous stage");
      return;
    }
    if (talks_to_next && virtual_stage == last_virtual_stage) {
      instruction_problem(pos, name +
                                   (virtual_stages_ > 1 ? " on the last chunk of the last stage ("
                                                        : " on the last stage (") +
                                   std::to_string(stage_) + "), which has no next stage");
      return;
    }
    std::vector<MicroBatchEvents>& events_ = this->events_[chunk];
    switch (op) {
      case OpCode::LoadMicroBatch:
        events_[mb].load.push_back(pos);
        break;
      case OpCode::Forward:
        events_[mb].forward.push_back(pos);
        break;
      case OpCode::Backward:
        events_[mb].backward.push_back(pos);
        events_[mb].full.push_back(pos);
        break;
      case OpCode::BackwardInput:
        events_[mb].backward.push_back(pos);
        break;
      case OpCode::BackwardWeight:
        events_[mb].weight.push_back(pos);
        break;
      case OpCode::SendActivation:
        events_[mb].send_activation.push_back(pos);
        break;
      case OpCode::RecvActivation:
        events_[mb].recv_activation.push_back(pos);
        break;
      case OpCode::SendGradient:
        events_[mb].send_gradient.push_back(pos);
        break;
      case OpCode::RecvGradient:
        events_[mb].recv_gradient.push_back(pos);
        break;
      case OpCode::ReduceGradients:
        reduce_at_.push_back(pos);
        break;
      case OpCode::OptimizerStep:
        step_at_.push_back(pos);
        break;
    }
  }

  // One event kind of every micro-batch: how often it must happen and where
  // relative to the micro-batch's forward or backward.
  struct EventRule {
    std::vector<int64_t> MicroBatchEvents::*events;
    bool required;
    const char* missing;                             // "never forwarded"
    const char* repeated;                            // "forwarded more than once"
    std::vector<int64_t> MicroBatchEvents::*anchor;  // nullptr: no ordering rule
    bool before_anchor;                              // must precede the anchor
    const char* misordered;                          // "loaded after its forward"
    std::string fix;
  };

  void apply(int32_t chunk, const EventRule& rule) {
    std::vector<int32_t> missing, repeated, misordered;
    for (int32_t mb = 0; mb < num_micro_batches_; ++mb) {
      const MicroBatchEvents& e = events_[chunk][mb];
      const auto& at = e.*(rule.events);
      if (at.empty()) {
        if (rule.required) missing.push_back(mb);
      } else if (at.size() > 1) {
        repeated.push_back(mb);
      } else if (rule.anchor != nullptr && (e.*(rule.anchor)).size() == 1) {
        const int64_t anchor = (e.*(rule.anchor))[0];
        if (rule.before_anchor ? at[0] > anchor : at[0] < anchor) misordered.push_back(mb);
      }
    }
    const std::string of_chunk =
        virtual_stages_ > 1 ? " of chunk " + std::to_string(chunk) : std::string();
    const auto report = [&](const std::vector<int32_t>& ids, const char* what) {
      if (!ids.empty())
        v_.add(field_, micro_batches_subject(ids, of_chunk) + " " + what + "; " + rule.fix);
    };
    report(missing, rule.missing);
    report(repeated, rule.repeated);
    report(misordered, rule.misordered);
  }

  void check_micro_batches(int32_t c) {
    using E = MicroBatchEvents;
    const std::string each = "each of micro-batches " + valid_range();
    const std::string stage =
        (virtual_stages_ > 1 ? "chunk " + std::to_string(c) + " of stage " : "stage ") +
        std::to_string(stage_);
    const int64_t virtual_stage = layout_.virtual_stage(stage_, c);
    const bool has_previous = virtual_stage > 0;
    const bool has_next = virtual_stage < int64_t{num_stages_} * virtual_stages_ - 1;
    const bool needs_load = needs_load_[c];
    const auto apply = [&](const EventRule& rule) { this->apply(c, rule); };
    apply({&E::forward, true, "never forwarded", "forwarded more than once", nullptr, false, "",
           each + " needs exactly one forward"});
    apply({&E::backward, true, "never backwarded", "backwarded more than once", &E::forward, false,
           "backwarded before its forward",
           each + " needs exactly one backward (or backward_input), after its forward"});
    // Split backward: a micro-batch whose input gradient came from
    // backward_input needs one backward_weight after it; one from backward none.
    std::vector<int32_t> weight_missing, weight_extra, weight_early;
    for (int32_t mb = 0; mb < num_micro_batches_; ++mb) {
      const MicroBatchEvents& e = events_[c][mb];
      const bool split = e.backward.size() == 1 && e.full.empty();
      if (split && e.weight.empty()) weight_missing.push_back(mb);
      if (e.weight.size() > (split ? 1u : 0u)) weight_extra.push_back(mb);
      if (split && e.weight.size() == 1 && e.weight[0] < e.backward[0]) weight_early.push_back(mb);
    }
    const std::string of_chunk = virtual_stages_ > 1 ? " of chunk " + std::to_string(c) : "";
    const std::string weight_fix =
        "a micro-batch backwarded by backward_input needs exactly one backward_weight after it, "
        "one backwarded by backward none";
    if (!weight_missing.empty())
      v_.add(field_, micro_batches_subject(weight_missing, of_chunk) +
                         " never given its backward_weight; " + weight_fix);
    if (!weight_extra.empty())
      v_.add(field_, micro_batches_subject(weight_extra, of_chunk) +
                         " given too many backward_weight; " + weight_fix);
    if (!weight_early.empty())
      v_.add(field_, micro_batches_subject(weight_early, of_chunk) +
                         " given its backward_weight before its backward_input; " + weight_fix);
    apply(
        {&E::load, needs_load, "never loaded", "loaded more than once", &E::forward, true,
         "loaded after its forward",
         (needs_load ? stage + " holds the embedding or the head, so it must " : "a stage must ") +
             "load_micro_batch each micro-batch once, before its forward"});
    if (has_previous) {
      apply({&E::recv_activation, true, "never received from the previous stage",
             "received from the previous stage more than once", &E::forward, true,
             "received after its forward",
             stage + " must recv_activation once before each forward"});
      apply({&E::send_gradient, true, "never sent back to the previous stage",
             "sent back to the previous stage more than once", &E::backward, false,
             "sent back before its backward",
             stage + " must send_gradient once after each backward"});
    }
    if (has_next) {
      apply({&E::send_activation, true, "never sent to the next stage",
             "sent to the next stage more than once", &E::forward, false, "sent before its forward",
             stage + " must send_activation once after each forward"});
      apply({&E::recv_gradient, true, "never given its gradient by the next stage",
             "given its gradient by the next stage more than once", &E::backward, true,
             "given its gradient after its backward",
             stage + " must recv_gradient once before each backward"});
    }
  }

  void check_step_ops(int64_t num_instructions) {
    if (reduce_at_.size() != 1) {
      v_.add(field_, count_of(reduce_at_.size(), "reduce_gradients instruction",
                              "reduce_gradients instructions") +
                         "; each stage needs exactly one, after its last backward");
    }
    if (step_at_.size() != 1) {
      v_.add(field_, count_of(step_at_.size(), "optimizer_step instruction",
                              "optimizer_step instructions") +
                         "; each stage needs exactly one, as its last instruction");
    }
    int64_t last_backward = -1;
    for (const auto& chunk : events_)
      for (const MicroBatchEvents& e : chunk) {
        for (int64_t pos : e.backward) last_backward = std::max(last_backward, pos);
        for (int64_t pos : e.weight) last_backward = std::max(last_backward, pos);
      }
    if (reduce_at_.size() == 1 && reduce_at_[0] < last_backward) {
      v_.add(field_ + ".instructions[" + std::to_string(reduce_at_[0]) + "]",
             "reduce_gradients comes before the backward at instructions[" +
                 std::to_string(last_backward) + "]; it must follow every backward");
    }
    if (step_at_.size() == 1 && step_at_[0] != num_instructions - 1) {
      v_.add(field_ + ".instructions[" + std::to_string(step_at_[0]) + "]",
             "optimizer_step is not the last instruction (of " + std::to_string(num_instructions) +
                 "); it must come last, after reduce_gradients");
    }
  }

  const PipelineLayout layout_;
  const int32_t stage_, num_stages_, virtual_stages_, num_micro_batches_;
  const std::vector<bool> needs_load_;
  Violations& v_;
  const std::string field_;
  std::vector<std::vector<MicroBatchEvents>> events_;  // [chunk][micro-batch]
  std::vector<int64_t> reduce_at_, step_at_;
  int listed_problems_ = 0, hidden_problems_ = 0;
};

// A link between two chunks of one rank (ZB-V's turn) is a local copy: its
// Send must be directly followed by its Recv (plan.fbs Transfers).
void check_local_hand_offs(const flatbuffers::Vector<const schema::Instruction*>& instructions,
                           int32_t rank, const PipelineLayout& layout, const std::string& field,
                           Violations& v) {
  for (uint32_t i = 0; i < instructions.size(); ++i) {
    const schema::Instruction& send = *instructions.Get(i);
    const bool activation = send.op() == OpCode::SendActivation;
    if (!activation && send.op() != OpCode::SendGradient) continue;
    if (send.chunk() >= layout.chunks()) continue;  // reported by the stream check
    const int to = layout.local_neighbour(rank, send.chunk(), activation);
    if (to < 0) continue;
    const OpCode receive = activation ? OpCode::RecvActivation : OpCode::RecvGradient;
    const bool followed = i + 1 < instructions.size() && instructions.Get(i + 1)->op() == receive &&
                          instructions.Get(i + 1)->chunk() == to &&
                          instructions.Get(i + 1)->micro_batch() == send.micro_batch();
    if (!followed)
      v.add(field + ".instructions[" + std::to_string(i) + "]",
            std::string(opcode_name(send.op())) + " of micro-batch " +
                std::to_string(send.micro_batch()) + " goes to chunk " + std::to_string(to) +
                " of the same rank, a local copy: the next instruction must be its " +
                opcode_name(receive) + " (chunk " + std::to_string(to) + ")");
  }
}

}  // namespace

int32_t virtual_stages_of(const schema::Plan& plan) {
  const schema::Schedule* schedule = plan.schedule();
  return schedule != nullptr && schedule->virtual_stages() >= 1 &&
                 schedule->virtual_stages() <= kMaxVirtualStages
             ? schedule->virtual_stages()
             : 1;
}

void check_schedule(const schema::Plan& plan, Violations& v) {
  const schema::Schedule* schedule = plan.schedule();
  if (schedule == nullptr) {
    v.add("schedule", "missing; the plan must give every stage its instruction stream");
    return;
  }
  const schema::ScheduleKind kind = schedule->kind();
  const std::string kind_name = schedule_kind_name(kind);
  if (kind_name == "unknown") {
    v.add("schedule.kind", "unknown value " + std::to_string(static_cast<int>(kind)) +
                               "; valid are 1f1b (0), gpipe (1), interleaved (2), zb-h1 (3), "
                               "zb-v (4) and dualpipe-v (5)");
  }
  // One transfer model since schema version 8; load_plan lowers older
  // Rendezvous plans before validating them (plan_lowering.h).
  const schema::Transfers transfers = schedule->transfers();
  if (transfers == schema::Transfers::Rendezvous) {
    v.add("schedule.transfers",
          "rendezvous (0), retired in plan schema version 8; plans of version 8 or later use "
          "posted (1) transfers (older plans are lowered when loaded): re-create the plan "
          "with 'paraplan plan'");
  } else if (transfers != schema::Transfers::Posted) {
    v.add("schedule.transfers",
          "unknown value " + std::to_string(static_cast<int>(transfers)) + "; valid is posted (1)");
  }
  const int32_t virtual_stages = schedule->virtual_stages();
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
  const int32_t chunks = virtual_stages_of(plan);
  const auto* stage_schedules = schedule->stages();
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
    StageStreamChecker(i, layout, num_micro_batches, std::move(needs_load), v)
        .check(*stage_schedule.instructions());
    if (layout.v_shape()) check_local_hand_offs(*stage_schedule.instructions(), i, layout, f, v);
  }
}

}  // namespace paraplan::plan_validation
