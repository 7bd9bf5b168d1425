// published_calibration_test.cc: the analytic time model against published
// end-to-end training step times. Each configuration is planned with its
// published degrees (tensor, pipeline, data parallel), recomputation and
// global batch fixed, on the preset of the GPUs it ran on, without a profile;
// the micro-batch size, where the source does not give it, is the planner's
// choice, as it was the authors'. The predicted step is compared with the
// published one.
//
// Sources:
// [K22] Korthikanti et al., "Reducing Activation Recomputation in Large
//       Transformer Models", MLSys 2023 (arXiv:2205.05198): Table 3
//       (22B, 175B, 530B, 1T: t 8, p 1/8/35/64, micro-batch 1, data-parallel
//       size 1, s 2048, V 51200, A100 80 GB) and Table 5 (seconds per
//       iteration with selective recomputation and with full recomputation).
//       NVIDIA/Megatron-LM's README of 2022-24 gives the same runs' MFU
//       (41.5%, 51.4%, 56.0%, 56.3%), checked below against the times.
// [M24] NVIDIA/Megatron-LM README since commit 937571cf (July 2024),
//       images/model_table.png: Megatron-Core weak scaling on H100 (DGX H100),
//       GPT with V 131072, s 4096, untied embeddings, bf16, data-parallel size
//       48, distributed optimizer; per-GPU model teraFLOP/s, 72 B s l h^2 (1 +
//       s / 6h + V / 12 l h) per step (paraplan's model FLOPs, checked below).
//       Its pipeline-parallel size 1 rows: the others ran the interleaved
//       schedule, which the 1F1B model does not describe. Those runs
//       overlapped tensor-parallel and data-parallel communication with
//       compute, which paraplan's runtime does not; the comparison leaves
//       those terms out of the prediction (comparable_step_seconds).
// [N21] Narayanan et al., "Efficient Large-Scale Language Model Training on
//       GPU Clusters Using Megatron-LM", SC 2021 (arXiv:2104.04473), Table 1,
//       also NVIDIA/Megatron-LM's README of 2021-22 (images/cases_april2021.png,
//       removed in commit 937571cf): ten runs with full recomputation on A100s,
//       achieved teraFLOP/s per GPU counting 96 B s l h^2 (1 + s / 6h + V / 16
//       l h). Held out of the calibration: see its test.
//
// The presets' two fitted figures each (GEMM and attention efficiency,
// compute_model.cc) come from K22 (A100, 8 runs) and M24 (H100, 4 runs).
// Tolerance for those: each within 10% and the mean within 5%, the issue's
// targets; wider would hide a wrong trend across model sizes (the runs span
// 1.7B to 1T parameters and 1 to 64 pipeline stages), narrower would fit the
// noise of single benchmark runs, which differ from paraplan's runtime in
// ways the model does not describe (unfused attention and sequence
// parallelism in K22, data loading and logging in every step).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/cost/compute_model.h"
#include "planner/cost/cost_model.h"
#include "planner/cost/plan_estimate.h"
#include "planner/cost/stage_cost.h"
#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

enum class Source { N21, K22, K22Full, M24 };

struct Published {
  Source source;
  const char* name;
  int heads, hidden, layers, tp, pp, gpus, batch;
  // N21: achieved teraFLOP/s per GPU (counting the recomputation); K22 and
  // K22Full: seconds per iteration; M24: model teraFLOP/s per GPU.
  double published;
};

