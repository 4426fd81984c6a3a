// SPDX-License-Identifier: Apache-2.0
// What the SQL writers share: the lock side of a fenced write. Each writer supplies only its
// database's write (postgres_writer.cpp, sqlite_writer.cpp).
//
// Usage: PROGRAM SERVERS LOCKPATH DATABASE NAME VALUE [options]
//   --session-timeout SECS   requested session timeout (default 4)
//   --tick-time SECS         the servers' tickTime (default 2, ZooKeeper's default)
//   --wait SECS              give up waiting for the lock after SECS (default 30)
//   --pause-before-write     stop this process (SIGSTOP) between checking the lock and writing,
//                            as a long GC pause would; resumes on SIGCONT
//   --pause-in-transaction   stop this process (SIGSTOP) inside the write's transaction, after
//                            the fence upsert and before the data write and COMMIT
// Exit status: 0 written, 3 refused by the database (stale token: nothing was written), 1 the lock
// was not granted or another failure, 64 usage.
#pragma once

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>

namespace sql_fencing {

constexpr int kWritten = 0, kFailed = 1, kRefused = 3, kUsage = 64;

enum class WriteOutcome { written, refused };

// One fenced write: admit `token` for `name` and append `value`, in one transaction.
struct WriteRequest {
  std::string database, name, value;
  std::int64_t token = 0;
  // How long the transaction may sit idle before the database ends it (PostgreSQL's
  // idle_in_transaction_session_timeout): no longer than the session's silence tolerance, so that
  // a writer frozen inside its transaction has lost it, and the fence row's lock, before its lock
  // can be granted to anyone else.
  std::chrono::milliseconds idle_bound{0};
  // How long the write waits for another writer's lock on the fence row (lock_timeout) or the
  // file (SQLite's busy timeout): twice idle_bound, so a writer never gives up on another that
  // follows this recipe, and never waits out the whole freeze of one that does not.
  std::chrono::milliseconds lock_wait_bound{0};
  std::function<void()> pause_in_transaction;  // called after the fence upsert, before the rest
};

// Returns refused when the database refuses the token; throws std::runtime_error on any other
// failure (nothing is written then either, unless the reply to COMMIT was lost).
using FencedWrite = std::function<WriteOutcome(const WriteRequest& request)>;

inline int usage(std::string_view program, std::string_view problem) {
  fmt::print(stderr, "{}: {}\n", program, problem);
  fmt::print(stderr,
             "usage: {} SERVERS LOCKPATH DATABASE NAME VALUE [--session-timeout SECS] [--tick-time SECS] "
             "[--wait SECS] [--pause-before-write] [--pause-in-transaction]\n",
             program);
  return kUsage;
}

inline int run_fenced_job(std::string_view program, int argc, char** argv, const FencedWrite& write) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 6) return usage(program, "missing arguments");
  const std::string servers = argv[1], lock_path = argv[2], database = argv[3], name = argv[4], value = argv[5];
  double session_timeout_s = 4, tick_time_s = 2, wait_s = 30;
  bool pause_before_write = false, pause_in_transaction = false;
  try {
    for (int i = 6; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (arg == "--session-timeout" && i + 1 < argc) session_timeout_s = std::stod(argv[++i]);
      else if (arg == "--tick-time" && i + 1 < argc) tick_time_s = std::stod(argv[++i]);
      else if (arg == "--wait" && i + 1 < argc) wait_s = std::stod(argv[++i]);
      else if (arg == "--pause-before-write") pause_before_write = true;
      else if (arg == "--pause-in-transaction") pause_in_transaction = true;
      else return usage(program, fmt::format("unknown option '{}'", arg));
    }
  } catch (const std::exception&) {
    return usage(program, "--session-timeout, --tick-time and --wait take numbers");
  }
  if (session_timeout_s <= 0 || tick_time_s <= 0 || wait_s < 0) return usage(program, "timeouts must be positive");

  try {
    zkr::SessionOptions options;
    options.servers = servers;
    options.session_timeout = std::chrono::milliseconds(static_cast<long>(session_timeout_s * 1000));
    options.ensemble_tick_time = std::chrono::milliseconds(static_cast<long>(tick_time_s * 1000));
    zkr::Session session(options);
    zkr::Lock lock(session, lock_path, {.owner_data = fmt::format("{} '{}'", program, value)});
    auto held = lock.try_acquire_for(std::chrono::milliseconds(static_cast<long>(wait_s * 1000)));
    if (!held) {
      fmt::print("writer '{}': the lock was not granted within {} s\n", value, wait_s);
      return kFailed;
    }
    const std::int64_t token = held->token().value();
    fmt::print("writer '{}': granted {} with fencing token {}\n", value, lock_path, token);

    // The job checks the lock before writing. Nothing stops it from pausing right after the
    // check: only the database, which sees the token, can refuse the write that follows a pause.
    if (held->lost()) {
      fmt::print("writer '{}': the lock was lost before the write; not writing\n", value);
      return kFailed;
    }
    if (pause_before_write) {
      fmt::print("writer '{}': pausing before the write (SIGSTOP)\n", value);
      std::raise(SIGSTOP);
      fmt::print("writer '{}': resumed; lock lost meanwhile: {}\n", value, held->lost() ? "yes" : "not yet known");
    }

    WriteRequest request{.database = database, .name = name, .value = value, .token = token,
                         .idle_bound = session.silence_tolerance(),
                         .lock_wait_bound = 2 * session.silence_tolerance(), .pause_in_transaction = {}};
    if (pause_in_transaction) {
      request.pause_in_transaction = [&] {
        fmt::print("writer '{}': pausing inside the transaction (SIGSTOP)\n", value);
        std::raise(SIGSTOP);
        fmt::print("writer '{}': resumed inside the transaction\n", value);
      };
    }
    const WriteOutcome outcome = write(request);
    held->release();
    if (outcome == WriteOutcome::refused) {
      // A later holder has written: this grant is over. Stop, do not retry with this token; work
      // that must still happen needs a new grant (a new token) and a fresh look at the data.
      fmt::print("writer '{}': REFUSED: token {} is stale for '{}'; nothing written\n", value, token, name);
      return kRefused;
    }
    fmt::print("writer '{}': written with token {}\n", value, token);
    return kWritten;
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return kFailed;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return kFailed;
  }
}

}  // namespace sql_fencing
