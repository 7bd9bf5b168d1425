// cuda_loss.cu: softmax + cross-entropy for the CUDA backend (kernels/ops.h):
// the fused op over a whole vocabulary and the three steps of the
// vocab-parallel version. Logits and dlogits are storage tensors (fp32 or
// bf16, widened on load; each dlogit rounded once when stored); losses and the
// row statistics are fp32.
//
// One block per row at a time. Pass 1 reads the row once: each thread keeps an
// online (max, sum of exp(x - max)) over its elements (16-byte packs, 4 floats
// or 8 bf16, when V is a multiple of the pack and the logits are 16-byte
// aligned; two packs loaded before either is used, so twice the loads are in
// flight, added in the same order);
// the block takes the row max M, rescales each thread's sum to M and adds the
// rescaled sums in a fixed tree. Pass 2 (when training) writes dlogits =
// exp(x - M) * (loss_scale / sum), minus loss_scale at the target, over the
// logits in place (dlogits may alias logits; each thread rewrites only what it
// read itself, and the target logit is read before the block's first
// barrier). No probabilities buffer. The fused op's grid is capped so that
// the rows in flight fit in half the L2 cache (at least a block per SM), each
// block then taking every grid-th row: pass 2 finds its row in L2 instead of
// reading it from memory again (a block per row kept ~106 MB of GPT-2's bf16
// logits in flight on an H100, twice its 50 MB L2). Each row is computed as
// before, so the grid changes no bit.
// The vocab-parallel steps use the same per-thread mapping and the same
// explicitly rounded arithmetic (__fmul_rn & co., so no FMA contraction can
// differ between kernels): with one shard (row_max = the row's own max) they
// reproduce the fused op bitwise.
// With a loss sum asked for (LossSum), each block also adds its rows' losses
// and the last block to finish adds the block totals (cuda_kernels.cuh): the
// sum costs no launch of its own. The grids are then at most
// kSumOfSquaresBlocks, which changes no row's bits either.
// Targets out of range cannot throw from a kernel, and checking them at every
// launch would make the host wait for the device twice per micro-batch: the
// kernel records the first bad row and its target in a device word, and
// Ops::check_deferred_errors (once per step) reads it back and throws
// std::out_of_range with the CPU backend's message.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

// The smallest bad row wins, carrying its target: (row << 32) | target's bits.
__device__ void record_target_error(unsigned long long* target_error, int row, int target) {
  atomicMin(target_error, (static_cast<unsigned long long>(static_cast<unsigned>(row)) << 32) |
                              static_cast<unsigned>(target));
}

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// Every thread returns the same value, combined in a fixed order.
__device__ float block_max(float value, float* shared) {
  value = warp_max(value);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = value;
  __syncthreads();
  float result = shared[0];
  for (int w = 1; w < kWarps; w++) result = fmaxf(result, shared[w]);
  __syncthreads();  // shared may be reused next
  return result;
}

__device__ float block_sum(float value, float* shared) {
  value = warp_sum(value);
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = value;
  __syncthreads();
  float result = shared[0];
  for (int w = 1; w < kWarps; w++) result = __fadd_rn(result, shared[w]);
  __syncthreads();
  return result;
}

__device__ __forceinline__ void online_add(float& max, float& sum, float x) {
  if (x > max) {
    sum = __fmaf_rn(sum, expf(max - x), 1.0f);  // rescale to the new max, add exp(0)
    max = x;
  } else if (x > -INFINITY) {
    sum = __fadd_rn(sum, expf(x - max));
  }
}

// This thread's online (max, sum of exp(x - max)) over its elements of the row.
template <typename T, bool kVectorized>
__device__ void thread_online(const T* row, int V, float& max, float& sum) {
  max = -INFINITY;
  sum = 0.0f;
  if constexpr (kVectorized) {
    const int packs = V / kPack<T>;
    for (int v = threadIdx.x; v < packs; v += 2 * kThreads) {
      float x[kPack<T>], y[kPack<T>];
      const bool second = v + kThreads < packs;
      load_pack(x, row, v);
      if (second) load_pack(y, row, v + kThreads);
#pragma unroll
      for (int k = 0; k < kPack<T>; k++) online_add(max, sum, x[k]);
      if (second) {
#pragma unroll
        for (int k = 0; k < kPack<T>; k++) online_add(max, sum, y[k]);
      }
    }
  } else {
    for (int i = threadIdx.x; i < V; i += kThreads) online_add(max, sum, widen(row[i]));
  }
}

