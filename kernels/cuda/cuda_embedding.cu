// cuda_embedding.cu: token and position embeddings for the CUDA backend
// (fp32 or bf16 storage; sums in fp32, each stored element rounded once).
//
// Token forward copies rows (zeros for tokens another vocab-parallel rank
// owns), 16 bytes at a time when C is a multiple of the pack (4 floats, 8
// bf16) and the buffers are 16-byte aligned; a copy needs no rounding.
// Token backward is deterministic without atomics: the token positions are
// sorted by local vocabulary row with CUB's radix sort, which is stable (equal
// tokens keep ascending position order), so each vocabulary row's run of
// positions is contiguous. Each run is cut into segments of
// kTokenEmbeddingSegment positions, one block each, so " the" repeated 300
// times in a micro-batch is ten short sums rather than one long one: the first
// segment starts from the widened dwte value, later ones from zero, and a
// second kernel adds a long run's segment sums in order and stores the row,
// rounded once. That is the order kernels/ops.h states and the CPU backend
// follows (bitwise the same in fp32).
// Position forward: out = round(out + wpe). Position backward: one thread per
// (t, c), summing the batch in order b = 0, 1, ... onto the widened dwpe.
#include <cuda_runtime.h>

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.cuh"

namespace paraplan::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr unsigned int kMaxBlocks = 1u << 16;
constexpr int kSegment = kTokenEmbeddingSegment;

// Local vocabulary row of a token, or -1 when another shard owns it (64-bit:
// token - vocab_start cannot overflow).
__device__ __forceinline__ int64_t local_row(int32_t token, int vocab_start, int vocab_local) {
  const int64_t local = static_cast<int64_t>(token) - vocab_start;
  return local >= 0 && local < vocab_local ? local : -1;
}

template <typename T, bool kVectorized>
__global__ void token_embedding_forward_kernel(T* out, const int32_t* tokens, const T* wte,
                                               int num_tokens, int vocab_start, int vocab_local,
                                               int C) {
  const int width = kVectorized ? C / kPack<T> : C;  // elements (or 16-byte packs) per row
  const size_t total = static_cast<size_t>(num_tokens) * width;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t row = i / width, column = i % width;
    const int64_t local = local_row(tokens[row], vocab_start, vocab_local);
    if constexpr (kVectorized) {
      // A raw 16-byte copy: bits unchanged, and all-zero bits are +0 in either type.
      const uint4 value =
          local >= 0
              ? reinterpret_cast<const uint4*>(wte)[static_cast<size_t>(local) * width + column]
              : make_uint4(0u, 0u, 0u, 0u);
      reinterpret_cast<uint4*>(out)[i] = value;
    } else {
      out[i] = local >= 0 ? wte[static_cast<size_t>(local) * width + column] : narrow<T>(0.0f);
    }
  }
}

// Sort keys: the local row, or vocab_local (sorting last) for tokens of other shards.
__global__ void embedding_sort_keys_kernel(uint32_t* keys, int32_t* positions,
                                           const int32_t* tokens, int num_tokens, int vocab_start,
                                           int vocab_local) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= num_tokens) return;
  const int64_t local = local_row(tokens[i], vocab_start, vocab_local);
  keys[i] = local >= 0 ? static_cast<uint32_t>(local) : static_cast<uint32_t>(vocab_local);
  positions[i] = i;
}

// Where sorted position j starts its run of equal keys (keys ascend: a
// binary search over [0, j]).
__device__ int run_start(const uint32_t* sorted_keys, int j) {
  const uint32_t key = sorted_keys[j];
  int low = 0, high = j;
  while (low < high) {
    const int middle = low + (high - low) / 2;
    if (sorted_keys[middle] < key) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  return low;
}

// Whether the run starting at sorted position start is longer than one segment.
__device__ bool long_run(const uint32_t* sorted_keys, int start, int num_tokens) {
  return start + kSegment < num_tokens && sorted_keys[start + kSegment] == sorted_keys[start];
}

// Block j sums the segment of its run that starts at sorted position j (and
// does nothing when no segment starts there). A run's first segment adds onto
// the widened dwte row; a later one sums from zero. A run of one segment stores
// its row at once; a longer run leaves each segment's fp32 sum to the combine
// kernel: the first in first_sums[start / kSegment], a later one in
// later_sums[j / kSegment] (unique: two long runs' starts are more than a
// segment apart, and so are two later segments' starts).
template <typename T>
__global__ void embedding_backward_segments_kernel(T* dwte, float* first_sums, float* later_sums,
                                                   const T* dout, const uint32_t* sorted_keys,
                                                   const int32_t* sorted_positions, int num_tokens,
                                                   int vocab_local, int C) {
  const int j = blockIdx.x;
  const uint32_t key = sorted_keys[j];
  if (key >= static_cast<uint32_t>(vocab_local)) return;  // other shards' tokens
  const bool first = j == 0 || sorted_keys[j - 1] != key;
  // A later segment has a whole segment of its run before it.
  if (!first && (j < kSegment || sorted_keys[j - kSegment] != key ||
                 (j - run_start(sorted_keys, j)) % kSegment != 0)) {
    return;
  }
  int end = j + 1;
  const int limit = min(j + kSegment, num_tokens);
  while (end < limit && sorted_keys[end] == key) end++;
  T* dwte_row = dwte + static_cast<size_t>(key) * C;
  float* sums = !first ? later_sums + static_cast<size_t>(j / kSegment) * C
                : long_run(sorted_keys, j, num_tokens)
                    ? first_sums + static_cast<size_t>(j / kSegment) * C
                    : nullptr;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = first ? widen(dwte_row[c]) : 0.0f;
    for (int p = j; p < end; p++)
      sum += widen(dout[static_cast<size_t>(sorted_positions[p]) * C + c]);
    if (sums != nullptr) {
      sums[c] = sum;
    } else {
      dwte_row[c] = narrow<T>(sum);
    }
  }
}

