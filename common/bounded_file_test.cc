// bounded_file_test.cc: what read_bounded_file and RegularFile refuse, and
// that refusing a named pipe or a device never blocks or reads without end;
// the UTF-8 check and printable_text of printable_text.h.
#include "common/bounded_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/printable_text.h"

namespace paraplan {
namespace {

namespace fs = std::filesystem;

class BoundedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("paraplan_bounded_file_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary) << text;
  }
  static std::string error_of(const std::string& file, const FileKind& kind) {
    try {
      read_bounded_file(file, kind);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    return "<no exception>";
  }

  fs::path dir_;
};

constexpr FileKind kSmall{"test file", 16};

TEST_F(BoundedFileTest, ReadsARegularFileWhole) {
  write("a.txt", "hello\nworld");
  EXPECT_EQ(read_bounded_file(path("a.txt"), kSmall), "hello\nworld");
  EXPECT_EQ(read_bounded_file<std::vector<uint8_t>>(path("a.txt"), kSmall),
            (std::vector<uint8_t>{'h', 'e', 'l', 'l', 'o', '\n', 'w', 'o', 'r', 'l', 'd'}));
  write("empty.txt", "");
  EXPECT_EQ(read_bounded_file(path("empty.txt"), kSmall), "");
  write("exact.txt", std::string(16, 'x'));
  EXPECT_EQ(read_bounded_file(path("exact.txt"), kSmall), std::string(16, 'x'));
}

// What error_of(file, kind) gives, computed in a child process that is
// killed after 10 s: a read that blocks fails the test instead of hanging it.
std::string error_within_seconds(const std::string& file, const FileKind& kind) {
  int fds[2];
  if (::pipe(fds) != 0) return "<no pipe>";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::alarm(10);
    std::string message = "<no exception>";
    try {
      read_bounded_file(file, kind);
    } catch (const std::runtime_error& error) {
      message = error.what();
    }
    const ssize_t written = ::write(fds[1], message.data(), message.size());
    ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string message;
  char buffer[256];
  for (ssize_t got; (got = ::read(fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, got);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) return "<killed by signal " + std::to_string(WTERMSIG(status)) + ">";
  return message;
}

// A named pipe without a writer would block open() and read() forever.
TEST_F(BoundedFileTest, NamedPipeIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  EXPECT_EQ(error_within_seconds(path("pipe"), kJobConfigFile),
            path("pipe") +
                ": cannot read the job config: it is a named pipe (FIFO); expected a "
                "regular file");
}

// /dev/zero never ends; a directory reads as nothing.
TEST_F(BoundedFileTest, DevicesAndDirectoriesAreRefused) {
  EXPECT_EQ(error_within_seconds("/dev/zero", kJobConfigFile),
            "/dev/zero: cannot read the job config: it is a character device; expected a regular "
            "file");
  EXPECT_EQ(error_of(dir_.string(), kPartitionConstraintsFile),
            dir_.string() +
                ": cannot read the partition constraints file: it is a directory; "
                "expected a regular file");
  EXPECT_EQ(error_of(path("absent"), kHostfile),
            path("absent") + ": cannot read the hostfile: No such file or directory");
}

TEST_F(BoundedFileTest, FilesAboveTheirKindsLimitAreRefused) {
  write("big.txt", std::string(17, 'x'));
  EXPECT_EQ(error_of(path("big.txt"), kSmall),
            path("big.txt") +
                ": cannot read the test file: it is 17 bytes, more than the 16 "
                "bytes a test file may hold");
  write("big.toml", std::string(4 * kMiB + 1, '#'));
  EXPECT_EQ(error_of(path("big.toml"), kJobConfigFile),
            path("big.toml") +
                ": cannot read the job config: it is 4194305 bytes, more than the "
                "4 MiB a job config may hold");
}

// A symbolic link to a regular file reads as the file; to a pipe, is refused.
TEST_F(BoundedFileTest, LinksAreJudgedByWhatTheyNameAndRegularFileKeepsItsDescriptor) {
  write("a.txt", "abc");
  fs::create_symlink(path("a.txt"), path("link"));
  EXPECT_EQ(read_bounded_file(path("link"), kSmall), "abc");
  ASSERT_EQ(::mkfifo(path("pipe").c_str(), 0600), 0);
  fs::create_symlink(path("pipe"), path("pipe_link"));
  EXPECT_NE(error_within_seconds(path("pipe_link"), kSmall).find("named pipe"), std::string::npos);
  RegularFile file(path("a.txt"), kSmall);
  EXPECT_EQ(file.size(), 3u);
  const int fd = file.release();
  char bytes[3];
  EXPECT_EQ(::read(fd, bytes, 3), 3);
  ::close(fd);
}

TEST(PrintableTextTest, ControlBytesAndLongTextAreShownSafely) {
  EXPECT_EQ(printable_text(std::string("ab\xff\n\\", 5)), "ab\\xff\\x0a\\x5c");
  EXPECT_EQ(printable_text(std::string(70, 'y'), 64), std::string(64, 'y') + "...");
}

TEST(PrintableTextTest, Utf8IsCheckedAsRfc3629Says) {
  EXPECT_EQ(utf8_problem("plain ASCII, caf\xc3\xa9, \xe2\x82\xac, \xf0\x9f\x98\x80"), "");
  EXPECT_EQ(utf8_problem("ab\xff"), "byte 0xff at offset 2 is not valid UTF-8");
  EXPECT_EQ(utf8_problem("\xc0\xaf"), "byte 0xc0 at offset 0 is not valid UTF-8");      // overlong
  EXPECT_EQ(utf8_problem("\xed\xa0\x80"), "byte 0xa0 at offset 1 is not valid UTF-8");  // surrogate
  EXPECT_EQ(utf8_problem("\xf4\x90\x80\x80"), "byte 0x90 at offset 1 is not valid UTF-8");
  EXPECT_EQ(utf8_problem("x\xe2\x82"), "byte 0xe2 at offset 1 is not valid UTF-8");  // truncated
  EXPECT_EQ(utf8_problem("\xc3("), "byte 0x28 at offset 1 is not valid UTF-8");
}

}  // namespace
}  // namespace paraplan
