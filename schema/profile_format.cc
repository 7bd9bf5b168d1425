// profile_format.cc: profile.json's reader (versions 1 and 2; every malformed
// field is an error naming the file and the field's JSON path) and writer
// (version 2).
#include "schema/profile_format.h"

#include <algorithm>
#include <stdexcept>

#include "common/printable_text.h"

namespace paraplan {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error(message);
}

// Typed access to one JSON object's fields; `where` is "file: json.path".
class Fields {
 public:
  Fields(const Json& object, std::string where) : object_(object), where_(std::move(where)) {
    if (!object_.is_object()) fail(where_ + " must be an object");
  }
  bool has(const char* key) const { return object_.contains(key); }
  std::string at(const char* key) const { return where_ + "." + key; }
  const Json& object() const { return object_; }
  const std::string& where() const { return where_; }

  // required when fallback is nullopt.
  int integer(const char* key, std::optional<int> fallback, int minimum = 1) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(at(key) + " is required");
    }
    const Json& value = object_[key];
    if (!value.is_number_integer() || value.get<long long>() < minimum ||
        value.get<long long>() > (1ll << 30))
      fail(at(key) + " must be an integer >= " + std::to_string(minimum));
    return value.get<int>();
  }
  // A number >= 0 (> 0 when positive); 0 when absent and optional.
  double number(const char* key, bool required, bool positive, const char* what) const {
    if (!has(key)) {
      if (required) fail(at(key) + " is required");
      return 0;
    }
    const Json& value = object_[key];
    if (!value.is_number() || value.get<double>() < 0 || (positive && value.get<double>() == 0))
      fail(at(key) + " must be " + what + (positive ? " > 0" : " >= 0"));
    return value.get<double>();
  }
  // The object at key (which must exist), its path under this one's.
  Fields child(const char* key) const { return Fields(object_[key], at(key)); }
  std::string text(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!object_[key].is_string()) fail(at(key) + " must be a string");
    return object_[key].get<std::string>();
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!object_[key].is_boolean()) fail(at(key) + " must be true or false");
    return object_[key].get<bool>();
  }
  schema::DType dtype() const {
    const std::string name = text("dtype", "float32");
    if (name != "float32" && name != "bfloat16")
      fail(at("dtype") + " = '" + name + "'; valid: float32, bfloat16");
    return name == "bfloat16" ? schema::DType::BFloat16 : schema::DType::Float32;
  }
  ProfileClock clock() const {
    const std::string name = text("clock", "wall");
    if (name != "wall" && name != "cpu") fail(at("clock") + " = '" + name + "'; valid: wall, cpu");
    return name == "cpu" ? ProfileClock::kCpu : ProfileClock::kWall;
  }
  // Version 2: "processes" (>= 1), with "parallel" optional and true exactly
  // when processes > 1; "parallel": false alone means 1.
  int processes() const {
    const bool parallel = boolean("parallel", true);
    if (!has("processes")) {
      if (has("parallel") && !parallel) return 1;
      fail(at("processes") + " is required (or \"parallel\": false for one process)");
    }
    const int count = integer("processes", std::nullopt);
    if (has("parallel") && parallel != (count > 1))
      fail(at("parallel") + " is " + (parallel ? "true" : "false") + " but processes is " +
           std::to_string(count) + "; parallel must be true exactly when processes > 1");
    return count;
  }

 private:
  const Json& object_;
  std::string where_;
};

// A section's array (absent = empty).
const Json& array_of(const Json& object, const char* key, const std::string& where) {
  static const Json empty = Json::array();
  if (!object.contains(key)) return empty;
  if (!object[key].is_array()) fail(where + "." + key + " must be an array");
  return object[key];
}

