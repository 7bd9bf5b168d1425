// text_test_support.h: contains(text, fragment) for gtest, which shows both
// strings when the fragment is missing: the assertion the plan reader's and
// the JSON dump's tests make of messages and dumps. Test code only.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace paraplan::test_plans {

// Passes when text contains fragment; on failure shows both.
inline ::testing::AssertionResult contains(const std::string& text, const std::string& fragment) {
  if (text.find(fragment) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "missing [" << fragment << "] in:\n" << text;
}

}  // namespace paraplan::test_plans
