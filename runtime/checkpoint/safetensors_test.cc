// safetensors_test.cc: the byte layout Python's safetensors writes and reads
// (header length, JSON, space padding to 8, contiguous offsets), round trips,
// dtype conversion, and every validation error.
#include "runtime/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

using testing::contains;
using testing::error_of;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::string le64(uint64_t value) {
  return std::string(reinterpret_cast<const char*>(&value), 8);
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A file as the Python library lays it out: length, header padded with spaces to 8, data.
std::string file_with(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

TEST(SafetensorsTest, SingleTensorMatchesPythonsBytesExactly) {
  // What safetensors.torch.save_file({"a": torch.tensor([1.0, -2.0])}, path,
  // metadata={"format": "pt"}) writes.
  TempDir dir;
  const float values[] = {1.0f, -2.0f};
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");
  writer.add("a", {2}, values);
  writer.write(dir / "a.safetensors");
  const std::string json =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 85u);  // padded with 3 spaces to 88
  const std::string expected = le64(88) + json + "   " + std::string("\x00\x00\x80\x3f", 4) +
                               std::string("\x00\x00\x00\xc0", 4);
  EXPECT_EQ(read_bytes(dir / "a.safetensors"), expected);
}

TEST(SafetensorsTest, HeaderIsPaddedAndOffsetsAreContiguousInWriteOrder) {
  TempDir dir;
  std::vector<float> big(6), small(1), none;
  for (int i = 0; i < 6; ++i) big[i] = static_cast<float>(i);
  small[0] = 42.0f;
  SafetensorsWriter writer;
  writer.add("z.big", {2, 3}, big.data());
  writer.add("a.small", {1}, small.data());
  writer.add("m.empty", {0, 4}, none.data());
  writer.add("half", {2}, big.data(), Dtype::kBF16);
  writer.write(dir / "t.safetensors");

  const std::string bytes = read_bytes(dir / "t.safetensors");
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 24 + 4 + 0 + 4);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header, writer.header());
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));  // only spaces after the JSON
  const nlohmann::json json = nlohmann::json::parse(header);
  EXPECT_EQ(json["z.big"]["data_offsets"], nlohmann::json({0, 24}));
  EXPECT_EQ(json["a.small"]["data_offsets"], nlohmann::json({24, 28}));
  EXPECT_EQ(json["m.empty"]["data_offsets"], nlohmann::json({28, 28}));
  EXPECT_EQ(json["half"]["data_offsets"], nlohmann::json({28, 32}));
  EXPECT_EQ(json["half"]["dtype"], "BF16");
  EXPECT_EQ(json["z.big"]["shape"], nlohmann::json({2, 3}));
  EXPECT_FALSE(json.contains("__metadata__"));
  // Tensor bytes at their offsets after the header.
  float value;
  std::memcpy(&value, bytes.data() + 8 + n + 5 * 4, 4);
  EXPECT_EQ(value, 5.0f);
  std::memcpy(&value, bytes.data() + 8 + n + 24, 4);
  EXPECT_EQ(value, 42.0f);

  const SafetensorsFile file = SafetensorsFile::open(dir / "t.safetensors");
  EXPECT_EQ(file.data_start(), 8 + n);
  ASSERT_EQ(file.tensors().size(), 4u);
  EXPECT_EQ(file.tensors()[0].name, "z.big");
  EXPECT_EQ(file.tensors()[1].name, "a.small");
  EXPECT_EQ(file.shape("m.empty"), (std::vector<int64_t>{0, 4}));
  std::vector<float> out(6);
  file.read("z.big", out.data(), {2, 3});
  EXPECT_EQ(out, big);
  file.read("half", out.data(), {2});
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 1.0f);
}

TEST(SafetensorsTest, F32RoundTripIsBitwise) {
  TempDir dir;
  const std::vector<float> values = {0.1f,
                                     -0.0f,
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::infinity(),
                                     std::numeric_limits<float>::quiet_NaN(),
                                     3.4e38f};
  SafetensorsWriter writer;
  writer.add_view("v", {3, 2}, values.data());
  writer.set_metadata("note", "paraplan");
  writer.write(dir / "v.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(dir / "v.safetensors");
  EXPECT_EQ(file.metadata().at("note"), "paraplan");
  EXPECT_TRUE(file.has("v"));
  EXPECT_FALSE(file.has("w"));
  std::vector<float> out(6);
  file.read("v", out.data(), {3, 2});
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(values[i])) << i;
}

