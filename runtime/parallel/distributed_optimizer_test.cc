// distributed_optimizer_test.cc: the gradient norm DistributedOptimizer::step
// returns, under mpirun, for every mesh of the world size (pipeline, data and
// tensor parallel, ZeRO-1 with small buckets, ZeRO-2 and 3 unit by unit),
// fp32 and bf16, against the norm of the whole model's gradient computed on
// the host element by element: each sharded tensor's parts once, a
// tensor-parallel replica once, the tied embedding once, data-parallel
// replicas once. And ZeRO-2 and 3's fp32 gradient shard updates the bf16
// master weights exactly as ZeRO-1's bf16 shard where the sums are exact;
// step() is one Ops::adamw_runs, every element once over the ZeRO group, and
// waits for nothing (finish_step() reads the norm).
#include "runtime/parallel/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/forwarding_ops.h"
#include "kernels/ops.h"
#include "kernels/sync_counting_ops.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/model/gpt/gpt_stage.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/testing/mpi_test_support.h"

namespace paraplan {
namespace {

struct Mesh {
  int pipeline, data, tensor, zero_stage;
};

// Gradient values that depend on the element's place in the whole model (its
// stage and tensor rank), never on the data rank: every data-parallel replica
// holds the same gradients, so their sum (the reduction sums: each rank's loss
// is already scaled by 1 / global batch) is exactly data_size times them. The last stage's tied
// embedding copy is zero, so the first stage's reduced copy is its own.
std::vector<float> fill(const GptLayout& layout, int pipeline_rank, size_t buffer_elements) {
  std::vector<float> values(buffer_elements, 0.0f);
  for (const ParameterTensor& tensor : layout.tensors()) {
    if (tensor.name == "transformer.wte.weight" && !layout.stage().has_embedding) continue;
    const int rank = tensor.shard == ShardKind::kReplicated ? 0 : layout.tensor_rank();
    for (size_t i = 0; i < tensor.size; ++i) {
      const size_t seed = (tensor.offset + i) * 31 + pipeline_rank * 7 + rank * 13;
      values[tensor.offset + i] = 0.01f * static_cast<float>(static_cast<int>(seed % 201) - 100);
    }
  }
  return values;
}

double counted_squares(const GptLayout& layout, const std::vector<float>& values) {
  double sum = 0;
  for (const ParameterTensor& tensor : layout.tensors()) {
    if (tensor.shard == ShardKind::kReplicated && layout.tensor_rank() != 0) continue;
    if (tensor.name == "transformer.wte.weight" && !layout.stage().has_embedding) continue;
    for (size_t i = 0; i < tensor.size; ++i)
      sum += double{values[tensor.offset + i]} * values[tensor.offset + i];
  }
  return sum;
}

// One mesh's stage and optimizer; bucket_elements 1000: under ZeRO-1 each
// rank owns many ranges, cut mid-tensor.
struct MeshStage {
  MeshStage(const Mesh& mesh, kernels::Ops& ops, const TransformerConfig& config)
      : groups(make_process_groups(Transport::kMpi, mesh.pipeline, mesh.data, mesh.tensor, 1, ops)),
        layers(config.num_layers / mesh.pipeline),
        layout(config,
               StageSpec{groups.mesh.pipeline_rank * layers, layers, groups.mesh.pipeline_rank == 0,
                         groups.mesh.pipeline_rank == mesh.pipeline - 1},
               groups.mesh.tensor_rank, mesh.tensor),
        memory(ops),
        buffer(DistributedOptimizer::buffer_elements(layout.num_elements(), mesh.zero_stage,
                                                     mesh.data)),
        stage(layout, ops, memory,
              ModelStageOptions{.recompute = std::vector<RecomputeMode>(layers),
                                .tensor_group = mesh.tensor > 1 ? groups.tensor.get() : nullptr,
                                .buffer_elements = buffer,
                                .gradients_elsewhere = shards_gradients(mesh.zero_stage),
                                .parameters_elsewhere = shards_parameters(mesh.zero_stage)}),
        optimizer(stage, ops, memory, groups, AdamWSettings{}, mesh.zero_stage, 1000) {}
  ProcessGroups groups;
  int layers;
  GptLayout layout;
  MemoryTracker memory;
  size_t buffer;
  GptStage stage;
  DistributedOptimizer optimizer;
};

// values (fp32, one per buffer element) as the stage's gradients, rounded to
// the storage dtype: the whole buffer, or under ZeRO-2 and 3 unit by unit,
// each reduce-scattered as it is written.
void write_gradients(kernels::Ops& ops, MeshStage& s, const std::vector<float>& values) {
  const kernels::DType dtype = ops.storage_dtype();
  ShardedGradients* sharded = s.optimizer.sharded_gradients();
  if (sharded == nullptr) {
    std::vector<char> stored(ops.storage_bytes(values.size()));
    kernels::host_from_float(stored.data(), values.data(), dtype, values.size());
    ops.copy_from_host(s.stage.gradients(), stored.data(), stored.size());
    return;
  }
  for (const GradientBucket& unit : sharded->buckets()) {
    const size_t n = unit.end - unit.begin;
    std::vector<char> stored(ops.storage_bytes(n));
    kernels::host_from_float(stored.data(), values.data() + unit.begin, dtype, n);
    ops.copy_from_host(sharded->gradient(unit.begin), stored.data(), stored.size());
    sharded->unit_done(unit.begin);
  }
}

// bf16: the values rounded first, so every sum over replicas (of equal
// values, a power-of-two count of them) stays exact and the norm's double sum
// sees exactly what is stored, in either dtype.
TEST(DistributedOptimizer, GradientNormCountsEachElementOfTheModelOnce) {
  const int world = testing::world_size();
  std::vector<Mesh> meshes;
  for (int pipeline : {1, 2})
    for (int tensor : {1, 2})
      for (int zero_stage : {0, 1, 2, 3}) {
        if (world % (pipeline * tensor) != 0) continue;
        meshes.push_back({pipeline, world / (pipeline * tensor), tensor, zero_stage});
      }
  TransformerConfig config;
  config.num_layers = 4;
  for (kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, dtype);
    for (const Mesh& mesh : meshes) {
      SCOPED_TRACE(std::string(kernels::dtype_name(dtype)) + " pp " +
                   std::to_string(mesh.pipeline) + " dp " + std::to_string(mesh.data) + " tp " +
                   std::to_string(mesh.tensor) + " zero " + std::to_string(mesh.zero_stage));
      MeshStage s(mesh, *ops, config);
      std::vector<float> values = fill(s.layout, s.groups.mesh.pipeline_rank, s.buffer);
      if (dtype == kernels::DType::kBFloat16)
        for (float& value : values) value = kernels::round_to_bfloat16(value);
      write_gradients(*ops, s, values);

      double expected = s.groups.mesh.data_rank == 0 ? counted_squares(s.layout, values) : 0.0;
      MPI_Allreduce(MPI_IN_PLACE, &expected, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      expected = mesh.data * std::sqrt(expected);
      s.optimizer.reduce_gradients();
      s.optimizer.step(1e-3f, 1);
      const double norm = s.optimizer.finish_step();
      EXPECT_GT(expected, 1.0);  // clipping at 1.0 is active
      // Exact where the replicas are a power of two; else their sum rounds,
      // by half an ulp of the storage dtype per element (2^-24 in fp32,
      // 2^-8 in bf16): the norm moves by less than twice that.
      const bool exact = (mesh.data & (mesh.data - 1)) == 0;
      const double tolerance = exact                               ? 1e-12
                               : dtype == kernels::DType::kFloat32 ? std::ldexp(1.0, -23)
                                                                   : std::ldexp(1.0, -7);
      EXPECT_NEAR(norm, expected, expected * tolerance);
      s.optimizer.wait_for_parameters();
    }
  }
}

// bf16 storage, every rank data-parallel: ZeRO-2 and 3 read fp32 gradients
// from their shard (Ops::adamw_float_gradients), ZeRO-1 bf16 ones from its;
// where every sum is exact both hold the same values, so two steps give
// bitwise the same master weights and moments (clipped: the norm is above 1).
TEST(DistributedOptimizer, Fp32GradientShardStepsAsZeroOneWhereSumsAreExact) {
  const int world = testing::world_size();
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kBFloat16);
  TransformerConfig config;
  config.num_layers = 2;
  std::vector<float> reference_weights, reference_first, reference_second, reference_stage;
  for (int zero_stage : {1, 2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero_stage));
    MeshStage s({1, world, 1, zero_stage}, *ops, config);
    const size_t n = s.layout.num_elements();
    std::vector<float> weights(n);
    for (size_t i = 0; i < n; ++i)
      weights[i] = kernels::round_to_bfloat16(0.001f * static_cast<float>(i % 97) - 0.05f);
    s.optimizer.load_parameters(weights.data());
    std::vector<float> values = fill(s.layout, 0, s.buffer);
    for (float& value : values) value = kernels::round_to_bfloat16(value);
    for (int step = 1; step <= 2; ++step) {
      s.optimizer.zero_gradients();
      write_gradients(*ops, s, values);
      s.optimizer.reduce_gradients();
      s.optimizer.step(1e-2f, step);
      EXPECT_GT(s.optimizer.finish_step(), 1.0);
    }
    // A checkpoint reads the state a range at a time, each ZeRO rank sending
    // its part to the first: ranges of 100 elements split ZeRO-1's buckets
    // (1000 elements) and ZeRO-2/3's units (whole layers) alike, and no
    // device memory is taken for it.
    const uint64_t workspace_before = s.memory.peak(MemoryCategory::kWorkspace);
    using Array = DistributedOptimizer::StateArray;
    std::vector<float> first(n), second(n);
    for (size_t begin = 0; begin < n; begin += 100) {
      const size_t end = std::min(n, begin + 100);
      s.optimizer.read_range(Array::kParameters, begin, end, weights.data() + begin);
      s.optimizer.read_range(Array::kFirstMoment, begin, end, first.data() + begin);
      s.optimizer.read_range(Array::kSecondMoment, begin, end, second.data() + begin);
    }
    EXPECT_EQ(s.memory.peak(MemoryCategory::kWorkspace), workspace_before);
    // Only the first rank receives the ranges; the others' copies go on from
    // its (what a checkpoint would load).
    s.groups.world->broadcast(weights.data(), n, 0);
    s.groups.world->broadcast(first.data(), n, 0);
    s.groups.world->broadcast(second.data(), n, 0);
    // What the next forward reads: the stage's whole buffer under ZeRO-1 and
    // 2, gathered in place (with 3 ranks ZeRO-2's units are padded, and a
    // unit's padding spills into the next unit's parameters).
    std::vector<float> stage_weights(zero_stage < 3 ? n : 0);
    s.optimizer.wait_for_parameters();
    if (zero_stage < 3) {
      s.stage.read_parameters(stage_weights.data(), n);
      size_t stale = 0;  // elements that are not the master weight in bf16
      for (size_t i = 0; i < n; ++i)
        stale += stage_weights[i] != kernels::round_to_bfloat16(weights[i]);
      EXPECT_EQ(stale, 0u) << "of " << n;
    }
    if (zero_stage == 1) {
      reference_weights = weights, reference_first = first, reference_second = second;
      reference_stage = stage_weights;
      continue;
    }
    if (zero_stage == 2) {
      EXPECT_EQ(stage_weights, reference_stage);
    }
    EXPECT_EQ(weights, reference_weights);
    EXPECT_EQ(first, reference_first);
    EXPECT_EQ(second, reference_second);
  }
}

