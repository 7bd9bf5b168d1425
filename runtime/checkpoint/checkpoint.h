// checkpoint.h: plan-independent training checkpoints. A checkpoint directory
// holds one step directory per save plus a 'latest' file naming the newest:
//
//   DIR/latest              one line: "step_00000100"
//   DIR/step_00000100/
//     model.safetensors     Hugging Face names and layouts (or, from a save
//                           with several writers, model.safetensors.index.json
//                           and the model-0000k-of-0000n.safetensors it names)
//     config.json           transformers' config: from_pretrained loads the directory
//     optimizer.safetensors AdamW moments exp_avg.<name>, exp_avg_sq.<name>
//                           (or its index and files, as the model's)
//     train_state.json      step, next_train_sample, seed, format_version,
//                           data_order (data_order_record.h)
//
// Tensors are whole (not per rank), so a run resumes under any plan. A step
// directory is written under a temporary name and renamed into place, then
// 'latest' is replaced atomically, so a crash mid-save leaves the previous
// checkpoint whole and 'latest' pointing at it. Old step directories are kept
// unless the run keeps only the newest few (checkpoint_retention.h).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/checkpoint/data_order_record.h"
#include "runtime/checkpoint/tensor_file_set.h"
#include "runtime/model/model_config.h"
#include "runtime/model/parameter_layout.h"

namespace paraplan {

inline constexpr int kCheckpointFormatVersion = 1;

// train_state.json's ranges: the trainer counts steps in an int (and goes on
// to step + 1); the sample index stays far from int64's end however many
// steps of however large a batch follow (2^62 + (2^31 - 1)^2 < 2^63).
inline constexpr int64_t kMaxTrainStep = 2147483646;
inline constexpr int64_t kMaxTrainSample = int64_t{1} << 62;

struct TrainState {
  int64_t step = 0;               // optimizer steps completed
  int64_t next_train_sample = 0;  // global index of the next training sample
  uint64_t seed = 0;
  // The order next_train_sample counts in; absent in checkpoints written
  // before it was recorded.
  std::optional<DataOrderRecord> data_order = std::nullopt;
};

// The step of a step directory name: "step_" and 1 to 18 digits, as saves
// write it (step_00000100); nullopt for anything else.
std::optional<int64_t> parse_step_directory_name(std::string_view name);

// A step directory being written aside (DIR/step_N.tmp-<pid>-<n>) and then
// published: config.json, train_state.json, the rename into place and
// 'latest'. Between the two, any number of writers (the ranks of a
// distributed save, on a filesystem they share) put their tensor files in
// path(). Dropped unpublished, the aside directory goes.
class CheckpointDraft {
 public:
  // Validates the state's ranges, creates `dir` if needed, removes what
  // killed saves left there and makes the aside directory.
  CheckpointDraft(const std::string& dir, const TrainState& state);
  ~CheckpointDraft();
  CheckpointDraft(const CheckpointDraft&) = delete;
  CheckpointDraft& operator=(const CheckpointDraft&) = delete;

  const std::string& path() const { return temp_path_; }
  // Writes config.json (from `config`) and train_state.json beside the
  // tensor files, runs before_publish (which may throw: then nothing is
  // published), renames the directory into place and points 'latest' at it.
  // Returns the step directory.
  std::string publish(const TransformerConfig& config,
                      const std::function<void()>& before_publish = {});

 private:
  std::string dir_, name_, temp_path_;
  TrainState state_;
  bool published_ = false;
};

// Writes DIR/step_<8-digit step>/ (creating DIR if needed; replacing a step
// directory of the same step) and points DIR/latest at it. `params`,
// `first_moment` and `second_moment` are host arrays of layout.num_elements()
// floats. Linear weights are written transposed to Hugging Face's Conv1D
// [in, out]; a tied head is not written apart from transformer.wte.weight, and
// a name the layout holds twice is written once. Returns the step directory.
// before_publish runs once the step directory is written aside, just before
// it and 'latest' are published; it may throw, and then nothing is published
// and the aside directory goes (the writer's fence, checkpoint_lock.h).
std::string save_checkpoint(const std::string& dir, const ParameterLayout& layout,
                            const float* params, const float* first_moment,
                            const float* second_moment, const TrainState& state,
                            const std::function<void()>& before_publish = {});

// A step directory as it is, or DIR/<the step named in DIR/latest>. Throws
// std::runtime_error naming the path if it is neither or 'latest' is stale.
std::string resolve_checkpoint(const std::string& path);

// Loads the checkpoint at `path` (a step directory, or a checkpoint directory
// with 'latest') into the layout's buffers after validating config.json
// against layout.config() (every mismatching field named) and every tensor of
// the layout (present, right shape). first_moment and second_moment may be
// nullptr to skip the optimizer state (e.g. for sampling).
TrainState load_checkpoint(const std::string& path, const ParameterLayout& layout, float* params,
                           float* first_moment, float* second_moment);

// The largest whole tensor of the layout (of its Conv1D weights only, when
// transposed_only), in bytes: what a rank holds at once beyond its own
// arrays when it saves (any) or loads (a transposed one) a tensor.
double largest_tensor_bytes(const ParameterLayout& layout, bool transposed_only);

// The shape Hugging Face stores the whole tensor in: global_shape, reversed
// for Conv1D weights.
std::vector<int64_t> hugging_face_shape(const ParameterTensor& tensor);

// The whole tensor `whole` (global_shape, paraplan's layout) as Hugging Face
// stores it: transposed into `scratch` for a Conv1D weight, else `whole`.
const float* hugging_face_data(const ParameterTensor& tensor, const float* whole,
                               std::vector<float>& scratch);

// The name `files` stores the tensor under: `prefix + tensor.name`, or a
// Hugging Face hub export's name without "transformer.". Throws naming the
// file if it holds neither.
std::string stored_tensor_name(const TensorFileSet& files, const ParameterTensor& tensor,
                               const std::string& prefix);

// Reads the whole tensor `prefix + tensor.name` from `files` into `whole`
// (prod(global_shape) floats, paraplan's layout); `scratch` holds a Conv1D
// weight before it is transposed back. A Hugging Face hub export's name
// without "transformer." is taken too. Throws naming the file if the tensor
// is missing or of another shape.
void read_whole_tensor(const TensorFileSet& files, const ParameterTensor& tensor,
                       const std::string& prefix, float* whole, std::vector<float>& scratch);

// The pieces of load_checkpoint, for a reader that takes each rank's slice
// (distributed_checkpoint.h); `step_dir` as resolve_checkpoint returns it.
// check_checkpoint_config names every field of config.json that differs from
// `config`. open_optimizer_tensors throws naming optimizer.safetensors when
// the checkpoint was saved without moments. read_step_train_state returns a
// default state for a directory without train_state.json unless required.
void check_checkpoint_config(const std::string& step_dir, const TransformerConfig& config);
TensorFileSet open_model_tensors(const std::string& step_dir);
TensorFileSet open_optimizer_tensors(const std::string& step_dir);
TrainState read_step_train_state(const std::string& step_dir, bool required);

// train_state.json of the checkpoint at `path`, without its tensors.
TrainState read_train_state(const std::string& path);

// The model configuration in config.json of the checkpoint at `path`.
TransformerConfig read_checkpoint_config(const std::string& path);

// The readers of config.json and train_state.json over text already read;
// `path` names the file in messages. Every field is validated (the model's
// sizes by validated_transformer_config, the state's ranges above).
TransformerConfig parse_checkpoint_config(const std::string& text, const std::string& path);
TrainState parse_train_state(const std::string& text, const std::string& path);

}  // namespace paraplan
