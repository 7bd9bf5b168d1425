// data_order_record.h: the training data's order as a checkpoint records it
// (train_state.json's "data_order"): each dataset's files (their count, the
// first, and a digest of every path, so a blend of ten thousand shards stays
// a few lines), their tokens and its weight in the blend; whether samples
// are shuffled, and the seed. Samples are addressed by global index
// (runtime/data/data_loader.h), so a run resumed from `next_train_sample`
// continues the same samples only when all of these are the same; a resume
// under another order is refused (runtime/train/trainer.cc) unless the user
// accepts it by name.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace paraplan {

struct DataOrderRecord {
  struct Dataset {
    int64_t files = 0;
    std::string first_file;    // absolute, as the order reads it
    std::string files_digest;  // FNV-1a 64 of every absolute path in order, 16 hex digits
    int64_t tokens = 0;        // all its files'
    double weight = 1.0;       // in the blend, as given (compared normalized)
    bool operator==(const Dataset&) const = default;
  };
  std::vector<Dataset> datasets;
  bool shuffle = false;
  uint64_t seed = 0;
  bool operator==(const DataOrderRecord&) const = default;
};

// One dataset's entry from its files' absolute paths and tokens, in order.
DataOrderRecord::Dataset dataset_record(const std::vector<std::string>& files,
                                        const std::vector<int64_t>& tokens, double weight);

nlohmann::ordered_json data_order_to_json(const DataOrderRecord& record);
// Throws std::runtime_error naming `path` and the field for anything else.
DataOrderRecord data_order_from_json(const nlohmann::json& json, const std::string& path);

// What changed from `saved` to `now`, each change as "seed 1337 -> 42",
// joined by "; "; empty when the orders are the same. Weights are compared
// as shares of the blend (1, 1 is 2, 2); the seed only when shuffling.
std::string data_order_changes(const DataOrderRecord& saved, const DataOrderRecord& now);

}  // namespace paraplan
