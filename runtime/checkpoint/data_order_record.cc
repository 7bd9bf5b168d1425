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

// Far above any real blend, low enough that a hostile file stays cheap.
constexpr size_t kMaxRecordedDatasets = 4096;

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

std::string files_text(const DataOrderRecord::Dataset& dataset) {
  if (dataset.files == 0) return "no files";
  std::string text = printable_text(dataset.first_file);
  if (dataset.files > 1) text += " and " + std::to_string(dataset.files - 1) + " more";
  return text;
}

double weight_total(const DataOrderRecord& record) {
  double total = 0;
  for (const DataOrderRecord::Dataset& dataset : record.datasets) total += dataset.weight;
  return total;
}

// The same share of the blend, up to the last bits of the division.
bool same_share(double a, double a_total, double b, double b_total) {
  return std::fabs(a / a_total - b / b_total) <= 1e-12;
}

// Every field of a dataset's entry is required: paraplan writes them all, and
// a field read as a default would compare equal to an order it is not.
void refuse_field(const std::string& path, const std::string& field, const nlohmann::json* value,
                  const char* valid) {
  throw std::runtime_error(path + ": " + field + ": " +
                           (value == nullptr ? std::string("missing") : json_value_text(*value)) +
                           "; must be " + valid);
}

// Field `key` of a dataset's entry: an integer >= 0.
int64_t dataset_integer(const nlohmann::json& entry, const char* key, const std::string& where,
                        const std::string& path) {
  const auto found = entry.find(key);
  if (found == entry.end() || !found->is_number_integer() ||
      (!found->is_number_unsigned() && found->get<int64_t>() < 0) ||
      (found->is_number_unsigned() && found->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)))
    refuse_field(path, where + "." + key, found == entry.end() ? nullptr : &*found,
                 "an integer in 0..9223372036854775807");
  return found->get<int64_t>();
}

// Field `key` of a dataset's entry: a string (first_file, files_digest).
std::string dataset_string(const nlohmann::json& entry, const char* key, const std::string& where,
                           const std::string& path, const char* valid) {
  const auto found = entry.find(key);
  if (found == entry.end() || !found->is_string())
    refuse_field(path, where + "." + key, found == entry.end() ? nullptr : &*found, valid);
  return found->get<std::string>();
}

}  // namespace

DataOrderRecord::Dataset dataset_record(const std::vector<std::string>& files,
                                        const std::vector<int64_t>& tokens, double weight) {
  DataOrderRecord::Dataset dataset;
  dataset.files = static_cast<int64_t>(files.size());
  dataset.first_file = files.empty() ? "" : files.front();
  uint64_t hash = 14695981039346656037ull;  // FNV-1a 64
  for (const std::string& file : files) {
    for (const char c : file) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    hash = (hash ^ 0u) * 1099511628211ull;  // the separator: "a" + "bc" is not "ab" + "c"
  }
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx", static_cast<unsigned long long>(hash));
  dataset.files_digest = digest;
  for (const int64_t count : tokens) dataset.tokens += count;
  dataset.weight = weight;
  return dataset;
}

nlohmann::ordered_json data_order_to_json(const DataOrderRecord& record) {
  nlohmann::ordered_json json;
  json["shuffle"] = record.shuffle;
  json["seed"] = record.seed;
  json["datasets"] = nlohmann::ordered_json::array();
  for (const DataOrderRecord::Dataset& dataset : record.datasets)
    json["datasets"].push_back({{"weight", dataset.weight},
                                {"files", dataset.files},
                                {"first_file", dataset.first_file},
                                {"files_digest", dataset.files_digest},
                                {"tokens", dataset.tokens}});
  return json;
}

