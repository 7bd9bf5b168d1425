// line_socket.cc: TCP connect with a time limit, whole-line writes, line
// buffering (line_socket.h).
#include "runtime/comm/line_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace paraplan {
namespace {

// Connects one address within the time left; the socket or -1 with errno set.
int connect_address(const addrinfo& address, std::chrono::steady_clock::time_point deadline) {
  const int fd = socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                        address.ai_protocol);
  if (fd < 0) return -1;
  if (connect(fd, address.ai_addr, address.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int error = errno;
    close(fd);
    errno = error;
    return -1;
  }
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  pollfd waiting{fd, POLLOUT, 0};
  const int ready = poll(&waiting, 1, static_cast<int>(std::max<long long>(0, left.count())));
  int error = ETIMEDOUT;
  if (ready > 0) {
    socklen_t length = sizeof error;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  }
  if (error != 0) {
    close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

}  // namespace

int connect_tcp(const std::string& host, int port, double timeout_seconds) {
  const std::string where = host + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addresses = nullptr;
  if (const int status =
          getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
      status != 0)
    throw std::runtime_error("cannot connect to " + where + ": " + gai_strerror(status));
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
  int fd = -1, error = 0;
  for (const addrinfo* address = addresses; address != nullptr && fd < 0;
       address = address->ai_next) {
    fd = connect_address(*address, deadline);
    if (fd < 0) error = errno;
  }
  freeaddrinfo(addresses);
  if (fd < 0) throw std::runtime_error("cannot connect to " + where + ": " + std::strerror(error));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  const int on = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  // A write to a peer that went silent must not block a rank's thread for good.
  const timeval one_second{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &one_second, sizeof one_second);
  return fd;
}

bool send_text(int fd, const std::string& text) {
  size_t sent = 0;
  while (sent < text.size()) {
    const ssize_t n = send(fd, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

long LineBuffer::read_from(int fd) {
  char chunk[4096];
  ssize_t n;
  do {
    n = recv(fd, chunk, sizeof chunk, 0);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    if (start_ > 0 && start_ == data_.size()) {
      data_.clear();
      start_ = 0;
    }
    data_.append(chunk, static_cast<size_t>(n));
  }
  return static_cast<long>(n);
}

std::optional<std::string> LineBuffer::next_line() {
  const size_t end = data_.find('\n', start_);
  if (end == std::string::npos) {
    if (start_ > 0) {  // keep the partial line at the front
      data_.erase(0, start_);
      start_ = 0;
    }
    return std::nullopt;
  }
  std::string line = data_.substr(start_, end - start_);
  start_ = end + 1;
  return line;
}

}  // namespace paraplan
