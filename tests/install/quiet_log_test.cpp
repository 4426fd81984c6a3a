// SPDX-License-Identifier: Apache-2.0
// The library's log goes to the sink set with zkr::set_log_sink, the C client's included, and
// nothing reaches stderr by itself. Needs no server: a port that refuses connections makes the C
// client log errors, and the session gives up after its connect timeout.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

#include "testenv.hpp"

using namespace std::chrono_literals;

namespace {

// A bound but not listening TCP socket on 127.0.0.1: connecting to it is refused at once, and the
// port stays ours for the test's lifetime.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = 0;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0)
      throw std::runtime_error("cannot bind a socket on 127.0.0.1");
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  std::string servers() const { return fmt::format("127.0.0.1:{}", port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Redirects this process's stderr into a temporary file while alive; captured() reads it back.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    file_ = std::tmpfile();
    ::dup2(::fileno(file_), STDERR_FILENO);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  std::string captured() {
    restore();
    std::string text;
    std::rewind(file_);
    for (int c; (c = std::fgetc(file_)) != EOF;) text.push_back(static_cast<char>(c));
    return text;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  std::FILE* file_ = nullptr;
};

// Tries to connect to a port that refuses; returns the error the Session constructor threw.
std::error_code fail_to_connect(const std::string& servers) {
  zkr::SessionOptions options;
  options.servers = servers;
  options.session_timeout = 2s;
  options.ensemble_tick_time = 100ms;  // testenv's servers
  options.connect_timeout = zkr::testenv::scaled(1500ms);
  try {
    zkr::Session session(options);
  } catch (const zkr::Error& e) {
    return e.code();
  }
  return {};
}

struct LogLine {
  zkr::LogLevel level;
  std::string text;
};

class QuietLog : public ::testing::Test {
 protected:
  void TearDown() override { zkr::set_log_sink(nullptr); }
};

TEST_F(QuietLog, WithoutASinkNothingReachesStderr) {
  RefusingPort port;
  zkr::set_log_sink(nullptr);
  StderrCapture capture;
  EXPECT_EQ(fail_to_connect(port.servers()), zkr::errc::connect_timeout);
  EXPECT_EQ(capture.captured(), "");
}

TEST_F(QuietLog, TheClientLogGoesToTheSinkAndNotToStderr) {
  RefusingPort port;
  std::mutex mutex;
  std::vector<LogLine> lines;
  zkr::set_log_sink(
      [&](zkr::LogLevel level, std::string_view text) {
        std::lock_guard lock(mutex);
        lines.push_back({level, std::string(text)});
      },
      zkr::LogLevel::debug);
  StderrCapture capture;
  EXPECT_EQ(fail_to_connect(port.servers()), zkr::errc::connect_timeout);
  zkr::set_log_sink(nullptr);
  EXPECT_EQ(capture.captured(), "");

  std::lock_guard lock(mutex);
  std::vector<std::string> texts;
  for (const auto& line : lines) texts.push_back(line.text);
  // The C client's lines arrive without its own prefix (time, thread, level tag, function); the
  // refused connection is reported at least as a warning.
  EXPECT_THAT(texts, ::testing::Contains(::testing::HasSubstr("Connection refused")));
  EXPECT_THAT(texts, ::testing::Each(::testing::Not(::testing::HasSubstr("ZOO_"))));
  bool saw_warning_or_error = false;
  for (const auto& line : lines)
    saw_warning_or_error |= line.level == zkr::LogLevel::error || line.level == zkr::LogLevel::warning;
  EXPECT_TRUE(saw_warning_or_error);
}

// The C client logs an error and a warning at each retry of a refused connection, every few
// hundred milliseconds (61 lines in 3 s were seen): the library passes on the first of each and
// counts the rest (a line with the count once per interval, 10 s). A record sink (the JSON-lines
// one among them) gets the client's message without the client's own prefix.
TEST_F(QuietLog, TheClientsRepeatedLinesWhileAPortRefusesAreSummarised) {
  RefusingPort port;
  std::mutex mutex;
  std::vector<LogLine> lines;
  zkr::set_log_record_sink(
      [&](const zkr::LogRecord& record) {
        std::lock_guard lock(mutex);
        lines.push_back({record.level, std::string(record.message)});
      },
      zkr::LogLevel::debug);
  zkr::SessionOptions options;
  options.servers = port.servers();
  options.session_timeout = 2s;
  options.ensemble_tick_time = 100ms;
  options.connect_timeout = 3s;
  EXPECT_THROW(zkr::Session session(options), zkr::Error);
  zkr::set_log_sink(nullptr);

  std::lock_guard lock(mutex);
  std::string all;
  std::size_t refused = 0;
  for (const auto& line : lines) {
    all += line.text + "\n";
    if (line.text.starts_with("Socket " + port.servers() + " ")) ++refused;
    EXPECT_EQ(line.text.find("ZOO_"), std::string::npos) << line.text;
    EXPECT_EQ(line.text.find("(0x"), std::string::npos) << line.text;  // the client's thread id
  }
  EXPECT_EQ(refused, 1u) << all;
  EXPECT_LE(lines.size(), 6u) << all;
}

TEST_F(QuietLog, TheSinkGetsNothingAboveItsLevel) {
  RefusingPort port;
  std::mutex mutex;
  std::vector<LogLine> lines;
  zkr::set_log_sink(
      [&](zkr::LogLevel level, std::string_view text) {
        std::lock_guard lock(mutex);
        lines.push_back({level, std::string(text)});
      },
      zkr::LogLevel::error);
  EXPECT_EQ(fail_to_connect(port.servers()), zkr::errc::connect_timeout);
  zkr::set_log_sink(nullptr);
  std::lock_guard lock(mutex);
  for (const auto& line : lines) EXPECT_EQ(line.level, zkr::LogLevel::error) << line.text;
}

}  // namespace
