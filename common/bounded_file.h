// bounded_file.h: the one way paraplan opens a file a user names (job
// configs, plans, constraints, hostfiles, profiles, checkpoints, token
// shards): only a regular file is opened, and a file read whole is read only
// up to a limit for its kind. A named pipe would block the reader forever,
// /dev/zero would fill memory, a directory would read as empty; each of those
// is refused instead with one line naming the file and what it is.
//
// The path is stat'ed before it is opened, so a device is never opened (some
// have side effects on open); the open is non-blocking and fstat'ed again, so
// a file swapped for a pipe between the two is refused too.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace paraplan {

// What a file is read as ("job config", "plan file", ...) and the most bytes
// a file of that kind may hold.
struct FileKind {
  const char* name;
  uint64_t max_bytes;
};

// The limits, one per kind of file paraplan reads. Each is far above what a
// real file of its kind holds and far below what would exhaust memory.
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr FileKind kJobConfigFile{"job config", 4 * kMiB};
inline constexpr FileKind kPartitionConstraintsFile{"partition constraints file", 16 * kMiB};
inline constexpr FileKind kHostfile{"hostfile", 16 * kMiB};
inline constexpr FileKind kProfileFile{"profile", 64 * kMiB};
// The largest plan the limits of schema/model_limits.h allow (256 stages x
// 16384 GPipe micro-batches) is 302 MB.
inline constexpr FileKind kPlanFile{"plan file", 512 * kMiB};
inline constexpr FileKind kCheckpointJsonFile{"checkpoint JSON file", 1 * kMiB};
inline constexpr FileKind kCheckpointLatestFile{"checkpoint 'latest' file", 4096};
// Bytes become uint16 tokens counted by an int32 (runtime/data/token_file.h).
inline constexpr FileKind kCorpusFile{"corpus file", 2047 * kMiB};
// Hugging Face tokenizer.json or a tiktoken ranks file (Llama 3's is 9 MB).
inline constexpr FileKind kTokenizerFile{"tokenizer file", 64 * kMiB};
// A multiple-choice evaluation set: llm.c's eval file or HellaSwag's .jsonl
// (its validation split is 3.6 MB and 11 MB, its training split 47 MB); each
// of its rows is held as a row to forward, so the bound is kept near them.
inline constexpr FileKind kEvaluationSetFile{"evaluation set", 64 * kMiB};

namespace bounded_file_detail {

inline const char* file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

[[noreturn]] inline void fail(const std::string& path, const FileKind& kind,
                              const std::string& problem) {
  throw std::runtime_error(path + ": cannot read the " + kind.name + ": " + problem);
}

inline void require_regular(const std::string& path, const FileKind& kind,
                            const struct stat& info) {
  if (!S_ISREG(info.st_mode))
    fail(path, kind,
         std::string("it is ") + file_type_name(info.st_mode) + "; expected a regular file");
}

inline std::string size_text(uint64_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  return std::to_string(bytes) + " bytes";
}

}  // namespace bounded_file_detail

// An open regular file (read-only, blocking reads); closes on destruction.
class RegularFile {
 public:
  // Opens `path` as a file of `kind`: refuses anything but a regular file and,
  // when max_bytes is set, a file larger than kind.max_bytes. Throws
  // std::runtime_error "<path>: cannot read the <kind>: <why>".
  RegularFile(const std::string& path, const FileKind& kind) {
    using namespace bounded_file_detail;
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) {
      const int error = errno;
      fail(path, kind, std::strerror(error));
    }
    require_regular(path, kind, info);
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd_ < 0) {
      const int error = errno;
      fail(path, kind, std::strerror(error));
    }
    if (::fstat(fd_, &info) != 0) {
      const int error = errno;
      close_quietly();
      fail(path, kind, std::strerror(error));
    }
    if (!S_ISREG(info.st_mode)) {
      close_quietly();
      require_regular(path, kind, info);
    }
    // Regular files never block; blocking reads retry less.
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
    size_ = static_cast<uint64_t>(info.st_size);
    if (size_ > kind.max_bytes) {
      close_quietly();
      fail(path, kind,
           "it is " + std::to_string(size_) + " bytes, more than the " + size_text(kind.max_bytes) +
               " a " + kind.name + " may hold");
    }
  }
  ~RegularFile() { close_quietly(); }
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  // Hands the descriptor to the caller, who closes it.
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // The size fstat reported when the file was opened.
  uint64_t size() const { return size_; }

 private:
  void close_quietly() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file of `kind`, at most kind.max_bytes (a file that
// grows past the limit while it is read is refused too), as a std::string or
// (Bytes = std::vector<uint8_t>) as bytes.
template <typename Bytes = std::string>
Bytes read_bounded_file(const std::string& path, const FileKind& kind) {
  using namespace bounded_file_detail;
  const RegularFile file(path, kind);
  Bytes text;
  text.resize(static_cast<size_t>(file.size()));
  size_t have = 0;
  for (;;) {
    if (have == text.size()) {
      if (text.size() > kind.max_bytes)
        fail(path, kind,
             "it grew past the " + size_text(kind.max_bytes) + " a " + kind.name +
                 " may hold while it was read");
      // Files whose size fstat does not know (/proc) are read in steps.
      text.resize(text.size() + 4096);
    }
    const ssize_t got = ::read(file.fd(), text.data() + have, text.size() - have);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      fail(path, kind, std::strerror(error));
    }
    if (got == 0) break;
    have += static_cast<size_t>(got);
  }
  text.resize(have);
  if (text.size() > kind.max_bytes)
    fail(path, kind,
         "it is " + std::to_string(text.size()) + " bytes, more than the " +
             size_text(kind.max_bytes) + " a " + kind.name + " may hold");
  return text;
}

}  // namespace paraplan
