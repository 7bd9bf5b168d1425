// transformer_ops.h: what one device of a tensor-parallel group computes for
// a transformer block, the embedding and the head, per micro-batch: the GEMMs
// (shapes) and the memory-bound operations (bytes moved), forward and
// backward. The one description of an architecture's work: the FLOP counts
// (cost_model.h) and the analytic time model (compute_model.h) are both
// derived from it, so they cannot disagree.
//
// Conventions:
// - A GEMM computes [m x k] x [k x n] (m = tokens for the layers' forward),
//   `count` times; 2 m n k FLOPs each. A forward GEMM's backward is its input
//   gradient [m x n] x [n x k] and its weight gradient [k x m] x [m x n]
//   (derived here, the same for every architecture).
// - The attention core (QK^T, softmax, scores x V, fused as flash attention)
//   is listed apart: FLOPs over the full s x s (the MFU convention; a
//   context-parallel rank's 1 / cp of it) and the bytes it moves; its time
//   model knows about the causal mask.
// - A memory-bound operation (norms, activations, residual adds, the
//   embedding gather, the loss) is the bytes it reads and writes; backward
//   moves what the architecture lists for it. One the CUDA backend folds into
//   a neighbouring kernel is marked so; the device model decides its cost.
// - Tensor parallelism is Megatron's: the column-parallel GEMMs' n and the
//   row-parallel GEMMs' k are split t ways, as are the attention heads, the
//   MLP activation and the vocabulary; norms and residuals are replicated,
//   or with sequence parallelism split t ways along the tokens (the
//   operations named "layernorm", "rmsnorm", "residual" and "final norm").
//   Collectives are not listed (communication_model.h).
// - An architecture is one function (block_ops / embedding_ops / head_ops
//   switch over ModelConfig::architecture); adding one adds a case.
#pragma once

#include <vector>

#include "planner/job/job_config.h"

namespace paraplan {

struct Gemm {
  const char* name = "";
  double m = 0, n = 0, k = 0;
  double count = 1;
  double flops() const { return 2 * m * n * k * count; }
};

struct MemoryOperation {
  const char* name = "";
  double bytes = 0;
  // Done inside a neighbouring kernel by the GPUs' backend (a cuBLASLt
  // epilogue: GELU, DGELU, BGRADB, the residual as the C operand; the
  // cross-entropy's second read of a row, from L2): free on a device whose
  // DeviceModel::fuses_on_gpu says so, a pass of its own on the CPU.
  bool fused_on_gpu = false;
};

// The fused attention core of one micro-batch on one device.
struct AttentionCore {
  double batch_heads = 0;  // micro-batch x heads on this device
  double seq_len = 0;      // the keys: the whole sequence
  double head_dim = 0;
  // Context parallelism (context_parallel_cost.h): the rank's queries are
  // seq_len / query_shards tokens, balanced so that it computes 1 /
  // query_shards of the causal attention, in query_shards ring steps (a
  // kernel each).
  double query_shards = 1;
  double forward_flops() const {
    return 4 * batch_heads * seq_len * seq_len * head_dim / query_shards;
  }
  // Backward recomputes the scores and forms four products: 2.5 x forward
  // as executed (counted as 2 x forward in MFU's model FLOPs).
  double backward_flops() const { return 2.5 * forward_flops(); }
  // Bytes the forward reads (q, and k, v of every block) and writes (output,
  // logsumexp) once, and across ring steps the fp32 output it accumulates.
  double forward_bytes(int element_bytes) const {
    const double queries = seq_len / query_shards;
    return batch_heads *
           (queries * (2 * head_dim * element_bytes + 4) + seq_len * 2 * head_dim * element_bytes +
            (query_shards - 1) * queries * head_dim * 8);
  }
  double backward_bytes(int element_bytes) const { return 2.5 * forward_bytes(element_bytes); }
};

struct Operations {
  std::vector<Gemm> gemms;
  std::vector<MemoryOperation> memory;
  bool has_attention = false;
  AttentionCore attention;  // when has_attention
  // GEMM FLOPs plus the attention core's forward FLOPs (the MFU convention).
  double model_flops() const;
};

struct PassOperations {
  Operations forward, backward;
};

// One block, the embedding (token and position lookup), and the head (final
// norm, logits, loss) of micro_batch_size sequences on one device of a
// tensor_parallel group.
// sequence_parallel: the norm and residual operations move 1/t of their bytes.
// context_parallel: the device holds seq_len / cp tokens of each sequence
// (context_parallel_cost.h): every operation runs on those, the attention
// core's queries too against the whole sequence's keys.
PassOperations block_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                         bool sequence_parallel = false, int context_parallel = 1);
PassOperations embedding_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                             int context_parallel = 1);
PassOperations head_ops(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                        bool sequence_parallel = false, int context_parallel = 1);

// The backward GEMMs of forward GEMMs: input and weight gradients of each.
std::vector<Gemm> backward_gemms(const std::vector<Gemm>& forward);

}  // namespace paraplan
