// communicator.cc: mesh coordinates, world rank <-> (pipeline, data, tensor) rank.
#include "runtime/communicator.h"

#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

void check_mesh_sizes(int pipeline_size, int data_size, int tensor_size) {
  if (pipeline_size < 1 || data_size < 1 || tensor_size < 1)
    throw std::invalid_argument("mesh (pp " + std::to_string(pipeline_size) + " x dp " +
                                std::to_string(data_size) + " x tp " + std::to_string(tensor_size) +
                                "): every degree must be >= 1");
}

std::string mesh_text(const MeshCoordinates& mesh) {
  return "(pp " + std::to_string(mesh.pipeline_size) + " x dp " + std::to_string(mesh.data_size) +
         " x tp " + std::to_string(mesh.tensor_size) + ")";
}

}  // namespace

MeshCoordinates mesh_coordinates(int world_rank, int pipeline_size, int data_size,
                                 int tensor_size) {
  check_mesh_sizes(pipeline_size, data_size, tensor_size);
  MeshCoordinates mesh;
  mesh.pipeline_size = pipeline_size;
  mesh.data_size = data_size;
  mesh.tensor_size = tensor_size;
  const long long world_size = 1LL * pipeline_size * data_size * tensor_size;
  if (world_rank < 0 || world_rank >= world_size)
    throw std::out_of_range("world rank " + std::to_string(world_rank) + " is outside the mesh " +
                            mesh_text(mesh) + "; valid ranks are 0.." +
                            std::to_string(world_size - 1));
  // rank = (pipeline * dp + data) * tp + tensor: tensor innermost.
  mesh.tensor_rank = world_rank % tensor_size;
  mesh.data_rank = (world_rank / tensor_size) % data_size;
  mesh.pipeline_rank = world_rank / (tensor_size * data_size);
  return mesh;
}

int world_rank_of(const MeshCoordinates& mesh, int pipeline_rank, int data_rank, int tensor_rank) {
  check_mesh_sizes(mesh.pipeline_size, mesh.data_size, mesh.tensor_size);
  if (pipeline_rank < 0 || pipeline_rank >= mesh.pipeline_size || data_rank < 0 ||
      data_rank >= mesh.data_size || tensor_rank < 0 || tensor_rank >= mesh.tensor_size)
    throw std::out_of_range("coordinates (pipeline " + std::to_string(pipeline_rank) + ", data " +
                            std::to_string(data_rank) + ", tensor " + std::to_string(tensor_rank) +
                            ") are outside the mesh " + mesh_text(mesh));
  return (pipeline_rank * mesh.data_size + data_rank) * mesh.tensor_size + tensor_rank;
}

}  // namespace paraplan
