// atomic_file.h: write a file so that readers see either the old file or the
// whole new one, never a partial write: a temporary file beside the target is
// written, fsync'ed and renamed over it, and the directory is fsync'ed so the
// rename itself survives a crash. Used by token files, safetensors and
// checkpoints.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace paraplan {

// A name beside `path` that no other writer (process or thread) uses.
inline std::filesystem::path unique_temp_path(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  return path.string() + ".tmp-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Makes a completed rename or file creation in `dir` durable.
inline void fsync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // best effort: some filesystems refuse to open directories
  ::fsync(fd);
  ::close(fd);
}

// Streams bytes into a temporary file; commit() publishes it under the final
// name. Destroying an uncommitted writer removes the temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path)
      : path_(std::move(path)), temp_path_(unique_temp_path(path_)) {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      const int error = errno;
      fail(error, "cannot create " + temp_path_.string());
    }
  }
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) {
      std::error_code ignored;
      std::filesystem::remove(temp_path_, ignored);
    }
  }

  void write(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::write(fd_, bytes, size);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        const int error = written < 0 ? errno : EIO;
        fail(error, "cannot write " + temp_path_.string());
      }
      bytes += written;
      size -= static_cast<size_t>(written);
    }
  }
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Overwrites bytes already written (a header whose count is known last).
  void write_at(uint64_t offset, const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::pwrite(fd_, bytes, size, static_cast<off_t>(offset));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        const int error = written < 0 ? errno : EIO;
        fail(error, "cannot write " + temp_path_.string());
      }
      bytes += written;
      offset += static_cast<uint64_t>(written);
      size -= static_cast<size_t>(written);
    }
  }
  // Commits under another name in the same directory (the rename stays atomic).
  void commit_as(std::filesystem::path path) {
    if (path.parent_path() != path_.parent_path())
      throw std::logic_error("AtomicFileWriter::commit_as: " + path.string() + " is not beside " +
                             path_.string());
    path_ = std::move(path);
    commit();
  }

  void commit() {
    if (::fsync(fd_) != 0) {
      const int error = errno;
      fail(error, "cannot fsync " + temp_path_.string());
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int error = errno;
      fail(error, "cannot close " + temp_path_.string());
    }
    if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
      const int error = errno;
      fail(error, "cannot rename " + temp_path_.string() + " to " + path_.string());
    }
    committed_ = true;
    fsync_directory(path_.parent_path());
  }

 private:
  // `error` is errno as the failing system call left it, read before building the message.
  [[noreturn]] static void fail(int error, const std::string& what) {
    throw std::runtime_error(what + ": " + std::strerror(error));
  }

  std::filesystem::path path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
};

inline void write_file_atomically(const std::filesystem::path& path, std::string_view contents) {
  AtomicFileWriter writer(path);
  writer.write(contents);
  writer.commit();
}

}  // namespace paraplan