// A checkpoint's round trip, a range at a time: the state loaded in ranges
// of 37 elements (across ZeRO-1's buckets, ZeRO-2/3's units and the ranks'
// chunks), each only where the rank keeps it (held_ranges), reads back
// bitwise in ranges of 53, and the stage's storage copy holds the values
// rounded; ZeRO-0 as well.
TEST(DistributedOptimizer, StateLoadsAndReadsBackARangeAtATime) {
  const int world = testing::world_size();
  TransformerConfig config;
  config.num_layers = 2;
  for (const kernels::DType dtype : {kernels::DType::kFloat32, kernels::DType::kBFloat16}) {
    std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, dtype);
    for (int zero_stage : {0, 1, 2, 3}) {
      SCOPED_TRACE("zero " + std::to_string(zero_stage) + ", " + kernels::dtype_name(dtype));
      MeshStage s({1, world, 1, zero_stage}, *ops, config);
      const size_t n = s.layout.num_elements();
      using Array = DistributedOptimizer::StateArray;
      std::vector<std::vector<float>> loaded(3, std::vector<float>(n));
      for (size_t a = 0; a < 3; ++a)
        for (size_t i = 0; i < n; ++i)
          loaded[a][i] = 0.001f * static_cast<float>((i * (a + 3)) % 101) - 0.05f;
      // Only the parts the rank keeps (what a checkpoint's reader reads):
      // anything they missed would read back as the fresh state's zeros.
      size_t held_moments = 0;
      for (size_t a = 0; a < 3; ++a)
        for (size_t begin = 0; begin < n; begin += 37)
          for (const auto& [lo, hi] :
               s.optimizer.held_ranges(static_cast<Array>(a), begin, std::min(n, begin + 37))) {
            s.optimizer.load_range(static_cast<Array>(a), lo, hi, loaded[a].data() + lo);
            if (a == 1) held_moments += hi - lo;
          }
      // A ZeRO rank keeps (and so reads) its part of the moments, not all.
      if (zero_stage > 0) {
        EXPECT_LE(held_moments, n / world + 2000) << "of " << n;
      } else {
        EXPECT_EQ(held_moments, n);
      }
      // One ZeRO group: every rank reads (sends its part); without ZeRO every
      // rank holds all the state and reads its own.
      EXPECT_TRUE(s.optimizer.reads_state());
      EXPECT_EQ(s.optimizer.state_readers(), world);
      // Into the last ZeRO rank: any reader may be a range's writer.
      const int destination = s.optimizer.state_readers() - 1;
      for (size_t a = 0; a < 3 && s.optimizer.reads_state(); ++a) {
        std::vector<float> read(n, -1.0f);
        for (size_t begin = 0; begin < n; begin += 53)
          s.optimizer.read_range(static_cast<Array>(a), begin, std::min(n, begin + 53),
                                 read.data() + begin, destination);
        if (s.optimizer.state_reader_rank() == destination) {
          EXPECT_EQ(read, loaded[a]) << "array " << a;
        }
      }
      if (zero_stage < 3) {  // the storage copy: every element, rounded
        std::vector<float> stored(n);
        s.stage.read_parameters(stored.data(), n);
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i)
          wrong += stored[i] != (dtype == kernels::DType::kBFloat16
                                     ? kernels::round_to_bfloat16(loaded[0][i])
                                     : loaded[0][i]);
        EXPECT_EQ(wrong, 0u) << "of " << n;
      }
    }
  }
}

