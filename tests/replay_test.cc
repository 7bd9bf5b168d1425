// replay_test.cc: the measured feedback loop end to end, under mpirun:
// `paraplan replay` (report, trace, timeline, refusals, out of memory),
// `paraplan profile` feeding `paraplan plan`, and `paraplan autotune`
// recording a failed experiment and keeping the best measured plan.
//
// Times are not asserted against the prediction here (machines are noisy;
// samples/tiny/replay_accuracy.sh measures that); what is asserted is what
// must hold on any machine: every stage and rank measured, the parts of a
// step no larger than the step, memory equal to the plan's where the plan is
// exact and never above it, the trace holding every instruction.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "kernels/ops.h"
#include "replay_test_support.h"

namespace {

using namespace paraplan::testing;
using nlohmann::json;

TEST_F(Replay, Bfloat16ModelStateIsWhatThePlannerPredicts) {
  // bf16 mixed precision under ZeRO-1 over 2 ranks: bf16 weights and
  // gradients (plus the bf16 gradient shard), and fp32 master weights and
  // moments sharded, 6 x the bf16 weights / 2 (opt_resident_coef = 6).
  const std::string plan_file = plan("bf16-zero1", 2,
                                     "data_parallel_degree = 2\nmicro_batch_size = 4\n"
                                     "zero_stage = 1\nopt_resident_coef = 6\n",
                                     "--model.dtype bfloat16");
  const json report = replay_report(plan_file, "bf16-zero1");
  ASSERT_EQ(report["stages"].size(), 1u);
  const json& memory = report["stages"][0]["memory_bytes"];
  for (const char* part : {"weights", "gradients", "optimizer_state"})
    EXPECT_EQ(memory[part]["measured"], memory[part]["predicted"]) << part;
  // MPI on the CPU: no NCCL buffers, predicted or measured.
  EXPECT_EQ(memory["communicator_buffers"]["predicted"].get<double>(), 0.0);
  EXPECT_EQ(memory["communicator_buffers"]["measured"].get<double>(), 0.0);
  // 2 bytes per weight: wte 256x32, wpe 16x32, 2 blocks of 12704 and the
  // final norm's 64 are 34176 parameters (even, so no ZeRO padding).
  EXPECT_EQ(memory["weights"]["measured"].get<double>(), 2.0 * 34176);
  EXPECT_EQ(memory["optimizer_state"]["measured"].get<double>(), 12.0 * 34176 / 2);
  EXPECT_TRUE(report["memory_within_prediction"].get<bool>());
}

TEST_F(Replay, PipelineAndTensorParallelReportEveryStageAndRank) {
  const std::string plan_file =
      plan("pp2-tp2", 4,
           "pipeline_nstages = 2\ntensor_parallel_degree = 2\ndata_parallel_degree = 1\n"
           "micro_batch_size = 4\n");
  const std::string report_file = *directory_ / "pp2-tp2.json";
  const std::string trace_file = *directory_ / "pp2-tp2.trace.json";
  const std::string svg_file = *directory_ / "pp2-tp2.svg";
  const CommandResult replayed =
      run("launch --plan " + plan_file + " -- replay --steps 2 --warmup 1 --report " + report_file +
          " --trace " + trace_file + " --timeline " + svg_file);
  ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
  EXPECT_NE(replayed.output.find("forward / micro-batch"), std::string::npos) << replayed.output;

  const json report = json::parse(read_file(report_file));
  EXPECT_EQ(report["ranks"], 4);
  EXPECT_EQ(report["num_micro_batches"], 4);
  ASSERT_EQ(report["stages"].size(), 2u);
  const double step = report["step_seconds"]["measured"].get<double>();
  EXPECT_GT(step, 0);
  EXPECT_GT(report["step_seconds"]["predicted"].get<double>(), 0);
  // Each step's loss, warm-up first, from the last stage and counted once per
  // tensor group: near ln(256) = 5.55 on uniform synthetic tokens at
  // initialisation (counted twice it would be 11.1).
  ASSERT_EQ(report["each_step_loss"].size(), 3u);
  for (const json& loss : report["each_step_loss"]) {
    ASSERT_TRUE(loss.is_number()) << report["each_step_loss"];
    EXPECT_NEAR(loss.get<double>(), std::log(256.0), 0.1);
  }
  for (const json& stage : report["stages"]) {
    EXPECT_EQ(stage["ranks"], 2);
    const double forward = stage["forward"]["measured"].get<double>();
    const double backward = stage["backward"]["measured"].get<double>();
    EXPECT_GT(forward, 0);
    EXPECT_GT(backward, 0);
    EXPECT_GT(stage["tensor_parallel"]["measured"].get<double>(), 0);  // tp 2 all-reduces
    // The stage's own work fits in the step.
    EXPECT_LE(4 * (forward + backward) + stage["optimizer"]["measured"].get<double>(), step);
    // The parts of the step add up to it, measured and predicted; waiting for
    // peers is its own part (here the bubble and the other stage's pace), no
    // part is negative, and the plan predicts a bubble for the stage.
    const json& parts = stage["per_step"];
    double measured = 0, predicted = 0;
    for (const char* part : {"forward", "backward", "tensor_parallel", "pipeline_p2p",
                             "gradient_reduction", "optimizer", "wait", "other"}) {
      ASSERT_TRUE(parts.contains(part)) << part;
      EXPECT_GE(parts[part]["measured"].get<double>(), 0) << part;
      measured += parts[part]["measured"].get<double>();
      predicted += parts[part]["predicted"].get<double>();
    }
    EXPECT_NEAR(measured, step, 1e-9 * step);
    EXPECT_NEAR(predicted, report["step_seconds"]["predicted"].get<double>(), 1e-6 * step);
    EXPECT_GT(parts["wait"]["measured"].get<double>(), 0);
    EXPECT_GT(parts["wait"]["predicted"].get<double>(), 0);
    EXPECT_GT(parts["pipeline_p2p"]["measured"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(parts["forward"]["measured"].get<double>(), 4 * forward);
    // Weights are exact in the model; nothing exceeds the prediction.
    const json& memory = stage["memory_bytes"];
    EXPECT_EQ(memory["weights"]["measured"], memory["weights"]["predicted"]);
    EXPECT_LE(memory["total"]["measured"].get<double>(),
              memory["total"]["predicted"].get<double>());
  }
  EXPECT_TRUE(report["memory_within_prediction"].get<bool>());

  // One span per instruction per measured step on every rank: each stage's
  // stream has 4 forwards and 4 backwards.
  const json trace = json::parse(read_file(trace_file));
  std::map<int, int> forwards, backwards, spans;
  for (const json& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    const int rank = event["tid"].get<int>();
    ++spans[rank];
    const std::string name = event["name"].get<std::string>();
    if (name[0] == 'F') ++forwards[rank];
    if (name[0] == 'B') ++backwards[rank];
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(forwards[rank], 2 * 4) << "rank " << rank;
    EXPECT_EQ(backwards[rank], 2 * 4) << "rank " << rank;
  }
  const std::string svg = read_file(svg_file);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("rank 3 (stage 1, dp 0, tp 1)"), std::string::npos);
}

TEST_F(Replay, LlamaMemoryIsNeverAbovePredictionInAnyRecomputeMode) {
  // Llama's stage (grouped-query attention, SwiGLU, RMSNorm) on pp2 x tp2:
  // weights exactly the plan's, activations and the total never above it,
  // with no recompute, selective (the attention core) and full.
  for (const std::string recompute : {"", "self_attn.core_attention", "ROOT"}) {
    const std::string name = "llama-" + (recompute.empty() ? "none" : recompute);
    const std::string plan_file =
        plan(name, 4,
             "pipeline_nstages = 2\ntensor_parallel_degree = 2\ndata_parallel_degree = 1\n"
             "micro_batch_size = 4\nrecompute_modules = \"" +
                 recompute + "\"\n",
             "--model.architecture llama --model.num_kv_heads 2 --model.ffn_size 64");
    const std::string report_file = *directory_ / (name + ".json");
    const CommandResult replayed = run("launch --plan " + plan_file +
                                       " -- replay --steps 1 --warmup 1 --report " + report_file);
    ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
    const json report = json::parse(read_file(report_file));
    ASSERT_EQ(report["stages"].size(), 2u);
    for (const json& stage : report["stages"]) {
      const json& memory = stage["memory_bytes"];
      EXPECT_EQ(memory["weights"]["measured"], memory["weights"]["predicted"]) << name;
      EXPECT_LE(memory["activations"]["measured"].get<double>(),
                memory["activations"]["predicted"].get<double>())
          << name;
      EXPECT_LE(memory["total"]["measured"].get<double>(),
                memory["total"]["predicted"].get<double>())
          << name;
    }
    EXPECT_TRUE(report["memory_within_prediction"].get<bool>()) << name;
  }
}

TEST_F(Replay, ContextParallelMemoryIsNeverAbovePrediction) {
  // A 256-token sequence over 2 and 4 context ranks (GPT-2 and Llama, with
  // and without documents masked): each rank holds seq_len / cp of every
  // sequence, so its measured activations fall with cp (below half from 1 to
  // 2, the ring's workspace aside), and stay at or below the prediction with
  // the ring's workspace counted; the weights are exactly the plan's.
  std::map<std::string, double> activations;
  for (const std::string architecture : {"gpt2", "llama"})
    for (const int cp : {1, 2, 4})
      for (const bool documents : {false, true}) {
        if (documents && cp != 2) continue;
        const std::string name =
            "cp" + std::to_string(cp) + "-" + architecture + (documents ? "-documents" : "");
        std::string overrides =
            "--model.seq_len 256 --model.num_layers 4 --training.global_batch_size 4";
        if (architecture == "llama")
          overrides += " --model.architecture llama --model.num_kv_heads 2 --model.ffn_size 64";
        if (documents) overrides += " --data.document_mask true --data.document_separator 32";
        const std::string plan_file =
            plan(name, cp,
                 "pipeline_nstages = 1\ntensor_parallel_degree = 1\ndata_parallel_degree = 1\n"
                 "micro_batch_size = 4\ncontext_parallel_degree = " +
                     std::to_string(cp) + "\n",
                 overrides);
        const json report = replay_report(plan_file, name);
        ASSERT_EQ(report["stages"].size(), 1u) << name;
        const json& memory = report["stages"][0]["memory_bytes"];
        const double measured = memory["activations"]["measured"].get<double>(),
                     predicted = memory["activations"]["predicted"].get<double>();
        std::printf(
            "[ figures  ] %s: activations measured %.0f, predicted %.0f bytes; "
            "workspace measured %.0f, predicted %.0f\n",
            name.c_str(), measured, predicted, memory["workspace"]["measured"].get<double>(),
            memory["workspace"]["predicted"].get<double>());
        EXPECT_EQ(memory["weights"]["measured"], memory["weights"]["predicted"]) << name;
        // Exact: the runtime allocates what the planner counts, the transient
        // reserve (AutoDist's estimate beyond the workspace) apart.
        EXPECT_EQ(measured, predicted) << name;
        EXPECT_EQ(memory["workspace"]["measured"], memory["workspace"]["predicted"]) << name;
        EXPECT_TRUE(memory.contains("transient_reserve")) << name;
        EXPECT_TRUE(report["memory_within_prediction"].get<bool>()) << name;
        activations[name] = measured;
      }
  for (const std::string architecture : {"gpt2", "llama"}) {
    EXPECT_LT(activations["cp2-" + architecture], 0.5 * activations["cp1-" + architecture] * 1.05);
    EXPECT_LT(activations["cp4-" + architecture], 0.5 * activations["cp2-" + architecture] * 1.05);
  }
}

TEST_F(Replay, SequenceParallelMemoryIsNeverAbovePrediction) {
  // Sequence parallelism on pp2 x tp2 (GPT-2 and Llama, no recompute and
  // full): the norm and residual regions and the pipeline messages are token
  // shards, so the measured activations fall below the plain tp2 plan's, and
  // stay at or below the prediction.
  double measured_activations[2] = {0, 0};  // stage 0 of gpt2-none, without and with
  for (const std::string architecture : {"gpt2", "llama"})
    for (const std::string recompute : {"", "ROOT"})
      for (const bool sequence_parallel : {false, true}) {
        if (!sequence_parallel && (architecture != "gpt2" || !recompute.empty())) continue;
        const std::string name = "sp-" + architecture + "-" +
                                 (recompute.empty() ? "none" : "full") +
                                 (sequence_parallel ? "" : "-without");
        const std::string plan_file =
            plan(name, 4,
                 "pipeline_nstages = 2\ntensor_parallel_degree = 2\ndata_parallel_degree = 1\n"
                 "micro_batch_size = 4\nrecompute_modules = \"" +
                     recompute +
                     "\"\nsequence_parallel = " + (sequence_parallel ? "true" : "false") + "\n",
                 architecture == "llama"
                     ? "--model.architecture llama --model.num_kv_heads 2 --model.ffn_size 64"
                     : "");
        const std::string report_file = *directory_ / (name + ".json");
        const CommandResult replayed =
            run("launch --plan " + plan_file + " -- replay --steps 1 --warmup 1 --report " +
                report_file);
        ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
        const json report = json::parse(read_file(report_file));
        ASSERT_EQ(report["stages"].size(), 2u);
        for (size_t s = 0; s < 2; ++s) {
          const json& memory = report["stages"][s]["memory_bytes"];
          const double measured = memory["activations"]["measured"].get<double>(),
                       predicted = memory["activations"]["predicted"].get<double>();
          std::printf(
              "[ figures  ] %s stage %zu: activations measured %.0f, predicted %.0f bytes\n",
              name.c_str(), s, measured, predicted);
          EXPECT_EQ(memory["weights"]["measured"], memory["weights"]["predicted"]) << name;
          EXPECT_LE(measured, predicted) << name << " stage " << s;
          EXPECT_LE(memory["total"]["measured"].get<double>(),
                    memory["total"]["predicted"].get<double>())
              << name << " stage " << s;
          if (architecture == "gpt2" && recompute.empty() && s == 0)
            measured_activations[sequence_parallel ? 1 : 0] = measured;
        }
        EXPECT_TRUE(report["memory_within_prediction"].get<bool>()) << name;
      }
  EXPECT_LT(measured_activations[1], measured_activations[0]);
}

TEST_F(Replay, ZeroBubbleVModelStateIsWhatThePlannerPredicts) {
  // ZB-V on pp 2: rank 0 holds the embedding and the tied head in two
  // chunks, so the head's copy of the embedding too (its weights, gradients
  // and moments counted); the last rank neither. Both ranks' weights are the
  // prediction exactly, and nothing measured is above its prediction.
  const std::string plan_file =
      plan("zbv", 2,
           "pipeline_nstages = 2\ntensor_parallel_degree = 1\ndata_parallel_degree = 1\n"
           "micro_batch_size = 4\npipeline_scheduler = \"zb-v\"\n",
           "--model.num_layers 4");
  const json report = replay_report(plan_file, "zbv");
  ASSERT_EQ(report["stages"].size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const json& memory = report["stages"][s]["memory_bytes"];
    for (const char* part : {"weights", "gradients", "optimizer_state"})
      EXPECT_EQ(memory[part]["measured"], memory[part]["predicted"]) << part << " stage " << s;
    EXPECT_LE(memory["total"]["measured"].get<double>(), memory["total"]["predicted"].get<double>())
        << "stage " << s << ": " << memory.dump();
  }
  // wte 256 x 32 twice, wpe 16 x 32, 2 blocks of 12704, the final norm's 64.
  EXPECT_EQ(report["stages"][0]["memory_bytes"]["weights"]["measured"].get<double>(),
            4.0 * (2 * 8192 + 512 + 2 * 12704 + 64));
  EXPECT_TRUE(report["memory_within_prediction"].get<bool>());
}

TEST_F(Replay, APlanForAnotherWorldIsRefusedBeforeAllocation) {
  const std::string plan_file = plan(
      "dp4", 4, "pipeline_nstages = 1\ntensor_parallel_degree = 1\ndata_parallel_degree = 4\n");
  const CommandResult alone = run("replay --plan " + plan_file);
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_NE(alone.output.find("the plan needs 4 ranks"), std::string::npos) << alone.output;
  const CommandResult two = run_command(std::string(MPIEXEC) + " --oversubscribe -np 2 " +
                                        PARAPLAN_BINARY + " replay --plan " + plan_file);
  EXPECT_NE(two.exit_code, 0);
  EXPECT_NE(two.output.find("the plan needs 4 ranks"), std::string::npos) << two.output;
  EXPECT_NE(two.output.find("but mpirun started 2"), std::string::npos) << two.output;
}

TEST_F(Replay, APlanLargerThanTheDeviceRunsOutOfMemoryAndSaysSo) {
  // The planner does not check memory, the device has 0.5 MiB: replay holds
  // the ranks to the device, as a GPU would.
  const std::string plan_file =
      plan("oom", 2, "pipeline_nstages = 1\ntensor_parallel_degree = 1\nconsider_mem = false\n",
           "--cluster.device_memory_gb 0.0005");
  const CommandResult replayed = run("launch --plan " + plan_file + " -- replay --steps 1");
  EXPECT_NE(replayed.exit_code, 0);
  EXPECT_NE(replayed.output.find("out of device memory"), std::string::npos) << replayed.output;
}

TEST_F(Replay, Bfloat16JobsAreProfiledInBfloat16AndThePlannerUsesIt) {
  std::string toml = job_toml(1, "");
  toml.replace(toml.find("num_heads = 4\n"), 14, "num_heads = 4\ndtype = \"bfloat16\"\n");
  const std::string job = *directory_ / "profiled_bf16.toml";
  write_file(job, toml);
  const std::string profile_dir = *directory_ / "profile_bf16";
  const CommandResult profiled = run("profile --config " + job + " --profile-dir " + profile_dir +
                                     " --repetitions 1 --min-window 0.01");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  const json profile = json::parse(read_file(profile_dir + "/profile.json"));
  const json& compute = profile["devices"]["cpu"]["compute"];
  ASSERT_GT(compute.size(), 0u);
  for (const json& entry : compute) EXPECT_EQ(entry["dtype"], "bfloat16");
  const CommandResult planned =
      run("plan --config " + job + " --output " + *directory_ / "profiled_bf16.pplan" +
          " --planner.profile_dir " + profile_dir);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("profile compute: measured for all"), std::string::npos)
      << planned.output;
}

TEST_F(Replay, ProfileIsWrittenPerShapeAndThePlannerUsesIt) {
  const std::string job = *directory_ / "profiled.toml";
  write_file(job, job_toml(2, ""));
  const std::string profile_dir = *directory_ / "profile";
  const CommandResult profiled = run("profile --config " + job + " --profile-dir " + profile_dir +
                                     " --repetitions 1 --min-window 0.01");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  const json profile = json::parse(read_file(profile_dir + "/profile.json"));
  EXPECT_EQ(profile["version"], 2);
  const json& device = profile["devices"]["cpu"];
  EXPECT_EQ(device["measured_on"]["backend"], "cpu");
  // tp 1 and 2; micro-batches 1..16 (dp 1) and 1..8 (dp 2): 2 x 5 shapes, 2 processes.
  ASSERT_EQ(device["compute"].size(), 10u);
  for (const json& entry : device["compute"]) {
    EXPECT_EQ(entry["processes"], 2);
    EXPECT_GT(entry["block_forward"].get<double>(), 0);
    EXPECT_GT(entry["block_backward"].get<double>(), 0);
    EXPECT_GT(entry["head_forward"].get<double>(), 0);
    // tp 2's blocks are also timed in lock-step with their real group, where
    // each of the 2 ranks has a core of its own.
    const bool paced = entry["tensor_parallel"] == 2 && std::thread::hardware_concurrency() >= 2;
    ASSERT_EQ(entry.contains("tensor_group"), paced) << entry.dump();
    if (!paced) continue;
    // Ratios of timings on 2 shared cores: a loaded machine reached 3.3
    // (CI, 2026-12-06), so only their sanity is held here.
    for (const char* ratio : {"forward_ratio", "backward_ratio"}) {
      EXPECT_GT(entry["tensor_group"][ratio].get<double>(), 0.25) << ratio;
      EXPECT_LT(entry["tensor_group"][ratio].get<double>(), 8) << ratio;
    }
    EXPECT_GE(entry["tensor_group"]["wait_per_call"].get<double>(), 0);
  }
  std::map<std::string, int> collectives;
  for (const json& entry : device["collectives"]) {
    ++collectives[entry["operation"].get<std::string>()];
    EXPECT_EQ(entry["group_size"], 2);
    EXPECT_GE(entry["seconds_per_byte"].get<double>(), 0);
    // Every power of two from 16 KiB to 4 MiB, each with its time.
    ASSERT_EQ(entry["points"].size(), 9u) << entry.dump();
    EXPECT_EQ(entry["points"][0]["bytes"], 16384);
    EXPECT_EQ(entry["points"][8]["bytes"], 4 << 20);
    for (const json& point : entry["points"]) EXPECT_GT(point["seconds"].get<double>(), 0);
  }
  EXPECT_EQ(collectives["all_reduce"], 1);
  EXPECT_EQ(collectives["send_receive"], 1);
  EXPECT_GT(device["optimizer"][0]["seconds_per_parameter"].get<double>(), 0);

  // The planner uses it and says so; the plan records it.
  const std::string plan_file = *directory_ / "profiled.pplan";
  const CommandResult planned = run("plan --config " + job + " --output " + plan_file +
                                    " --planner.profile_dir " + profile_dir);
  ASSERT_EQ(planned.exit_code, 0) << planned.output;
  EXPECT_NE(planned.output.find("profile compute: measured for all"), std::string::npos)
      << planned.output;
  EXPECT_EQ(planned.output.find("profile tensor-parallel pace") != std::string::npos,
            std::thread::hardware_concurrency() >= 2)
      << planned.output;
  const json inspected = json::parse(run("inspect --json " + plan_file).output);
  EXPECT_EQ(inspected["predictions"]["time_model"].get<std::string>().rfind("profile ", 0), 0u)
      << inspected["predictions"]["time_model"];

  // Profiling again keeps what is there (re_profile = false)...
  const CommandResult again = run("profile --config " + job + " --profile-dir " + profile_dir +
                                  " --repetitions 1 --min-window 0.01");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("10 shape(s) kept"), std::string::npos) << again.output;
  // ... and a profile for other model shapes is named as such.
  const std::string other = *directory_ / "other.toml";
  write_file(other,
             job_toml(2, "").replace(job_toml(2, "").find("d_model = 32"), 12, "d_model = 64"));
  const CommandResult stale =
      run("plan --config " + other + " --output " + *directory_ / "other.pplan" +
          " --planner.profile_dir " + profile_dir);
  ASSERT_EQ(stale.exit_code, 0) << stale.output;
  EXPECT_NE(stale.output.find("was measured for other model shapes"), std::string::npos)
      << stale.output;
}

