// plan_test_support.h: builds plan FlatBuffers for tests from a plain, editable
// description (PlanSpec), with hand-written GPipe and 1F1B instruction streams.
//
// Tests start from make_plan_spec(), which is valid by construction, change one
// field, and build_plan() it; this keeps each test's intent to a line. Header-only
// so that other folders' tests can include it without linking anything new.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"
#include "schema/zero_units.h"

namespace paraplan::test_plans {

using schema::Instruction;
using schema::OpCode;

struct StageSpec {
  int32_t index = 0;
  int32_t first_layer = 0;
  int32_t num_layers = 0;
  bool has_embedding = false;
  bool has_head = false;
  std::vector<schema::RecomputeMode> recompute;
};

struct StageScheduleSpec {
  int32_t stage = 0;
  bool has_instructions = true;
  std::vector<Instruction> instructions;
  bool keep_parameters_gathered = false;
};

struct StagePredictionSpec {
  int32_t stage = 0;
  double forward_seconds = 0, backward_seconds = 0, communication_seconds = 0;
  uint64_t weights = 0, gradients = 0, optimizer_state = 0, activations = 0, transient = 0;
  uint64_t transient_reserve = 0;
  bool has_memory = true;  // false drops the breakdown, to test that it is reported missing
};

// Every field of a plan; the has_* flags drop a table to test that it is reported missing.
struct PlanSpec {
  bool has_header = true, has_model = true, has_training = true, has_optimizer = true;
  bool has_mesh = true, has_stages = true, has_zero = true, has_schedule = true;
  bool has_predictions = true;

  uint32_t schema_version = kPlanSchemaVersion;
  // ZeRO-2 and 3 streams without unit ops get them, as the planner writes
  // them (schema/zero_units.h); false writes the streams as given.
  bool add_zero_unit_ops = true;
  std::string task_name = "unit-test";
  std::string planner_version = "0.1.0-test";
  std::vector<std::pair<std::string, std::string>> creation_options = {
      {"planner.memory_constraint", "40"}, {"training.seq_len", "64"}};

  schema::Architecture architecture = schema::Architecture::Gpt2;
  int32_t vocab_size = 512, seq_len = 64, num_layers = 8, d_model = 64, num_heads = 4;
  int32_t ffn_size = 256;
  bool tied_embeddings = true;
  schema::DType dtype = schema::DType::Float32;
  float layernorm_epsilon = 1e-5f, init_std = 0.02f;
  int32_t num_kv_heads = 0;
  float rope_theta = 10000.0f;
  bool qkv_bias = false;

  int32_t global_batch_size = 8, micro_batch_size = 2, num_micro_batches = 4;
  uint64_t seed = 1234;
  int32_t eval_interval = 100, eval_batches = 10;
  uint64_t gradient_bucket_elements = 0;
  // Training.data: written when has_data (train: {paths, weight} per dataset).
  bool has_data = false;
  std::vector<std::pair<std::string, double>> data_train;
  std::string data_validation;
  bool data_shuffle = false;
  uint64_t data_seed = 0;
  float learning_rate = 3e-4f, min_learning_rate = 3e-5f, beta1 = 0.9f, beta2 = 0.95f;
  float epsilon = 1e-8f, weight_decay = 0.1f, grad_clip = 1.0f;
  int32_t warmup_steps = 10, total_steps = 1000;
  schema::LrDecayStyle decay_style = schema::LrDecayStyle::Cosine;
  int32_t wsd_decay_steps = 0;
  schema::WsdDecayStyle wsd_decay_style = schema::WsdDecayStyle::Linear;

  int32_t pipeline_parallel = 1, data_parallel = 1, tensor_parallel = 1;
  int32_t num_nodes = 1, devices_per_node = 1;

  std::vector<StageSpec> stages;
  int32_t zero_stage = 0, zero_num_groups = 1, zero_layers_per_unit = 1;

