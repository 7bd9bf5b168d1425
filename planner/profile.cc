// profile.cc: reading the measured compute profile (format in profile.h and
// planner/README.md).
#include "planner/profile.h"

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

namespace paraplan {

MeasuredProfile::MeasuredProfile(std::string path, std::string device,
                                 std::vector<ProfileEntry> entries, bool prefer_parallel)
    : path_(std::move(path)),
      device_(std::move(device)),
      entries_(std::move(entries)),
      prefer_parallel_(prefer_parallel) {}

std::optional<ProfiledTimes> MeasuredProfile::lookup(const ModelConfig& model, int tensor_parallel,
                                                     int micro_batch_size) const {
  const ProfileEntry* fallback = nullptr;
  for (const ProfileEntry& entry : entries_) {
    if (entry.seq_len != model.seq_len || entry.d_model != model.d_model ||
        entry.num_heads != model.num_heads || entry.ffn_size != model.ffn_size ||
        entry.vocab_size != model.vocab_size || entry.dtype != model.dtype ||
        entry.tensor_parallel != tensor_parallel || entry.micro_batch_size != micro_batch_size)
      continue;
    if (entry.parallel == prefer_parallel_) return entry.times;
    if (fallback == nullptr) fallback = &entry;
  }
  if (fallback != nullptr) return fallback->times;
  return std::nullopt;
}

namespace {

std::string expand_home(const std::string& path) {
  if (path.rfind("~/", 0) != 0) return path;
  const char* home = std::getenv("HOME");
  return std::string(home ? home : "") + path.substr(1);
}

}  // namespace

std::optional<MeasuredProfile> parse_measured_profile(const std::string& text,
                                                      const std::string& path,
                                                      const std::string& device,
                                                      bool prefer_parallel) {
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw std::runtime_error(path + ": not valid JSON: " + error.what());
  }
  if (!root.is_object() || root.value("format", "") != "paraplan-profile")
    throw std::runtime_error(path + ": \"format\" must be \"paraplan-profile\"");
  if (root.value("version", 0) != 1)
    throw std::runtime_error(path + ": \"version\" must be 1 (this paraplan reads version 1)");
  if (!root.contains("devices") || !root["devices"].is_object())
    throw std::runtime_error(path + ": \"devices\" must be an object keyed by device name");
  if (!root["devices"].contains(device)) return std::nullopt;
  const nlohmann::json& list = root["devices"][device];
  if (!list.is_array())
    throw std::runtime_error(path + ": devices.\"" + device + "\" must be an array of entries");
  std::vector<ProfileEntry> entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& item = list[i];
    const std::string field = path + ": devices.\"" + device + "\"[" + std::to_string(i) + "]";
    auto integer = [&](const char* key, int fallback) {
      if (!item.contains(key)) {
        if (fallback >= 0) return fallback;
        throw std::runtime_error(field + "." + key + " is required");
      }
      if (!item[key].is_number_integer() || item[key].get<int>() < 1)
        throw std::runtime_error(field + "." + key + " must be an integer >= 1");
      return item[key].get<int>();
    };
    auto seconds = [&](const char* key) {
      if (!item.contains(key)) return 0.0;
      if (!item[key].is_number() || item[key].get<double>() < 0)
        throw std::runtime_error(field + "." + key + " must be a number of seconds >= 0");
      return item[key].get<double>();
    };
    ProfileEntry entry;
    entry.seq_len = integer("seq_len", -1);
    entry.d_model = integer("d_model", -1);
    entry.num_heads = integer("num_heads", -1);
    entry.ffn_size = integer("ffn_size", 4 * entry.d_model);
    entry.vocab_size = integer("vocab_size", -1);
    entry.tensor_parallel = integer("tensor_parallel", 1);
    entry.micro_batch_size = integer("micro_batch_size", -1);
    const std::string dtype = item.value("dtype", "float32");
    if (dtype != "float32" && dtype != "bfloat16")
      throw std::runtime_error(field + ".dtype = '" + dtype + "'; valid: float32, bfloat16");
    entry.dtype = dtype == "bfloat16" ? schema::DType::BFloat16 : schema::DType::Float32;
    entry.parallel = item.value("parallel", true);
    entry.times.block_forward = seconds("block_forward");
    entry.times.block_backward = seconds("block_backward");
    entry.times.attention_core_forward = seconds("attention_core_forward");
    entry.times.embedding_forward = seconds("embedding_forward");
    entry.times.embedding_backward = seconds("embedding_backward");
    entry.times.head_forward = seconds("head_forward");
    entry.times.head_backward = seconds("head_backward");
    if (entry.times.block_forward <= 0 || entry.times.block_backward <= 0)
      throw std::runtime_error(field + ": block_forward and block_backward are required and > 0");
    entries.push_back(entry);
  }
  return MeasuredProfile(path, device, std::move(entries), prefer_parallel);
}

std::optional<MeasuredProfile> load_measured_profile(const JobConfig& config) {
  if (config.planner.re_profile) return std::nullopt;
  const std::string path = expand_home(config.planner.profile_dir) + "/profile.json";
  std::ifstream file(path, std::ios::binary);
  if (!file) return std::nullopt;
  std::ostringstream text;
  text << file.rdbuf();
  return parse_measured_profile(text.str(), path, config.cluster.preset,
                                config.planner.parallel_profile);
}

}  // namespace paraplan