ProfileEntry parse_compute(const Fields& item, int version) {
  ProfileEntry entry;
  entry.seq_len = item.integer("seq_len", std::nullopt);
  entry.d_model = item.integer("d_model", std::nullopt);
  entry.num_heads = item.integer("num_heads", std::nullopt);
  entry.ffn_size = item.integer("ffn_size", 4 * entry.d_model);
  entry.vocab_size = item.integer("vocab_size", std::nullopt);
  entry.tensor_parallel = item.integer("tensor_parallel", 1);
  entry.micro_batch_size = item.integer("micro_batch_size", std::nullopt);
  entry.dtype = item.dtype();
  if (version == 1) {
    entry.parallel = item.boolean("parallel", true);
    entry.processes = entry.parallel ? kEveryLocalDevice : 1;
  } else {
    entry.processes = item.processes();
    entry.parallel = entry.processes > 1;
    entry.clock = item.clock();
  }
  ProfiledTimes& times = entry.times;
  const char* seconds = "a number of seconds";
  times.block_forward = item.number("block_forward", true, true, seconds);
  times.block_backward = item.number("block_backward", true, true, seconds);
  times.attention_core_forward = item.number("attention_core_forward", false, false, seconds);
  times.embedding_forward = item.number("embedding_forward", false, false, seconds);
  times.embedding_backward = item.number("embedding_backward", false, false, seconds);
  times.head_forward = item.number("head_forward", false, false, seconds);
  times.head_backward = item.number("head_backward", false, false, seconds);
  if (item.has("tensor_group")) {
    const Fields pace = item.child("tensor_group");
    const char* ratio = "a ratio of compute times";
    entry.tensor_group =
        TensorGroupPace{.forward_ratio = pace.number("forward_ratio", true, true, ratio),
                        .backward_ratio = pace.number("backward_ratio", true, true, ratio),
                        .wait_per_call = pace.number("wait_per_call", true, false, seconds)};
  }
  return entry;
}

CollectiveEntry parse_collective(const Fields& item) {
  CollectiveEntry entry;
  if (!item.has("operation")) fail(item.at("operation") + " is required");
  const std::string name = item.text("operation", "");
  bool known = false;
  for (CollectiveOperation operation :
       {CollectiveOperation::AllReduce, CollectiveOperation::ReduceScatter,
        CollectiveOperation::AllGather, CollectiveOperation::SendReceive})
    if (name == collective_operation_name(operation)) entry.operation = operation, known = true;
  if (!known)
    fail(item.at("operation") + " = '" + name +
         "'; valid: all_reduce, reduce_scatter, all_gather, send_receive");
  entry.group_size = item.integer("group_size", std::nullopt, 2);
  entry.processes = item.processes();
  entry.clock = item.clock();
  entry.latency = item.number("latency", true, false, "a number of seconds");
  entry.seconds_per_byte = item.number("seconds_per_byte", true, false, "a number");
  const Json& points = array_of(item.object(), "points", item.where());
  for (size_t i = 0; i < points.size(); ++i) {
    const Fields point(points[i], item.at("points") + "[" + std::to_string(i) + "]");
    const CollectivePoint measured{
        .bytes = point.number("bytes", true, true, "a number of bytes"),
        .seconds = point.number("seconds", true, false, "a number of seconds")};
    if (i > 0 && measured.bytes <= entry.points.back().bytes)
      fail(point.at("bytes") + " must be larger than points[" + std::to_string(i - 1) +
           "].bytes (the sizes increase along the list)");
    entry.points.push_back(measured);
  }
  return entry;
}

DeviceProfile parse_version_2(const Json& section, const std::string& where) {
  const Fields fields(section, where);
  DeviceProfile device;
  device.version = 2;
  if (fields.has("measured_on")) {
    const Fields origin(section["measured_on"], where + ".measured_on");
    ProfileProvenance provenance;
    provenance.backend = origin.text("backend", "");
    provenance.description = origin.text("description", "");
    provenance.host = origin.text("host", "");
    provenance.paraplan_version = origin.text("paraplan_version", "");
    provenance.date = origin.text("date", "");
    device.measured_on = provenance;
  }
  auto each = [&](const char* key, auto&& parse) {
    const Json& list = array_of(section, key, where);
    for (size_t i = 0; i < list.size(); ++i)
      parse(Fields(list[i], where + "." + key + "[" + std::to_string(i) + "]"));
  };
  each("compute", [&](const Fields& item) { device.compute.push_back(parse_compute(item, 2)); });
  each("optimizer", [&](const Fields& item) {
    OptimizerEntry entry;
    entry.processes = item.processes();
    entry.clock = item.clock();
    entry.seconds_per_parameter =
        item.number("seconds_per_parameter", true, true, "a number of seconds");
    device.optimizer.push_back(entry);
  });
  each("collectives",
       [&](const Fields& item) { device.collectives.push_back(parse_collective(item)); });
  each("gemm", [&](const Fields& item) {
    GemmEntry entry;
    entry.m = item.integer("m", std::nullopt);
    entry.n = item.integer("n", std::nullopt);
    entry.k = item.integer("k", std::nullopt);
    entry.dtype = item.dtype();
    entry.processes = item.processes();
    entry.flops_per_second = item.number("flops_per_second", true, true, "a number");
    device.gemm.push_back(entry);
  });
  each("hardware", [&](const Fields& item) {
    HardwareEntry entry;
    entry.processes = item.processes();
    entry.threads = item.integer("threads", 1);
    entry.cores = item.integer("cores", 0, 0);
    entry.available_cores = item.number("available_cores", false, false, "a number of cores");
    const char* rate = "a number of FLOP/s";
    entry.peak_flops_float32 = item.number("peak_flops_float32", true, true, rate);
    entry.peak_flops_bfloat16 = item.number("peak_flops_bfloat16", true, true, rate);
    entry.memory_bandwidth =
        item.number("memory_bandwidth", true, true, "a number of bytes per second");
    device.hardware.push_back(entry);
  });
  return device;
}

