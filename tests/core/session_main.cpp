// SPDX-License-Identifier: Apache-2.0
// A session in its own process, for tests that run it where the test cannot (in a network
// namespace). Usage: zkr_test_session SERVERS SESSION_TIMEOUT_MS TICK_MS CONNECT_TIMEOUT_MS [deadlines]
// Prints "ERROR <errc value> <message>" if the session cannot be made; else "STATE <state> <hex
// session id>" for the first state and every change (with "deadlines", followed by the CLOCK_BOOTTIME
// ns of the change). With "deadlines" it also prints, once
// connected, "TIMING <negotiated ms> <lead time ms> <tolerated silence ms>", and for every move of
// the monitor's deadline "PROOF <hex session id> <ns>": the CLOCK_BOOTTIME moment of the proof of
// life (the deadline less the tolerated silence), so that a test can measure the longest silence
// of the ensemble as the gaps between them. Exits when stdin closes.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

int main(int argc, char** argv) {
  const bool deadlines = argc == 6 && std::strcmp(argv[5], "deadlines") == 0;
  if (argc != 5 && !deadlines) {
    fmt::print(stderr, "usage: zkr_test_session SERVERS SESSION_TIMEOUT_MS TICK_MS CONNECT_TIMEOUT_MS [deadlines]\n");
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
      if (deadlines)
        fmt::print("STATE {} {:x} {}\n", zkr::to_string(state), static_cast<std::uint64_t>(session.id()),
                   zkr::BootClock::now().time_since_epoch().count());
      else
        fmt::print("STATE {} {:x}\n", zkr::to_string(state), static_cast<std::uint64_t>(session.id()));
    };
    auto subscription = session.on_state_change(report);
    report(session.state());
    zkr::Subscription deadline_subscription;
    if (deadlines) {
      {
        std::lock_guard guard(print);
        fmt::print("TIMING {} {} {}\n", session.negotiated_timeout().count(), session.lead_time().count(),
                   session.silence_tolerance().count());
      }
      deadline_subscription = session.on_deadline([&](zkr::SessionDeadline deadline) {
        const auto proof = deadline.at - session.silence_tolerance();
        std::lock_guard guard(print);
        fmt::print("PROOF {:x} {}\n", static_cast<std::uint64_t>(deadline.session_id),
                   proof.time_since_epoch().count());
      });
    }
    char byte;
    while (read(STDIN_FILENO, &byte, 1) > 0) {
    }
  } catch (const zkr::Error& error) {
    fmt::print("ERROR {} {}\n", error.code().value(), error.what());
  }
  return 0;
}
