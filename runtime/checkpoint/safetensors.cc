// safetensors.cc: writing and validating/reading Hugging Face safetensors files.
#include "runtime/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "common/atomic_file.h"
#include "common/bounded_file.h"
#include "common/json_fields.h"

namespace paraplan {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian and copied as it is");

namespace {

struct DtypeInfo {
  Dtype dtype;
  const char* name;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {
    {Dtype::kBool, "BOOL", 1},      {Dtype::kU8, "U8", 1},          {Dtype::kI8, "I8", 1},
    {Dtype::kF8E4M3, "F8_E4M3", 1}, {Dtype::kF8E5M2, "F8_E5M2", 1}, {Dtype::kI16, "I16", 2},
    {Dtype::kU16, "U16", 2},        {Dtype::kF16, "F16", 2},        {Dtype::kBF16, "BF16", 2},
    {Dtype::kI32, "I32", 4},        {Dtype::kU32, "U32", 4},        {Dtype::kF32, "F32", 4},
    {Dtype::kI64, "I64", 8},        {Dtype::kU64, "U64", 8},        {Dtype::kF64, "F64", 8},
};

// The Rust reference refuses larger headers; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const DtypeInfo& info_of(Dtype dtype) {
  for (const DtypeInfo& info : kDtypes)
    if (info.dtype == dtype) return info;
  throw std::logic_error("unlisted safetensors dtype");
}

uint16_t float_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

float bf16_to_float(uint16_t value) {
  return std::bit_cast<float>(static_cast<uint32_t>(value) << 16);
}

float f16_to_float(uint16_t value) {
  const uint32_t sign = static_cast<uint32_t>(value & 0x8000u) << 16;
  uint32_t exponent = (value >> 10) & 0x1fu;
  uint32_t mantissa = value & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// prod(shape), or -1 on a negative dimension or overflow past 2^62.
int64_t checked_elements(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) return -1;
    if (dim != 0 && count > (int64_t{1} << 62) / dim) return -1;
    count *= dim;
  }
  return count;
}

void pread_all(int fd, void* out, size_t size, uint64_t offset, const std::string& what) {
  char* bytes = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t got = ::pread(fd, bytes, size, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw std::runtime_error(what + (got < 0 ? std::string(": ") + std::strerror(errno)
                                               : std::string(": unexpected end of file")));
    bytes += got;
    size -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

[[noreturn]] void fail_file(const std::string& path, const std::string& problem) {
  throw std::runtime_error(path + ": " + problem);
}

// The header's JSON text, its length checked against the file's size and
// the limit before anything is allocated.
std::string read_header_text(int fd, uint64_t file_bytes, const std::string& path) {
  if (file_bytes < 8)
    fail_file(path, "file is " + std::to_string(file_bytes) +
                        " bytes, too short for the 8-byte safetensors header length");
  uint64_t header_bytes = 0;
  pread_all(fd, &header_bytes, 8, 0, path);
  if (header_bytes > file_bytes - 8)
    fail_file(path, "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                        std::to_string(file_bytes) +
                        "-byte file (truncated, or not a safetensors file?)");
  if (header_bytes > kMaxHeaderBytes)
    fail_file(path, "header length " + std::to_string(header_bytes) + " exceeds the " +
                        std::to_string(kMaxHeaderBytes) + "-byte limit safetensors allows");
  std::string text(header_bytes, '\0');
  pread_all(fd, text.data(), header_bytes, 8, path);
  return text;
}

nlohmann::json parse_header(const std::string& text, const std::string& path) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    fail_file(path, std::string("header is not valid JSON: ") + error.what());
  }
  if (!json.is_object()) fail_file(path, "header is not a JSON object of tensors");
  return json;
}

void read_metadata(const nlohmann::json& value, const std::string& path,
                   std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) fail_file(path, "__metadata__ is not a JSON object");
  for (auto meta = value.begin(); meta != value.end(); ++meta) {
    if (!meta.value().is_string())
      fail_file(path, "__metadata__ must map strings to strings; '" + printable_text(meta.key()) +
                          "' holds " + json_value_text(meta.value()));
    metadata[meta.key()] = meta.value().get<std::string>();
  }
}