const char* clock_text(ProfileClock clock) {
  return clock == ProfileClock::kCpu ? "cpu" : "wall";
}

const char* dtype_text(schema::DType dtype) {
  return dtype == schema::DType::BFloat16 ? "bfloat16" : "float32";
}

}  // namespace

double CollectiveEntry::seconds(double bytes) const {
  if (points.empty()) return latency + bytes * seconds_per_byte;
  if (bytes <= points.front().bytes)
    return std::max(0.0,
                    points.front().seconds - (points.front().bytes - bytes) * seconds_per_byte);
  if (bytes >= points.back().bytes)
    return points.back().seconds + (bytes - points.back().bytes) * seconds_per_byte;
  const auto above = std::upper_bound(
      points.begin(), points.end(), bytes,
      [](double size, const CollectivePoint& point) { return size < point.bytes; });
  const CollectivePoint& below = *(above - 1);
  const double along = (bytes - below.bytes) / (above->bytes - below.bytes);
  return below.seconds + along * (above->seconds - below.seconds);
}

CollectiveEntry CollectiveEntry::scaled(double factor) const {
  CollectiveEntry result = *this;
  result.latency *= factor;
  result.seconds_per_byte *= factor;
  for (CollectivePoint& point : result.points) point.seconds *= factor;
  return result;
}

const char* collective_operation_name(CollectiveOperation operation) {
  switch (operation) {
    case CollectiveOperation::AllReduce:
      return "all_reduce";
    case CollectiveOperation::ReduceScatter:
      return "reduce_scatter";
    case CollectiveOperation::AllGather:
      return "all_gather";
    case CollectiveOperation::SendReceive:
      return "send_receive";
  }
  return "?";
}

ProfileDocument parse_profile_document(const std::string& text, const std::string& path,
                                       const std::string& device) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::exception& error) {  // parse_error, and out_of_range for 1e999
    fail(path + ": not valid JSON: " + printable_text(error.what(), 200));
  }
  if (!root.is_object() || !root.contains("format") || root["format"] != "paraplan-profile")
    fail(path + ": \"format\" must be \"paraplan-profile\"");
  ProfileDocument document;
  if (!root.contains("version") || !root["version"].is_number_integer() ||
      (root["version"] != 1 && root["version"] != 2))
    fail(path + ": \"version\" must be 1 or 2 (this paraplan reads versions 1 and 2)");
  document.version = root["version"].get<int>();
  if (!root.contains("devices") || !root["devices"].is_object())
    fail(path + ": \"devices\" must be an object keyed by device name");
  for (const auto& [name, section] : root["devices"].items()) document.devices.push_back(name);
  if (!root["devices"].contains(device)) return document;
  const Json& section = root["devices"][device];
  const std::string where = path + ": devices.\"" + device + "\"";
  if (document.version == 2) {
    if (!section.is_object())
      fail(where + " must be an object (version 2) of measured_on, compute, optimizer, " +
           "collectives, gemm");
    document.device = parse_version_2(section, where);
    return document;
  }
  if (!section.is_array()) fail(where + " must be an array of entries (version 1)");
  DeviceProfile data;
  data.version = 1;
  for (size_t i = 0; i < section.size(); ++i)
    data.compute.push_back(
        parse_compute(Fields(section[i], where + "[" + std::to_string(i) + "]"), 1));
  document.device = std::move(data);
  return document;
}