const Published kPublished[] = {
    {Source::N21, "1.7B", 24, 2304, 24, 1, 1, 32, 512, 137},
    {Source::N21, "3.6B", 32, 3072, 30, 2, 1, 64, 512, 138},
    {Source::N21, "7.5B", 32, 4096, 36, 4, 1, 128, 512, 142},
    {Source::N21, "18.4B", 48, 6144, 40, 8, 1, 256, 1024, 135},
    {Source::N21, "39.1B", 64, 8192, 48, 8, 2, 512, 1536, 138},
    {Source::N21, "76.1B", 80, 10240, 60, 8, 4, 1024, 1792, 140},
    {Source::N21, "145.6B", 96, 12288, 80, 8, 8, 1536, 2304, 148},
    {Source::N21, "310.1B", 128, 16384, 96, 8, 16, 1920, 2160, 155},
    {Source::N21, "529.6B", 128, 20480, 105, 8, 35, 2520, 2520, 163},
    {Source::N21, "1008B", 160, 25600, 128, 8, 64, 3072, 3072, 163},
    {Source::K22, "22B", 64, 6144, 48, 8, 1, 8, 4, 1.10},
    {Source::K22, "175B", 96, 12288, 96, 8, 8, 64, 64, 13.75},
    {Source::K22, "530B", 128, 20480, 105, 8, 35, 280, 280, 37.83},
    {Source::K22, "1T", 160, 25600, 128, 8, 64, 512, 512, 71.49},
    {Source::K22Full, "22B", 64, 6144, 48, 8, 1, 8, 4, 1.42},
    {Source::K22Full, "175B", 96, 12288, 96, 8, 8, 64, 64, 18.13},
    {Source::K22Full, "530B", 128, 20480, 105, 8, 35, 280, 280, 49.05},
    {Source::K22Full, "1T", 160, 25600, 128, 8, 64, 512, 512, 94.42},
    {Source::M24, "1.7B", 16, 2048, 24, 1, 1, 48, 192, 408.8},
    {Source::M24, "7.1B", 32, 4096, 30, 2, 1, 96, 192, 465.9},
    {Source::M24, "16B", 48, 6144, 32, 4, 1, 192, 192, 489.1},
    {Source::M24, "32B", 56, 7168, 48, 8, 1, 384, 192, 459.6},
};

const char* source_name(Source source) {
  switch (source) {
    case Source::N21:
      return "N21 Narayanan et al. 2021, Table 1";
    case Source::K22:
      return "K22 Korthikanti et al. 2022, selective";
    case Source::K22Full:
      return "K22 Korthikanti et al. 2022, full recompute";
    default:
      return "M24 Megatron-Core H100 weak scaling";
  }
}

JobConfig job_of(const Published& p) {
  const bool h100 = p.source == Source::M24;
  const int seq = h100 ? 4096 : 2048, vocab = h100 ? 131072 : 51200;
  const int dp = p.gpus / (p.tp * p.pp);
  std::vector<ConfigOverride> o = {
      {"model.seq_len", std::to_string(seq)},
      {"model.vocab_size", std::to_string(std::min(vocab, 65536))},
      {"model.num_layers", std::to_string(p.layers)},
      {"model.d_model", std::to_string(p.hidden)},
      {"model.num_heads", std::to_string(p.heads)},
      {"model.dtype", "bfloat16"},
      {"model.tied_embeddings", h100 ? "false" : "true"},
      {"training.global_batch_size", std::to_string(p.batch)},
      {"training.total_steps", "100"},
      {"cluster.preset", h100 ? "h100-sxm" : "a100-80g"},
      {"cluster.num_nodes", std::to_string(std::max(1, p.gpus / 8))},
      {"planner.world_size", std::to_string(p.gpus)},
      {"planner.tensor_parallel_degree", std::to_string(p.tp)},
      {"planner.pipeline_nstages", std::to_string(p.pp)},
      {"planner.data_parallel_degree", std::to_string(dp)},
      {"planner.opt_resident_coef", "6"},
      {"planner.memory_constraint", "80"},
      {"planner.profile_dir", "/nonexistent"},
      {"planner.max_pipeline_unbalance_ratio", "0"},
      // The schedule the calibration was fitted with (the step formula's
      // (m + p - 1) slots): 1F1B.
      {"planner.pipeline_scheduler", "1f1b"},
      // The published runs' recomputation: every block in N21, the attention
      // core in K22, none in M24.
      {"planner.recompute_modules", p.source == Source::N21 || p.source == Source::K22Full
                                        ? "transformer.h"
                                    : p.source == Source::K22 ? "core_attention"
                                                              : ""},
  };
  // Sequence parallelism as K22's runs had it (its Table 5 times are with
  // it); N21 (2021) predates it; M24's one-stage plans are set directly below.
  o.push_back({"planner.sequence_parallel",
               p.source == Source::K22 || p.source == Source::K22Full ? "true" : "false"});
  if (p.source == Source::K22 || p.source == Source::K22Full) {
    o.push_back({"training.micro_batch_size", "1"});
    o.push_back({"planner.consider_mem", "false"});
  }
  if (h100) {
    o.push_back({"planner.zero_stage", "1"});
  } else {
    // Megatron-LM of 2021-22 reduced gradients after backward, unoverlapped.
    o.push_back({"cluster.overlap_communication", "false"});
    o.push_back({"planner.zero_stage", "0"});
  }
  JobConfig config = parse_job_config("", std::string("published ") + p.name, o);
  config.model.vocab_size = vocab;  // past the job file's uint16 check (see planned())
  return config;
}

