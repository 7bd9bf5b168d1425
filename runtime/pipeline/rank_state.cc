// rank_state.cc: building one rank's runtime objects from a plan.
#include "runtime/pipeline/rank_state.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/comm/heartbeat.h"
#include "runtime/comm/transport.h"
#include "runtime/comm/watchdog.h"
#include "runtime/comm/watched_communicator.h"
#include "runtime/model/chunked_stage.h"
#include "runtime/pipeline/transfer_order.h"
#include "schema/zero_units.h"

namespace paraplan {

int cpu_threads_per_rank(const MpiSession& session) {
  // Ranks sharing a machine share its cores: one BLAS thread pool each
  // would oversubscribe them.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return session.local_size() > 1 ? std::max(1, cores / session.local_size()) : cores;
}

std::unique_ptr<kernels::Ops> make_backend(const std::string& name, const MpiSession& session,
                                           kernels::DType storage) {
  if (name == "cpu") {
    // One rank alone keeps OpenBLAS's own default (0), which is the cores
    // unless OPENBLAS_NUM_THREADS says otherwise.
    const int threads = session.local_size() > 1 ? cpu_threads_per_rank(session) : 0;
    return kernels::make_cpu_ops(threads, storage);
  }
  if (name == "cuda") return kernels::make_cuda_ops(session.local_rank(), storage);
  throw std::runtime_error("--backend: unknown backend '" + name + "'; valid: cpu, cuda");
}

namespace {

// The groups for the transport --transport asks for. A one-rank job without
// mpirun talks to nobody: local groups, whose copies go through the ops and so
// take any backend's buffers; the request is still checked, so a flag means
// the same with and without mpirun.
ProcessGroups build_process_groups(const schema::Mesh& mesh, int zero_groups,
                                   const MpiSession& session, kernels::Ops& ops,
                                   const std::string& requested_transport) {
  if (!session.uses_mpi()) {
    choose_transport(requested_transport, ops.backend(), DeviceSharing{}, nccl_compiled_in());
    return make_local_process_groups(ops);
  }
  // Collective, so decided by the backend, which every rank shares; the CPU
  // backend has no device to share.
  const DeviceSharing sharing =
      ops.backend() == kernels::Backend::kCuda ? find_shared_devices(ops) : DeviceSharing{};
  const TransportChoice transport =
      choose_transport(requested_transport, ops.backend(), sharing, nccl_compiled_in());
  if (session.world_rank() == 0)
    std::cout << "paraplan: transport: " << transport.reason << std::endl;
  return make_process_groups(transport.transport, mesh.pipeline_parallel(), mesh.data_parallel(),
                             mesh.tensor_parallel(), zero_groups, ops, mesh.context_parallel());
}

// Refuses, before the stage allocates anything, a model this rank cannot
// hold: its weights and gradients alone (the least any run of it allocates)
// more than twice the plan's own prediction for the stage (the plan's model
// and prediction disagree: a corrupt or hand-edited plan), or more than this
// machine's memory (the CUDA backend keeps an fp32 copy of the parameters on
// the host while it initializes or loads them).
void check_stage_fits(const LoadedPlan& loaded, const ParameterLayout& layout, int stage_index,
                      const kernels::Ops& ops) {
  const double parameters = static_cast<double>(layout.num_elements());
  const double storage = static_cast<double>(ops.storage_bytes(1));
  // ZeRO-2 holds no whole gradients, ZeRO-3 only its share of the weights
  // too: what the rank holds of them at least.
  const schema::Plan& plan = loaded.plan();
  const int zero_stage = plan.zero()->stage();
  const bool whole_gradients = !shards_gradients(zero_stage);
  const double weights_share =
      shards_parameters(zero_stage)
          ? 1.0 / std::max(1, plan.mesh()->data_parallel() * plan.mesh()->context_parallel() /
                                  plan.zero()->num_groups())
          : 1.0;
  const double least = parameters * (weights_share + (whole_gradients ? 1 : 0)) * storage;
  const std::string what = loaded.path() + ": pipeline stage " + std::to_string(stage_index) +
                           " holds " + std::to_string(layout.num_elements()) +
                           " parameters on this rank, whose weights" +
                           (weights_share < 1 ? " (its ZeRO-3 share)" : "") +
                           (whole_gradients ? " and gradients" : "") + " alone";
  const schema::Predictions* predictions = plan.predictions();
  if (predictions != nullptr && predictions->stages() != nullptr &&
      stage_index < static_cast<int>(predictions->stages()->size())) {
    const schema::StageMemory* predicted = predictions->stages()->Get(stage_index)->memory();
    const double total = predicted ? static_cast<double>(predicted->total()) : 0;
    if (predicted != nullptr && least > 2 * total)
      throw std::runtime_error(what + " take " + gibibytes_text(least) +
                               ", more than twice the plan's own prediction predictions.stages[" +
                               std::to_string(stage_index) +
                               "].memory.total = " + gibibytes_text(total) +
                               "; the plan's model and its predictions disagree (re-create the "
                               "plan with 'paraplan plan')");
  }
  const bool cpu = ops.backend() == kernels::Backend::kCpu;
  require_host_memory(cpu ? least : parameters * 4,
                      cpu ? what : what + " (as fp32 on the host, while they are initialized)",
                      "plan for more pipeline or tensor parallelism, or a smaller model");
}

// Each chunk's slots, received gradients and recompute modes, chunk by chunk.
std::vector<ModelStageOptions> chunk_options(
    const LoadedPlan& loaded, int pipeline_rank,
    const std::vector<ScheduleExecutor::ChunkBuffers>& buffers) {
  std::vector<ModelStageOptions> chunks;
  const std::vector<StageModelSpec> models = chunk_models_from_plan(loaded, pipeline_rank);
  for (size_t c = 0; c < models.size(); ++c)
    chunks.push_back({.num_slots = buffers[c].slots,
                      .recompute = models[c].recompute,
                      .output_gradient_per_slot = buffers[c].output_gradient_per_slot});
  return chunks;
}

}  // namespace

RankState::~RankState() {
  if (optimizer == nullptr || ops == nullptr || std::uncaught_exceptions() > 0) return;
  try {
    optimizer->wait_for_parameters();
    ops->synchronize();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "paraplan: warning: waiting for the last parameter all-gathers: %s\n",
                 error.what());
  }
}

