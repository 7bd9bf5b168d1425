// supervision_protocol.cc: encoding and parsing of the supervision messages
// (supervision_protocol.h) as JSON lines.
#include "runtime/comm/supervision_protocol.h"

#include <nlohmann/json.hpp>

namespace paraplan::supervision {
namespace {

using nlohmann::json;

std::string line(const json& message) {
  return message.dump() + "\n";
}

// The line's JSON object and its "type", or nullopt for a line that is not a
// message (invalid UTF-8 included: never throws).
std::optional<std::pair<json, std::string>> typed_message(const std::string& text) {
  json message = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string())
    return std::nullopt;
  std::string type = message["type"];
  return std::make_pair(std::move(message), std::move(type));
}

}  // namespace

std::string encode_hello(const Hello& hello) {
  return line({{"type", "hello"},
               {"token", hello.token},
               {"rank", hello.rank},
               {"pid", hello.pid},
               {"host", hello.host}});
}

std::string encode_group(const GroupInfo& group) {
  return line(
      {{"type", "group"}, {"id", group.id}, {"name", group.name}, {"members", group.members}});
}

std::string encode_beat(const Beat& beat) {
  json entered = json::object();
  for (const auto& [group, count] : beat.entered) entered[std::to_string(group)] = count;
  json open = json::array();
  for (const OpenOperation& operation : beat.open)
    open.push_back({{"group", operation.group},
                    {"sequence", operation.sequence},
                    {"age_ms", operation.age_ms},
                    {"what", operation.what},
                    {"to", operation.send_to},
                    {"from", operation.receive_from}});
  return line({{"type", "beat"}, {"idle_ms", beat.idle_ms}, {"entered", entered}, {"open", open}});
}

std::string encode_error(const std::string& message) {
  return line({{"type", "error"}, {"message", message}});
}
std::string encode_done() {
  return line({{"type", "done"}});
}
std::string encode_signal(int signal) {
  return line({{"type", "signal"}, {"signal", signal}});
}
std::string encode_welcome(const Welcome& welcome) {
  return line({{"type", "welcome"},
               {"interval_ms", welcome.interval_ms},
               {"timeout_ms", welcome.timeout_ms}});
}
std::string encode_launcher_beat() {
  return line({{"type", "beat"}});
}
std::string encode_stop() {
  return line({{"type", "stop"}});
}

namespace {

// parse(object, type) on a line that is a typed message; nullopt for any other
// line, an unknown type (parse returns nullopt) or a field missing or of
// another type (it throws).
template <typename Message, typename Parse>
std::optional<Message> parse_typed(const std::string& text, Parse parse) {
  const auto typed = typed_message(text);
  if (!typed) return std::nullopt;
  try {
    return parse(typed->first, typed->second);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<RankMessage> rank_message(const json& message, const std::string& type) {
  RankMessage parsed;
  if (type == "hello") {
    parsed.type = RankMessage::Type::kHello;
    parsed.hello = {message.at("token").get<std::string>(), message.at("rank").get<int>(),
                    message.at("pid").get<long>(), message.at("host").get<std::string>()};
  } else if (type == "group") {
    parsed.type = RankMessage::Type::kGroup;
    parsed.group = {message.at("id").get<int>(), message.at("name").get<std::string>(),
                    message.at("members").get<std::vector<int>>()};
  } else if (type == "beat") {
    parsed.type = RankMessage::Type::kBeat;
    parsed.beat.idle_ms = message.at("idle_ms").get<int64_t>();
    for (const auto& [group, count] : message.at("entered").items())
      parsed.beat.entered[std::stoi(group)] = count.get<uint64_t>();
    for (const json& operation : message.at("open"))
      parsed.beat.open.push_back(
          {operation.at("group").get<int>(), operation.at("sequence").get<uint64_t>(),
           operation.at("age_ms").get<int64_t>(), operation.at("what").get<std::string>(),
           operation.at("to").get<int>(), operation.at("from").get<int>()});
  } else if (type == "error") {
    parsed.type = RankMessage::Type::kError;
    parsed.error = message.at("message").get<std::string>();
  } else if (type == "done") {
    parsed.type = RankMessage::Type::kDone;
  } else if (type == "signal") {
    parsed.type = RankMessage::Type::kSignal;
    parsed.signal = message.at("signal").get<int>();
  } else {
    return std::nullopt;
  }
  return parsed;
}

std::optional<LauncherMessage> launcher_message(const json& message, const std::string& type) {
  LauncherMessage parsed;
  if (type == "welcome") {
    parsed.type = LauncherMessage::Type::kWelcome;
    parsed.welcome = {message.at("interval_ms").get<int>(), message.at("timeout_ms").get<int>()};
  } else if (type == "beat") {
    parsed.type = LauncherMessage::Type::kBeat;
  } else if (type == "stop") {
    parsed.type = LauncherMessage::Type::kStop;
  } else {
    return std::nullopt;
  }
  return parsed;
}

}  // namespace

std::optional<RankMessage> parse_rank_message(const std::string& text) {
  return parse_typed<RankMessage>(text, rank_message);
}

std::optional<LauncherMessage> parse_launcher_message(const std::string& text) {
  return parse_typed<LauncherMessage>(text, launcher_message);
}

std::optional<std::pair<std::string, int>> split_address(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) return std::nullopt;
  const std::string port_text = address.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const int port = std::stoi(port_text);
  if (port < 1 || port > 65535) return std::nullopt;
  return std::make_pair(address.substr(0, colon), port);
}

}  // namespace paraplan::supervision
