// transformer_ops.cc: the GEMMs and memory-bound operations of each
// architecture's block, embedding and head (conventions in transformer_ops.h).
#include "planner/cost/transformer_ops.h"

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "planner/cost/context_parallel_cost.h"

namespace paraplan {

namespace {

int bytes_of(schema::DType dtype) {
  return dtype == schema::DType::BFloat16 ? 2 : 4;
}

[[noreturn]] void unknown_architecture(const ModelConfig& model) {
  throw std::logic_error("transformer_ops: no operation list for architecture " +
                         std::to_string(static_cast<int>(model.architecture)));
}

// GPT-2 (runtime/model/gpt/gpt_stage.cc): pre-norm blocks with LayerNorm,
// biases on every linear layer (added in the GEMM's epilogue), GELU, learned
// positions, a tied or untied head.
PassOperations gpt2_block(const ModelConfig& model, int micro_batch_size, int tensor_parallel) {
  const double t = tensor_parallel, e = bytes_of(model.dtype);
  const double T = static_cast<double>(micro_batch_size) * model.seq_len;  // tokens
  const double C = model.d_model, F = model.ffn_size;
  const double hidden = T * C * e, ffn = T * F / t * e;
  PassOperations ops;
  ops.forward.gemms = {{"attention qkv", T, 3 * C / t, C},
                       {"attention output", T, C, C / t},
                       {"mlp up", T, F / t, C},
                       {"mlp down", T, C, F / t}};
  ops.forward.has_attention = ops.backward.has_attention = true;
  ops.forward.attention = {.batch_heads = micro_batch_size * model.num_heads / t,
                           .seq_len = static_cast<double>(model.seq_len),
                           .head_dim = C / model.num_heads};
  ops.backward.attention = ops.forward.attention;
  // LayerNorm reads its input and writes its output; a residual add reads two
  // and writes one; GELU reads and writes the MLP activation (in the up
  // GEMM's epilogue where fused, as the residual adds are in the row-parallel
  // GEMMs' without tensor parallelism: DecoderStageRegions::row_parallel_residual).
  const bool residual_in_gemm = tensor_parallel == 1;
  ops.forward.memory = {{"layernorm 1", 2 * hidden},
                        {"residual 1", 3 * hidden, residual_in_gemm},
                        {"layernorm 2", 2 * hidden},
                        {"gelu", 2 * ffn, true},
                        {"residual 2", 3 * hidden, residual_in_gemm}};
  ops.backward.gemms = backward_gemms(ops.forward.gemms);
  // Backward: a norm reads the output gradient and its input and accumulates
  // the input gradient into the residual stream's (read and write: the
  // residual adds need no pass of their own); GELU likewise over the MLP
  // activation (in the down GEMM's input-gradient epilogue where fused); the
  // biases sum their output gradients over the tokens (in the weight-gradient
  // GEMMs' epilogues where fused).
  const double bias_gradients = T * (3 * C / t + C + F / t + C) * e;
  ops.backward.memory = {{"layernorm 1", 4 * hidden},
                         {"layernorm 2", 4 * hidden},
                         {"gelu", 4 * ffn, true},
                         {"bias gradients", bias_gradients, true}};
  return ops;
}

PassOperations gpt2_embedding(const ModelConfig& model, int micro_batch_size) {
  const double e = bytes_of(model.dtype);
  const double hidden = static_cast<double>(micro_batch_size) * model.seq_len * model.d_model * e;
  PassOperations ops;
  // The token lookup reads one row per token and writes it; the position add
  // reads the output and the positions and writes the output. (A
  // vocabulary-parallel lookup writes every row, zeros outside its shard.)
  ops.forward.memory = {{"token embedding", 2 * hidden}, {"position embedding", 3 * hidden}};
  // The rows' gradients are added into the table (read and write) from the
  // output gradient, which the positions' gradient reads again.
  ops.backward.memory = {{"token embedding", 3 * hidden}, {"position embedding", 2 * hidden}};
  return ops;
}

// The final norm, the (vocabulary-parallel) logits GEMM and the fused
// cross-entropy: the same for both architectures.
PassOperations decoder_head(const ModelConfig& model, int micro_batch_size, int tensor_parallel) {
  const double t = tensor_parallel, e = bytes_of(model.dtype);
  const double T = static_cast<double>(micro_batch_size) * model.seq_len;
  const double hidden = T * model.d_model * e, logits = T * model.vocab_size / t * e;
  PassOperations ops;
  ops.forward.gemms = {{"logits", T, model.vocab_size / t, static_cast<double>(model.d_model)}};
  // The fused cross-entropy reads the logits twice (the row's online maximum
  // and sum, then the exponentials) and writes their gradient in place; on a
  // GPU the second read finds the row in L2 (kernels/cuda/cuda_loss.cu). The
  // vocabulary-parallel one reads its shard three times (maximum, sum of
  // exponentials, gradient: a collective between each) and writes once.
  if (tensor_parallel == 1)
    ops.forward.memory = {{"final norm", 2 * hidden},
                          {"cross-entropy", 2 * logits},
                          {"cross-entropy reread", logits, true}};
  else
    ops.forward.memory = {{"final norm", 2 * hidden}, {"cross-entropy", 4 * logits}};
  ops.backward.gemms = backward_gemms(ops.forward.gemms);
  ops.backward.memory = {{"final norm", 4 * hidden}};
  return ops;
}

// Llama (runtime/model/llama/llama_stage.cc): pre-norm blocks with RMSNorm, no
// biases but Qwen 2's on q, k and v, q, k and v in one GEMM (grouped-query: Hkv KV heads), the
// rotary embedding applied to q and k in place, gate and up in one GEMM and SwiGLU; no learned
// positions.
PassOperations llama_block(const ModelConfig& model, int micro_batch_size, int tensor_parallel) {
  const double t = tensor_parallel, e = bytes_of(model.dtype);
  const double T = static_cast<double>(micro_batch_size) * model.seq_len;  // tokens
  const double C = model.d_model, F = model.ffn_size;
  const double D = C / model.num_heads, H = model.num_heads;
  const double Hkv = model.num_kv_heads > 0 ? model.num_kv_heads : model.num_heads;
  const double hidden = T * C * e, ffn = T * F / t * e;
  const double rotated = T * (H + Hkv) * D / t * e;  // q and k
  PassOperations ops;
  ops.forward.gemms = {{"attention qkv", T, (H + 2 * Hkv) * D / t, C},
                       {"attention output", T, C, H * D / t},
                       {"mlp gate|up", T, 2 * F / t, C},
                       {"mlp down", T, C, F / t}};
  ops.forward.has_attention = ops.backward.has_attention = true;
  ops.forward.attention = {
      .batch_heads = micro_batch_size * H / t, .seq_len = double(model.seq_len), .head_dim = D};
  ops.backward.attention = ops.forward.attention;
  // RMSNorm reads its input and writes its output; the rotation reads and
  // writes q and k; SwiGLU reads gate and up and writes their product.
  // The residual adds as GPT-2's.
  const bool residual_in_gemm = tensor_parallel == 1;
  ops.forward.memory = {{"rmsnorm 1", 2 * hidden},
                        {"rotary", 2 * rotated},
                        {"residual 1", 3 * hidden, residual_in_gemm},
                        {"rmsnorm 2", 2 * hidden},
                        {"swiglu", 3 * ffn},
                        {"residual 2", 3 * hidden, residual_in_gemm}};
  ops.backward.gemms = backward_gemms(ops.forward.gemms);
  // SwiGLU's backward reads the output gradient, gate and up and writes both
  // of their gradients; the rotation turns the q and k gradients back in
  // place; the norms accumulate into the residual stream's gradient (GPT-2's).
  ops.backward.memory = {{"rmsnorm 1", 4 * hidden},
                         {"rmsnorm 2", 4 * hidden},
                         {"swiglu", 5 * ffn},
                         {"rotary", 2 * rotated}};
  // Qwen 2's q/k/v biases: their gradient reads the qkv gradient once more
  // (GPT-2's bias gradients' term; the epilogue's where it applies).
  if (model.qkv_bias)
    ops.backward.memory.push_back({"bias gradients", T * (H + 2 * Hkv) * D / t * e, true});
  return ops;
}

PassOperations llama_embedding(const ModelConfig& model, int micro_batch_size) {
  const double e = bytes_of(model.dtype);
  const double hidden = static_cast<double>(micro_batch_size) * model.seq_len * model.d_model * e;
  PassOperations ops;
  ops.forward.memory = {{"token embedding", 2 * hidden}};
  ops.backward.memory = {{"token embedding", 3 * hidden}};
  return ops;
}

}  // namespace

double Operations::model_flops() const {
  double flops = 0;
  for (const Gemm& gemm : gemms) flops += gemm.flops();
  if (has_attention) flops += attention.forward_flops();
  return flops;
}

std::vector<Gemm> backward_gemms(const std::vector<Gemm>& forward) {
  std::vector<Gemm> backward;
  for (const Gemm& gemm : forward) {
    backward.push_back({gemm.name, gemm.m, gemm.k, gemm.n, gemm.count});  // input gradient
    backward.push_back({gemm.name, gemm.k, gemm.n, gemm.m, gemm.count});  // weight gradient
  }
  return backward;
}

namespace {

// One architecture's three functions.
struct ArchitectureOps {
  PassOperations (*block)(const ModelConfig&, int, int);
  PassOperations (*embedding)(const ModelConfig&, int, int);
  PassOperations (*head)(const ModelConfig&, int, int);
};

const ArchitectureOps& architecture_ops(const ModelConfig& model) {
  static const ArchitectureOps gpt2{
      gpt2_block, [](const ModelConfig& m, int b, int) { return gpt2_embedding(m, b); },
      decoder_head};
  static const ArchitectureOps llama{
      llama_block, [](const ModelConfig& m, int b, int) { return llama_embedding(m, b); },
      decoder_head};
  switch (model.architecture) {
    case schema::Architecture::Gpt2:
      return gpt2;
    case schema::Architecture::Llama:
      return llama;
  }
  unknown_architecture(model);
}

// Sequence parallelism: the norms and residual adds run on the rank's 1/t of
// the tokens.
PassOperations shard_sequence_region(PassOperations ops, int tensor_parallel) {
  for (Operations* pass : {&ops.forward, &ops.backward})
    for (MemoryOperation& operation : pass->memory) {
      const std::string_view name = operation.name;
      for (std::string_view region : {"layernorm", "rmsnorm", "residual", "final norm"})
        if (name.substr(0, region.size()) == region) operation.bytes /= tensor_parallel;
    }
  return ops;
}

}  // namespace

PassOperations block_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                         bool sequence_parallel, int context_parallel) {
  const ModelConfig local = context_parallel_tokens(model, context_parallel);
  PassOperations ops = architecture_ops(local).block(local, micro_batch_size, tensor_parallel);
  // The rank's queries attend to every block of keys around the ring.
  for (Operations* pass : {&ops.forward, &ops.backward}) {
    pass->attention.seq_len = model.seq_len;
    pass->attention.query_shards = context_parallel;
  }
  return sequence_parallel ? shard_sequence_region(std::move(ops), tensor_parallel) : ops;
}

// Every device of the group writes the whole [tokens, d_model] embedding output.
PassOperations embedding_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                             int context_parallel) {
  const ModelConfig local = context_parallel_tokens(model, context_parallel);
  return architecture_ops(local).embedding(local, micro_batch_size, tensor_parallel);
}

PassOperations head_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                        bool sequence_parallel, int context_parallel) {
  const ModelConfig local = context_parallel_tokens(model, context_parallel);
  PassOperations ops = architecture_ops(local).head(local, micro_batch_size, tensor_parallel);
  return sequence_parallel ? shard_sequence_region(std::move(ops), tensor_parallel) : ops;
}

}  // namespace paraplan