// An entry's "dtype", which must be one safetensors knows.
const DtypeInfo& dtype_of_entry(const nlohmann::json& value, const std::string& where,
                                const std::string& path) {
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string())
    fail_file(path, where + "missing string field 'dtype'");
  const DtypeInfo* found = nullptr;
  std::string known;
  for (const DtypeInfo& candidate : kDtypes) {
    if (dtype->get<std::string>() == candidate.name) found = &candidate;
    known += (known.empty() ? "" : ", ") + std::string(candidate.name);
  }
  if (!found)
    fail_file(path, where + "unknown dtype '" + printable_text(dtype->get<std::string>()) +
                        "' (known: " + known + ")");
  return *found;
}

// One tensor's header entry, its data range checked against the data's
// size and its shape.
SafetensorsTensor parse_tensor_entry(const std::string& name, const nlohmann::json& value,
                                     uint64_t data_bytes, const std::string& path) {
  const std::string where = "tensor '" + printable_text(name) + "': ";
  if (!value.is_object()) fail_file(path, where + "entry is not a JSON object");
  SafetensorsTensor tensor;
  tensor.name = name;
  const DtypeInfo& found = dtype_of_entry(value, where, path);
  tensor.dtype = found.dtype;
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array())
    fail_file(path, where + "missing array field 'shape'");
  for (const nlohmann::json& dim : *shape) {
    if (!dim.is_number_unsigned())
      fail_file(path, where + "shape holds " + json_value_text(dim) +
                          "; it must be a list of non-negative integers");
    tensor.shape.push_back(dim.get<int64_t>());
  }
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
    fail_file(path, where + "data_offsets must be [begin, end] non-negative integers");
  tensor.begin = (*offsets)[0].get<uint64_t>();
  tensor.end = (*offsets)[1].get<uint64_t>();
  const std::string range =
      "[" + std::to_string(tensor.begin) + ", " + std::to_string(tensor.end) + "]";
  if (tensor.end < tensor.begin)
    fail_file(path, where + "data_offsets " + range + " end before they begin");
  if (tensor.end > data_bytes)
    fail_file(path, where + "data_offsets " + range + " run past the " +
                        std::to_string(data_bytes) +
                        " bytes of data after the header (truncated?)");
  const int64_t elements = checked_elements(tensor.shape);
  uint64_t needed = 0;  // elements x dtype size, refused when it overflows
  const bool impossible =
      elements < 0 || __builtin_mul_overflow(static_cast<uint64_t>(elements), found.bytes, &needed);
  if (impossible || needed != tensor.end - tensor.begin)
    fail_file(path, where + "data_offsets " + range + " hold " +
                        std::to_string(tensor.end - tensor.begin) + " bytes but shape " +
                        shape_string(tensor.shape) + " of " + found.name + " needs " +
                        (impossible ? std::string("an impossible size") : std::to_string(needed)));
  return tensor;
}

// The tensors must tile the data exactly: sorted by offset, each starts
// where the previous ended and the last ends at the end of the file.
void check_tensors_tile_data(const std::vector<SafetensorsTensor>& tensors, uint64_t data_bytes,
                             const std::string& path) {
  std::vector<const SafetensorsTensor*> by_offset;
  for (const SafetensorsTensor& tensor : tensors) by_offset.push_back(&tensor);
  std::stable_sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t position = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor* tensor : by_offset) {
    if (tensor->begin < position)
      fail_file(path, "tensors '" + printable_text(previous->name) + "' [" +
                          std::to_string(previous->begin) + ", " + std::to_string(previous->end) +
                          "] and '" + printable_text(tensor->name) + "' [" +
                          std::to_string(tensor->begin) + ", " + std::to_string(tensor->end) +
                          "] overlap");
    if (tensor->begin > position)
      fail_file(path, "tensor '" + printable_text(tensor->name) + "' starts at data offset " +
                          std::to_string(tensor->begin) + " but the data before it ends at " +
                          std::to_string(position) + "; safetensors data must be contiguous");
    position = tensor->end;
    previous = tensor;
  }
  if (position != data_bytes)
    fail_file(path, "the tensors end at data offset " + std::to_string(position) + " but " +
                        std::to_string(data_bytes) + " bytes follow the header (extra data?)");
}

}  // namespace

