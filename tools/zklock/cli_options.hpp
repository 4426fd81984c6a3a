// SPDX-License-Identifier: Apache-2.0
// zklock's command line: what the user asked for, parsed and checked before anything connects.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "time_zone.hpp"

namespace zklock {

enum class Mode { run, list, break_lock, help, version };
// mutex: zkr::Lock, whose node names Curator's mutex and kazoo (with extra_lock_patterns) share.
// read / write: the two sides of zkr::ReadWriteLock (-s / -x). semaphore: a slot of zkr::Semaphore
// (-N).
enum class LockKind { mutex, read, write, semaphore };
enum class Verbosity { quiet, normal, verbose };
// zklock's log on stderr (or --log-file): "zklock: ..." lines, or one JSON object a line (run_events.hpp).
enum class LogFormat { text, json };

struct CliOptions {
  Mode mode = Mode::run;
  std::string servers;  // --zk, else $ZKLOCK_SERVERS, else 127.0.0.1:2181
  std::string servers_file;  // -z @FILE: the file `servers` was read from (read again while zklock runs)
  std::string lock_path;

  // Exactly one of these is set in Mode::run: an argv to exec, or a string for /bin/sh -c.
  std::vector<std::string> command;
  std::optional<std::string> shell_command;

  // Acquisition: no value waits forever; zero does not wait at all (-n, or -w 0).
  std::optional<std::chrono::nanoseconds> wait_timeout;
  int conflict_exit_code = 1;
  LockKind kind = LockKind::mutex;
  int slots = 0;  // LockKind::semaphore: how many jobs may hold at once
  // --once-per: run at most once per window of this length (of the ensemble leader's clock).
  std::optional<std::chrono::milliseconds> once_per;
  TimeZone once_per_zone;     // --tz: the zone whose wall clock the windows follow (UTC)
  bool count_failed = false;  // --count-failed: a failed run uses up its window too

  // 20 s: with the default --kill-after and a 2 s tick it tolerates 9.334 s of silence from the
  // ensemble (a rolling restart or a leader election measured 1-2 s), at the price of a crashed
  // holder blocking its path about 22 s. docs/operations.md ("Timeouts") has the figures.
  std::chrono::milliseconds session_timeout{20'000};
  std::chrono::milliseconds connect_timeout{15'000};
  std::chrono::milliseconds tick_time{2'000};  // the ensemble's tickTime (--tick-time, $ZKLOCK_TICK_TIME)
  std::chrono::milliseconds kill_after{5'000};
  int kill_signal = 15;  // SIGTERM
  int lost_exit_code = 75;

  std::optional<std::string> owner;
  std::optional<std::filesystem::path> auth_file;
  // TLS to the ensemble (--tls-ca, --tls-cert, --tls-key, else $ZKLOCK_TLS_CA, _CERT, _KEY;
  // --tls-no-verify-host): no CA, no TLS.
  std::optional<std::filesystem::path> tls_ca;
  std::optional<std::filesystem::path> tls_cert;
  std::optional<std::filesystem::path> tls_key;
  bool tls_verify_host = true;
  Verbosity verbosity = Verbosity::normal;
  bool json = false;
  bool watch = false;  // with --list: print again whenever the holders change, until interrupted
  bool recursive = false;  // with --list: every lock and recipe under LOCKPATH
  bool prometheus = false;  // with --list: Prometheus text instead of a table (also what --listen serves)
  std::string listen;       // with --list: serve the listing as Prometheus metrics on HOST:PORT
  std::size_t max_locks = 1000;  // with --prometheus or --listen: paths shown at most
  // Mode::break_lock: the holder's node to delete when there are several; no confirmation asked.
  std::optional<std::string> break_node;
  bool force = false;

  LogFormat log_format = LogFormat::text;
  std::optional<std::filesystem::path> log_file;      // appended to instead of stderr
  std::optional<std::filesystem::path> metrics_file;  // Mode::run: Prometheus text, replaced at exit

  bool nonblocking() const {
    return wait_timeout && *wait_timeout == std::chrono::nanoseconds::zero();
  }
  bool quiet() const { return verbosity == Verbosity::quiet; }
  bool verbose() const { return verbosity == Verbosity::verbose; }
};

// A bad option, value or argument. what() is one line naming the culprit, without the "zklock: "
// prefix.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// -z @FILE (or ZKLOCK_SERVERS=@FILE): the servers as a file that configuration management keeps.
// Servers one or more per line, commas or blanks between them; '#' starts a comment; the chroot is
// written on the last server, or alone on a line. Returns the connect string; throws UsageError
// naming the file and what is wrong with it.
std::string servers_from_file(const std::string& file);

// Parses argv (argv[0] is the program name). Options stop at LOCKPATH; what follows is the command
// ("--" may stand before it) or "-c SHELL-COMMAND". `env_servers` is $ZKLOCK_SERVERS (or null).
// Checks values (ranges, signal names) but not the lock path or host list: those are checked by
// the library's validators in the caller, which knows the exact rules. Throws UsageError.
CliOptions parse_command_line(const std::vector<std::string>& argv, const char* env_servers,
                              const char* env_tick_time = nullptr);

// "2", "0.5", "1.25s": non-negative seconds, at most a day. Throws UsageError naming `option`.
std::chrono::nanoseconds parse_seconds(std::string_view text, std::string_view option);
// "30m", "1h", "1d", "2w": a whole number and a unit (s, m, h, d, w), from 1s to 366 days.
// Throws UsageError naming `option`.
std::chrono::milliseconds parse_period(std::string_view text, std::string_view option);
// "TERM", "SIGTERM", "sigterm" or "15". Throws UsageError naming `option`.
int parse_signal(std::string_view text, std::string_view option);
// The signal's short name ("TERM") or its number as text.
std::string signal_name(int signal);
// An exit code, 0..255. Throws UsageError naming `option`.
int parse_exit_code(std::string_view text, std::string_view option);

// Human text for durations in messages: "2s", "1.5s", "250ms".
std::string format_duration(std::chrono::nanoseconds duration);

// Every option the parser accepts (-c/--command included), for the test that --help and the man
// page describe each of them.
struct AcceptedOption {
  std::string_view name;   // long name, without "--"
  char short_name;         // '\0' if none
  std::string_view alias;  // another long name, or empty
};
std::vector<AcceptedOption> accepted_options();

std::string help_text();
std::string version_text();

}  // namespace zklock
