// stage_collectives.h: what stage_cost.cc and stage_reduction.cc share to
// cost one collective of a stage: the profile's measured entry for the
// operation and group size, or the analytic ring (internal to cost/).
#pragma once

#include <optional>

#include "planner/cost/communication_model.h"
#include "planner/cost/profile.h"

namespace paraplan {
namespace stage_collectives {

using RingSeconds = double (*)(const Link&, int, double);

// A collective over `ranks` ranks of a `bytes` buffer: the measured entry when
// the group stays inside a node and the profile has one, else the analytic ring.
inline double collective_seconds(const std::optional<CollectiveEntry>& measured, RingSeconds ring,
                                 const LinkModel& links, bool crosses_nodes, int ranks,
                                 double bytes) {
  if (ranks <= 1) return 0;
  if (measured && !crosses_nodes) return measured->seconds(bytes);
  return ring(links.link(crosses_nodes), ranks, bytes);
}

// busy: what a CPU-clock second (a dedicated core's) takes with every rank
// of the node busy (busy_wall_factor).
inline std::optional<CollectiveEntry> measured_collective(const MeasuredProfile* profile,
                                                          CollectiveOperation operation, int ranks,
                                                          double busy) {
  if (profile == nullptr || ranks <= 1) return std::nullopt;
  const CollectiveEntry* entry = profile->find_collective(operation, ranks);
  if (entry == nullptr) return std::nullopt;
  return entry->clock == ProfileClock::kCpu ? entry->scaled(busy) : *entry;
}

}  // namespace stage_collectives
}  // namespace paraplan
