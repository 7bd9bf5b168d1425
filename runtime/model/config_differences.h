// config_differences.h: the lines an architecture's config_differences
// returns (architecture.h), one per field where a checkpoint's model differs
// from the plan's, in config.json's names: "n_layer is 6 but the plan's model
// has 4 layers".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace paraplan {

class ConfigDifferences {
 public:
  // "<field> is <saved> but the plan's model has <plan> <unit>".
  void integer(const char* field, int64_t saved, int64_t plan, const char* unit) {
    if (saved != plan)
      lines.push_back(std::string(field) + " is " + std::to_string(saved) +
                      " but the plan's model has " + std::to_string(plan) + " " + unit);
  }
  // "<field> is <saved> but the plan's model uses <plan>".
  void real(const char* field, float saved, float plan) {
    if (saved != plan)
      lines.push_back(std::string(field) + " is " + std::to_string(saved) +
                      " but the plan's model uses " + std::to_string(plan));
  }
  void tied_embeddings(bool saved, bool plan) {
    if (saved != plan)
      lines.push_back(std::string("tie_word_embeddings is ") + (saved ? "true" : "false") +
                      " but the plan's model " + (plan ? "ties" : "does not tie") +
                      " its embeddings");
  }

  std::vector<std::string> lines;
};

}  // namespace paraplan
