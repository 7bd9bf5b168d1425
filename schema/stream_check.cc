// stream_check.cc: question 1 of stream_check.h, one rank's stream on its
// own: per chunk and micro-batch, where each event happens (load, receive,
// forward, send, gradient received, backward, weight gradient, gradient
// sent), each checked against its rule; the step's two ops; local hand-offs.
#include "schema/stream_check.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "schema/plan_io.h"
#include "schema/zero_units.h"

namespace paraplan {
namespace {

using schema::OpCode;

// "1 entry", "3 entries".
std::string count_of(int64_t n, const char* singular, const char* plural) {
  return std::to_string(n) + " " + (n == 1 ? singular : plural);
}

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
class StreamChecker {
 public:
  // needs_load: per chunk, whether it holds the embedding or the head.
  StreamChecker(int32_t stage, const PipelineLayout& layout, int32_t num_micro_batches,
                std::vector<bool> needs_load)
      : layout_(layout),
        stage_(stage),
        num_stages_(layout.ranks()),
        virtual_stages_(layout.chunks()),
        num_micro_batches_(num_micro_batches),
        needs_load_(std::move(needs_load)),
        events_(layout.chunks(), std::vector<MicroBatchEvents>(num_micro_batches)) {}

  std::vector<StreamProblem> check(const StreamOps& stream) {
    for (int64_t pos = 0; pos < static_cast<int64_t>(stream.size()); ++pos)
      record(pos, stream[pos]);
    for (int32_t c = 0; c < virtual_stages_; ++c) check_micro_batches(c);
    check_step_ops(stream.size());
    check_local_hand_offs(stream);
    return std::move(problems_);
  }

 private:
  bool in_range(int32_t mb) const { return mb >= 0 && mb < num_micro_batches_; }
  std::string valid_range() const {
    return "0.." + std::to_string(num_micro_batches_ - 1) + " (training.num_micro_batches " +
           std::to_string(num_micro_batches_) + ")";
  }

  void instruction_problem(int64_t pos, const std::string& problem) {
    problems_.push_back({pos, problem});
  }
  void stream_problem(const std::string& problem) { problems_.push_back({-1, problem}); }

