// cost_model_test.cc: parameter counts, FLOPs, activation formulas, ZeRO model
// state and stage memory against published numbers.
#include "planner/cost/cost_model.h"

#include <gtest/gtest.h>

#include "planner/schedule/schedule.h"

namespace paraplan {
namespace {

using schema::RecomputeMode;

ModelConfig gpt2_small() {
  ModelConfig model;
  model.vocab_size = 50257;
  model.seq_len = 1024;
  model.num_layers = 12;
  model.d_model = 768;
  model.num_heads = 12;
  model.ffn_size = 3072;
  return model;
}

// GPT-3 175B as in Korthikanti et al. (s = 2048, h = 12288, a = 96), 16-bit.
ModelConfig gpt3_175b() {
  ModelConfig model;
  model.vocab_size = 51200;
  model.seq_len = 2048;
  model.num_layers = 96;
  model.d_model = 12288;
  model.num_heads = 96;
  model.ffn_size = 4 * 12288;
  model.dtype = schema::DType::BFloat16;
  return model;
}

ModelConfig tiny() {
  ModelConfig model;
  model.vocab_size = 256;
  model.seq_len = 64;
  model.num_layers = 4;
  model.d_model = 64;
  model.num_heads = 4;
  model.ffn_size = 256;
  return model;
}

TEST(CostModelTest, Gpt2SmallHas124MParameters) {
  const ModelConfig model = gpt2_small();
  EXPECT_EQ(block_parameters(model), 12 * 768 * 768 + 13 * 768);
  EXPECT_EQ(model_parameters(model), 124439808);
  ModelConfig untied = model;
  untied.tied_embeddings = false;
  EXPECT_EQ(model_parameters(untied), 124439808 + 50257 * 768);
}

TEST(CostModelTest, StagesSplitParametersAndCopyTheTiedHead) {
  const ModelConfig model = gpt2_small();
  const StageLayout first{0, 6, true, false, {}};
  const StageLayout last{6, 6, false, true, {}};
  // The last stage keeps its own copy of the tied embedding as the head.
  EXPECT_EQ(stage_parameters(model, first) + stage_parameters(model, last),
            124439808 + 50257 * 768);
  EXPECT_EQ(head_parameters(model, /*stage_has_embedding=*/true), 2 * 768);
  // Megatron tensor parallelism: split matrices, replicated LayerNorms and row biases.
  EXPECT_EQ(block_parameters(model, 4),
            (3 * 768 * 768 + 3 * 768 + 768 * 768 + 2 * 3072 * 768 + 3072) / 4 + 6 * 768);
}

TEST(CostModelTest, ZeroPaperModelStateNumbers) {
  // ZeRO (Rajbhandari et al.): 7.5B parameters, mixed-precision Adam K = 12,
  // 2 + 2 + K = 16 bytes per parameter = 120 GB; partitioning the optimizer state
  // over Nd = 64 gives 2 + 2 + 12/64 bytes per parameter = 31.4 GB.
  const ModelStateMemory replicated = model_state_memory(7.5e9, 2, 6, 0, zero_sharding(0, 64));
  EXPECT_DOUBLE_EQ(replicated.weights, 15e9);
  EXPECT_DOUBLE_EQ(replicated.gradients, 15e9);
  EXPECT_DOUBLE_EQ(replicated.optimizer_state, 90e9);
  EXPECT_DOUBLE_EQ(replicated.total(), 120e9);
  const ModelStateMemory sharded = model_state_memory(7.5e9, 2, 6, 0, zero_sharding(1, 64));
  EXPECT_DOUBLE_EQ(sharded.total(), 31.40625e9);
  EXPECT_NEAR(sharded.total() / 1e9, 31.4, 0.01);
  // opt_transient_coef adds a multiple of the weights, unsharded.
  EXPECT_DOUBLE_EQ(model_state_memory(1e9, 2, 6, 2, zero_sharding(2, 64)).optimizer_transient, 4e9);
}

TEST(CostModelTest, Gpt3PerLayerActivationsFollowKorthikantiWithFusedAttention) {
  const ModelConfig model = gpt3_175b();
  const int64_t sbh = 2048LL * 12288, asb = 96LL * 2048, sb = 2048;  // b = 1
  // Korthikanti's 34 + 5as/h loses the 5as/h (s x s) term: the fused attention
  // stores no scores; and its two 1-byte dropout masks (2 sbh): paraplan has
  // no dropout. What stays is 32 sbh, the two LayerNorms' fp32 mean and rstd
  // (16 sb) and the fp32 logsumexp, 4 asb.
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::None), 32 * sbh + 16 * sb + 4 * asb);
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::None), 806125568LL);
  // Tensor parallel t = 8: 8 + 24/8 sbh, and the heads' logsumexp split 8 ways.
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::None, 8),
            8 * sbh + 16 * sb + 24 * sbh / 8 + 4 * asb / 8);
  // Selective drops the attention output (2 sbh / t) and logsumexp; full keeps
  // the 2sbh block input.
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::Selective), 30 * sbh + 16 * sb);
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::Selective, 8),
            8 * sbh + 16 * sb + 22 * sbh / 8);
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::Full), 2 * sbh);
  // Linear in the micro-batch size.
  EXPECT_EQ(block_activation_bytes(model, 4, RecomputeMode::None),
            4 * (32 * sbh + 16 * sb + 4 * asb));
}

