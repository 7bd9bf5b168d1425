// transfer_order.cc: the check of a plan's pipeline transfers before any
// runs (transfer_order.h), asked of the stream checker (schema/stream_check.h).
#include "runtime/pipeline/transfer_order.h"

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "schema/pipeline_layout.h"
#include "schema/stream_check.h"

namespace paraplan {
void check_transfer_order(const schema::Schedule& schedule, const std::string& plan_name) {
  const int p = static_cast<int>(schedule.stages()->size());
  const PipelineLayout layout = PipelineLayout::of(schedule.kind(), p, schedule.virtual_stages());
  std::vector<StreamOps> streams;
  for (const schema::StageSchedule* stage : *schedule.stages())
    streams.push_back(stage->instructions() ? stream_ops(*stage->instructions()) : StreamOps{});
  const std::string remedy = " Was the plan edited by hand? Make it again with `paraplan plan`";
  if (const std::optional<std::string> problem = check_link_order(layout, streams))
    throw std::invalid_argument(plan_name + ": schedule: " + *problem +
                                "; matched by posting order (NCCL) the transfers would swap "
                                "buffers." +
                                remedy);
  // Streams that pair but wait on each other would hang until the collective
  // timeout: under NCCL, or MPI above its eager limit, a send is done only
  // once its receive is posted, and the executor waits for sends before it
  // writes their buffers again.
  if (const std::optional<StreamStall> stall = find_stream_stall(layout, streams)) {
    std::string where;
    for (const std::string& line : stall_lines(*stall, streams))
      where += (where.empty() ? "" : "; ") + line;
    throw std::invalid_argument(plan_name +
                                ": schedule: the pipeline stages' streams wait on each other and "
                                "would hang (a send is done once its receive is posted, and a "
                                "buffer is written again once its send is done): " +
                                where + "." + remedy);
  }
}

}  // namespace paraplan
