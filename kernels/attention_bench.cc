// attention_bench.cc: times paraplan's fused causal self-attention, forward
// and forward + backward, through the Ops interface (kernels/ops.h) exactly as
// GPT-2's block calls it (runtime/model/gpt/gpt_stage.cc): one
// Ops::attention_forward over the packed qkv [B, T, (H + 2 Hkv) * D]
// (q heads | k heads | v heads, the QKV linear's output) writing out
// [B, T, H * D] and logsumexp [B, H, T], and one Ops::attention_backward
// overwriting dqkv (same layout; GradientWrite::kOverwrite, as the block
// calls it: nothing is zeroed) from dout [B, T, H * D], with a [B, H, T]
// float scratch. Runs on the CPU or the CUDA backend, fp32 or bf16 storage;
// scripts/device_attention_torch.py times PyTorch's SDPA the same way.
//
// Timing: W warm-up forward + backward pairs, then R repeats of N iterations
// of the forward alone, and R repeats of N forward + backward pairs, each
// repeat timed on the wall clock between two ops->synchronize() calls; the
// median repeat over N is reported. backward_ms = forward_backward_ms -
// forward_ms.
//
// FLOPs (FlashAttention's convention, which the PyTorch script uses too):
//   forward          = 2 matmuls (Q K^T, P V) x 2 B H T T D flops each, halved
//                      for the causal mask = 2 B H T^2 D;
//   backward         = 2.5 x forward (5 matmuls against the forward's 2);
//   forward+backward = 3.5 x forward.
// The causal halving ignores the diagonal (T(T+1)/2 vs T^2/2), as is usual.
//
// After timing, one untimed forward + backward gives the
// checksums: sum |out| and sum |dqkv| in double, and their NaN counts.
//
// --attention (CUDA) sets PARAPLAN_CUDA_ATTENTION for the run (auto, own,
// fma, cudnn: kernels/cuda/attention_choice.h); --attention compare times the
// same shape twice, on paraplan's own kernels and on cuDNN's SDPA, prints
// both lines and their ratios (cuDNN / own, below 1: cuDNN faster), and with
// --json writes {"own": {...}, "cudnn": {...} or null, "cudnn_unavailable":
// why}; without cuDNN it times the own kernels and says why in one line.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace {

using paraplan::kernels::DType;
using paraplan::kernels::Ops;

constexpr const char* kUsage =
    "usage: attention_bench [--backend cpu|cuda] [--dtype float32|bfloat16]\n"
    "                       [--batch B] [--seq T] [--heads H] [--kv-heads K] [--head-dim D]\n"
    "                       [--iterations N] [--warmup W] [--repeats R] [--seed S]\n"
    "                       [--device I] [--json FILE]\n"
    "                       [--attention auto|own|fma|cudnn|compare]\n"
    "Times Ops::attention_forward and attention_backward (causal, GPT-2's qkv layout).\n"
    "Defaults: GPT-2 124M's attention: --backend cuda --dtype bfloat16 --batch 8 --seq 1024\n"
    "--heads 12 --kv-heads (= heads) --head-dim 64 --iterations 20 --warmup 5 --repeats 5.\n"
    "The CUDA attention kernels follow PARAPLAN_CUDA_ATTENTION (auto | own | fma | cudnn),\n"
    "which --attention sets; --attention compare times own and cudnn at the same shape.\n";

struct Options {
  std::string backend = "cuda";
  DType dtype = DType::kBFloat16;
  int batch = 8, seq = 1024, heads = 12, kv_heads = 0, head_dim = 64;
  int iterations = 20, warmup = 5, repeats = 5, device = 0;
  unsigned seed = 1234;
  std::string json;
  std::string attention;  // empty: PARAPLAN_CUDA_ATTENTION as the environment has it
};