// Block j, when a run longer than one segment starts there, adds its
// segments' sums in order and stores the row, rounded once.
template <typename T>
__global__ void embedding_backward_combine_kernel(T* dwte, const float* first_sums,
                                                  const float* later_sums,
                                                  const uint32_t* sorted_keys, int num_tokens,
                                                  int vocab_local, int C) {
  const int j = blockIdx.x;
  const uint32_t key = sorted_keys[j];
  if (key >= static_cast<uint32_t>(vocab_local)) return;
  if ((j > 0 && sorted_keys[j - 1] == key) || !long_run(sorted_keys, j, num_tokens)) return;
  T* dwte_row = dwte + static_cast<size_t>(key) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float sum = first_sums[static_cast<size_t>(j / kSegment) * C + c];
    for (int s = j + kSegment; s < num_tokens && sorted_keys[s] == key; s += kSegment)
      sum += later_sums[static_cast<size_t>(s / kSegment) * C + c];
    dwte_row[c] = narrow<T>(sum);
  }
}

template <typename T, bool kVectorized>
__global__ void position_embedding_forward_kernel(T* out, const T* wpe, int batch, int seq_len,
                                                  int C) {
  const int width = kVectorized ? C / kPack<T> : C;
  const size_t per_sequence = static_cast<size_t>(seq_len) * width;
  const size_t total = per_sequence * batch;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const size_t position = i % per_sequence;  // t * width + c
    if constexpr (kVectorized) {
      float value[kPack<T>], add[kPack<T>];
      load_pack(value, out, i);
      load_pack(add, wpe, position);
#pragma unroll
      for (int k = 0; k < kPack<T>; k++) value[k] += add[k];
      store_pack(out, i, value);
    } else {
      out[i] = narrow<T>(widen(out[i]) + widen(wpe[position]));
    }
  }
}

template <typename T>
__global__ void position_embedding_backward_kernel(T* dwpe, const T* dout, int batch, int seq_len,
                                                   int C) {
  const size_t per_sequence = static_cast<size_t>(seq_len) * C;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < per_sequence;
       i += stride) {
    float sum = widen(dwpe[i]);
    for (int b = 0; b < batch; b++) sum += widen(dout[b * per_sequence + i]);
    dwpe[i] = narrow<T>(sum);
  }
}

// Bits needed to hold every key 0 .. max_key.
int key_bits(uint32_t max_key) {
  int bits = 1;
  while (bits < 32 && (max_key >> bits) != 0) bits++;
  return bits;
}

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