const char* dtype_name(Dtype dtype) {
  return info_of(dtype).name;
}
size_t dtype_bytes(Dtype dtype) {
  return info_of(dtype).bytes;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t SafetensorsTensor::num_elements() const {
  return checked_elements(shape);
}

// ---- writer ----

SafetensorsWriter::Entry& SafetensorsWriter::new_entry(const std::string& name,
                                                       const std::vector<int64_t>& shape,
                                                       Dtype dtype) {
  if (name.empty() || name == "__metadata__")
    throw std::runtime_error("safetensors: tensor name '" + name + "' is reserved or empty");
  for (const Entry& entry : entries_)
    if (entry.name == name)
      throw std::runtime_error("safetensors: tensor '" + name + "' added twice");
  const int64_t elements = checked_elements(shape);
  if (elements < 0)
    throw std::runtime_error("safetensors: tensor '" + name + "' has invalid shape " +
                             shape_string(shape));
  Entry& entry = entries_.emplace_back();
  entry.name = name;
  entry.dtype = dtype;
  entry.shape = shape;
  entry.bytes = static_cast<size_t>(elements) * dtype_bytes(dtype);
  return entry;
}

void SafetensorsWriter::add(const std::string& name, const std::vector<int64_t>& shape,
                            const float* data, Dtype dtype) {
  if (dtype != Dtype::kF32 && dtype != Dtype::kBF16)
    throw std::runtime_error("safetensors: tensor '" + name + "': writing " + dtype_name(dtype) +
                             " is not supported; use F32 or BF16");
  Entry& entry = new_entry(name, shape, dtype);
  entry.owned.resize(entry.bytes);
  if (dtype == Dtype::kF32) {
    if (entry.bytes > 0) std::memcpy(entry.owned.data(), data, entry.bytes);
  } else {
    uint16_t* out = reinterpret_cast<uint16_t*>(entry.owned.data());
    for (size_t i = 0; i < entry.bytes / 2; ++i) out[i] = float_to_bf16(data[i]);
  }
}

void SafetensorsWriter::add_view(const std::string& name, const std::vector<int64_t>& shape,
                                 const float* data) {
  new_entry(name, shape, Dtype::kF32).view = data;
}

void SafetensorsWriter::declare(const std::string& name, const std::vector<int64_t>& shape) {
  new_entry(name, shape, Dtype::kF32).streamed = true;
}

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  metadata_[key] = value;
}

std::string SafetensorsWriter::header() const {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  if (!metadata_.empty()) json["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Entry& entry : entries_) {
    json[entry.name] = {{"dtype", dtype_name(entry.dtype)},
                        {"shape", entry.shape},
                        {"data_offsets", {offset, offset + entry.bytes}}};
    offset += entry.bytes;
  }
  std::string text = json.dump();
  // Pad so the data starts 8-byte aligned (8 + N is a multiple of 8), as Python's writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void SafetensorsWriter::write(const std::string& path) const {
  for (const Entry& entry : entries_)
    if (entry.streamed)
      throw std::logic_error(path + ": tensor '" + entry.name +
                             "' was declared for a stream; write it with open_stream()");
  const std::string text = header();
  const uint64_t length = text.size();
  AtomicFileWriter writer(path);
  writer.write(&length, sizeof(length));
  writer.write(text);
  for (const Entry& entry : entries_)
    writer.write(entry.view ? entry.view : entry.owned.data(), entry.bytes);
  writer.commit();
}

SafetensorsStream SafetensorsWriter::open_stream(const std::string& path) const {
  SafetensorsStream stream;
  stream.path_ = path;
  for (const Entry& entry : entries_) {
    if (!entry.streamed)
      throw std::logic_error(path + ": tensor '" + entry.name +
                             "' was added with its data; a stream takes declared tensors only");
    stream.pending_.emplace_back(entry.name, entry.bytes);
  }
  const std::string text = header();
  const uint64_t length = text.size();
  stream.file_ = std::make_unique<AtomicFileWriter>(path);
  stream.file_->write(&length, sizeof(length));
  stream.file_->write(text);
  return stream;
}

SafetensorsStream::SafetensorsStream(SafetensorsStream&&) noexcept = default;
SafetensorsStream& SafetensorsStream::operator=(SafetensorsStream&&) noexcept = default;
SafetensorsStream::~SafetensorsStream() = default;

