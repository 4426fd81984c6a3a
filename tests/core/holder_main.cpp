// SPDX-License-Identifier: Apache-2.0
// A lock holder in its own process.
// Usage: zkr_test_holder SERVERS PATH SESSION_TIMEOUT_MS [TICK_MS [SAFETY_MARGIN_MS]]
// Prints "SESSION <hex id>", "ACQUIRED <token> <t>", then "WRITE <token> <t>" every 50 ms while it
// believes it holds the lock (a stand-in for writes to a fenced resource), and "LOST <reason> <t>"
// the moment it is told it lost the lock (from its loss callback). <t> is CLOCK_MONOTONIC in
// nanoseconds, which every process on the machine shares, network namespaces included. Exits when
// stdin closes (releasing the lock) or after 120 s. TICK_MS is the ensemble's tickTime (default:
// testenv's 100 ms). With ZKR_TEST_HOLDER_LOG set, the library's log goes to stderr; with
// ZKR_TEST_HOLDER_READS set, it also reads the lock's path every 100 ms while it holds (a service
// that keeps its connection busy: replies come in even while nothing goes through the leader).
#include <poll.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

namespace {
long long monotonic_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) {
    fmt::print(stderr, "usage: zkr_test_holder SERVERS PATH SESSION_TIMEOUT_MS [TICK_MS [SAFETY_MARGIN_MS]]\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (std::getenv("ZKR_TEST_HOLDER_LOG") != nullptr)
    zkr::set_log_sink([](zkr::LogLevel level, std::string_view message) {
      fmt::print(stderr, "{} {} {}\n", monotonic_ns(), zkr::to_string(level), message);
    }, zkr::LogLevel::debug);
  zkr::SessionOptions options;
  options.servers = argv[1];
  options.session_timeout = std::chrono::milliseconds(std::stoi(argv[3]));
  options.ensemble_tick_time = std::chrono::milliseconds(argc > 4 ? std::stoi(argv[4]) : 100);
  if (argc > 5) options.safety_margin = std::chrono::milliseconds(std::stoi(argv[5]));
  options.connect_timeout = std::chrono::seconds(60);
  zkr::Session session(options);
  fmt::print("SESSION {:x}\n", session.id());
  zkr::Lock lock(session, argv[2]);
  zkr::HeldLock held = lock.acquire();
  std::atomic<bool> lost{false};
  held.on_lost([&lost](zkr::LossReason reason) {
    lost = true;
    fmt::print("LOST {} {}\n", zkr::to_string(reason), monotonic_ns());
  });
  fmt::print("ACQUIRED {} {}\n", held.token().value(), monotonic_ns());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  std::atomic<bool> reading{std::getenv("ZKR_TEST_HOLDER_READS") != nullptr};
  std::thread reader([&] {
    while (reading && !lost && std::chrono::steady_clock::now() < end) {
      std::error_code ignored;  // a read failed by a reconnection is simply the next one's turn
      session.exists(argv[2], ignored);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  while (std::chrono::steady_clock::now() < end && !lost) {
    fmt::print("WRITE {} {}\n", held.token().value(), monotonic_ns());
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, 50) > 0) {
      char byte;
      if (read(STDIN_FILENO, &byte, 1) <= 0) break;
    }
  }
  reading = false;
  reader.join();
  // Wait for stdin to close so that the test decides when the process ends.
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}
