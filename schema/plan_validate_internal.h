// plan_validate_internal.h: what plan_validate.cc and plan_validate_schedule.cc
// share (internal to schema/): the violation list and its message helpers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schema/number_text.h"
#include "schema/plan_io.h"

namespace paraplan::plan_validation {

using schema_text::checked_product;
using schema_text::number;
using schema_text::product_text;

inline std::string number(int64_t value) {
  return std::to_string(value);
}

// "1 entry", "3 entries".
inline std::string count_of(int64_t n, const char* singular, const char* plural) {
  return std::to_string(n) + " " + (n == 1 ? singular : plural);
}

// Violations in the order found, each "field: problem; what would be valid".
class Violations {
 public:
  void add(const std::string& field, const std::string& problem) {
    list_.push_back(field + ": " + problem);
  }
  std::vector<std::string> take() { return std::move(list_); }

 private:
  std::vector<std::string> list_;
};

// schedule.virtual_stages where it is valid (1..kMaxVirtualStages), else 1.
int32_t virtual_stages_of(const schema::Plan& plan);

// Checks schedule: one stream per stage, each stream on its own (plan_validate_schedule.cc).
void check_schedule(const schema::Plan& plan, Violations& v);

}  // namespace paraplan::plan_validation