// The thread's sum rescaled to shift (>= its max): its share of sum exp(x - shift).
__device__ __forceinline__ float rescaled(float max, float sum, float shift) {
  return sum > 0.0f ? __fmul_rn(sum, expf(max - shift)) : 0.0f;
}

// dlogits[i] = exp(logits[i] - shift) * probability_scale, minus loss_scale at
// local column `target` (none when target < 0), rounded once when stored. Same
// thread mapping as the read (packs of kPack<T> when vectorized).
template <typename T>
__device__ void write_gradient(T* dlogit_row, const T* logit_row, int V, float shift,
                               float probability_scale, int64_t target, float loss_scale,
                               bool vectorized) {
  if (vectorized) {
    for (int v = threadIdx.x; v < V / kPack<T>; v += kThreads) {
      float d[kPack<T>];
      load_pack(d, logit_row, v);
#pragma unroll
      for (int k = 0; k < kPack<T>; k++) {
        d[k] = __fmul_rn(expf(d[k] - shift), probability_scale);
        if (static_cast<int64_t>(v) * kPack<T> + k == target) d[k] = __fsub_rn(d[k], loss_scale);
      }
      store_pack(dlogit_row, v, d);
    }
  } else {
    for (int i = threadIdx.x; i < V; i += kThreads) {
      float d = __fmul_rn(expf(widen(logit_row[i]) - shift), probability_scale);
      if (i == target) d = __fsub_rn(d, loss_scale);
      dlogit_row[i] = narrow<T>(d);
    }
  }
}