// Counts the adamw_runs calls and the elements they update; forwards all.
class AdamWRunCountingOps final : public kernels::ForwardingOps {
 public:
  using ForwardingOps::ForwardingOps;
  void adamw_runs(const std::vector<kernels::AdamWRun>& runs, bool float_gradients,
                  const kernels::AdamWStep& hyperparameters,
                  const kernels::GradientClip& clip) override {
    ++calls;
    for (const kernels::AdamWRun& run : runs) elements += run.n;
    ForwardingOps::adamw_runs(runs, float_gradients, hyperparameters, clip);
  }
  int calls = 0;
  size_t elements = 0;
  // The backend's own memory (Ops::internal_bytes), as a test sets it.
  size_t internal_bytes() const override { return backend_bytes; }
  size_t backend_bytes = 0;
};

TEST(DistributedOptimizer, StepIsOneAdamWLaunchAndWaitsForNothing) {
  const int world = testing::world_size();
  TransformerConfig config;
  config.num_layers = 2;
  for (int zero_stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero_stage));
    auto counting_syncs = std::make_unique<kernels::SyncCountingOps>(
        kernels::make_cpu_ops(1, kernels::DType::kBFloat16));
    kernels::SyncCountingOps* syncs = counting_syncs.get();
    AdamWRunCountingOps ops(std::move(counting_syncs));
    MeshStage s({1, world, 1, zero_stage}, ops, config);
    write_gradients(ops, s, fill(s.layout, 0, s.buffer));
    s.optimizer.reduce_gradients();
    const uint64_t before = syncs->synchronizations();
    s.optimizer.step(1e-3f, 1);
    EXPECT_EQ(syncs->synchronizations(), before) << "step() waited for the device";
    EXPECT_EQ(ops.calls, 1);
    // Every parameter is updated once: by each rank without ZeRO, by one
    // rank of the group with it.
    unsigned long long updated = ops.elements;
    MPI_Allreduce(MPI_IN_PLACE, &updated, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(updated, s.layout.num_elements() * (zero_stage == 0 ? world : 1));
    // Scratch the backend grew inside the step (cuDNN's workspace) is in
    // the peak once the step finishes, for train and replay alike.
    const uint64_t peak_before = s.memory.peak_total();
    ops.backend_bytes = peak_before + (size_t{1} << 20);
    EXPECT_GT(s.optimizer.finish_step(), 0.0);
    EXPECT_GE(s.memory.peak_total(), peak_before + (size_t{1} << 20));
    s.optimizer.wait_for_parameters();
  }
}

}  // namespace
}  // namespace paraplan
