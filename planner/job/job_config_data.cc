// job_config_data.cc: the value of [data] train, a path or a blend of
// datasets, read from TOML or an override and written back as canonical TOML
// (job_config_internal.h).
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "common/printable_text.h"
#include "planner/job/job_config_internal.h"

namespace paraplan::job_fields {

namespace {

const char* const kExpected =
    "a path (\"shards/train_*.bin\") or an array of tables "
    "[{path = \"a_*.bin\", weight = 0.7}, {path = \"b.bin\", weight = 0.3}]";

DataSourceConfig source_from_table(const toml::table& table, const std::string& where) {
  DataSourceConfig source;
  for (auto&& [key, value] : table) {
    if (key.str() == "path") {
      const auto* path = value.as_string();
      if (path == nullptr)
        throw std::runtime_error(where + ": [data] train: path must be a string");
      source.path = path->get();
    } else if (key.str() == "weight") {
      if (const auto* number = value.as_floating_point())
        source.weight = number->get();
      else if (const auto* integer = value.as_integer())
        source.weight = static_cast<double>(integer->get());
      else
        throw std::runtime_error(where + ": [data] train: weight must be a number");
    } else {
      throw std::runtime_error(where + ": [data] train: unknown key '" +
                               printable_text(std::string(key.str())) +
                               "' in a dataset; valid keys: path, weight");
    }
  }
  if (source.path.empty())
    throw std::runtime_error(where +
                             ": [data] train: a dataset needs a path (a file, a glob or a "
                             "comma-separated list)");
  if (!(source.weight > 0) || !std::isfinite(source.weight))
    throw std::runtime_error(where + ": [data] train: weight " + format_double(source.weight) +
                             " of '" + printable_text(source.path) +
                             "' must be a positive finite number (weights are normalized)");
  return source;
}

}  // namespace

std::vector<DataSourceConfig> data_sources_from_toml(const toml::node& node,
                                                     const std::string& where) {
  if (const auto* path = node.as_string()) {
    if (path->get().empty())
      throw std::runtime_error(where + ": [data] train: an empty path; give " + kExpected);
    return {DataSourceConfig{path->get(), 1.0}};
  }
  const toml::array* array = node.as_array();
  if (array == nullptr || array->empty())
    throw std::runtime_error(where + ": [data] train must be " + kExpected);
  std::vector<DataSourceConfig> sources;
  for (const toml::node& element : *array) {
    const toml::table* table = element.as_table();
    if (table == nullptr)
      throw std::runtime_error(where +
                               ": [data] train: each dataset must be a table {path = ..., "
                               "weight = ...}; a list of files is one string, "
                               "\"a.bin,b.bin\"");
    sources.push_back(source_from_table(*table, where));
  }
  return sources;
}

std::vector<DataSourceConfig> data_sources_from_text(const std::string& text,
                                                     const std::string& where) {
  if (text.empty() || text.front() != '[') return data_sources_from_toml(toml::value(text), where);
  toml::table parsed;
  try {
    parsed = toml::parse("train = " + text);
  } catch (const toml::parse_error& error) {
    throw std::runtime_error(where + ": [data] train: '" + printable_text(text) +
                             "' is not a TOML array (" + printable_text(error.description(), 120) +
                             "); give " + kExpected);
  }
  return data_sources_from_toml(*parsed.get("train"), where);
}

toml::array data_sources_array(const std::vector<DataSourceConfig>& sources) {
  toml::array array;
  for (const DataSourceConfig& source : sources)
    array.push_back(toml::table{{"path", source.path}, {"weight", source.weight}});
  return array;
}

std::string data_sources_text(const std::vector<DataSourceConfig>& sources) {
  std::string text = "[";
  for (const DataSourceConfig& source : sources) {
    text += text.size() > 1 ? ", {path = \"" : "{path = \"";
    for (const char c : source.path) {
      if (c == '"' || c == '\\') {
        text += '\\';
        text += c;
      } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        char escaped[8];
        std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
        text += escaped;
      } else {
        text += c;
      }
    }
    text += "\", weight = " + format_double(source.weight) + "}";
  }
  return text + "]";
}

}  // namespace paraplan::job_fields
