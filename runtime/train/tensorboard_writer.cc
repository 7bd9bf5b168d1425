// tensorboard_writer.cc: TensorBoard event files by hand (tensorboard_writer.h).
#include "runtime/train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace paraplan {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    table[byte] = crc;
  }
  return table;
}

// Protocol buffer encoding, the few wire types an Event needs.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

template <typename T>
void put_fixed(std::string& out, int field, T value) {  // double (wire 1), float (wire 5)
  put_key(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as protobuf wants
  out.append(bytes, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3;
// Summary summary = 5; }.
std::string event(int64_t step, const std::string* file_version, const std::string* summary) {
  std::string out;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_fixed(out, 1, now);
  put_key(out, 2, 0);
  put_varint(out, static_cast<uint64_t>(step));
  if (file_version) put_bytes(out, 3, *file_version);
  if (summary) put_bytes(out, 5, *summary);
  return out;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error || !std::filesystem::is_directory(directory))
    throw std::runtime_error(directory + ": cannot create the --tensorboard-dir" +
                             (error ? ": " + error.message() : std::string()));
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  path_ = (std::filesystem::path(directory) /
           ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." +
            std::to_string(static_cast<long>(::getpid()))))
              .string();
  file_ = std::fopen(path_.c_str(), "wbx");
  if (file_ == nullptr)
    throw std::runtime_error(path_ +
                             ": cannot create the TensorBoard event file: " + std::strerror(errno));
  const std::string version = "brain.Event:2";
  write_record(event(0, &version, nullptr));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::add_scalars(int64_t step,
                                    const std::vector<std::pair<std::string, double>>& scalars) {
  // Summary { repeated Value value = 1; }, Value { string tag = 1; float simple_value = 2; }.
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    put_bytes(entry, 1, tag);
    put_fixed(entry, 2, static_cast<float>(value));
    put_bytes(summary, 1, entry);
  }
  write_record(event(step, nullptr, &summary));
}

void TensorBoardWriter::write_record(const std::string& event) {
  // TFRecord: uint64 length, uint32 masked CRC of the length, the data,
  // uint32 masked CRC of the data; little-endian.
  const uint64_t length = event.size();
  const uint32_t length_crc = masked_crc32c(&length, sizeof length);
  const uint32_t data_crc = masked_crc32c(event.data(), event.size());
  const bool written = std::fwrite(&length, sizeof length, 1, file_) == 1 &&
                       std::fwrite(&length_crc, sizeof length_crc, 1, file_) == 1 &&
                       std::fwrite(event.data(), 1, event.size(), file_) == event.size() &&
                       std::fwrite(&data_crc, sizeof data_crc, 1, file_) == 1 &&
                       std::fflush(file_) == 0;
  if (!written)
    throw std::runtime_error(path_ + ": cannot write a TensorBoard event: " + std::strerror(errno));
}

}  // namespace paraplan
