// json_lines.cc: a .jsonl file's objects, line by line (json_lines.h).
#include "runtime/tokenizer/json_lines.h"

#include <stdexcept>

namespace paraplan {

void for_each_json_line(
    std::string_view content, const std::string& name,
    const std::function<void(const nlohmann::json& value, const std::string& where,
                             size_t line_end)>& each) {
  size_t line_number = 0;
  for (size_t at = 0; at < content.size();) {
    size_t end = content.find('\n', at);
    end = end == std::string_view::npos ? content.size() : end + 1;
    const std::string_view line = content.substr(at, end - at);
    at = end;
    ++line_number;
    if (line.find_first_not_of(" \t\r\n") == std::string_view::npos) continue;
    const std::string where = name + " line " + std::to_string(line_number);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      throw std::runtime_error(where + ": not JSON (" + error.what() + ")");
    }
    each(value, where, end);
  }
}

}  // namespace paraplan
