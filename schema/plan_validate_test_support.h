// plan_validate_test_support.h: test support for validate_plan's tests: a
// case that breaks one field of a valid plan and the fragments its violation
// must hold, and the check every such case runs.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "schema/plan_test_support.h"

namespace paraplan::test_plans {

// True when one violation contains every fragment.
inline bool has_violation(const std::vector<std::string>& violations,
                          const std::vector<std::string>& fragments) {
  for (const std::string& violation : violations) {
    bool all = true;
    for (const std::string& fragment : fragments) {
      all = all && violation.find(fragment) != std::string::npos;
    }
    if (all) return true;
  }
  return false;
}

struct ViolationCase {
  std::string name;
  std::function<void(PlanSpec&)> mutate;
  std::vector<std::string> fragments;  // all must appear in one violation
};

// The valid 2 x 2 x 2 plan broken by `broken.mutate` has one violation
// holding every fragment.
inline void expect_reported(const ViolationCase& broken) {
  PlanSpec spec = make_plan_spec(2, 2, 2, 8, 4);
  ASSERT_TRUE(violations_of(spec).empty()) << joined(violations_of(spec));
  broken.mutate(spec);
  const std::vector<std::string> violations = violations_of(spec);
  std::string wanted;
  for (const std::string& fragment : broken.fragments) wanted += "[" + fragment + "] ";
  EXPECT_TRUE(has_violation(violations, broken.fragments))
      << "wanted one violation containing " << wanted << "\ngot:\n"
      << joined(violations);
}

}  // namespace paraplan::test_plans
