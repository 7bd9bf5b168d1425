// stage_cost.cc: per-stage memory and time for one plan setting, and the plan's
// step time (model in stage_cost.h).
#include "planner/cost/stage_cost.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "planner/cost/communicator_memory.h"
#include "planner/cost/compute_model.h"
#include "planner/cost/context_parallel_cost.h"
#include "planner/cost/plan_estimate.h"
#include "planner/cost/profile.h"
#include "planner/cost/stage_collectives.h"
#include "planner/cost/transformer_ops.h"
#include "planner/schedule/pipeline_simulation.h"
#include "schema/plan_io.h"

namespace paraplan {

using schema::RecomputeMode;

namespace {

constexpr double kBytesPerGigabyte = 1024.0 * 1024.0 * 1024.0;

using stage_collectives::collective_seconds;
using stage_collectives::measured_collective;

void scale_times(ProfiledTimes& times, double factor) {
  for (double* seconds : {&times.block_forward, &times.block_backward,
                          &times.attention_core_forward, &times.embedding_forward,
                          &times.embedding_backward, &times.head_forward, &times.head_backward})
    *seconds *= factor;
}

}  // namespace

StageCostModel::StageCostModel(const JobConfig& config, const PlanSetting& setting,
                               const MeasuredProfile* profile, BubbleEstimate bubble)
    : config_(&config), setting_(setting), options_(config.planner) {
  options_.zero_stage = setting.zero_stage;
  options_.zero_ngroups = setting.zero_ngroups;
  options_.zero_layers_per_unit = setting.zero_layers_per_unit;
  options_.pipeline_scheduler = setting.schedule.kind;
  options_.pipeline_virtual_stages = std::max(setting.schedule.virtual_stages, 1);
  if (options_.consider_mem) memory_limit_ = plan_memory_limit_gb(config) * kBytesPerGigabyte;
  element_bytes_ = element_bytes(config.model.dtype);
  zero_shards_ =
      zero_group_size(setting.zero_stage, setting.shape.gradient_replicas(), setting.zero_ngroups);
  const DeviceModel device = device_model(config.cluster, config.model.dtype);
  // Times in the units of the step: with the node's ranks sharing its cores,
  // what a dedicated core's second takes with every rank busy.
  const double busy = busy_wall_factor(config, setting);
  const TensorGroupPace* pace = set_compute_times(profile, busy, device);
  set_tensor_parallel(profile, busy, pace);
  set_context_parallel(profile, busy, device);
  if (!options_.is_train) {
    for (double& seconds : block_backward_) seconds = 0;
    head_backward_ = embedding_backward_ = 0;
  }
  set_pipeline(profile, busy, bubble);
  set_data_parallel(profile, busy, device);
}

const std::vector<StageMemoryTerms>& StageCostModel::memory_terms() const {
  std::call_once(memory_terms_once_, [this] { set_in_flight(); });
  return memory_terms_;
}

const std::vector<StageMemoryTerms>& StageCostModel::shape_terms() const {
  std::call_once(shape_terms_once_, [this] { set_shape_terms(); });
  return memory_terms_;
}

// Memory terms: the first, a middle and the last stage's shapes (one when p
// is 1), a copy per rank; their micro-batches in flight come next
// (set_in_flight), worked out for a setting's shape the first time it is
// seen: a stage's model state needs none (model_state_bytes).
void StageCostModel::set_shape_terms() const {
  const ModelConfig& model = config_->model;
  const ParallelShape& shape = setting_.shape;
  const int b = setting_.micro_batch_size, p = shape.pipeline_stages;
  // (set_in_flight counts the micro-batches in flight.)
  const auto terms_of = [&](bool first, bool last) {
    return stage_shape_memory_terms(model, options_, first, last, shape, b,
                                    config_->data.document_mask);
  };
  // (The V kinds: the first holds the head too, the last is a middle one.)
  const bool v_shape = v_shaped(setting_.schedule.kind);
  const StageMemoryTerms first_terms = terms_of(true, p == 1 || v_shape);
  const StageMemoryTerms middle_terms =
      p > 2 || (v_shape && p > 1) ? terms_of(false, false) : first_terms;
  const StageMemoryTerms last_terms = p > 1 && !v_shape ? terms_of(false, true) : middle_terms;
  for (int r = 0; r < p; ++r)
    memory_terms_.push_back(r == 0 ? first_terms : r == p - 1 ? last_terms : middle_terms);
  // cuDNN's attention workspace: the same on every stage that holds blocks
  // (a stage of only the ends runs no attention, but none is planned so).
  const int64_t attention_workspace = cudnn_attention_workspace_bytes(
      model, config_->cluster.preset, b, shape.tensor_parallel, shape.context_parallel,
      config_->data.document_mask, options_.is_train);
  const int64_t gemm_workspace = gemm_workspace_bytes(config_->cluster.preset);
  const auto kernel_scratch = [&](bool has_embedding) {
    return cuda_kernel_scratch_bytes(model, config_->cluster.preset, config_->cluster.compute_units,
                                     b, shape.tensor_parallel, shape.context_parallel,
                                     shape.sequence_parallel, config_->data.document_mask,
                                     has_embedding, options_.is_train);
  };
  // Pipeline rank 0 holds the embedding under every schedule kind.
  const int64_t first_scratch = kernel_scratch(true), other_scratch = kernel_scratch(false);
  for (int r = 0; r < p; ++r) {
    StageMemoryTerms& terms = memory_terms_[r];
    terms.attention_workspace = attention_workspace;
    terms.gemm_workspace = gemm_workspace;
    terms.kernel_scratch = r == 0 ? first_scratch : other_scratch;
  }
  // NCCL's buffers: a constant of the mesh per pipeline rank (the first and
  // last hold the embedding group; a ring of 2 has half the links).
  const NcclDeviceDefaults device = nccl_device_defaults(config_->cluster.preset);
  if (!device.uses_nccl) return;
  const NcclSettings& nccl = config_->cluster.nccl;
  schema::CommunicatorMesh mesh;
  mesh.pipeline = p;
  mesh.data = shape.data_parallel;
  mesh.context = shape.context_parallel;
  mesh.tensor = shape.tensor_parallel;
  // The runtime makes the ZeRO groups from the plan's num_groups.
  mesh.zero_groups =
      shape.gradient_replicas() % setting_.zero_ngroups == 0 ? setting_.zero_ngroups : 1;
  mesh.zero_stage = setting_.zero_stage;
  const std::vector<int64_t> buffers =
      stage_communicator_buffer_bytes(device, nccl, setting_.layout, mesh);
  for (int r = 0; r < p; ++r) memory_terms_[r].communicator_buffers = buffers[r];
}

void StageCostModel::set_in_flight() const {
  shape_terms();
  const int p = setting_.shape.pipeline_stages, m = setting_.num_micro_batches;
  const std::vector<ZeroBubbleCounts>* zero_bubble_ranks =
      splits_backward(setting_.schedule.kind) ? &zero_bubble_counts(setting_.schedule.kind, p, m)
                                              : nullptr;
  for (int r = 0; r < p; ++r) {
    StageMemoryTerms& terms = memory_terms_[r];
    if (zero_bubble_ranks != nullptr) {
      terms.in_flight = (*zero_bubble_ranks)[r].slots;
      terms.weight_pending = options_.is_train ? (*zero_bubble_ranks)[r].weight_pending : 0;
    } else {
      terms.in_flight = in_flight_micro_batches(setting_.schedule.kind, r, p, m, terms.chunks);
      terms.weight_pending = 0;
    }
  }
}

double StageCostModel::model_state_bytes(int pipeline_rank, int num_layers) const {
  RecomputeCounts counts;
  counts.full = num_layers;  // (ZeRO-3: its parameters freed, the least)
  const MemoryBreakdown memory = stage_memory(options_, shape_terms().at(pipeline_rank), counts);
  // (NCCL's buffers too: no choice changes them either.)
  return static_cast<double>(memory.weights + memory.gradients + memory.optimizer_state +
                             memory.optimizer_transient + memory.gathered +
                             memory.communicator_buffers);
}

// Compute: the profile's measured times, else the analytic model of the
// operations each part runs (compute_model.h). Returns the tensor group's
// measured pace, where it applies.
const TensorGroupPace* StageCostModel::set_compute_times(const MeasuredProfile* profile,
                                                         double busy, const DeviceModel& device) {
  const ModelConfig& model = config_->model;
  const ParallelShape& shape = setting_.shape;
  const int t = shape.tensor_parallel, b = setting_.micro_batch_size, cp = shape.context_parallel;
  // (A profile measures blocks without context parallelism: analytic with it.)
  const ProfileEntry* entry =
      profile != nullptr && cp == 1 ? profile->find_compute(model, t, b) : nullptr;
  std::optional<ProfiledTimes> measured;
  if (entry != nullptr) {
    measured = entry->times;
    if (entry->clock == ProfileClock::kCpu) scale_times(*measured, busy);
  }
  // A tensor-parallel group moves at its slowest member's pace (the profile's
  // TensorGroupPace, measured where every rank has a core of its own; where
  // ranks share cores the simulation plays the waiting out instead).
  const TensorGroupPace* pace =
      entry != nullptr && entry->tensor_group && t > 1 && ranks_have_own_cores(*config_, setting_)
          ? &*entry->tensor_group
          : nullptr;
  if (measured && pace) {
    measured->block_forward *= pace->forward_ratio;
    measured->block_backward *= pace->backward_ratio;
  }
  if (measured) {
    block_forward_ = measured->block_forward;
    block_backward_[0] = measured->block_backward;
    block_backward_[1] = measured->block_backward + measured->attention_core_forward;
    block_backward_[2] = measured->block_backward + measured->block_forward;
    embedding_forward_ = measured->embedding_forward;
    embedding_backward_ = measured->embedding_backward;
    head_forward_ = measured->head_forward;
    head_backward_ = measured->head_backward;
  } else {
    const bool sp = shape.sequence_parallel && t > 1;
    const PassOperations block = block_ops(model, b, t, sp, cp),
                         head = head_ops(model, b, t, sp, cp),
                         embedding = embedding_ops(model, b, t, cp);
    block_forward_ = operations_seconds(block.forward, false, device);
    block_backward_[0] = operations_seconds(block.backward, true, device);
    block_backward_[1] =
        block_backward_[0] + attention_seconds(block.forward.attention, false, device);
    block_backward_[2] = block_backward_[0] + block_forward_;
    embedding_forward_ = operations_seconds(embedding.forward, false, device);
    embedding_backward_ = operations_seconds(embedding.backward, true, device);
    head_forward_ = operations_seconds(head.forward, false, device);
    head_backward_ = operations_seconds(head.backward, true, device);
  }
  // ZB-H1's W: the weight-gradient GEMMs (every second backward GEMM,
  // transformer_ops.h) as a share of the block's backward, analytic even
  // under a profile (which measures the backward whole).
  {
    const PassOperations block = block_ops(model, b, t, false, cp);
    double weight_gradients = 0;
    for (size_t i = 1; i < block.backward.gemms.size(); i += 2)
      weight_gradients += gemm_seconds(block.backward.gemms[i], device);
    const double analytic_backward = operations_seconds(block.backward, true, device);
    block_weight_gradient_ =
        analytic_backward > 0 ? block_backward_[0] * weight_gradients / analytic_backward : 0;
  }

  return pace;
}

void StageCostModel::set_tensor_parallel(const MeasuredProfile* profile, double busy,
                                         const TensorGroupPace* pace) {
  const ModelConfig& model = config_->model;
  const ParallelShape& shape = setting_.shape;
  const int t = shape.tensor_parallel, b = setting_.micro_batch_size;
  const bool train = options_.is_train;
  // Tensor parallelism: always inside a node (t divides devices_per_node).
  links_ = LinkModel::from_cluster(config_->cluster);
  const LinkModel& links = links_;
  // The rank's tokens: seq_len / cp of every sequence.
  const double tokens = static_cast<double>(b) * model.seq_len / shape.context_parallel;
  const double hidden_bytes = tokens * model.d_model * element_bytes_;
  const std::optional<CollectiveEntry> tensor_parallel_all_reduce =
      measured_collective(profile, CollectiveOperation::AllReduce, t, busy);
  const double all_reduce = collective_seconds(tensor_parallel_all_reduce, ring_all_reduce_seconds,
                                               links, false, t, hidden_bytes);
  const double loss_reduce = collective_seconds(tensor_parallel_all_reduce, ring_all_reduce_seconds,
                                                links, false, t, 4.0 * tokens);  // fp32 per token
  tensor_parallel_ = TensorParallelParts::all_reduce_layout(all_reduce, loss_reduce, train);
  if (shape.sequence_parallel && t > 1) {
    // Sequence parallelism (runtime/model/decoder_stage.h): each all-reduce
    // of a block's forward becomes an all-gather before the column-parallel
    // GEMM and a reduce-scatter after the row-parallel one (the same ring
    // volume); backward reduce-scatters the norm's input gradient, gathers
    // the residual gradient and gathers the norm's output again for the
    // weight gradient (not kept), and sums the norm's weight gradients.
    const double gather =
        collective_seconds(measured_collective(profile, CollectiveOperation::AllGather, t, busy),
                           ring_all_gather_seconds, links, false, t, hidden_bytes);
    const double scatter = collective_seconds(
        measured_collective(profile, CollectiveOperation::ReduceScatter, t, busy),
        ring_reduce_scatter_seconds, links, false, t, hidden_bytes);
    const double norm_weights =
        collective_seconds(tensor_parallel_all_reduce, ring_all_reduce_seconds, links, false, t,
                           2.0 * model.d_model * element_bytes_);
    const double forward = 2 * (gather + scatter);
    const double backward = 2 * (2 * gather + scatter + norm_weights);
    tensor_parallel_.block = forward + (train ? backward : 0);
    tensor_parallel_.full_recompute = train ? forward : 0;
    // The embedding's vocab-parallel sum reduce-scatters; its backward gathers.
    tensor_parallel_.embedding = scatter + (train ? gather : 0);
    // The final norm's shards are gathered before the head (and again in
    // backward, with the reduce-scatter of its gradient and its weights' sum).
    tensor_parallel_.head =
        2 * loss_reduce + gather + (train ? gather + scatter + norm_weights : 0);
  }
  if (pace) {
    // Per call of the all-reduce layout, whose pace was measured (sequence
    // parallelism spreads the same compute over more calls: charged alike).
    const double wait = pace->wait_per_call;
    tensor_parallel_wait_ = TensorParallelParts::all_reduce_layout(wait, wait, train);
  }
}

// The context-parallel ring (context_parallel_cost.h): its transfers over
// the group's link (measured where the group stays in a node and the profile
// has point-to-point transfers), against the block attention.
void StageCostModel::set_context_parallel(const MeasuredProfile* profile, double busy,
                                          const DeviceModel& device) {
  const ParallelShape& shape = setting_.shape;
  if (shape.context_parallel <= 1) return;
  const bool crosses =
      context_parallel_group_crosses_nodes(shape, setting_.layout.devices_per_node);
  const std::optional<CollectiveEntry> measured =
      crosses ? std::nullopt
              : measured_collective(profile, CollectiveOperation::SendReceive, 2, busy);
  const Link& link = links_.link(crosses);
  const ContextParallelRing ring = context_parallel_ring(
      config_->model, shape, setting_.micro_batch_size, device, [&](double bytes) {
        return measured ? measured->seconds(bytes) : point_to_point_seconds(link, bytes);
      });
  const bool train = options_.is_train;
  context_parallel_.block =
      ring.forward_exposed_seconds() + (train ? ring.backward_exposed_seconds() : 0);
  context_parallel_.recompute = train ? ring.forward_exposed_seconds() : 0;
}

void StageCostModel::set_pipeline(const MeasuredProfile* profile, double busy,
                                  BubbleEstimate bubble) {
  const ModelConfig& model = config_->model;
  const ParallelShape& shape = setting_.shape;
  const int b = setting_.micro_batch_size, p = shape.pipeline_stages;
  const bool train = options_.is_train;
  const double hidden_bytes = static_cast<double>(b) * model.seq_len / shape.context_parallel *
                              model.d_model * element_bytes_;
  const LinkModel& links = links_;
  // Pipeline sends: the activation forward and (training) the gradient back
  // (with sequence parallelism, each rank sends its token shard).
  const double message_bytes = hidden_bytes / shape.sequence_shards();
  p2p_seconds_.assign(p, 0.0);
  const std::optional<CollectiveEntry> send_receive =
      measured_collective(profile, CollectiveOperation::SendReceive, p > 1 ? 2 : 1, busy);
  for (int s = 0; s + 1 < p; ++s) {
    const bool crosses =
        pipeline_boundary_crosses_nodes(shape, s, setting_.layout.devices_per_node);
    const double seconds = send_receive && !crosses
                               ? send_receive->seconds(message_bytes)
                               : point_to_point_seconds(links.link(crosses), message_bytes);
    p2p_seconds_[s] += seconds;
    if (train) p2p_seconds_[s + 1] += seconds;
    interleave_send_ = std::max(interleave_send_, seconds);
  }
  // Interleaved: each rank's other chunks send an activation and a gradient
  // more per micro-batch (the wrap from the last rank to rank 0 included).
  const schema::ScheduleKind kind = setting_.schedule.kind;
  const ScheduleKindRow& row = schedule_kind_row(kind);
  const bool chunked = row.traits.chunked();
  const bool split_backward = row.traits.splits_backward;
  if (chunked && p > 1)
    interleave_send_ *= (train ? 2 : 1) * (std::max(setting_.schedule.virtual_stages, 1) - 1);
  else
    interleave_send_ = 0;
  if (train && split_backward) {
    const double block_slot = block_forward_ + block_backward_[0] + tensor_parallel_.block +
                              tensor_parallel_wait_.block + context_parallel_.block;
    setting_.schedule.weight_fraction = block_slot > 0 ? block_weight_gradient_ / block_slot : 0;
    setting_.schedule.weight_of_backward =
        block_backward_[0] > 0 ? block_weight_gradient_ / block_backward_[0] : 0;
  }
  if (train && p > 1 && (split_backward || chunked) &&
      setting_.num_micro_batches >= row.fewest_micro_batches_per_stage * p) {
    if (bubble == BubbleEstimate::kLowerBound)
      setting_.schedule.bubble_slots = bubble_slots_lower_bound(
          kind, p, setting_.num_micro_batches, std::max(setting_.schedule.virtual_stages, 1),
          block_forward_ > 0 ? block_backward_[0] / block_forward_ : 2,
          setting_.schedule.weight_of_backward);
    else
      bubble_to_play_ = true;
  }
}

void StageCostModel::play_out_bubble() const {
  if (!bubble_to_play_) return;
  setting_.schedule.bubble_slots =
      played_out_bubble_slots(setting_.schedule.kind, num_stages(), setting_.num_micro_batches,
                              std::max(setting_.schedule.virtual_stages, 1),
                              block_forward_ > 0 ? block_backward_[0] / block_forward_ : 2,
                              setting_.schedule.weight_of_backward);
}

const PlanSetting& StageCostModel::setting() const {
  std::call_once(bubble_once_, [this] { play_out_bubble(); });
  return setting_;
}

MemoryBreakdown StageCostModel::memory(int pipeline_rank, const RecomputeCounts& counts) const {
  return stage_memory(options_, memory_terms().at(pipeline_rank), counts);
}

void StageCostModel::fill_time(int pipeline_rank, const RecomputeCounts& counts,
                               StageEstimate& stage) const {
  const bool first = pipeline_rank == 0, last = pipeline_rank == head_rank();
  stage.forward_seconds = counts.layers() * block_forward_;
  stage.backward_seconds = counts.none * block_backward_[0] +
                           counts.selective * block_backward_[1] + counts.full * block_backward_[2];
  stage.tensor_parallel_seconds = tensor_parallel_.of(counts, first, last);
  stage.tensor_parallel_wait_seconds = tensor_parallel_wait_.of(counts, first, last);
  stage.context_parallel_seconds = context_parallel_.of(counts);
  if (first) {
    stage.forward_seconds += embedding_forward_;
    stage.backward_seconds += embedding_backward_;
  }
  if (last) {
    stage.forward_seconds += head_forward_;
    stage.backward_seconds += head_backward_;
  }
  stage.pipeline_p2p_seconds = p2p_seconds_[pipeline_rank] + interleave_send_;
  stage.parameter_gather_seconds = slot_gather_seconds(pipeline_rank, counts);
}

double StageCostModel::slot_seconds(int pipeline_rank, const RecomputeCounts& counts) const {
  StageEstimate stage;
  fill_time(pipeline_rank, counts, stage);
  return stage.slot_seconds();
}

StageEstimate StageCostModel::estimate(int pipeline_rank, const RecomputeCounts& counts) const {
  StageEstimate stage;
  stage.memory = memory(pipeline_rank, counts);
  fill_time(pipeline_rank, counts, stage);
  fill_tail(pipeline_rank, counts.layers(), stage);
  return stage;
}

double bubble_slots(const PlanSetting& setting) {
  const ScheduleChoice& schedule = setting.schedule;
  const ScheduleKindRow& row = schedule_kind_row(schedule.kind);
  // The played-out figure where a model has set it (the kinds it plays out).
  if ((row.traits.chunked() || row.traits.splits_backward) && schedule.bubble_slots >= 0)
    return schedule.bubble_slots;
  return row.closed_form_bubble(setting.shape.pipeline_stages, schedule.virtual_stages,
                                schedule.weight_fraction);
}

double exact_bubble_slots(schema::ScheduleKind kind, int p, int m, int v, double backward_ratio,
                          double weight_of_backward) {
  if (p < 2) return 0;
  // The closed forms schedule_bubble_test proves exact (F 1, B/F 0.5..5):
  // Megatron's (p - 1)(F + B) / v where p divides m, and the paper's
  // (p - 1)(F + B_in - W) for ZB-H1 where W <= min(F, B_in), m >= p.
  const double input = backward_ratio * (1 - weight_of_backward);
  const double weight = backward_ratio * weight_of_backward;
  return schedule_kind_row(kind).exact_bubble(p, m, v, backward_ratio, input, weight);
}

double bubble_slots_lower_bound(schema::ScheduleKind kind, int p, int m, int v,
                                double backward_ratio, double weight_of_backward) {
  if (p < 2) return 0;
  const double exact = exact_bubble_slots(kind, p, m, v, backward_ratio, weight_of_backward);
  if (exact >= 0) return exact;
  // Rank p - 1's first forward (of its first chunk) waits for p - 1 chunk
  // forwards of F / v each; it then computes m (F + B). In slots of F + B,
  // with the ratio no smaller than played_out_bubble_slots rounds it to.
  const double rounded = std::lround(backward_ratio * 20) / 20.0;
  return (p - 1) / (std::max(v, 1) * (1 + std::max(backward_ratio, rounded)));
}

double played_out_bubble_slots(schema::ScheduleKind kind, int p, int m, int v,
                               double backward_ratio, double weight_of_backward) {
  if (p < 2) return 0;
  const ScheduleKindRow& row = schedule_kind_row(kind);
  const double exact = exact_bubble_slots(kind, p, m, v, backward_ratio, weight_of_backward);
  if (exact >= 0) return exact;
  // The steady state adds no bubble (schedule_bubble_test): ZB-V's and
  // DualPipe-V's is the same for every m >= 2p, interleaved's for every
  // m >= 2p of one m mod p; the shortest such schedule plays it out.
  m = row.bubble_micro_batches(p, m);
  // Otherwise played out. Ratios rounded to 1/20: settings differ in them a
  // little, and the cache serves them all.
  const int backward_q = static_cast<int>(std::lround(backward_ratio * 20));
  const int weight_q = static_cast<int>(std::lround(weight_of_backward * 20));
  const auto key = std::make_tuple(static_cast<int>(kind), p, m, v, backward_q, weight_q);
  static std::mutex mutex;
  static std::map<decltype(key), double> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = known.find(key); it != known.end()) return it->second;
  }
  // Played out as simulate_step would, in linear time (schedule_bubble_test
  // holds them equal).
  const double backward = backward_q / 20.0;
  const double step =
      dependency_bound_step(*shared_schedule(kind, p, m, v), 1, backward, weight_q / 20.0);
  const double slots = std::max(0.0, step / (1 + backward) - m);
  std::lock_guard<std::mutex> lock(mutex);
  known[key] = slots;
  return slots;
}

