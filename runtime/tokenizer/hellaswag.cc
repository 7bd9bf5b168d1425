// hellaswag.cc: HellaSwag's .jsonl as multiple-choice examples (hellaswag.h).
#include "runtime/tokenizer/hellaswag.h"

#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "common/bounded_file.h"
#include "runtime/tokenizer/json_lines.h"

namespace paraplan {

namespace {

// A context starts a text; an ending continues it (no prefix space of its own,
// which a SentencePiece-style tokenizer would otherwise add).
std::vector<int32_t> encode(std::string_view text, bool starts_text,
                            const BpeTokenizer* tokenizer) {
  if (tokenizer != nullptr)
    return starts_text ? tokenizer->encode(text) : tokenizer->encode_continuation(text);
  return std::vector<int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                              reinterpret_cast<const unsigned char*>(text.data()) + text.size());
}

// The label as rowanz's files write it (a number) or as the Hugging Face
// dataset does (a string of digits).
int label_of(const nlohmann::json& object, const std::string& where) {
  if (!object.contains("label"))
    throw std::runtime_error(where +
                             ": no \"label\" (the test split's labels are not "
                             "public; evaluate on hellaswag_val.jsonl)");
  const nlohmann::json& label = object["label"];
  // A number narrowed only where it fits: 2^32 + 1 is not 1.
  if (label.is_number_unsigned() && label.get<uint64_t>() <= 65535)
    return static_cast<int>(label.get<uint64_t>());
  if (label.is_number_integer() && !label.is_number_unsigned() && label.get<int64_t>() >= 0 &&
      label.get<int64_t>() <= 65535)
    return static_cast<int>(label.get<int64_t>());
  if (label.is_string()) {
    const std::string text = label.get<std::string>();
    if (!text.empty() && text.size() < 6 &&
        text.find_first_not_of("0123456789") == std::string::npos)
      return std::stoi(text);
  }
  throw std::runtime_error(where + ": \"label\" is " + label.dump() +
                           "; give the right ending's index, a whole number");
}

MultipleChoiceExample render(const nlohmann::json& object, const BpeTokenizer* tokenizer,
                             const std::string& where) {
  if (!object.is_object() || !object.contains("ctx") || !object["ctx"].is_string())
    throw std::runtime_error(where + ": expected an object whose \"ctx\" is the context's text");
  if (!object.contains("endings") || !object["endings"].is_array())
    throw std::runtime_error(where + ": expected \"endings\", an array of the endings' texts");
  // Counted before any is encoded.
  const size_t endings = object["endings"].size();
  if (endings < 2 || endings > kMaxCompletions)
    throw std::runtime_error(where + ": " + std::to_string(endings) +
                             " endings; a multiple-choice example has 2 to " +
                             std::to_string(kMaxCompletions));
  MultipleChoiceExample example;
  example.label = label_of(object, where);
  example.context = encode(object["ctx"].get<std::string>(), /*starts_text=*/true, tokenizer);
  for (const nlohmann::json& ending : object["endings"]) {
    if (!ending.is_string())
      throw std::runtime_error(where + ": \"endings\" holds " + ending.dump() + ", not a text");
    // A space before each ending, as llm.c's hellaswag.py writes it (GPT-2's
    // tokens carry the space before a word; SentencePiece's "▁" likewise).
    std::string text = " ";
    text += ending.get_ref<const std::string&>();
    example.completions.push_back(encode(text, /*starts_text=*/false, tokenizer));
  }
  check_example(example, where);
  return example;
}

}  // namespace

std::vector<MultipleChoiceExample> read_hellaswag_jsonl(const std::string& path,
                                                        const BpeTokenizer* tokenizer) {
  const std::string content = read_bounded_file(path, kEvaluationSetFile);
  std::vector<MultipleChoiceExample> examples;
  for_each_json_line(content, path,
                     [&](const nlohmann::json& object, const std::string& where, size_t) {
                       examples.push_back(render(object, tokenizer, where));
                     });
  if (examples.empty())
    throw std::runtime_error(path +
                             ": no examples (one JSON object per line, as HellaSwag's "
                             "hellaswag_val.jsonl)");
  return examples;
}

std::vector<MultipleChoiceExample> read_multiple_choice_set(const std::string& path,
                                                            const BpeTokenizer* tokenizer) {
  if (is_hellaswag_text(path)) return read_hellaswag_jsonl(path, tokenizer);
  return read_eval_file(path);
}

}  // namespace paraplan
