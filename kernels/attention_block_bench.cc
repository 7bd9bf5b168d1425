// attention_block_bench.cc: what context parallelism's ring costs one rank
// in attention compute, against the one-rank attention over the whole
// sequence (kernels/ops.h; runtime/model/context_attention.h runs the ring).
//
// For a sequence of T tokens over cp ranks, rank r holds chunks r and
// 2cp - 1 - r of the 2cp chunks; its ring computes its T/cp queries against
// each rank's T/cp keys: forward, the own block (first) then cp - 1 more;
// backward, cp blocks into fp32 accumulators. Timed here on one device for
// the first and the last rank (the load balancing makes them equal), without
// the transfers (those overlap the blocks in the ring), beside
// Ops::attention_forward + attention_backward over the whole [B, T]. Prints
// each time, the speed-up whole / rank (cp at best) and the work overhead
// cp x rank / whole. Median of --repeats runs of --iterations each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace {

using paraplan::kernels::DType;
using paraplan::kernels::Ops;

struct Options {
  std::string backend = "cuda";
  DType dtype = DType::kBFloat16;
  int batch = 1, seq = 32768, heads = 32, kv_heads = 8, head_dim = 128, context = 4;
  int iterations = 3, repeats = 3;
};

constexpr const char* kUsage =
    "usage: attention_block_bench [--backend cpu|cuda] [--dtype float32|bfloat16] [--batch B]\n"
    "       [--seq T] [--heads H] [--kv-heads K] [--head-dim D] [--context CP]\n"
    "       [--iterations N] [--repeats R]\n"
    "Defaults: Llama 3 8B's attention at 32k over cp 4 on CUDA in bf16.\n";

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || i + 1 >= argc) {
      std::fputs(kUsage, flag == "--help" ? stdout : stderr);
      std::exit(flag == "--help" ? 0 : 2);
    }
    const std::string value = argv[++i];
    const int number = std::atoi(value.c_str());
    if (flag == "--backend") {
      o.backend = value;
    } else if (flag == "--dtype") {
      o.dtype = value == "float32" ? DType::kFloat32 : DType::kBFloat16;
    } else if (flag == "--batch") {
      o.batch = number;
    } else if (flag == "--seq") {
      o.seq = number;
    } else if (flag == "--heads") {
      o.heads = number;
    } else if (flag == "--kv-heads") {
      o.kv_heads = number;
    } else if (flag == "--head-dim") {
      o.head_dim = number;
    } else if (flag == "--context") {
      o.context = number;
    } else if (flag == "--iterations") {
      o.iterations = number;
    } else if (flag == "--repeats") {
      o.repeats = number;
    } else {
      std::fprintf(stderr, "attention_block_bench: unknown flag %s\n%s", flag.c_str(), kUsage);
      std::exit(2);
    }
  }
  const bool valid = (o.backend == "cpu" || o.backend == "cuda") && o.batch > 0 && o.heads > 0 &&
                     o.kv_heads > 0 && o.heads % o.kv_heads == 0 && o.head_dim > 0 &&
                     o.context > 0 && o.seq > 0 && o.seq % (2 * o.context) == 0 &&
                     o.iterations > 0 && o.repeats > 0;
  if (!valid) {
    std::fprintf(stderr,
                 "attention_block_bench: invalid options (positive sizes; kv-heads divides "
                 "heads; 2 x context divides seq)\n%s",
                 kUsage);
    std::exit(2);
  }
  return o;
}

void* random_storage(Ops& ops, size_t n, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(generator);
  std::vector<char> host(ops.storage_bytes(n));
  paraplan::kernels::host_from_float(host.data(), values.data(), ops.storage_dtype(), n);
  void* tensor = ops.allocate(host.size());
  ops.copy_from_host(tensor, host.data(), host.size());
  return tensor;
}

template <typename Body>
double median_ms(Ops& ops, const Options& o, Body body) {
  body();  // warm-up
  std::vector<double> per_call;
  for (int r = 0; r < o.repeats; ++r) {
    ops.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iterations; ++i) body();
    ops.synchronize();
    per_call.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count() /
        o.iterations);
  }
  std::sort(per_call.begin(), per_call.end());
  return per_call[per_call.size() / 2];
}

// The positions rank r of cp holds: chunks r and 2cp - 1 - r.
std::vector<int32_t> positions_of(int rank, int cp, int seq) {
  const int chunk = seq / (2 * cp);
  std::vector<int32_t> positions;
  for (int start : {rank * chunk, (2 * cp - 1 - rank) * chunk})
    for (int i = 0; i < chunk; ++i) positions.push_back(start + i);
  return positions;
}

