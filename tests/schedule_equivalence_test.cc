// schedule_equivalence_test.cc: every pipeline schedule the planner generates
// (1F1B, GPipe, interleaved 1F1B with two chunks per rank, ZB-H1 with split
// backward, ZB-V's two chunks in a V) trained under mpirun with `paraplan launch ... train` gives
// the single-rank losses, combined with tensor and data parallelism and ZeRO-1, for GPT-2 (tied
// embeddings: with chunks, the embedding on rank 0's first chunk and the head on the last rank's
// last one) and Llama; and bitwise 1F1B's weights and optimizer moments on the same pipeline width
// (GPipe and ZB-H1: only the order of independent work differs; interleaved: also the gradient
// norm's order of addition, which rounds to the same factor here).
//
// The plans are written here (schema/plan_test_support.h) around the
// planner's own schedules (planner/schedule/schedule.h, checked by its verifier), so
// each case differs from its 1F1B twin in nothing but the schedule and the
// layers' placement; the run validates them as any plan.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "parallel_training_fixture.h"
#include "planner/schedule/schedule.h"
#include "schema/plan_test_support.h"

namespace paraplan::testing {
namespace {

using schema::ScheduleKind;

constexpr int kLayers = 8;
constexpr int kGlobalBatch = 16, kMicroBatchSize = 2;

struct ScheduleCase {
  std::string name;
  ScheduleKind kind = ScheduleKind::OneForwardOneBackward;
  int pipeline = 1, virtual_stages = 1, data = 1, tensor = 1, zero_stage = 0;
  std::string architecture = "gpt2";
  bool sequence_parallel = false;
  int eval_interval = 1000;  // (past the run: no evaluation)
};

// The case's plan: the test model (8 layers, so pp 4 x 2 chunks holds one
// layer per virtual stage), global batch 16 in micro-batches of 2, the
// planner's schedule for it.
std::vector<uint8_t> plan_bytes(const ScheduleCase& c) {
  const int m = kGlobalBatch / (kMicroBatchSize * c.data);
  test_plans::PlanSpec spec = test_plans::make_chunked_plan_spec(
      c.pipeline, c.virtual_stages, kLayers, m, c.kind, /*split=*/false);
  const bool llama = c.architecture == "llama";
  spec.architecture = llama ? schema::Architecture::Llama : schema::Architecture::Gpt2;
  spec.vocab_size = 256, spec.seq_len = 16, spec.d_model = 32, spec.num_heads = 4;
  spec.ffn_size = llama ? 64 : 128;
  spec.num_kv_heads = llama ? 2 : 0;
  spec.tied_embeddings = true;
  spec.micro_batch_size = kMicroBatchSize, spec.num_micro_batches = m;
  spec.global_batch_size = kGlobalBatch;
  spec.learning_rate = 3e-3f, spec.warmup_steps = 2, spec.total_steps = 20, spec.seed = 5;
  spec.eval_interval = c.eval_interval, spec.eval_batches = 2;
  spec.data_parallel = c.data, spec.tensor_parallel = c.tensor;
  spec.sequence_parallel = c.sequence_parallel;
  spec.num_nodes = 1, spec.devices_per_node = c.pipeline * c.data * c.tensor;
  spec.zero_stage = c.zero_stage, spec.zero_num_groups = 1;
  spec.schedule_kind = c.kind;
  const PipelineSchedule schedule = generate_schedule(c.kind, c.pipeline, m, c.virtual_stages);
  const std::optional<std::string> problem = verify_schedule(schedule);
  EXPECT_FALSE(problem.has_value()) << c.name << ": " << problem.value_or("");
  spec.schedule.clear();
  for (int r = 0; r < c.pipeline; ++r) {
    std::vector<schema::Instruction> stream;
    for (const PipelineInstruction& ins : schedule.stages[r])
      stream.emplace_back(ins.op, static_cast<uint8_t>(ins.chunk), ins.micro_batch, -1);
    spec.schedule.push_back({r, true, stream});
  }
  return test_plans::build_plan(spec);
}

class ScheduleEquivalence : public ParallelTraining {
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
  static double expect_single_rank_losses(const ScheduleCase& c) {
    const Run& single = run({.name = "single_" + c.architecture, .architecture = c.architecture});
    const Run& mine = run(c);
    EXPECT_EQ(single.losses.size(), static_cast<size_t>(kSteps));
    EXPECT_EQ(mine.losses.size(), single.losses.size()) << c.name;
    if (mine.losses.size() != single.losses.size()) return INFINITY;
    double largest = 0;
    for (size_t i = 0; i < mine.losses.size(); ++i) {
      EXPECT_NEAR(mine.losses[i], single.losses[i], kLossTolerance) << c.name << " step " << i + 1;
      largest = std::max(largest, std::fabs(mine.losses[i] - single.losses[i]));
    }
    std::cout << c.name << ": largest loss difference from one rank " << largest << std::endl;
    return largest;
  }