double published_step_seconds(const Published& p) {
  const double B = p.batch, s = p.source == Source::M24 ? 4096 : 2048, l = p.layers, h = p.hidden,
               V = p.source == Source::M24 ? 131072 : 51200;
  switch (p.source) {
    case Source::N21: {
      const double flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
      return flops / (p.published * 1e12 * p.gpus);
    }
    case Source::M24: {
      const double flops = 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
      return flops / (p.published * 1e12 * p.gpus);
    }
    default:
      return p.published;
  }
}

// One micro-batch's passes of the slowest stage that paraplan's CUDA backend
// runs inside other kernels (transformer_ops.h: fused_on_gpu; GELU, the bias
// gradients and residual adds in GEMM epilogues, the loss's reread from L2)
// or not at all (the residual stream's gradient: the norms' backward adds
// into it, where autograd sums the two branches' gradients at each residual,
// reading two and writing one), and the published runs' Megatron ran as
// kernels of their own: their time with the preset's figures, a block's
// forward again where it recomputes.
double unfused_passes_seconds(const JobConfig& config, const PlanCandidate& plan) {
  DeviceModel fused = device_model(config.cluster, config.model.dtype), unfused = fused;
  unfused.fuses_on_gpu = false;
  const int b = plan.setting.micro_batch_size, t = plan.setting.shape.tensor_parallel;
  const bool sp = plan.setting.shape.sequence_parallel;
  const double hidden = static_cast<double>(b) * config.model.seq_len * config.model.d_model *
                        fused.element_bytes / (sp ? t : 1);
  const double gradient_sums =
      2 * (memory_seconds(3 * hidden, fused) + fused.kernel_overhead_seconds);
  const auto extra = [&](const PassOperations& ops, int forwards) {
    return forwards * (operations_seconds(ops.forward, false, unfused) -
                       operations_seconds(ops.forward, false, fused)) +
           operations_seconds(ops.backward, true, unfused) -
           operations_seconds(ops.backward, true, fused);
  };
  const PassOperations block = block_ops(config.model, b, t, sp, 1);
  double slowest = 0;
  for (const StageLayout& stage : plan.stages) {
    double seconds = 0;
    for (const schema::RecomputeMode mode : stage.recompute)
      seconds += extra(block, mode == schema::RecomputeMode::Full ? 2 : 1) + gradient_sums;
    if (stage.has_head) seconds += extra(head_ops(config.model, b, t, sp, 1), 1);
    slowest = std::max(slowest, seconds);
  }
  return slowest;
}