TEST_F(Replay, AutotuneRecordsAnOutOfMemoryExperimentAndKeepsTheFastest) {
  // The planner does not check memory, the device has 1.4 MB: micro-batch 8
  // (about 1.6 MB) runs out of memory, 4 (about 1.1 MB) fits; the binary
  // search must find that.
  const std::string job = *directory_ / "tuned.toml";
  write_file(job, job_toml(2,
                           "pipeline_nstages = 1\ntensor_parallel_degree = 1\n"
                           "zero_stage = 0\nconsider_mem = false\n"));
  const std::string best = *directory_ / "best.pplan";
  const std::string summary = *directory_ / "autotune.json";
  const CommandResult tuned = run(
      "autotune --config " + job + " --output " + best + " --work-dir " + *directory_ / "autotune" +
      " --report " + summary + " --steps 1 --warmup 0 --cluster.device_memory_gb 0.0013");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("experiments:"), std::string::npos) << tuned.output;
  const json report = json::parse(read_file(summary));
  std::map<int, std::string> status;
  for (const json& experiment : report["experiments"])
    status[experiment["micro_batch_size"].get<int>()] = experiment["status"];
  EXPECT_EQ(status[8], "out of memory") << tuned.output;
  EXPECT_EQ(status[4], "measured") << tuned.output;
  const json chosen = json::parse(run("inspect --json " + best).output);
  EXPECT_LE(chosen["training"]["micro_batch_size"].get<int>(), 4);
}