// Adds the block's total (thread 0's) to the launch's sum; the last block to
// finish adds every block's, in block order, with all its threads.
__device__ void add_to_loss_sum(const LossSum& sum, double block_total) {
  __shared__ bool last;
  __shared__ double warp_totals[kWarps];
  if (threadIdx.x == 0) {
    sum.partials[blockIdx.x] = block_total;
    __threadfence();  // the total is visible before the ticket counts it
    last = atomicAdd(sum.ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  double total = 0.0;
  for (unsigned int b = threadIdx.x; b < gridDim.x; b += kThreads)
    total += __ldcg(sum.partials + b);  // from L2: written by other blocks
  total = warp_sum(total);
  if (threadIdx.x % 32 == 0) warp_totals[threadIdx.x / 32] = total;
  __syncthreads();
  if (threadIdx.x == 0) {
    double result = 0.0;
    for (int w = 0; w < kWarps; w++) result += warp_totals[w];
    *sum.total += result;
    *sum.ticket = 0;  // ready for the next launch on the stream
  }
}

// Row r's loss (returned to thread 0; the others get 0).
template <typename T, bool kVectorized>
__device__ float softmax_cross_entropy_row(int r, float* losses, T* dlogits, const T* logits,
                                           const int32_t* targets, int V, float loss_scale,
                                           bool vectorized_write, unsigned long long* target_error,
                                           float* shared) {
  const T* logit_row = logits + static_cast<size_t>(r) * V;
  const int target = targets[r];
  const bool valid = target >= 0 && target < V;
  // Read before any thread can overwrite it (dlogits may alias logits).
  const float target_logit = valid ? widen(logit_row[target]) : 0.0f;
  float thread_max, thread_sum;
  thread_online<T, kVectorized>(logit_row, V, thread_max, thread_sum);
  const float max = block_max(thread_max, shared);
  const float exp_sum = block_sum(rescaled(thread_max, thread_sum, max), shared);
  float loss = 0.0f;
  if (threadIdx.x == 0) {
    if (!valid) record_target_error(target_error, r, target);
    loss = __fsub_rn(logf(exp_sum), __fsub_rn(target_logit, max));
    losses[r] = loss;
  }
  if (dlogits != nullptr)
    write_gradient(dlogits + static_cast<size_t>(r) * V, logit_row, V, max, loss_scale / exp_sum,
                   valid ? target : -1, loss_scale, vectorized_write);
  return loss;
}

// Rows blockIdx.x, blockIdx.x + gridDim.x, ... (the grid: rows_in_flight).
template <typename T, bool kVectorized>
__global__ void softmax_cross_entropy_kernel(float* losses, T* dlogits, const T* logits,
                                             const int32_t* targets, int rows, int V,
                                             float loss_scale, bool vectorized_write, LossSum sum,
                                             unsigned long long* target_error) {
  __shared__ float shared[kWarps];
  double block_total = 0.0;
  for (int r = blockIdx.x; r < rows; r += gridDim.x)
    block_total += softmax_cross_entropy_row<T, kVectorized>(
        r, losses, dlogits, logits, targets, V, loss_scale, vectorized_write, target_error, shared);
  if (sum.total != nullptr) add_to_loss_sum(sum, block_total);
}

template <typename T>
__global__ void shard_stats_kernel(float* row_max, float* target_logit, const T* logits,
                                   const int32_t* targets, int V, int vocab_start,
                                   unsigned long long* target_error) {
  __shared__ float shared[kWarps];
  const int r = blockIdx.x;
  const T* logit_row = logits + static_cast<size_t>(r) * V;
  float max = -INFINITY;
  for (int i = threadIdx.x; i < V; i += kThreads) max = fmaxf(max, widen(logit_row[i]));
  max = block_max(max, shared);
  if (threadIdx.x == 0) {
    const int target = targets[r];
    if (target < 0) record_target_error(target_error, r, target);
    const int64_t local = static_cast<int64_t>(target) - vocab_start;
    row_max[r] = max;
    // 0 from the shards without the target, so the all-reduced sum is the logit.
    target_logit[r] = local >= 0 && local < V ? widen(logit_row[local]) : 0.0f;
  }
}

template <typename T, bool kVectorized>
__global__ void shard_exp_sums_kernel(float* exp_sum, const T* logits, const float* row_max,
                                      int V) {
  __shared__ float shared[kWarps];
  const int r = blockIdx.x;
  float thread_max, thread_sum;
  thread_online<T, kVectorized>(logits + static_cast<size_t>(r) * V, V, thread_max, thread_sum);
  const float sum = block_sum(rescaled(thread_max, thread_sum, row_max[r]), shared);
  if (threadIdx.x == 0) exp_sum[r] = sum;
}

// Rows blockIdx.x, blockIdx.x + gridDim.x, ...
template <typename T>
__global__ void shard_finish_kernel(float* losses, T* dlogits, const T* logits,
                                    const int32_t* targets, const float* row_max,
                                    const float* exp_sum, const float* target_logit, int rows,
                                    int V, int vocab_start, float loss_scale, bool vectorized_write,
                                    LossSum loss_sum) {
  double block_total = 0.0;
  for (int r = blockIdx.x; r < rows; r += gridDim.x) {
    const float max = row_max[r], sum = exp_sum[r];
    if (threadIdx.x == 0) {
      const float loss = __fsub_rn(logf(sum), __fsub_rn(target_logit[r], max));
      losses[r] = loss;
      block_total += loss;
    }
    if (dlogits == nullptr) continue;
    const int64_t local = static_cast<int64_t>(targets[r]) - vocab_start;
    write_gradient(dlogits + static_cast<size_t>(r) * V, logits + static_cast<size_t>(r) * V, V,
                   max, loss_scale / sum, local >= 0 && local < V ? local : -1, loss_scale,
                   vectorized_write);
  }
  if (loss_sum.total != nullptr) add_to_loss_sum(loss_sum, block_total);
}

// The fused op's blocks: as many rows of row_bytes as half the L2 holds, at
// least one block per SM (a row larger than that still gets one), at most
// one per row.
int rows_in_flight(int rows, size_t row_bytes) {
  const DeviceLimits& device = device_limits();
  const size_t fit = device.l2_bytes / 2 / std::max<size_t>(row_bytes, 1);
  const size_t blocks = std::max(fit, static_cast<size_t>(device.multiprocessors));
  return static_cast<int>(
      std::min({blocks, static_cast<size_t>(rows), static_cast<size_t>(kSumOfSquaresBlocks)}));
}

// Rows of V storage elements starting at row_base take the 16-byte path.
bool vectorizable(DType storage, const void* row_base, int V) {
  const int pack = storage == DType::kBFloat16 ? kPack<bf16> : kPack<float>;
  return V % pack == 0 && is_aligned16(row_base);
}

}  // namespace

void softmax_cross_entropy(DType storage, float* losses, void* dlogits, const void* logits,
                           const int32_t* targets, int rows, int vocab, float loss_scale,
                           const LossSum& sum, unsigned long long* target_error,
                           cudaStream_t stream) {
  if (rows <= 0) return;
  const bool vectorized_read = vectorizable(storage, logits, vocab);
  // The write shares the read's thread mapping when dlogits aliases logits.
  const bool vectorized_write =
      vectorized_read && (dlogits == nullptr || vectorizable(storage, dlogits, vocab));
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gradient = static_cast<T*>(dlogits);
    const T* input = static_cast<const T*>(logits);
    const int blocks = rows_in_flight(rows, static_cast<size_t>(vocab) * sizeof(T));
    if (vectorized_read) {
      softmax_cross_entropy_kernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(losses, gradient, input, targets, rows, vocab,
                                            loss_scale, vectorized_write, sum, target_error);
    } else {
      softmax_cross_entropy_kernel<T, false><<<blocks, kThreads, 0, stream>>>(
          losses, gradient, input, targets, rows, vocab, loss_scale, false, sum, target_error);
    }
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_stats(DType storage, float* row_max, float* target_logit,
                               const void* logits, const int32_t* targets, int rows,
                               int vocab_local, int vocab_start, unsigned long long* target_error,
                               cudaStream_t stream) {
  if (rows <= 0) return;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    shard_stats_kernel<T><<<rows, kThreads, 0, stream>>>(row_max, target_logit,
                                                         static_cast<const T*>(logits), targets,
                                                         vocab_local, vocab_start, target_error);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_exp_sums(DType storage, float* exp_sum, const void* logits,
                                  const float* row_max, int rows, int vocab_local,
                                  cudaStream_t stream) {
  if (rows <= 0) return;
  const bool vectorized = vectorizable(storage, logits, vocab_local);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* input = static_cast<const T*>(logits);
    if (vectorized) {
      shard_exp_sums_kernel<T, true>
          <<<rows, kThreads, 0, stream>>>(exp_sum, input, row_max, vocab_local);
    } else {
      shard_exp_sums_kernel<T, false>
          <<<rows, kThreads, 0, stream>>>(exp_sum, input, row_max, vocab_local);
    }
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void cross_entropy_shard_finish(DType storage, float* losses, void* dlogits, const void* logits,
                                const int32_t* targets, const float* row_max, const float* exp_sum,
                                const float* target_logit, int rows, int vocab_local,
                                int vocab_start, float loss_scale, const LossSum& sum,
                                cudaStream_t stream) {
  if (rows <= 0) return;
  const int blocks = std::min(rows, kSumOfSquaresBlocks);
  const bool vectorized_write = dlogits != nullptr && vectorizable(storage, dlogits, vocab_local) &&
                                vectorizable(storage, logits, vocab_local);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    shard_finish_kernel<T><<<blocks, kThreads, 0, stream>>>(
        losses, static_cast<T*>(dlogits), static_cast<const T*>(logits), targets, row_max, exp_sum,
        target_logit, rows, vocab_local, vocab_start, loss_scale, vectorized_write, sum);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void throw_target_error(const unsigned long long errors[2], int vocab) {
  const bool fused = errors[kFusedLossError] != kNoTargetError;
  const unsigned long long error = errors[fused ? kFusedLossError : kShardStatsError];
  const int row = static_cast<int>(error >> 32);
  const int target = static_cast<int>(static_cast<uint32_t>(error & 0xffffffffull));
  throw std::out_of_range(
      std::string(fused ? "softmax_cross_entropy" : "cross_entropy_shard_stats") + ": target " +
      std::to_string(target) + " in row " + std::to_string(row) +
      (fused ? " is outside the vocabulary [0, " + std::to_string(vocab) + ")"
             : std::string(" is negative")));
}

}  // namespace paraplan::kernels::cuda
