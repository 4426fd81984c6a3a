// A session in its own process, for tests that run it where the test cannot (in a network
// namespace). Usage: zkr_test_session SERVERS SESSION_TIMEOUT_MS TICK_MS CONNECT_TIMEOUT_MS
// Prints "ERROR <errc value> <message>" if the session cannot be made; else "STATE <state> <hex
// session id>" for the first state and every change. Exits when stdin closes.
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

int main(int argc, char** argv) {
  if (argc != 5) {
    fmt::print(stderr, "usage: zkr_test_session SERVERS SESSION_TIMEOUT_MS TICK_MS CONNECT_TIMEOUT_MS\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  zkr::SessionOptions options;
  options.servers = argv[1];
  options.session_timeout = std::chrono::milliseconds(std::stoi(argv[2]));
  options.ensemble_tick_time = std::chrono::milliseconds(std::stoi(argv[3]));
  options.connect_timeout = std::chrono::milliseconds(std::stoi(argv[4]));
  try {
    zkr::Session session(options);
    std::mutex print;
    auto report = [&](zkr::SessionState state) {
      std::lock_guard guard(print);
      fmt::print("STATE {} {:x}\n", zkr::to_string(state), static_cast<std::uint64_t>(session.id()));
    };
    auto subscription = session.on_state_change(report);
    report(session.state());
    char byte;
    while (read(STDIN_FILENO, &byte, 1) > 0) {
    }
  } catch (const zkr::Error& error) {
    fmt::print("ERROR {} {}\n", error.code().value(), error.what());
  }
  return 0;
}
