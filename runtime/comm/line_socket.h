// line_socket.h: the TCP plumbing of the supervision connection (heartbeat.h
// on a rank, launcher/supervisor.h in `paraplan launch`): connecting with a
// time limit, writing whole lines, and cutting received bytes into lines.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace paraplan {

// A connected TCP socket to host:port (IPv4 or IPv6, TCP_NODELAY, writes time
// out after 1 s), made within timeout_seconds. Throws std::runtime_error
// "cannot connect to host:port: <reason>".
int connect_tcp(const std::string& host, int port, double timeout_seconds);

// Writes all of text; false when the peer is gone or the write timed out.
// Never raises SIGPIPE.
bool send_text(int fd, const std::string& text);

// Bytes received on a socket, handed out line by line (newline removed).
class LineBuffer {
 public:
  // One read of what fd has: > 0 bytes appended, 0 end of stream, < 0 error
  // (EAGAIN included: poll first).
  long read_from(int fd);
  std::optional<std::string> next_line();
  // A peer that sends megabytes without a newline is not speaking the
  // protocol: callers drop it past this many bytes.
  static constexpr size_t kMaximumLine = 1 << 20;
  size_t pending() const { return data_.size() - start_; }

 private:
  std::string data_;
  size_t start_ = 0;
};

}  // namespace paraplan
