// model_stage.cc: the buffers every stage has: parameters, gradients, and each
// slot's tokens, targets and losses.
#include "runtime/model/model_stage.h"

#include <algorithm>
#include <stdexcept>

namespace paraplan {

int stage_sequence_length(const ParameterLayout& layout, const ModelStageOptions& options) {
  const int whole = layout.config().seq_len;
  if (options.sequence_length == 0) return whole;
  if (options.sequence_length < 0 || options.sequence_length > whole || options.context.size > 1)
    throw std::invalid_argument("model stage: sequence_length " +
                                std::to_string(options.sequence_length) + " outside 1.." +
                                std::to_string(whole) + " or with context parallelism");
  return options.sequence_length;
}

void ModelStage::refuse_backward_with_cache() const {
  if (key_value_cache_ != nullptr)
    throw std::logic_error("model stage: a stage with a key/value cache runs forwards only");
}

void ModelStage::set_first_position(int position) {
  if (position < 0 || position + sequence_length() > layout_.config().seq_len ||
      (position > 0 && key_value_cache_ == nullptr))
    throw std::invalid_argument("model stage: first position " + std::to_string(position) + " of " +
                                std::to_string(sequence_length()) + " tokens outside the model's " +
                                std::to_string(layout_.config().seq_len) +
                                " positions, or without a key/value cache");
  first_position_ = position;
}

ModelStage::ModelStage(const ParameterLayout& layout, kernels::Ops& ops, MemoryTracker& memory,
                       const ModelStageOptions& options, size_t activation_elements)
    : ops_(ops),
      memory_(memory),
      dtype_(ops.storage_dtype()),
      batch_(options.micro_batch_size),
      num_slots_(options.num_slots),
      recompute_(options.recompute),
      context_(options.context),
      document_separator_(options.document_separator),
      layers_per_zero_unit_(options.layers_per_zero_unit),
      key_value_cache_(options.key_value_cache),
      layout_(layout),
      buffer_elements_(std::max(options.buffer_elements, layout.num_elements())),
      activation_elements_(activation_elements) {
  if (layout.tensor_size() > 1 &&
      (options.tensor_group == nullptr || options.tensor_group->size() != layout.tensor_size()))
    throw std::invalid_argument("model stage: a tensor-parallel layout needs its tensor group");
  if (static_cast<int>(recompute_.size()) != layout.stage().num_layers)
    throw std::invalid_argument("model stage: one recompute mode per layer is required");
  if (layers_per_zero_unit_ < 1)
    throw std::invalid_argument("model stage: layers_per_zero_unit must be at least 1");
  if (batch_ < 1 || num_slots_ < 1)
    throw std::invalid_argument("model stage: micro_batch_size and num_slots must be positive");
  context_.seq_len = stage_sequence_length(layout, options);
  context_.check();
  const StageSpec& spec = layout.stage();
  const bool whole_model = spec.first_layer == 0 && spec.num_layers == layout.config().num_layers &&
                           spec.has_embedding && spec.has_head;
  if (key_value_cache_ != nullptr &&
      (batch_ != 1 || context_.size != 1 || layout.tensor_size() != 1 || document_separator_ >= 0 ||
       !whole_model))
    throw std::invalid_argument(
        "model stage: a key/value cache decodes one sequence on one rank: the whole model, "
        "micro-batch 1, no tensor or context parallelism, no document masking");
  const bool external_gradients = options.gradients != nullptr || options.gradients_elsewhere;
  if (options.parameters != nullptr && !external_gradients)
    throw std::invalid_argument("model stage: external parameters need external gradients");
  if (options.parameters == nullptr && options.gradients != nullptr &&
      !options.parameters_elsewhere)
    throw std::invalid_argument("model stage: external gradients need external parameters");
  if (options.parameters != nullptr || options.gradients != nullptr) {
    // A chunk: the rank's buffers, allocated and zeroed by its owner.
    parameters_ = options.parameters;
    gradients_ = options.gradients;
  } else {
    if (!options.parameters_elsewhere) {
      parameters_ = allocate_storage(buffer_elements_, MemoryCategory::kWeights);
      zero(parameters_, buffer_elements_);
    }
    if (!options.gradients_elsewhere) {
      gradients_ = allocate_storage(buffer_elements_, MemoryCategory::kGradients);
      zero(gradients_, buffer_elements_);
    }
  }
  const size_t tokens = static_cast<size_t>(batch_) * sequence_length();
  const size_t whole = static_cast<size_t>(batch_) * context_.seq_len;
  slot_tokens_.resize(num_slots_);
  for (SlotTokens& slot : slot_tokens_) {
    slot.tokens = static_cast<int32_t*>(
        memory_.allocate(tokens * sizeof(int32_t), MemoryCategory::kActivations));
    allocations_.push_back(slot.tokens);
    slot.targets = static_cast<int32_t*>(
        memory_.allocate(tokens * sizeof(int32_t), MemoryCategory::kActivations));
    allocations_.push_back(slot.targets);
    if (layout.stage().has_head)
      slot.losses = allocate_floats(tokens, MemoryCategory::kActivations);
    if (document_separator_ >= 0) {
      slot.documents = static_cast<int32_t*>(
          memory_.allocate(whole * sizeof(int32_t), MemoryCategory::kActivations));
      allocations_.push_back(slot.documents);
    }
  }
  if (layout.stage().has_head) {
    loss_accumulator_ =
        static_cast<double*>(memory_.allocate(sizeof(double), MemoryCategory::kWorkspace));
    allocations_.push_back(loss_accumulator_);
    ops_.zero_bytes(loss_accumulator_, sizeof(double));
  }
}

void ModelStage::load_micro_batch(int slot, const int32_t* tokens, const int32_t* targets) {
  const size_t local = static_cast<size_t>(batch_) * sequence_length();
  const size_t whole = static_cast<size_t>(batch_) * context_.seq_len;
  SlotTokens& destination = slot_tokens_[slot];
  // Staged through pinned memory on a device: the host does not wait, and
  // the arrays are free again at once.
  if (context_.size == 1) {
    ops_.copy_from_host_async(destination.tokens, tokens, local * sizeof(int32_t));
    ops_.copy_from_host_async(destination.targets, targets, local * sizeof(int32_t));
  } else {
    host_local_.resize(local);
    context_.take_local(tokens, host_local_.data(), batch_);
    ops_.copy_from_host_async(destination.tokens, host_local_.data(), local * sizeof(int32_t));
    context_.take_local(targets, host_local_.data(), batch_);
    ops_.copy_from_host_async(destination.targets, host_local_.data(), local * sizeof(int32_t));
  }
  if (destination.documents != nullptr) {
    host_documents_.resize(whole);
    document_numbers(tokens, host_documents_.data(), batch_, context_.seq_len, document_separator_);
    ops_.copy_from_host_async(destination.documents, host_documents_.data(),
                              whole * sizeof(int32_t));
  }
}

void ModelStage::forward(int slot, float loss_scale, bool training) {
  if (training) refuse_backward_with_cache();
  run_forward(slot, loss_scale, training);
}

ModelStage::~ModelStage() {
  for (void* pointer : allocations_) memory_.release(pointer);
}

void* ModelStage::allocate_storage(size_t count, MemoryCategory category) {
  void* pointer = memory_.allocate(ops_.storage_bytes(count), category);
  allocations_.push_back(pointer);
  return pointer;
}

float* ModelStage::allocate_floats(size_t count, MemoryCategory category) {
  void* pointer = memory_.allocate(count * sizeof(float), category);
  allocations_.push_back(pointer);
  return static_cast<float*>(pointer);
}

void ModelStage::load_parameters(const float* host, size_t count, size_t first) {
  if (parameters_ == nullptr)
    throw std::logic_error("model stage: load_parameters: the parameters live elsewhere (ZeRO-3)");
  if (first > buffer_elements_ || count > buffer_elements_ - first)
    throw std::invalid_argument("model stage: load_parameters: more values than parameters");
  std::vector<char> converted(ops_.storage_bytes(count));
  kernels::host_from_float(converted.data(), host, dtype_, count);
  ops_.copy_from_host(kernels::element_at(parameters_, first, dtype_), converted.data(),
                      converted.size());
}

namespace {
void read_widened(kernels::Ops& ops, const void* source, float* host, size_t count) {
  std::vector<char> raw(ops.storage_bytes(count));
  ops.copy_to_host(raw.data(), source, raw.size());
  kernels::host_to_float(host, raw.data(), ops.storage_dtype(), count);
}
}  // namespace

void ModelStage::read_parameters(float* host, size_t count) {
  if (parameters_ == nullptr)
    throw std::logic_error("model stage: read_parameters: the parameters live elsewhere (ZeRO-3)");
  read_widened(ops_, parameters_, host, std::min(count, buffer_elements_));
}

void ModelStage::read_gradients(float* host, size_t count) {
  if (gradients_ == nullptr)
    throw std::logic_error("model stage: read_gradients: the gradients live elsewhere (ZeRO-2)");
  read_widened(ops_, gradients_, host, std::min(count, buffer_elements_));
}

double ModelStage::take_loss_sum() {
  if (!has_head()) return 0.0;
  double sum = 0.0;
  ops_.copy_to_host(&sum, loss_accumulator_, sizeof(double));
  ops_.zero_bytes(loss_accumulator_, sizeof(double));
  return sum;
}

const float* ModelStage::token_losses(int slot) const {
  if (!has_head()) throw std::logic_error("model stage: token_losses: no head on this stage");
  return slot_tokens_[slot].losses;
}

}  // namespace paraplan
