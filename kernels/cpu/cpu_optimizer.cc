// cpu_optimizer.cc: the CPU backend's AdamW step and sum of squares (the
// gradient norm), for both storage dtypes (and fp32 gradients under bf16
// storage: ZeRO-2's fp32 gradient shard): vectorizable loops over tasks of a
// fixed size, run on the backend's thread pool (cpu_threads.h).
//
// Bitwise the same for every thread count: AdamW is elementwise (each element
// sees the same arithmetic, in the same order, vectorized or not: nothing is
// reassociated and x86-64 without FMA contracts nothing), and the sum of
// squares is summed in fixed blocks of kSumBlock elements counted from the
// start of x, each over kLanes interleaved double lanes combined in a fixed
// order, the block sums then added in block order, whoever computed them.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/cpu_threads.h"
#include "kernels/dtype.h"

namespace paraplan::kernels::cpu {

namespace {

// Elements per AdamW task and per summed block; tasks of the sum take
// kBlocksPerTask blocks. Large enough that a task outweighs its scheduling.
constexpr size_t kAdamwTask = size_t{1} << 16;
constexpr size_t kSumBlock = size_t{1} << 12;
constexpr size_t kBlocksPerTask = 16;

size_t tasks_for(size_t n, size_t per_task) {
  return (n + per_task - 1) / per_task;
}

// Storage element i as float.
template <DType kStorage>
inline float load(const void* x, size_t i) {
  if constexpr (kStorage == DType::kFloat32)
    return static_cast<const float*>(x)[i];
  else
    return float_from_bfloat16(static_cast<const uint16_t*>(x)[i]);
}

struct AdamwConstants {
  float learning_rate, epsilon, beta1, beta2, gradient_scale;
  float beta1_correction, beta2_correction, decay_factor;
};

// Elements [begin, end): master weights updated from gradients of
// kGradients; params (kStorage) rewritten from them unless they are the
// master weights themselves.
template <DType kStorage, DType kGradients>
void adamw_range(float* master, void* params, const void* grads, float* first_moment,
                 float* second_moment, size_t begin, size_t end, const AdamwConstants& c) {
  for (size_t i = begin; i < end; i++) {
    float grad = load<kGradients>(grads, i) * c.gradient_scale;
    float m = c.beta1 * first_moment[i] + (1.0f - c.beta1) * grad;
    float v = c.beta2 * second_moment[i] + (1.0f - c.beta2) * grad * grad;
    first_moment[i] = m;
    second_moment[i] = v;
    float m_hat = m / c.beta1_correction;
    float v_hat = v / c.beta2_correction;
    // Decoupled weight decay (PyTorch AdamW): shrink first, then the Adam step.
    float param = master[i] * c.decay_factor;
    master[i] = param - c.learning_rate * m_hat / (std::sqrt(v_hat) + c.epsilon);
  }
  if constexpr (kStorage == DType::kBFloat16) {
    uint16_t* out = static_cast<uint16_t*>(params);
    for (size_t i = begin; i < end; i++) out[i] = bfloat16_from_float(master[i]);
  } else if (params != master) {
    float* out = static_cast<float*>(params);
    for (size_t i = begin; i < end; i++) out[i] = master[i];
  }
}

// Sum of squares of elements [begin, end), one block: kLanes double lanes
// over whole groups, combined in a fixed order, then the rest in order.
template <DType kStorage>
double block_sum_of_squares(const void* x, size_t begin, size_t end) {
  double lanes[kLanes] = {};
  size_t i = begin;
  for (; i + kLanes <= end; i += kLanes) {
    for (int l = 0; l < kLanes; l++) {
      const double value = load<kStorage>(x, i + l);
      lanes[l] += value * value;
    }
  }
  double sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
               ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < end; i++) {
    const double value = load<kStorage>(x, i);
    sum += value * value;
  }
  return sum;
}

template <DType kStorage, DType kGradients>
void adamw_tasks(CpuThreadPool& pool, float* master, void* params, const void* grads,
                 float* first_moment, float* second_moment, size_t n, const AdamwConstants& c) {
  pool.run(tasks_for(n, kAdamwTask), [&](size_t task) {
    const size_t begin = task * kAdamwTask;
    const size_t end = std::min(n, begin + kAdamwTask);
    adamw_range<kStorage, kGradients>(master, params, grads, first_moment, second_moment, begin,
                                      end, c);
  });
}

template <DType kStorage>
double sum_of_squares_tasks(CpuThreadPool& pool, std::vector<double>& block_sums, const void* x,
                            size_t n) {
  const size_t blocks = tasks_for(n, kSumBlock);
  block_sums.assign(blocks, 0.0);
  pool.run(tasks_for(blocks, kBlocksPerTask), [&](size_t task) {
    const size_t last_block = std::min(blocks, (task + 1) * kBlocksPerTask);
    for (size_t block = task * kBlocksPerTask; block < last_block; ++block)
      block_sums[block] = block_sum_of_squares<kStorage>(x, block * kSumBlock,
                                                         std::min(n, (block + 1) * kSumBlock));
  });
  double sum = 0.0;
  for (double block : block_sums) sum += block;
  return sum;
}

}  // namespace

