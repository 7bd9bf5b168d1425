// data_order_record.cc: the data order train_state.json records
// (data_order_record.h).
#include "runtime/checkpoint/data_order_record.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>

#include "common/json_fields.h"
#include "common/printable_text.h"

namespace paraplan {
namespace {

// Far above any real job (a blend of 64k datasets, a million shards each is
// refused), low enough that a hostile train_state.json stays cheap to read.
constexpr size_t kMaxRecordedDatasets = 65536;
constexpr size_t kMaxRecordedFiles = 1 << 20;

std::string files_text(const DataOrderRecord::Dataset& dataset) {
  if (dataset.files.empty()) return "no files";
  std::string text = printable_text(dataset.files.front());
  if (dataset.files.size() > 1)
    text += " and " + std::to_string(dataset.files.size() - 1) + " more";
  return text;
}

std::string weight_text(double weight) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", weight);
  return text;
}

int64_t total_tokens(const DataOrderRecord::Dataset& dataset) {
  int64_t total = 0;
  for (const int64_t tokens : dataset.tokens) total += tokens;
  return total;
}

const nlohmann::json& array_field(const nlohmann::json& json, const char* key,
                                  const std::string& path, size_t most) {
  const auto found = json.find(key);
  if (found == json.end() || !found->is_array())
    throw std::runtime_error(path + ": data_order." + key + " must be an array");
  if (found->size() > most)
    throw std::runtime_error(path + ": data_order." + key + " holds " +
                             std::to_string(found->size()) + " entries; at most " +
                             std::to_string(most));
  return *found;
}

}  // namespace

nlohmann::ordered_json data_order_to_json(const DataOrderRecord& record) {
  nlohmann::ordered_json json;
  json["shuffle"] = record.shuffle;
  json["seed"] = record.seed;
  json["datasets"] = nlohmann::ordered_json::array();
  for (const DataOrderRecord::Dataset& dataset : record.datasets) {
    nlohmann::ordered_json entry;
    entry["weight"] = dataset.weight;
    entry["files"] = dataset.files;
    entry["tokens"] = dataset.tokens;
    json["datasets"].push_back(entry);
  }
  return json;
}

DataOrderRecord data_order_from_json(const nlohmann::json& json, const std::string& path) {
  if (!json.is_object()) throw std::runtime_error(path + ": data_order must be an object");
  DataOrderRecord record;
  const auto shuffle = json.find("shuffle");
  if (shuffle == json.end() || !shuffle->is_boolean())
    throw std::runtime_error(path + ": data_order.shuffle must be true or false");
  record.shuffle = shuffle->get<bool>();
  const auto seed = json.find("seed");
  if (seed == json.end() || !seed->is_number_unsigned())
    throw std::runtime_error(path + ": data_order.seed must be a non-negative integer");
  record.seed = seed->get<uint64_t>();
  for (const nlohmann::json& entry : array_field(json, "datasets", path, kMaxRecordedDatasets)) {
    if (!entry.is_object())
      throw std::runtime_error(path + ": data_order.datasets holds " + json_value_text(entry) +
                               ", expected an object");
    DataOrderRecord::Dataset dataset;
    dataset.weight = json_number(entry, "weight", path, 1.0);
    if (!(dataset.weight > 0) || !std::isfinite(dataset.weight))
      throw std::runtime_error(path + ": a data_order weight must be positive and finite");
    const nlohmann::json& files = array_field(entry, "files", path, kMaxRecordedFiles);
    const nlohmann::json& tokens = array_field(entry, "tokens", path, kMaxRecordedFiles);
    if (files.size() != tokens.size())
      throw std::runtime_error(path + ": data_order: " + std::to_string(files.size()) +
                               " files but " + std::to_string(tokens.size()) + " token counts");
    for (size_t i = 0; i < files.size(); ++i) {
      if (!files[i].is_string() || !tokens[i].is_number_unsigned())
        throw std::runtime_error(path + ": data_order: a file must be a string, its tokens a " +
                                 "non-negative integer");
      if (tokens[i].get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw std::runtime_error(path + ": data_order: a token count is out of range");
      dataset.files.push_back(files[i].get<std::string>());
      dataset.tokens.push_back(static_cast<int64_t>(tokens[i].get<uint64_t>()));
    }
    record.datasets.push_back(std::move(dataset));
  }
  return record;
}

std::string data_order_changes(const DataOrderRecord& saved, const DataOrderRecord& now) {
  std::vector<std::string> changes;
  if (saved.shuffle != now.shuffle)
    changes.push_back(std::string("shuffle ") + (saved.shuffle ? "true" : "false") + " -> " +
                      (now.shuffle ? "true" : "false"));
  if (saved.seed != now.seed && (saved.shuffle || now.shuffle))
    changes.push_back("seed " + std::to_string(saved.seed) + " -> " + std::to_string(now.seed));
  if (saved.datasets.size() != now.datasets.size())
    changes.push_back(std::to_string(saved.datasets.size()) + " dataset(s) -> " +
                      std::to_string(now.datasets.size()));
  for (size_t d = 0; d < std::min(saved.datasets.size(), now.datasets.size()); ++d) {
    const DataOrderRecord::Dataset &before = saved.datasets[d], &after = now.datasets[d];
    const std::string which = saved.datasets.size() > 1 ? "dataset " + std::to_string(d) + " " : "";
    if (before.files != after.files)
      changes.push_back(which + "files " + files_text(before) + " (" +
                        std::to_string(before.files.size()) + ") -> " + files_text(after) + " (" +
                        std::to_string(after.files.size()) + ")");
    else if (before.tokens != after.tokens)
      changes.push_back(which + "tokens " + std::to_string(total_tokens(before)) + " -> " +
                        std::to_string(total_tokens(after)) + " (the files changed)");
    if (before.weight != after.weight)
      changes.push_back(which + "weight " + weight_text(before.weight) + " -> " +
                        weight_text(after.weight));
  }
  std::string text;
  for (const std::string& change : changes) text += (text.empty() ? "" : "; ") + change;
  return text;
}

}  // namespace paraplan
