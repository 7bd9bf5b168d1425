// tensor_file_set.cc: one safetensors file or an index of several, read as one.
#include "runtime/checkpoint/tensor_file_set.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/printable_text.h"

namespace paraplan {
namespace fs = std::filesystem;

std::string shard_file_name(const std::string& base, int number, int count) {
  char name[64];
  std::snprintf(name, sizeof(name), "-%05d-of-%05d.safetensors", number, count);
  return base + name;
}

std::string single_file_name(const std::string& base) {
  return base + ".safetensors";
}

std::string index_file_name(const std::string& base) {
  return base + ".safetensors.index.json";
}

void write_safetensors_index(const std::string& directory, const std::string& base,
                             uint64_t total_bytes,
                             const std::map<std::string, std::string>& weight_map) {
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_bytes}};
  index["weight_map"] = weight_map;  // sorted by name, as transformers writes it
  write_file_atomically(fs::path(directory) / index_file_name(base), index.dump(2) + "\n");
}

bool has_tensor_files(const std::string& directory, const std::string& base) {
  std::error_code error;
  return fs::exists(fs::path(directory) / single_file_name(base), error) ||
         fs::exists(fs::path(directory) / index_file_name(base), error);
}

namespace {

// A file name the index may give: a plain name in its directory, never a path
// that leads elsewhere ("../x", "/etc/passwd").
bool is_plain_shard_name(const std::string& name) {
  const std::string suffix = ".safetensors";
  return name.size() > suffix.size() && name.size() <= 255 &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         name.find('/') == std::string::npos && name.find('\0') == std::string::npos &&
         name[0] != '.';
}

std::map<std::string, std::string> parse_weight_map(const std::string& text,
                                                    const std::string& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const std::exception& error) {
    throw std::runtime_error(path + ": not valid JSON: " + printable_text(error.what(), 200));
  }
  const auto map = json.is_object() ? json.find("weight_map") : json.end();
  if (map == json.end() || !map->is_object() || map->empty())
    throw std::runtime_error(path +
                             ": field 'weight_map' must be a non-empty object of tensor "
                             "names to file names");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string() || !is_plain_shard_name(file.get<std::string>()))
      throw std::runtime_error(path + ": weight_map['" + printable_text(name, 200) + "'] is " +
                               printable_text(file.dump(), 200) +
                               "; it must name a .safetensors file in the same directory");
    weight_map[name] = file.get<std::string>();
  }
  return weight_map;
}

}  // namespace

TensorFileSet TensorFileSet::open(const std::string& directory, const std::string& base) {
  TensorFileSet set;
  set.directory_ = directory;
  const fs::path index = fs::path(directory) / index_file_name(base);
  std::error_code error;
  if (fs::exists(index, error)) {
    set.path_ = index.string();
    set.weight_map_ =
        parse_weight_map(read_bounded_file(set.path_, kCheckpointJsonFile), set.path_);
  } else {
    set.path_ = (fs::path(directory) / single_file_name(base)).string();
    set.single_ = std::make_unique<SafetensorsFile>(SafetensorsFile::open(set.path_));
  }
  return set;
}

size_t TensorFileSet::tensor_count() const {
  return single_ ? single_->tensors().size() : weight_map_.size();
}

std::vector<std::string> TensorFileSet::names() const {
  std::vector<std::string> names;
  if (single_) {
    for (const SafetensorsTensor& tensor : single_->tensors()) names.push_back(tensor.name);
    std::sort(names.begin(), names.end());
  } else {
    for (const auto& [name, file] : weight_map_) names.push_back(name);
  }
  return names;
}

const std::vector<int64_t>& TensorFileSet::shape(const std::string& name) const {
  return file_holding(name).shape(name);
}

bool TensorFileSet::has(const std::string& name) const {
  return single_ ? single_->has(name) : weight_map_.count(name) > 0;
}

const SafetensorsFile& TensorFileSet::file_holding(const std::string& name) const {
  if (single_) return *single_;
  const auto entry = weight_map_.find(name);
  if (entry == weight_map_.end())
    throw std::runtime_error(path_ + ": no tensor '" + printable_text(name, 200) +
                             "' in weight_map");
  const std::string& file_name = entry->second;
  auto opened = shards_.find(file_name);
  if (opened == shards_.end()) {
    const std::string shard_path = (fs::path(directory_) / file_name).string();
    SafetensorsFile file = [&] {
      try {
        return SafetensorsFile::open(shard_path);
      } catch (const std::exception& error) {
        throw std::runtime_error(std::string(error.what()) + " (named by " + path_ + ")");
      }
    }();
    for (const auto& [tensor, holder] : weight_map_)
      if (holder == file_name && !file.has(tensor))
        throw std::runtime_error(shard_path + ": missing tensor '" + printable_text(tensor, 200) +
                                 "', which " + path_ + " says it holds");
    opened = shards_.emplace(file_name, std::move(file)).first;
  }
  return opened->second;
}

void TensorFileSet::read(const std::string& name, float* out,
                         const std::vector<int64_t>& expected_shape) const {
  file_holding(name).read(name, out, expected_shape);
}

void TensorFileSet::read_range(const std::string& name, const std::vector<int64_t>& expected_shape,
                               size_t first, size_t count, float* out) const {
  file_holding(name).read_range(name, expected_shape, first, count, out);
}

}  // namespace paraplan