void adamw(CpuThreadPool& pool, DType storage, DType gradients, float* master, void* params,
           const void* grads, float* first_moment, float* second_moment, size_t n,
           const AdamWStep& hyperparameters) {
  const AdamwConstants c{
      .learning_rate = hyperparameters.learning_rate,
      .epsilon = hyperparameters.epsilon,
      .beta1 = hyperparameters.beta1,
      .beta2 = hyperparameters.beta2,
      .gradient_scale = hyperparameters.gradient_scale,
      .beta1_correction = adamw_bias_correction(hyperparameters.beta1, hyperparameters.step),
      .beta2_correction = adamw_bias_correction(hyperparameters.beta2, hyperparameters.step),
      .decay_factor = 1.0f - hyperparameters.learning_rate * hyperparameters.weight_decay};
  // fp32 storage has fp32 gradients only: the same loop either way.
  if (storage == DType::kFloat32)
    adamw_tasks<DType::kFloat32, DType::kFloat32>(pool, master, params, grads, first_moment,
                                                  second_moment, n, c);
  else if (gradients == DType::kFloat32)
    adamw_tasks<DType::kBFloat16, DType::kFloat32>(pool, master, params, grads, first_moment,
                                                   second_moment, n, c);
  else
    adamw_tasks<DType::kBFloat16, DType::kBFloat16>(pool, master, params, grads, first_moment,
                                                    second_moment, n, c);
}

void adamw_runs(CpuThreadPool& pool, DType storage, DType gradients,
                const std::vector<AdamWRun>& runs, const AdamWStep& hyperparameters,
                const GradientClip& clip) {
  AdamWStep run_step = hyperparameters;
  // The host is the device: the sum of squares is read where it lies.
  if (clip.sum_of_squares != nullptr && clip.max_norm > 0) {
    const float scale = clip_scale(*clip.sum_of_squares, clip.max_norm);
    if (scale < 1.0f) run_step.gradient_scale = scale;
  }
  for (const AdamWRun& run : runs) {
    run_step.weight_decay = run.weight_decay;
    adamw(pool, storage, gradients, run.master, run.params, run.grads, run.first_moment,
          run.second_moment, run.n, run_step);
  }
}

double sum_of_squares(CpuThreadPool& pool, std::vector<double>& block_sums, DType storage,
                      const void* x, size_t n) {
  return storage == DType::kBFloat16
             ? sum_of_squares_tasks<DType::kBFloat16>(pool, block_sums, x, n)
             : sum_of_squares_tasks<DType::kFloat32>(pool, block_sums, x, n);
}

}  // namespace paraplan::kernels::cpu
