// cuda_optimizer.cu: AdamW on the CUDA backend: over one tensor (Ops::adamw)
// and over a list of runs in one launch (Ops::adamw_runs), with the clip
// factor computed on the device from the global sum of squares.
//
// AdamW reads storage (or fp32: ZeRO-2's gradient shard) gradients and fp32
// master weights and moments, and writes the master weights and their
// rounding into the storage params (with fp32 storage, params may be the
// master weights themselves). Each element's update depends only on its own
// inputs and the step's constants, so the run-list kernel gives bitwise what
// per-tensor launches give, however its blocks split the work.
//
// The run-list kernel (llm.c's and apex's multi-tensor apply): every run is
// cut into chunks of kChunk elements, numbered across runs; block b takes
// chunks b, b + gridDim.x, ... and finds each chunk's run by a binary search
// over the runs' first chunks. One launch replaces one per parameter tensor
// (148 for GPT-2 124M), and the host reads nothing: the clip factor comes
// from the device's sum of squares, and a pending deferred error (a bad loss
// target) makes the kernel return before it writes anything.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_bf16.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_elementwise.cuh"
#include "kernels/cuda/cuda_kernels.cuh"
#include "kernels/cuda/cuda_optimizer.cuh"

namespace paraplan::kernels::cuda {

namespace {

// Elements per chunk: a multiple of every pack (4 floats, 8 bf16), so a
// run's chunks start on pack boundaries; 8 packs of 16 bytes per thread.
constexpr size_t kChunk = 8 * 1024;

// T: the storage type of params; G: the gradients' (T, or float).
template <typename T, typename G>
struct AdamW {
  static constexpr int kPackSize = kPack<T>;
  float* master;
  T* params;  // with float storage, possibly master itself
  const G* grads;
  float* first_moment;
  float* second_moment;
  float gradient_scale, learning_rate, beta1, beta2, epsilon, decay_factor, beta1_correction,
      beta2_correction;

