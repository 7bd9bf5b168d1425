// json_lines.h: a .jsonl file's objects, one per non-blank line, each handed
// over with the words an error names it by ("FILE line N") and the offset
// just past its line; what `tokenize` (its documents) and `--hellaswag` (its
// examples) read.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace paraplan {

// Calls `each` for every non-blank line of `content` in order; a line that is
// not JSON throws std::runtime_error "<name> line N: not JSON (...)".
void for_each_json_line(std::string_view content, const std::string& name,
                        const std::function<void(const nlohmann::json& value,
                                                 const std::string& where, size_t line_end)>& each);

}  // namespace paraplan
