// An election participant or a semaphore lease holder in its own process, for the tests that kill
// or freeze one.
//
//   zkr_recipe_peer elect SERVERS PATH SESSION_TIMEOUT_MS DATA
//     Joins the election with a LeaderLatch. Prints "SESSION <hex id>", then "LEADER <token>" on
//     each term it wins, "WRITE <token>" every 50 ms while it believes it leads (a stand-in for
//     fenced writes), "LOST <reason>" when a term is lost.
//   zkr_recipe_peer lease SERVERS PATH SESSION_TIMEOUT_MS MAX_LEASES
//     Takes one lease. Prints "SESSION <hex id>", "LEASE <token>", "WRITE <token>" every 50 ms while
//     it believes it holds it, "LOST <reason>" once lost.
// Exits when stdin closes (leaving the election / releasing the lease) or after 120 s.
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/semaphore.hpp>

namespace {

// False once stdin is closed; waits at most 50 ms for it.
bool stdin_open() {
  pollfd in{STDIN_FILENO, POLLIN, 0};
  if (poll(&in, 1, 50) <= 0) return true;
  char byte;
  return read(STDIN_FILENO, &byte, 1) > 0;
}

int run_election(zkr::Session& session, const std::string& path, const std::string& data) {
  zkr::LeaderLatch latch(session, path, {.participant_data = data});
  latch.start();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  zkr::Leadership announced;  // the term last reported as LEADER
  while (std::chrono::steady_clock::now() < end && stdin_open()) {
    zkr::Leadership term = latch.leadership();
    if (term && !term.ended()) {
      if (!announced || term.token() != announced.token()) {
        announced = term;
        fmt::print("LEADER {}\n", term.token().value());
      }
      fmt::print("WRITE {}\n", term.token().value());
    } else if (announced) {
      fmt::print("LOST {}\n", announced.loss_reason() ? zkr::to_string(*announced.loss_reason()) : "ended");
      announced = {};
    }
  }
  return 0;
}

int run_lease(zkr::Session& session, const std::string& path, int max_leases) {
  zkr::Semaphore semaphore(session, path, max_leases);
  zkr::Lease lease = semaphore.acquire();
  fmt::print("LEASE {}\n", lease.token().value());
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  bool reported = false;
  while (std::chrono::steady_clock::now() < end && stdin_open()) {
    if (lease.lost()) {
      if (!reported) fmt::print("LOST {}\n", zkr::to_string(*lease.loss_reason()));
      reported = true;
    } else {
      fmt::print("WRITE {}\n", lease.token().value());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6 || (std::string_view(argv[1]) != "elect" && std::string_view(argv[1]) != "lease")) {
    fmt::print(stderr, "usage: zkr_recipe_peer elect|lease SERVERS PATH SESSION_TIMEOUT_MS DATA|MAX_LEASES\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    zkr::SessionOptions options;
    options.servers = argv[2];
    options.session_timeout = std::chrono::milliseconds(std::stoi(argv[4]));
    options.ensemble_tick_time = std::chrono::milliseconds(100);  // testenv's servers
    zkr::Session session(options);
    fmt::print("SESSION {:x}\n", session.id());
    if (std::string_view(argv[1]) == "elect") return run_election(session, argv[3], argv[5]);
    return run_lease(session, argv[3], std::stoi(argv[5]));
  } catch (const std::exception& e) {
    fmt::print("ERROR {}\n", e.what());
    return 1;
  }
}
