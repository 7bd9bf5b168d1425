// plan_json.cc: plan_to_json (every field of a plan as JSON, enums by name) and
// plan_to_table (the readable summary `paraplan inspect` prints).
//
// Both tolerate absent tables (printed as null / "missing") so that a plan that
// fails validation can still be shown while it is being debugged.
#include <algorithm>
#include <charconv>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "common/printable_text.h"
#include "schema/number_text.h"
#include "schema/pipeline_layout.h"
#include "schema/plan_io.h"
#include "schema/zero_units.h"

namespace paraplan {
namespace {

using nlohmann::json;
using schema_text::number;

// A float as the double its shortest text denotes, so 0.9f appears as 0.9 in
// JSON rather than 0.8999999761581421.
double float_for_json(float value) {
  char text[64];
  const auto result = std::to_chars(text, text + sizeof(text) - 1, value);
  *result.ptr = '\0';
  return std::strtod(text, nullptr);
}

std::string string_or_empty(const flatbuffers::String* text) {
  return text == nullptr ? std::string() : text->str();
}

json header_to_json(const schema::Header& header) {
  json options = json::object();
  if (header.creation_options() != nullptr) {
    for (const schema::KeyValue* option : *header.creation_options()) {
      options[string_or_empty(option->key())] = string_or_empty(option->value());
    }
  }
  return {{"schema_version", header.schema_version()},
          {"task_name", string_or_empty(header.task_name())},
          {"planner_version", string_or_empty(header.planner_version())},
          {"creation_options", options}};
}

json model_to_json(const schema::Model& model) {
  json result = {{"architecture", architecture_name(model.architecture())},
                 {"vocab_size", model.vocab_size()},
                 {"seq_len", model.seq_len()},
                 {"num_layers", model.num_layers()},
                 {"d_model", model.d_model()},
                 {"num_heads", model.num_heads()},
                 {"ffn_size", model.ffn_size()},
                 {"tied_embeddings", model.tied_embeddings()},
                 {"dtype", dtype_name(model.dtype())},
                 {"layernorm_epsilon", float_for_json(model.layernorm_epsilon())},
                 {"init_std", float_for_json(model.init_std())}};
  if (model.architecture() == schema::Architecture::Llama) {
    result["num_kv_heads"] = model.num_kv_heads();
    result["rope_theta"] = float_for_json(model.rope_theta());
    result["rope_scaling_factor"] = float_for_json(model.rope_scaling_factor());
    result["rope_low_freq_factor"] = float_for_json(model.rope_low_freq_factor());
    result["rope_high_freq_factor"] = float_for_json(model.rope_high_freq_factor());
    result["rope_original_max_positions"] = model.rope_original_max_positions();
    result["qkv_bias"] = model.qkv_bias();
  }
  return result;
}

json optimizer_to_json(const schema::Optimizer& opt) {
  return {{"learning_rate", float_for_json(opt.learning_rate())},
          {"min_learning_rate", float_for_json(opt.min_learning_rate())},
          {"beta1", float_for_json(opt.beta1())},
          {"beta2", float_for_json(opt.beta2())},
          {"epsilon", float_for_json(opt.epsilon())},
          {"weight_decay", float_for_json(opt.weight_decay())},
          {"grad_clip", float_for_json(opt.grad_clip())},
          {"warmup_steps", opt.warmup_steps()},
          {"decay_style", lr_decay_style_name(opt.decay_style())},
          {"total_steps", opt.total_steps()},
          {"wsd_decay_steps", opt.wsd_decay_steps()},
          {"wsd_decay_style", wsd_decay_style_name(opt.wsd_decay_style())}};
}

json data_to_json(const schema::Data& data) {
  json train = json::array();
  if (data.train())
    for (const schema::DataSource* source : *data.train())
      train.push_back(
          {{"paths", source->paths() ? source->paths()->str() : ""}, {"weight", source->weight()}});
  return {{"train", train},
          {"validation", data.validation() ? data.validation()->str() : ""},
          {"shuffle", data.shuffle()},
          {"seed", data.seed()},
          {"document_separator", data.document_separator()}};
}

json training_to_json(const schema::Training& training) {
  return {{"data", training.data() ? data_to_json(*training.data()) : json(nullptr)},
          {"global_batch_size", training.global_batch_size()},
          {"micro_batch_size", training.micro_batch_size()},
          {"num_micro_batches", training.num_micro_batches()},
          {"optimizer", training.optimizer() == nullptr ? json(nullptr)
                                                        : optimizer_to_json(*training.optimizer())},
          {"seed", training.seed()},
          {"eval_interval", training.eval_interval()},
          {"eval_batches", training.eval_batches()},
          {"gradient_bucket_elements", training.gradient_bucket_elements()}};
}

json mesh_to_json(const schema::Mesh& mesh) {
  return {{"pipeline_parallel", mesh.pipeline_parallel()},
          {"data_parallel", mesh.data_parallel()},
          {"context_parallel", mesh.context_parallel()},
          {"tensor_parallel", mesh.tensor_parallel()},
          {"num_nodes", mesh.num_nodes()},
          {"devices_per_node", mesh.devices_per_node()},
          {"sequence_parallel", mesh.sequence_parallel()}};
}

json stage_to_json(const schema::Stage& stage) {
  json recompute = json::array();
  if (stage.recompute() != nullptr) {
    for (schema::RecomputeMode mode : *stage.recompute()) {
      recompute.push_back(recompute_mode_name(mode));
    }
  }
  return {{"index", stage.index()},           {"first_layer", stage.first_layer()},
          {"num_layers", stage.num_layers()}, {"has_embedding", stage.has_embedding()},
          {"has_head", stage.has_head()},     {"recompute", recompute}};
}

json schedule_to_json(const schema::Schedule& schedule) {
  json stages = json::array();
  if (schedule.stages() != nullptr) {
    for (const schema::StageSchedule* stage : *schedule.stages()) {
      json instructions = json::array();
      if (stage->instructions() != nullptr) {
        for (const schema::Instruction* ins : *stage->instructions()) {
          // The chunk (virtual stage) too: without it an interleaved
          // plan's streams cannot be rebuilt from the JSON.
          json entry = {{"op", opcode_name(ins->op())},
                        {"chunk", ins->chunk()},
                        {"micro_batch", ins->micro_batch()},
                        {"peer_micro_batch", ins->peer_micro_batch()}};
          if (is_zero_unit_op(ins->op())) entry["unit"] = ins->unit();
          instructions.push_back(std::move(entry));
        }
      }
      stages.push_back({{"stage", stage->stage()},
                        {"keep_parameters_gathered", stage->keep_parameters_gathered()},
                        {"instructions", instructions}});
    }
  }
  return {
      {"kind", schedule_kind_name(schedule.kind())},
      {"virtual_stages", schedule.virtual_stages()},
      {"transfers", schedule.transfers() == schema::Transfers::Posted ? "posted" : "rendezvous"},
      {"stages", stages}};
}

json memory_to_json(const schema::StageMemory& memory) {
  return {{"weights", memory.weights()},
          {"gradients", memory.gradients()},
          {"optimizer_state", memory.optimizer_state()},
          {"gathered", memory.gathered()},
          {"activations", memory.activations()},
          {"transient", memory.transient()},
          {"communicator_buffers", memory.communicator_buffers()},
          {"transient_reserve", memory.transient_reserve()},
          {"total", memory.total()}};
}

json cluster_to_json(const schema::Cluster& cluster) {
  return {{"name", string_or_empty(cluster.name())},
          {"num_nodes", cluster.num_nodes()},
          {"devices_per_node", cluster.devices_per_node()},
          {"device_memory_bytes", cluster.device_memory_bytes()},
          {"reserved_memory_bytes", cluster.reserved_memory_bytes()},
          {"peak_flops", cluster.peak_flops()},
          {"intra_node_bandwidth", cluster.intra_node_bandwidth()},
          {"intra_node_latency", cluster.intra_node_latency()},
          {"inter_node_bandwidth", cluster.inter_node_bandwidth()},
          {"inter_node_latency", cluster.inter_node_latency()},
          {"memory_bandwidth", cluster.memory_bandwidth()},
          {"compute_units", cluster.compute_units()}};
}

json predictions_to_json(const schema::Predictions& predictions) {
  json stages = json::array();
  if (predictions.stages() != nullptr) {
    for (const schema::StagePrediction* stage : *predictions.stages()) {
      stages.push_back({{"stage", stage->stage()},
                        {"forward_seconds", stage->forward_seconds()},
                        {"backward_seconds", stage->backward_seconds()},
                        {"communication_seconds", stage->communication_seconds()},
                        {"tensor_parallel_seconds", stage->tensor_parallel_seconds()},
                        {"pipeline_p2p_seconds", stage->pipeline_p2p_seconds()},
                        {"gradient_reduction_seconds", stage->gradient_reduction_seconds()},
                        {"optimizer_seconds", stage->optimizer_seconds()},
                        {"bubble_seconds", stage->bubble_seconds()},
                        {"memory", stage->memory() == nullptr ? json(nullptr)
                                                              : memory_to_json(*stage->memory())}});
    }
  }
  return {{"step_seconds", predictions.step_seconds()},
          {"bubble_ratio", predictions.bubble_ratio()},
          {"tokens_per_second", predictions.tokens_per_second()},
          {"mfu", predictions.mfu()},
          {"stages", stages},
          {"time_model", predictions.time_model() ? predictions.time_model()->str() : ""},
          {"cluster", predictions.cluster() == nullptr ? json(nullptr)
                                                       : cluster_to_json(*predictions.cluster())}};
}

template <typename Table>
json or_null(const Table* table, json (*convert)(const Table&)) {
  return table == nullptr ? json(nullptr) : convert(*table);
}

// ---- plan_to_table --------------------------------------------------------------

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

// GB of 2^30 bytes (MB of 2^20), the unit of the planner's report and of
// memory_constraint (AutoDist's), so the two tables of `paraplan plan` agree.
std::string format_bytes(uint64_t bytes) {
  const double value = static_cast<double>(bytes);
  constexpr double kMegabyte = 1024.0 * 1024.0, kGigabyte = 1024.0 * kMegabyte;
  if (value >= kGigabyte) return printf_string("%.2f GB", value / kGigabyte);
  return printf_string("%.1f MB", value / kMegabyte);
}

std::string format_ms(double seconds) {
  return printf_string("%.2f", seconds * 1e3);
}

std::string format_percent(double ratio) {
  return printf_string("%.1f%%", ratio * 100);
}

// "none x4" or "full x2, none x2": runs of equal modes in layer order.
std::string recompute_summary(const schema::Stage& stage) {
  const auto* modes = stage.recompute();
  if (modes == nullptr || modes->size() == 0) return "-";
  std::string text;
  for (size_t i = 0; i < modes->size();) {
    size_t j = i;
    while (j < modes->size() && modes->Get(j) == modes->Get(i)) ++j;
    if (!text.empty()) text += ", ";
    text += std::string(recompute_mode_name(modes->Get(i))) + " x" + std::to_string(j - i);
    i = j;
  }
  return text;
}

std::string layer_range(const schema::Stage& stage) {
  if (stage.num_layers() <= 0) return "-";
  // Wide: an invalid plan (printed while it is debugged) may hold any int32.
  const int64_t last = int64_t{stage.first_layer()} + stage.num_layers() - 1;
  if (last == stage.first_layer()) return std::to_string(last);
  return std::to_string(stage.first_layer()) + "-" + std::to_string(last);
}

std::string holds(const schema::Stage& stage) {
  if (stage.has_embedding() && stage.has_head()) return "embedding+head";
  if (stage.has_embedding()) return "embedding";
  if (stage.has_head()) return "head";
  return "-";
}

// Columns padded to their widest cell; numeric columns right-aligned.
class TextTable {
 public:
  TextTable(std::vector<std::string> header, std::vector<bool> right_aligned)
      : right_aligned_(std::move(right_aligned)) {
    rows_.push_back(std::move(header));
  }
  void add_row(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  std::string render() const {
    std::vector<size_t> widths(rows_[0].size(), 0);
    for (const auto& row : rows_) {
      for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    }
    std::string text;
    for (size_t r = 0; r < rows_.size(); ++r) {
      std::string line;
      for (size_t c = 0; c < rows_[r].size(); ++c) {
        const std::string& cell = rows_[r][c];
        const std::string pad(widths[c] - cell.size(), ' ');
        if (c > 0) line += " | ";
        line += right_aligned_[c] ? pad + cell : cell + pad;
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      text += line + "\n";
      if (r == 0) {
        std::string rule;
        for (size_t c = 0; c < widths.size(); ++c) {
          if (c > 0) rule += "-+-";
          rule += std::string(widths[c], '-');
        }
        text += rule + "\n";
      }
    }
    return text;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<bool> right_aligned_;
};

void header_lines(const schema::Plan& plan, std::ostringstream& out) {
  const schema::Header* header = plan.header();
  if (header == nullptr) {
    out << "plan: header missing\n";
    return;
  }
  out << "plan '" << string_or_empty(header->task_name()) << "' (schema v"
      << header->schema_version() << ", planner "
      << (header->planner_version() ? header->planner_version()->str() : "?") << ")\n";
  // The model, training and mesh lines below say what the options decided;
  // the options themselves are many, so the table only counts them.
  if (header->creation_options() != nullptr && header->creation_options()->size() > 0)
    out << "options: " << header->creation_options()->size()
        << " recorded (paraplan inspect --json lists them)\n";
}

void model_line(const schema::Model* model, std::ostringstream& out) {
  if (model == nullptr) {
    out << "model: missing\n";
    return;
  }
  out << "model: " << architecture_name(model->architecture()) << ", vocab " << model->vocab_size()
      << ", seq " << model->seq_len() << ", " << model->num_layers() << " layers, d_model "
      << model->d_model() << ", " << model->num_heads() << " heads";
  if (model->architecture() == schema::Architecture::Llama)
    out << " (" << (model->num_kv_heads() > 0 ? model->num_kv_heads() : model->num_heads())
        << " KV heads" << (model->qkv_bias() ? ", q/k/v biases" : "") << ")";
  out << ", ffn " << model->ffn_size() << ", " << (model->tied_embeddings() ? "tied" : "untied")
      << " embeddings, " << dtype_name(model->dtype()) << "\n";
}

void training_lines(const schema::Plan& plan, std::ostringstream& out) {
  const schema::Training* training = plan.training();
  if (training == nullptr) {
    out << "training: missing\n";
    return;
  }
  out << "training: global batch " << training->global_batch_size() << " = micro-batch "
      << training->micro_batch_size() << " x " << training->num_micro_batches()
      << " micro-batches x dp " << (plan.mesh() ? plan.mesh()->data_parallel() : 0) << "; seed "
      << training->seed() << "; eval every " << training->eval_interval() << " steps ("
      << training->eval_batches() << " batches)\n";
  const schema::Data* data = training->data();
  if (data == nullptr) {
    out << "data: --data's files in file order (no [data] in the plan)\n";
  } else {
    out << "data: train ";
    if (data->train() == nullptr || data->train()->size() == 0) out << "from --data";
    for (flatbuffers::uoffset_t i = 0; data->train() && i < data->train()->size(); ++i)
      out << (i ? ", " : "") << "'"
          << printable_text(string_or_empty(data->train()->Get(i)->paths()), 200) << "'"
          << (data->train()->size() > 1 ? " x " + number(data->train()->Get(i)->weight()) : "");
    out << "; validation "
        << (data->validation() && data->validation()->size()
                ? "'" + printable_text(string_or_empty(data->validation()), 200) + "'"
                : std::string("from --val-data"))
        << "; "
        << (data->shuffle() ? "shuffled (seed " + std::to_string(data->seed()) + ")"
                            : std::string("file order"))
        << (data->document_separator() >= 0 ? "; documents masked, each ended by token " +
                                                  std::to_string(data->document_separator())
                                            : std::string())
        << "\n";
  }
  const schema::Optimizer* opt = training->optimizer();
  if (opt == nullptr) {
    out << "optimizer: missing\n";
    return;
  }
  out << "optimizer: AdamW lr " << number(opt->learning_rate()) << " -> "
      << number(opt->min_learning_rate()) << " (" << lr_decay_style_name(opt->decay_style());
  if (opt->decay_style() == schema::LrDecayStyle::WarmupStableDecay)
    out << ": " << wsd_decay_style_name(opt->wsd_decay_style()) << " decay over the last "
        << opt->wsd_decay_steps() << " steps";
  out << ", warmup " << opt->warmup_steps() << ", " << opt->total_steps() << " steps), betas "
      << number(opt->beta1()) << "/" << number(opt->beta2()) << ", eps " << number(opt->epsilon())
      << ", weight decay " << number(opt->weight_decay()) << ", grad clip "
      << number(opt->grad_clip()) << "\n";
}

void mesh_and_zero_lines(const schema::Plan& plan, std::ostringstream& out) {
  const schema::Mesh* mesh = plan.mesh();
  if (mesh == nullptr) {
    out << "mesh: missing\n";
  } else {
    out << "mesh: pp " << mesh->pipeline_parallel() << " x dp " << mesh->data_parallel()
        << (mesh->context_parallel() != 1 ? " x cp " + std::to_string(mesh->context_parallel())
                                          : "")
        << " x tp " << mesh->tensor_parallel() << " = "
        << schema_text::product_text(
               schema_text::checked_product(mesh->pipeline_parallel(), mesh->data_parallel(),
                                            mesh->context_parallel(), mesh->tensor_parallel()))
        << " ranks on " << mesh->num_nodes() << " nodes x " << mesh->devices_per_node()
        << " devices" << (mesh->sequence_parallel() ? ", sequence parallel" : "") << "\n";
  }
  const schema::Zero* zero = plan.zero();
  if (zero == nullptr) {
    out << "zero: missing\n";
  } else if (zero->stage() == 0) {
    out << "zero: off (stage 0)\n";
  } else {
    out << "zero: stage " << zero->stage() << ", " << zero->num_groups()
        << (zero->num_groups() == 1 ? " group" : " groups");
    if (mesh != nullptr && zero->num_groups() > 0) {
      out << " (optimizer state sharded over "
          << int64_t{mesh->data_parallel()} * mesh->context_parallel() / zero->num_groups()
          << (mesh->context_parallel() > 1 ? " data x context-parallel ranks)"
                                           : " data-parallel ranks)");
    }
    if (zero->layers_per_unit() > 1)
      out << ", " << zero->layers_per_unit() << " layers per gathered unit";
    out << "\n";
  }
}

void stage_table(const schema::Plan& plan, std::ostringstream& out) {
  if (plan.stages() == nullptr) {
    out << "stages: missing\n";
    return;
  }
  const auto* predicted = plan.predictions() ? plan.predictions()->stages() : nullptr;
  TextTable table(
      {"stage", "layers", "holds", "recompute", "fwd ms", "bwd ms", "comm ms", "wait ms", "weights",
       "grads", "optimizer", "gathered", "activations", "transient", "nccl", "total"},
      {true, false, false, false, true, true, true, true, true, true, true, true, true, true, true,
       true});
  for (size_t i = 0; i < plan.stages()->size(); ++i) {
    const schema::Stage& stage = *plan.stages()->Get(i);
    std::vector<std::string> row = {std::to_string(stage.index()), layer_range(stage), holds(stage),
                                    recompute_summary(stage)};
    const schema::StagePrediction* p =
        predicted != nullptr && i < predicted->size() ? predicted->Get(i) : nullptr;
    row.push_back(p ? format_ms(p->forward_seconds()) : "-");
    row.push_back(p ? format_ms(p->backward_seconds()) : "-");
    row.push_back(p ? format_ms(p->communication_seconds()) : "-");
    row.push_back(p ? format_ms(p->bubble_seconds()) : "-");
    const schema::StageMemory* m = p ? p->memory() : nullptr;
    for (uint64_t bytes :
         {m ? m->weights() : 0, m ? m->gradients() : 0, m ? m->optimizer_state() : 0,
          m ? m->gathered() : 0, m ? m->activations() : 0, m ? m->transient() : 0,
          m ? m->communicator_buffers() : 0, m ? m->total() : 0}) {
      row.push_back(m ? format_bytes(bytes) : "-");
    }
    table.add_row(std::move(row));
  }
  out << table.render();
}

void predictions_lines(const schema::Plan& plan, std::ostringstream& out) {
  const schema::Predictions* predictions = plan.predictions();
  if (predictions == nullptr) {
    out << "predictions: none\n";
    return;
  }
  out << "predictions: step " << printf_string("%.3f", predictions->step_seconds()) << " s, "
      << printf_string("%.0f", predictions->tokens_per_second()) << " tokens/s, MFU "
      << format_percent(predictions->mfu()) << ", bubble ratio "
      << format_percent(predictions->bubble_ratio()) << "\n";
  if (const schema::Cluster* cluster = predictions->cluster()) {
    out << "cluster: '" << string_or_empty(cluster->name()) << "', " << cluster->num_nodes()
        << " nodes x " << cluster->devices_per_node() << " devices, "
        << format_bytes(cluster->device_memory_bytes()) << " each"
        << (cluster->reserved_memory_bytes() > 0
                ? " (" + format_bytes(cluster->reserved_memory_bytes()) + " reserved)"
                : std::string())
        << ", " << printf_string("%.1f", cluster->peak_flops() / 1e12)
        << " TFLOP/s peak, intra-node "
        << printf_string("%.1f", cluster->intra_node_bandwidth() / 1e9) << " GB/s, inter-node "
        << printf_string("%.1f", cluster->inter_node_bandwidth() / 1e9) << " GB/s\n";
  }
}

// ZeRO-2 and 3: how many unit ops each stage's stream holds (zero_units.h),
// and whether it keeps its parameters gathered.
void zero_unit_ops_line(const schema::Schedule& schedule, std::ostringstream& out) {
  if (schedule.stages() == nullptr) return;
  std::string line;
  for (const schema::StageSchedule* stage : *schedule.stages()) {
    if (stage->instructions() == nullptr) continue;
    int gathers = 0, releases = 0, scatters = 0;
    for (const schema::Instruction* ins : *stage->instructions()) {
      gathers += ins->op() == schema::OpCode::GatherParameters;
      releases += ins->op() == schema::OpCode::ReleaseParameters;
      scatters += ins->op() == schema::OpCode::ReduceScatterGradients;
    }
    if (gathers + releases + scatters == 0) continue;
    line += (line.empty() ? " stage " : ", stage ") + std::to_string(stage->stage()) + ": " +
            (gathers > 0
                 ? std::to_string(gathers) + " gathers, " + std::to_string(releases) + " releases" +
                       (stage->keep_parameters_gathered() ? " (kept for the step), "
                                                          : " (one unit ahead), ")
                 : std::string()) +
            std::to_string(scatters) + " reduce-scatters";
  }
  if (!line.empty()) out << "ZeRO unit ops per step:" << line << "\n";
}

void schedule_line(const schema::Plan& plan, std::ostringstream& out) {
  const schema::Schedule* schedule = plan.schedule();
  if (schedule == nullptr) {
    out << "schedule: missing\n";
    return;
  }
  out << "schedule: " << schedule_kind_name(schedule->kind());
  if (schedule->virtual_stages() > 1)
    out << ", " << schedule->virtual_stages()
        << " model chunks per pipeline rank (stage s above is "
        << (v_shaped(schedule->kind())
                ? "chunk 0 of rank s for s < p, else chunk 1 of rank 2p - 1 - s"
                : "chunk s / p of rank s % p")
        << "; the times and memory of a rank, all its chunks together, are on its chunk 0 row)";
  out << "; instructions per stage:";
  const char* separator = " ";
  if (schedule->stages() != nullptr) {
    for (const schema::StageSchedule* stage : *schedule->stages()) {
      out << separator << "stage " << stage->stage() << ": "
          << (stage->instructions() ? stage->instructions()->size() : 0);
      separator = ", ";
    }
  }
  out << "\n";
  zero_unit_ops_line(*schedule, out);
}

}  // namespace

json plan_to_json(const schema::Plan& plan) {
  json stages = nullptr;
  if (plan.stages() != nullptr) {
    stages = json::array();
    for (const schema::Stage* stage : *plan.stages()) stages.push_back(stage_to_json(*stage));
  }
  return {
      {"header", or_null(plan.header(), &header_to_json)},
      {"model", or_null(plan.model(), &model_to_json)},
      {"training", or_null(plan.training(), &training_to_json)},
      {"mesh", or_null(plan.mesh(), &mesh_to_json)},
      {"stages", stages},
      {"zero", plan.zero() == nullptr ? json(nullptr)
                                      : json{{"stage", plan.zero()->stage()},
                                             {"num_groups", plan.zero()->num_groups()},
                                             {"layers_per_unit", plan.zero()->layers_per_unit()}}},
      {"schedule", or_null(plan.schedule(), &schedule_to_json)},
      {"predictions", or_null(plan.predictions(), &predictions_to_json)}};
}

std::string plan_to_table(const schema::Plan& plan) {
  std::ostringstream out;
  header_lines(plan, out);
  model_line(plan.model(), out);
  training_lines(plan, out);
  mesh_and_zero_lines(plan, out);
  out << "\n";
  stage_table(plan, out);
  out << "\n";
  predictions_lines(plan, out);
  schedule_line(plan, out);
  return out.str();
}

}  // namespace paraplan