// What of a plan's step the published run took: all of it, and the passes
// Megatron ran that paraplan fuses (1F1B: m + p - 1 slots of the slowest
// stage), except where the run overlapped communication that paraplan's
// runtime leaves exposed (M24's tensor-parallel all-reduces and its ZeRO-1
// reduce-scatter and all-gather: --tp-comm-overlap, --overlap-grad-reduce,
// --overlap-param-gather).
double comparable_step_seconds(const Published& p, const PlanCandidate& plan) {
  const PlanEstimate& estimate = plan.estimate;
  const int slots = plan.setting.num_micro_batches + plan.setting.shape.pipeline_stages - 1;
  const double step =
      estimate.prediction.step_seconds + slots * unfused_passes_seconds(job_of(p), plan);
  if (p.source != Source::M24) return step;
  const StageEstimate& stage = estimate.stages.front();  // pp 1
  return step - plan.setting.num_micro_batches * stage.tensor_parallel_seconds -
         stage.gradient_reduction_seconds;
}

// The planner's best plan with the published degrees. M24's vocabulary is
// larger than a job file may name (paraplan's token files hold uint16 ids),
// so its one-stage plans are evaluated directly, at each micro-batch size,
// and the fastest kept: what the search does for one stage.
PlanCandidate planned(const Published& p) {
  const JobConfig config = job_of(p);
  if (p.source != Source::M24) {
    const SearchResult result = search_plans(config);
    if (result.ranked.empty()) throw std::runtime_error(std::string("no plan for ") + p.name);
    return result.ranked.front();
  }
  const int dp = p.gpus / p.tp;
  PlanCandidate best;
  for (int micro = 1; micro * dp <= p.batch; micro *= 2) {
    if (p.batch % (micro * dp) != 0) continue;
    PlanCandidate candidate;
    candidate.setting =
        PlanSetting{{1, dp, p.tp}, {p.gpus / 8, 8}, micro, p.batch / (micro * dp), 1, 1, {}};
    candidate.stages = {
        StageLayout{0, p.layers, true, true,
                    std::vector<schema::RecomputeMode>(p.layers, schema::RecomputeMode::None)}};
    candidate.estimate = evaluate_plan(config, candidate.setting, candidate.stages);
    if (best.stages.empty() ||
        candidate.estimate.prediction.step_seconds < best.estimate.prediction.step_seconds)
      best = candidate;
  }
  return best;
}

TEST(PublishedCalibration, TheConventionsAgreeWithThePapersOwnFigures) {
  // K22's Table 5 times are the README's MFU: 41.5% for 22B, 56.3% for 1T
  // (model FLOPs / (time x 312 TFLOP/s x GPUs)).
  const auto k22_mfu = [](const Published& p) {
    const double B = p.batch, s = 2048, l = p.layers, h = p.hidden, V = 51200;
    return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)) /
           (p.published * 312e12 * p.gpus);
  };
  EXPECT_NEAR(k22_mfu(kPublished[10]), 0.415, 0.002);
  EXPECT_NEAR(k22_mfu(kPublished[11]), 0.514, 0.002);
  EXPECT_NEAR(k22_mfu(kPublished[12]), 0.560, 0.002);
  EXPECT_NEAR(k22_mfu(kPublished[13]), 0.563, 0.002);
  // paraplan's model FLOPs are Megatron's (K22 and M24's convention).
  const JobConfig config = job_of(kPublished[18]);
  const double s = 4096, h = 2048, l = 24, V = 131072, B = 192;
  EXPECT_NEAR(model_flops_per_step(config.model, 192) /
                  (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))),
              1.0, 1e-9);
}

// Each configuration of `source`'s predicted against published step time,
// printed as a table; returns the errors.
std::vector<double> errors_of(std::initializer_list<Source> sources) {
  std::vector<double> errors;
  std::printf("%-44s %-7s %3s %3s %5s %3s %9s %9s %7s\n", "source", "model", "tp", "pp", "gpus",
              "mb", "pub s", "pred s", "error");
  for (const Published& p : kPublished) {
    if (std::find(sources.begin(), sources.end(), p.source) == sources.end()) continue;
    const PlanCandidate plan = planned(p);
    EXPECT_EQ(plan.setting.shape.tensor_parallel, p.tp);
    EXPECT_EQ(plan.setting.shape.pipeline_stages, p.pp);
    const double published = published_step_seconds(p);
    const double predicted = comparable_step_seconds(p, plan);
    errors.push_back((predicted - published) / published);
    std::printf("%-44s %-7s %3d %3d %5d %3d %9.3f %9.3f %+6.1f%%\n", source_name(p.source), p.name,
                p.tp, p.pp, p.gpus, plan.setting.micro_batch_size, published, predicted,
                100 * errors.back());
  }
  return errors;
}

