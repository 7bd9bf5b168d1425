// profiler.cc: the measurements behind `paraplan profile`.
#include "runtime/measure/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <thread>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/measure/collective_profiler.h"
#include "runtime/measure/group_pace.h"
#include "runtime/measure/interleaved_timing.h"
#include "runtime/measure/span_clock.h"
#include "runtime/model/architecture.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/pipeline/rank_state.h"

#ifndef PARAPLAN_VERSION
#define PARAPLAN_VERSION "unknown"
#endif

namespace paraplan {

namespace {

// A tensor-parallel group of the right size that moves nothing: the stage
// computes its shard's work and the collectives are measured on their own.
class ComputeOnlyGroup final : public Communicator {
 public:
  explicit ComputeOnlyGroup(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  void all_reduce(void*, size_t, kernels::DType, ReduceOp) override {}
  void all_reduce(double*, size_t, ReduceOp) override {}
  void reduce_scatter(const void*, void*, size_t, kernels::DType) override {}
  void all_gather(const void*, void*, size_t, kernels::DType) override {}
  void broadcast(void*, size_t, kernels::DType, int) override {}
  void barrier() override {}

 private:
  int size_;
  std::string name_ = "tensor (compute only)";
};

// The measurement window (ProfileRequest::minimum_window_seconds).
double minimum_window = 0.2;

// A shape's compute pieces are timed in this many interleaved rounds, so that
// every piece is timed over the same stretch of the machine's states: a
// shared host's speed drifts by 10-20% within seconds, and pieces timed one
// after the other each got their own moment's speed (a block's forward at one
// speed, its backward at another) where a step runs them all at one.
constexpr int kComputeRounds = 5;

// n storage elements of pseudo-random values in [-scale/2, scale/2).
void fill_host(kernels::Ops& ops, void* device, size_t n, float scale) {
  std::vector<float> host(n);
  uint32_t state = 12345;
  for (float& x : host) {
    state = state * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(state >> 8) / 16777216.0f - 0.5f);
  }
  std::vector<char> converted(ops.storage_bytes(n));
  kernels::host_from_float(converted.data(), host.data(), ops.storage_dtype(), n);
  ops.copy_from_host(device, converted.data(), converted.size());
}

void fill_tokens(kernels::Ops& ops, int32_t* device, size_t n, int vocab) {
  std::vector<int32_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>((i * 2654435761u) % vocab);
  ops.copy_from_host(device, host.data(), n * sizeof(int32_t));
}

// A block is timed as the mean of two in a row, as a stage runs them: a
// block timed alone, run after run, finds its weights still in the cache
// from its previous run (on this 2-core VM, 1 MB of L2 per core, a tiny
// model's block forward measured 4% fast at micro-batch 4, against a stage
// of 2 or 4 blocks), which no block of a stage of several does.
const StageSpec kBlocksUnderTest{0, 2, false, false};

TransformerConfig blocks_config(const TransformerConfig& config) {
  TransformerConfig blocks = config;
  blocks.num_layers = kBlocksUnderTest.num_layers;
  return blocks;
}

// A stage holding `spec`, built to time one micro-batch's forward and
// backward through it.
class StageUnderTest {
 public:
  // group: the real tensor-parallel group; null: a compute-only stand-in.
  StageUnderTest(kernels::Ops& ops, const TransformerConfig& config, const StageSpec& spec,
                 int tensor_parallel, int micro_batch, Communicator* group = nullptr)
      : memory_(ops),
        layout_(make_parameter_layout(config, spec, 0, tensor_parallel)),
        compute_only_(tensor_parallel) {
    if (group == nullptr) group = &compute_only_;
    stage_ = make_model_stage(
        *layout_, ops, memory_,
        ModelStageOptions{
            .micro_batch_size = micro_batch,
            .recompute = std::vector<RecomputeMode>(spec.num_layers, RecomputeMode::None),
            .tensor_group = tensor_parallel > 1 ? group : nullptr});
    std::vector<float> params(layout_->num_elements());
    layout_->initialize(params.data(), 1);
    stage_->load_parameters(params.data(), params.size());
    ops.zero_bytes(stage_->gradients(), ops.storage_bytes(layout_->num_elements()));
    const size_t tokens = static_cast<size_t>(micro_batch) * config.seq_len;
    const size_t activations = tokens * config.d_model;
    if (spec.has_embedding || spec.has_head) {
      fill_tokens(ops, stage_->tokens(0), tokens, config.vocab_size);
      fill_tokens(ops, stage_->targets(0), tokens, config.vocab_size);
    }
    if (!spec.has_embedding) fill_host(ops, stage_->input(0), activations, 1.0f);
    if (!spec.has_head) fill_host(ops, stage_->output_gradient(0), activations, 1e-3f);
    loss_scale_ = 1.0f / static_cast<float>(tokens);
  }