double pipeline_bubble_ratio(const PlanSetting& setting) {
  const double bubble = bubble_slots(setting);
  return bubble > 0 ? bubble / (setting.num_micro_batches + bubble) : 0;
}

double step_seconds(const PlanSetting& setting, double slowest_slot, double slowest_tail) {
  return (setting.num_micro_batches + bubble_slots(setting)) * slowest_slot + slowest_tail;
}

std::string schedule_choice_name(const ScheduleChoice& choice) {
  const ScheduleKindTraits& traits = schedule_kind_traits(choice.kind);
  std::string name = traits.name;
  if (traits.chunks == ChunkRule::kChosen) name += " v=" + std::to_string(choice.virtual_stages);
  return name;  // (the V kinds: always 2 chunks)
}

namespace {

// Why `kind` with v chunks per rank cannot run the setting ("" if it can):
// the chunked kinds need p >= 2, the layout to themselves (no pivots or
// pinned layers), v layers per rank and interleaved m >= p (Megatron-core's
// groups of p), DualPipe-V m >= 2p. The one rule schedule_choices and
// why_no_schedule_choice both read.
std::string cannot_run(const JobConfig& config, const PlanSetting& setting,
                       bool boundaries_restricted, schema::ScheduleKind kind, int v) {
  const ScheduleKindRow& row = schedule_kind_row(kind);
  if (!row.traits.chunked()) return "";
  const int p = setting.shape.pipeline_stages, m = setting.num_micro_batches;
  const auto text = [](int64_t value) { return std::to_string(value); };
  if (p < 2) return "needs at least 2 pipeline stages";
  if (boundaries_restricted)
    return "places its model chunks itself, which pivots or pinned layers do not allow";
  if (v < 2) return "runs 2 model chunks per rank or more";
  if (config.model.num_layers < p * v)
    return "needs " + text(v) + " x pp = " + text(p * v) + " blocks or more; the model has " +
           text(config.model.num_layers);
  const int fewest = row.fewest_micro_batches_per_stage;
  if (m < fewest * p)
    return "runs at least " + (fewest > 1 ? text(fewest) + " x " : std::string()) +
           "pp = " + text(fewest * p) + " micro-batches; this setting has " + text(m);
  return "";
}

// The chunk counts a kind is tried with: interleaved pipeline_virtual_stages,
// or 2, 3 and 4; the V kinds 2; the others 1.
std::vector<int> chunk_counts(const PlannerOptions& options, schema::ScheduleKind kind) {
  switch (schedule_kind_traits(kind).chunks) {
    case ChunkRule::kOne:
      return {1};
    case ChunkRule::kTwoInAV:
      return {2};
    case ChunkRule::kChosen:
      if (options.pipeline_virtual_stages > 0) return {options.pipeline_virtual_stages};
      return {2, 3, 4};
  }
  return {1};
}

}  // namespace

