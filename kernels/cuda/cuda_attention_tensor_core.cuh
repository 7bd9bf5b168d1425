// cuda_attention_tensor_core.cuh: the warp-level tensor-core building blocks
// of the bf16 flash-attention kernels (cuda_attention_tensor_core.cu forward,
// cuda_attention_tensor_core_backward.cu backward): tile shapes, the padded
// shared-memory tile layout and its 16-byte cp.async loader, ldmatrix
// fragment loads, the m16n8k16 bf16 mma with fp32 accumulators, and the
// mapping between its accumulator (C) and operand (A) fragments. sm_80+.
// Internal to kernels/cuda.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16 inputs; lane = 4 * g + t,
// g = lane / 4 the "group", t = lane % 4 the thread in the group):
//   A (16 x 16, row-major), 4 registers of 2 bf16 (lower column in the low half):
//     a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
//     a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9].
//   B (16 x 8, "col": element pairs run along k), 2 registers:
//     b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g].
//   C, D (16 x 8 fp32), 4 registers:
//     c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1].
// ldmatrix.x4 loads four 8 x 8 bf16 matrices; lanes 8i..8i+7 give the row
// addresses of matrix i, and register i receives matrix i with lane holding
// row g, columns 2t, 2t+1 (or, with .trans, rows 2t, 2t+1 of column g). So:
// - an A fragment of a row-major [rows][k] tile: matrices (rows 0-7, k 0-7),
//   (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15);
// - B fragments of two n-blocks when B[k][n] = X[n][k] with X a row-major
//   [n][k] tile (K for S = Q K^T): matrices (n 0-7, k 0-7), (n 0-7, k 8-15),
//   (n 8-15, k 0-7), (n 8-15, k 8-15), registers {b0, b1} of n-block 0 then 1;
// - B fragments of two n-blocks when B[k][n] = X[k][n] with X a row-major
//   [k][n] tile (V for P V), with .trans: matrices (k 0-7, n 0-7),
//   (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_bf16.cuh"

namespace paraplan::kernels::cuda::tensor_core {

constexpr int kWarps = 4;  // each warp owns 16 rows (queries or keys) of a 64-row tile
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 16 * kWarps;  // the rows a block owns
// Shared tiles are [rows][D + kPad] bf16: a row is then 16 bytes past a
// multiple of 128 (D = 64: 144 bytes, D = 128: 272), so the eight 16-byte
// rows one ldmatrix phase reads fall in eight different bank groups.
constexpr int kPad = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int kD>
inline constexpr int kTileStride = kD + kPad;

#ifdef __CUDACC__

// ---- asynchronous copies ----------------------------------------------------------------------

// 16 bytes global -> shared; with valid false the 16 bytes are zero-filled
// (src-size 0: nothing is read, but the address must still be a valid one).
__device__ __forceinline__ void cp_async_16(void* shared, const void* global, bool valid) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `kPending` of this thread's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Starts copying rows [0, valid_rows) of a row-major global [*, kD] bf16
// matrix (rows `stride` elements apart, every row start 16-byte aligned) into
// a [kRows][kD + kPad] shared tile; rows from valid_rows on are zero-filled, so
// padding rows add exact zeros to every product (and no NaN from stale shared
// memory can reach a masked 0 * x). The caller commits and waits.
template <int kRows, int kD>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* source, size_t stride,
                                                int valid_rows) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  static_assert(kRows * kChunks % kThreads == 0, "whole rounds of chunks");
#pragma unroll
  for (int round = 0; round < kRows * kChunks / kThreads; round++) {
    const int index = round * kThreads + threadIdx.x;
    const int row = index / kChunks, chunk = index % kChunks;
    const bool valid = row < valid_rows;
    // A zero-filled row still needs a readable address: row 0 (valid_rows >= 1).
    const bf16* from = source + static_cast<size_t>(valid ? row : 0) * stride + chunk * 8;
    cp_async_16(tile + row * kTileStride<kD> + chunk * 8, from, valid);
  }
}

// ---- fragments
// ------------------------------------------------------------------------------------

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* shared) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* shared) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address)
               : "memory");
}

// This lane's address for ldmatrix_x4 of the A fragment at (row0, k0) of a
// row-major shared tile (see the layouts above).
template <int kD>
__device__ __forceinline__ const bf16* a_fragment_address(const bf16* tile, int row0, int k0) {
  const int lane = threadIdx.x % 32;
  return tile + (row0 + lane % 8 + (lane / 8 % 2) * 8) * kTileStride<kD> + k0 + (lane / 16) * 8;
}

// ldmatrix_x4: the B fragments of n-blocks n0 and n0 + 8 at k0, B[k][n] = tile[n][k].
template <int kD>
__device__ __forceinline__ const bf16* b_fragment_address(const bf16* tile, int n0, int k0) {
  const int lane = threadIdx.x % 32;
  return tile + (n0 + lane % 8 + (lane / 16) * 8) * kTileStride<kD> + k0 + (lane / 8 % 2) * 8;
}