TEST(CostModelTest, Float32DoublesTheTwoByteActivationTerms) {
  ModelConfig model = gpt3_175b();
  model.dtype = schema::DType::Float32;
  const int64_t sbh = 2048LL * 12288, asb = 96LL * 2048, sb = 2048;
  // 32 two-byte sbh terms become 64; the norms' statistics and logsumexp are
  // fp32 either way.
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::None), 64 * sbh + 16 * sb + 4 * asb);
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::Selective), 60 * sbh + 16 * sb);
  EXPECT_EQ(block_activation_bytes(model, 1, RecomputeMode::Full), 4 * sbh);
}

TEST(CostModelTest, Gpt3BlockFlops) {
  const ModelConfig model = gpt3_175b();
  const double s = 2048, h = 12288;
  const double forward = 24 * s * h * h + 4 * s * s * h;  // Megatron's per-layer count
  EXPECT_DOUBLE_EQ(block_forward_flops(model, 1), forward);
  EXPECT_DOUBLE_EQ(block_forward_flops(model, 1), 7627861917696.0);
  EXPECT_DOUBLE_EQ(attention_core_forward_flops(model, 1), 4 * s * s * h);
  EXPECT_DOUBLE_EQ(block_backward_flops(model, 1, RecomputeMode::None), 2 * forward);
  EXPECT_DOUBLE_EQ(block_backward_flops(model, 1, RecomputeMode::Full), 3 * forward);
  EXPECT_DOUBLE_EQ(block_backward_flops(model, 1, RecomputeMode::Selective),
                   2 * forward + 4 * s * s * h);
  EXPECT_DOUBLE_EQ(head_forward_flops(model, 2), 2 * 2 * s * h * 51200);
}

TEST(CostModelTest, StageFlopsAndModelFlops) {
  const ModelConfig model = tiny();
  const StageLayout stage{
      0,
      4,
      true,
      true,
      {RecomputeMode::None, RecomputeMode::Full, RecomputeMode::Selective, RecomputeMode::None}};
  const double block = block_forward_flops(model, 2), head = head_forward_flops(model, 2);
  const StageFlops flops = stage_flops(model, stage, 2);
  EXPECT_DOUBLE_EQ(flops.forward, 4 * block + head);
  EXPECT_DOUBLE_EQ(flops.backward,
                   8 * block + block + attention_core_forward_flops(model, 2) + 2 * head);
  // MFU's numerator ignores recomputation: 3 x forward over the global batch.
  EXPECT_DOUBLE_EQ(model_flops_per_step(model, 8),
                   3 * (4 * block_forward_flops(model, 8) + head_forward_flops(model, 8)));
}

TEST(CostModelTest, InFlightMicroBatches) {
  using schema::ScheduleKind;
  EXPECT_EQ(in_flight_micro_batches(ScheduleKind::OneForwardOneBackward, 0, 4, 8), 4);
  EXPECT_EQ(in_flight_micro_batches(ScheduleKind::OneForwardOneBackward, 3, 4, 8), 1);
  EXPECT_EQ(in_flight_micro_batches(ScheduleKind::OneForwardOneBackward, 0, 4, 2), 2);
  EXPECT_EQ(in_flight_micro_batches(ScheduleKind::GPipe, 3, 4, 8), 8);
}