std::vector<ScheduleChoice> schedule_choices(const JobConfig& config, const PlanSetting& setting,
                                             bool boundaries_restricted) {
  using schema::ScheduleKind;
  const PlannerOptions& options = config.planner;
  std::vector<ScheduleChoice> choices;
  const auto add = [&](ScheduleKind kind) {
    for (int v : chunk_counts(options, kind))
      if (cannot_run(config, setting, boundaries_restricted, kind, v).empty())
        choices.push_back({kind, v, 0});
  };
  if (options.pipeline_scheduler) {
    add(*options.pipeline_scheduler);
    return choices;
  }
  // One stage, or no backward: only the kind that runs every setting.
  const bool every_kind = setting.shape.pipeline_stages >= 2 && options.is_train;
  for (const ScheduleKindRow& row : schedule_catalogue())
    if (every_kind || row.runs_every_setting) add(row.traits.kind);
  return choices;
}

std::string why_no_schedule_choice(const JobConfig& config, const PlanSetting& setting,
                                   bool boundaries_restricted) {
  const PlannerOptions& options = config.planner;
  if (!options.pipeline_scheduler ||
      !schedule_choices(config, setting, boundaries_restricted).empty())
    return "";
  const schema::ScheduleKind kind = *options.pipeline_scheduler;
  // The smallest chunk count tried says the least demanding reason.
  const std::vector<int> counts = chunk_counts(options, kind);
  return std::string("[planner] pipeline_scheduler = '") + schedule_kind_name(kind) + "' " +
         cannot_run(config, setting, boundaries_restricted, kind,
                    *std::min_element(counts.begin(), counts.end()));
}

}  // namespace paraplan