double mean_absolute(const std::vector<double>& errors) {
  double sum = 0;
  for (double error : errors) sum += std::abs(error);
  return errors.empty() ? 0 : sum / errors.size();
}

// The configurations the presets are calibrated against: each within 10%,
// the mean within 5% (tolerances: see the top of this file).
TEST(PublishedCalibration, KorthikantiAndMegatronCoreStepTimesWithinTenPercentMeanFive) {
  const std::vector<double> errors = errors_of({Source::K22, Source::K22Full, Source::M24});
  ASSERT_EQ(errors.size(), 12u);
  for (double error : errors) EXPECT_LE(std::abs(error), 0.10);
  std::printf("mean |error| over %zu configurations: %.1f%%\n", errors.size(),
              100 * mean_absolute(errors));
  EXPECT_LE(mean_absolute(errors), 0.05);
}

// Held out: N21's ten 2021 runs on the same A100s. The model, calibrated on
// 2022's software, predicts them 8-14% faster than published, and it should:
// the one configuration both papers ran (530B, t 8, p 35, 280 sequences per
// replica, full recomputation) took 54.1 s in N21 (with a 9-way data-parallel
// all-reduce and no sequence parallelism) and 49.05 s in K22, 10% faster
// software. The tolerance is that gap plus the 5% of the calibrated set: each
// within -15% and +5%, and the mean bias within 5 points of the 10% speedup.
TEST(PublishedCalibration, Narayanan2021RunsAreTheSoftwareGenerationSlower) {
  const std::vector<double> errors = errors_of({Source::N21});
  ASSERT_EQ(errors.size(), 10u);
  double bias = 0;
  for (double error : errors) {
    EXPECT_GE(error, -0.15);
    EXPECT_LE(error, 0.05);
    bias += error / errors.size();
  }
  std::printf("mean error over %zu configurations: %+.1f%%\n", errors.size(), 100 * bias);
  EXPECT_NEAR(bias, -0.10, 0.05);
}

// The same runs with 2021's software as one constant: the ratio of published
// to predicted step of the 530B run (the configuration N21 shares with K22),
// applied to the other nine, which stay held out. The constant must be the
// software gap the two papers show (54.1 s against 49.05 s: 1.10, of which
// the model puts 4 points on the runs' differing configurations), and the
// nine meet the calibrated set's tolerance: each within 10%, mean within 5%.
TEST(PublishedCalibration, Narayanan2021RunsWithinTenPercentMeanFiveOnceScaledBy2021sSoftware) {
  std::vector<double> errors = errors_of({Source::N21});
  ASSERT_EQ(errors.size(), 10u);
  const size_t shared = 8;  // 529.6B, kPublished[8]
  ASSERT_STREQ(kPublished[shared].name, "529.6B");
  const double software = 1 / (1 + errors[shared]);  // published / predicted
  EXPECT_GT(software, 1.05);
  EXPECT_LT(software, 1.12);
  errors.erase(errors.begin() + shared);
  std::printf("2021 software: steps x %.3f (fit on 529.6B); the nine others:\n", software);
  for (double& error : errors) {
    error = (1 + error) * software - 1;  // (predicted x software - published) / published
    std::printf("  %+.1f%%", 100 * error);
    EXPECT_LE(std::abs(error), 0.10);
  }
  std::printf("\nmean |error| over %zu held-out configurations: %.1f%%\n", errors.size(),
              100 * mean_absolute(errors));
  EXPECT_LE(mean_absolute(errors), 0.05);
}

}  // namespace
}  // namespace paraplan