void SafetensorsStream::append(const std::string& name, const float* data) {
  if (next_ >= pending_.size() || pending_[next_].first != name)
    throw std::logic_error(path_ + ": tensor '" + name + "' appended out of order; expected " +
                           (next_ < pending_.size() ? "'" + pending_[next_].first + "'"
                                                    : std::string("no more tensors")));
  file_->write(data, pending_[next_].second);
  ++next_;
}

void SafetensorsStream::commit() {
  if (next_ != pending_.size())
    throw std::logic_error(path_ + ": committed with " + std::to_string(pending_.size() - next_) +
                           " declared tensors not appended, the first '" + pending_[next_].first +
                           "'");
  file_->commit();
}

// ---- reader ----

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept {
  *this = std::move(other);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  // Only a regular file is opened: a named pipe would block, a device never end.
  constexpr FileKind kSafetensorsFile{"safetensors file", std::numeric_limits<uint64_t>::max()};
  RegularFile opened(path, kSafetensorsFile);
  const uint64_t file_bytes = opened.size();
  file.fd_ = opened.release();
  const std::string text = read_header_text(file.fd_, file_bytes, path);
  file.data_start_ = 8 + text.size();
  const uint64_t data_bytes = file_bytes - file.data_start_;

  const nlohmann::json json = parse_header(text, path);
  for (auto item = json.begin(); item != json.end(); ++item) {
    if (item.key() == "__metadata__")
      read_metadata(item.value(), path, file.metadata_);
    else
      file.tensors_.push_back(parse_tensor_entry(item.key(), item.value(), data_bytes, path));
  }
  check_tensors_tile_data(file.tensors_, data_bytes, path);

  // Header order, as the file was written.
  std::sort(
      file.tensors_.begin(), file.tensors_.end(),
      [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < file.tensors_.size(); ++i) file.index_[file.tensors_[i].name] = i;
  return file;
}

bool SafetensorsFile::has(const std::string& name) const {
  return index_.count(name) > 0;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const auto found = index_.find(name);
  if (found == index_.end())
    throw std::runtime_error(path_ + ": no tensor named '" + name + "' (the file holds " +
                             std::to_string(tensors_.size()) + " tensors)");
  return tensors_[found->second];
}

void SafetensorsFile::read(const std::string& name, float* out,
                           const std::vector<int64_t>& expected_shape) const {
  read_range(name, expected_shape, 0, static_cast<size_t>(tensor(name).num_elements()), out);
}

void SafetensorsFile::read_range(const std::string& name,
                                 const std::vector<int64_t>& expected_shape, size_t first,
                                 size_t count, float* out) const {
  const SafetensorsTensor& info = tensor(name);
  if (info.shape != expected_shape)
    throw std::runtime_error(path_ + ": tensor '" + name + "' has shape " +
                             shape_string(info.shape) + " but " + shape_string(expected_shape) +
                             " was expected");
  if (first > static_cast<size_t>(info.num_elements()) ||
      count > static_cast<size_t>(info.num_elements()) - first)
    throw std::logic_error(path_ + ": tensor '" + name + "': elements " + std::to_string(first) +
                           " + " + std::to_string(count) + " run past its " +
                           std::to_string(info.num_elements()));
  const std::string what = path_ + ": reading tensor '" + name + "'";
  const size_t elements = count;
  const uint64_t start = data_start_ + info.begin + first * dtype_bytes(info.dtype);
  switch (info.dtype) {
    case Dtype::kF32:
      pread_all(fd_, out, elements * 4, start, what);
      return;
    case Dtype::kBF16:
    case Dtype::kF16: {
      std::vector<uint16_t> half(elements);
      pread_all(fd_, half.data(), elements * 2, start, what);
      for (size_t i = 0; i < elements; ++i)
        out[i] = info.dtype == Dtype::kBF16 ? bf16_to_float(half[i]) : f16_to_float(half[i]);
      return;
    }
    case Dtype::kBool:
    case Dtype::kU8:
    case Dtype::kI8:
    case Dtype::kF8E4M3:
    case Dtype::kF8E5M2:
    case Dtype::kI16:
    case Dtype::kU16:
    case Dtype::kI32:
    case Dtype::kU32:
    case Dtype::kI64:
    case Dtype::kU64:
    case Dtype::kF64:
      break;
  }
  throw std::runtime_error(path_ + ": tensor '" + name + "' is " + dtype_name(info.dtype) +
                           ", which cannot be read as float (F32, BF16 or F16 can)");
}

}  // namespace paraplan
