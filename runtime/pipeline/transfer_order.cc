// transfer_order.cc: the check of a plan's pipeline transfers before any
// runs (transfer_order.h), asked of the stream checker (schema/stream_check.h).
#include "runtime/pipeline/transfer_order.h"

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "schema/pipeline_layout.h"
#include "schema/stream_check.h"

namespace paraplan {
namespace {

// check_streams_finish's "deadlock:" and its indented lines, as one line:
// "stage 0 instruction 3 Backward(0) (blocked); stage 1: finished".
std::string one_line(const std::string& stall) {
  std::string text;
  std::istringstream lines(stall.substr(stall.find('\n') + 1));
  for (std::string line; std::getline(lines, line);)
    text += (text.empty() ? "" : "; ") + line.substr(line.find_first_not_of(' '));
  return text;
}

}  // namespace

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
  if (const std::optional<std::string> stall = check_streams_finish(layout, streams))
    throw std::invalid_argument(plan_name +
                                ": schedule: the pipeline stages' streams wait on each other and "
                                "would hang (a send is done once its receive is posted, and a "
                                "buffer is written again once its send is done): " +
                                one_line(*stall) + "." + remedy);
}

}  // namespace paraplan