  schema::ScheduleKind schedule_kind = schema::ScheduleKind::OneForwardOneBackward;
  std::vector<StageScheduleSpec> schedule;
  int32_t virtual_stages = 1;
  schema::Transfers transfers = schema::Transfers::Posted;
  bool sequence_parallel = false;
  int32_t context_parallel = 1;
  int32_t document_separator = -1;  // written with has_data

  double step_seconds = 0.5, bubble_ratio = 0.2, tokens_per_second = 2048, mfu = 0.42;
  std::vector<StagePredictionSpec> stage_predictions;
  std::string cluster_name = "test-cluster";
};

inline Instruction instruction(OpCode op, int32_t micro_batch, int32_t peer_micro_batch = -1,
                               uint8_t chunk = 0) {
  return Instruction(op, chunk, 0, micro_batch, peer_micro_batch);
}

// Index of the first instruction (op, micro_batch) in a stream; throws if absent so a
// test that edits a stream fails loudly when the stream changes shape.
inline size_t find_instruction(const std::vector<Instruction>& stream, OpCode op,
                               int32_t micro_batch) {
  for (size_t i = 0; i < stream.size(); ++i) {
    if (stream[i].op() == op && stream[i].micro_batch() == micro_batch) return i;
  }
  throw std::logic_error(std::string("test stream has no ") + opcode_name(op) + " " +
                         std::to_string(micro_batch));
}

// GPipe: every forward, then every backward, then the step.
inline std::vector<Instruction> gpipe_stream(int32_t stage, int32_t num_stages,
                                             int32_t num_micro_batches, bool loads) {
  const bool first = stage == 0, last = stage == num_stages - 1;
  std::vector<Instruction> out;
  for (int32_t mb = 0; mb < num_micro_batches; ++mb) {
    if (!first) out.push_back(instruction(OpCode::RecvActivation, mb));
    if (loads) out.push_back(instruction(OpCode::LoadMicroBatch, mb));
    out.push_back(instruction(OpCode::Forward, mb));
    if (!last) out.push_back(instruction(OpCode::SendActivation, mb));
  }
  for (int32_t mb = 0; mb < num_micro_batches; ++mb) {
    if (!last) out.push_back(instruction(OpCode::RecvGradient, mb));
    out.push_back(instruction(OpCode::Backward, mb));
    if (!first) out.push_back(instruction(OpCode::SendGradient, mb));
  }
  out.push_back(instruction(OpCode::ReduceGradients, -1));
  out.push_back(instruction(OpCode::OptimizerStep, -1));
  return out;
}

// 1F1B as Megatron-LM runs it: p-s-1 warm-up forwards, then alternating forward and
// backward, then the remaining backwards. rendezvous: as plans before schema
// version 8 wrote it, with the retired combined send-and-receive ops (7, 8).
inline std::vector<Instruction> one_f_one_b_stream(int32_t stage, int32_t num_stages,
                                                   int32_t num_micro_batches, bool loads,
                                                   bool rendezvous = false) {
  const bool first = stage == 0, last = stage == num_stages - 1;
  const int32_t warmup = std::min(num_stages - stage - 1, num_micro_batches);
  const int32_t steady = num_micro_batches - warmup;
  std::vector<Instruction> out;
  const auto forward = [&](int32_t mb) {
    if (loads) out.push_back(instruction(OpCode::LoadMicroBatch, mb));
    out.push_back(instruction(OpCode::Forward, mb));
  };
  for (int32_t mb = 0; mb < warmup; ++mb) {
    if (!first) out.push_back(instruction(OpCode::RecvActivation, mb));
    forward(mb);
    if (!last) out.push_back(instruction(OpCode::SendActivation, mb));
  }
  if (steady > 0 && !first) out.push_back(instruction(OpCode::RecvActivation, warmup));
  for (int32_t i = 0; i < steady; ++i) {
    const int32_t forward_mb = warmup + i, backward_mb = i;
    forward(forward_mb);
    if (!last && rendezvous) {
      out.push_back(instruction(OpCode(7), forward_mb, backward_mb));  // SendActivationRecvGradient
    } else if (!last) {
      out.push_back(instruction(OpCode::SendActivation, forward_mb));
      out.push_back(instruction(OpCode::RecvGradient, backward_mb));
    }
    out.push_back(instruction(OpCode::Backward, backward_mb));
    if (!first && i == steady - 1) {
      out.push_back(instruction(OpCode::SendGradient, backward_mb));
    } else if (!first && rendezvous) {
      out.push_back(
          instruction(OpCode(8), backward_mb, forward_mb + 1));  // SendGradientRecvActivation
    } else if (!first) {
      out.push_back(instruction(OpCode::SendGradient, backward_mb));
      out.push_back(instruction(OpCode::RecvActivation, forward_mb + 1));
    }
  }
  for (int32_t mb = steady; mb < num_micro_batches; ++mb) {
    if (!last) out.push_back(instruction(OpCode::RecvGradient, mb));
    out.push_back(instruction(OpCode::Backward, mb));
    if (!first) out.push_back(instruction(OpCode::SendGradient, mb));
  }
  out.push_back(instruction(OpCode::ReduceGradients, -1));
  out.push_back(instruction(OpCode::OptimizerStep, -1));
  return out;
}

// Every chunk of one pipeline rank, GPipe-like: the forwards of every chunk in
// model order, then the backwards in reverse (Backward, or with split
// BackwardInput followed by BackwardWeight). Virtual stage c x p + r is chunk c
// of rank r; the first virtual stage loads tokens, the last targets.
inline std::vector<Instruction> chunked_stream(int32_t rank, int32_t num_ranks, int32_t chunks,
                                               int32_t num_micro_batches, bool split) {
  const int32_t last = num_ranks * chunks - 1;
  std::vector<Instruction> out;
  for (int32_t c = 0; c < chunks; ++c) {
    const int32_t vs = c * num_ranks + rank;
    const auto chunk = static_cast<uint8_t>(c);
    for (int32_t mb = 0; mb < num_micro_batches; ++mb) {
      if (vs > 0) out.push_back(instruction(OpCode::RecvActivation, mb, -1, chunk));
      if (vs == 0 || vs == last) out.push_back(instruction(OpCode::LoadMicroBatch, mb, -1, chunk));
      out.push_back(instruction(OpCode::Forward, mb, -1, chunk));
      if (vs < last) out.push_back(instruction(OpCode::SendActivation, mb, -1, chunk));
    }
  }
  for (int32_t c = chunks - 1; c >= 0; --c) {
    const int32_t vs = c * num_ranks + rank;
    const auto chunk = static_cast<uint8_t>(c);
    // Every receive first, each into its slot's own buffer: received one at
    // a time into one buffer, two ranks of two chunks wait on each other.
    for (int32_t mb = 0; mb < num_micro_batches && vs < last; ++mb)
      out.push_back(instruction(OpCode::RecvGradient, mb, -1, chunk));
    for (int32_t mb = 0; mb < num_micro_batches; ++mb) {
      out.push_back(instruction(split ? OpCode::BackwardInput : OpCode::Backward, mb, -1, chunk));
      if (vs > 0) out.push_back(instruction(OpCode::SendGradient, mb, -1, chunk));
      if (split) out.push_back(instruction(OpCode::BackwardWeight, mb, -1, chunk));
    }
  }
  out.push_back(instruction(OpCode::ReduceGradients, -1));
  out.push_back(instruction(OpCode::OptimizerStep, -1));
  return out;
}

// The stream with each RecvGradient moved to just before the Backward (or
// BackwardInput) it feeds: received one at a time into the chunk's one
// buffer. chunked_stream's so edited deadlocks with 2 ranks of 2 chunks.
inline std::vector<Instruction> each_gradient_received_at_its_backward(
    std::vector<Instruction> stream) {
  std::vector<Instruction> receives;
  std::erase_if(stream, [&](const Instruction& i) {
    if (i.op() == OpCode::RecvGradient) receives.push_back(i);
    return i.op() == OpCode::RecvGradient;
  });
  for (const Instruction& receive : receives) {
    const auto consumer = std::find_if(stream.begin(), stream.end(), [&](const Instruction& i) {
      return (i.op() == OpCode::Backward || i.op() == OpCode::BackwardInput) &&
             i.chunk() == receive.chunk() && i.micro_batch() == receive.micro_batch();
    });
    stream.insert(consumer, receive);
  }
  return stream;
}

// `count` stages in model order over `layers` layers, split as evenly as
// possible (later stages take the remainder), no recomputation.
inline std::vector<StageSpec> even_stages(int32_t count, int32_t layers) {
  std::vector<StageSpec> stages;
  int32_t next_layer = 0;
  for (int32_t s = 0; s < count; ++s) {
    StageSpec stage;
    stage.index = s;
    stage.first_layer = next_layer;
    stage.num_layers = layers / count + (s >= count - layers % count ? 1 : 0);
    stage.has_embedding = s == 0;
    stage.has_head = s == count - 1;
    stage.recompute.assign(stage.num_layers, schema::RecomputeMode::None);
    next_layer += stage.num_layers;
    stages.push_back(stage);
  }
  return stages;
}

// Violations one per line, indented: for test failure messages.
inline std::string joined(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& line : lines) text += "  " + line + "\n";
  return text;
}