DataOrderRecord data_order_from_json(const nlohmann::json& json, const std::string& path) {
  if (!json.is_object())
    throw std::runtime_error(path + ": data_order: " + json_value_text(json) +
                             "; must be an object (shuffle, seed, datasets)");
  DataOrderRecord record;
  const auto shuffle = json.find("shuffle");
  if (shuffle == json.end() || !shuffle->is_boolean())
    throw std::runtime_error(path + ": data_order.shuffle: " +
                             (shuffle == json.end() ? "missing" : json_value_text(*shuffle)) +
                             "; must be true or false");
  record.shuffle = shuffle->get<bool>();
  const auto seed = json.find("seed");
  if (seed == json.end() || !seed->is_number_unsigned())
    throw std::runtime_error(
        path + ": data_order.seed: " + (seed == json.end() ? "missing" : json_value_text(*seed)) +
        "; must be an integer >= 0");
  record.seed = seed->get<uint64_t>();
  const auto datasets = json.find("datasets");
  if (datasets == json.end() || !datasets->is_array() || datasets->empty() ||
      datasets->size() > kMaxRecordedDatasets)
    throw std::runtime_error(path + ": data_order.datasets: " +
                             (datasets == json.end() ? "missing" : json_value_text(*datasets)) +
                             "; must be an array of 1 to " + std::to_string(kMaxRecordedDatasets) +
                             " datasets");
  for (size_t d = 0; d < datasets->size(); ++d) {
    const nlohmann::json& entry = (*datasets)[d];
    const std::string where = "data_order.datasets[" + std::to_string(d) + "]";
    if (!entry.is_object())
      throw std::runtime_error(path + ": " + where + ": " + json_value_text(entry) +
                               "; must be an object");
    DataOrderRecord::Dataset dataset;
    const auto weight = entry.find("weight");
    if (weight == entry.end() || !weight->is_number())
      refuse_field(path, where + ".weight", weight == entry.end() ? nullptr : &*weight,
                   "a positive finite number");
    dataset.weight = weight->get<double>();
    if (!(dataset.weight > 0) || !std::isfinite(dataset.weight))
      throw std::runtime_error(path + ": " + where + ".weight: " + number_text(dataset.weight) +
                               "; must be a positive finite number");
    dataset.files = dataset_integer(entry, "files", where, path);
    dataset.tokens = dataset_integer(entry, "tokens", where, path);
    dataset.first_file =
        dataset_string(entry, "first_file", where, path, "the path of the dataset's first file");
    dataset.files_digest = dataset_string(entry, "files_digest", where, path,
                                          "16 hex digits (FNV-1a 64 of the dataset's paths)");
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
  const double saved_total = weight_total(saved), now_total = weight_total(now);
  for (size_t d = 0; d < std::min(saved.datasets.size(), now.datasets.size()); ++d) {
    const DataOrderRecord::Dataset &before = saved.datasets[d], &after = now.datasets[d];
    const std::string which = saved.datasets.size() > 1 ? "dataset " + std::to_string(d) + " " : "";
    if (before.files != after.files || before.first_file != after.first_file)
      changes.push_back(which + "files " + files_text(before) + " (" +
                        std::to_string(before.files) + ") -> " + files_text(after) + " (" +
                        std::to_string(after.files) + ")");
    else if (before.files_digest != after.files_digest)
      changes.push_back(which + "files: " + std::to_string(after.files) + " from " +
                        files_text(after) + ", but other paths than before");
    else if (before.tokens != after.tokens)
      changes.push_back(which + "tokens " + std::to_string(before.tokens) + " -> " +
                        std::to_string(after.tokens) + " (the files changed)");
  }
  // The blend: each dataset's share of the draws (1, 1 is 2, 2).
  bool same_blend = saved.datasets.size() == now.datasets.size();
  std::string weights_before, weights_after;
  for (size_t d = 0; d < saved.datasets.size() && same_blend; ++d) {
    same_blend =
        same_share(saved.datasets[d].weight, saved_total, now.datasets[d].weight, now_total);
  }
  if (!same_blend && saved.datasets.size() == now.datasets.size()) {
    for (size_t d = 0; d < saved.datasets.size(); ++d) {
      weights_before += (d ? ", " : "") + number_text(saved.datasets[d].weight);
      weights_after += (d ? ", " : "") + number_text(now.datasets[d].weight);
    }
    changes.push_back("weights " + weights_before + " -> " + weights_after);
  }
  std::string text;
  for (const std::string& change : changes) text += (text.empty() ? "" : "; ") + change;
  return text;
}

}  // namespace paraplan