// A command-line mistake: main prints it with the usage and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int parse_int(const std::string& flag, const std::string& text, int minimum) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || value < minimum || value > 1 << 30) {
    throw UsageError(flag + ": '" + text + "' is not an integer >= " + std::to_string(minimum));
  }
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag.rfind("--", 0) != 0) throw UsageError("'" + flag + "': not a flag (see --help)");
    const size_t equals = flag.find('=');
    if (equals != std::string::npos) {
      value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      throw UsageError(flag + ": missing value");
    }
    if (flag == "--backend") {
      if (value != "cpu" && value != "cuda") {
        throw UsageError("--backend: '" + value + "' is not one of cpu, cuda");
      }
      o.backend = value;
    } else if (flag == "--dtype") {
      if (value == "float32") {
        o.dtype = DType::kFloat32;
      } else if (value == "bfloat16") {
        o.dtype = DType::kBFloat16;
      } else {
        throw UsageError("--dtype: '" + value + "' is not one of float32, bfloat16");
      }
    } else if (flag == "--batch") {
      o.batch = parse_int(flag, value, 1);
    } else if (flag == "--seq") {
      o.seq = parse_int(flag, value, 1);
    } else if (flag == "--heads") {
      o.heads = parse_int(flag, value, 1);
    } else if (flag == "--kv-heads") {
      o.kv_heads = parse_int(flag, value, 1);
    } else if (flag == "--head-dim") {
      o.head_dim = parse_int(flag, value, 1);
    } else if (flag == "--iterations") {
      o.iterations = parse_int(flag, value, 1);
    } else if (flag == "--warmup") {
      o.warmup = parse_int(flag, value, 0);
    } else if (flag == "--repeats") {
      o.repeats = parse_int(flag, value, 1);
    } else if (flag == "--seed") {
      o.seed = static_cast<unsigned>(parse_int(flag, value, 0));
    } else if (flag == "--device") {
      o.device = parse_int(flag, value, 0);
    } else if (flag == "--attention") {
      if (value != "auto" && value != "own" && value != "fma" && value != "cudnn" &&
          value != "compare") {
        throw UsageError("--attention: '" + value +
                         "' is not one of auto, own, fma, cudnn, compare");
      }
      o.attention = value;
    } else if (flag == "--json") {
      if (value.empty()) throw UsageError("--json: needs a file name");
      o.json = value;
    } else {
      throw UsageError(flag +
                       ": unknown flag (valid: --backend --dtype --batch --seq --heads --kv-heads "
                       "--head-dim --iterations --warmup --repeats --seed --device --json "
                       "--attention)");
    }
  }
  if (!o.attention.empty() && o.backend != "cuda") {
    throw UsageError(
        "--attention: chooses among the CUDA backend's attention kernels; use it "
        "with --backend cuda");
  }
  if (o.kv_heads == 0) o.kv_heads = o.heads;
  if (o.heads % o.kv_heads != 0) {
    throw UsageError("--kv-heads: " + std::to_string(o.kv_heads) + " does not divide --heads " +
                     std::to_string(o.heads));
  }
  return o;
}

// Which attention kernels the backend runs for these options, as
// kernels/cuda/attention_choice.h and cuda_attention.cu choose them under
// PARAPLAN_CUDA_ATTENTION (make_cuda_ops has refused any other value):
// cuDNN's SDPA for bf16 with head_dim 64 or 128 under auto (where it loads)
// and cudnn; otherwise bf16 tensor cores for those shapes (Ops::allocate's
// buffers are 16-byte aligned) unless fma, the fp32 FMA kernels for the rest.
std::string implementation(const Options& o) {
  if (o.backend == "cpu") {
    return o.dtype == DType::kBFloat16
               ? "cpu fused sgemm flash attention (bf16 widened to fp32 scratch)"
               : "cpu fused sgemm flash attention (fp32)";
  }
  const char* variable = std::getenv("PARAPLAN_CUDA_ATTENTION");
  const std::string setting = variable == nullptr || *variable == '\0' ? "auto" : variable;
  if (setting == "fma") return "cuda fp32 FMA flash attention (PARAPLAN_CUDA_ATTENTION=fma)";
  if (o.dtype != DType::kBFloat16) return "cuda fp32 FMA flash attention (fp32 storage)";
  if (o.head_dim != 64 && o.head_dim != 128) {
    return "cuda fp32 FMA flash attention (head_dim " + std::to_string(o.head_dim) +
           " is not 64 or 128)";
  }
  std::string why;
  if (setting == "cudnn" || (setting == "auto" && paraplan::kernels::cuda_cudnn_available(&why))) {
    paraplan::kernels::cuda_cudnn_available(&why);
    return "cuda cuDNN SDPA, deterministic backward (PARAPLAN_CUDA_ATTENTION=" + setting + "; " +
           why + ")";
  }
  return "cuda bf16 tensor-core flash attention (mma.sync m16n8k16; PARAPLAN_CUDA_ATTENTION=" +
         setting + (setting == "auto" ? "; cuDNN unavailable: " + why : std::string()) + ")";
}

