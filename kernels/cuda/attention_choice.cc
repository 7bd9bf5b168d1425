// attention_choice.cc: the CUDA backend's choice between cuDNN's SDPA and
// paraplan's own attention kernels (attention_choice.h). Plain C++.
#include "kernels/cuda/attention_choice.h"

#include <stdexcept>
#include <string>
#include <utility>

namespace paraplan::kernels::cuda {

AttentionSetting parse_attention_setting(const char* value) {
  if (value == nullptr) return AttentionSetting::kAuto;
  const std::string text(value);
  if (text.empty() || text == "auto") return AttentionSetting::kAuto;
  if (text == "own") return AttentionSetting::kOwn;
  if (text == "fma") return AttentionSetting::kFma;
  if (text == "cudnn") return AttentionSetting::kCudnn;
  throw std::runtime_error("PARAPLAN_CUDA_ATTENTION='" + text +
                           "' is not understood; use auto (cuDNN's SDPA where it applies and "
                           "loads, else paraplan's kernels; the default), own (paraplan's "
                           "kernels: bf16 tensor cores where they apply), fma (paraplan's fp32 "
                           "FMA kernels everywhere) or cudnn (cuDNN's SDPA where it applies, "
                           "required)");
}

const char* attention_setting_name(AttentionSetting setting) {
  switch (setting) {
    case AttentionSetting::kAuto:
      return "auto";
    case AttentionSetting::kOwn:
      return "own";
    case AttentionSetting::kFma:
      return "fma";
    case AttentionSetting::kCudnn:
      return "cudnn";
  }
  return "unknown";
}

size_t AttentionShapeKeyHash::operator()(const AttentionShapeKey& key) const {
  // FNV-1a over the six fields.
  size_t hash = 1469598103934665603ull;
  for (const long long field :
       {static_cast<long long>(key.batch), static_cast<long long>(key.seq_len),
        static_cast<long long>(key.heads), static_cast<long long>(key.kv_heads),
        static_cast<long long>(key.head_dim), static_cast<long long>(key.storage)}) {
    hash = (hash ^ static_cast<size_t>(field)) * 1099511628211ull;
  }
  return hash;
}

std::string describe(const AttentionShapeKey& key) {
  return "B=" + std::to_string(key.batch) + " T=" + std::to_string(key.seq_len) +
         " H=" + std::to_string(key.heads) + " Hkv=" + std::to_string(key.kv_heads) +
         " D=" + std::to_string(key.head_dim) + " " + dtype_name(key.storage);
}

bool cudnn_sdpa_supports(const AttentionShapeKey& key) {
  // cuDNN's backward refuses s_q = s_kv = 1 ("not supported", its validation).
  return key.storage == DType::kBFloat16 && (key.head_dim == 64 || key.head_dim == 128) &&
         key.batch > 0 && key.seq_len > 1 && key.heads > 0 && key.kv_heads > 0 &&
         key.heads % key.kv_heads == 0;
}

std::string cudnn_fallback_notice(const std::string& why) {
  return "attention: paraplan's own kernels (cuDNN's SDPA is not used: " + why + ")";
}

AttentionChooser::AttentionChooser(AttentionSetting setting, Probe probe, Notice notice)
    : setting_(setting), probe_(std::move(probe)), notice_(std::move(notice)) {
  if (setting_ == AttentionSetting::kCudnn && !cudnn_available()) {
    throw std::runtime_error(
        "PARAPLAN_CUDA_ATTENTION=cudnn: cuDNN's SDPA cannot run: " + availability_.description +
        "; unset the variable (or use auto) to fall back to paraplan's "
        "attention kernels");
  }
}

bool AttentionChooser::cudnn_available() {
  if (!probed_) {
    probed_ = true;
    availability_ = probe_();
    if (!availability_.available && setting_ == AttentionSetting::kAuto) {
      notice_(cudnn_fallback_notice(availability_.description));
    }
  }
  return availability_.available;
}

AttentionKernels AttentionChooser::choose(const AttentionShapeKey& key) {
  switch (setting_) {
    case AttentionSetting::kOwn:
    case AttentionSetting::kFma:
      return AttentionKernels::kOwn;
    case AttentionSetting::kAuto:
    case AttentionSetting::kCudnn:
      return cudnn_sdpa_supports(key) && cudnn_available() ? AttentionKernels::kCudnn
                                                           : AttentionKernels::kOwn;
  }
  return AttentionKernels::kOwn;
}

}  // namespace paraplan::kernels::cuda