MeshCoordinates place_this_rank(const LoadedPlan& loaded, const MpiSession& session) {
  const schema::Mesh& mesh = *loaded.plan().mesh();
  session.require_world_size(mesh.pipeline_parallel(), mesh.data_parallel(), mesh.tensor_parallel(),
                             mesh.context_parallel());
  return mesh_coordinates(session.world_rank(), mesh.pipeline_parallel(), mesh.data_parallel(),
                          mesh.tensor_parallel(), mesh.context_parallel());
}

RankState build_rank_state(const LoadedPlan& loaded, const StageModelSpec& model,
                           const MeshCoordinates& mesh, const MpiSession& session,
                           const RankBuildOptions& options) {
  const schema::Plan& plan = loaded.plan();
  const schema::Mesh& mesh_plan = *plan.mesh();
  const schema::Training& training = *plan.training();
  // Before anything is allocated: transfers that posting order (NCCL) would mis-pair.
  check_transfer_order(*plan.schedule(), loaded.path());
  RankState rank;
  std::unique_ptr<kernels::Ops> backend = make_backend(options.backend, session, model.dtype);
  if (options.wrap_ops) backend = options.wrap_ops(std::move(backend));
  auto counter = std::make_unique<kernels::SyncCountingOps>(std::move(backend));
  rank.sync_counter = counter.get();
  rank.ops = std::move(counter);
  rank.memory = std::make_unique<MemoryTracker>(*rank.ops, options.memory_capacity_bytes);
  const int zero_stage = plan.zero()->stage(), zero_groups = plan.zero()->num_groups();
  // Before the groups: NCCL's initialisation and the links' first exchange
  // are watched too.
  Watchdog::instance().set_timeout(options.collective_timeout_seconds, session.world_rank());
  rank.groups = build_process_groups(mesh_plan, zero_groups, session, *rank.ops, options.transport);
  if (options.wrap_groups) options.wrap_groups(rank.groups, *rank.ops);
  // Watched for the timeout, and for the launcher's heartbeat, which reports
  // the operations each rank has entered on each group.
  if (options.collective_timeout_seconds > 0 || Heartbeat::active())
    watch_process_groups(rank.groups);
  const schema::StageSchedule& schedule = *plan.schedule()->stages()->Get(mesh.pipeline_rank);
  const int chunks = plan.schedule()->virtual_stages();
  const std::vector<ScheduleExecutor::ChunkBuffers> buffers =
      ScheduleExecutor::buffers_needed(schedule, chunks);
  ModelStageOptions stage_options{
      .micro_batch_size = training.micro_batch_size(),
      .num_slots = buffers[0].slots,
      .recompute = model.recompute,
      .tensor_group = rank.groups.tensor.get(),
      .sequence_parallel = mesh_plan.sequence_parallel(),
      .output_gradient_per_slot = buffers[0].output_gradient_per_slot,
      .gradients_elsewhere = shards_gradients(zero_stage),
      .parameters_elsewhere = shards_parameters(zero_stage),
      .layers_per_zero_unit = plan.zero()->layers_per_unit(),
      .context = {.rank = mesh.context_rank, .size = mesh.context_size},
      .context_ring = {.peers = rank.groups.context_peers,
                       .next_rank = rank.groups.next_context_rank,
                       .previous_rank = rank.groups.previous_context_rank},
      .document_separator =
          training.data() != nullptr ? training.data()->document_separator() : -1};
  rank.layout = rank_layout_from_plan(loaded, mesh.pipeline_rank, mesh.tensor_rank,
                                      mesh.tensor_size, options.max_positions);
  check_stage_fits(loaded, *rank.layout, mesh.pipeline_rank, *rank.ops);
  stage_options.buffer_elements = DistributedOptimizer::buffer_elements(
      rank.layout->num_elements(), zero_stage, rank.groups.zero->size());
  if (chunks == 1)
    rank.stage = make_model_stage(*rank.layout, *rank.ops, *rank.memory, stage_options);
  else
    rank.stage = std::make_unique<ChunkedStage>(static_cast<const ChunkedLayout&>(*rank.layout),
                                                *rank.ops, *rank.memory, stage_options,
                                                chunk_options(loaded, mesh.pipeline_rank, buffers));
  const schema::Optimizer& optimizer_plan = *training.optimizer();
  rank.optimizer = std::make_unique<DistributedOptimizer>(
      *rank.stage, *rank.ops, *rank.memory, rank.groups,
      AdamWSettings{.beta1 = optimizer_plan.beta1(),
                    .beta2 = optimizer_plan.beta2(),
                    .epsilon = optimizer_plan.epsilon(),
                    .weight_decay = optimizer_plan.weight_decay(),
                    .grad_clip = optimizer_plan.grad_clip()},
      zero_stage, training.gradient_bucket_elements());
  const std::vector<ChunkUnits> units = rank_units(plan, mesh.pipeline_rank);
  rank.optimizer->check_units(units);
  rank.pipeline = PipelinePeers{
      .peers = rank.groups.peers.get(),
      .previous_stage_rank = rank.groups.previous_stage_rank,
      .next_stage_rank = rank.groups.next_stage_rank,
      .pipeline_rank = mesh.pipeline_rank,
      .pipeline_size = mesh.pipeline_size,
      .first_stage_rank = world_rank_of(mesh, 0, mesh.data_rank, mesh.tensor_rank),
      .last_stage_rank =
          world_rank_of(mesh, mesh.pipeline_size - 1, mesh.data_rank, mesh.tensor_rank),
      .own_rank = session.world_rank(),
      .v_shape = PipelineLayout::of(plan.schedule()->kind(), mesh.pipeline_size, chunks).v_shape()};
  // (A ZeRO-2 or 3 plan written before its streams listed their unit ops
  // got them at load: schema/plan_lowering.h.)
  rank.executor = std::make_unique<ScheduleExecutor>(schedule, *rank.stage, *rank.ops,
                                                     training.num_micro_batches(), mesh.data_rank,
                                                     rank.pipeline);
  return rank;
}

