// heartbeat_test.cc: a rank's heartbeat against a fake launcher on this
// machine: the hello, the groups and beats that report the watchdog's open
// operations, "done" at the end; and the three ways the thread ends the rank
// (the launcher says stop, goes silent, or closes the connection), each in a
// death test since the rank ends by _Exit.
#include "runtime/comm/heartbeat.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/line_socket.h"
#include "runtime/comm/supervision_protocol.h"
#include "runtime/comm/watchdog.h"

namespace paraplan {
namespace {

using namespace std::chrono_literals;
namespace protocol = supervision;

// Accepts one rank, welcomes it, and then beats back (kBeat), stays silent
// (kSilent), says stop (kStop) or hangs up (kHangUp) once the rank's first
// beat arrived. Records every line the rank sent.
class FakeLauncher {
 public:
  enum class Then { kBeat, kSilent, kStop, kHangUp };

  explicit FakeLauncher(Then then, int interval_ms = 50, int timeout_ms = 400) : then_(then) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    listen(listen_fd_, 1);
    socklen_t length = sizeof address;
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    setenv(protocol::kAddressVariable,
           ("127.0.0.1:" + std::to_string(ntohs(address.sin_port))).c_str(), 1);
    setenv(protocol::kTokenVariable, "secret", 1);
    thread_ = std::thread([this, interval_ms, timeout_ms] { serve(interval_ms, timeout_ms); });
  }
  ~FakeLauncher() {
    stopping_ = true;
    thread_.join();
    close(listen_fd_);
    unsetenv(protocol::kAddressVariable);
    unsetenv(protocol::kTokenVariable);
  }
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lock(mutex_);
    return lines_;
  }
  // Waits until a line satisfies `match`; returns it, or "" after 5 s.
  template <typename Match>
  std::string await(Match match) {
    for (int i = 0; i < 500; ++i) {
      for (const std::string& line : lines())
        if (match(line)) return line;
      std::this_thread::sleep_for(10ms);
    }
    return "";
  }

 private:
  void serve(int interval_ms, int timeout_ms) {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    LineBuffer received;
    bool beaten = false;
    auto next_beat = std::chrono::steady_clock::now();
    while (!stopping_) {
      pollfd readable{fd, POLLIN, 0};
      if (poll(&readable, 1, 10) > 0) {
        if (received.read_from(fd) <= 0) break;
        while (auto line = received.next_line()) {
          {
            std::lock_guard<std::mutex> lock(mutex_);
            lines_.push_back(*line);
          }
          const auto message = protocol::parse_rank_message(*line);
          if (message && message->type == protocol::RankMessage::Type::kHello)
            send_text(fd, protocol::encode_welcome({interval_ms, timeout_ms}));
          if (message && message->type == protocol::RankMessage::Type::kBeat && !beaten) {
            beaten = true;
            if (then_ == Then::kStop) send_text(fd, protocol::encode_stop());
            if (then_ == Then::kHangUp) {
              close(fd);
              return;
            }
          }
        }
      }
      if (then_ == Then::kBeat && std::chrono::steady_clock::now() >= next_beat) {
        send_text(fd, protocol::encode_launcher_beat());
        next_beat += std::chrono::milliseconds(interval_ms);
      }
    }
    close(fd);
  }

  Then then_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::vector<std::string> lines_;
  std::thread thread_;
};

TEST(Heartbeat, InactiveWithoutTheLaunchersVariable) {
  unsetenv(protocol::kAddressVariable);
  EXPECT_FALSE(Heartbeat::start_from_environment(0));
  EXPECT_FALSE(Heartbeat::active());
  Heartbeat::report_error("nobody listens");  // harmless
}

TEST(Heartbeat, AnUnreachableLauncherIsNamedWithTheFix) {
  setenv(protocol::kAddressVariable, "127.0.0.1:1", 1);  // nothing listens on port 1
  try {
    Heartbeat::start_from_environment(5);
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& error) {
    EXPECT_EQ(std::string(error.what()),
              "rank 5 cannot reach the launcher: cannot connect to 127.0.0.1:1: Connection "
              "refused; every host must reach the launching host over TCP, as Open MPI's "
              "daemons do (choose the network with `paraplan launch --network-interface`)");
  }
  unsetenv(protocol::kAddressVariable);
}