TEST(SafetensorsTest, Bf16RoundsToNearestEven) {
  TempDir dir;
  const std::vector<float> values = {
      std::bit_cast<float>(0x3f808000u),  // halfway, even below: 0x3f80
      std::bit_cast<float>(0x3f818000u),  // halfway, odd below: 0x3f82
      std::bit_cast<float>(0x3f808001u),  // above halfway: 0x3f81
      -1.5f};
  SafetensorsWriter writer;
  writer.add("b", {4}, values.data(), Dtype::kBF16);
  writer.write(dir / "b.safetensors");
  const std::string bytes = read_bytes(dir / "b.safetensors");
  EXPECT_EQ(bytes.substr(bytes.size() - 8),
            raw(std::vector<uint16_t>{0x3f80, 0x3f82, 0x3f81, 0xbfc0}));
}

TEST(SafetensorsTest, ReadsF16AsFloat) {
  TempDir dir;
  write_bytes(dir / "h.safetensors",
              file_with(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})",
                        raw(std::vector<uint16_t>{0x3c00, 0xc000, 0x0001, 0x7c00})));
  std::vector<float> out(4);
  SafetensorsFile::open(dir / "h.safetensors").read("h", out.data(), {4});
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], std::ldexp(1.0f, -24));
  EXPECT_EQ(out[3], std::numeric_limits<float>::infinity());
}

TEST(SafetensorsTest, OverwritesAtomicallyLeavingNoTemporaryFile) {
  TempDir dir;
  const float one = 1.0f, two = 2.0f;
  SafetensorsWriter first, second;
  first.add("x", {1}, &one);
  second.add("x", {1}, &two);
  first.write(dir / "x.safetensors");
  second.write(dir / "x.safetensors");
  float out = 0;
  SafetensorsFile::open(dir / "x.safetensors").read("x", &out, {1});
  EXPECT_EQ(out, 2.0f);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(SafetensorsTest, WriterRefusesDuplicateAndReservedNames) {
  const float value = 0;
  SafetensorsWriter writer;
  writer.add("x", {1}, &value);
  EXPECT_EQ(error_of([&] { writer.add("x", {1}, &value); }), "safetensors: tensor 'x' added twice");
  EXPECT_TRUE(contains(error_of([&] { writer.add("__metadata__", {1}, &value); }), "reserved"));
  EXPECT_TRUE(contains(error_of([&] { writer.add("y", {-1}, &value); }), "invalid shape [-1]"));
}

// A streamed file is byte for byte the file written at once, and holds one
// tensor at a time: distributed checkpoints write whole tensors of large
// models this way.
TEST(SafetensorsTest, StreamedFileIsTheFileWrittenAtOnce) {
  TempDir dir;
  const std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {4.0f, 5.0f, 6.0f, 7.0f};
  SafetensorsWriter whole, declared;
  for (SafetensorsWriter* writer : {&whole, &declared}) writer->set_metadata("format", "pt");
  whole.add("a", {3}, a.data());
  whole.add("b", {2, 2}, b.data());
  declared.declare("a", {3});
  declared.declare("b", {2, 2});
  whole.write(dir / "whole.safetensors");
  SafetensorsStream stream = declared.open_stream(dir / "streamed.safetensors");
  stream.append("a", a.data());
  EXPECT_FALSE(std::filesystem::exists(dir / "streamed.safetensors"));  // not before commit
  stream.append("b", b.data());
  stream.commit();
  EXPECT_EQ(read_bytes(dir / "streamed.safetensors"), read_bytes(dir / "whole.safetensors"));
}

TEST(SafetensorsTest, StreamRefusesTensorsOutOfOrderAndAnIncompleteCommit) {
  TempDir dir;
  const float value = 1.0f;
  SafetensorsWriter declared;
  declared.declare("a", {1});
  declared.declare("b", {1});
  const auto logic_error_of = [](auto&& statement) -> std::string {
    try {
      statement();
    } catch (const std::logic_error& error) {
      return error.what();
    }
    return "<no exception>";
  };
  EXPECT_TRUE(contains(logic_error_of([&] { declared.write(dir / "x.safetensors"); }),
                       "declared for a stream"));
  {
    SafetensorsStream stream = declared.open_stream(dir / "x.safetensors");
    EXPECT_TRUE(contains(logic_error_of([&] { stream.append("b", &value); }),
                         "tensor 'b' appended out of order; expected 'a'"));
    stream.append("a", &value);
    EXPECT_TRUE(contains(logic_error_of([&] { stream.commit(); }),
                         "1 declared tensors not appended, the first 'b'"));
  }
  // Dropped uncommitted: nothing is left, not even the temporary file.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  SafetensorsWriter with_data;
  with_data.add("a", {1}, &value);
  EXPECT_TRUE(contains(logic_error_of([&] { with_data.open_stream(dir / "y.safetensors"); }),
                       "declared tensors only"));
}

// ---- validation errors, each naming the file and the tensor ----

class SafetensorsErrorTest : public ::testing::Test {
 protected:
  std::string open_error(const std::string& bytes) {
    write_bytes(path(), bytes);
    return error_of([&] { SafetensorsFile::open(path()); });
  }
  std::string path() const { return dir_ / "bad.safetensors"; }
  TempDir dir_;
};

TEST_F(SafetensorsErrorTest, MissingFile) {
  EXPECT_EQ(error_of([&] { SafetensorsFile::open(path()); }),
            path() + ": cannot read the safetensors file: No such file or directory");
}

TEST_F(SafetensorsErrorTest, ShorterThanTheLength) {
  EXPECT_EQ(open_error("abc"),
            path() + ": file is 3 bytes, too short for the 8-byte safetensors header length");
}

TEST_F(SafetensorsErrorTest, HeaderLengthBeyondTheFile) {
  EXPECT_EQ(open_error(le64(1000) + "{}"),
            path() +
                ": header length 1000 runs past the end of the 10-byte file (truncated, or "
                "not a safetensors file?)");
}

TEST_F(SafetensorsErrorTest, BadJson) {
  EXPECT_TRUE(
      contains(open_error(file_with(R"({"a": [)", "")), path() + ": header is not valid JSON: "));
  EXPECT_TRUE(contains(open_error(file_with("[1, 2]", "")), "header is not a JSON object"));
}

TEST_F(SafetensorsErrorTest, UnknownDtype) {
  EXPECT_TRUE(contains(
      open_error(file_with(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd")),
      path() + ": tensor 'w': unknown dtype 'F33' (known: BOOL, U8, "));
}

TEST_F(SafetensorsErrorTest, OffsetsPastTheData) {
  EXPECT_EQ(
      open_error(file_with(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd")),
      path() +
          ": tensor 'w': data_offsets [0, 8] run past the 4 bytes of data after the header "
          "(truncated?)");
}

TEST_F(SafetensorsErrorTest, SizeNotMatchingTheShape) {
  EXPECT_EQ(
      open_error(file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                           std::string(20, 'x'))),
      path() + ": tensor 'w': data_offsets [0, 20] hold 20 bytes but shape [2, 3] of F32 needs 24");
}

TEST_F(SafetensorsErrorTest, OverlappingTensors) {
  EXPECT_TRUE(
      contains(open_error(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    std::string(12, 'x'))),
               path() + ": tensors 'a' [0, 8] and 'b' [4, 12] overlap"));
}

TEST_F(SafetensorsErrorTest, GapBetweenTensors) {
  EXPECT_TRUE(
      contains(open_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                    std::string(12, 'x'))),
               "tensor 'b' starts at data offset 8 but the data before it ends at 4"));
}

TEST_F(SafetensorsErrorTest, ExtraDataAfterTheTensors) {
  EXPECT_TRUE(
      contains(open_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                    std::string(8, 'x'))),
               "the tensors end at data offset 4 but 8 bytes follow the header"));
}

