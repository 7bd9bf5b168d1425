// fuzz_support.h: what every fuzz target shares: the oracle that a refusal is
// a std::runtime_error whose message names the file and carries no raw
// control bytes (anything else, like a crash, a sanitizer report or another
// exception type escaping, fails the run), and an in-memory file for readers
// that take a path.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace paraplan::fuzz {

// Fails the run (abort: libFuzzer saves the input) with a note on why.
[[noreturn]] inline void fail(const std::string& why, const std::string& message) {
  std::fprintf(stderr, "fuzz oracle: %s:\n%s\n", why.c_str(), message.c_str());
  std::abort();
}

// Whether a message must be printable text; the hostfile parser
// (launcher/launch.cc) still echoes a line's words as they are.
enum class Text { kPrintable, kAsGiven };

// Runs `read`; a std::runtime_error is how paraplan refuses bad input, and
// its message must name `file` and be printable text (lines of it).
template <typename Read>
void refused_clearly(const std::string& file, Read&& read, Text text = Text::kPrintable) {
  try {
    read();
  } catch (const std::runtime_error& error) {
    const std::string_view message = error.what();
    if (message.find(file) == std::string_view::npos)
      fail("the message does not name " + file, error.what());
    if (text == Text::kAsGiven) return;
    for (const char c : message)
      if (static_cast<unsigned char>(c) < 0x20 && c != '\n')
        fail("the message holds a raw control byte", error.what());
  }
}

// A file in memory (memfd) that readers open by path: /proc/self/fd/<fd>.
class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("paraplan-fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) fail("memfd_create failed", "");
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the contents; returns the path.
  const std::string& hold(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))
      fail("writing the memory file failed", "");
    return path_;
  }

 private:
  int fd_;
  std::string path_ = "/proc/self/fd/" + std::to_string(fd_);
};

}  // namespace paraplan::fuzz