// A storage tensor of n elements, uniform in [-scale, scale), from seed.
void* random_storage(Ops& ops, size_t n, unsigned seed, float scale) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> uniform(-scale, scale);
  std::vector<float> values(n);
  for (float& v : values) v = uniform(generator);
  std::vector<char> host(ops.storage_bytes(n));
  paraplan::kernels::host_from_float(host.data(), values.data(), ops.storage_dtype(), n);
  void* tensor = ops.allocate(host.size());
  ops.copy_from_host(tensor, host.data(), host.size());
  return tensor;
}

struct Checksum {
  double abs_sum = 0;
  long nan_count = 0;
};

Checksum checksum(Ops& ops, const void* tensor, size_t n) {
  std::vector<char> host(ops.storage_bytes(n));
  ops.copy_to_host(host.data(), tensor, host.size());
  std::vector<float> values(n);
  paraplan::kernels::host_to_float(values.data(), host.data(), ops.storage_dtype(), n);
  Checksum result;
  for (float v : values) {
    if (std::isnan(v)) {
      ++result.nan_count;
    } else {
      result.abs_sum += std::fabs(static_cast<double>(v));
    }
  }
  return result;
}

// Median over repeats of the wall-clock milliseconds per call of body,
// each repeat N calls between two synchronizations.
template <typename Body>
double median_ms(Ops& ops, const Options& o, Body body) {
  std::vector<double> per_call;
  for (int r = 0; r < o.repeats; ++r) {
    ops.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iterations; ++i) body();
    ops.synchronize();
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    per_call.push_back(elapsed.count() / o.iterations);
  }
  std::sort(per_call.begin(), per_call.end());
  const size_t m = per_call.size() / 2;
  return per_call.size() % 2 ? per_call[m] : 0.5 * (per_call[m - 1] + per_call[m]);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A JSON number, or null for a value JSON cannot hold (NaN, infinity).
std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

// One shape's figures: the median times, their FLOP rates and the outputs'
// checksums.
struct BenchResult {
  double forward_ms = 0, backward_ms = 0, forward_backward_ms = 0;
  double forward_tflops = 0, backward_tflops = 0, forward_backward_tflops = 0;
  Checksum out_sum, dqkv_sum;
  std::string device;
};