  // Its forward and backward as timed pieces. Backward needs the forward's
  // saved state (and a head's fresh dlogits): each timed backward follows an
  // untimed forward. Timing it directly, not as the pair minus the forward,
  // keeps it positive on a noisy machine.
  void add_pieces(std::vector<TimedPiece>& pieces, double* forward_seconds,
                  double* backward_seconds) {
    pieces.push_back({forward(), nullptr, forward_seconds});
    pieces.push_back({backward(), forward(), backward_seconds});
  }
  std::function<void()> forward() {
    return [this] { stage_->forward(0, loss_scale_); };
  }
  std::function<void()> backward() {
    return [this] { stage_->backward(0); };
  }

 private:
  MemoryTracker memory_;
  std::unique_ptr<ParameterLayout> layout_;
  ComputeOnlyGroup compute_only_;
  std::unique_ptr<ModelStage> stage_;
  float loss_scale_ = 1;
};

// The attention core's buffers: one fused attention_forward (scores,
// softmax, values), what selective recompute repeats in backward.
class AttentionCoreUnderTest {
 public:
  AttentionCoreUnderTest(kernels::Ops& ops, const TransformerConfig& config, int tensor_parallel,
                         int micro_batch)
      : ops_(ops),
        memory_(ops),
        micro_batch_(micro_batch),
        seq_len_(config.seq_len),
        heads_(config.num_heads / tensor_parallel),
        kv_heads_(config.kv_heads() / tensor_parallel),
        head_dim_(config.head_dim()) {
    const size_t tokens = static_cast<size_t>(micro_batch) * config.seq_len;
    const size_t qkv_elements = tokens * (heads_ + 2 * kv_heads_) * head_dim_;
    qkv_ = memory_.allocate(ops.storage_bytes(qkv_elements), MemoryCategory::kWorkspace);
    out_ = memory_.allocate(ops.storage_bytes(tokens * heads_ * head_dim_),
                            MemoryCategory::kWorkspace);
    logsumexp_ = static_cast<float*>(
        memory_.allocate(tokens * heads_ * sizeof(float), MemoryCategory::kWorkspace));
    fill_host(ops, qkv_, qkv_elements, 1.0f);
  }

  TimedPiece piece(double* seconds) {
    return {[this] {
              ops_.attention_forward(out_, logsumexp_, qkv_, micro_batch_, seq_len_, heads_,
                                     kv_heads_, head_dim_);
            },
            nullptr, seconds};
  }

