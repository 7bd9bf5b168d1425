// replay.cc: `paraplan replay`: time a plan's instruction streams on synthetic
// tokens and report them beside the plan's predictions.
#include "runtime/measure/replay.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <stdexcept>
#include <vector>

#include "common/atomic_file.h"
#include "runtime/comm/mpi_session.h"
#include "runtime/data/sample_source.h"
#include "runtime/measure/call_recorder.h"
#include "runtime/measure/replay_report.h"
#include "runtime/measure/span_clock.h"
#include "runtime/measure/timeline.h"
#include "runtime/measure/wait_attribution.h"
#include "runtime/model/model_from_plan.h"
#include "runtime/pipeline/rank_state.h"
#include "schema/model_limits.h"
#include "schema/plan_io.h"

namespace paraplan {

namespace {

using Clock = std::chrono::steady_clock;
using schema::OpCode;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// One timed instruction, as numbers, so the ranks can gather them.
struct SpanRecord {
  double op, micro_batch, step, start, end, chunk;
  static constexpr int kFields = 6;
};

// The running totals of the recording communicators: tensor-parallel groups,
// the data-parallel reduction's groups (data, ZeRO, embedding), and the world
// (the gradient norm's all-reduce).
struct CollectiveTotals {
  double tensor = 0, reduction = 0, world = 0;
  double cpu = 0;  // the process's CPU time in all of them
  double sum() const { return tensor + reduction + world; }
};

// Times every instruction and splits off the collectives inside it; keeps
// each pipeline transfer for the wait attribution, and (for the trace) every span.
class InstructionTimer final : public InstructionObserver {
 public:
  // count_cpu_time: compute is the CPU time the rank got (the CPU backend,
  // whose ranks may share cores), the rest of its wall time waiting for a
  // core; else compute is wall time.
  // virtual_stages: the model chunks per rank; a micro-batch's forward and
  // backward count once over all of them.
  InstructionTimer(Clock::time_point origin, const CollectiveTotals* totals, bool keep_spans,
                   bool count_cpu_time, int virtual_stages)
      : origin_(origin),
        totals_(totals),
        keep_spans_(keep_spans),
        count_cpu_time_(count_cpu_time),
        per_chunk_(1.0 / virtual_stages) {}

  void start_step(int step, bool measured) {
    step_ = step;
    measured_ = measured;
  }
  const RankMeasurement& measurement() const { return measurement_; }
  RankMeasurement& measurement() { return measurement_; }
  const std::vector<SpanRecord>& spans() const { return spans_; }
  const std::vector<TransferRecord>& transfers() const { return transfers_; }

  // The CPU clock is a system call, where a rank whose time slice is up gets
  // preempted: read inside the wall-clock span, so that preemption counts as
  // the instruction's waiting for a core, not as time between instructions.
  void before(const schema::Instruction&) override {
    at_start_ = *totals_;
    start_ = Clock::now();
    cpu_start_ = process_cpu_seconds();
  }

