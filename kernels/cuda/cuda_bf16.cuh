// cuda_bf16.cuh: the storage element types of the CUDA backend and the
// helpers every .cu file uses to handle them. An Ops object stores its
// tensors as float (DType::kFloat32) or __nv_bfloat16 (DType::kBFloat16);
// kernels are templated on that element type T and do all arithmetic in fp32.
// - Host: with_storage(dtype, f) calls f(StorageTag<T>{}) with the T of dtype,
//   so a launcher takes void* tensors and instantiates its kernels for T.
// - Device: widen(x) gives a storage element as a float (exact); narrow<T>(x)
//   rounds a float to T to nearest, ties to even (__float2bfloat16_rn, what
//   kernels/dtype.h's bfloat16_from_float does on the host). A kernel narrows
//   each storage output exactly once, when it stores it (kernels/ops.h).
// - 128-bit access: load_pack/store_pack move kPack<T> elements (4 floats or
//   8 bf16, 16 bytes) with one vector load or store, widening or rounding
//   them; load_floats/store_floats move runs of fp32 statistics or optimizer
//   state alongside. The address must be 16-byte aligned; kernels take the
//   scalar path otherwise (and for the tail of n % kPack<T> elements), and
//   both paths give the same bits, since each element's result depends only
//   on its own inputs.
// Internal to kernels/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/dtype.h"

namespace paraplan::kernels::cuda {

using bf16 = __nv_bfloat16;

template <typename T>
struct StorageTag {
  using type = T;
};

// f(StorageTag<float>{}) or f(StorageTag<bf16>{}), as storage says; returns what f returns.
template <typename F>
decltype(auto) with_storage(DType storage, F&& f) {
  if (storage == DType::kBFloat16) return f(StorageTag<bf16>{});
  return f(StorageTag<float>{});
}

// Storage elements per 16 bytes (one 128-bit access).
template <typename T>
inline constexpr int kPack = static_cast<int>(16 / sizeof(T));

#ifdef __CUDACC__

__device__ __forceinline__ float widen(float x) {
  return x;
}
__device__ __forceinline__ float widen(bf16 x) {
  return __bfloat162float(x);
}

// x rounded to T (to nearest, ties to even); the identity for float.
template <typename T>
__device__ __forceinline__ T narrow(float x) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __float2bfloat16_rn(x);
  } else {
    return x;
  }
}

// The bits of x rounded to bf16, in the low half of a word.
__device__ __forceinline__ uint32_t bf16_bits(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// out[k] = elements kPack<T> * pack + k of base, widened; one 128-bit load.
template <typename T>
__device__ __forceinline__ void load_pack(float (&out)[kPack<T>], const T* base, size_t pack) {
  const uint4 bits = reinterpret_cast<const uint4*>(base)[pack];
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if constexpr (std::is_same_v<T, bf16>) {
      // Little endian: the lower-addressed element is the low half of the word.
      out[2 * k] = __uint_as_float(words[k] << 16);
      out[2 * k + 1] = __uint_as_float(words[k] & 0xffff0000u);
    } else {
      out[k] = __uint_as_float(words[k]);
    }
  }
}

// Elements kPack<T> * pack + k of base = in[k] rounded to T; one 128-bit store.
template <typename T>
__device__ __forceinline__ void store_pack(T* base, size_t pack, const float (&in)[kPack<T>]) {
  uint32_t words[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    if constexpr (std::is_same_v<T, bf16>) {
      words[k] = bf16_bits(in[2 * k]) | (bf16_bits(in[2 * k + 1]) << 16);
    } else {
      words[k] = __float_as_uint(in[k]);
    }
  }
  reinterpret_cast<uint4*>(base)[pack] = make_uint4(words[0], words[1], words[2], words[3]);
}

// N (a multiple of 4) floats from / to a 16-byte aligned address, as float4s.
template <int N>
__device__ __forceinline__ void load_floats(float (&out)[N], const float* source) {
  static_assert(N % 4 == 0, "whole float4s");
#pragma unroll
  for (int k = 0; k < N / 4; k++) {
    const float4 value = reinterpret_cast<const float4*>(source)[k];
    out[4 * k] = value.x;
    out[4 * k + 1] = value.y;
    out[4 * k + 2] = value.z;
    out[4 * k + 3] = value.w;
  }
}

template <int N>
__device__ __forceinline__ void store_floats(float* destination, const float (&in)[N]) {
  static_assert(N % 4 == 0, "whole float4s");
#pragma unroll
  for (int k = 0; k < N / 4; k++) {
    reinterpret_cast<float4*>(destination)[k] =
        make_float4(in[4 * k], in[4 * k + 1], in[4 * k + 2], in[4 * k + 3]);
  }
}

#endif  // __CUDACC__

}  // namespace paraplan::kernels::cuda
