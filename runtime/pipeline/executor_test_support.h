// executor_test_support.h: for the tests that run instruction streams on
// every pipeline rank under mpirun (schedule_executor_test.cc, and
// tests/schedule_equivalence_test.cc with the planner's schedules): one step
// of this rank's stream over its model chunks, checked against the whole
// model computed in one process: bitwise the same gradients (by tensor name)
// and loss (untied embeddings: nothing is summed across ranks, so only the
// order of independent work differs), and every offset reported through
// gradients_final_from holding its final gradients from that moment on.
#pragma once

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/forwarding_ops.h"
#include "runtime/comm/forwarding_communicator.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/architecture.h"
#include "runtime/model/chunked_stage.h"
#include "runtime/pipeline/schedule_executor.h"
#include "runtime/testing/mpi_test_support.h"
#include "runtime/testing/recording_ops.h"
#include "schema/plan_test_support.h"

namespace paraplan::testing {

inline constexpr int kMicroBatches = 4;  // unless a case needs more (DualPipe-V: 2p)
inline constexpr int kBatch = 2;
// The mean over a step's tokens (the executor config's 8 per sequence).
inline float loss_scale(int micro_batches) {
  return 1.0f / static_cast<float>(micro_batches * kBatch * 8);
}

inline TransformerConfig executor_config(int layers) {
  TransformerConfig config;
  config.vocab_size = 32;
  config.seq_len = 8;
  config.num_layers = layers;
  config.d_model = 16;
  config.num_heads = 2;
  config.ffn_size = 32;
  config.tied_embeddings = false;
  config.init_std = 0.2f;
  return config;
}

// The whole model in this process: its gradients by tensor name and the loss
// sum of the same micro-batches.
struct Reference {
  std::map<std::string, std::vector<float>> gradients;
  double loss_sum = 0;
};

inline Reference whole_model(const TransformerConfig& config, const SampleSource& data,
                             int micro_batches) {
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1);
  MemoryTracker memory(*ops);
  auto layout = make_parameter_layout(config, {0, config.num_layers, true, true});
  auto stage = make_model_stage(
      *layout, *ops, memory,
      ModelStageOptions{.micro_batch_size = kBatch,
                        .num_slots = 1,
                        .recompute = std::vector<RecomputeMode>(config.num_layers)});
  std::vector<float> values(layout->num_elements());
  layout->initialize(values.data(), 3);
  stage->load_parameters(values.data(), values.size());
  for (int mb = 0; mb < micro_batches; ++mb) {
    data.load(mb * kBatch, kBatch, stage->tokens(0), stage->targets(0));
    stage->forward(0, loss_scale(micro_batches));
    stage->backward(0);
  }
  Reference reference;
  reference.loss_sum = stage->take_loss_sum();
  stage->read_gradients(values.data(), values.size());
  for (const ParameterTensor& tensor : layout->tensors())
    reference.gradients[tensor.name].assign(values.begin() + tensor.offset,
                                            values.begin() + tensor.offset + tensor.size);
  return reference;
}

// Where the step is: the index of the instruction running (-1 before the
// first), kept by an observer.
struct StepPosition final : InstructionObserver {
  int instruction = -1;
  void before(const schema::Instruction&) override { ++instruction; }
  void after(const schema::Instruction&) override {}
};

// Ops whose marks are test handles remembering the instruction that last
// recorded them (-1: before the step's first).
class MarkingOps final : public kernels::ForwardingOps {
 public:
  MarkingOps(std::unique_ptr<kernels::Ops> inner, const StepPosition* position)
      : ForwardingOps(std::move(inner)), position_(position) {}
  void* create_mark() override { return &marks_.emplace_back(-2); }
  void record_mark(void* mark) override { *static_cast<int*>(mark) = position_->instruction; }
  void destroy_mark(void*) override {}

 private:
  const StepPosition* position_;
  std::deque<int> marks_;  // stable addresses
};

