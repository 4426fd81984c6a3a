// A lock holder in its own process. Usage: zkr_test_holder SERVERS PATH SESSION_TIMEOUT_MS
// Prints "SESSION <hex id>", "ACQUIRED <token>", then "WRITE <token>" every 50 ms while it believes
// it holds the lock (a stand-in for writes to a fenced resource), "LOST <reason>" once told it lost
// the lock. Exits when stdin closes (releasing the lock) or after 120 s.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <fmt/format.h>

#include <zkr/lock.hpp>

int main(int argc, char** argv) {
  if (argc != 4) {
    fmt::print(stderr, "usage: zkr_test_holder SERVERS PATH SESSION_TIMEOUT_MS\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  zkr::SessionOptions options;
  options.servers = argv[1];
  options.session_timeout = std::chrono::milliseconds(std::stoi(argv[3]));
  zkr::Session session(options);
  fmt::print("SESSION {:x}\n", session.id());
  zkr::Lock lock(session, argv[2]);
  zkr::HeldLock held = lock.acquire();
  fmt::print("ACQUIRED {}\n", held.token().value());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < end) {
    if (held.lost_token().stop_requested()) {
      fmt::print("LOST {}\n", zkr::to_string(*held.loss_reason()));
      break;
    }
    fmt::print("WRITE {}\n", held.token().value());
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, 50) > 0) {
      char byte;
      if (read(STDIN_FILENO, &byte, 1) <= 0) break;
    }
  }
  // Wait for stdin to close so that the test decides when the process ends.
  char byte;
  while (read(STDIN_FILENO, &byte, 1) > 0) {
  }
  return 0;
}