// A valid plan: one node per pipeline stage with dp x tp devices each, layers split
// as evenly as possible (later stages take the remainder), no recomputation.
inline PlanSpec make_plan_spec(
    int32_t pp, int32_t dp, int32_t tp, int32_t layers, int32_t micro_batches,
    schema::ScheduleKind kind = schema::ScheduleKind::OneForwardOneBackward) {
  PlanSpec spec;
  spec.num_layers = layers;
  spec.pipeline_parallel = pp;
  spec.data_parallel = dp;
  spec.tensor_parallel = tp;
  spec.num_nodes = pp;
  spec.devices_per_node = dp * tp;
  spec.num_micro_batches = micro_batches;
  spec.global_batch_size = spec.micro_batch_size * micro_batches * dp;
  spec.schedule_kind = kind;
  spec.stages = even_stages(pp, layers);
  for (int32_t s = 0; s < pp; ++s) {
    const StageSpec& stage = spec.stages[s];

    const bool loads = stage.has_embedding || stage.has_head;
    spec.schedule.push_back({s, true,
                             kind == schema::ScheduleKind::GPipe
                                 ? gpipe_stream(s, pp, micro_batches, loads)
                                 : one_f_one_b_stream(s, pp, micro_batches, loads)});

    StagePredictionSpec predicted;
    predicted.stage = s;
    predicted.forward_seconds = 0.001 * stage.num_layers + 0.0005;
    predicted.backward_seconds = 2 * predicted.forward_seconds;
    predicted.communication_seconds = 0.0002;
    predicted.weights = 25'000'000ull * stage.num_layers;
    predicted.gradients = predicted.weights;
    predicted.optimizer_state = 2 * predicted.weights;
    predicted.activations = 300'000'000ull * (pp - s);
    predicted.transient = 64'000'000ull;
    spec.stage_predictions.push_back(predicted);
  }
  return spec;
}

