// cudnn_attention.h: causal self-attention on cuDNN's SDPA (through the
// cuDNN frontend's graph API), over paraplan's tensors as kernels/ops.h lays
// them out: qkv [B, T, (H + 2 Hkv) D] (q heads | k heads | v heads, read in
// place through strides), out [B, T, H D], logsumexp fp32 [B, H, T] (the
// natural log of each row's sum of exp of the scaled scores: cuDNN's
// "Stats", the same convention as paraplan's kernels, so either family's
// backward reads the other's forward), dqkv laid out as qkv. bf16 storage,
// grouped KV heads (cuDNN sums dK, dV over a group's query heads), the
// deterministic backward (ops.h: bitwise the same result run to run).
// Graphs are built once per shape (AttentionShapeKey) and kept; the workspace
// is the caller's (the Ops object's DeviceScratch, sized by
// *_workspace_bytes, grown once per shape, never in the steady state).
// Only built with the frontend's headers (PARAPLAN_HAVE_CUDNN_FRONTEND);
// make_cudnn_attention needs cudnn_availability() (cudnn_library.h) to be
// true. Internal to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "kernels/cuda/attention_choice.h"

namespace paraplan::kernels::cuda {

class CudnnAttention {
 public:
  virtual ~CudnnAttention() = default;

  // Builds the shape's forward and backward graphs, once: whether cuDNN runs
  // this shape on this device. "" when it does, else why not (cuDNN could
  // not build a graph: the frontend's message), the same on every call.
  virtual const std::string& prepare(const AttentionShapeKey& key) = 0;
  // The workspace each graph takes (prepare(key) first).
  virtual size_t forward_workspace_bytes(const AttentionShapeKey& key) const = 0;
  virtual size_t backward_workspace_bytes(const AttentionShapeKey& key) const = 0;

  // out, logsumexp = attention(qkv), queued on the stream. All pointers
  // 16-byte aligned; workspace of forward_workspace_bytes(key).
  virtual void forward(const AttentionShapeKey& key, void* out, float* logsumexp, const void* qkv,
                       void* workspace) = 0;
  // dqkv = the gradient (overwritten; dqkv is not read), queued on the stream.
  virtual void backward(const AttentionShapeKey& key, void* dqkv, const void* dout, const void* qkv,
                        const void* out, const float* logsumexp, void* workspace) = 0;
};

// The shape's forward and backward graphs built and validated by the
// frontend for a GPU of sm_version (90: Hopper) without a device or a handle
// (shape inference, strides, the SDPA node's support checks; not the
// engines' heuristics): "" or why not. What the CUDA build can check where
// no GPU is (cudnn_attention_test.cc); needs libcudnn loadable.
std::string validate_cudnn_attention_graphs(const AttentionShapeKey& key, int sm_version);

// A cuDNN handle bound to stream and an empty graph cache. Throws
// std::runtime_error when cuDNN is not available or not built in.
std::unique_ptr<CudnnAttention> make_cudnn_attention(cudaStream_t stream);

}  // namespace paraplan::kernels::cuda
