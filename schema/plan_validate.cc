// plan_validate.cc: validate_plan, the semantic checks of a verified plan.
//
// The FlatBuffers verifier only proves the bytes are safe to read; validate_plan
// proves they describe a job the runtime can execute: consistent sizes, a mesh
// that fills the devices, stages that cover every layer once, a sane optimizer,
// and (in plan_validate_schedule.cc) a well-formed instruction stream per stage.
// Every violation is collected as "field: problem; what would be valid" so a user
// sees all of them at once.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "common/printable_text.h"
#include "schema/model_limits.h"
#include "schema/plan_validate_internal.h"
#include "schema/zero_stages.h"

namespace paraplan {
namespace plan_validation {
namespace {

void require_positive(Violations& v, const std::string& field, int64_t value) {
  if (value <= 0) v.add(field, number(value) + "; must be positive");
}

void require_non_negative(Violations& v, const std::string& field, int64_t value) {
  if (value < 0) v.add(field, number(value) + "; must be at least 0");
}

bool is_known(schema::RecomputeMode mode) {
  return std::string(recompute_mode_name(mode)) != "unknown";
}

void check_header(const schema::Plan& plan, Violations& v) {
  const schema::Header* header = plan.header();
  if (header == nullptr) {
    v.add("header", "missing; every plan needs a header with schema_version " +
                        std::to_string(kPlanSchemaVersion));
    return;
  }
  const uint32_t version = header->schema_version();
  if (version < kOldestReadablePlanSchemaVersion || version > kPlanSchemaVersion) {
    v.add("header.schema_version", std::to_string(version) + "; this paraplan reads versions " +
                                       std::to_string(kOldestReadablePlanSchemaVersion) + " to " +
                                       std::to_string(kPlanSchemaVersion));
  }
}

// num_kv_heads and the rotary fields: Llama's, and left at their defaults by GPT-2.
void check_llama_fields(const schema::Model& model, Violations& v) {
  const int32_t heads = model.num_heads(), kv_heads = model.num_kv_heads();
  if (model.architecture() != schema::Architecture::Llama) {
    if (kv_heads != 0 && kv_heads != heads)
      v.add("model.num_kv_heads", number(kv_heads) + "; gpt2 has multi-head attention: 0 or " +
                                      "num_heads (" + number(heads) + ")");
    if (model.qkv_bias())
      v.add("model.qkv_bias", "true; a llama field (gpt2's attention always has biases): false");
    return;
  }
  if (kv_heads < 0 || (kv_heads > 0 && heads > 0 && heads % kv_heads != 0))
    v.add("model.num_kv_heads",
          number(kv_heads) + " does not divide num_heads " + number(heads) +
              "; each KV head serves an equal group of query heads (0: " + "num_heads)");
  if (heads > 0 && model.d_model() % heads == 0 && (model.d_model() / heads) % 2 != 0)
    v.add("model.d_model", number(model.d_model()) + " / num_heads " + number(heads) +
                               " is an odd head_dim; the rotary embedding needs an even one");
  if (!(model.rope_theta() > 0) || !std::isfinite(model.rope_theta()))
    v.add("model.rope_theta", number(model.rope_theta()) + "; must be a positive finite number");
  const float factor = model.rope_scaling_factor();
  if (!(factor >= 0) || !std::isfinite(factor))
    v.add("model.rope_scaling_factor", number(factor) + "; must be >= 0 (0: no scaling)");
  if (factor > 0 && !(model.rope_low_freq_factor() > 0 &&
                      model.rope_high_freq_factor() > model.rope_low_freq_factor() &&
                      model.rope_original_max_positions() > 0))
    v.add("model.rope_scaling_factor",
          number(factor) + " with low_freq_factor " + number(model.rope_low_freq_factor()) +
              ", high_freq_factor " + number(model.rope_high_freq_factor()) +
              ", original_max_positions " + number(model.rope_original_max_positions()) +
              "; llama3 scaling needs 0 < low_freq_factor < high_freq_factor and " +
              "original_max_positions > 0");
}

void check_model(const schema::Model& model, Violations& v) {
  if (std::string(architecture_name(model.architecture())) == "unknown") {
    v.add("model.architecture", "unknown value " +
                                    std::to_string(static_cast<int>(model.architecture())) +
                                    "; valid are gpt2 (0) and llama (1)");
  }
  if (std::string(dtype_name(model.dtype())) == "unknown") {
    v.add("model.dtype", "unknown value " + std::to_string(static_cast<int>(model.dtype())) +
                             "; valid are float32 (0) and bfloat16 (1)");
  }
  const ModelShape shape{.vocab_size = model.vocab_size(),
                         .seq_len = model.seq_len(),
                         .num_layers = model.num_layers(),
                         .d_model = model.d_model(),
                         .num_heads = model.num_heads(),
                         .ffn_size = model.ffn_size()};
  for (const FieldProblem& problem : model_shape_problems(shape, kPlanModelFields))
    v.add(problem.field, problem.problem);
  if (!(model.layernorm_epsilon() > 0) || !std::isfinite(model.layernorm_epsilon())) {
    v.add("model.layernorm_epsilon",
          number(model.layernorm_epsilon()) + "; must be a positive finite number");
  }
  if (!(model.init_std() >= 0) || !std::isfinite(model.init_std())) {
    v.add("model.init_std", number(model.init_std()) + "; must be a finite number >= 0");
  }
  check_llama_fields(model, v);
}

void check_optimizer(const schema::Optimizer& opt, Violations& v) {
  const std::string f = "training.optimizer.";
  const float lr = opt.learning_rate();
  if (!(lr >= 0) || !std::isfinite(lr)) {
    v.add(f + "learning_rate", number(lr) + "; must be a finite number >= 0");
  }
  if (!(opt.min_learning_rate() >= 0)) {
    v.add(f + "min_learning_rate", number(opt.min_learning_rate()) + "; must be >= 0");
  } else if (opt.min_learning_rate() > lr) {
    v.add(f + "min_learning_rate",
          number(opt.min_learning_rate()) + " is above learning_rate " + number(lr) +
              "; the schedule decays to it, so it must be <= learning_rate");
  }
  for (const auto& [name, beta] : {std::pair{"beta1", opt.beta1()}, {"beta2", opt.beta2()}}) {
    if (!(beta >= 0 && beta < 1)) v.add(f + name, number(beta) + "; must be in [0, 1)");
  }
  if (!(opt.epsilon() > 0) || !std::isfinite(opt.epsilon())) {
    v.add(f + "epsilon", number(opt.epsilon()) + "; must be a positive finite number");
  }
  if (!(opt.weight_decay() >= 0) || !std::isfinite(opt.weight_decay())) {
    v.add(f + "weight_decay", number(opt.weight_decay()) + "; must be a finite number >= 0");
  }
  if (!(opt.grad_clip() >= 0) || !std::isfinite(opt.grad_clip())) {
    v.add(f + "grad_clip",
          number(opt.grad_clip()) + "; must be a finite number >= 0 (0 disables clipping)");
  }
  require_non_negative(v, f + "warmup_steps", opt.warmup_steps());
  if (opt.total_steps() < 1 || opt.total_steps() > kMaxSteps) {
    v.add(f + "total_steps", number(opt.total_steps()) + "; must be in 1.." + number(kMaxSteps) +
                                 " (steps are counted in an int)");
  }
  if (opt.warmup_steps() > kMaxSteps) {
    v.add(f + "warmup_steps", number(opt.warmup_steps()) + "; must be at most " +
                                  number(kMaxSteps) + " (steps are counted in an int)");
  }
  if (std::string(lr_decay_style_name(opt.decay_style())) == "unknown") {
    v.add(f + "decay_style", "unknown value " +
                                 std::to_string(static_cast<int>(opt.decay_style())) +
                                 "; valid are cosine (0), linear (1), constant (2) and wsd (3)");
  }
  if (opt.decay_style() != schema::LrDecayStyle::WarmupStableDecay) return;
  const int64_t decay_span = int64_t{opt.total_steps()} - opt.warmup_steps();
  if (opt.wsd_decay_steps() < 1 || opt.wsd_decay_steps() > decay_span)
    v.add(f + "wsd_decay_steps", number(opt.wsd_decay_steps()) + "; must be in 1.." +
                                     number(std::max<int64_t>(decay_span, 1)) +
                                     " (the steps after warm-up)");
  if (std::string(wsd_decay_style_name(opt.wsd_decay_style())) == "unknown")
    v.add(f + "wsd_decay_style", "unknown value " +
                                     std::to_string(static_cast<int>(opt.wsd_decay_style())) +
                                     "; valid are linear (0), cosine (1) and minus_sqrt (2)");
}

void check_data(const schema::Data& data, const schema::Model* model, Violations& v) {
  const int32_t separator = data.document_separator();
  if (separator < -1 ||
      (model != nullptr && model->vocab_size() > 0 && separator >= model->vocab_size()))
    v.add("training.data.document_separator",
          number(separator) + "; must be -1 (no document masking) or a token id in [0, " +
              number(model != nullptr ? model->vocab_size() : 0) + "), the vocabulary");
  if (data.train() == nullptr) return;
  for (flatbuffers::uoffset_t i = 0; i < data.train()->size(); ++i) {
    const schema::DataSource* source = data.train()->Get(i);
    const std::string f = "training.data.train[" + std::to_string(i) + "].";
    if (source->paths() == nullptr || source->paths()->size() == 0)
      v.add(f + "paths", "empty; give a token file, a glob or a comma-separated list");
    if (!(source->weight() > 0) || !std::isfinite(source->weight()))
      v.add(f + "weight", number(source->weight()) + "; must be a positive finite number");
  }
}

void check_training(const schema::Training& training, const schema::Model* model, Violations& v) {
  require_positive(v, "training.global_batch_size", training.global_batch_size());
  require_positive(v, "training.micro_batch_size", training.micro_batch_size());
  require_positive(v, "training.num_micro_batches", training.num_micro_batches());
  if (training.num_micro_batches() > kMaxMicroBatches) {
    v.add("training.num_micro_batches",
          number(training.num_micro_batches()) + "; must be at most " + number(kMaxMicroBatches) +
              " per data-parallel replica and step (the largest plan paraplan writes or reads)");
  }
  if (model != nullptr) {
    for (const FieldProblem& problem :
         micro_batch_rows_problems(training.micro_batch_size(), model->seq_len(),
                                   "training.micro_batch_size", "model.seq_len"))
      v.add(problem.field, problem.problem);
  }
  require_non_negative(v, "training.eval_interval", training.eval_interval());
  if (training.eval_interval() > kMaxSteps) {
    v.add("training.eval_interval", number(training.eval_interval()) + "; must be at most " +
                                        number(kMaxSteps) + " steps (0 disables evaluation)");
  }
  // The runtime reads at least one batch per evaluation: a 0 here would be
  // read as 1 without a word, so it is refused as the job file refuses it.
  if (training.eval_batches() < 1) {
    v.add("training.eval_batches", number(training.eval_batches()) + "; must be in 1.." +
                                       number(kMaxEvalBatches) + " global batches per evaluation");
  } else if (training.eval_batches() > kMaxEvalBatches) {
    v.add("training.eval_batches",
          number(training.eval_batches()) + "; must be at most " + number(kMaxEvalBatches) +
              " global batches per evaluation (and evaluation reads at most one pass of the "
              "validation data)");
  }
  if (training.optimizer() == nullptr) {
    v.add("training.optimizer", "missing; the plan must give the AdamW hyper-parameters");
  } else {
    check_optimizer(*training.optimizer(), v);
  }
  if (training.data() != nullptr) check_data(*training.data(), model, v);
}

// Each rank of a context-parallel group holds two of the 2 cp equal chunks
// of every sequence (plan.fbs, Mesh.context_parallel).
void check_context_parallel(const schema::Mesh& mesh, const schema::Model& model, Violations& v) {
  const int32_t cp = mesh.context_parallel();
  if (cp <= 1 || model.seq_len() <= 0) return;
  if (model.seq_len() % (int64_t{2} * cp) != 0)
    v.add("mesh.context_parallel",
          number(cp) + ", but 2 x context_parallel = " + number(int64_t{2} * cp) +
              " does not divide model.seq_len " + number(model.seq_len()) +
              "; each context-parallel rank holds 2 of the 2 x context_parallel equal chunks of "
              "every sequence");
}

bool mesh_degrees_valid(const schema::Mesh& mesh) {
  return mesh.pipeline_parallel() >= 1 && mesh.data_parallel() >= 1 &&
         mesh.context_parallel() >= 1 && mesh.tensor_parallel() >= 1 && mesh.num_nodes() >= 1 &&
         mesh.devices_per_node() >= 1;
}

void check_mesh(const schema::Mesh& mesh, const schema::Model* model, Violations& v) {
  for (const auto& [name, degree] : {std::pair{"pipeline_parallel", mesh.pipeline_parallel()},
                                     {"data_parallel", mesh.data_parallel()},
                                     {"context_parallel", mesh.context_parallel()},
                                     {"tensor_parallel", mesh.tensor_parallel()},
                                     {"num_nodes", mesh.num_nodes()},
                                     {"devices_per_node", mesh.devices_per_node()}}) {
    if (degree < 1) v.add(std::string("mesh.") + name, number(degree) + "; must be at least 1");
  }
  if (mesh.pipeline_parallel() > kMaxPipelineStages) {
    v.add("mesh.pipeline_parallel", number(mesh.pipeline_parallel()) + "; must be at most " +
                                        number(kMaxPipelineStages) +
                                        ", the most pipeline stages paraplan plans");
  }
  // Megatron's sequence parallelism shards the tensor-parallel group's norm
  // and residual regions along the tokens: it needs a group to shard over.
  if (mesh.sequence_parallel() && mesh.tensor_parallel() == 1)
    v.add("mesh.sequence_parallel",
          "true with tensor_parallel 1; sequence parallelism shards over the tensor-parallel "
          "group, so it needs tensor_parallel > 1 (or set it false)");
  if (!mesh_degrees_valid(mesh)) return;
  const std::optional<int64_t> ranks =
      checked_product(mesh.pipeline_parallel(), mesh.data_parallel(), mesh.context_parallel(),
                      mesh.tensor_parallel());
  const int64_t devices = int64_t{mesh.num_nodes()} * mesh.devices_per_node();
  if (ranks != devices) {
    const std::string context = mesh.context_parallel() > 1
                                    ? " x context_parallel " + number(mesh.context_parallel())
                                    : std::string();
    v.add("mesh", "pipeline_parallel " + number(mesh.pipeline_parallel()) + " x data_parallel " +
                      number(mesh.data_parallel()) + context + " x tensor_parallel " +
                      number(mesh.tensor_parallel()) + " = " + product_text(ranks) +
                      " ranks, but num_nodes " + number(mesh.num_nodes()) + " x devices_per_node " +
                      number(mesh.devices_per_node()) + " = " + number(devices) +
                      " devices; the degrees must multiply to the device count");
  }
  const int32_t tp = mesh.tensor_parallel();
  if (tp > mesh.devices_per_node() || mesh.devices_per_node() % tp != 0) {
    v.add("mesh.tensor_parallel", number(tp) + " does not divide devices_per_node " +
                                      number(mesh.devices_per_node()) +
                                      "; a tensor-parallel group must sit inside one node");
  }
  if (model == nullptr) return;
  // Each rank holds whole KV heads (Llama; gpt2's are its heads).
  const int32_t kv_heads = model->num_kv_heads() > 0 ? model->num_kv_heads() : model->num_heads();
  if (kv_heads > 0 && kv_heads % tp != 0 && kv_heads != model->num_heads())
    v.add("mesh.tensor_parallel", number(tp) + " does not divide model.num_kv_heads " +
                                      number(kv_heads) +
                                      "; each tensor-parallel rank holds whole KV heads");
  check_context_parallel(mesh, *model, v);
  const int32_t cp = mesh.context_parallel();
  if (mesh.sequence_parallel() && tp > 1 && model->seq_len() > 0 &&
      (cp == 1 || model->seq_len() % (2 * cp) == 0) && (model->seq_len() / cp) % tp != 0)
    v.add("mesh.sequence_parallel",
          "true, but tensor_parallel " + number(tp) + " does not divide " +
              (cp > 1 ? "model.seq_len / context_parallel " + number(model->seq_len() / cp)
                      : "model.seq_len " + number(model->seq_len())) +
              "; each tensor-parallel rank holds seq_len / tensor_parallel tokens of every "
              "micro-batch (or set it false)");
  for (const auto& [name, size] : {std::pair{"num_heads", model->num_heads()},
                                   {"d_model", model->d_model()},
                                   {"ffn_size", model->ffn_size()},
                                   {"vocab_size", model->vocab_size()}}) {
    if (size > 0 && size % tp != 0) {
      std::string fix = "; tensor_parallel must divide num_heads, d_model, ffn_size and vocab_size";
      if (std::string(name) == "vocab_size") fix += " (pad the vocabulary to a multiple of it)";
      v.add("mesh.tensor_parallel",
            number(tp) + " does not divide model." + name + " " + number(size) + fix);
    }
  }
}

void check_global_batch(const schema::Training& training, const schema::Mesh& mesh, Violations& v) {
  if (training.micro_batch_size() <= 0 || training.num_micro_batches() <= 0 ||
      mesh.data_parallel() < 1) {
    return;  // already reported
  }
  const std::optional<int64_t> expected = checked_product(
      training.micro_batch_size(), training.num_micro_batches(), mesh.data_parallel());
  if (training.global_batch_size() != expected) {
    v.add("training.global_batch_size",
          number(training.global_batch_size()) + ", but micro_batch_size " +
              number(training.micro_batch_size()) + " x num_micro_batches " +
              number(training.num_micro_batches()) + " x mesh.data_parallel " +
              number(mesh.data_parallel()) + " = " + product_text(expected) +
              "; they must be equal");
  }
}

void check_stages(const schema::Plan& plan, Violations& v) {
  const auto* stages = plan.stages();
  if (stages == nullptr) {
    v.add("stages", "missing; the plan must list one stage per pipeline rank");
    return;
  }
  const int32_t count = static_cast<int32_t>(stages->size());
  const int32_t chunks = virtual_stages_of(plan);
  if (plan.mesh() != nullptr && plan.mesh()->pipeline_parallel() >= 1 &&
      count != int64_t{plan.mesh()->pipeline_parallel()} * chunks) {
    if (chunks == 1) {
      v.add("stages", count_of(count, "entry", "entries") + ", but mesh.pipeline_parallel is " +
                          number(plan.mesh()->pipeline_parallel()) +
                          "; there must be one stage per pipeline rank");
    } else {
      v.add("stages", count_of(count, "entry", "entries") + ", but mesh.pipeline_parallel " +
                          number(plan.mesh()->pipeline_parallel()) + " x schedule.virtual_stages " +
                          number(chunks) +
                          " virtual stages; there must be one per virtual stage, in model order");
    }
  }
  if (count == 0) {
    if (plan.mesh() == nullptr) v.add("stages", "empty; the plan must have at least one stage");
    return;
  }
  int64_t next_layer = 0;
  for (int32_t i = 0; i < count; ++i) {
    const schema::Stage& stage = *stages->Get(i);
    const std::string f = "stages[" + std::to_string(i) + "]";
    if (stage.index() != i) {
      v.add(f + ".index", number(stage.index()) + "; stages are listed in order, so it must be " +
                              std::to_string(i));
    }
    if (stage.first_layer() != next_layer) {
      const std::string before =
          i == 0 ? std::string("the first stage starts at layer 0")
                 : "the stages before it hold layers [0, " + number(next_layer) + ")";
      v.add(f + ".first_layer", number(stage.first_layer()) + ", but " + before +
                                    "; stages must hold consecutive layer ranges, so it must be " +
                                    number(next_layer));
    }
    require_non_negative(v, f + ".num_layers", stage.num_layers());
    if (stage.num_layers() == 0 && !stage.has_embedding() && !stage.has_head()) {
      v.add(f,
            "holds no layers and neither the embedding nor the head; every stage must hold "
            "at least one layer, the embedding or the head");
    }
    next_layer = int64_t{stage.first_layer()} + std::max(stage.num_layers(), 0);

    const auto* recompute = stage.recompute();
    const int64_t modes = recompute == nullptr ? 0 : recompute->size();
    if (stage.num_layers() >= 0 && modes != stage.num_layers()) {
      v.add(f + ".recompute", count_of(modes, "entry", "entries") + ", but the stage has " +
                                  number(stage.num_layers()) +
                                  " layers; it needs one recompute mode per layer");
    }
    for (int64_t k = 0; k < modes; ++k) {
      if (!is_known(recompute->Get(k))) {
        v.add(f + ".recompute[" + std::to_string(k) + "]",
              "unknown value " + std::to_string(static_cast<int>(recompute->Get(k))) +
                  "; valid are none (0), selective (1) and full (2)");
      }
    }
    const bool first = i == 0, last = i == count - 1;
    if (stage.has_embedding() != first) {
      v.add(f + ".has_embedding", first ? "false; the first stage must hold the embedding"
                                        : "true; only the first stage holds the embedding");
    }
    if (stage.has_head() != last) {
      v.add(f + ".has_head", last ? "false; the last stage must hold the head"
                                  : "true; only the last stage holds the head");
    }
  }
  if (plan.model() != nullptr && plan.model()->num_layers() > 0 &&
      next_layer != plan.model()->num_layers()) {
    v.add("stages", "cover layers [0, " + number(next_layer) + "), but model.num_layers is " +
                        number(plan.model()->num_layers()) +
                        "; the stages' layer ranges must cover every layer exactly once");
  }
}

void check_zero(const schema::Zero& zero, const schema::Mesh* mesh, const schema::Model* model,
                Violations& v) {
  if (zero.stage() < 0 || zero.stage() > kHighestZeroStage) {
    v.add("zero.stage", number(zero.stage()) + "; valid are " + zero_stages_text());
  }
  if (zero.layers_per_unit() < 1) {
    v.add("zero.layers_per_unit", number(zero.layers_per_unit()) + "; must be at least 1");
  } else if (zero.layers_per_unit() > 1 && !shards_gradients(zero.stage())) {
    v.add("zero.layers_per_unit",
          number(zero.layers_per_unit()) + " under zero.stage " + number(zero.stage()) +
              "; units of several layers are ZeRO-2 and 3's (1 below them)");
  } else if (model != nullptr && model->num_layers() >= 1 &&
             zero.layers_per_unit() > model->num_layers()) {
    v.add("zero.layers_per_unit", number(zero.layers_per_unit()) + " exceeds model.num_layers " +
                                      number(model->num_layers()) + "; at most that");
  }
  if (zero.num_groups() < 1) {
    v.add("zero.num_groups", number(zero.num_groups()) + "; must be at least 1");
  } else if (mesh != nullptr && mesh->data_parallel() >= 1 && mesh->context_parallel() >= 1 &&
             int64_t{mesh->data_parallel()} * mesh->context_parallel() % zero.num_groups() != 0) {
    const std::string ranks =
        mesh->context_parallel() > 1
            ? "mesh.data_parallel x context_parallel " +
                  number(int64_t{mesh->data_parallel()} * mesh->context_parallel())
            : "mesh.data_parallel " + number(mesh->data_parallel());
    v.add("zero.num_groups", number(zero.num_groups()) + " does not divide " + ranks +
                                 "; the data-parallel ranks are split into equal groups");
  }
}

void check_predictions(const schema::Predictions& predictions, const schema::Plan& plan,
                       Violations& v) {
  for (const auto& [name, value] : {std::pair{"step_seconds", predictions.step_seconds()},
                                    {"tokens_per_second", predictions.tokens_per_second()},
                                    {"mfu", predictions.mfu()}}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      v.add(std::string("predictions.") + name, number(value) + "; must be a finite number >= 0");
    }
  }
  if (!(predictions.bubble_ratio() >= 0 && predictions.bubble_ratio() <= 1)) {
    v.add("predictions.bubble_ratio", number(predictions.bubble_ratio()) + "; must be in [0, 1]");
  }
  const auto* stages = predictions.stages();
  const int64_t count = stages == nullptr ? 0 : stages->size();
  // One per pipeline rank (a rank's chunks together).
  const int64_t ranks =
      plan.stages() != nullptr ? plan.stages()->size() / virtual_stages_of(plan) : count;
  if (plan.stages() != nullptr && count != ranks) {
    v.add("predictions.stages", count_of(count, "entry", "entries") + ", but the plan has " +
                                    count_of(ranks, "pipeline stage", "pipeline stages") +
                                    "; it needs one per stage");
  }
  for (int64_t i = 0; i < count; ++i) {
    const schema::StagePrediction& stage = *stages->Get(i);
    const std::string f = "predictions.stages[" + std::to_string(i) + "]";
    if (stage.stage() != i) {
      v.add(f + ".stage", number(stage.stage()) +
                              "; entries are listed in stage order, so it must be " +
                              std::to_string(i));
    }
    for (const auto& [name, value] :
         {std::pair{"forward_seconds", stage.forward_seconds()},
          {"backward_seconds", stage.backward_seconds()},
          {"communication_seconds", stage.communication_seconds()},
          {"tensor_parallel_seconds", stage.tensor_parallel_seconds()},
          {"pipeline_p2p_seconds", stage.pipeline_p2p_seconds()},
          {"gradient_reduction_seconds", stage.gradient_reduction_seconds()},
          {"optimizer_seconds", stage.optimizer_seconds()},
          {"bubble_seconds", stage.bubble_seconds()}}) {
      if (!(value >= 0) || !std::isfinite(value)) {
        v.add(f + "." + name, number(value) + "; must be a finite number >= 0");
      }
    }
    // The runtime's memory report and autotune read it for every stage.
    if (stage.memory() == nullptr) {
      v.add(f + ".memory",
            "missing; every stage's prediction needs its memory breakdown (weights, gradients, "
            "optimizer_state, activations, transient, total)");
    } else if (stage.memory()->transient_reserve() > stage.memory()->transient()) {
      // Replay measures against the plan's memory less the reserve.
      v.add(f + ".memory.transient_reserve",
            number(stage.memory()->transient_reserve()) + "; must be at most transient (" +
                number(stage.memory()->transient()) + "), of which it is a part");
    }
  }
}

void check_utf8(const flatbuffers::String* text, const std::string& field, Violations& v) {
  if (text == nullptr) return;
  const std::string problem = utf8_problem(text->string_view());
  if (!problem.empty()) v.add(field, problem + "; plan strings must be UTF-8 text");
}

// Every string of the plan is printed as JSON by `paraplan inspect --json`.
void check_strings(const schema::Plan& plan, Violations& v) {
  if (const schema::Header* header = plan.header()) {
    check_utf8(header->task_name(), "header.task_name", v);
    check_utf8(header->planner_version(), "header.planner_version", v);
    if (const auto* options = header->creation_options()) {
      for (flatbuffers::uoffset_t i = 0; i < options->size(); ++i) {
        const std::string f = "header.creation_options[" + std::to_string(i) + "]";
        check_utf8(options->Get(i)->key(), f + ".key", v);
        check_utf8(options->Get(i)->value(), f + ".value", v);
      }
    }
  }
  const schema::Data* data = plan.training() ? plan.training()->data() : nullptr;
  if (data != nullptr) {
    if (data->train() != nullptr)
      for (flatbuffers::uoffset_t i = 0; i < data->train()->size(); ++i)
        check_utf8(data->train()->Get(i)->paths(),
                   "training.data.train[" + std::to_string(i) + "].paths", v);
    check_utf8(data->validation(), "training.data.validation", v);
  }
  if (const schema::Predictions* predictions = plan.predictions()) {
    check_utf8(predictions->time_model(), "predictions.time_model", v);
    if (predictions->cluster() != nullptr)
      check_utf8(predictions->cluster()->name(), "predictions.cluster.name", v);
  }
}

}  // namespace
}  // namespace plan_validation

std::vector<std::string> validate_plan(const schema::Plan& plan) {
  using namespace plan_validation;
  Violations v;
  check_header(plan, v);
  if (plan.model() == nullptr) {
    v.add("model", "missing; the plan must describe the model");
  } else {
    check_model(*plan.model(), v);
  }
  if (plan.training() == nullptr) {
    v.add("training", "missing; the plan must give the batch sizes and optimizer");
  } else {
    check_training(*plan.training(), plan.model(), v);
  }
  if (plan.mesh() == nullptr) {
    v.add("mesh", "missing; the plan must give the pipeline x data x tensor parallel mesh");
  } else {
    check_mesh(*plan.mesh(), plan.model(), v);
    if (plan.training() != nullptr) check_global_batch(*plan.training(), *plan.mesh(), v);
  }
  check_stages(plan, v);
  if (plan.zero() == nullptr) {
    v.add("zero", "missing; the plan must give the ZeRO stage (0 for off) and num_groups");
  } else {
    check_zero(*plan.zero(), plan.mesh(), plan.model(), v);
  }
  check_schedule(plan, v);
  if (plan.predictions() != nullptr) check_predictions(*plan.predictions(), plan, v);
  check_strings(plan, v);
  return v.take();
}

}  // namespace paraplan