  void record(int64_t pos, const StreamOp& ins) {
    const OpCode op = ins.op;
    if (!is_known(op)) {
      instruction_problem(pos, "op: unknown value " + std::to_string(static_cast<int>(op)) +
                                   "; valid are 0 (load_micro_batch) to 6 (recv_gradient) and 9 "
                                   "(reduce_gradients) to 15 (reduce_scatter_gradients)");
      return;
    }
    // ZeRO's unit ops move no micro-batch: zero_units.h checks them.
    if (is_zero_unit_op(op)) return;
    const std::string name = opcode_name(op);
    if (ins.chunk < 0 || ins.chunk >= virtual_stages_) {
      instruction_problem(
          pos, name + " chunk " + std::to_string(ins.chunk) + " is out of range; valid are 0.." +
                   std::to_string(virtual_stages_ - 1) + " (schedule.virtual_stages " +
                   std::to_string(virtual_stages_) + ")");
      return;
    }
    const int32_t chunk = ins.chunk;
    // Position in model order (pipeline_layout.h).
    const int64_t virtual_stage = layout_.virtual_stage(stage_, chunk);
    const int64_t last_virtual_stage = int64_t{num_stages_} * virtual_stages_ - 1;
    const int32_t mb = ins.micro_batch;
    const bool step_level = op == OpCode::ReduceGradients || op == OpCode::OptimizerStep;
    // Step-level ops act on no micro-batch; -1 and any valid index are both accepted.
    if (step_level ? (mb != -1 && !in_range(mb)) : !in_range(mb)) {
      instruction_problem(pos, name + " micro_batch " + std::to_string(mb) +
                                   " is out of range; valid are " + valid_range());
      return;
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
        if (!needs_load_[chunk])
          instruction_problem(
              pos, name + " on " +
                       (virtual_stages_ > 1 ? "chunk " + std::to_string(chunk) + " of stage "
                                            : std::string("stage ")) +
                       std::to_string(stage_) +
                       ", which holds neither the embedding nor the head; only "
                       "those load micro-batches");
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
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
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
        stream_problem(micro_batches_subject(ids, of_chunk) + " " + what + "; " + rule.fix);
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
      stream_problem(micro_batches_subject(weight_missing, of_chunk) +
                     " never given its backward_weight; " + weight_fix);
    if (!weight_extra.empty())
      stream_problem(micro_batches_subject(weight_extra, of_chunk) +
                     " given too many backward_weight; " + weight_fix);
    if (!weight_early.empty())
      stream_problem(micro_batches_subject(weight_early, of_chunk) +
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
      stream_problem(count_of(reduce_at_.size(), "reduce_gradients instruction",
                              "reduce_gradients instructions") +
                     "; each stage needs exactly one, after its last backward");
    }
    if (step_at_.size() != 1) {
      stream_problem(
          count_of(step_at_.size(), "optimizer_step instruction", "optimizer_step instructions") +
          "; each stage needs exactly one, as its last instruction");
    }
    int64_t last_backward = -1, last_transfer = -1;
    for (const auto& chunk : events_)
      for (const MicroBatchEvents& e : chunk) {
        for (int64_t pos : e.backward) last_backward = std::max(last_backward, pos);
        for (int64_t pos : e.weight) last_backward = std::max(last_backward, pos);
        for (const auto* transfers :
             {&e.recv_activation, &e.send_activation, &e.recv_gradient, &e.send_gradient})
          for (int64_t pos : *transfers) last_transfer = std::max(last_transfer, pos);
      }
    // The executor waits for every transfer of the step at reduce_gradients
    // (so the next step may write the buffers again): none may come after.
    if (reduce_at_.size() == 1 && reduce_at_[0] < last_transfer) {
      instruction_problem(last_transfer,
                          "a pipeline transfer after reduce_gradients (at instructions[" +
                              std::to_string(reduce_at_[0]) +
                              "]); every send and receive of the step must come before it");
    }
    if (reduce_at_.size() == 1 && reduce_at_[0] < last_backward) {
      instruction_problem(reduce_at_[0],
                          "reduce_gradients comes before the backward at "
                          "instructions[" +
                              std::to_string(last_backward) + "]; it must follow every backward");
    }
    if (step_at_.size() == 1 && step_at_[0] != num_instructions - 1) {
      instruction_problem(step_at_[0], "optimizer_step is not the last instruction (of " +
                                           std::to_string(num_instructions) +
                                           "); it must come last, after reduce_gradients");
    }
  }

  // A link between two chunks of one rank (ZB-V's turn) is a local copy: its
  // Send must be directly followed by its Recv (plan.fbs Transfers).
  void check_local_hand_offs(const StreamOps& stream) {
    for (size_t i = 0; i < stream.size(); ++i) {
      const StreamOp& send = stream[i];
      const bool activation = send.op == OpCode::SendActivation;
      if (!activation && send.op != OpCode::SendGradient) continue;
      if (send.chunk < 0 || send.chunk >= layout_.chunks()) continue;  // reported above
      const int to = layout_.local_neighbour(stage_, send.chunk, activation);
      if (to < 0) continue;
      const OpCode receive = activation ? OpCode::RecvActivation : OpCode::RecvGradient;
      const bool followed = i + 1 < stream.size() && stream[i + 1].op == receive &&
                            stream[i + 1].chunk == to &&
                            stream[i + 1].micro_batch == send.micro_batch;
      if (!followed)
        instruction_problem(
            static_cast<int64_t>(i),
            std::string(opcode_name(send.op)) + " of micro-batch " +
                std::to_string(send.micro_batch) + " goes to chunk " + std::to_string(to) +
                " of the same rank, a local copy: the next instruction must be its " +
                opcode_name(receive) + " (chunk " + std::to_string(to) + ")");
    }
  }

  const PipelineLayout layout_;
  const int32_t stage_, num_stages_, virtual_stages_, num_micro_batches_;
  const std::vector<bool> needs_load_;
  std::vector<std::vector<MicroBatchEvents>> events_;  // [chunk][micro-batch]
  std::vector<int64_t> reduce_at_, step_at_;
  std::vector<StreamProblem> problems_;
};

}  // namespace

StreamOps stream_ops(const flatbuffers::Vector<const schema::Instruction*>& instructions) {
  StreamOps ops;
  ops.reserve(instructions.size());
  for (const schema::Instruction* ins : instructions)
    ops.push_back({ins->op(), ins->micro_batch(), ins->chunk()});
  return ops;
}

std::vector<StreamProblem> check_stream(const PipelineLayout& layout, int rank,
                                        int num_micro_batches, const StreamOps& stream,
                                        const std::vector<bool>& needs_load) {
  std::vector<bool> loads = needs_load;
  if (loads.empty())
    for (int c = 0; c < layout.chunks(); ++c) {
      const int vs = layout.virtual_stage(rank, c);
      loads.push_back(vs == 0 || vs == layout.last_virtual_stage());
    }
  return StreamChecker(rank, layout, num_micro_batches, std::move(loads)).check(stream);
}

}  // namespace paraplan