  void after(const schema::Instruction& instruction) override {
    const double cpu_end = process_cpu_seconds();
    const Clock::time_point end = Clock::now();
    if (!measured_) return;
    const double span = seconds_between(start_, end);
    const double wall = span - (totals_->sum() - at_start_.sum());
    const double cpu = cpu_end - cpu_start_ - (totals_->cpu - at_start_.cpu);
    const double compute = count_cpu_time_ ? std::clamp(cpu, 0.0, wall) : wall;
    RankMeasurement& m = measurement_;
    switch (instruction.op()) {
      case OpCode::Forward:
        m.forward_seconds += compute;
        m.forward_count += per_chunk_;
        m.core_wait_seconds += wall - compute;
        break;
      case OpCode::Backward:
      case OpCode::BackwardInput:
      case OpCode::BackwardWeight:
        // A split backward's two halves are one backward.
        m.backward_seconds += compute;
        if (instruction.op() != OpCode::BackwardWeight) m.backward_count += per_chunk_;
        m.core_wait_seconds += wall - compute;
        break;
      case OpCode::LoadMicroBatch:
        m.load_seconds += compute;
        m.core_wait_seconds += wall - compute;
        break;
      case OpCode::OptimizerStep:
        m.optimizer_seconds += compute;
        m.core_wait_seconds += wall - compute;
        break;
      case OpCode::ReduceGradients:
      case OpCode::GatherParameters:
      case OpCode::ReleaseParameters:
      case OpCode::ReduceScatterGradients:
        break;  // their collectives (the ZeRO group's) are the gradient reduction
      case OpCode::SendActivation:
      case OpCode::RecvActivation:
      case OpCode::SendGradient:
      case OpCode::RecvGradient:  // the pipeline transfers: a CPU rank's work is its CPU time
        transfers_.push_back({static_cast<int>(instruction.op()), instruction.micro_batch(), step_,
                              span, instruction.chunk(),
                              count_cpu_time_ ? std::clamp(cpu, 0.0, span) : span});
        break;
    }
    if (keep_spans_)
      spans_.push_back({static_cast<double>(instruction.op()),
                        static_cast<double>(instruction.micro_batch()), static_cast<double>(step_),
                        seconds_between(origin_, start_), seconds_between(origin_, end),
                        static_cast<double>(instruction.chunk())});
  }

