// SPDX-License-Identifier: Apache-2.0
// A leader-elected scheduler: every instance joins one election; the leader alone fires the
// periodic jobs, and stops firing the moment its term ends. Start one on each host; when the
// leader's host dies or is cut off, another instance takes over.
//
// Each fired job is recorded with the term's fencing token. A later leader always has a larger
// token, so the store that receives the jobs (here an append-only file; in production a database
// with the token check of fence_gate.hpp) can refuse anything a deposed leader still sends.
//
// Usage: zkr_scheduler SERVERS ELECTION_PATH NAME JOURNAL [--interval SECS] [--session-timeout SECS]
//                      [--tick-time SECS (the servers' tickTime, default 2)]
// Runs until SIGINT or SIGTERM, then resigns (the next instance leads at once) and exits 0.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <stop_token>
#include <string>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/error.hpp>

using namespace std::chrono_literals;

namespace {

int usage(std::string_view problem) {
  fmt::print(stderr, "zkr_scheduler: {}\n", problem);
  fmt::print(stderr,
             "usage: zkr_scheduler SERVERS ELECTION_PATH NAME JOURNAL [--interval SECS] [--session-timeout SECS] "
             "[--tick-time SECS]\n");
  return 64;
}

// The scheduler proper: fires one job per interval while it leads.
class Scheduler {
 public:
  Scheduler(std::string name, std::string journal, std::chrono::milliseconds interval)
      : name_(std::move(name)), journal_(std::move(journal)), interval_(interval) {}

  // The leadership function: runs on the selector's thread for one term.
  void lead(const zkr::Leadership& term) {
    fmt::print("{}: leading, term token {}\n", name_, term.token().value());
    std::stop_token ended = term.ended_token();
    std::mutex mutex;
    std::condition_variable_any wake;
    for (std::uint64_t job = 1; !ended.stop_requested(); ++job) {
      fire(job, term);
      std::unique_lock lock(mutex);
      wake.wait_for(lock, ended, interval_, [] { return false; });  // wakes early when the term ends
    }
    fmt::print("{}: term {} ended ({})\n", name_, term.token().value(),
               term.loss_reason() ? zkr::to_string(*term.loss_reason()) : "resigned");
  }

 private:
  void fire(std::uint64_t job, const zkr::Leadership& term) {
    // Checked just before the side effect; the token goes with it for the store to check too.
    if (term.ended()) return;
    std::ofstream(journal_, std::ios::app) << fmt::format("token={} leader={} job={}\n", term.token().value(),
                                                          name_, job);
    fmt::print("{}: fired job {}\n", name_, job);
  }

  std::string name_;
  std::string journal_;
  std::chrono::milliseconds interval_;
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 5) return usage("missing arguments");
  const std::string servers = argv[1], path = argv[2], name = argv[3], journal = argv[4];
  double interval_s = 0.2, session_timeout_s = 4, tick_time_s = 2;
  try {
    for (int i = 5; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (arg == "--interval" && i + 1 < argc) interval_s = std::stod(argv[++i]);
      else if (arg == "--session-timeout" && i + 1 < argc) session_timeout_s = std::stod(argv[++i]);
      else if (arg == "--tick-time" && i + 1 < argc) tick_time_s = std::stod(argv[++i]);
      else return usage(fmt::format("unknown option '{}'", arg));
    }
  } catch (const std::exception&) {
    return usage("--interval, --session-timeout and --tick-time take numbers of seconds");
  }
  if (interval_s <= 0 || session_timeout_s <= 0 || tick_time_s <= 0) return usage("durations must be positive");

  // SIGINT/SIGTERM are taken synchronously by sigwait below; block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  try {
    zkr::SessionOptions options;
    options.servers = servers;
    options.session_timeout = std::chrono::milliseconds(static_cast<long>(session_timeout_s * 1000));
    options.ensemble_tick_time = std::chrono::milliseconds(static_cast<long>(tick_time_s * 1000));
    zkr::Session session(options);

    Scheduler scheduler(name, journal, std::chrono::milliseconds(static_cast<long>(interval_s * 1000)));
    zkr::SelectorOptions selector_options;
    selector_options.participant_data = name;
    zkr::LeaderSelector selector(
        session, path, [&scheduler](const zkr::Leadership& term) { scheduler.lead(term); }, selector_options);
    selector.start();
    fmt::print("{}: joined the election on {}\n", name, path);

    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    fmt::print("{}: signal {}, resigning\n", name, signal_number);
    selector.close();  // ends the term (the leadership function returns) and leaves the election
    if (auto error = selector.error()) fmt::print("{}: the selector stopped by itself: {}\n", name, error.message());
    fmt::print("{}: stopped after {} term(s)\n", name, selector.terms());
    return 0;
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "zkr_scheduler: {}\n", e.what());
    return 1;
  }
}
