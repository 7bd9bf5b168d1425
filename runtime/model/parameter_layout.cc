// parameter_layout.cc: the parameter table, shard index arithmetic and the
// counter-based initialisation.
#include "runtime/model/parameter_layout.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "common/splitmix64.h"

namespace paraplan {

const char* architecture_name(Architecture architecture) {
  switch (architecture) {
    case Architecture::kGpt2:
      return "gpt2";
    case Architecture::kLlama:
      return "llama";
  }
  return "unknown";
}

ParameterLayout::ParameterLayout(const TransformerConfig& config, const StageSpec& stage,
                                 int tensor_rank, int tensor_size)
    : config_(config), stage_(stage), tensor_rank_(tensor_rank), tensor_size_(tensor_size) {}

size_t ParameterLayout::add(const TensorSpec& spec) {
  ParameterTensor tensor;
  tensor.name = spec.name;
  tensor.global_shape = spec.global_shape;
  tensor.shape = spec.global_shape;
  // A 1-D tensor split by rows (a column-parallel bias) divides its only dimension.
  if (tensor_size_ > 1 && spec.shard == ShardKind::kRows) tensor.shape[0] /= tensor_size_;
  if (tensor_size_ > 1 && spec.shard == ShardKind::kColumns) tensor.shape[1] /= tensor_size_;
  tensor.shard = tensor_size_ > 1 ? spec.shard : ShardKind::kReplicated;
  tensor.shard_blocks = spec.shard_blocks;
  tensor.tensor_rank = tensor_rank_;
  tensor.tensor_size = tensor_size_;
  tensor.size = 1;
  for (int64_t dim : tensor.shape) tensor.size *= static_cast<size_t>(dim);
  tensor.hf_transposed = spec.hf_transposed;
  tensor.offset = num_elements_;
  tensor.weight_decay = spec.weight_decay;
  tensor.init = spec.init;
  tensor.init_std = spec.init_std;
  tensor.tied = spec.tied;
  tensor.tied_copy = spec.tied_copy;
  num_elements_ += tensor.size;
  tensors_.push_back(std::move(tensor));
  return tensors_.back().offset;
}

size_t ParameterTensor::global_index(size_t k) const {
  const size_t columns = shape.size() > 1 ? static_cast<size_t>(shape[1]) : 1;
  const size_t row = k / columns, column = k % columns;
  const size_t global_columns = global_shape.size() > 1 ? static_cast<size_t>(global_shape[1]) : 1;
  switch (shard) {
    case ShardKind::kReplicated:
      return k;
    case ShardKind::kRows: {
      // Local rows come block by block; each block holds this rank's slice
      // of the matching global block.
      const size_t rows_per_block = static_cast<size_t>(shape[0]) / shard_blocks;
      const size_t block = row / rows_per_block, within = row % rows_per_block;
      const size_t global_row = block * rows_per_block * tensor_size +
                                static_cast<size_t>(tensor_rank) * rows_per_block + within;
      return global_row * global_columns + column;
    }
    case ShardKind::kColumns:
      return row * global_columns + static_cast<size_t>(tensor_rank) * columns + column;
  }
  return k;
}

size_t ParameterTensor::contiguous_run() const {
  const size_t columns = shape.size() > 1 ? static_cast<size_t>(shape[1]) : 1;
  if (tensor_size == 1) return std::max<size_t>(size, 1);
  switch (shard) {
    case ShardKind::kReplicated:
      return std::max<size_t>(size, 1);
    case ShardKind::kRows:  // global_index: a block's rows sit together
      return static_cast<size_t>(shape[0]) / shard_blocks * columns;
    case ShardKind::kColumns:
      return columns;
  }
  return 1;
}

size_t ParameterTensor::global_size() const {
  size_t elements = 1;
  for (int64_t dim : global_shape) elements *= static_cast<size_t>(dim);
  return elements;
}

const ParameterTensor* ParameterLayout::find(const std::string& name) const {
  for (const ParameterTensor& tensor : tensors_)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

const ParameterTensor* ParameterLayout::tied_tensor() const {
  for (const ParameterTensor& tensor : tensors_)
    if (tensor.tied) return &tensor;
  return nullptr;
}

uint64_t name_key(const std::string& name) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

float counter_normal(uint64_t seed, uint64_t key, uint64_t index) {
  const uint64_t bits = splitmix64(splitmix64(seed ^ splitmix64(key)) ^ index);
  // Two 32-bit uniforms in (0, 1]; Box-Muller in double for exact reproducibility.
  const double u1 = (static_cast<double>(bits >> 32) + 1.0) / 4294967296.0;
  const double u2 = (static_cast<double>(bits & 0xffffffffull) + 1.0) / 4294967296.0;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

namespace {

// Elements [begin, end) of one tensor.
struct InitPiece {
  const ParameterTensor* tensor;
  float* values;  // the tensor's elements
  size_t begin, end;
};

void initialize_piece(const InitPiece& piece, uint64_t seed) {
  const ParameterTensor& tensor = *piece.tensor;
  float* out = piece.values;
  switch (tensor.init) {
    case InitKind::kZeros:
      for (size_t i = piece.begin; i < piece.end; ++i) out[i] = 0.0f;
      break;
    case InitKind::kOnes:
      for (size_t i = piece.begin; i < piece.end; ++i) out[i] = 1.0f;
      break;
    case InitKind::kNormal: {
      const uint64_t key = name_key(tensor.name);
      for (size_t i = piece.begin; i < piece.end; ++i)
        out[i] = tensor.init_std * counter_normal(seed, key, tensor.global_index(i));
      break;
    }
  }
}

// Every element is a function of (seed, tensor name, global index) alone,
// so the work is cut into fixed pieces spread over the host's cores: the
// same bits whoever computes them. (On one thread a Llama 3.2 1B's 1.24B
// weights took ~30 s before the first step.)
void initialize_pieces(const std::vector<InitPiece>& pieces, uint64_t seed) {
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), pieces.size());
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t p = next++; p < pieces.size(); p = next++) initialize_piece(pieces[p], seed);
  };
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& helper : helpers) helper.join();
}

constexpr size_t kInitPiece = size_t{1} << 20;

}  // namespace

void ParameterLayout::initialize(float* params, uint64_t seed) const {
  std::vector<InitPiece> pieces;
  for (const ParameterTensor& tensor : tensors_)
    for (size_t begin = 0; begin < tensor.size; begin += kInitPiece)
      pieces.push_back(
          {&tensor, params + tensor.offset, begin, std::min(begin + kInitPiece, tensor.size)});
  initialize_pieces(pieces, seed);
}

void ParameterLayout::initialize_tensor(const ParameterTensor& tensor, float* values,
                                        uint64_t seed) const {
  std::vector<InitPiece> pieces;
  for (size_t begin = 0; begin < tensor.size; begin += kInitPiece)
    pieces.push_back({&tensor, values, begin, std::min(begin + kInitPiece, tensor.size)});
  initialize_pieces(pieces, seed);
}

size_t ParameterLayout::append(const ParameterLayout& other) {
  const size_t base = num_elements_;
  for (ParameterTensor tensor : other.tensors_) {
    tensor.offset += base;
    tensors_.push_back(std::move(tensor));
  }
  num_elements_ += other.num_elements_;
  return base;
}

}  // namespace paraplan