TEST_F(SafetensorsErrorTest, MalformedFields) {
  EXPECT_TRUE(contains(open_error(file_with(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "xxxx")),
                       "tensor 'a': missing string field 'dtype'"));
  EXPECT_TRUE(contains(
      open_error(file_with(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "xxxx")),
      "tensor 'a': shape holds -1; it must be a list of non-negative integers"));
  EXPECT_TRUE(contains(
      open_error(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", "xxxx")),
      "tensor 'a': data_offsets must be [begin, end]"));
  EXPECT_TRUE(contains(open_error(file_with(R"({"__metadata__":{"k":3}})", "")),
                       "__metadata__ must map strings to strings; 'k' holds 3"));
}

TEST_F(SafetensorsErrorTest, ReadChecksNameShapeAndDtype) {
  write_bytes(path(), file_with(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                                R"("i":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}})",
                                std::string(32, '\0')));
  const SafetensorsFile file = SafetensorsFile::open(path());
  std::vector<float> out(6);
  EXPECT_EQ(error_of([&] {
              file.read("w", out.data(), {3, 2});
            }),
            path() + ": tensor 'w' has shape [2, 3] but [3, 2] was expected");
  EXPECT_EQ(error_of([&] {
              file.read("v", out.data(), {3, 2});
            }),
            path() + ": no tensor named 'v' (the file holds 2 tensors)");
  EXPECT_TRUE(contains(error_of([&] { file.read("i", out.data(), {1}); }),
                       "tensor 'i' is I64, which cannot be read as float"));
}

}  // namespace
}  // namespace paraplan
