// schedule_plan_fixture.h: multi-rank training tests over plans written
// around the planner's own schedules (schedule_equivalence_test.cc,
// zero_two_test.cc): a ScheduleCase (schedule kind, mesh, ZeRO stage,
// architecture) becomes a plan of the test model (schema/plan_test_support.h),
// trained kSteps under mpirun with `paraplan launch ... train`, its losses
// compared with the single-rank run's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "parallel_training_fixture.h"
#include "planner/schedule/schedule.h"
#include "schema/plan_test_support.h"

namespace paraplan::testing {

using schema::ScheduleKind;

inline constexpr int kLayers = 8;
inline constexpr int kGlobalBatch = 16, kMicroBatchSize = 2;

struct ScheduleCase {
  std::string name;
  ScheduleKind kind = ScheduleKind::OneForwardOneBackward;
  int pipeline = 1, virtual_stages = 1, data = 1, tensor = 1, zero_stage = 0;
  std::string architecture = "gpt2";
  bool sequence_parallel = false;
  int eval_interval = 1000;  // (past the run: no evaluation)
  schema::DType dtype = schema::DType::Float32;
  bool keep_parameters_gathered = false;  // ZeRO-3, every pipeline rank
  int zero_groups = 1;                    // zero.num_groups
  int zero_layers_per_unit = 1;           // zero.layers_per_unit (ZeRO-2, 3)
  int context = 1;                        // mesh.context_parallel
  int seq_len = 16;
  int document_separator = -1;  // training.data.document_separator
  // 0: the current schema version; an older one writes the streams without
  // ZeRO's unit ops (the runtime adds them, schema/zero_units.h).
  uint32_t schema_version = 0;
};

// The case's plan: the test model (8 layers, so pp 4 x 2 chunks holds one
// layer per virtual stage), global batch 16 in micro-batches of 2, streams
// as test_plans::chunked_stream writes them.
inline test_plans::PlanSpec plan_spec(const ScheduleCase& c) {
  const int m = kGlobalBatch / (kMicroBatchSize * c.data);
  test_plans::PlanSpec spec = test_plans::make_chunked_plan_spec(
      c.pipeline, c.virtual_stages, kLayers, m, c.kind, /*split=*/false);
  const bool llama = c.architecture == "llama";
  spec.architecture = llama ? schema::Architecture::Llama : schema::Architecture::Gpt2;
  spec.vocab_size = 256, spec.seq_len = c.seq_len, spec.d_model = 32, spec.num_heads = 4;
  spec.ffn_size = llama ? 64 : 128;
  spec.num_kv_heads = llama ? 2 : 0;
  spec.tied_embeddings = true;
  spec.micro_batch_size = kMicroBatchSize, spec.num_micro_batches = m;
  spec.global_batch_size = kGlobalBatch;
  spec.learning_rate = 3e-3f, spec.warmup_steps = 2, spec.total_steps = 20, spec.seed = 5;
  spec.eval_interval = c.eval_interval, spec.eval_batches = 2;
  spec.data_parallel = c.data, spec.tensor_parallel = c.tensor;
  spec.sequence_parallel = c.sequence_parallel;
  spec.context_parallel = c.context;
  spec.num_nodes = 1, spec.devices_per_node = c.pipeline * c.data * c.context * c.tensor;
  if (c.document_separator >= 0) {
    spec.has_data = true;  // no datasets: --data names them
    spec.document_separator = c.document_separator;
  }
  spec.zero_stage = c.zero_stage, spec.zero_num_groups = c.zero_groups;
  spec.zero_layers_per_unit = c.zero_layers_per_unit;
  if (c.schema_version != 0) spec.schema_version = c.schema_version, spec.add_zero_unit_ops = false;
  spec.dtype = c.dtype;
  spec.schedule_kind = c.kind;
  return spec;
}

// The case's plan with the planner's schedule for it.
inline std::vector<uint8_t> plan_bytes(const ScheduleCase& c) {
  test_plans::PlanSpec spec = plan_spec(c);
  const int m = spec.num_micro_batches;
  const PipelineSchedule schedule = generate_schedule(c.kind, c.pipeline, m, c.virtual_stages);
  const std::optional<std::string> problem = verify_schedule(schedule);
  EXPECT_FALSE(problem.has_value()) << c.name << ": " << problem.value_or("");
  spec.schedule.clear();
  for (int r = 0; r < c.pipeline; ++r) {
    std::vector<schema::Instruction> stream;
    for (const PipelineInstruction& ins : schedule.stages[r])
      stream.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), 0, ins.micro_batch, -1);
    spec.schedule.push_back({r, true, stream, c.keep_parameters_gathered});
  }
  return test_plans::build_plan(spec);
}

class SchedulePlanTraining : public ParallelTraining {
 protected:
  struct Run {
    std::vector<double> losses, validation_losses;
    std::map<std::string, std::string> checkpoint;
  };

