// transfer_order.cc: the pairwise check of a plan's pipeline transfers
// (transfer_order.h), asked of the stream checker (schema/stream_check.h).
#include "runtime/pipeline/transfer_order.h"

#include <stdexcept>
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
  if (const std::optional<std::string> problem = check_link_order(layout, streams))
    throw std::invalid_argument(plan_name + ": schedule: " + *problem +
                                "; matched by posting order (NCCL) the transfers would swap "
                                "buffers. Was the plan edited by hand? Make it again with "
                                "`paraplan plan`");
}

}  // namespace paraplan
