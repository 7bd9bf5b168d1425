// model_limits.h: the largest model and plan paraplan builds, and the one set
// of rules every reader of a model's sizes applies: the plan validator
// (model.*), the job config ([model] ...), and the runtime's model from a plan
// or from a checkpoint's config.json (runtime/model/model_config.h). Each
// limit is far above any real model and low enough that every size product
// paraplan computes stays exact in int64 and every kernel argument fits an int.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace paraplan {

// Token ids are int32 in the runtime and uint32 in Llama 3 shards; 2^24 is
// far above any real vocabulary (Llama 3: 128,256) and keeps the embedding's
// element count exact.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
// d_model, ffn_size, seq_len and num_heads: with at most kMaxNumLayers blocks,
// a model's element counts stay below 2^63.
inline constexpr int64_t kMaxModelDimension = int64_t{1} << 24;
// The planner's stage partition is quadratic in layers.
inline constexpr int64_t kMaxNumLayers = 4096;
// micro_batch_size x seq_len: the kernels take a micro-batch's row count as an int.
inline constexpr int64_t kMaxMicroBatchRows = std::numeric_limits<int32_t>::max();
// Micro-batches per data-parallel replica and step, and pipeline stages: the
// instruction streams of the largest plan (at most 6 instructions of 12 bytes
// per micro-batch and stage: 302 MB for a 256-stage GPipe plan of 16384
// micro-batches) stay below the plan file limit (512 MiB, common/bounded_file.h).
inline constexpr int64_t kMaxMicroBatches = 16384;
inline constexpr int64_t kMaxPipelineStages = 256;
// Model chunks per pipeline rank: Instruction.chunk is a ubyte.
inline constexpr int32_t kMaxVirtualStages = 256;

// Counts that multiply a run's work, each bounded where a plan or job file
// sets it (the job validator, the plan validator) and where `train` takes it,
// so that a typo is refused by name instead of running for hours.
// Steps (total_steps, warmup_steps, eval_interval, --steps,
// --checkpoint-every): the training loop and train_state.json count steps in
// an int.
inline constexpr int64_t kMaxSteps = 2147483646;
// Global batches per evaluation: 65,536 x GPT-2's 512 sequences of 1024 is
// 34 billion tokens, a whole FineWeb-sized validation pass. The runtime reads
// at most one pass of the validation data whatever is asked
// (runtime/train/evaluation.h).
inline constexpr int64_t kMaxEvalBatches = 65536;

// A model's sizes, as wide integers so that any value a file holds can be judged.
struct ModelShape {
  int64_t vocab_size = 0, seq_len = 0, num_layers = 0, d_model = 0, num_heads = 0, ffn_size = 0;
};

// How one kind of file names each size, for messages.
struct ModelFieldNames {
  const char* vocab_size;
  const char* seq_len;
  const char* num_layers;
  const char* d_model;
  const char* num_heads;
  const char* ffn_size;
};
inline constexpr ModelFieldNames kPlanModelFields{"model.vocab_size", "model.seq_len",
                                                  "model.num_layers", "model.d_model",
                                                  "model.num_heads",  "model.ffn_size"};

// One broken rule: the field, and the problem starting with its value
// ("16777344; must be at most 16777216 (2^24), ...").
struct FieldProblem {
  std::string field;
  std::string problem;
};

// Every size positive and within its limit, d_model a multiple of num_heads.
// Empty when the shape is buildable.
std::vector<FieldProblem> model_shape_problems(const ModelShape& shape,
                                               const ModelFieldNames& names);

// micro_batch_size x seq_len within kMaxMicroBatchRows, blamed on `field` (the
// micro-batch size); empty when it fits or either is not positive.
std::vector<FieldProblem> micro_batch_rows_problems(int64_t micro_batch_size, int64_t seq_len,
                                                    const char* field, const char* seq_len_field);

}  // namespace paraplan