// Peers that note each posted receive's instruction, buffer_free mark and
// after_send, and each posted send's instruction and the instruction that
// waited on it.
class ReceiveNotingPeers final : public ForwardingPeerToPeer {
 public:
  struct Receive {
    int instruction;
    bool marked;      // given a buffer_free mark
    int mark_points;  // where the mark stood when posted (MarkingOps)
    Posted after_send;
  };
  struct Send {
    int instruction;
    int waited_at = -1;  // -1: not waited on (yet)
  };
  ReceiveNotingPeers(std::unique_ptr<PeerToPeer> inner, const StepPosition* position)
      : ForwardingPeerToPeer(std::move(inner)), position_(position) {}
  Posted post_receive(void* data, size_t count, int from, kernels::DType dtype, int tag,
                      void* buffer_free, Posted after_send) override {
    receives.push_back({position_->instruction, buffer_free != nullptr,
                        buffer_free ? *static_cast<const int*>(buffer_free) : -2, after_send});
    return ForwardingPeerToPeer::post_receive(data, count, from, dtype, tag, buffer_free,
                                              after_send);
  }
  Posted post_send(const void* data, size_t count, int to, kernels::DType dtype, int tag) override {
    const Posted id = ForwardingPeerToPeer::post_send(data, count, to, dtype, tag);
    sends[id] = {position_->instruction};
    return id;
  }
  void wait(Posted transfer) override {
    if (const auto send = sends.find(transfer); send != sends.end())
      send->second.waited_at = position_->instruction;
    ForwardingPeerToPeer::wait(transfer);
  }
  std::vector<Receive> receives;
  std::map<Posted, Send> sends;

 private:
  const StepPosition* position_;
};

// A gradient received into a chunk's one output-gradient buffer (not per
// slot), which every backward of the chunk and its input gradient's send
// use, waits for the latest Backward / BackwardInput of the chunk (its mark)
// and for the chunk's latest input-gradient send if that is still in flight
// (after_send), and for nothing queued after them.
inline void expect_shared_gradient_receive_waits(
    const std::vector<schema::Instruction>& stream,
    const std::map<PeerToPeer::Posted, ReceiveNotingPeers::Send>& sends,
    const ReceiveNotingPeers::Receive& receive, const std::string& what) {
  const int c = stream[receive.instruction].chunk();
  const std::string where = what + ": the receive at instruction " +
                            std::to_string(receive.instruction) + " into chunk " +
                            std::to_string(c) + "'s one output-gradient buffer";
  int last_backward = -1, last_send = -1;
  for (int i = 0; i < receive.instruction; ++i) {
    if (stream[i].chunk() != c) continue;
    const schema::OpCode op = stream[i].op();
    if (op == schema::OpCode::Backward || op == schema::OpCode::BackwardInput) last_backward = i;
    if (op == schema::OpCode::SendGradient) last_send = i;
  }
  ASSERT_TRUE(receive.marked) << where;
  EXPECT_EQ(receive.mark_points, last_backward) << where;
  if (receive.after_send == 0) {
    // No send in flight: none this step, or already waited on.
    for (const auto& [id, send] : sends) {
      if (send.instruction != last_send) continue;
      EXPECT_TRUE(send.waited_at >= 0 && send.waited_at <= receive.instruction) << where;
    }
    return;
  }
  const auto send = sends.find(receive.after_send);
  ASSERT_NE(send, sends.end()) << where << " waits for a send never posted";
  EXPECT_EQ(send->second.instruction, last_send) << where;
  EXPECT_TRUE(send->second.waited_at < 0 || send->second.waited_at > receive.instruction) << where;
}

// A posted receive into a slot may start once the slot's last compute is done,
// and should wait for nothing after it: its mark was last recorded by the
// latest compute instruction of the same chunk and slot before the receive
// (-1, the step's start, for none). A gradient received into a chunk's one
// output-gradient buffer: expect_shared_gradient_receive_waits.
inline void expect_receives_wait_for_their_slot(
    const std::vector<schema::Instruction>& stream,
    const std::vector<ScheduleExecutor::ChunkBuffers>& buffers,
    const std::vector<ReceiveNotingPeers::Receive>& receives,
    const std::map<PeerToPeer::Posted, ReceiveNotingPeers::Send>& sends, const std::string& what) {
  const auto computes = [](schema::OpCode op) {
    return op == schema::OpCode::Forward || op == schema::OpCode::Backward ||
           op == schema::OpCode::BackwardInput || op == schema::OpCode::BackwardWeight;
  };
  for (const ReceiveNotingPeers::Receive& receive : receives) {
    const schema::Instruction& posting = stream[receive.instruction];
    const int c = posting.chunk(), slot = posting.micro_batch() % buffers[c].slots;
    if (posting.op() == schema::OpCode::RecvGradient && !buffers[c].output_gradient_per_slot) {
      expect_shared_gradient_receive_waits(stream, sends, receive, what);
      continue;
    }
    ASSERT_TRUE(receive.marked) << what;
    EXPECT_EQ(receive.after_send, 0u) << what;
    int expected = -1;
    for (int i = 0; i < receive.instruction; ++i)
      if (computes(stream[i].op()) && stream[i].chunk() == c &&
          stream[i].micro_batch() % buffers[c].slots == slot)
        expected = i;
    EXPECT_EQ(receive.mark_points, expected)
        << what << ": the receive at instruction " << receive.instruction << " (chunk " << c
        << ", micro-batch " << posting.micro_batch() << ")";
  }
}