void token_embedding_forward(DType storage, void* out, const int32_t* tokens, const void* wte,
                             int num_tokens, int vocab_start, int vocab_local, int channels,
                             cudaStream_t stream) {
  if (num_tokens <= 0 || channels <= 0) return;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(out);
    const T* table = static_cast<const T*>(wte);
    const bool vectorized = channels % kPack<T> == 0 && is_aligned16(out) && is_aligned16(wte);
    const size_t work =
        static_cast<size_t>(num_tokens) * (vectorized ? channels / kPack<T> : channels);
    const unsigned int blocks = std::min(ceil_div(work, kThreads), kMaxBlocks);
    if (vectorized) {
      token_embedding_forward_kernel<T, true><<<blocks, kThreads, 0, stream>>>(
          y, tokens, table, num_tokens, vocab_start, vocab_local, channels);
    } else {
      token_embedding_forward_kernel<T, false><<<blocks, kThreads, 0, stream>>>(
          y, tokens, table, num_tokens, vocab_start, vocab_local, channels);
    }
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void token_embedding_backward(DType storage, void* dwte, const void* dout, const int32_t* tokens,
                              int num_tokens, int vocab_start, int vocab_local, int channels,
                              DeviceScratch& scratch, cudaStream_t stream) {
  if (num_tokens <= 0 || channels <= 0 || vocab_local <= 0) return;
  const int end_bit = key_bits(static_cast<uint32_t>(vocab_local));
  // Scratch: keys and positions in, keys and positions out, then CUB's temporary storage.
  size_t sort_bytes = 0;
  PARAPLAN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), num_tokens, 0, end_bit,
      stream));
  const size_t array_bytes = align256(static_cast<size_t>(num_tokens) * sizeof(uint32_t));
  const size_t sums_bytes =
      align256(static_cast<size_t>(ceil_div(num_tokens, kSegment)) * channels * sizeof(float));
  char* base = static_cast<char*>(scratch.get(4 * array_bytes + 2 * sums_bytes + sort_bytes));
  uint32_t* keys = reinterpret_cast<uint32_t*>(base);
  int32_t* positions = reinterpret_cast<int32_t*>(base + array_bytes);
  uint32_t* sorted_keys = reinterpret_cast<uint32_t*>(base + 2 * array_bytes);
  int32_t* sorted_positions = reinterpret_cast<int32_t*>(base + 3 * array_bytes);
  float* first_sums = reinterpret_cast<float*>(base + 4 * array_bytes);
  float* later_sums = reinterpret_cast<float*>(base + 4 * array_bytes + sums_bytes);
  void* sort_storage = base + 4 * array_bytes + 2 * sums_bytes;

  embedding_sort_keys_kernel<<<ceil_div(num_tokens, kThreads), kThreads, 0, stream>>>(
      keys, positions, tokens, num_tokens, vocab_start, vocab_local);
  PARAPLAN_CUDA_CHECK_LAUNCH();
  PARAPLAN_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_storage, sort_bytes, keys, sorted_keys,
                                                      positions, sorted_positions, num_tokens, 0,
                                                      end_bit, stream));
  const int threads = std::min(kThreads, ((channels + 31) / 32) * 32);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    embedding_backward_segments_kernel<T><<<num_tokens, threads, 0, stream>>>(
        static_cast<T*>(dwte), first_sums, later_sums, static_cast<const T*>(dout), sorted_keys,
        sorted_positions, num_tokens, vocab_local, channels);
    PARAPLAN_CUDA_CHECK_LAUNCH();
    embedding_backward_combine_kernel<T>
        <<<num_tokens, threads, 0, stream>>>(static_cast<T*>(dwte), first_sums, later_sums,
                                             sorted_keys, num_tokens, vocab_local, channels);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void position_embedding_forward(DType storage, void* out, const void* wpe, int batch, int seq_len,
                                int channels, cudaStream_t stream) {
  if (batch <= 0 || seq_len <= 0 || channels <= 0) return;
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* y = static_cast<T*>(out);
    const T* table = static_cast<const T*>(wpe);
    const bool vectorized = channels % kPack<T> == 0 && is_aligned16(out) && is_aligned16(wpe);
    const size_t work =
        static_cast<size_t>(batch) * seq_len * (vectorized ? channels / kPack<T> : channels);
    const unsigned int blocks = std::min(ceil_div(work, kThreads), kMaxBlocks);
    if (vectorized) {
      position_embedding_forward_kernel<T, true>
          <<<blocks, kThreads, 0, stream>>>(y, table, batch, seq_len, channels);
    } else {
      position_embedding_forward_kernel<T, false>
          <<<blocks, kThreads, 0, stream>>>(y, table, batch, seq_len, channels);
    }
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(DType storage, void* dwpe, const void* dout, int batch,
                                 int seq_len, int channels, cudaStream_t stream) {
  if (batch <= 0 || seq_len <= 0 || channels <= 0) return;
  const size_t work = static_cast<size_t>(seq_len) * channels;
  const unsigned int blocks = std::min(ceil_div(work, kThreads), kMaxBlocks);
  with_storage(storage, [&](auto tag) {
    using T = typename decltype(tag)::type;
    position_embedding_backward_kernel<T><<<blocks, kThreads, 0, stream>>>(
        static_cast<T*>(dwpe), static_cast<const T*>(dout), batch, seq_len, channels);
  });
  PARAPLAN_CUDA_CHECK_LAUNCH();
}

}  // namespace paraplan::kernels::cuda
