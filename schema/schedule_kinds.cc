// schedule_kinds.cc: the rows of schedule_kinds.h.
#include "schema/schedule_kinds.h"

#include <stdexcept>
#include <string>

namespace paraplan {
namespace {

ScheduleKindTraits make_traits(schema::ScheduleKind kind) {
  using schema::ScheduleKind;
  switch (kind) {
    case ScheduleKind::OneForwardOneBackward:
      return {kind, "1f1b", ChunkRule::kOne, false};
    case ScheduleKind::GPipe:
      return {kind, "gpipe", ChunkRule::kOne, false};
    case ScheduleKind::Interleaved1F1B:
      return {kind, "interleaved", ChunkRule::kChosen, false};
    case ScheduleKind::ZeroBubbleH1:
      return {kind, "zb-h1", ChunkRule::kOne, true};
    case ScheduleKind::ZeroBubbleV:
      return {kind, "zb-v", ChunkRule::kTwoInAV, true};
    case ScheduleKind::DualPipeV:
      return {kind, "dualpipe-v", ChunkRule::kTwoInAV, true};
  }
  throw std::invalid_argument("schedule kind " + std::to_string(static_cast<int>(kind)) +
                              " is not one of paraplan's");
}

}  // namespace

bool is_schedule_kind(schema::ScheduleKind kind) {
  return kind >= schema::ScheduleKind::MIN && kind <= schema::ScheduleKind::MAX;
}

const std::vector<ScheduleKindTraits>& every_schedule_kind() {
  static const std::vector<ScheduleKindTraits> rows = [] {
    std::vector<ScheduleKindTraits> made;
    for (int k = static_cast<int>(schema::ScheduleKind::MIN);
         k <= static_cast<int>(schema::ScheduleKind::MAX); ++k)
      made.push_back(make_traits(static_cast<schema::ScheduleKind>(k)));
    return made;
  }();
  return rows;
}

const ScheduleKindTraits& schedule_kind_traits(schema::ScheduleKind kind) {
  if (!is_schedule_kind(kind)) make_traits(kind);  // throws, naming the value
  return every_schedule_kind()[static_cast<size_t>(kind) -
                               static_cast<size_t>(schema::ScheduleKind::MIN)];
}

}  // namespace paraplan
