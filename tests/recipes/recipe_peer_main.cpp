// SPDX-License-Identifier: Apache-2.0
// An election participant or a semaphore lease holder in its own process, for the tests that kill
// or freeze one.
//
//   zkr_recipe_peer elect SERVERS PATH SESSION_TIMEOUT_MS DATA
//     Joins the election with a LeaderLatch. Prints "SESSION <hex id>", then "LEADER <token>" on
//     each term it wins, "WRITE <token>" every 50 ms while it believes it leads (a stand-in for
//     fenced writes), "LOST <reason>" when a term is lost.
//   zkr_recipe_peer lease SERVERS PATH SESSION_TIMEOUT_MS MAX_LEASES[:LAYOUT]
//     Takes one lease (LAYOUT curator_v2 or kazoo: in that peer's layout). Prints "SESSION <hex id>",
//     "LEASE <token>", "WRITE <token>" every 50 ms while it believes it holds it, "LOST <reason>"
//     once lost.
// Exits when stdin closes (leaving the election / releasing the lease) or after 120 s.
//
// Churn participants for the interop churn tests, each appending to the shared log LOG
// (tests/interop/section_log.hpp) "ENTER WHO <ns> <token>" after each grant and "EXIT WHO <ns>"
// before each release, and holding HOLD_MS (less if the grant is lost meanwhile):
//   zkr_recipe_peer select SERVERS PATH SESSION_TIMEOUT_MS WHO LOG HOLD_MS
//     A LeaderSelector (auto-requeue): each term is one section.
//   zkr_recipe_peer latch SERVERS PATH SESSION_TIMEOUT_MS WHO LOG HOLD_MS
//     A LeaderLatch that resigns after each term.
//   zkr_recipe_peer read|write SERVERS PATH SESSION_TIMEOUT_MS WHO LOG HOLD_MS
//     A ReadWriteLock's read or write lock, taken again and again.
// They run until stdin closes, an hour at most.
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/rwlock.hpp>
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

int run_lease(zkr::Session& session, const std::string& path, std::string_view limit_and_layout) {
  zkr::SemaphoreOptions options;
  const auto colon = limit_and_layout.find(':');
  if (colon != std::string_view::npos) {
    const auto layout = limit_and_layout.substr(colon + 1);
    options.layout = layout == "kazoo" ? zkr::SemaphoreLayout::kazoo : zkr::SemaphoreLayout::curator_v2;
  }
  const int max_leases = std::stoi(std::string(limit_and_layout.substr(0, colon)));
  zkr::Semaphore semaphore(session, path, max_leases, options);
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

// One participant's lines in the shared log, each with one O_APPEND write.
class SectionLog {
 public:
  SectionLog(const std::string& file, std::string who)
      : fd_(::open(file.c_str(), O_WRONLY | O_APPEND)), who_(std::move(who)) {
    if (fd_ < 0) throw std::runtime_error("cannot open " + file);
  }
  ~SectionLog() { ::close(fd_); }
  void enter(zkr::FencingToken token) { write(fmt::format("ENTER {} {} {}\n", who_, now_ns(), token.value())); }
  void exit() { write(fmt::format("EXIT {} {}\n", who_, now_ns())); }

 private:
  static std::int64_t now_ns() {
    return std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  void write(const std::string& line) {
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw std::runtime_error("short write to the section log");
  }
  int fd_;
  std::string who_;
};

// Sleeps `hold`, or less if `stop` is requested first.
void hold_for(std::chrono::milliseconds hold, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any never;
  std::unique_lock lock(mutex);
  never.wait_for(lock, stop, hold, [] { return false; });
}

constexpr auto kChurnLimit = std::chrono::hours(1);

int run_churn(zkr::Session& session, std::string_view mode, const std::string& path, const std::string& who,
              const std::string& log_file, std::chrono::milliseconds hold) {
  SectionLog log(log_file, who);
  const auto end = std::chrono::steady_clock::now() + kChurnLimit;
  if (mode == "select") {
    zkr::SelectorOptions options;
    options.participant_data = who;
    zkr::LeaderSelector selector(session, path, [&](const zkr::Leadership& term) {
      log.enter(term.token());
      hold_for(hold, term.ended_token());
      log.exit();
    }, options);
    selector.start();
    while (std::chrono::steady_clock::now() < end && stdin_open()) {
    }
    selector.close();  // waits for a running term to log its EXIT
    return 0;
  }
  if (mode == "latch") {
    // Beside LeaderSelectors: the latch writes their (Curator LeaderSelector's) node names.
    zkr::LeaderLatch latch(session, path, {.participant_data = who, .layout = zkr::ElectionLayout::curator_lock});
    latch.start();
    while (std::chrono::steady_clock::now() < end && stdin_open()) {
      auto term = latch.wait_for_leadership(std::chrono::milliseconds(50));
      if (!term) continue;
      log.enter(term->token());
      hold_for(hold, term->ended_token());
      log.exit();
      latch.resign();
    }
    latch.close();
    return 0;
  }
  zkr::ReadWriteLock lock(session, path);
  zkr::Lock& side = mode == "write" ? lock.write_lock() : lock.read_lock();
  while (std::chrono::steady_clock::now() < end && stdin_open()) {
    std::error_code ec;
    auto held = side.try_acquire_for(std::chrono::seconds(1), {}, ec);
    if (!held) continue;  // a timeout, or the session being replaced: try again
    log.enter(held->token());
    hold_for(hold, held->lost_token());
    log.exit();
    held->release();
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  const bool churn = mode == "select" || mode == "latch" || mode == "read" || mode == "write";
  if (!(argc == 6 && (mode == "elect" || mode == "lease")) && !(argc == 8 && churn)) {
    fmt::print(stderr,
               "usage: zkr_recipe_peer elect|lease SERVERS PATH SESSION_TIMEOUT_MS DATA|MAX_LEASES\n"
               "       zkr_recipe_peer select|latch|read|write SERVERS PATH SESSION_TIMEOUT_MS WHO LOG HOLD_MS\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // Die with the test, even while frozen (a test killed by its timeout cannot thaw us).
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 1;
  try {
    zkr::SessionOptions options;
    options.servers = argv[2];
    options.session_timeout = std::chrono::milliseconds(std::stoi(argv[4]));
    options.ensemble_tick_time = std::chrono::milliseconds(100);  // testenv's servers
    zkr::Session session(options);
    fmt::print("SESSION {:x}\n", session.id());
    if (churn) return run_churn(session, mode, argv[3], argv[5], argv[6], std::chrono::milliseconds(std::stoi(argv[7])));
    if (mode == "elect") return run_election(session, argv[3], argv[5]);
    return run_lease(session, argv[3], argv[5]);
  } catch (const std::exception& e) {
    fmt::print("ERROR {}\n", e.what());
    return 1;
  }
}
