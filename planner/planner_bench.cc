// planner_bench.cc: how long the full plan search takes, on one core
// (nproc = 1): a 1-trillion-parameter GPT on 3072 GPUs, GPT-3 175B on 1024 GPUs,
// and the growth with the block count and with the GPU count.
//
//   ninja -C build planner_bench && build/planner/planner_bench
#include <benchmark/benchmark.h>

#include <string>

#include "planner/search/plan_search.h"

namespace paraplan {
namespace {

// A GPT on A100-80GB nodes of 8, bf16 with fp32 Adam state (opt_resident_coef
// 6), 80 GB per device: the whole search space (every mesh, micro-batch size,
// ZeRO 0/1, partition and per-block recompute), AutoDist's default filters.
JobConfig gpt(int layers, int d_model, int heads, int global_batch, int gpus) {
  return parse_job_config("", "bench.toml",
                          {{"model.num_layers", std::to_string(layers)},
                           {"model.d_model", std::to_string(d_model)},
                           {"model.num_heads", std::to_string(heads)},
                           {"model.seq_len", "2048"},
                           {"model.vocab_size", "51200"},
                           {"model.dtype", "bfloat16"},
                           {"training.global_batch_size", std::to_string(global_batch)},
                           {"training.total_steps", "1000"},
                           {"cluster.preset", "a100-80g"},
                           {"cluster.num_nodes", std::to_string(gpus / 8)},
                           {"planner.memory_constraint", "80"},
                           {"planner.opt_resident_coef", "6"}});
}

void run(benchmark::State& state, const JobConfig& config) {
  SearchResult result;
  for (auto _ : state) {
    result = search_plans(config);
    benchmark::DoNotOptimize(result.ranked.data());
  }
  state.counters["settings"] = static_cast<double>(result.statistics.settings);
  state.counters["searched"] = static_cast<double>(result.statistics.solved);
  state.counters["step_s"] = result.ranked.front().estimate.prediction.step_seconds;
  state.counters["mfu"] = result.ranked.front().estimate.prediction.mfu;
}

// Narayanan et al. 2021's 1T configuration: 128 blocks, h 25600, 160 heads.
void BM_Gpt1T_3072Gpus(benchmark::State& state) {
  run(state, gpt(128, 25600, 160, 3072, 3072));
}
BENCHMARK(BM_Gpt1T_3072Gpus)->Unit(benchmark::kMillisecond);

// The same with the bubble and unbalance filters off: every setting is searched
// unless its bound loses.
void BM_Gpt1T_3072Gpus_NoFilters(benchmark::State& state) {
  JobConfig config = gpt(128, 25600, 160, 3072, 3072);
  apply_override(config, "planner.max_pipeline_bubble_ratio", "1");
  apply_override(config, "planner.max_pipeline_unbalance_ratio", "0");
  run(state, config);
}
BENCHMARK(BM_Gpt1T_3072Gpus_NoFilters)->Unit(benchmark::kMillisecond);

void BM_Gpt3_175B_1024Gpus(benchmark::State& state) {
  run(state, gpt(96, 12288, 96, 1536, 1024));
}
BENCHMARK(BM_Gpt3_175B_1024Gpus)->Unit(benchmark::kMillisecond);

// Growth with blocks: the 1T shape with 32..512 blocks on 3072 GPUs.
void BM_Gpt1T_Blocks(benchmark::State& state) {
  run(state, gpt(static_cast<int>(state.range(0)), 25600, 160, 3072, 3072));
}
BENCHMARK(BM_Gpt1T_Blocks)->RangeMultiplier(2)->Range(32, 512)->Unit(benchmark::kMillisecond);

// Growth with GPUs: the 1T model on 256..8192 GPUs, one sequence per GPU per
// step (weak scaling; a fixed batch leaves 8192 GPUs no plan within the bubble
// filter).
void BM_Gpt1T_Gpus(benchmark::State& state) {
  const int gpus = static_cast<int>(state.range(0));
  run(state, gpt(128, 25600, 160, gpus, gpus));
}
BENCHMARK(BM_Gpt1T_Gpus)->RangeMultiplier(2)->Range(256, 8192)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace paraplan

BENCHMARK_MAIN();