// A slot's activation send is waited on by the slot's backward at the
// latest: full recompute writes that output again.
inline void expect_activation_sends_waited_by_their_backward(
    const std::vector<schema::Instruction>& stream,
    const std::map<PeerToPeer::Posted, ReceiveNotingPeers::Send>& sends, const std::string& what) {
  for (const auto& [id, send] : sends) {
    const schema::Instruction& posting = stream[send.instruction];
    if (posting.op() != schema::OpCode::SendActivation) continue;
    for (size_t i = send.instruction + 1; i < stream.size(); ++i) {
      const bool backward = stream[i].op() == schema::OpCode::Backward ||
                            stream[i].op() == schema::OpCode::BackwardInput;
      if (!backward || stream[i].chunk() != posting.chunk() ||
          stream[i].micro_batch() != posting.micro_batch())
        continue;
      EXPECT_GE(send.waited_at, 0) << what << ": the send at instruction " << send.instruction;
      EXPECT_LE(send.waited_at, static_cast<int>(i))
          << what << ": the send at instruction " << send.instruction
          << " waited on after its backward at " << i;
      break;
    }
  }
}

// Runs one step of this rank's stream over v chunks and micro_batches
// micro-batches and checks it against the whole model, and what each
// receive waits for. recorded: three such steps (the gradients zeroed
// between them) through RecordingOps, so the second records the compute
// steps the executor offers to run_recorded and the third replays them.
inline void expect_whole_model_step(
    const std::vector<schema::Instruction>& stream, int v, const std::string& what,
    schema::ScheduleKind kind = schema::ScheduleKind::OneForwardOneBackward,
    int micro_batches = kMicroBatches, bool recorded = false) {
  const int p = world_size(), r = world_rank(), S = p * v;
  const PipelineLayout pipeline = PipelineLayout::of(kind, p, v);
  const TransformerConfig config = executor_config(2 * S);
  const SyntheticSamples data(config.vocab_size, config.seq_len, 11);
  const Reference reference = whole_model(config, data, micro_batches);

  test_plans::PlanSpec spec = test_plans::make_plan_spec(p, 1, 1, 2 * S, micro_batches);
  spec.schedule[r].instructions = stream;
  const std::vector<uint8_t> bytes = test_plans::build_plan(spec);
  const schema::StageSchedule& schedule =
      *schema::GetPlan(bytes.data())->schedule()->stages()->Get(r);

  StepPosition position;
  std::unique_ptr<kernels::Ops> ops =
      std::make_unique<MarkingOps>(kernels::make_cpu_ops(1), &position);
  RecordingOps* recording = nullptr;
  if (recorded) {
    auto wrapped = std::make_unique<RecordingOps>(std::move(ops));
    recording = wrapped.get();
    ops = std::move(wrapped);
  }
  MemoryTracker memory(*ops);
  const std::vector<ScheduleExecutor::ChunkBuffers> buffers =
      ScheduleExecutor::buffers_needed(schedule, v);
  std::vector<std::unique_ptr<ParameterLayout>> layouts;
  std::vector<ModelStageOptions> chunks;
  for (int c = 0; c < v; ++c) {
    const int s = pipeline.virtual_stage(r, c);
    layouts.push_back(make_parameter_layout(config, {2 * s, 2, s == 0, s == S - 1}));
    // Full recompute on one chunk: its activations must live until its W.
    chunks.push_back(
        {.num_slots = buffers[c].slots,
         .recompute = {c == 0 ? RecomputeMode::Full : RecomputeMode::None, RecomputeMode::None},
         .output_gradient_per_slot = buffers[c].output_gradient_per_slot});
  }
  ChunkedLayout layout(std::move(layouts));
  ChunkedStage stage(layout, *ops, memory,
                     ModelStageOptions{.micro_batch_size = kBatch, .recompute = {}}, chunks);
  std::vector<float> values(layout.num_elements());
  layout.initialize(values.data(), 3);
  stage.load_parameters(values.data(), values.size());

  auto peers = std::make_unique<ReceiveNotingPeers>(MpiPeerToPeer::over_world(), &position);
  const PipelinePeers peer_ranks{.peers = peers.get(),
                                 .previous_stage_rank = r > 0 ? r - 1 : -1,
                                 .next_stage_rank = r + 1 < p ? r + 1 : -1,
                                 .pipeline_rank = r,
                                 .pipeline_size = p,
                                 .first_stage_rank = 0,
                                 .last_stage_rank = p - 1,
                                 .own_rank = r,
                                 .v_shape = pipeline.v_shape()};
  ScheduleExecutor executor(schedule, stage, *ops, micro_batches, 0, peer_ranks);
  for (int step = 0; step < (recorded ? 3 : 1); ++step) {
    if (step > 0) {
      ops->zero_bytes(stage.gradients(), ops->storage_bytes(values.size()));
      position.instruction = -1;
      peers->receives.clear();
      peers->sends.clear();
    }
    // What each reported offset's range held when reported.
    std::vector<std::pair<size_t, std::vector<float>>> reported;
    ExecutorHooks hooks;
    hooks.gradients_final_from = [&](size_t offset) {
      std::vector<float> now(layout.num_elements());
      stage.read_gradients(now.data(), now.size());
      reported.emplace_back(offset, std::vector<float>(now.begin() + offset, now.end()));
    };
    const double loss_sum = executor.run_step(data, 0, loss_scale(micro_batches), hooks, &position);
    EXPECT_FALSE(peers->receives.empty() && r > 0) << what;
    expect_receives_wait_for_their_slot(stream, buffers, peers->receives, peers->sends, what);
    expect_activation_sends_waited_by_their_backward(stream, peers->sends, what);

    stage.read_gradients(values.data(), values.size());
    for (const ParameterTensor& tensor : layout.tensors()) {
      const std::vector<float> mine(values.begin() + tensor.offset,
                                    values.begin() + tensor.offset + tensor.size);
      EXPECT_TRUE(bitwise_equal(mine, reference.gradients.at(tensor.name)))
          << what << ": " << tensor.name << " on rank " << r;
    }
    if (r == pipeline.rank_of(S - 1)) {
      EXPECT_EQ(loss_sum, reference.loss_sum) << what;
    } else {
      EXPECT_EQ(loss_sum, 0.0) << what;
    }
    // Reported offsets fall to 0 and their gradients never changed afterwards;
    // the last chunk's part was reported (not left to the end of the step).
    ASSERT_FALSE(reported.empty()) << what;
    EXPECT_EQ(reported.back().first, 0u) << what;
    EXPECT_GE(reported.front().first, layout.chunk_offset(v - 1)) << what;
    for (size_t i = 0; i < reported.size(); ++i) {
      if (i > 0) {
        EXPECT_LE(reported[i].first, reported[i - 1].first) << what;
      }
      const std::vector<float> final_part(values.begin() + reported[i].first, values.end());
      EXPECT_TRUE(bitwise_equal(final_part, reported[i].second))
          << what << ": gradients from offset " << reported[i].first << " changed after reported";
    }
  }
  if (recording != nullptr) {
    EXPECT_GT(recording->replays(), 0) << what;
    // A graph keeps its buffers' addresses and the keys do not name the
    // stage: another executor (over another stage) must record afresh.
    EXPECT_GT(recording->recorded_keys(), 0u) << what;
    ScheduleExecutor next(schedule, stage, *ops, micro_batches, 0, peer_ranks);
    EXPECT_EQ(recording->recorded_keys(), 0u) << what;
  }
}

}  // namespace paraplan::testing
