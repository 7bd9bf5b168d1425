// tensorboard_writer_test.cc: CRC-32C against its published check value, and
// an event file's framing read back record by record. (TensorBoard itself
// reads a trained run's file: tests/tensorboard_test.cc.)
#include "runtime/train/tensorboard_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/testing/test_temp_dir.h"

namespace paraplan {
namespace {

TEST(TensorBoardWriter, Crc32cIsCastagnolis) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c("", 0), 0u);
  // TFRecord's masked form, as TensorBoard's own masked_crc32c gives it.
  EXPECT_EQ(masked_crc32c("abc", 3), 0x21F1576Eu);
  const uint64_t length = 24;  // a record header's length field
  EXPECT_EQ(masked_crc32c(&length, sizeof length), 0x224B7FA3u);
}

// Every record: its length, the length's masked CRC, the event, its masked
// CRC; the first is the file version, the next the scalars with their tags.
TEST(TensorBoardWriter, RecordsAreFramedAndHoldTheTagsAndValues) {
  testing::TempDir directory;
  std::string path;
  {
    TensorBoardWriter writer((directory.path() / "runs").string());
    path = writer.path();
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    writer.add_scalars(7, {{"loss/train", 2.5}, {"optimizer/lr", 3e-4}});
  }
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> events;
  for (size_t at = 0; at < bytes.size();) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length = 0;
    uint32_t length_crc = 0, data_crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&length_crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(length_crc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + length + 4, bytes.size());
    const std::string event = bytes.substr(at + 12, length);
    std::memcpy(&data_crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(data_crc, masked_crc32c(event.data(), event.size()));
    events.push_back(event);
    at += 12 + length + 4;
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[0].find("\x1a\x0d"
                           "brain.Event:2"),
            std::string::npos);
  EXPECT_NE(events[1].find(std::string("\x10\x07", 2)), std::string::npos) << "step 7";
  EXPECT_NE(events[1].find("\x0a\x0aloss/train\x15"), std::string::npos);
  float value = 0;
  const size_t at = events[1].find("loss/train\x15") + 11;
  std::memcpy(&value, events[1].data() + at, 4);
  EXPECT_EQ(value, 2.5f);
  EXPECT_NE(events[1].find("optimizer/lr"), std::string::npos);
}

TEST(TensorBoardWriter, ADirectoryThatCannotBeMadeIsNamed) {
  testing::TempDir directory;
  const std::string file = (directory.path() / "plain").string();
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter writer(file + "/runs");
    FAIL() << "a directory under a file";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find(file + "/runs: cannot create the --tensorboard-dir"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace paraplan
