// dtype.h: the storage element types of tensors (fp32, bf16), and exact
// host-side conversions between them.
//
// Mixed precision (kernels/ops.h): weights, activations and gradients are
// stored in the Ops' storage dtype; statistics (LayerNorm mean/rstd, attention
// logsumexp, losses), master weights and AdamW moments are always fp32, and
// all arithmetic is fp32. bf16 values are rounded from fp32 to nearest, ties
// to even (what CUDA's __float2bfloat16 does), so the CPU backend and the GPU
// round identically.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace paraplan::kernels {

enum class DType { kFloat32, kBFloat16 };

inline size_t dtype_bytes(DType dtype) {
  return dtype == DType::kBFloat16 ? 2 : 4;
}
inline const char* dtype_name(DType dtype) {
  return dtype == DType::kBFloat16 ? "bfloat16" : "float32";
}

// Element `index` of a buffer of dtype (storage tensors are untyped pointers).
inline void* element_at(void* base, size_t index, DType dtype) {
  return static_cast<char*>(base) + index * dtype_bytes(dtype);
}
inline const void* element_at(const void* base, size_t index, DType dtype) {
  return static_cast<const char*>(base) + index * dtype_bytes(dtype);
}

// The bf16 nearest to value (ties to even), and values beyond bf16's range
// round to infinity, as on the GPU. A NaN stays a (quiet) NaN, keeping its
// sign and high payload bits; the GPU's __float2bfloat16_rn gives its
// canonical NaN instead, so NaN bits may differ between backends.
inline uint16_t bfloat16_from_float(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float float_from_bfloat16(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

// value rounded to bf16 and back: what storing it in bf16 keeps.
inline float round_to_bfloat16(float value) {
  return float_from_bfloat16(bfloat16_from_float(value));
}

// Host buffers: n elements of dtype <-> n floats.
inline void host_to_float(float* out, const void* in, DType dtype, size_t n) {
  if (dtype == DType::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  const uint16_t* source = static_cast<const uint16_t*>(in);
  for (size_t i = 0; i < n; ++i) out[i] = float_from_bfloat16(source[i]);
}
inline void host_from_float(void* out, const float* in, DType dtype, size_t n) {
  if (dtype == DType::kFloat32) {
    std::memcpy(out, in, n * sizeof(float));
    return;
  }
  uint16_t* destination = static_cast<uint16_t*>(out);
  for (size_t i = 0; i < n; ++i) destination[i] = bfloat16_from_float(in[i]);
}

}  // namespace paraplan::kernels
