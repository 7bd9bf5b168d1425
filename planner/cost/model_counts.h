// model_counts.h: what the planner counts that depends on the architecture,
// for memory, in one place: a block's linear layers, parameters per
// tensor-parallel shard, the bytes a block keeps for backward per recompute
// mode, and the op outputs the transient memory peaks over. (What a block
// computes, for FLOPs and time: transformer_ops.h.) The memory model
// (cost_model.h, stage_cost.h) composes these into stages and never names an
// architecture.
//
// GPT-2 (runtime/model/gpt/gpt_layout.h, Hugging Face GPT-2): a block holds
// ln_1, c_attn [3C, C], attn c_proj [C, C], ln_2, c_fc [F, C], mlp c_proj
// [C, F], all with biases; the first stage holds wte and wpe; the last ln_f
// and the head (wte itself when tied and on the same stage).
// Llama (runtime/model/llama/llama_layout.h, LlamaForCausalLM): a block holds
// input_layernorm, q_proj [H D, C], k_proj and v_proj [Hkv D, C] (grouped
// query attention), o_proj [C, H D], post_attention_layernorm, gate_proj and
// up_proj [F, C], down_proj [C, F], no biases; the first stage holds
// embed_tokens; the last the final norm and lm_head (untied by default).
// Megatron tensor parallelism splits the column-parallel GEMMs (c_attn, c_fc,
// q, k, v, gate, up: weights and biases), the row-parallel GEMMs' weights
// (c_proj, o, down), the embedding and the head t ways; norms and the
// row-parallel biases are replicated. Sequence parallelism (Korthikanti et
// al.; runtime/model/tensor_parallel.h) also splits the activations of the
// norm and residual regions t ways along the tokens: seq_len divides by t.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan {

// KV heads of attention (num_heads for gpt2) and the head dimension.
int kv_heads(const ModelConfig& model);
int head_dim(const ModelConfig& model);

// One linear layer of a block: y[tokens, out] = x[tokens, in] W^T (+ bias).
// column_parallel splits out_features t ways, otherwise in_features is split
// (row-parallel); the bias of a row-parallel layer is replicated.
struct LinearLayer {
  std::string name;  // Hugging Face module name within the block ("self_attn.q_proj")
  int64_t out_features = 0, in_features = 0;
  bool column_parallel = true;
  bool bias = false;
};
// The block's linear layers in forward order (the GEMMs one block runs).
std::vector<LinearLayer> block_linear_layers(const ModelConfig& model);

// Parameters held by one device of one tensor-parallel group (t = 1: all).
// replicate_below is [planner] ignore_small_tensor_threshold: a tensor the
// Megatron layout would split but with fewer elements than this stays whole on
// every device of the group (the default 1 splits everything).
int64_t block_parameters(const ModelConfig& model, int tensor_parallel = 1,
                         int64_t replicate_below = 1);
// The embeddings: wte + wpe (gpt2), embed_tokens (llama).
int64_t embedding_parameters(const ModelConfig& model, int tensor_parallel = 1,
                             int64_t replicate_below = 1);
// The final norm plus the head weight when the stage needs its own (untied,
// or tied but on a stage without the embedding).
int64_t head_parameters(const ModelConfig& model, bool stage_has_embedding, int tensor_parallel = 1,
                        int64_t replicate_below = 1);

// The fp32 statistics a norm keeps per token: LayerNorm's mean and rstd
// (gpt2), RMSNorm's rstd (llama).
int64_t norm_statistics_bytes_per_token(const ModelConfig& model);

// Bytes one block keeps for backward, per micro-batch, per device, as the
// runtime's stages allocate them (its input included; see cost_model.h for
// the stage-level terms). With sequence_parallel the replicated terms (the
// input, norm outputs and statistics, residual) divide by t.
int64_t block_activation_bytes(const ModelConfig& model, int micro_batch_size,
                               schema::RecomputeMode recompute, int tensor_parallel = 1,
                               bool sequence_parallel = false);
// The gradient scratch a stage allocates once and its blocks share in
// backward (runtime/model/gpt/gpt_stage.cc, llama/llama_stage.cc: the
// residual and norm gradients, one block's inner gradients, the attention
// backward's row terms; Llama's rotary tables), plus, with the head under
// tensor parallelism, the vocab-parallel cross-entropy's three row statistics,
// and the device accumulators of the gradient norm and (head) the losses.
// Sequence parallelism shards the residual gradient and adds the gathered
// [tokens, C] buffer, a norm gradient shard and the norms' weight-gradient
// scratch (runtime/model/decoder_stage.h). Llama's rotary tables cover
// whole_seq_len positions (0: model.seq_len): a context-parallel rank, whose
// model is its token share, keeps every position's (its chunks are early and
// late).
int64_t stage_workspace_bytes(const ModelConfig& model, int micro_batch_size, int tensor_parallel,
                              bool has_head, bool sequence_parallel = false, int whole_seq_len = 0);

// The workspace of cuDNN's SDPA on one device of a stage
// (common/attention_workspace.h has the formula and its source), counted
// where the CUDA backend's default runs the plan's attention on cuDNN: a GPU
// cluster preset (not "cpu"), bf16, head_dim 64 or 128, and the one-rank
// fused attention (no context parallelism, no document mask: those run the
// ring's block kernels). The largest shape's, held once per rank whatever
// the number of blocks or micro-batches; is_train adds the backward's.
// 0 otherwise, so CPU plans are unchanged. It over-counts a run whose
// libcudnn is missing or that sets PARAPLAN_CUDA_ATTENTION=own (the plan
// cannot know), which is the safe side.
int64_t cudnn_attention_workspace_bytes(const ModelConfig& model, const std::string& cluster_preset,
                                        int micro_batch_size, int tensor_parallel,
                                        int context_parallel, bool document_mask, bool is_train);

// The CUDA backend's GEMM workspaces on one device (common/gemm_workspace.h:
// one per lane, two lanes), held for the whole run: a GPU cluster preset's;
// 0 for "cpu", so CPU plans are unchanged.
int64_t gemm_workspace_bytes(const std::string& cluster_preset);

// The scratch the CUDA backend's backward kernels take besides cuDNN's
// (common/kernel_scratch.h), on a rank of a stage training on a GPU preset
// with `multiprocessors` SMs: the sum of the distinct requests (the scratch
// keeps what it outgrew): the norms' partials (on token shards too under
// sequence parallelism), GPT-2's bias column sums on both GEMM lanes and the
// epilogue's row, the token embedding's sort where the rank holds it, and
// the block attention's row terms under context parallelism or document
// masking. 0 for "cpu" or inference.
int64_t cuda_kernel_scratch_bytes(const ModelConfig& model, const std::string& cluster_preset,
                                  int multiprocessors, int micro_batch_size, int tensor_parallel,
                                  int context_parallel, bool sequence_parallel, bool document_mask,
                                  bool has_embedding, bool is_train);

// The sizes of the op outputs one block's forward writes, per device (with
// sequence parallelism the norms' outputs are token shards).
std::vector<int64_t> block_op_output_bytes(const ModelConfig& model, int micro_batch_size,
                                           int tensor_parallel = 1, bool sequence_parallel = false);

int element_bytes(schema::DType dtype);

}  // namespace paraplan
