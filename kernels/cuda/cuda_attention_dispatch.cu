// cuda_attention_dispatch.cu: the CUDA Ops' fused attention (kernels/ops.h
// attention_forward / attention_backward): each call on cuDNN's SDPA
// (cudnn_attention.h) or on paraplan's own kernels (cuda_attention.cu: bf16
// tensor cores where they apply, else fp32 FMA), as attention_choice.h's
// rule and PARAPLAN_CUDA_ATTENTION say, per shape.
//
// cuDNN is asked for only when a shape it serves first comes (libcudnn opened
// then, once per process; its handle and graphs once per Ops object, each
// shape's graphs built once and kept). Its workspace is the Ops object's
// DeviceScratch, which grows to the largest shape's once and then is reused:
// nothing is allocated in the steady state. A call whose tensors are not
// 16-byte aligned (Ops::allocate's always are) runs on the own kernels, and
// so does, under auto, a shape whose graphs cuDNN cannot build (one line;
// under cudnn that throws); since both families keep the same logsumexp, a
// forward and a backward may come from different families and still be
// correct.
// cuDNN writes (never adds) dQ, dK, dV. GradientWrite::kOverwrite (what the
// runtime's stages ask) writes them straight into dqkv; kAccumulate has them
// written into scratch and then added into dqkv, which rounds twice in bf16
// (the gradient to bf16, then the sum), where the own kernels round once;
// into zeros it gives the overwrite's values (tested).
#include <cuda_runtime.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/cudnn_library.h"

namespace paraplan::kernels::cuda {

namespace {

size_t round_up_256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

AttentionDispatch::AttentionDispatch(DType storage, AttentionSetting setting, cudaStream_t stream,
                                     DeviceScratch& scratch)
    : storage_(storage),
      stream_(stream),
      scratch_(scratch),
      chooser_(
          setting, [] { return cudnn_availability(); }, log_attention_notice) {}

AttentionDispatch::~AttentionDispatch() = default;

bool AttentionDispatch::on_cudnn(const AttentionShapeKey& key,
                                 std::initializer_list<const void*> tensors) {
  if (chooser_.choose(key) != AttentionKernels::kCudnn) return false;
  for (const void* tensor : tensors) {
    if (!is_aligned16(tensor)) return false;
  }
  if (cudnn_unusable_) return false;
  if (!cudnn_) {
    // The library loaded, but its handle may still fail (sub-libraries
    // missing or mismatched, the driver refusing): under auto, the own
    // kernels from then on, said once.
    try {
      cudnn_ = make_cudnn_attention(stream_);
    } catch (const std::exception& error) {
      if (chooser_.setting() == AttentionSetting::kCudnn) throw;
      cudnn_unusable_ = true;
      log_attention_notice(cudnn_fallback_notice(error.what()));
      return false;
    }
  }
  const std::string& why_not = cudnn_->prepare(key);
  if (why_not.empty()) return true;
  // A shape cuDNN cannot build: an error when cuDNN was required, else the
  // own kernels, said once.
  if (chooser_.setting() == AttentionSetting::kCudnn) {
    throw std::runtime_error("PARAPLAN_CUDA_ATTENTION=cudnn: cuDNN's SDPA cannot run " +
                             describe(key) + ": " + why_not);
  }
  log_attention_notice("attention: " + describe(key) +
                       " on paraplan's kernels: cuDNN's SDPA cannot run it (" + why_not + ")");
  return false;
}

void AttentionDispatch::forward(void* out, float* logsumexp, const void* qkv, int batch,
                                int seq_len, int heads, int kv_heads, int head_dim) {
  const AttentionShapeKey key{batch, seq_len, heads, kv_heads, head_dim, storage_};
  if (on_cudnn(key, {out, logsumexp, qkv})) {
    void* workspace = scratch_.get(cudnn_->forward_workspace_bytes(key));
    cudnn_->forward(key, out, logsumexp, qkv, workspace);
    return;
  }
  attention_forward(storage_, chooser_.tensor_cores(), out, logsumexp, qkv, batch, seq_len, heads,
                    kv_heads, head_dim, stream_);
}

void AttentionDispatch::backward(void* dqkv, float* scratch, const void* dout, const void* qkv,
                                 const void* out, const float* logsumexp, int batch, int seq_len,
                                 int heads, int kv_heads, int head_dim, GradientWrite write) {
  const AttentionShapeKey key{batch, seq_len, heads, kv_heads, head_dim, storage_};
  if (on_cudnn(key, {dqkv, dout, qkv, out, logsumexp})) {
    const size_t workspace_bytes = round_up_256(cudnn_->backward_workspace_bytes(key));
    if (write == GradientWrite::kOverwrite) {
      cudnn_->backward(key, dqkv, dout, qkv, out, logsumexp, scratch_.get(workspace_bytes));
      return;
    }
    // kAccumulate: the gradient into scratch after the workspace, then added.
    const size_t n = static_cast<size_t>(batch) * seq_len * (heads + 2 * kv_heads) * head_dim;
    char* space = static_cast<char*>(scratch_.get(workspace_bytes + n * dtype_bytes(storage_)));
    void* gradient = space + workspace_bytes;
    cudnn_->backward(key, gradient, dout, qkv, out, logsumexp, space);
    accumulate(storage_, dqkv, gradient, n, stream_);
    return;
  }
  attention_backward(storage_, chooser_.tensor_cores(), dqkv, scratch, dout, qkv, out, logsumexp,
                     batch, seq_len, heads, kv_heads, head_dim, write, stream_);
}

}  // namespace paraplan::kernels::cuda