// The ZeRO stages explored progressively: on the same 1.3 MB device ZeRO-0
// cannot run micro-batch 8, so ZeRO-1 is tried from its best size up; ZeRO-2
// is tried where ZeRO-1 was memory-bound too or predicted faster, else a
// note says why not. The table and the report name every stage's fate.
TEST_F(Replay, AutotuneExploresZeroStagesProgressively) {
  const std::string job = *directory_ / "tuned-zero.toml";
  write_file(job, job_toml(2,
                           "pipeline_nstages = 1\ntensor_parallel_degree = 1\n"
                           "consider_mem = false\n"));
  const std::string summary = *directory_ / "autotune-zero.json";
  const CommandResult tuned =
      run("autotune --config " + job + " --output " + *directory_ / "best-zero.pplan" +
          " --work-dir " + *directory_ / "autotune-zero" + " --report " + summary +
          " --steps 1 --warmup 0 --cluster.device_memory_gb 0.0013");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  const json report = json::parse(read_file(summary));
  std::map<int, std::map<int, std::string>> status;  // stage -> micro-batch -> status
  for (const json& experiment : report["experiments"])
    status[experiment["zero_stage"].get<int>()][experiment["micro_batch_size"].get<int>()] =
        experiment["status"];
  EXPECT_EQ(status[0][8], "out of memory") << tuned.output;
  EXPECT_EQ(status[0][4], "measured") << tuned.output;
  EXPECT_FALSE(status[1].empty()) << "ZeRO-0 was memory-bound: ZeRO-1 must be tried\n"
                                  << tuned.output;
  bool zero2_noted = false;
  for (const json& note : report["notes"])
    zero2_noted |= note.get<std::string>().find("ZeRO-2 skipped") != std::string::npos ||
                   note.get<std::string>().find("ZeRO-2 pruned") != std::string::npos;
  EXPECT_TRUE(!status[2].empty() || zero2_noted) << tuned.output;
}

}  // namespace