ExecutorHooks optimizer_hooks(DistributedOptimizer& optimizer,
                              std::function<void()> optimizer_step) {
  ExecutorHooks hooks;
  hooks.reduce_gradients = [&optimizer] { optimizer.reduce_gradients(); };
  hooks.optimizer_step = std::move(optimizer_step);
  hooks.gradients_final_from = [&optimizer](size_t offset) {
    optimizer.gradients_final_from(offset);
  };
  hooks.before_first_forward = [&optimizer] { optimizer.wait_for_parameters(); };
  if (optimizer.sharded_gradients() == nullptr) return hooks;  // no unit ops below ZeRO-2
  hooks.run_zero_unit_op = [&optimizer](const schema::Instruction& op) {
    optimizer.run_unit_op(op.op(), op.chunk(), op.unit());
  };
  hooks.zero_unit_of = [&optimizer](size_t offset) { return optimizer.unit_of(offset); };
  hooks.watch_zero_unit_reads = [&optimizer](std::function<void(int, int)> read) {
    optimizer.watch_unit_reads(std::move(read));
  };
  return hooks;
}

double job_loss_sum(RankState& rank, double stage_loss_sum) {
  double sum = rank.stage->has_head() && rank.groups.mesh.tensor_rank == 0 ? stage_loss_sum : 0.0;
  rank.groups.world->all_reduce(&sum, 1, ReduceOp::kSum);
  return sum;
}

void initialize_parameters(RankState& rank, uint64_t seed) {
  // A tensor at a time: a ZeRO-3 rank's stage (the whole model when nothing
  // else splits it) never sits in host memory at once. Through the optimizer
  // where there is one: it keeps the exact fp32 values as master weights
  // when the stage stores bf16.
  std::vector<float> values;
  for (const ParameterTensor& tensor : rank.layout->tensors()) {
    values.resize(tensor.size);
    rank.layout->initialize_tensor(tensor, values.data(), seed);
    if (rank.optimizer)
      rank.optimizer->load_range(DistributedOptimizer::StateArray::kParameters, tensor.offset,
                                 tensor.offset + tensor.size, values.data());
    else
      rank.stage->load_parameters(values.data(), tensor.size, tensor.offset);
  }
}

}  // namespace paraplan
