// adamw_runs_case.h: test support for Ops::adamw_runs on any backend: a run
// list shaped like an optimizer's (runs of 1 element to several chunks of
// the CUDA kernel, 16-byte aligned and not, neighbours that continue each
// other, two weight decays) over three steps whose clip factor applies on
// one, and the same updates made run by run with Ops::adamw (or
// adamw_float_gradients) and the host's clip_scale, which adamw_runs must
// equal bitwise. Used by kernels/cpu/cpu_optimizer_test.cc and
// kernels/cuda/cuda_optimizer_test.cc. Test code only.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/dtype.h"
#include "kernels/ops.h"

namespace paraplan::kernels::adamw_runs_testing {

// Run lengths and where each starts after the previous one's end (in
// elements): 0 continues it, 1 breaks 16-byte alignment. 8192 is the CUDA
// kernel's chunk.
struct RunShape {
  size_t n;
  size_t gap;
  float weight_decay;
};
inline const std::vector<RunShape>& run_shapes() {
  static const std::vector<RunShape> shapes = {
      {1, 0, 0.1f}, {7, 1, 0.0f},     {8192, 1, 0.1f}, {8193, 0, 0.1f}, {20000, 3, 0.0f},
      {3, 0, 0.0f}, {16389, 8, 0.1f}, {64, 0, 0.0f},   {100, 5, 0.1f},
  };
  return shapes;
}

// The four tensors every run updates, whole (gaps included), after the steps.
struct Result {
  std::vector<float> master, first_moment, second_moment;
  std::vector<unsigned char> params;  // storage bytes
};

// Deterministic values in [-scale, scale) and a positive offset, no RNG state.
inline float value_at(size_t i, int seed, float scale, float offset = 0.0f) {
  const float x = std::sin(0.7311f * static_cast<float>(i) + 1.37f * static_cast<float>(seed));
  return offset + scale * x;
}

// Three AdamW steps over run_shapes() on ops: fused (one adamw_runs per step)
// or run by run. float_gradients: fp32 gradients (storage ones otherwise).
// Steps 1 and 3 clip with max_norm 1 from sums of squares 100 (factor
// ~0.1) and 0.25 (no clip: the factor is above 1, so the gradient scale
// 1 applies); step 2 passes no sum (no clipping, gradient_scale 0.5).
inline Result run_case(Ops& ops, bool fused, bool float_gradients) {
  size_t total = 0;
  std::vector<size_t> offsets;
  for (const RunShape& shape : run_shapes()) {
    total += shape.gap;
    offsets.push_back(total);
    total += shape.n;
  }
  const DType storage = ops.storage_dtype();
  const DType gradient_dtype = float_gradients ? DType::kFloat32 : storage;
  const size_t storage_bytes = dtype_bytes(storage), gradient_bytes = dtype_bytes(gradient_dtype);
  std::vector<float> master(total), first(total), second(total), grads(total);
  for (size_t i = 0; i < total; ++i) {
    master[i] = value_at(i, 1, 1.0f);
    first[i] = value_at(i, 2, 0.01f);
    second[i] = value_at(i, 3, 0.001f, 0.001f);
  }
  auto upload_floats = [&](const std::vector<float>& values) {
    auto* device = static_cast<float*>(ops.allocate(total * sizeof(float)));
    ops.copy_from_host(device, values.data(), total * sizeof(float));
    return device;
  };
  auto upload_storage = [&](const std::vector<float>& values, DType dtype) {
    std::vector<unsigned char> bytes(total * dtype_bytes(dtype));
    for (size_t i = 0; i < total; ++i) {
      if (dtype == DType::kFloat32)
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      else
        reinterpret_cast<uint16_t*>(bytes.data())[i] = bfloat16_from_float(values[i]);
    }
    void* device = ops.allocate(bytes.size());
    ops.copy_from_host(device, bytes.data(), bytes.size());
    return device;
  };
  float* device_master = upload_floats(master);
  float* device_first = upload_floats(first);
  float* device_second = upload_floats(second);
  void* device_params = upload_storage(std::vector<float>(total, 0.0f), storage);
  auto* squares = static_cast<double*>(ops.allocate(sizeof(double)));
  std::vector<AdamWRun> runs;
  for (size_t r = 0; r < run_shapes().size(); ++r) {
    const size_t at = offsets[r];
    runs.push_back({.master = device_master + at,
                    .params = static_cast<char*>(device_params) + at * storage_bytes,
                    .grads = nullptr,
                    .first_moment = device_first + at,
                    .second_moment = device_second + at,
                    .n = run_shapes()[r].n,
                    .weight_decay = run_shapes()[r].weight_decay});
  }
  const double sums[3] = {100.0, 0.0, 0.25};
  std::vector<void*> owned;
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < total; ++i) grads[i] = value_at(i, 10 + step, 2.0f);
    void* device_grads = upload_storage(grads, gradient_dtype);
    owned.push_back(device_grads);
    for (size_t r = 0; r < runs.size(); ++r)
      runs[r].grads = static_cast<char*>(device_grads) + offsets[r] * gradient_bytes;
    ops.copy_from_host(squares, &sums[step - 1], sizeof(double));
    const GradientClip clip{.sum_of_squares = step == 2 ? nullptr : squares, .max_norm = 1.0f};
    AdamWStep hyperparameters{.learning_rate = 1e-3f,
                              .beta1 = 0.9f,
                              .beta2 = 0.95f,
                              .epsilon = 1e-8f,
                              .step = step,
                              .gradient_scale = step == 2 ? 0.5f : 1.0f};
    if (fused) {
      ops.adamw_runs(runs, float_gradients, hyperparameters, clip);
      continue;
    }
    if (clip.sum_of_squares != nullptr) {
      const float scale = clip_scale(sums[step - 1], clip.max_norm);
      if (scale < 1.0f) hyperparameters.gradient_scale = scale;
    }
    for (const AdamWRun& run : runs) {
      hyperparameters.weight_decay = run.weight_decay;
      if (float_gradients)
        ops.adamw_float_gradients(run.master, run.params, static_cast<const float*>(run.grads),
                                  run.first_moment, run.second_moment, run.n, hyperparameters);
      else
        ops.adamw(run.master, run.params, run.grads, run.first_moment, run.second_moment, run.n,
                  hyperparameters);
    }
  }
  Result result;
  result.master.resize(total);
  result.first_moment.resize(total);
  result.second_moment.resize(total);
  result.params.resize(total * storage_bytes);
  ops.copy_to_host(result.master.data(), device_master, total * sizeof(float));
  ops.copy_to_host(result.first_moment.data(), device_first, total * sizeof(float));
  ops.copy_to_host(result.second_moment.data(), device_second, total * sizeof(float));
  ops.copy_to_host(result.params.data(), device_params, result.params.size());
  for (void* pointer : owned) ops.deallocate(pointer);
  for (void* pointer :
       {static_cast<void*>(device_master), static_cast<void*>(device_first),
        static_cast<void*>(device_second), device_params, static_cast<void*>(squares)})
    ops.deallocate(pointer);
  return result;
}

// Bitwise equality of two results (floats compared as bits: -0 != +0, NaN == NaN).
inline bool same_bits(const Result& a, const Result& b) {
  auto same = [](const auto& x, const auto& y) {
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
  };
  return same(a.master, b.master) && same(a.first_moment, b.first_moment) &&
         same(a.second_moment, b.second_moment) && same(a.params, b.params);
}

// The master weights the steps changed: in the runs (every element should
// be), and in the gaps between them (none should be).
struct Changed {
  size_t in_runs = 0, in_gaps = 0;
};
inline Changed changed_master_weights(const Result& result) {
  Changed changed;
  size_t i = 0;
  for (const RunShape& shape : run_shapes()) {
    for (size_t k = 0; k < shape.gap; ++k, ++i)
      if (result.master[i] != value_at(i, 1, 1.0f)) ++changed.in_gaps;
    for (size_t k = 0; k < shape.n; ++k, ++i)
      if (result.master[i] != value_at(i, 1, 1.0f)) ++changed.in_runs;
  }
  return changed;
}

inline size_t run_elements() {
  size_t n = 0;
  for (const RunShape& shape : run_shapes()) n += shape.n;
  return n;
}

}  // namespace paraplan::kernels::adamw_runs_testing