// A valid plan of pp ranks with `chunks` model chunks each (kind
// Interleaved1F1B when chunks > 1): pp x chunks stages in model order, one
// layer-range each, chunked_stream's instructions, predictions per rank.
inline PlanSpec make_chunked_plan_spec(int32_t pp, int32_t chunks, int32_t layers,
                                       int32_t micro_batches, schema::ScheduleKind kind,
                                       bool split) {
  PlanSpec spec = make_plan_spec(pp, 1, 1, layers, micro_batches, kind);
  spec.virtual_stages = chunks;
  spec.stages = even_stages(pp * chunks, layers);
  spec.schedule.clear();
  for (int32_t r = 0; r < pp; ++r)
    spec.schedule.push_back({r, true, chunked_stream(r, pp, chunks, micro_batches, split)});
  return spec;
}

// A stage's stream as build_plan writes it: with the unit ops ZeRO-2 and 3
// need (add_zero_unit_ops), where the spec asks for them and its stages and
// schedule say which units each chunk holds; else as given.
inline std::vector<Instruction> with_zero_unit_ops(const PlanSpec& spec,
                                                   const StageScheduleSpec& stage) {
  const bool has_ops = std::any_of(stage.instructions.begin(), stage.instructions.end(),
                                   [](const Instruction& i) { return is_zero_unit_op(i.op()); });
  const int chunks = spec.virtual_stages;
  if (!spec.add_zero_unit_ops || has_ops || spec.zero_stage < 2 || spec.zero_stage > 3 ||
      chunks < 1 || spec.pipeline_parallel < 1 || stage.stage < 0 ||
      stage.stage >= spec.pipeline_parallel ||
      spec.stages.size() != static_cast<size_t>(spec.pipeline_parallel) * chunks)
    return stage.instructions;
  const PipelineLayout layout =
      PipelineLayout::of(spec.schedule_kind, spec.pipeline_parallel, chunks);
  std::vector<ChunkUnits> units;
  for (int c = 0; c < chunks; ++c) {
    const StageSpec& chunk = spec.stages[layout.virtual_stage(stage.stage, c)];
    units.push_back(chunk_units(chunk.has_embedding, chunk.has_head, chunk.num_layers,
                                spec.tied_embeddings, std::max(spec.zero_layers_per_unit, 1)));
  }
  for (const Instruction& i : stage.instructions)
    if (i.chunk() >= units.size()) return stage.instructions;
  return add_zero_unit_ops(stage.instructions, units, spec.zero_stage,
                           stage.keep_parameters_gathered);
}

