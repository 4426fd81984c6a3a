// SPDX-License-Identifier: Apache-2.0
// --once-per PERIOD: a command run at most once per period across every host that runs it.
//
// Periods are windows of the ensemble leader's clock (the mtime ZooKeeper stamps on a write), read
// as wall-clock time in a time zone (--tz, UTC by default): window k covers wall-clock times
// [k * PERIOD, (k + 1) * PERIOD) since 1970-01-01 00:00, so "1d" is a calendar day of the zone (23
// or 25 hours on the days its clocks change) and "1h" a clock hour. Periods that are whole weeks
// count from a Monday (1969-12-29), so "1w" is an ISO 8601 week, Monday 00:00 to Monday 00:00.
// Windows, not "PERIOD since the last start": cron fires a little later or earlier each time, and
// a daily job started at 02:00:00.4 yesterday must not be skipped at 02:00:00.3 today. No host's
// own clock takes part.
//
// The record of the last runs is a persistent child of the lock path, "zklock.last-run" (no
// contender's name: never a holder, never waited for; it also keeps the lock path's container
// from being reaped), with one entry per schedule (period and zone): a "1h" run does not find
// its window claimed by a "1w" run. Only the lock's holder writes it, and every write is fenced by
// the holder's lock node (zkr::FencedTransaction), so a holder that lost the lock writes nothing.
//
// A window is used up by a run that exited 0. A run that failed, or whose end was never recorded
// (killed, lock lost), leaves it open for the next run in the window, unless --count-failed asks
// that every started run use it up (at most one start per window).
//
// Record versions: version 1 (one entry, no schedule) is read as an entry of every schedule and
// replaced by version 2 at the next claim. A zklock that knows only version 1 refuses version 2
// as "not a run record zklock wrote" (exit 65) and runs nothing: upgrade every host of a path.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <vector>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "time_zone.hpp"

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
  std::int64_t finished_ms = 0;  // with exit_code: when that was recorded (the leader's clock)
  std::string schedule;          // "1w UTC": the --once-per period and --tz; empty in a version 1 record
};

// The schedule a record entry is kept under: "1w UTC", "90m Europe/Berlin".
std::string schedule_text(std::chrono::milliseconds period, const TimeZone& zone);

// The text of a record holding `runs` (version 2).
std::string encode_run_records(const std::vector<RunRecord>& runs);
// The runs in `text`, or nothing with `problem` saying why it is not a record this zklock reads.
// `modified_ms`: the node's mtime, the finish time of a version 1 record's run.
std::optional<std::vector<RunRecord>> parse_run_records(std::string_view text, std::string& problem,
                                                        std::int64_t modified_ms = 0);
// As parse_run_records, from the record's node.
std::optional<std::vector<RunRecord>> run_records_from(const zkr::NodeData& node, std::string& problem);

// The window a time of the leader's clock (ms since the epoch) falls in, and the instant window
// `window` starts (see the top of this file).
std::int64_t window_of(std::int64_t epoch_ms, std::chrono::milliseconds period, const TimeZone& zone = {});
std::int64_t window_start(std::int64_t window, std::chrono::milliseconds period, const TimeZone& zone = {});
// The window of `epoch_ms` for messages: "2026-12-01T00:00:00.000Z - 2026-12-02T00:00:00.000Z"; in
// another zone than UTC "2026-03-29T00:00:00.000+01:00 - 2026-03-30T00:00:00.000+02:00 (Europe/Berlin)".
std::string describe_window(std::int64_t epoch_ms, std::chrono::milliseconds period, const TimeZone& zone = {});

// The record is there but is not zklock's: nothing may run until an operator looks at it.
class ForeignRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class OncePerGate {
 public:
  // `count_failed`: any started run uses up its window, not only one that exited 0.
  OncePerGate(zkr::Session& session, std::string lock_path, std::chrono::milliseconds period, TimeZone zone = {},
              bool count_failed = false);

  struct Verdict {
    bool already_ran = false;       // this window's run was claimed (it is done or running)
    std::optional<RunRecord> last;  // this schedule's entry as read, if any
    bool again = false;             // last is in this window but failed or never finished: run again
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

  // The window of `epoch_ms` in this gate's schedule, for messages (see the free function).
  std::string describe_window(std::int64_t epoch_ms) const { return zklock::describe_window(epoch_ms, period_, zone_); }

 private:
  // `under_lock`: a run of this window that never finished is over (we hold the lock it held).
  Verdict judge(const std::vector<RunRecord>& runs, std::int64_t now_ms, bool under_lock);
  std::vector<RunRecord> read_runs(const std::optional<zkr::NodeData>& node) const;

  zkr::Session& session_;
  std::string lock_path_;
  std::string record_path_;
  std::chrono::milliseconds period_;
  TimeZone zone_;
  std::string schedule_;
  bool count_failed_ = false;
  std::vector<RunRecord> claimed_runs_;  // the record claim() wrote, this schedule's entry last
  std::int32_t claimed_version_ = 0;
};

// One line for --list and skip messages: when the last run started, who ran it, how it ended.
std::string describe_run(const RunRecord& record);
// {"schedule":..., "started":..., "owner":..., "token": N|null, "session_id": N|null,
//  "session": "0x...", "exit_code": N|null, "finished": ...|null}
std::string run_record_json(const RunRecord& record);

}  // namespace zklock
