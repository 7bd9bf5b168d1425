// json_fields.h: typed fields of a JSON object read with one clear error per
// problem, naming the file and the field ("config.json: field 'n_layer' is
// "x", expected an integer").
#pragma once

#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>

#include "common/printable_text.h"

namespace paraplan {

// A JSON value as a message shows it: numbers, booleans and null as written,
// a string quoted and cut short (printable_text), an array or an object by its
// kind only (a hostile file may nest them deeper than printing could recurse).
inline std::string json_value_text(const nlohmann::json& value) {
  if (value.is_string()) {
    std::string text = "\"";
    text += printable_text(value.get_ref<const std::string&>());
    text += '"';
    return text;
  }
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return value.dump();
}

// Field `key` of `json` as an integer in [minimum, maximum], or `fallback`
// when absent or null (required when fallback is nullopt). `path` names the
// file in the message.
inline int64_t json_integer(const nlohmann::json& json, const std::string& key,
                            const std::string& path, std::optional<int64_t> fallback = std::nullopt,
                            int64_t minimum = std::numeric_limits<int64_t>::min(),
                            int64_t maximum = std::numeric_limits<int64_t>::max()) {
  const auto found = json.find(key);
  if (found == json.end() || found->is_null()) {
    if (fallback) return *fallback;
    throw std::runtime_error(path + ": missing field '" + key + "'");
  }
  if (!found->is_number_integer())
    throw std::runtime_error(path + ": field '" + key + "' is " + json_value_text(*found) +
                             ", expected an integer");
  // An unsigned value above int64's range reads as negative through
  // get<int64_t>(); it is out of range either way.
  if (found->is_number_unsigned() &&
      found->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw std::runtime_error(path + ": field '" + key + "' is " + found->dump() +
                             ", out of range (valid: " + std::to_string(minimum) + " to " +
                             std::to_string(maximum) + ")");
  const int64_t value = found->get<int64_t>();
  if (value < minimum || value > maximum)
    throw std::runtime_error(path + ": field '" + key + "' is " + std::to_string(value) +
                             ", out of range (valid: " + std::to_string(minimum) + " to " +
                             std::to_string(maximum) + ")");
  return value;
}

// Field `key` as a number, or fallback when absent.
inline double json_number(const nlohmann::json& json, const std::string& key,
                          const std::string& path, double fallback) {
  const auto found = json.find(key);
  if (found == json.end()) return fallback;
  if (!found->is_number())
    throw std::runtime_error(path + ": field '" + key + "' is " + json_value_text(*found) +
                             ", expected a number");
  return found->get<double>();
}

// Field `key` as a string, or fallback when absent or not a string.
inline std::string json_string_or(const nlohmann::json& json, const std::string& key,
                                  const std::string& fallback) {
  const auto found = json.find(key);
  return found != json.end() && found->is_string() ? found->get<std::string>() : fallback;
}

// A float's shortest decimal that reads back as the same float ("1e-05").
inline std::string short_decimal_text(float value) {
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text), value);
  return std::string(text, result.ptr);
}

// The same as a double, so a JSON file says 1e-05 rather than
// 9.999999747378752e-06.
inline double short_decimal(float value) {
  return std::strtod(short_decimal_text(value).c_str(), nullptr);
}

}  // namespace paraplan
