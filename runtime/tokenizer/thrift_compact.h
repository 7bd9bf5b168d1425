// thrift_compact.h: Apache Thrift's compact protocol, as much as Parquet's
// metadata needs (parquet.h): structs read field by field, integers as
// zigzag varints, binaries, lists, and any field skipped by its type. Every
// read is bounded by the buffer; a malformed one throws naming `where`.
// Internal to runtime/tokenizer/.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace paraplan {

class ThriftCompactReader {
 public:
  // The compact protocol's field types.
  enum Type : int {
    kTrue = 1,
    kFalse = 2,
    kByte = 3,
    kI16 = 4,
    kI32 = 5,
    kI64 = 6,
    kDouble = 7,
    kBinary = 8,
    kList = 9,
    kSet = 10,
    kMap = 11,
    kStruct = 12
  };

  ThriftCompactReader(std::string_view data, const std::string& where)
      : data_(data), where_(where) {}
  size_t position() const { return at_; }

  // Calls field(id, type) for each field of a struct; it reads the value (a
  // boolean's is its type) or calls skip(type).
  template <typename Field>
  void read_struct(Field&& field) {
    if (++depth_ > kMaxDepth) fail("containers nest deeper than " + std::to_string(kMaxDepth));
    int64_t last = 0;
    for (;;) {
      const uint32_t header = byte();
      if (header == 0) break;  // STOP
      const int type = static_cast<int>(header & 0x0F);
      const int64_t delta = header >> 4;
      const int64_t id = delta != 0 ? last + delta : zigzag(varint());
      if (id < -32768 || id > 32767) fail("a field id of " + std::to_string(id) + ", not an i16");
      last = id;
      field(id, type);
    }
    --depth_;
  }
  // Calls element(type) for each element of a list (or set).
  template <typename Element>
  void read_list(Element&& element) {
    if (++depth_ > kMaxDepth) fail("containers nest deeper than " + std::to_string(kMaxDepth));
    const uint32_t header = byte();
    uint64_t size = header >> 4;
    if (size == 15) size = varint();
    const int type = static_cast<int>(header & 0x0F);
    if (size > data_.size() - at_) fail("a list of " + std::to_string(size) + " elements");
    for (uint64_t i = 0; i < size; ++i) element(type);
    --depth_;
  }
  int64_t integer() { return zigzag(varint()); }
  std::string_view binary() {
    const uint64_t size = varint();
    if (size > data_.size() - at_) fail("a binary of " + std::to_string(size) + " bytes");
    const std::string_view value = data_.substr(at_, size);
    at_ += size;
    return value;
  }
  void skip(int type) {
    switch (type) {
      case kTrue:
      case kFalse:
        return;
      case kByte:
        byte();
        return;
      case kI16:
      case kI32:
      case kI64:
        varint();
        return;
      case kDouble:
        advance(8);
        return;
      case kBinary:
        binary();
        return;
      case kList:
      case kSet:
        read_list([&](int element) { skip_element(element); });
        return;
      case kMap: {
        const uint64_t size = varint();
        if (size == 0) return;
        const uint32_t types = byte();
        if (size > data_.size() - at_) fail("a map of " + std::to_string(size) + " entries");
        if (++depth_ > kMaxDepth) fail("containers nest deeper than " + std::to_string(kMaxDepth));
        for (uint64_t i = 0; i < size; ++i) {
          skip_element(static_cast<int>(types >> 4));
          skip_element(static_cast<int>(types & 0x0F));
        }
        --depth_;
        return;
      }
      case kStruct:
        read_struct([&](int64_t, int field) { skip(field); });
        return;
    }
    fail("field type " + std::to_string(type) + " is not Thrift's");
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(where_ + ": malformed Parquet metadata (Thrift): " + what +
                             " at byte " + std::to_string(at_));
  }

 private:
  static constexpr int kMaxDepth = 32;
  // A list's booleans are a byte each, unlike a field's.
  void skip_element(int type) {
    if (type == kTrue || type == kFalse)
      advance(1);
    else
      skip(type);
  }
  uint32_t byte() {
    if (at_ >= data_.size()) fail("it ends early");
    return static_cast<unsigned char>(data_[at_++]);
  }
  void advance(size_t count) {
    if (count > data_.size() - at_) fail("it ends early");
    at_ += count;
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint32_t b = byte();
      value |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return value;
    }
    fail("a varint longer than 10 bytes");
  }
  static int64_t zigzag(uint64_t value) {
    return static_cast<int64_t>(value >> 1) ^ -static_cast<int64_t>(value & 1);
  }

  std::string_view data_;
  size_t at_ = 0;
  int depth_ = 0;
  const std::string& where_;
};

}  // namespace paraplan
