// memory_report.cc: gathers the per-rank peaks and formats the table.
#include "runtime/measure/memory_report.h"

#include <cstdio>
#include <vector>

namespace paraplan {

std::string memory_report(const LoadedPlan& loaded, const MemoryTracker& memory,
                          ProcessGroups& groups) {
  // Each rank fills its row; a sum over the world gathers the rows. Beside
  // the tracker's categories: NCCL's buffers (measured as its communicators
  // were made; 0 on MPI), and the peak with them.
  constexpr int kNccl = kNumMemoryCategories, kPeak = kNumMemoryCategories + 1;
  constexpr int kColumns = kNumMemoryCategories + 2;
  std::vector<double> rows(static_cast<size_t>(groups.world_size) * kColumns, 0.0);
  double* mine = rows.data() + static_cast<size_t>(groups.world_rank) * kColumns;
  for (int c = 0; c < kNumMemoryCategories; ++c)
    mine[c] = static_cast<double>(memory.peak(static_cast<MemoryCategory>(c)));
  mine[kNccl] = static_cast<double>(groups.communicator_device_bytes_total());
  mine[kPeak] = static_cast<double>(memory.peak_total()) + mine[kNccl];
  groups.world->all_reduce(rows.data(), rows.size(), ReduceOp::kSum);

  const schema::Plan& plan = loaded.plan();
  const auto* predicted = plan.predictions() ? plan.predictions()->stages() : nullptr;
  const MeshCoordinates& mesh = groups.mesh;
  const double mib = 1024.0 * 1024.0;
  std::string out =
      "memory (MiB, peak per category; predicted = the plan's estimate for the stage)\n"
      "rank | stage | dp | tp | weights | gradients | optimizer | gathered | activations | "
      "workspace | nccl (predicted) |"
      "   peak | predicted | measured/predicted\n";
  char line[320];
  for (int rank = 0; rank < groups.world_size; ++rank) {
    const MeshCoordinates at = mesh_coordinates(rank, mesh.pipeline_size, mesh.data_size,
                                                mesh.tensor_size, mesh.context_size);
    const double* row = rows.data() + static_cast<size_t>(rank) * kColumns;
    double stage_total = 0, stage_nccl = 0;
    // Validated plans give every stage its memory (plan_validate.cc); a missing
    // breakdown prints as no prediction all the same.
    const schema::StageMemory* stage_memory =
        predicted && at.pipeline_rank < static_cast<int>(predicted->size())
            ? predicted->Get(at.pipeline_rank)->memory()
            : nullptr;
    if (stage_memory != nullptr) {
      // What the runtime allocates: less the transient reserve (plan.fbs).
      stage_total = static_cast<double>(stage_memory->total() - stage_memory->transient_reserve());
      stage_nccl = static_cast<double>(stage_memory->communicator_buffers());
    }
    std::snprintf(
        line, sizeof line,
        "%4d | %5d | %2d | %2d | %7.2f | %9.2f | %9.2f | %8.2f | %11.2f | %9.2f | %7.2f "
        "(%7.2f) | %6.2f | %9.2f | %s\n",
        rank, at.pipeline_rank, at.data_rank, at.tensor_rank, row[0] / mib, row[1] / mib,
        row[2] / mib, row[3] / mib, row[4] / mib, row[5] / mib, row[kNccl] / mib, stage_nccl / mib,
        row[kPeak] / mib, stage_total / mib,
        stage_total > 0 ? (std::to_string(row[kPeak] / stage_total).substr(0, 5)).c_str() : "-");
    out += line;
  }
  return out;
}

}  // namespace paraplan