// ldmatrix_x4_trans: the B fragments of n-blocks n0 and n0 + 8 at k0, B[k][n] = tile[k][n].
template <int kD>
__device__ __forceinline__ const bf16* b_trans_fragment_address(const bf16* tile, int k0, int n0) {
  const int lane = threadIdx.x % 32;
  return tile + (k0 + lane % 8 + (lane / 8 % 2) * 8) * kTileStride<kD> + n0 + (lane / 16) * 8;
}

// d += a b: one m16n8k16 bf16 mma with fp32 accumulators (the products are
// exact; the tensor core adds them in its own fixed order, the same on every
// run).
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats rounded to bf16 (nearest even) in one register, lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return bf16_bits(lo) | (bf16_bits(hi) << 16);
}

// The A fragment (16 rows x k-block kb of 16 columns) made of accumulator
// n-blocks 2kb and 2kb + 1, rounded to bf16: the C layout of two n-blocks is
// the A layout of their 16 columns, so P (or dS) feeds the next mma from
// registers.
template <int kBlocks>
__device__ __forceinline__ void a_from_accumulators(uint32_t (&a)[4], const float (&c)[kBlocks][4],
                                                    int kb) {
  a[0] = pack_bf16(c[2 * kb][0], c[2 * kb][1]);
  a[1] = pack_bf16(c[2 * kb][2], c[2 * kb][3]);
  a[2] = pack_bf16(c[2 * kb + 1][0], c[2 * kb + 1][1]);
  a[3] = pack_bf16(c[2 * kb + 1][2], c[2 * kb + 1][3]);
}

// c += A B^T over the head dimension: A the warp's 16 rows from row0 of a
// [rows, kD] tile, B the first 8 * kBlocks rows of another (S = Q K^T, dP =
// dOut V^T and their transposes).
template <int kD, int kBlocks>
__device__ __forceinline__ void mma_rows_by_rows(float (&c)[kBlocks][4], const bf16* a_tile,
                                                 int row0, const bf16* b_tile) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ks++) {
    uint32_t a[4];
    ldmatrix_x4(a, a_fragment_address<kD>(a_tile, row0, 16 * ks));
#pragma unroll
    for (int nb = 0; nb < kBlocks; nb += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, b_fragment_address<kD>(b_tile, 8 * nb, 16 * ks));
      mma_bf16(c[nb], a, b[0], b[1]);
      mma_bf16(c[nb + 1], a, b[2], b[3]);
    }
  }
}

// c += P B: P the warp's accumulators (16 x 8 * kBlocks, rounded to bf16 as
// the A operand, a_from_accumulators), B the first 8 * kBlocks rows of a
// [rows, kD] tile, read transposed: 16 x kD (O += P V, dV += P^T dOut, ...).
template <int kD, int kBlocks>
__device__ __forceinline__ void mma_accumulators_by_tile(float (&c)[kD / 8][4],
                                                         const float (&p)[kBlocks][4],
                                                         const bf16* tile) {
#pragma unroll
  for (int kb = 0; kb < kBlocks / 2; kb++) {
    uint32_t a[4];
    a_from_accumulators(a, p, kb);
#pragma unroll
    for (int db = 0; db < kD / 8; db += 2) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, b_trans_fragment_address<kD>(tile, 16 * kb, 8 * db));
      mma_bf16(c[db], a, b[0], b[1]);
      mma_bf16(c[db + 1], a, b[2], b[3]);
    }
  }
}

// dst[row][2t, 2t+1] (+)= values for the accumulator rows a thread holds:
// with accumulate dst = round(float(dst) + values), one 4-byte
// read-modify-write of two bf16; without, dst = round(0 + values), one 4-byte
// store (dst not read): bitwise what accumulating into zeros stores.
__device__ __forceinline__ void write_pair(bf16* destination, float v0, float v1, bool accumulate) {
  uint32_t* word = reinterpret_cast<uint32_t*>(destination);
  const uint32_t old = accumulate ? *word : 0u;
  *word = pack_bf16(__uint_as_float(old << 16) + v0, __uint_as_float(old & 0xffff0000u) + v1);
}

// Starts loading the K and V tiles of keys [col0, col0 + 64) of a KV head
// (key, value: its K and V at row 0, rows `stride` elements apart) into
// buffer `buffer` of key_value (buffer i: K at tile 2i, V at tile 2i + 1).
template <int kD>
__device__ __forceinline__ void load_key_value_async(bf16* key_value, int buffer, const bf16* key,
                                                     const bf16* value, size_t stride, int col0,
                                                     int T) {
  constexpr int kTileElements = kTile * kTileStride<kD>;
  bf16* k_tile = key_value + buffer * 2 * kTileElements;
  load_tile_async<kTile, kD>(k_tile, key + col0 * stride, stride, T - col0);
  load_tile_async<kTile, kD>(k_tile + kTileElements, value + col0 * stride, stride, T - col0);
}

#endif  // __CUDACC__

// ---- host side ---------------------------------------------------------------------------------

// f(std::integral_constant<int, D>{}) for head_dim 64 or 128.
template <typename F>
void dispatch_head_dim(int head_dim, F&& f) {
  if (head_dim == 64) {
    f(std::integral_constant<int, 64>{});
  } else {
    f(std::integral_constant<int, 128>{});
  }
}

}  // namespace paraplan::kernels::cuda::tensor_core
