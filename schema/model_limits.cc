// model_limits.cc: the model size rules shared by every reader of a model.
#include "schema/model_limits.h"

namespace paraplan {
namespace {

// A field's own key, without its section: "model.num_heads" and "[model]
// num_heads" give "num_heads".
std::string key_of(const std::string& field) {
  const size_t cut = field.find_last_of(". ");
  return cut == std::string::npos ? field : field.substr(cut + 1);
}

}  // namespace

std::vector<FieldProblem> model_shape_problems(const ModelShape& shape,
                                               const ModelFieldNames& names) {
  std::vector<FieldProblem> problems;
  const auto add = [&](const char* field, std::string problem) {
    problems.push_back({field, std::move(problem)});
  };
  const std::string dimension_limit = std::to_string(kMaxModelDimension) +
                                      " (2^24), the largest size paraplan builds (larger "
                                      "sizes would overflow the model's element counts)";
  const std::string vocab_limit =
      std::to_string(kMaxVocabSize) + " (2^24), the largest vocabulary paraplan builds";
  const std::string layers_limit =
      std::to_string(kMaxNumLayers) +
      ", the most layers paraplan plans (the stage partition is quadratic in layers)";
  // Field by field, in the order a model is described, so that the first
  // problem is the cause (a d_model too large for the default ffn_size comes
  // before the ffn_size it left unset).
  const struct {
    const char* field;
    int64_t value;
    int64_t limit;
    const std::string& why;
  } sizes[] = {{names.vocab_size, shape.vocab_size, kMaxVocabSize, vocab_limit},
               {names.seq_len, shape.seq_len, kMaxModelDimension, dimension_limit},
               {names.num_layers, shape.num_layers, kMaxNumLayers, layers_limit},
               {names.d_model, shape.d_model, kMaxModelDimension, dimension_limit},
               {names.num_heads, shape.num_heads, kMaxModelDimension, dimension_limit},
               {names.ffn_size, shape.ffn_size, kMaxModelDimension, dimension_limit}};
  for (const auto& size : sizes) {
    if (size.value <= 0) add(size.field, std::to_string(size.value) + "; must be positive");
    if (size.value > size.limit)
      add(size.field, std::to_string(size.value) + "; must be at most " + size.why);
  }
  if (shape.d_model > 0 && shape.num_heads > 0 && shape.d_model % shape.num_heads != 0) {
    const std::string d_model = key_of(names.d_model), num_heads = key_of(names.num_heads);
    add(names.d_model, std::to_string(shape.d_model) + " is not divisible by " + num_heads + " " +
                           std::to_string(shape.num_heads) + "; " + d_model +
                           " must be a multiple of " + num_heads);
  }
  return problems;
}

std::vector<FieldProblem> micro_batch_rows_problems(int64_t micro_batch_size, int64_t seq_len,
                                                    const char* field, const char* seq_len_field) {
  if (micro_batch_size <= 0 || seq_len <= 0 || seq_len > kMaxModelDimension) return {};
  const int64_t rows = micro_batch_size * seq_len;  // both below 2^31 + 2^24: no overflow
  if (rows <= kMaxMicroBatchRows) return {};
  return {{field, std::to_string(micro_batch_size) + "; " + field + " x " + seq_len_field + " = " +
                      std::to_string(micro_batch_size) + " x " + std::to_string(seq_len) + " = " +
                      std::to_string(rows) + " rows, more than the " +
                      std::to_string(kMaxMicroBatchRows) +
                      " a micro-batch may have (the kernels count rows in an int)"}};
}

}  // namespace paraplan