// A rank ended by SIGTERM (mpirun ending the job) says so before it goes,
// and still ends as SIGTERM ends a process.
TEST(Heartbeat, ARankEndedBySigtermSaysSo) {
  FakeLauncher launcher(FakeLauncher::Then::kBeat);
  const pid_t child = fork();
  if (child == 0) {  // the rank; before any other test started this process's heartbeat
    try {
      Heartbeat::start_from_environment(6);
    } catch (...) {
      _exit(99);
    }
    raise(SIGTERM);
    _exit(0);  // not reached
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_NE(launcher.await([](const std::string& line) {
    return line + "\n" == protocol::encode_signal(SIGTERM);
  }),
            "");
}

TEST(Heartbeat, SaysHelloReportsGroupsAndOpenOperationsAndDone) {
  FakeLauncher launcher(FakeLauncher::Then::kBeat);
  ASSERT_TRUE(Heartbeat::start_from_environment(3));
  EXPECT_TRUE(Heartbeat::active());
  const std::string hello = launcher.await(
      [](const std::string& line) { return line.find("\"type\":\"hello\"") != std::string::npos; });
  const auto parsed = protocol::parse_rank_message(hello);
  ASSERT_TRUE(parsed) << hello;
  EXPECT_EQ(parsed->hello.token, "secret");
  EXPECT_EQ(parsed->hello.rank, 3);
  EXPECT_EQ(parsed->hello.pid, static_cast<long>(getpid()));

  // A group and an operation open in it: the beats report both.
  const int group = Watchdog::instance().register_group("tensor", {2, 3});
  const std::string where = " on group 'tensor' (rank 1 of 2)";
  const uint64_t ticket =
      Watchdog::instance().begin({"all_reduce", 3072, "floats", &where, -1, -1, group, 7});
  EXPECT_NE(ticket, 0u) << "the heartbeat makes the watchdog track operations";
  EXPECT_NE(launcher.await([](const std::string& line) {
    return line.find("\"type\":\"group\"") != std::string::npos &&
           line.find("\"members\":[2,3]") != std::string::npos;
  }),
            "");
  const std::string beat = launcher.await(
      [](const std::string& line) { return line.find("\"open\":[{") != std::string::npos; });
  const auto open = protocol::parse_rank_message(beat);
  ASSERT_TRUE(open) << beat;
  ASSERT_EQ(open->beat.open.size(), 1u);
  EXPECT_EQ(open->beat.open[0].group, group);
  EXPECT_EQ(open->beat.open[0].sequence, 7u);
  EXPECT_EQ(open->beat.open[0].what, "all_reduce of 3072 floats on group 'tensor' (rank 1 of 2)");
  EXPECT_EQ(open->beat.entered.at(group), 7u);
  Watchdog::instance().finish(ticket);

  Heartbeat::report_error("boom");
  EXPECT_NE(launcher.await([](const std::string& line) {
    return line.find("\"type\":\"error\"") != std::string::npos &&
           line.find("boom") != std::string::npos;
  }),
            "");
  Heartbeat::finish();
  EXPECT_NE(launcher.await([](const std::string& line) {
    return line.find("\"type\":\"done\"") != std::string::npos;
  }),
            "");
}

class HeartbeatEndsTheRank : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(HeartbeatEndsTheRank, WhenTheLauncherSaysStop) {
  EXPECT_EXIT(
      {
        FakeLauncher launcher(FakeLauncher::Then::kStop);
        Heartbeat::start_from_environment(1);
        std::this_thread::sleep_for(5s);
      },
      ::testing::ExitedWithCode(1), "");
}

TEST_F(HeartbeatEndsTheRank, WhenTheLauncherGoesSilent) {
  EXPECT_EXIT(
      {
        FakeLauncher launcher(FakeLauncher::Then::kSilent, 50, 300);
        Heartbeat::start_from_environment(2);
        std::this_thread::sleep_for(5s);
      },
      ::testing::ExitedWithCode(1),
      "paraplan: error: \\[rank 2\\] nothing heard from the launcher at 127.0.0.1:[0-9]+ for 0.3 "
      "s: this host may be cut off the network; ending this rank");
}

TEST_F(HeartbeatEndsTheRank, WhenTheLauncherHangsUp) {
  EXPECT_EXIT(
      {
        FakeLauncher launcher(FakeLauncher::Then::kHangUp);
        Heartbeat::start_from_environment(4);
        std::this_thread::sleep_for(5s);
      },
      ::testing::ExitedWithCode(1),
      "paraplan: error: \\[rank 4\\] the launcher at 127.0.0.1:[0-9]+ closed the connection");
}

}  // namespace
}  // namespace paraplan