  // The CPU backend's formula, operation for operation.
  __device__ __forceinline__ void update(float& param, float grad, float& m, float& v) const {
    grad *= gradient_scale;
    m = beta1 * m + (1.0f - beta1) * grad;
    v = beta2 * v + (1.0f - beta2) * grad * grad;
    const float m_hat = m / beta1_correction;
    const float v_hat = v / beta2_correction;
    param = param * decay_factor - learning_rate * m_hat / (sqrtf(v_hat) + epsilon);
  }
  // Every read comes before every write, so params == master is fine.
  __device__ void scalar(size_t i) const {
    float param = master[i], m = first_moment[i], v = second_moment[i];
    update(param, widen(grads[i]), m, v);
    master[i] = param;
    first_moment[i] = m;
    second_moment[i] = v;
    params[i] = narrow<T>(param);
  }
  __device__ void vector(size_t pack) const {
    const size_t first = pack * kPackSize;
    float p[kPackSize], m[kPackSize], v[kPackSize], g[kPackSize];
    load_floats(p, master + first);
    load_floats(m, first_moment + first);
    load_floats(v, second_moment + first);
    if constexpr (std::is_same_v<G, T>)
      load_pack(g, grads, pack);
    else
      load_floats(g, grads + first);  // fp32 gradients beside bf16 params
#pragma unroll
    for (int k = 0; k < kPackSize; k++) update(p[k], g[k], m[k], v[k]);
    store_floats(master + first, p);
    store_floats(first_moment + first, m);
    store_floats(second_moment + first, v);
    store_pack(params, pack, p);
  }
};

// The step's constants the run-list kernel needs beside the table.
struct RunListStep {
  float learning_rate, beta1, beta2, epsilon, beta1_correction, beta2_correction;
  float gradient_scale;  // where clipping does not apply
  const double* sum_of_squares;
  float max_norm;
  const unsigned long long* pending_errors;  // two words
};

// clip_scale (ops.h) on the device: the same double arithmetic.
__device__ float device_gradient_scale(const RunListStep& step) {
  if (step.sum_of_squares == nullptr || step.max_norm <= 0.0f) return step.gradient_scale;
  const double factor = static_cast<double>(step.max_norm) / (sqrt(*step.sum_of_squares) + 1e-6);
  // As clip_scale and the CPU: compared once rounded to float.
  const float scale = static_cast<float>(factor);
  return scale < 1.0f ? scale : step.gradient_scale;
}

// The run holding chunk c: the last whose first_chunk <= c.
__device__ int run_of_chunk(const DeviceAdamWRun* runs, int count, size_t c) {
  int low = 0, high = count - 1;
  while (low < high) {
    const int middle = (low + high + 1) / 2;
    if (runs[middle].first_chunk <= c)
      low = middle;
    else
      high = middle - 1;
  }
  return low;
}

template <typename T, typename G>
__global__ void adamw_runs_kernel(const DeviceAdamWRun* runs, int count, size_t total_chunks,
                                  RunListStep step) {
  if (step.pending_errors != nullptr &&
      (step.pending_errors[0] != kNoTargetError || step.pending_errors[1] != kNoTargetError))
    return;
  const float gradient_scale = device_gradient_scale(step);
  for (size_t c = blockIdx.x; c < total_chunks; c += gridDim.x) {
    const DeviceAdamWRun& run = runs[run_of_chunk(runs, count, c)];
    // The host's 1 - lr * decay, rounded as it rounds (no fused multiply-add).
    const float decay_factor = __fsub_rn(1.0f, __fmul_rn(step.learning_rate, run.weight_decay));
    const AdamW<T, G> op{run.master,
                         static_cast<T*>(run.params),
                         static_cast<const G*>(run.grads),
                         run.first_moment,
                         run.second_moment,
                         gradient_scale,
                         step.learning_rate,
                         step.beta1,
                         step.beta2,
                         step.epsilon,
                         decay_factor,
                         step.beta1_correction,
                         step.beta2_correction};
    const size_t begin = (c - run.first_chunk) * kChunk;
    const size_t end = run.n < begin + kChunk ? run.n : begin + kChunk;
    size_t scalar_begin = begin;
    if (run.vectorized) {
      constexpr size_t kP = AdamW<T, G>::kPackSize;
      const size_t last_pack = end / kP;
      for (size_t v = begin / kP + threadIdx.x; v < last_pack; v += blockDim.x) op.vector(v);
      scalar_begin = last_pack * kP;
    }
    for (size_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) op.scalar(i);
  }
}

bool aligned16(const void* pointer) {
  return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

}  // namespace

void adamw(DType storage, DType gradients, float* master, void* params, const void* grads,
           float* first_moment, float* second_moment, size_t n, const AdamWStep& hyperparameters,
           cudaStream_t stream) {
  const float learning_rate = hyperparameters.learning_rate;
  const float beta1_correction = adamw_bias_correction(hyperparameters.beta1, hyperparameters.step);
  const float beta2_correction = adamw_bias_correction(hyperparameters.beta2, hyperparameters.step);
  const bool vectorized = is_aligned16(master) && is_aligned16(params) && is_aligned16(grads) &&
                          is_aligned16(first_moment) && is_aligned16(second_moment);
  auto run = [&](auto storage_tag, auto gradient_tag) {
    using T = typename decltype(storage_tag)::type;
    using G = typename decltype(gradient_tag)::type;
    const AdamW<T, G> op{master,
                         static_cast<T*>(params),
                         static_cast<const G*>(grads),
                         first_moment,
                         second_moment,
                         hyperparameters.gradient_scale,
                         learning_rate,
                         hyperparameters.beta1,
                         hyperparameters.beta2,
                         hyperparameters.epsilon,
                         1.0f - learning_rate * hyperparameters.weight_decay,
                         beta1_correction,
                         beta2_correction};
    launch_elementwise(op, n, vectorized, stream);
  };
  // fp32 storage has fp32 gradients only: the same kernel either way.
  with_storage(storage, [&](auto tag) {
    if (gradients == DType::kFloat32)
      run(tag, StorageTag<float>{});
    else
      run(tag, tag);
  });
}

AdamWRunTable::~AdamWRunTable() {
  // No throwing from a destructor.
  if (device_ != nullptr) cudaFree(device_);
  for (DeviceAdamWRun* table : retired_) cudaFree(table);
}

void AdamWRunTable::set(const std::vector<AdamWRun>& runs, PinnedUploads& uploads) {
  std::vector<DeviceAdamWRun> table;
  table.reserve(runs.size());
  size_t chunks = 0;
  for (const AdamWRun& run : runs) {
    if (run.n == 0) continue;
    const bool vectorized = aligned16(run.master) && aligned16(run.params) &&
                            aligned16(run.grads) && aligned16(run.first_moment) &&
                            aligned16(run.second_moment);
    table.push_back({run.master, run.params, run.grads, run.first_moment, run.second_moment, run.n,
                     chunks, run.weight_decay, vectorized ? 1 : 0});
    chunks += (run.n + kChunk - 1) / kChunk;
  }
  total_chunks_ = chunks;
  const bool same = table.size() == host_.size() &&
                    std::memcmp(table.data(), host_.data(), table.size() * sizeof(table[0])) == 0;
  if (same) return;
  if (table.size() > capacity_) {
    // Kept, not freed: a queued kernel may still read it, and cudaFree would
    // wait for the whole device, a pipeline receive waiting on a peer
    // included (DeviceScratch keeps its old buffers for the same reason).
    if (device_ != nullptr) retired_.push_back(device_);
    device_ = nullptr;
    capacity_ = 0;
    PARAPLAN_CUDA_CHECK(cudaMalloc(&device_, table.size() * sizeof(DeviceAdamWRun)));
    capacity_ = table.size();
  }
  if (!table.empty()) uploads.upload(device_, table.data(), table.size() * sizeof(table[0]));
  host_ = std::move(table);
}

void adamw_runs(DType storage, DType gradients, const AdamWRunTable& table,
                const AdamWStep& hyperparameters, const GradientClip& clip,
                const unsigned long long* pending_errors, cudaStream_t stream) {
  if (table.total_chunks() == 0) return;
  const RunListStep step{
      .learning_rate = hyperparameters.learning_rate,
      .beta1 = hyperparameters.beta1,
      .beta2 = hyperparameters.beta2,
      .epsilon = hyperparameters.epsilon,
      .beta1_correction = adamw_bias_correction(hyperparameters.beta1, hyperparameters.step),
      .beta2_correction = adamw_bias_correction(hyperparameters.beta2, hyperparameters.step),
      .gradient_scale = hyperparameters.gradient_scale,
      .sum_of_squares = clip.max_norm > 0 ? clip.sum_of_squares : nullptr,
      .max_norm = clip.max_norm,
      .pending_errors = pending_errors};
  const unsigned int blocks =
      static_cast<unsigned int>(std::min<size_t>(table.total_chunks(), kElementwiseMaxBlocks));
  auto launch = [&](auto storage_tag, auto gradient_tag) {
    using T = typename decltype(storage_tag)::type;
    using G = typename decltype(gradient_tag)::type;
    adamw_runs_kernel<T, G><<<blocks, kElementwiseThreads, 0, stream>>>(
        table.device_runs(), table.count(), table.total_chunks(), step);
    PARAPLAN_CUDA_CHECK_LAUNCH();
  };
  // fp32 storage has fp32 gradients only: the same kernel either way.
  with_storage(storage, [&](auto tag) {
    if (gradients == DType::kFloat32)
      launch(tag, StorageTag<float>{});
    else
      launch(tag, tag);
  });
}

}  // namespace paraplan::kernels::cuda