 private:
  Clock::time_point origin_, start_;
  const CollectiveTotals* totals_;
  bool keep_spans_, count_cpu_time_;
  double per_chunk_;
  CollectiveTotals at_start_;
  double cpu_start_ = 0;
  int step_ = 0;
  bool measured_ = false;
  RankMeasurement measurement_;
  std::vector<SpanRecord> spans_;
  std::vector<TransferRecord> transfers_;
};

// Spans of a plan with several chunks per rank name theirs: "F3.c1".
TimelineSpan to_timeline_span(const SpanRecord& record, int rank, int virtual_stages) {
  const int mb = static_cast<int>(record.micro_batch);
  const std::string chunk =
      virtual_stages > 1 ? ".c" + std::to_string(static_cast<int>(record.chunk)) : "";
  const std::string m = std::to_string(mb) + chunk;
  TimelineSpan span;
  span.rank = rank;
  span.step = static_cast<int>(record.step);
  span.micro_batch = mb;
  span.start_seconds = record.start;
  span.end_seconds = record.end;
  switch (static_cast<OpCode>(static_cast<int>(record.op))) {
    case OpCode::LoadMicroBatch:
      span.name = "load " + m, span.category = "load";
      break;
    case OpCode::Forward:
      span.name = "F" + m, span.category = "forward";
      break;
    case OpCode::Backward:
      span.name = "B" + m, span.category = "backward";
      break;
    case OpCode::BackwardInput:
      span.name = "Bi" + m, span.category = "backward";
      break;
    case OpCode::BackwardWeight:
      span.name = "W" + m, span.category = "backward";
      break;
    case OpCode::SendActivation:
      span.name = "send act " + m, span.category = "send";
      break;
    case OpCode::RecvActivation:
      span.name = "recv act " + m, span.category = "receive";
      break;
    case OpCode::SendGradient:
      span.name = "send grad " + m, span.category = "send";
      break;
    case OpCode::RecvGradient:
      span.name = "recv grad " + m, span.category = "receive";
      break;
    case OpCode::ReduceGradients:
      span.name = "reduce grads", span.category = "reduce", span.micro_batch = -1;
      break;
    case OpCode::OptimizerStep:
      span.name = "optimizer", span.category = "optimizer", span.micro_batch = -1;
      break;
    case OpCode::GatherParameters:
      span.name = "gather " + m, span.category = "zero";
      break;
    case OpCode::ReleaseParameters:
      span.name = "release " + m, span.category = "zero";
      break;
    case OpCode::ReduceScatterGradients:
      span.name = "reduce-scatter " + m, span.category = "zero";
      break;
  }
  return span;
}

// Every rank's numbers (mine: this rank's) on every rank, per rank: a sum
// over the world of per-rank slices.
std::vector<std::vector<double>> gather_rows(const std::vector<double>& mine, Communicator& world) {
  double most = static_cast<double>(mine.size());
  world.all_reduce(&most, 1, ReduceOp::kMax);
  const size_t slice = static_cast<size_t>(most);
  std::vector<double> all(slice * world.size() + world.size(), 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + slice * world.rank());
  all[slice * world.size() + world.rank()] = static_cast<double>(mine.size());
  world.all_reduce(all.data(), all.size(), ReduceOp::kSum);
  std::vector<std::vector<double>> ranks(world.size());
  for (int rank = 0; rank < world.size(); ++rank) {
    const auto begin = all.begin() + slice * rank;
    ranks[rank].assign(begin, begin + static_cast<size_t>(all[slice * world.size() + rank]));
  }
  return ranks;
}

// Every rank's spans.
std::vector<TimelineSpan> gather_spans(const std::vector<SpanRecord>& mine, Communicator& world,
                                       int virtual_stages) {
  std::vector<double> flat;
  for (const SpanRecord& r : mine)
    flat.insert(flat.end(), {r.op, r.micro_batch, r.step, r.start, r.end, r.chunk});
  std::vector<TimelineSpan> spans;
  const std::vector<std::vector<double>> ranks = gather_rows(flat, world);
  for (int rank = 0; rank < world.size(); ++rank)
    for (size_t i = 0; i + SpanRecord::kFields <= ranks[rank].size(); i += SpanRecord::kFields) {
      const double* f = ranks[rank].data() + i;
      spans.push_back(to_timeline_span({f[0], f[1], f[2], f[3], f[4], f[5]}, rank, virtual_stages));
    }
  return spans;
}

// Every rank's pipeline transfers, split into transfer and wait per rank.
std::vector<TransferAndWait> gather_transfer_waits(const std::vector<TransferRecord>& mine,
                                                   Communicator& world, const MeshCoordinates& mesh,
                                                   int virtual_stages, bool v_shape) {
  constexpr size_t kFields = 6;
  std::vector<double> flat;
  for (const TransferRecord& r : mine)
    flat.insert(flat.end(), {double(r.op), double(r.micro_batch), double(r.step), r.seconds,
                             double(r.chunk), r.work});
  std::vector<std::vector<TransferRecord>> ranks(world.size());
  const std::vector<std::vector<double>> rows = gather_rows(flat, world);
  for (int rank = 0; rank < world.size(); ++rank)
    for (size_t i = 0; i + kFields <= rows[rank].size(); i += kFields) {
      const double* f = rows[rank].data() + i;
      ranks[rank].push_back({static_cast<int>(f[0]), static_cast<int>(f[1]), static_cast<int>(f[2]),
                             f[3], static_cast<int>(f[4]), f[5]});
    }
  // A stage's ranks: its data x context x tensor ranks, consecutive.
  return split_pipeline_transfers(ranks, mesh.pipeline_size, mesh.gradient_size(), mesh.tensor_size,
                                  virtual_stages, v_shape);
}

std::vector<RankMeasurement> gather_measurements(const RankMeasurement& mine, Communicator& world) {
  std::vector<double> all(static_cast<size_t>(world.size()) * RankMeasurement::kFields, 0.0);
  mine.to_array(all.data() + static_cast<size_t>(world.rank()) * RankMeasurement::kFields);
  world.all_reduce(all.data(), all.size(), ReduceOp::kSum);
  std::vector<RankMeasurement> ranks;
  for (int r = 0; r < world.size(); ++r)
    ranks.push_back(RankMeasurement::from_array(all.data() +
                                                static_cast<size_t>(r) * RankMeasurement::kFields));
  return ranks;
}

void check_replay_options(const ReplayOptions& options) {
  if (options.steps < 1)
    throw std::runtime_error("--steps: " + std::to_string(options.steps) +
                             "; replay measures at least 1 step");
  if (options.warmup < 0)
    throw std::runtime_error("--warmup: " + std::to_string(options.warmup) + "; must be >= 0");
  // The steps are counted in an int, warm-up and measured together.
  if (int64_t{options.warmup} + options.steps > kMaxSteps)
    throw std::runtime_error("--steps " + std::to_string(options.steps) + " with --warmup " +
                             std::to_string(options.warmup) + ": at most " +
                             std::to_string(kMaxSteps) + " steps in all");
}

// The recording communicators the build wraps around the rank's groups, and
// the totals they add to while `recording` (the measured steps) is on. The
// recorders point into this: it stays where it was made.
struct RecordedGroups {
  CollectiveTotals totals;
  bool recording = false;
  std::vector<RecordingCommunicator*> reduction;
  RecordingCommunicator *tensor = nullptr, *world = nullptr;
};

RankBuildOptions recording_build_options(const ReplayOptions& options,
                                         const schema::Cluster* cluster, RecordedGroups& recorded) {
  RankBuildOptions build;
  build.backend = options.backend;
  build.collective_timeout_seconds = options.collective_timeout_seconds;
  build.transport = options.transport;
  if (options.enforce_device_memory && cluster)
    build.memory_capacity_bytes = allocatable_device_memory_bytes(*cluster);
  build.wrap_groups = [&recorded](ProcessGroups& groups, kernels::Ops& ops) {
    kernels::Ops* device = ops.backend() == kernels::Backend::kCpu ? nullptr : &ops;
    CollectiveTotals& totals = recorded.totals;
    recorded.tensor = record_communicator(
        groups.tensor, {&totals.tensor, &totals.cpu, &recorded.recording, device});
    recorded.world = record_communicator(groups.world,
                                         {&totals.world, &totals.cpu, &recorded.recording, device});
    for (std::unique_ptr<Communicator>* group :
         {&groups.data, &groups.zero, &groups.zero_replicas, &groups.embedding})
      if (RecordingCommunicator* recorder = record_communicator(
              *group, {&totals.reduction, &totals.cpu, &recorded.recording, device}))
        recorded.reduction.push_back(recorder);
  };
  return build;
}

// What the steps measured beyond the timer's per-instruction numbers.
struct ReplaySteps {
  double job_step_seconds = 0;
  std::vector<double> each_step_seconds, each_step_loss;
  // A warm-up step's, counted without the timer's per-instruction synchronizations.
  uint64_t step_synchronizations = 0, step_bytes_zeroed = 0;
};

// The warm-up and measured steps; the measured ones run under the timer,
// with the communicators recording.
ReplaySteps run_replay_steps(const ReplayOptions& options, RankState& rank,
                             const SyntheticSamples& samples, const schema::Training& training,
                             int seq_len, InstructionTimer& timer, bool& recording) {
  Communicator& world = *rank.groups.world;
  const float loss_scale =
      1.0f / static_cast<float>(static_cast<int64_t>(training.global_batch_size()) * seq_len);
  const float learning_rate = training.optimizer()->learning_rate();
  int optimizer_step = 0;
  const ExecutorHooks hooks = optimizer_hooks(
      *rank.optimizer, [&] { rank.optimizer->step(learning_rate, optimizer_step); });
  ReplaySteps run;
  const bool profile_range = rank.ops->backend() == kernels::Backend::kCuda;
  const double tokens_per_step = static_cast<double>(training.global_batch_size()) * seq_len;
  for (int step = 0; step < options.warmup + options.steps; ++step) {
    const bool measured = step >= options.warmup;
    optimizer_step = step + 1;
    timer.start_step(step + 1 - options.warmup, measured);
    recording = false;
    world.barrier();
    recording = measured;
    const Clock::time_point start = Clock::now();
    const uint64_t synchronizations_before = rank.sync_counter->synchronizations();
    const uint64_t zeroed_before = rank.sync_counter->bytes_zeroed();
    rank.optimizer->zero_gradients();
    // ncu --profile-from-start off: the measured steps' kernels only.
    if (profile_range && step == options.warmup) kernels::cuda_profiler_range(true);
    const double loss_sum =
        rank.executor->run_step(samples, static_cast<int64_t>(step) * training.global_batch_size(),
                                loss_scale, hooks, measured ? &timer : nullptr);
    rank.optimizer->finish_step();
    if (!measured) {
      run.step_synchronizations = rank.sync_counter->synchronizations() - synchronizations_before;
      run.step_bytes_zeroed = rank.sync_counter->bytes_zeroed() - zeroed_before;
    }
    rank.ops->synchronize();
    double seconds = seconds_between(start, Clock::now());
    recording = false;
    if (profile_range && step + 1 == options.warmup + options.steps)
      kernels::cuda_profiler_range(false);
    // Outside the timed span, as training counts it.
    run.each_step_loss.push_back(job_loss_sum(rank, loss_sum) / tokens_per_step);
    if (!measured) continue;
    timer.measurement().step_seconds += seconds;
    world.all_reduce(&seconds, 1, ReduceOp::kMax);  // the job's step is its slowest rank's
    run.job_step_seconds += seconds / options.steps;
    run.each_step_seconds.push_back(seconds);
  }
  return run;
}

// Every rank's measurement: this rank's collectives and memory peaks added
// to its timer's, gathered, each with its pipeline transfers split into
// transfer and wait.
std::vector<RankMeasurement> gather_rank_measurements(InstructionTimer& timer,
                                                      const RecordedGroups& recorded,
                                                      const RankState& rank,
                                                      const MeshCoordinates& mesh,
                                                      int virtual_stages) {
  Communicator& world = *rank.groups.world;
  RankMeasurement& mine = timer.measurement();
  if (recorded.tensor) mine.tensor = recorded.tensor->split_recorded_calls();
  for (RecordingCommunicator* group : recorded.reduction)
    mine.reduction += group->split_recorded_calls();
  if (recorded.world) mine.world = recorded.world->split_recorded_calls();
  for (int c = 0; c < kNumMemoryCategories; ++c)
    mine.memory_peak[c] = static_cast<double>(rank.memory->peak(static_cast<MemoryCategory>(c)));
  mine.memory_peak_total = static_cast<double>(rank.memory->peak_total());
  mine.communicator_buffers = static_cast<double>(rank.groups.communicator_device_bytes_total());
  const std::vector<TransferAndWait> transfer_waits =
      gather_transfer_waits(timer.transfers(), world, mesh, virtual_stages, rank.pipeline.v_shape);
  std::vector<RankMeasurement> ranks = gather_measurements(mine, world);
  for (size_t r = 0; r < transfer_waits.size(); ++r) ranks[r].pipeline = transfer_waits[r];
  return ranks;
}

// The trace and the timeline of every rank's spans, one track a rank.
void write_span_files(const ReplayOptions& options, const std::vector<TimelineSpan>& spans,
                      const MeshCoordinates& mesh, int world_size) {
  std::vector<TimelineTrack> tracks;
  for (int r = 0; r < world_size; ++r) {
    const MeshCoordinates at = mesh_coordinates(r, mesh.pipeline_size, mesh.data_size,
                                                mesh.tensor_size, mesh.context_size);
    tracks.push_back(
        {r, "rank " + std::to_string(r) + " (stage " + std::to_string(at.pipeline_rank) + ", dp " +
                std::to_string(at.data_rank) +
                (mesh.context_size > 1 ? ", cp " + std::to_string(at.context_rank) : "") + ", tp " +
                std::to_string(at.tensor_rank) + ")"});
  }
  if (!options.trace_path.empty()) {
    write_file_atomically(options.trace_path, chrome_trace_json(spans, tracks));
    std::cout << "trace: " << options.trace_path << " (open in https://ui.perfetto.dev)"
              << std::endl;
  }
  if (!options.timeline_path.empty()) {
    write_file_atomically(options.timeline_path,
                          timeline_svg(spans, tracks, "replay of " + options.plan_path));
    std::cout << "timeline: " << options.timeline_path << std::endl;
  }
}

// The leader's report: printed, and written where asked.
nlohmann::json report_replay(const ReplayOptions& options, const schema::Plan& plan,
                             const char* backend, const ReplaySteps& steps,
                             const std::vector<RankMeasurement>& ranks) {
  const ReplayRun run{.plan_path = options.plan_path,
                      .backend = backend,
                      .steps = options.steps,
                      .warmup = options.warmup,
                      .job_step_seconds = steps.job_step_seconds,
                      .each_step_seconds = steps.each_step_seconds,
                      .each_step_loss = steps.each_step_loss};
  nlohmann::json report = replay_report(plan, run, ranks);
  if (options.warmup > 0) {
    report["host_synchronizations_per_step"] = steps.step_synchronizations;
    report["bytes_zeroed_per_step"] = steps.step_bytes_zeroed;  // rank 0's, a warm-up step's
  }
  std::cout << replay_table(report);
  if (options.warmup > 0)
    std::cout << "host synchronizations per step (rank 0, an untimed warm-up step): "
              << steps.step_synchronizations << std::endl;
  if (!options.report_path.empty()) {
    write_file_atomically(options.report_path, report.dump(2) + "\n");
    std::cout << "report: " << options.report_path << std::endl;
  }
  return report;
}

nlohmann::json replay_on_this_rank(const ReplayOptions& options, MpiSession& session) {
  // ---- validate everything before allocating anything -----------------------
  check_replay_options(options);
  const LoadedPlan loaded = load_plan(options.plan_path);
  const schema::Plan& plan = loaded.plan();
  const MeshCoordinates mesh = place_this_rank(loaded, session);
  const StageModelSpec model = stage_model_from_plan(loaded, mesh.pipeline_rank);
  const schema::Training& training = *plan.training();
  const schema::Cluster* cluster = plan.predictions() ? plan.predictions()->cluster() : nullptr;

  // ---- build, with every communicator recorded --------------------------------
  RecordedGroups recorded;
  RankState rank = build_rank_state(loaded, model, mesh, session,
                                    recording_build_options(options, cluster, recorded));
  initialize_parameters(rank, training.seed());
  Communicator& world = *rank.groups.world;
  const bool leader = session.world_rank() == 0;
  if (leader)
    std::cout << "paraplan replay: " << options.plan_path << ", " << session.world_size()
              << " rank(s), backend " << kernels::backend_name(rank.ops->backend()) << ", "
              << options.warmup << " warm-up + " << options.steps << " measured steps" << std::endl;

  // ---- run ---------------------------------------------------------------------
  const SyntheticSamples samples(model.config.vocab_size, model.config.seq_len, training.seed());
  const bool keep_spans = !options.trace_path.empty() || !options.timeline_path.empty();
  world.barrier();  // a common time origin for the trace
  const int virtual_stages = plan.schedule()->virtual_stages();
  InstructionTimer timer(Clock::now(), &recorded.totals, keep_spans,
                         rank.ops->backend() == kernels::Backend::kCpu, virtual_stages);
  const ReplaySteps steps = run_replay_steps(options, rank, samples, training, model.config.seq_len,
                                             timer, recorded.recording);

  // ---- attribute waits, gather and report --------------------------------------------
  const std::vector<RankMeasurement> ranks =
      gather_rank_measurements(timer, recorded, rank, mesh, virtual_stages);
  std::vector<TimelineSpan> spans;
  if (keep_spans) spans = gather_spans(timer.spans(), world, virtual_stages);
  if (!leader) return {};
  nlohmann::json report =
      report_replay(options, plan, kernels::backend_name(rank.ops->backend()), steps, ranks);
  if (keep_spans) write_span_files(options, spans, mesh, session.world_size());
  return report;
}

}  // namespace

nlohmann::json replay(const ReplayOptions& options) {
  MpiSession session;
  try {
    return replay_on_this_rank(options, session);
  } catch (const std::exception& error) {
    if (session.world_size() > 1) MpiSession::abort_job(error.what());
    throw;
  }
}

}  // namespace paraplan