  // Trains the case kSteps with a checkpoint at the end (once per program).
  static const Run& run(const ScheduleCase& c) {
    static std::map<std::string, Run> runs;
    auto found = runs.find(c.name);
    if (found != runs.end()) return found->second;
    const std::string plan_file = *directory_ / (c.name + ".pplan");
    const std::vector<uint8_t> bytes = plan_bytes(c);
    write_file(plan_file, std::string(bytes.begin(), bytes.end()));
    const std::string checkpoints = *directory_ / (c.name + "_checkpoints");
    Run result;
    // The training tokens serve as validation data too: what matters is
    // that every plan evaluates the same samples.
    result.losses = train_plan_file(plan_file, c.name,
                                    "--checkpoint-dir " + checkpoints + " --val-data " +
                                        std::string(*directory_ / "data/train.bin"));
    for (const auto& line : read_json_lines(*directory_ / (c.name + ".jsonl")))
      if (line.contains("val_loss")) result.validation_losses.push_back(line["val_loss"]);
    if (result.losses.size() == static_cast<size_t>(kSteps))
      result.checkpoint = last_checkpoint(checkpoints);
    return runs.emplace(c.name, result).first->second;
  }

  // The case's losses against the single-rank run of its architecture; the
  // largest difference (printed for the closing note).
  static double expect_single_rank_losses(const ScheduleCase& c,
                                          double tolerance = kLossTolerance) {
    const bool bf16 = c.dtype == schema::DType::BFloat16;
    const std::string sequence = c.seq_len == 16 ? "" : "_seq" + std::to_string(c.seq_len);
    const std::string documents =
        c.document_separator < 0 ? "" : "_documents" + std::to_string(c.document_separator);
    const Run& single =
        run({.name = "single_" + c.architecture + (bf16 ? "_bf16" : "") + sequence + documents,
             .architecture = c.architecture,
             .dtype = c.dtype,
             .seq_len = c.seq_len,
             .document_separator = c.document_separator});
    const Run& mine = run(c);
    EXPECT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(mine.losses.size(), single.losses.size()) << c.name;
    if (mine.losses.size() != single.losses.size()) return INFINITY;
    double largest = 0;
    for (size_t i = 0; i < mine.losses.size(); ++i) {
      EXPECT_NEAR(mine.losses[i], single.losses[i], tolerance) << c.name << " step " << i + 1;
      largest = std::max(largest, std::fabs(mine.losses[i] - single.losses[i]));
    }
    std::cout << c.name << ": largest loss difference from one rank " << largest << std::endl;
    return largest;
  }

  // Resumes a copy of `from`'s checkpoints (run first) under `under`'s plan
  // (run first too) to step kSteps + 2: the two steps' losses.
  static std::vector<double> resumed(const ScheduleCase& from, const ScheduleCase& under) {
    const std::string name = from.name + "_then_" + under.name;
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    std::filesystem::remove_all(checkpoints);
    std::filesystem::copy(*directory_ / (from.name + "_checkpoints"), checkpoints,
                          std::filesystem::copy_options::recursive);
    return train_plan_file(*directory_ / (under.name + ".pplan"), name,
                           "--checkpoint-dir " + checkpoints + " --resume", nullptr, "",
                           kSteps + 2);
  }

  // Checkpoints hold whole tensors whatever the plan: `sharded`'s step-5
  // checkpoint goes on under `other`'s plan and back, two more steps each,
  // with the losses of `other`'s run going on from its own.
  static void expect_checkpoints_cross(const ScheduleCase& sharded, const ScheduleCase& other) {
    ASSERT_EQ(run(sharded).losses.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(run(other).losses.size(), static_cast<size_t>(kSteps));
    const std::vector<double> reference = resumed(other, other);
    ASSERT_EQ(reference.size(), 2u);
    for (const auto& [from, under] : {std::pair{sharded, other}, std::pair{other, sharded}}) {
      const std::vector<double> losses = resumed(from, under);
      ASSERT_EQ(losses.size(), reference.size()) << from.name << " -> " << under.name;
      for (size_t i = 0; i < losses.size(); ++i)
        EXPECT_NEAR(losses[i], reference[i], kLossTolerance)
            << from.name << " -> " << under.name << " step " << kSteps + 1 + i;
    }
  }

  // On a GPU: the case trained by its ranks sharing it (CUDA backend, the
  // staged transport, TF32 off) gives its CPU run's losses within tolerance;
  // the largest difference printed for the closing note.
  static void expect_cuda_losses(const ScheduleCase& c, double tolerance) {
    const std::vector<double>& cpu = run(c).losses;
    CommandResult result;
    const std::vector<double> cuda =
        train_plan_file(*directory_ / (c.name + ".pplan"), c.name + "_cuda",
                        "--backend cuda --transport auto", &result, "PARAPLAN_CUDA_TF32=0");
    EXPECT_EQ(result.exit_code, 0) << result.output;
    ASSERT_EQ(cuda.size(), cpu.size()) << c.name << "\n" << result.output;
    double largest = 0;
    for (size_t i = 0; i < cuda.size(); ++i) {
      EXPECT_NEAR(cuda[i], cpu[i], tolerance) << c.name << " step " << i + 1;
      largest = std::max(largest, std::fabs(cuda[i] - cpu[i]));
    }
    std::printf("[ figures  ] %s on CUDA: largest loss difference from the CPU run %.3g\n",
                c.name.c_str(), largest);
  }

  static void expect_same_weights(const ScheduleCase& a, const ScheduleCase& b) {
    expect_same_files(a.name, run(a).checkpoint, b.name, run(b).checkpoint);
  }
};

}  // namespace paraplan::testing