Json device_profile_json(const DeviceProfile& device) {
  Json section = Json::object();
  if (device.measured_on) {
    const ProfileProvenance& origin = *device.measured_on;
    section["measured_on"] = {{"backend", origin.backend},
                              {"description", origin.description},
                              {"host", origin.host},
                              {"paraplan_version", origin.paraplan_version},
                              {"date", origin.date}};
  }
  Json compute = Json::array();
  for (const ProfileEntry& entry : device.compute) {
    const ProfiledTimes& times = entry.times;
    compute.push_back({{"seq_len", entry.seq_len},
                       {"d_model", entry.d_model},
                       {"num_heads", entry.num_heads},
                       {"ffn_size", entry.ffn_size},
                       {"vocab_size", entry.vocab_size},
                       {"dtype", dtype_text(entry.dtype)},
                       {"tensor_parallel", entry.tensor_parallel},
                       {"micro_batch_size", entry.micro_batch_size},
                       {"parallel", entry.processes > 1},
                       {"processes", entry.processes},
                       {"clock", clock_text(entry.clock)},
                       {"block_forward", times.block_forward},
                       {"block_backward", times.block_backward},
                       {"attention_core_forward", times.attention_core_forward},
                       {"embedding_forward", times.embedding_forward},
                       {"embedding_backward", times.embedding_backward},
                       {"head_forward", times.head_forward},
                       {"head_backward", times.head_backward}});
    if (entry.tensor_group)
      compute.back()["tensor_group"] = {{"forward_ratio", entry.tensor_group->forward_ratio},
                                        {"backward_ratio", entry.tensor_group->backward_ratio},
                                        {"wait_per_call", entry.tensor_group->wait_per_call}};
  }
  Json optimizer = Json::array();
  for (const OptimizerEntry& entry : device.optimizer)
    optimizer.push_back({{"processes", entry.processes},
                         {"clock", clock_text(entry.clock)},
                         {"seconds_per_parameter", entry.seconds_per_parameter}});
  Json collectives = Json::array();
  for (const CollectiveEntry& entry : device.collectives) {
    collectives.push_back({{"operation", collective_operation_name(entry.operation)},
                           {"group_size", entry.group_size},
                           {"processes", entry.processes},
                           {"clock", clock_text(entry.clock)},
                           {"latency", entry.latency},
                           {"seconds_per_byte", entry.seconds_per_byte}});
    if (!entry.points.empty()) {
      Json points = Json::array();
      for (const CollectivePoint& point : entry.points)
        points.push_back({{"bytes", point.bytes}, {"seconds", point.seconds}});
      collectives.back()["points"] = points;
    }
  }
  Json gemm = Json::array();
  for (const GemmEntry& entry : device.gemm)
    gemm.push_back({{"m", entry.m},
                    {"n", entry.n},
                    {"k", entry.k},
                    {"dtype", dtype_text(entry.dtype)},
                    {"processes", entry.processes},
                    {"flops_per_second", entry.flops_per_second}});
  Json hardware = Json::array();
  for (const HardwareEntry& entry : device.hardware)
    hardware.push_back({{"processes", entry.processes},
                        {"threads", entry.threads},
                        {"cores", entry.cores},
                        {"available_cores", entry.available_cores},
                        {"peak_flops_float32", entry.peak_flops_float32},
                        {"peak_flops_bfloat16", entry.peak_flops_bfloat16},
                        {"memory_bandwidth", entry.memory_bandwidth}});
  section["compute"] = compute;
  section["optimizer"] = optimizer;
  section["collectives"] = collectives;
  section["gemm"] = gemm;
  section["hardware"] = hardware;
  return section;
}

std::string profile_document_text(const Json& devices) {
  const Json document = {
      {"format", "paraplan-profile"}, {"version", kProfileFormatVersion}, {"devices", devices}};
  return document.dump(1) + "\n";
}

}  // namespace paraplan
