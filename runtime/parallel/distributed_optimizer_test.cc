// distributed_optimizer_test.cc: the gradient norm DistributedOptimizer::step
// returns, under mpirun, for every mesh of the world size (pipeline, data and
// tensor parallel, ZeRO-1 with small buckets), against the norm of the whole
// model's gradient computed on the host element by element: each sharded
// tensor's parts once, a tensor-parallel replica once, the tied embedding
// once, data-parallel replicas once.
#include "runtime/parallel/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/ops.h"
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

TEST(DistributedOptimizer, GradientNormCountsEachElementOfTheModelOnce) {
  const int world = testing::world_size();
  std::vector<Mesh> meshes;
  for (int pipeline : {1, 2})
    for (int tensor : {1, 2})
      for (int zero_stage : {0, 1}) {
        if (world % (pipeline * tensor) != 0) continue;
        meshes.push_back({pipeline, world / (pipeline * tensor), tensor, zero_stage});
      }
  std::unique_ptr<kernels::Ops> ops = kernels::make_cpu_ops(1, kernels::DType::kFloat32);
  TransformerConfig config;
  config.num_layers = 4;
  for (const Mesh& mesh : meshes) {
    SCOPED_TRACE("pp " + std::to_string(mesh.pipeline) + " dp " + std::to_string(mesh.data) +
                 " tp " + std::to_string(mesh.tensor) + " zero " + std::to_string(mesh.zero_stage));
    ProcessGroups groups =
        make_process_groups(Transport::kMpi, mesh.pipeline, mesh.data, mesh.tensor, 1, *ops);
    const MeshCoordinates& coordinates = groups.mesh;
    const int layers = config.num_layers / mesh.pipeline;
    const StageSpec spec{coordinates.pipeline_rank * layers, layers, coordinates.pipeline_rank == 0,
                         coordinates.pipeline_rank == mesh.pipeline - 1};
    const GptLayout layout(config, spec, coordinates.tensor_rank, mesh.tensor);
    MemoryTracker memory(*ops);
    const size_t buffer =
        DistributedOptimizer::buffer_elements(layout.num_elements(), mesh.zero_stage, mesh.data);
    GptStage stage(
        layout, *ops, memory,
        ModelStageOptions{.recompute = std::vector<RecomputeMode>(layers),
                          .tensor_group = mesh.tensor > 1 ? groups.tensor.get() : nullptr,
                          .buffer_elements = buffer});
    // Small buckets: under ZeRO-1 each rank owns many ranges, cut mid-tensor.
    DistributedOptimizer optimizer(stage, *ops, memory, groups, AdamWSettings{}, mesh.zero_stage,
                                   1000);
    const std::vector<float> values = fill(layout, coordinates.pipeline_rank, buffer);
    ops->copy_from_host(stage.gradients(), values.data(), values.size() * sizeof(float));

    double expected = coordinates.data_rank == 0 ? counted_squares(layout, values) : 0.0;
    MPI_Allreduce(MPI_IN_PLACE, &expected, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    expected = mesh.data * std::sqrt(expected);
    optimizer.reduce_gradients();
    const double norm = optimizer.step(1e-3f, 1);
    EXPECT_GT(expected, 1.0);  // clipping at 1.0 is active
    EXPECT_NEAR(norm, expected, expected * 1e-12);
    optimizer.wait_for_parameters();
  }
}

}  // namespace
}  // namespace paraplan