inline std::vector<uint8_t> build_plan(const PlanSpec& spec) {
  namespace fb = flatbuffers;
  fb::FlatBufferBuilder fbb;
  fb::Offset<schema::Header> header;
  if (spec.has_header) {
    std::vector<fb::Offset<schema::KeyValue>> options;
    for (const auto& [key, value] : spec.creation_options) {
      options.push_back(schema::CreateKeyValueDirect(fbb, key.c_str(), value.c_str()));
    }
    header = schema::CreateHeaderDirect(fbb, spec.schema_version, spec.task_name.c_str(),
                                        spec.planner_version.c_str(), &options);
  }
  fb::Offset<schema::Model> model;
  if (spec.has_model) {
    model = schema::CreateModel(fbb, spec.architecture, spec.vocab_size, spec.seq_len,
                                spec.num_layers, spec.d_model, spec.num_heads, spec.ffn_size,
                                spec.tied_embeddings, spec.dtype, spec.layernorm_epsilon,
                                spec.init_std, spec.num_kv_heads, spec.rope_theta,
                                /*rope_scaling_factor=*/0, /*rope_low_freq_factor=*/1,
                                /*rope_high_freq_factor=*/4,
                                /*rope_original_max_positions=*/8192, spec.qkv_bias);
  }
  fb::Offset<schema::Training> training;
  if (spec.has_training) {
    fb::Offset<schema::Optimizer> optimizer;
    if (spec.has_optimizer) {
      optimizer = schema::CreateOptimizer(
          fbb, spec.learning_rate, spec.min_learning_rate, spec.beta1, spec.beta2, spec.epsilon,
          spec.weight_decay, spec.grad_clip, spec.warmup_steps, spec.decay_style, spec.total_steps,
          spec.wsd_decay_steps, spec.wsd_decay_style);
    }
    fb::Offset<schema::Data> data;
    if (spec.has_data) {
      std::vector<fb::Offset<schema::DataSource>> sources;
      for (const auto& [paths, weight] : spec.data_train)
        sources.push_back(schema::CreateDataSourceDirect(fbb, paths.c_str(), weight));
      data = schema::CreateDataDirect(fbb, &sources, spec.data_validation.c_str(),
                                      spec.data_shuffle, spec.data_seed, spec.document_separator);
    }
    training = schema::CreateTraining(
        fbb, spec.global_batch_size, spec.micro_batch_size, spec.num_micro_batches, optimizer,
        spec.seed, spec.eval_interval, spec.eval_batches, spec.gradient_bucket_elements, data);
  }
  fb::Offset<schema::Mesh> mesh;
  if (spec.has_mesh) {
    mesh = schema::CreateMesh(fbb, spec.pipeline_parallel, spec.data_parallel, spec.tensor_parallel,
                              spec.num_nodes, spec.devices_per_node, spec.sequence_parallel,
                              spec.context_parallel);
  }
  fb::Offset<fb::Vector<fb::Offset<schema::Stage>>> stages;
  if (spec.has_stages) {
    std::vector<fb::Offset<schema::Stage>> list;
    for (const StageSpec& stage : spec.stages) {
      list.push_back(schema::CreateStageDirect(fbb, stage.index, stage.first_layer,
                                               stage.num_layers, stage.has_embedding,
                                               stage.has_head, &stage.recompute));
    }
    stages = fbb.CreateVector(list);
  }
  fb::Offset<schema::Zero> zero;
  if (spec.has_zero)
    zero =
        schema::CreateZero(fbb, spec.zero_stage, spec.zero_num_groups, spec.zero_layers_per_unit);
  fb::Offset<schema::Schedule> schedule;
  if (spec.has_schedule) {
    std::vector<fb::Offset<schema::StageSchedule>> list;
    for (const StageScheduleSpec& stage : spec.schedule) {
      const std::vector<Instruction> instructions = with_zero_unit_ops(spec, stage);
      list.push_back(schema::CreateStageScheduleDirect(
          fbb, stage.stage, stage.has_instructions ? &instructions : nullptr,
          stage.keep_parameters_gathered));
    }
    schedule = schema::CreateScheduleDirect(fbb, spec.schedule_kind, &list, spec.virtual_stages,
                                            spec.transfers);
  }
  fb::Offset<schema::Predictions> predictions;
  if (spec.has_predictions) {
    std::vector<fb::Offset<schema::StagePrediction>> list;
    for (const StagePredictionSpec& p : spec.stage_predictions) {
      const uint64_t total =
          p.weights + p.gradients + p.optimizer_state + p.activations + p.transient;
      const auto memory =
          p.has_memory ? schema::CreateStageMemory(fbb, p.weights, p.gradients, p.optimizer_state,
                                                   p.activations, p.transient, total, 0, 0,
                                                   p.transient_reserve)
                       : fb::Offset<schema::StageMemory>();
      list.push_back(schema::CreateStagePrediction(
          fbb, p.stage, p.forward_seconds, p.backward_seconds, p.communication_seconds, memory));
    }
    const auto cluster = schema::CreateClusterDirect(fbb, spec.cluster_name.c_str(), spec.num_nodes,
                                                     spec.devices_per_node, 80'000'000'000ull,
                                                     312e12, 300e9, 2e-6, 25e9, 5e-6);
    predictions = schema::CreatePredictionsDirect(fbb, spec.step_seconds, spec.bubble_ratio,
                                                  spec.tokens_per_second, spec.mfu, &list, cluster);
  }
  schema::FinishPlanBuffer(fbb, schema::CreatePlan(fbb, header, model, training, mesh, stages, zero,
                                                   schedule, predictions));
  return std::vector<uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

// The violations validate_plan finds in the plan spec describes.
inline std::vector<std::string> violations_of(const PlanSpec& spec) {
  const std::vector<uint8_t> bytes = build_plan(spec);
  return validate_plan(*schema::GetPlan(bytes.data()));
}

}  // namespace paraplan::test_plans
