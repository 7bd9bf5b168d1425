// job_config_internal.h: what the job_config*.cc files share and nothing else
// includes: the option table's types (job_config_fields.cc builds the table,
// job_config.cc parses with it) and number formatting.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "planner/job/job_config.h"

namespace paraplan {

// 15 significant digits: exact for every value a user types, and lr / 10 of 6e-4
// prints as 6e-05 rather than 5.9999999999999995e-05.
inline std::string format_double(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.15g", value);
  return buffer;
}

namespace job_fields {

enum class FieldKind {
  Integer,
  Float,
  Boolean,
  String,
  Choice,
  IntegerOrAuto,
  BooleanOrAuto,
  DataSources  // [data] train: a path, or an array of {path, weight} tables
};

// A value read from TOML or from an override string, before it is stored.
using FieldValue = std::variant<int64_t, double, bool, std::string>;

struct FieldSpec {
  std::string section;
  std::string key;
  FieldKind kind = FieldKind::Integer;
  int64_t min_integer = 0;  // representable range of an Integer field
  int64_t max_integer = 0;
  std::vector<std::string> choices;  // Choice: the valid strings
  std::function<void(JobConfig&, const FieldValue&)> set;
  std::function<std::string(const JobConfig&)> get;
  std::function<void(JobConfig& to, const JobConfig& from)> copy;

  std::string dotted() const { return section + "." + key; }
};

// Every option, once: its section, key, type and how to read and write it.
const std::vector<FieldSpec>& field_table();

// job.toml's sections, in order.
const std::vector<std::string>& section_names();

// [data] train's value (job_config_data.cc). Its FieldValue is the TOML text
// of an array of {path, weight} tables, in canonical form.
std::vector<DataSourceConfig> data_sources_from_toml(const toml::node& node,
                                                     const std::string& where);
// An override's text: a path ("shards/*.bin") or a TOML array of tables.
std::vector<DataSourceConfig> data_sources_from_text(const std::string& text,
                                                     const std::string& where);
std::string data_sources_text(const std::vector<DataSourceConfig>& sources);
toml::array data_sources_array(const std::vector<DataSourceConfig>& sources);

}  // namespace job_fields
}  // namespace paraplan