BenchResult measure(const Options& o) {
  std::unique_ptr<Ops> ops = o.backend == "cpu"
                                 ? paraplan::kernels::make_cpu_ops(0, o.dtype)
                                 : paraplan::kernels::make_cuda_ops(o.device, o.dtype);
  const int B = o.batch, T = o.seq, H = o.heads, K = o.kv_heads, D = o.head_dim;
  const size_t rows = static_cast<size_t>(B) * T;
  const size_t qkv_n = rows * static_cast<size_t>(H + 2 * K) * D;
  const size_t out_n = rows * static_cast<size_t>(H) * D;
  const size_t stat_n = rows * static_cast<size_t>(H);  // [B, H, T]

  void* qkv = random_storage(*ops, qkv_n, o.seed, 1.0f);
  void* dout = random_storage(*ops, out_n, o.seed + 1, 1.0f);
  void* out = ops->allocate(ops->storage_bytes(out_n));
  void* dqkv = ops->allocate(ops->storage_bytes(qkv_n));
  float* logsumexp = static_cast<float*>(ops->allocate(stat_n * sizeof(float)));
  float* scratch = static_cast<float*>(ops->allocate(stat_n * sizeof(float)));

  auto forward = [&] { ops->attention_forward(out, logsumexp, qkv, B, T, H, K, D); };
  auto backward = [&] {
    ops->attention_backward(dqkv, scratch, dout, qkv, out, logsumexp, B, T, H, K, D,
                            paraplan::kernels::GradientWrite::kOverwrite);
  };
  for (int i = 0; i < o.warmup; ++i) {
    forward();
    backward();
  }
  ops->synchronize();
  BenchResult r;
  r.forward_ms = median_ms(*ops, o, forward);
  r.forward_backward_ms = median_ms(*ops, o, [&] {
    forward();
    backward();
  });
  r.backward_ms = r.forward_backward_ms - r.forward_ms;
  forward();
  backward();
  r.out_sum = checksum(*ops, out, out_n);
  r.dqkv_sum = checksum(*ops, dqkv, qkv_n);

  // The header's FLOP counts.
  const double forward_flops = 2.0 * B * H * static_cast<double>(T) * T * D;
  r.forward_tflops = forward_flops / (r.forward_ms * 1e-3) / 1e12;
  // NaN (JSON null) when noise makes the difference of the two medians <= 0.
  r.backward_tflops =
      r.backward_ms > 0 ? 2.5 * forward_flops / (r.backward_ms * 1e-3) / 1e12 : std::nan("");
  r.forward_backward_tflops = 3.5 * forward_flops / (r.forward_backward_ms * 1e-3) / 1e12;
  r.device = ops->device_name();
  for (void* buffer :
       {qkv, dout, out, dqkv, static_cast<void*>(logsumexp), static_cast<void*>(scratch)})
    ops->deallocate(buffer);
  return r;
}

// One run's figures as a JSON object, its lines indented by `indent`.
std::string json_object(const Options& o, const BenchResult& r, const std::string& impl,
                        const std::string& indent) {
  std::string text = "{\n";
  auto field = [&](const char* key, const std::string& value, bool last = false) {
    text += indent + "  \"" + key + "\": " + value + (last ? "\n" : ",\n");
  };
  field("backend", json_string(o.backend));
  field("dtype", json_string(dtype_name(o.dtype)));
  field("device", json_string(r.device));
  field("batch", std::to_string(o.batch));
  field("seq", std::to_string(o.seq));
  field("heads", std::to_string(o.heads));
  field("kv_heads", std::to_string(o.kv_heads));
  field("head_dim", std::to_string(o.head_dim));
  field("iterations", std::to_string(o.iterations));
  field("warmup", std::to_string(o.warmup));
  field("repeats", std::to_string(o.repeats));
  field("forward_ms", json_number(r.forward_ms));
  field("backward_ms", json_number(r.backward_ms));
  field("forward_backward_ms", json_number(r.forward_backward_ms));
  field("forward_tflops", json_number(r.forward_tflops));
  field("backward_tflops", json_number(r.backward_tflops));
  field("forward_backward_tflops", json_number(r.forward_backward_tflops));
  field("flop_formula",
        json_string("forward = 2*B*H*T*T*D (4*B*H*T*T*D halved for causal); backward = "
                    "2.5 x forward; forward_backward = 3.5 x forward"));
  field("output_abs_sum", json_number(r.out_sum.abs_sum));
  field("output_nan_count", std::to_string(r.out_sum.nan_count));
  field("dqkv_abs_sum", json_number(r.dqkv_sum.abs_sum));
  field("dqkv_nan_count", std::to_string(r.dqkv_sum.nan_count));
  field("implementation", json_string(impl), /*last=*/true);
  return text + indent + "}";
}

