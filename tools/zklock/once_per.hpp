// --once-per PERIOD: a command run at most once per period across every host that runs it.
//
// Periods are windows of the ensemble leader's clock (the mtime ZooKeeper stamps on a write):
// window k covers [k * PERIOD, (k + 1) * PERIOD) since the Unix epoch, so "1d" is a UTC day and
// "1h" a clock hour. Windows, not "PERIOD since the last start": cron fires a little later or
// earlier each time, and a daily job started at 02:00:00.4 yesterday must not be skipped at
// 02:00:00.3 today. No host's own clock takes part.
//
// The record of the last run is a persistent child of the lock path, "zklock.last-run" (no
// contender's name: never a holder, never waited for; it also keeps the lock path's container
// from being reaped). Only the lock's holder writes it, and every write is fenced by the holder's
// lock node (zkr::FencedTransaction), so a holder that lost the lock writes nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

namespace zklock {

inline constexpr std::string_view run_record_name = "zklock.last-run";
std::string run_record_path(std::string_view lock_path);
// The record's node under `lock_path`, or nothing if there is none. Throws zkr::Error.
std::optional<zkr::NodeData> read_run_record_node(zkr::Session& session, std::string_view lock_path);

// What the record says of the last run.
struct RunRecord {
  std::int64_t started_ms = 0;   // the leader's clock when the run claimed its window
  std::string owner;             // the runner's lock-node owner data, escaped for a terminal
  std::string token;             // the run's fencing token
  std::string session;           // the runner's session id, "0x..."
  std::optional<int> exit_code;  // once the command ended under the lock
  std::int64_t finished_ms = 0;  // with exit_code: when that was recorded (the record's mtime)
};

std::string encode_run_record(const RunRecord& record);
// The record in `text`, or nothing with `problem` saying why it is not one zklock wrote.
std::optional<RunRecord> parse_run_record(std::string_view text, std::string& problem);
// As parse_run_record, from the record's node (its mtime is finished_ms once there is an exit code).
std::optional<RunRecord> run_record_from(const zkr::NodeData& node, std::string& problem);

// The window a time of the leader's clock (ms since the epoch) falls in.
std::int64_t window_of(std::int64_t epoch_ms, std::chrono::milliseconds period);

// The record is there but is not zklock's: nothing may run until an operator looks at it.
class ForeignRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OncePerGate {
 public:
  OncePerGate(zkr::Session& session, std::string lock_path, std::chrono::milliseconds period);

  struct Verdict {
    bool already_ran = false;       // this window's run was claimed (it is done or running)
    std::optional<RunRecord> last;  // the record as read, if any
    std::int64_t now_ms = 0;        // the leader's clock at the check (0 when no record was read)
  };

  // Without the lock, so that a host arriving while this window's run is going on or done leaves
  // at once instead of queueing for nothing. Never claims. Throws ForeignRecord or zkr::Error.
  Verdict look();
  // Under the lock: reads the record again and, unless this window's run is claimed, claims it by
  // writing the record (fenced by `held`). Throws ForeignRecord, zkr::Error (errc::lock_lost if
  // the lock is gone: nothing was written).
  Verdict claim(const zkr::HeldLock& held, std::string_view owner, zkr::NodeAcl acl);
  // After a claimed run's command ended, the lock still held: adds its exit code to the record.
  // Throws zkr::Error.
  void record_exit(const zkr::HeldLock& held, int exit_code);

  // "window 2026-12-01T00:00:00.000Z - 2026-12-02T00:00:00.000Z" for messages.
  std::string describe_window(std::int64_t epoch_ms) const;

 private:
  Verdict judge(const std::optional<zkr::NodeData>& node, std::int64_t now_ms) const;

  zkr::Session& session_;
  std::string lock_path_;
  std::string record_path_;
  std::chrono::milliseconds period_;
  std::optional<RunRecord> claimed_;  // what claim() wrote
  std::int32_t claimed_version_ = 0;
};

// One line for --list and skip messages: when the last run started, who ran it, how it ended.
std::string describe_run(const RunRecord& record);
// {"started":..., "owner":..., "token": N|null, "session_id": N|null, "session": "0x...",
//  "exit_code": N|null, "finished": ...|null}
std::string run_record_json(const RunRecord& record);

}  // namespace zklock