  static void expect_same_weights(const ScheduleCase& a, const ScheduleCase& b) {
    expect_same_files(a.name, run(a).checkpoint, b.name, run(b).checkpoint);
  }
};

const ScheduleCase kOneF1BPp2{.name = "1f1b_pp2", .pipeline = 2};
const ScheduleCase kOneF1BPp4{.name = "1f1b_pp4", .pipeline = 4};

TEST_F(ScheduleEquivalence, GPipeAndZeroBubbleGiveOneF1BsWeightsBitwise) {
  // Same layers on the same ranks; every gradient is summed micro-batch by
  // micro-batch in the same order: only independent work moved.
  const ScheduleCase gpipe{.name = "gpipe_pp2", .kind = ScheduleKind::GPipe, .pipeline = 2};
  const ScheduleCase zb2{.name = "zbh1_pp2", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 2};
  const ScheduleCase zb4{.name = "zbh1_pp4", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 4};
  for (const ScheduleCase& c : {kOneF1BPp2, gpipe, zb2, kOneF1BPp4, zb4})
    expect_single_rank_losses(c);
  expect_same_weights(kOneF1BPp2, gpipe);
  expect_same_weights(kOneF1BPp2, zb2);
  expect_same_weights(kOneF1BPp4, zb4);
}

TEST_F(ScheduleEquivalence, InterleavedGivesTheSingleRankLosses) {
  const ScheduleCase pp2{.name = "interleaved_pp2_v2",
                         .kind = ScheduleKind::Interleaved1F1B,
                         .pipeline = 2,
                         .virtual_stages = 2};
  const ScheduleCase pp4{.name = "interleaved_pp4_v2",
                         .kind = ScheduleKind::Interleaved1F1B,
                         .pipeline = 4,
                         .virtual_stages = 2};
  expect_single_rank_losses(pp2);
  expect_single_rank_losses(pp4);
  // Other ranks hold the layers than under 1F1B, but each gradient is still
  // summed micro-batch by micro-batch in the same order. Only the gradient
  // norm's sum of squares (in double, per rank, then over the world) adds in
  // another order; here it rounds to the same clip factor, so the weights
  // are bitwise 1F1B's (deterministic: the same every run).
  expect_same_weights(kOneF1BPp2, pp2);
  expect_same_weights(kOneF1BPp4, pp4);
}

TEST_F(ScheduleEquivalence, SchedulesCombineWithTensorDataParallelismAndZeroOne) {
  expect_single_rank_losses({.name = "interleaved_pp2_v2_dp2_zero1",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .data = 2,
                             .zero_stage = 1});
  expect_single_rank_losses({.name = "interleaved_pp2_v2_tp2",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .tensor = 2});
  expect_single_rank_losses(
      {.name = "zbh1_pp2_tp2", .kind = ScheduleKind::ZeroBubbleH1, .pipeline = 2, .tensor = 2});
  expect_single_rank_losses({.name = "zbh1_pp2_dp2_zero1",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .data = 2,
                             .zero_stage = 1});
}

// Split backward keeps copies of what later backwards overwrite: with
// sequence parallelism also the gathered inputs of column-parallel linears.
TEST_F(ScheduleEquivalence, SchedulesCombineWithSequenceParallelism) {
  expect_single_rank_losses({.name = "zbh1_pp2_tp2_sp",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .tensor = 2,
                             .sequence_parallel = true});
  expect_single_rank_losses({.name = "llama_interleaved_pp2_v2_tp2_sp",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .tensor = 2,
                             .architecture = "llama",
                             .sequence_parallel = true});
}

// ZB-V's V: rank 0 holds the embedding and the tied head (their gradients
// summed on the rank), the last rank hands its chunk 0's output to its own
// chunk 1.
TEST_F(ScheduleEquivalence, ZeroBubbleVGivesTheSingleRankLosses) {
  const auto zbv = [](std::string name) {
    return ScheduleCase{.name = std::move(name),
                        .kind = ScheduleKind::ZeroBubbleV,
                        .pipeline = 2,
                        .virtual_stages = 2};
  };
  expect_single_rank_losses(zbv("zbv_pp2"));
  ScheduleCase pp4 = zbv("zbv_pp4");
  pp4.pipeline = 4;
  expect_single_rank_losses(pp4);
  ScheduleCase zero = zbv("zbv_pp2_dp2_zero1");
  zero.data = 2, zero.zero_stage = 1;
  expect_single_rank_losses(zero);
  ScheduleCase sequence = zbv("zbv_pp2_tp2_sp");
  sequence.tensor = 2, sequence.sequence_parallel = true;
  expect_single_rank_losses(sequence);
  ScheduleCase llama = zbv("llama_zbv_pp2_tp2");
  llama.tensor = 2, llama.architecture = "llama";
  expect_single_rank_losses(llama);
  // Evaluation runs the V too: rank 0's two chunks, the last rank's hand-off.
  ScheduleCase evaluated = zbv("zbv_pp4_eval");
  evaluated.pipeline = 4, evaluated.eval_interval = 2;
  const Run& single = run({.name = "single_gpt2_eval", .eval_interval = 2});
  const Run& mine = run(evaluated);
  ASSERT_EQ(single.validation_losses.size(), 3u);  // steps 2, 4 and the last
  ASSERT_EQ(mine.validation_losses.size(), single.validation_losses.size());
  for (size_t i = 0; i < mine.validation_losses.size(); ++i)
    EXPECT_NEAR(mine.validation_losses[i], single.validation_losses[i], kLossTolerance)
        << "evaluation " << i + 1;
}

// DualPipe-V runs ZB-V's V in its own order, whole backwards beside deferred
// weight gradients: pp 2 and 4 (m 8), with data parallelism and ZeRO-1
// (m 4 = 2p), and Llama with tensor parallelism.
TEST_F(ScheduleEquivalence, DualPipeVGivesTheSingleRankLosses) {
  const auto dualpipe = [](std::string name) {
    return ScheduleCase{.name = std::move(name),
                        .kind = ScheduleKind::DualPipeV,
                        .pipeline = 2,
                        .virtual_stages = 2};
  };
  expect_single_rank_losses(dualpipe("dualpipev_pp2"));
  ScheduleCase pp4 = dualpipe("dualpipev_pp4");
  pp4.pipeline = 4;
  expect_single_rank_losses(pp4);
  ScheduleCase zero = dualpipe("dualpipev_pp2_dp2_zero1");
  zero.data = 2, zero.zero_stage = 1;
  expect_single_rank_losses(zero);
  ScheduleCase llama = dualpipe("llama_dualpipev_pp2_tp2");
  llama.tensor = 2, llama.architecture = "llama";
  expect_single_rank_losses(llama);
}

// A checkpoint crosses between ZB-V and one rank both ways: ZB-V saves the
// tied embedding once (rank 0's head copy left out) and loads it into both
// copies. Two more steps from each step-5 checkpoint, under the other plan,
// give the losses of the single rank going on from its own.
TEST_F(ScheduleEquivalence, ZeroBubbleVCheckpointsResumeUnderOtherPlans) {
  const ScheduleCase zbv{
      .name = "zbv_pp4", .kind = ScheduleKind::ZeroBubbleV, .pipeline = 4, .virtual_stages = 2};
  const ScheduleCase single{.name = "single_gpt2"};
  ASSERT_EQ(run(zbv).losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(run(single).losses.size(), static_cast<size_t>(kSteps));
  // Resumes a copy of `from`'s checkpoints under `under`'s plan to step kSteps + 2.
  const auto resumed = [&](const ScheduleCase& from, const ScheduleCase& under) {
    const std::string name = from.name + "_then_" + under.name;
    const std::string checkpoints = *directory_ / (name + "_checkpoints");
    std::filesystem::remove_all(checkpoints);
    std::filesystem::copy(*directory_ / (from.name + "_checkpoints"), checkpoints,
                          std::filesystem::copy_options::recursive);
    return train_plan_file(*directory_ / (under.name + ".pplan"), name,
                           "--checkpoint-dir " + checkpoints + " --resume", nullptr, "",
                           kSteps + 2);
  };
  const std::vector<double> reference = resumed(single, single);
  ASSERT_EQ(reference.size(), 2u);
  for (const auto& [from, under] : {std::pair{zbv, single}, std::pair{single, zbv}}) {
    const std::vector<double> losses = resumed(from, under);
    ASSERT_EQ(losses.size(), reference.size()) << from.name << " -> " << under.name;
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], reference[i], kLossTolerance)
          << from.name << " -> " << under.name << " step " << kSteps + 1 + i;
  }
}

TEST_F(ScheduleEquivalence, LlamaUnderInterleavedAndZeroBubble) {
  expect_single_rank_losses({.name = "llama_interleaved_pp2_v2",
                             .kind = ScheduleKind::Interleaved1F1B,
                             .pipeline = 2,
                             .virtual_stages = 2,
                             .architecture = "llama"});
  expect_single_rank_losses({.name = "llama_zbh1_pp2_tp2",
                             .kind = ScheduleKind::ZeroBubbleH1,
                             .pipeline = 2,
                             .tensor = 2,
                             .architecture = "llama"});
}

}  // namespace
}  // namespace paraplan::testing
