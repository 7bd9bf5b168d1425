// embedding_bench.cc: times Ops::token_embedding_backward at GPT-2's shape
// (B x T tokens, vocabulary 50,257, 768 channels) for token streams of three
// shapes, since its cost depends on how often tokens repeat:
//   uniform  every token equally likely (what replay's synthetic tokens are);
//   zipf     P(rank r) ~ 1 / r, the shape of word frequencies in text: the
//            commonest token takes about 8% of the positions, as " the", ","
//            and "." together do in GPT-2's tokens of English;
//   single   one token everywhere, the worst case.
// For each: W warm-up calls, then R repeats of N calls timed on the wall
// clock between two ops->synchronize(); the median repeat over N is printed,
// with the commonest token's count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
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
    "usage: embedding_bench [--backend cpu|cuda] [--dtype float32|bfloat16] [--batch B]\n"
    "                       [--seq T] [--vocab V] [--channels C] [--iterations N]\n"
    "                       [--warmup W] [--repeats R]\n"
    "Times Ops::token_embedding_backward for uniform, Zipf and single-token streams.\n"
    "Defaults: --backend cuda --dtype bfloat16 --batch 8 --seq 1024 --vocab 50257\n"
    "--channels 768 --iterations 20 --warmup 3 --repeats 5.\n";

struct Options {
  std::string backend = "cuda";
  DType dtype = DType::kBFloat16;
  int batch = 8, seq = 1024, vocab = 50257, channels = 768;
  int iterations = 20, warmup = 3, repeats = 5;
};

int positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || value <= 0 || value > (1 << 30))
    throw std::invalid_argument(flag + " must be a positive integer, got '" + text + "'");
  return static_cast<int>(value);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i++) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
    const char* value = argv[++i];
    if (flag == "--backend") {
      o.backend = value;
      if (o.backend != "cpu" && o.backend != "cuda")
        throw std::invalid_argument("--backend must be cpu or cuda, got '" + o.backend + "'");
    } else if (flag == "--dtype") {
      const std::string name = value;
      if (name == "float32") {
        o.dtype = DType::kFloat32;
      } else if (name == "bfloat16") {
        o.dtype = DType::kBFloat16;
      } else {
        throw std::invalid_argument("--dtype must be float32 or bfloat16, got '" + name + "'");
      }
    } else if (flag == "--batch") {
      o.batch = positive(flag, value);
    } else if (flag == "--seq") {
      o.seq = positive(flag, value);
    } else if (flag == "--vocab") {
      o.vocab = positive(flag, value);
    } else if (flag == "--channels") {
      o.channels = positive(flag, value);
    } else if (flag == "--iterations") {
      o.iterations = positive(flag, value);
    } else if (flag == "--warmup") {
      o.warmup = positive(flag, value);
    } else if (flag == "--repeats") {
      o.repeats = positive(flag, value);
    } else {
      throw std::invalid_argument("unknown flag '" + flag + "'\n" + kUsage);
    }
  }
  return o;
}

std::vector<int32_t> token_stream(const std::string& shape, int n, int vocab) {
  std::mt19937 generator(1234);
  std::vector<int32_t> tokens(n, 0);
  if (shape == "uniform") {
    std::uniform_int_distribution<int32_t> uniform(0, vocab - 1);
    for (int32_t& token : tokens) token = uniform(generator);
  } else if (shape == "zipf") {
    std::vector<double> weights(vocab);
    for (int r = 0; r < vocab; r++) weights[r] = 1.0 / (r + 1);
    std::discrete_distribution<int32_t> zipf(weights.begin(), weights.end());
    // Ranks scattered over the vocabulary, as real token ids are.
    for (int32_t& token : tokens) token = static_cast<int32_t>((zipf(generator) * 7919LL) % vocab);
  } else {
    std::fill(tokens.begin(), tokens.end(), vocab / 2);
  }
  return tokens;
}

int commonest_count(const std::vector<int32_t>& tokens) {
  std::map<int32_t, int> counts;
  int most = 0;
  for (int32_t token : tokens) most = std::max(most, ++counts[token]);
  return most;
}

void run(const Options& o) {
  std::unique_ptr<Ops> ops = o.backend == "cpu" ? paraplan::kernels::make_cpu_ops(0, o.dtype)
                                                : paraplan::kernels::make_cuda_ops(0, o.dtype);
  const int n = o.batch * o.seq;
  const size_t dwte_bytes = ops->storage_bytes(static_cast<size_t>(o.vocab) * o.channels);
  const size_t dout_bytes = ops->storage_bytes(static_cast<size_t>(n) * o.channels);
  void* dwte = ops->allocate(dwte_bytes);
  void* dout = ops->allocate(dout_bytes);
  auto* tokens = static_cast<int32_t*>(ops->allocate(n * sizeof(int32_t)));
  ops->zero_bytes(dwte, dwte_bytes);
  ops->zero_bytes(dout, dout_bytes);
  std::printf("token_embedding_backward, %s %s, %d tokens (B %d T %d), vocab %d, C %d\n",
              o.backend.c_str(), o.dtype == DType::kBFloat16 ? "bf16" : "fp32", n, o.batch, o.seq,
              o.vocab, o.channels);
  for (const char* shape : {"uniform", "zipf", "single"}) {
    const std::vector<int32_t> host = token_stream(shape, n, o.vocab);
    ops->copy_from_host(tokens, host.data(), host.size() * sizeof(int32_t));
    auto call = [&] {
      ops->token_embedding_backward(dwte, dout, tokens, n, 0, o.vocab, o.channels);
    };
    for (int i = 0; i < o.warmup; i++) call();
    std::vector<double> repeats;
    for (int r = 0; r < o.repeats; r++) {
      ops->synchronize();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < o.iterations; i++) call();
      ops->synchronize();
      const std::chrono::duration<double, std::milli> elapsed =
          std::chrono::steady_clock::now() - start;
      repeats.push_back(elapsed.count() / o.iterations);
    }
    std::sort(repeats.begin(), repeats.end());
    std::printf("  %-8s %9.4f ms  (commonest token %d of %d positions; median of %d x %d)\n", shape,
                repeats[repeats.size() / 2], commonest_count(host), n, o.repeats, o.iterations);
  }
  ops->deallocate(dwte);
  ops->deallocate(dout);
  ops->deallocate(tokens);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(parse(argc, argv));
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "embedding_bench: %s\n", error.what());
    return 2;
  }
}