 private:
  kernels::Ops& ops_;
  MemoryTracker memory_;
  int micro_batch_, seq_len_, heads_, kv_heads_, head_dim_;
  void *qkv_ = nullptr, *out_ = nullptr;
  float* logsumexp_ = nullptr;
};

schema::DType plan_dtype(kernels::DType dtype) {
  return dtype == kernels::DType::kBFloat16 ? schema::DType::BFloat16 : schema::DType::Float32;
}

ProfileEntry measure_compute(kernels::Ops& ops, const TransformerConfig& config,
                             int tensor_parallel, int micro_batch, int repetitions) {
  TransformerConfig one_block = config;
  one_block.num_layers = 1;
  StageUnderTest blocks(ops, blocks_config(config), kBlocksUnderTest, tensor_parallel, micro_batch);
  StageUnderTest embedding(ops, one_block, {0, 0, true, false}, tensor_parallel, micro_batch);
  StageUnderTest head(ops, one_block, {1, 0, false, true}, tensor_parallel, micro_batch);
  AttentionCoreUnderTest attention_core(ops, config, tensor_parallel, micro_batch);
  ProfileEntry entry;
  ProfiledTimes& times = entry.times;
  std::vector<TimedPiece> pieces;
  blocks.add_pieces(pieces, &times.block_forward, &times.block_backward);
  pieces.push_back(attention_core.piece(&times.attention_core_forward));
  embedding.add_pieces(pieces, &times.embedding_forward, &times.embedding_backward);
  head.add_pieces(pieces, &times.head_forward, &times.head_backward);
  time_interleaved(ops, repetitions, minimum_window, kComputeRounds, Timing::kWork, pieces);
  times.block_forward /= kBlocksUnderTest.num_layers;
  times.block_backward /= kBlocksUnderTest.num_layers;
  entry.seq_len = config.seq_len;
  entry.d_model = config.d_model;
  entry.num_heads = config.num_heads;
  entry.ffn_size = config.ffn_size;
  entry.vocab_size = config.vocab_size;
  entry.dtype = plan_dtype(ops.storage_dtype());
  entry.tensor_parallel = tensor_parallel;
  entry.micro_batch_size = micro_batch;
  return entry;
}

// The mean over the world of each rank's number (every rank measured at once).
double world_mean(MpiSession& session, double value) {
  if (!session.uses_mpi()) return value;
  PARAPLAN_MPI_CHECK("profile", "allreduce",
                     MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
  return value / session.world_size();
}

void average_times(MpiSession& session, ProfiledTimes& times) {
  for (double* seconds : {&times.block_forward, &times.block_backward,
                          &times.attention_core_forward, &times.embedding_forward,
                          &times.embedding_backward, &times.head_forward, &times.head_backward})
    *seconds = world_mean(session, *seconds);
}

// Whether every rank of every node has a core of its own on the CPU backend
// (agreed over the world): where ranks share cores the planner's simulation
// models the waiting, and a measurement would count it twice.
bool every_rank_has_a_core(const kernels::Ops& ops, MpiSession& session) {
  int own = ops.backend() == kernels::Backend::kCpu && session.uses_mpi() &&
            session.local_size() * cpu_threads_per_rank(session) <=
                static_cast<int>(std::thread::hardware_concurrency());
  if (session.uses_mpi())
    PARAPLAN_MPI_CHECK("profile", "allreduce",
                       MPI_Allreduce(MPI_IN_PLACE, &own, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  return own != 0;
}

// A block's pace in lock-step with its real tensor-parallel group (world
// ranks r / t together, tensor parallelism innermost as plans lay it out)
// against the compute-only block, every group at once (group_pace.h): the
// world mean of each member's figures. Collective over the world.
TensorGroupPace measure_tensor_group_pace(kernels::Ops& ops, const TransformerConfig& config,
                                          const ProfileEntry& entry, MpiSession& session,
                                          int repetitions) {
  const int t = entry.tensor_parallel;
  MPI_Comm comm;
  PARAPLAN_MPI_CHECK(
      "profile", "comm_split",
      MPI_Comm_split(MPI_COMM_WORLD, session.world_rank() / t, session.world_rank(), &comm));
  GroupCallTotals totals;
  RecordingCommunicator group(std::make_unique<MpiCommunicator>(comm, "tensor (profile)"),
                              totals.recorder_totals());
  const TransformerConfig blocks = blocks_config(config);
  StageUnderTest alone(ops, blocks, kBlocksUnderTest, t, entry.micro_batch_size);
  StageUnderTest grouped(ops, blocks, kBlocksUnderTest, t, entry.micro_batch_size, &group);
  TensorGroupPace pace;
  const std::vector<PacedPiece> pieces = {
      {.alone = alone.forward(), .grouped = grouped.forward(), .ratio = &pace.forward_ratio},
      {.alone = alone.backward(),
       .alone_prepare = alone.forward(),
       .grouped = grouped.backward(),
       .grouped_prepare = grouped.forward(),
       .ratio = &pace.backward_ratio}};
  // As the compute pieces: at least the repetitions and the window, in rounds.
  const double pair =
      (entry.times.block_forward + entry.times.block_backward) * kBlocksUnderTest.num_layers;
  int runs = std::max((repetitions + kComputeRounds - 1) / kComputeRounds,
                      static_cast<int>(std::ceil(minimum_window / kComputeRounds / pair)));
  runs = std::min(runs, 1000);
  PARAPLAN_MPI_CHECK("profile", "allreduce",
                     MPI_Allreduce(MPI_IN_PLACE, &runs, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  pace.wait_per_call = time_in_group(ops, group, totals, runs, kComputeRounds, pieces);
  pace.forward_ratio = world_mean(session, pace.forward_ratio);
  pace.backward_ratio = world_mean(session, pace.backward_ratio);
  pace.wait_per_call = world_mean(session, pace.wait_per_call);
  return pace;
}

// The optimizer step's compute per parameter: the norm, then AdamW (which applies the clip).
double measure_optimizer(kernels::Ops& ops, int repetitions) {
  const size_t n = size_t{1} << 20;
  MemoryTracker memory(ops);
  // fp32 master weights and moments; storage parameters and gradients (a
  // bf16 job's step also rounds the parameters and reads bf16 gradients).
  auto allocate = [&](size_t bytes) { return memory.allocate(bytes, MemoryCategory::kWorkspace); };
  float* master = static_cast<float*>(allocate(n * sizeof(float)));
  float* first_moment = static_cast<float*>(allocate(n * sizeof(float)));
  float* second_moment = static_cast<float*>(allocate(n * sizeof(float)));
  // fp32 storage: the parameters are the master weights, updated in place as
  // the runtime does (no copy).
  void* parameters =
      ops.storage_dtype() == kernels::DType::kFloat32 ? master : allocate(ops.storage_bytes(n));
  void* gradients = allocate(ops.storage_bytes(n));
  fill_host(ops, parameters, n, 1e-2f);
  fill_host(ops, gradients, n, 1e-2f);
  if (parameters != master) ops.convert_to_float(master, parameters, n);
  ops.zero_bytes(first_moment, n * sizeof(float));
  ops.zero_bytes(second_moment, n * sizeof(float));
  kernels::AdamWStep hyperparameters;
  hyperparameters.learning_rate = 1e-4f;
  hyperparameters.beta2 = 0.95f;
  hyperparameters.weight_decay = 0.1f;
  hyperparameters.step = 0;
  hyperparameters.gradient_scale = 0.5f;  // the clip factor rides along in AdamW
  const double seconds = mean_seconds(ops, repetitions, minimum_window, Timing::kWork, [&] {
    volatile double squares = ops.sum_of_squares(gradients, n);
    (void)squares;
    ++hyperparameters.step;
    ops.adamw(master, parameters, gradients, first_moment, second_moment, n, hyperparameters);
  });
  return seconds / static_cast<double>(n);
}

GemmEntry measure_gemm(kernels::Ops& ops, const TransformerConfig& config, int tensor_parallel,
                       int micro_batch, int repetitions) {
  const int rows = micro_batch * config.seq_len, in = config.d_model;
  const int out = config.ffn_size / tensor_parallel;
  MemoryTracker memory(ops);
  auto allocate = [&](size_t n) {
    void* x = memory.allocate(ops.storage_bytes(n), MemoryCategory::kWorkspace);
    fill_host(ops, x, n, 1.0f);
    return x;
  };
  void* a = allocate(static_cast<size_t>(rows) * in);
  void* w = allocate(static_cast<size_t>(out) * in);
  void* c = allocate(static_cast<size_t>(rows) * out);
  const double seconds = mean_seconds(ops, repetitions, minimum_window, Timing::kWall,
                                      [&] { ops.linear_forward(c, a, w, nullptr, rows, in, out); });
  GemmEntry entry;
  entry.m = rows;
  entry.n = out;
  entry.k = in;
  entry.dtype = plan_dtype(ops.storage_dtype());
  entry.flops_per_second = 2.0 * rows * in * out / seconds;
  return entry;
}

// The best rate of a large square GEMM through the backend's linear op: the
// peak this process reaches while the others run theirs; and the cores it got
// meanwhile (its CPU time over the wall time, all its threads).
struct PeakMeasurement {
  double flops_per_second = 0, cores = 0;
};
PeakMeasurement measure_peak_flops(kernels::Ops& ops, int repetitions) {
  const int n = 1024;
  MemoryTracker memory(ops);
  std::vector<void*> buffers;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(
        memory.allocate(ops.storage_bytes(size_t{1} * n * n), MemoryCategory::kWorkspace));
    fill_host(ops, buffers.back(), size_t{1} * n * n, 1.0f);
  }
  SpanClock span;
  const double seconds = mean_seconds(ops, repetitions, minimum_window, Timing::kWall, [&] {
    ops.linear_forward(buffers[2], buffers[0], buffers[1], nullptr, n, n, n);
  });
  span.stop();
  return {2.0 * n * n * n / seconds, span.cpu() / std::max(span.wall(), 1e-9)};
}

// Bytes per second an elementwise op streams (reads two arrays, writes one)
// over buffers far larger than any cache.
double measure_memory_bandwidth(kernels::Ops& ops, int repetitions) {
  const size_t n = size_t{1} << 23;
  MemoryTracker memory(ops);
  void* a = memory.allocate(ops.storage_bytes(n), MemoryCategory::kWorkspace);
  void* b = memory.allocate(ops.storage_bytes(n), MemoryCategory::kWorkspace);
  void* out = memory.allocate(ops.storage_bytes(n), MemoryCategory::kWorkspace);
  fill_host(ops, a, n, 1.0f);
  fill_host(ops, b, n, 1.0f);
  const double seconds = mean_seconds(ops, repetitions, minimum_window, Timing::kWall,
                                      [&] { ops.residual_forward(out, a, b, n); });
  return 3.0 * static_cast<double>(ops.storage_bytes(n)) / seconds;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

uint64_t bytes_between_collectives(const kernels::Ops& ops, const TransformerConfig& model,
                                   int micro_batch, int tensor_parallel) {
  const uint64_t d = model.d_model, ffn = model.ffn_size / std::max(tensor_parallel, 1);
  const uint64_t tokens = static_cast<uint64_t>(micro_batch) * model.seq_len;
  return ops.storage_bytes(2 * d * ffn + tokens * (d + ffn));
}

std::string describe_device(const kernels::Ops& ops) {
  if (ops.backend() == kernels::Backend::kCpu) {
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(cpuinfo, line))
      if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
        model = line.substr(line.find(':') + 2);
        break;
      }
    return model + " x " + std::to_string(std::thread::hardware_concurrency()) + " cores";
  }
  // "NVIDIA H100 80GB HBM3 (0000:1b:00.0)": the bus id tells devices of one host apart.
  return ops.device_name() + " (" + ops.device_identity() + ")";
}

DeviceProfile measure_device_profile(const ProfileRequest& request, MpiSession& session) {
  if (!(request.minimum_window_seconds >= 0))
    throw std::invalid_argument("profile: the minimum window must be >= 0 seconds");
  minimum_window = request.minimum_window_seconds;
  std::unique_ptr<kernels::Ops> ops = make_backend(request.backend, session, request.dtype);
  const int processes = session.world_size();
  // Compute and the optimizer are timed by Timing::kWork.
  const ProfileClock work_clock =
      ops->backend() == kernels::Backend::kCpu ? ProfileClock::kCpu : ProfileClock::kWall;
  auto barrier = [&] {
    if (session.uses_mpi()) PARAPLAN_MPI_CHECK("profile", "barrier", MPI_Barrier(MPI_COMM_WORLD));
  };
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  const bool own_cores = every_rank_has_a_core(*ops, session);
  DeviceProfile device;
  device.measured_on = ProfileProvenance{.backend = request.backend,
                                         .description = describe_device(*ops),
                                         .host = host,
                                         .paraplan_version = PARAPLAN_VERSION,
                                         .date = utc_now()};
  for (int tensor_parallel : request.tensor_parallel) {
    for (int micro_batch : request.micro_batch_sizes) {
      const std::pair<int, int> shape{tensor_parallel, micro_batch};
      if (std::find(request.already_measured.begin(), request.already_measured.end(), shape) !=
          request.already_measured.end())
        continue;
      barrier();
      ProfileEntry entry =
          measure_compute(*ops, request.model, tensor_parallel, micro_batch, request.repetitions);
      average_times(session, entry.times);
      if (tensor_parallel > 1 && processes % tensor_parallel == 0 && own_cores)
        entry.tensor_group =
            measure_tensor_group_pace(*ops, request.model, entry, session, request.repetitions);
      entry.parallel = processes > 1;
      entry.processes = processes;
      entry.clock = work_clock;
      device.compute.push_back(entry);
      if (session.world_rank() != 0) continue;
      std::cout << "  tp " << tensor_parallel << " x micro-batch " << micro_batch
                << ": block forward " << entry.times.block_forward * 1e3 << " ms, backward "
                << entry.times.block_backward * 1e3 << " ms";
      if (const std::optional<TensorGroupPace>& pace = entry.tensor_group)
        std::cout << "; with its group x" << pace->forward_ratio << " / x" << pace->backward_ratio
                  << ", waiting " << pace->wait_per_call * 1e6 << " us per call";
      std::cout << std::endl;
    }
    barrier();
    GemmEntry gemm = measure_gemm(
        *ops, request.model, tensor_parallel,
        *std::max_element(request.micro_batch_sizes.begin(), request.micro_batch_sizes.end()),
        request.repetitions);
    gemm.flops_per_second = world_mean(session, gemm.flops_per_second);
    gemm.processes = processes;
    device.gemm.push_back(gemm);
  }
  barrier();
  // The machine's figures, both storage dtypes (the `cpu` preset's peak and
  // bandwidth come from here).
  HardwareEntry hardware{.processes = processes,
                         .threads = request.backend == "cpu" ? cpu_threads_per_rank(session) : 1,
                         .cores = request.backend == "cpu"
                                      ? static_cast<int>(std::thread::hardware_concurrency())
                                      : 0};
  for (kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> typed = make_backend(request.backend, session, dtype);
    const PeakMeasurement peak = measure_peak_flops(*typed, request.repetitions);
    (dtype == kernels::DType::kFloat32 ? hardware.peak_flops_float32
                                       : hardware.peak_flops_bfloat16) =
        world_mean(session, peak.flops_per_second);
    // Every process busy at once: the cores they got, summed (the fp32 run's).
    if (dtype == kernels::DType::kFloat32 && request.backend == "cpu")
      hardware.available_cores = world_mean(session, peak.cores) * processes;
  }
  barrier();
  hardware.memory_bandwidth =
      world_mean(session, measure_memory_bandwidth(*ops, request.repetitions));
  device.hardware.push_back(hardware);
  barrier();
  const double per_parameter = world_mean(session, measure_optimizer(*ops, request.repetitions));
  device.optimizer.push_back(OptimizerEntry{
      .processes = processes, .seconds_per_parameter = per_parameter, .clock = work_clock});
  if (request.collectives && session.uses_mpi() && processes > 1)
    device.collectives = measure_collectives(
        *ops, CollectiveProfileRequest{.transport = request.transport,
                                       .largest_bytes = request.largest_collective_bytes,
                                       .repetitions = request.repetitions,
                                       .minimum_window_seconds = request.minimum_window_seconds,
                                       .compute_bytes = [&](int tensor_parallel) {
                                         return bytes_between_collectives(
                                             *ops, request.model,
                                             *std::max_element(request.micro_batch_sizes.begin(),
                                                               request.micro_batch_sizes.end()),
                                             tensor_parallel);
                                       }});
  return device;
}

}  // namespace paraplan