int run(const Options& o) {
  std::unique_ptr<Ops> ops = o.backend == "cpu" ? paraplan::kernels::make_cpu_ops(0, o.dtype)
                                                : paraplan::kernels::make_cuda_ops(0, o.dtype);
  const int B = o.batch, T = o.seq, H = o.heads, K = o.kv_heads, D = o.head_dim, cp = o.context;
  const size_t width = static_cast<size_t>(H + 2 * K) * D, rows = static_cast<size_t>(B) * T;
  void* qkv = random_storage(*ops, rows * width, 1);
  void* dout = random_storage(*ops, rows * H * D, 2);
  void* out = ops->allocate(ops->storage_bytes(rows * H * D));
  void* dqkv = ops->allocate(ops->storage_bytes(rows * width));
  float* lse = static_cast<float*>(ops->allocate(rows * H * sizeof(float)));
  float* scratch = static_cast<float*>(ops->allocate(rows * H * sizeof(float)));
  const double whole = median_ms(*ops, o, [&] {
    ops->attention_forward(out, lse, qkv, B, T, H, K, D);
    ops->attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, H, K, D,
                            paraplan::kernels::GradientWrite::kOverwrite);
  });

  // One rank's share: its T/cp rows of qkv (the first rows stand in for
  // them: the values do not change the work), every rank's positions.
  const int local = T / cp;
  std::vector<int32_t> all_positions;
  for (int r = 0; r < cp; ++r) {
    const std::vector<int32_t> p = positions_of(r, cp, T);
    all_positions.insert(all_positions.end(), p.begin(), p.end());
  }
  auto* positions = static_cast<int32_t*>(ops->allocate(all_positions.size() * sizeof(int32_t)));
  ops->copy_from_host(positions, all_positions.data(), all_positions.size() * sizeof(int32_t));
  const size_t local_rows = static_cast<size_t>(B) * local;
  float* accumulator = static_cast<float*>(ops->allocate(local_rows * H * D * sizeof(float)));
  float* dkv = static_cast<float*>(ops->allocate(local_rows * 2 * K * D * sizeof(float)));
  Ops::AttentionBlockShape shape;
  shape.batch = B, shape.q_len = shape.kv_len = local, shape.seq_len = T;
  shape.num_heads = H, shape.num_kv_heads = K, shape.head_dim = D;
  shape.q_row_stride = shape.kv_row_stride = static_cast<int>(width);
  shape.kv_value_offset = K * D;
  const void* kv =
      paraplan::kernels::element_at(qkv, static_cast<size_t>(H) * D, ops->storage_dtype());
  double rank_ms[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    const int r = which == 0 ? 0 : cp - 1;
    const int32_t* mine = positions + static_cast<size_t>(r) * local;
    rank_ms[which] = median_ms(*ops, o, [&] {
      for (int step = 0; step < cp; ++step) {
        const int32_t* theirs = positions + static_cast<size_t>((r - step + cp) % cp) * local;
        ops->attention_block_forward(accumulator, lse, qkv, kv, mine, theirs, nullptr, shape,
                                     step == 0);
      }
      ops->convert_from_float(out, accumulator, local_rows * H * D);
      ops->zero_bytes(accumulator, local_rows * H * D * sizeof(float));
      for (int step = 0; step < cp; ++step) {
        const int32_t* theirs = positions + static_cast<size_t>((r - step + cp) % cp) * local;
        ops->attention_block_backward(accumulator, dkv, dout, out, lse, qkv, kv, mine, theirs,
                                      nullptr, shape);
      }
    });
  }
  const double rank = std::max(rank_ms[0], rank_ms[1]);
  std::printf(
      "attention_block_bench %s %s (%s) B=%d T=%d H=%d Hkv=%d D=%d cp=%d: whole sequence "
      "forward+backward %.3f ms; one rank's ring blocks %.3f ms (rank 0) and %.3f ms (rank %d); "
      "speed-up %.2fx of %d; work overhead %.2fx\n",
      o.backend.c_str(), dtype_name(o.dtype), ops->device_name().c_str(), B, T, H, K, D, cp, whole,
      rank_ms[0], rank_ms[1], cp - 1, whole / rank, cp, cp * rank / whole);
  for (void* buffer :
       {qkv, dout, out, dqkv, static_cast<void*>(lse), static_cast<void*>(scratch),
        static_cast<void*>(positions), static_cast<void*>(accumulator), static_cast<void*>(dkv)})
    ops->deallocate(buffer);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attention_block_bench: error: %s\n", error.what());
    return 1;
  }
}