// Interleaved: every rank's per-chunk peaks of its whole stream, summed, the
// largest over the ranks (the model takes m = 2p's where p divides m).
TEST(CostModelTest, InterleavedSlots) {
  for (int v : {2, 3, 4})
    for (int p : {2, 3, 4, 5, 7, 8, 16, 32})
      for (int m : {p, 2 * p, 3 * p, 4 * p, 8 * p, 2 * p + 1}) {
        const PipelineSchedule schedule =
            generate_schedule(schema::ScheduleKind::Interleaved1F1B, p, m, v);
        int slots = 0;
        for (int rank = 0; rank < p; ++rank) {
          int rank_slots = 0;
          for (int most : max_in_flight(schedule, rank)) rank_slots += most;
          slots = std::max(slots, rank_slots);
        }
        EXPECT_EQ(in_flight_micro_batches(schema::ScheduleKind::Interleaved1F1B, 0, p, m, v), slots)
            << "p=" << p << " m=" << m << " v=" << v;
      }
}

// ZB-H1, ZB-V and DualPipe-V: every rank's slots (as the runtime holds them)
// and most micro-batches waiting for their W, per chunk summed, from the
// whole stream (the model takes m = 2p's from 2p on).
TEST(CostModelTest, ZeroBubbleCounts) {
  for (const auto kind : {schema::ScheduleKind::ZeroBubbleH1, schema::ScheduleKind::ZeroBubbleV,
                          schema::ScheduleKind::DualPipeV})
    for (int p : {1, 2, 3, 4, 5, 7, 8, 16})
      for (int m : {p, 2 * p - 1, 2 * p, 2 * p + 1, 3 * p, 4 * p + 3, 8 * p}) {
        const int v = v_shaped(kind) ? 2 : 1;
        if (v_shaped(kind) && (m < p || p < 2)) continue;
        if (kind == schema::ScheduleKind::DualPipeV && m < 2 * p) continue;
        const PipelineSchedule schedule = generate_schedule(kind, p, m, v);
        for (int rank = 0; rank < p; ++rank) {
          int pending = 0, slots = 0;
          for (int most : max_weight_pending(schedule, rank)) pending += most;
          for (int most : max_slots_held(schedule, rank)) slots += most;
          EXPECT_EQ(in_flight_micro_batches(kind, rank, p, m, v), slots)
              << schema::EnumNameScheduleKind(kind) << " p=" << p << " m=" << m << " rank=" << rank;
          EXPECT_EQ(weight_pending_micro_batches(kind, rank, p, m), pending)
              << schema::EnumNameScheduleKind(kind) << " p=" << p << " m=" << m << " rank=" << rank;
        }
      }
  EXPECT_EQ(weight_pending_micro_batches(schema::ScheduleKind::OneForwardOneBackward, 0, 4, 8), 0);
}

// A ZB-H1 stage keeps the deferred copies only for the micro-batches waiting
// for their W, not for every micro-batch holding a slot.
TEST(CostModelTest, DeferredWeightCopiesOnlyForTheWaitingMicroBatches) {
  const ModelConfig model = tiny();
  PlannerOptions options;
  options.pipeline_scheduler = schema::ScheduleKind::ZeroBubbleH1;
  const StageLayout middle{1, 1, false, false, {RecomputeMode::None}};
  const ParallelShape shape{4, 1, 1};
  options.memory_granularity = 1;
  for (int rank : {1, 2}) {
    const StageMemoryTerms terms =
        stage_memory_terms(model, options, false, false, rank, shape, 2, 8);
    ASSERT_GT(terms.deferred_per_block, 0);
    // Slots are held from the load or receipt until W.
    EXPECT_EQ(terms.in_flight,
              in_flight_micro_batches(schema::ScheduleKind::ZeroBubbleH1, rank, 4, 8));
    EXPECT_GE(terms.in_flight, 4);
    EXPECT_EQ(terms.weight_pending,
              weight_pending_micro_batches(schema::ScheduleKind::ZeroBubbleH1, rank, 4, 8));
    EXPECT_LT(terms.weight_pending, terms.in_flight);
    // The activations: the slots' worth plus weight_pending copies.
    const MemoryBreakdown zb = stage_memory(model, options, middle, rank, shape, 2, 8);
    EXPECT_EQ(static_cast<int64_t>(zb.activations),
              terms.in_flight * (terms.kept[0] + terms.per_chunk_extra) +
                  terms.weight_pending * terms.deferred_per_block)
        << rank;
  }
}

