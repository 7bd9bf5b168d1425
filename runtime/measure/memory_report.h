// memory_report.h: each rank's measured peak memory by category, beside what
// the plan predicted for its pipeline stage. Printed at the end of a run.
#pragma once

#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/model/memory_tracker.h"
#include "runtime/parallel/parallel_state.h"
#include "schema/plan_io.h"

namespace paraplan {

// Collective over the world; every rank returns the same table.
std::string memory_report(const LoadedPlan& plan, const MemoryTracker& memory,
                          ProcessGroups& groups);

}  // namespace paraplan