// text into --json's file: 0, or 1 with a message when it cannot be written.
int write_json(const Options& o, const std::string& text) {
  std::FILE* file = std::fopen(o.json.c_str(), "w");
  if (file == nullptr || std::fputs(text.c_str(), file) < 0 || std::fclose(file) != 0) {
    std::fprintf(stderr, "attention_bench: cannot write --json %s: %s\n", o.json.c_str(),
                 std::strerror(errno));
    return 1;
  }
  return 0;
}

// One run at o's shape under o.attention (set for the process when given):
// the figures, printed in one line; impl receives what ran.
BenchResult run_one(const Options& o, std::string& impl) {
  if (!o.attention.empty()) setenv("PARAPLAN_CUDA_ATTENTION", o.attention.c_str(), 1);
  const BenchResult r = measure(o);
  impl = implementation(o);
  std::printf(
      "attention_bench %s %s (%s) B=%d T=%d H=%d Hkv=%d D=%d: forward %.4f ms (%.2f TFLOP/s), "
      "backward %.4f ms (%.2f TFLOP/s), forward+backward %.4f ms (%.2f TFLOP/s); "
      "sum|out| %.6g nan %ld, sum|dqkv| %.6g nan %ld; %s; median of %d x %d iterations\n",
      o.backend.c_str(), dtype_name(o.dtype), r.device.c_str(), o.batch, o.seq, o.heads, o.kv_heads,
      o.head_dim, r.forward_ms, r.forward_tflops, r.backward_ms, r.backward_tflops,
      r.forward_backward_ms, r.forward_backward_tflops, r.out_sum.abs_sum, r.out_sum.nan_count,
      r.dqkv_sum.abs_sum, r.dqkv_sum.nan_count, impl.c_str(), o.repeats, o.iterations);
  std::fflush(stdout);
  return r;
}

// --attention compare: own, then cuDNN, at the same shape and seeds.
int compare(const Options& o) {
  Options own = o, cudnn = o;
  own.attention = "own";
  cudnn.attention = "cudnn";
  std::string own_impl, cudnn_impl, unavailable;
  const BenchResult mine = run_one(own, own_impl);
  BenchResult theirs;
  try {
    theirs = run_one(cudnn, cudnn_impl);
  } catch (const std::exception& error) {
    unavailable = error.what();
  }
  if (!unavailable.empty()) {
    std::printf("attention_bench compare: cuDNN unavailable (%s); own kernels only\n",
                unavailable.c_str());
  } else {
    std::printf(
        "attention_bench compare B=%d T=%d H=%d Hkv=%d D=%d: cudnn/own forward %.3f, backward "
        "%.3f, forward+backward %.3f; faster forward+backward: %s\n",
        o.batch, o.seq, o.heads, o.kv_heads, o.head_dim, theirs.forward_ms / mine.forward_ms,
        theirs.backward_ms / mine.backward_ms,
        theirs.forward_backward_ms / mine.forward_backward_ms,
        theirs.forward_backward_ms < mine.forward_backward_ms ? "cudnn" : "own");
  }
  if (o.json.empty()) return 0;
  std::string text = "{\n  \"own\": " + json_object(own, mine, own_impl, "  ") + ",\n  \"cudnn\": ";
  text += unavailable.empty() ? json_object(cudnn, theirs, cudnn_impl, "  ") : "null";
  text += ",\n  \"cudnn_unavailable\": " +
          (unavailable.empty() ? std::string("null") : json_string(unavailable)) + "\n}\n";
  return write_json(o, text);
}

int run(const Options& o) {
  if (o.attention == "compare") return compare(o);
  std::string impl;
  const BenchResult r = run_one(o, impl);
  return o.json.empty() ? 0 : write_json(o, json_object(o, r, impl, "") + "\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const UsageError& error) {
    std::fprintf(stderr, "attention_bench: %s (--help lists the flags)\n", error.what());
    return 2;
  }
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "attention_bench: error: %s\n", error.what());
    return 1;
  }
}