TEST(CostModelTest, StageMemoryBreakdown) {
  const ModelConfig model = tiny();  // float32
  PlannerOptions options;            // AutoDist defaults: resident 2, transient 0, coef 2
  const StageLayout middle{1, 1, false, false, {RecomputeMode::None}};
  const ParallelShape shape{4, 1, 1};
  const MemoryBreakdown memory = stage_memory(model, options, middle, 1, shape, 2, 8);
  const uint64_t weights = 4ULL * block_parameters(model);
  EXPECT_EQ(memory.weights, weights);
  EXPECT_EQ(memory.gradients, weights);
  EXPECT_EQ(memory.optimizer_state, 2 * weights);
  EXPECT_EQ(memory.optimizer_transient, 0u);
  // Stage 1 of 4 under 1F1B holds min(4 - 1, 8) = 3 micro-batches, each the
  // block's activations, the stage's output [s, b, h] (no head here) and the
  // int32 token ids and targets every stage's slots hold.
  const int64_t output = 4 * 64 * 2 * 64 + 8 * 64 * 2;
  EXPECT_EQ(stage_output_activation_bytes(model, 2) + embedding_activation_bytes(model, 2), output);
  EXPECT_EQ(memory.activations,
            3ULL * (block_activation_bytes(model, 2, RecomputeMode::None) + output));
  // Largest op outputs: the c_fc and GELU outputs, b*s*F*4 bytes each (the
  // fused attention writes no s x s scores); transient = 2 * (largest + second).
  EXPECT_EQ(memory.transient, 2ULL * 2 * (4ULL * 2 * 64 * 256));
  EXPECT_EQ(memory.total(), 4 * weights + memory.activations + memory.transient);

  PlannerOptions gpipe = options;
  gpipe.pipeline_scheduler = schema::ScheduleKind::GPipe;
  EXPECT_EQ(stage_memory(model, gpipe, middle, 1, shape, 2, 8).activations,
            8ULL * (block_activation_bytes(model, 2, RecomputeMode::None) + output));

  // Full recompute keeps the block input and rebuilds one layer during backward.
  const StageLayout recomputed{1, 1, false, false, {RecomputeMode::Full}};
  EXPECT_EQ(stage_memory(model, options, recomputed, 1, shape, 2, 8).activations,
            3ULL * (block_activation_bytes(model, 2, RecomputeMode::Full) + output) +
                block_activation_bytes(model, 2, RecomputeMode::None) -
                block_activation_bytes(model, 2, RecomputeMode::Full));
  // Selective rebuilds one layer's attention output (4*b*s*h bytes) and
  // logsumexp (4*a*s*b) during backward.
  const StageLayout selective{1, 1, false, false, {RecomputeMode::Selective}};
  EXPECT_EQ(block_activation_bytes(model, 2, RecomputeMode::None) -
                block_activation_bytes(model, 2, RecomputeMode::Selective),
            4 * 2 * 64 * 64 + 4 * 4 * 64 * 2);
  EXPECT_EQ(stage_memory(model, options, selective, 1, shape, 2, 8).activations,
            3ULL * (block_activation_bytes(model, 2, RecomputeMode::Selective) + output) +
                (4 * 2 * 64 * 64 + 4 * 4 * 64 * 2));
}

TEST(CostModelTest, ZeroGroupsInferenceAndGranularity) {
  const ModelConfig model = tiny();
  const StageLayout whole{0, 4, true, true, std::vector<RecomputeMode>(4, RecomputeMode::None)};
  const uint64_t weights = 4ULL * stage_parameters(model, whole);
  PlannerOptions zero;
  zero.zero_stage = 1;
  zero.zero_ngroups = 2;
  // ZeRO-1 over 8 data-parallel ranks in 2 groups shards the state 4 ways.
  EXPECT_EQ(stage_memory(model, zero, whole, 0, {1, 8, 1}, 1, 1).optimizer_state, 2 * weights / 4);

  PlannerOptions inference;
  inference.is_train = false;
  const MemoryBreakdown infer = stage_memory(model, inference, whole, 0, {1, 1, 1}, 1, 1);
  EXPECT_EQ(infer.weights, weights);
  EXPECT_EQ(infer.gradients + infer.optimizer_state + infer.activations, 0u);
  EXPECT_GT(infer.transient, 0u);

  PlannerOptions coarse;
  coarse.memory_granularity = 1 << 20;
  const MemoryBreakdown rounded = stage_memory(model, coarse, whole, 0, {1, 1, 1}, 1, 1);
  EXPECT_EQ(rounded.weights, (weights + (1 << 20) - 1) / (1 << 20) * (1 << 20));
  EXPECT_EQ(rounded.activations % (1 << 20), 0u);
  EXPECT_EQ(rounded.transient % (1 << 20), 0u);
}

}  // namespace
}  // namespace paraplan
