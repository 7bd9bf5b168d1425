// attention_choice.h: which kernels the CUDA backend runs a fused attention
// call on (kernels/ops.h attention_forward / attention_backward): cuDNN's
// SDPA (cudnn_attention.h) or paraplan's own kernels (cuda_attention*.cu: the
// bf16 tensor-core kernels where they apply, else the fp32 FMA kernels).
// Plain C++ (C++17: .cu files include it), no CUDA: built into every
// paraplan_kernels (CPU builds too), so its rules are tested on the CPU
// (attention_choice_test.cc).
//
// The setting, PARAPLAN_CUDA_ATTENTION, read once when the Ops object is made:
//   auto (unset, empty; the default)  cuDNN for the shapes it serves (bf16
//        storage, head_dim 64 or 128) when libcudnn loads, own kernels
//        otherwise; cuDNN missing is said once, in one line, and never fatal
//   own    paraplan's kernels only (tensor cores for bf16 where they apply)
//   fma    paraplan's fp32 FMA kernels only (no tensor cores, no cuDNN)
//   cudnn  cuDNN for the shapes it serves, own kernels for the rest; making
//          the Ops object throws when cuDNN cannot be loaded
// "Whichever is faster per shape" is, until a GPU window times paraplan's
// cuDNN path against its own (attention_bench --attention compare, which the
// device check's breakdown runs), this rule: cuDNN for every shape it serves,
// since PyTorch's cuDNN SDPA was measured well ahead of paraplan's kernels at
// GPT-2's shape (samples/gpt2_124m/README.md: 0.093 / 0.305 ms forward /
// backward against 0.130 / 0.814 at B 16, T 1024, H 12, D 64; PyTorch's
// backward need not be the deterministic one used here). A measured
// per-shape table can replace cudnn_sdpa_supports' rule without changing
// its callers.
//
// Forward and backward of a shape get the same answer (the choice depends on
// the setting, the shape and whether cuDNN loaded, never on the call), and
// both families write and read the same logsumexp (natural log of each row's
// sum of exp of the scaled scores, fp32 [B, H, T]), so a forward by one and a
// backward by the other is still correct (the tests check both mixes).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "kernels/dtype.h"

namespace paraplan::kernels::cuda {

enum class AttentionSetting { kAuto, kOwn, kFma, kCudnn };

// PARAPLAN_CUDA_ATTENTION's value (nullptr: unset). Throws std::runtime_error
// naming the value and the accepted ones for anything else.
AttentionSetting parse_attention_setting(const char* value);
const char* attention_setting_name(AttentionSetting setting);

// One attention call's shape: the key of cuDNN's cached graphs.
struct AttentionShapeKey {
  int batch = 0, seq_len = 0, heads = 0, kv_heads = 0, head_dim = 0;
  DType storage = DType::kFloat32;
  // (Spelled out: the .cu files that include this are C++17.)
  bool operator==(const AttentionShapeKey& other) const {
    return batch == other.batch && seq_len == other.seq_len && heads == other.heads &&
           kv_heads == other.kv_heads && head_dim == other.head_dim && storage == other.storage;
  }
};
struct AttentionShapeKeyHash {
  size_t operator()(const AttentionShapeKey& key) const;
};
std::string describe(const AttentionShapeKey& key);  // "B=8 T=1024 H=12 Hkv=12 D=64 bfloat16"

// The shapes paraplan runs on cuDNN's SDPA: bf16 storage (fp32 stays on the
// own kernels: cuDNN's SDPA takes 16-bit inputs), head_dim 64 or 128 (GPT-2's
// and Llama's, the ones tested), Hkv dividing H, every size positive and more
// than one token (cuDNN's backward refuses T = 1).
bool cudnn_sdpa_supports(const AttentionShapeKey& key);

enum class AttentionKernels { kCudnn, kOwn };

// Whether cuDNN's SDPA can run in this process, and what loaded ("cuDNN
// 9.19.0 (libcudnn.so.9)") or why not: one line.
struct CudnnAvailability {
  bool available = false;
  std::string description;
};

// The per-shape choice of one Ops object. probe loads cuDNN (called at most
// once, when the first shape cuDNN serves is met, or at construction for
// kCudnn); notice receives the one line saying that attention runs on the
// own kernels because cuDNN is missing (at most once per chooser).
class AttentionChooser {
 public:
  using Probe = std::function<CudnnAvailability()>;
  using Notice = std::function<void(const std::string&)>;
  // kCudnn: probes now and throws std::runtime_error when cuDNN is missing.
  AttentionChooser(AttentionSetting setting, Probe probe, Notice notice);

  AttentionKernels choose(const AttentionShapeKey& key);
  AttentionSetting setting() const { return setting_; }
  // Own kernels: whether the bf16 tensor-core kernels may run (not under fma).
  bool tensor_cores() const { return setting_ != AttentionSetting::kFma; }

 private:
  bool cudnn_available();

  AttentionSetting setting_;
  Probe probe_;
  Notice notice_;
  bool probed_ = false;
  CudnnAvailability availability_;
};

// The one line the own kernels' fallback prints, given why cuDNN is missing.
std::string cudnn_fallback_notice(const std::string& why);

}  // namespace paraplan::kernels::cuda
