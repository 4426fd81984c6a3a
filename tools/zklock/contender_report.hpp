// --list output: the holders and waiters of a lock path, as a table or as JSON.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/lock.hpp>

#include "once_per.hpp"

namespace zklock {

// A table, one line per contender (holders first, then waiters in queue order), preceded by a
// header line; "PATH: free" when there is nobody; then one "not a contender: NAME" line per other
// child. "PATH: does not exist" when it does not (`chroot`, if any, is named: it may be the one
// missing). `slots`: the path is a semaphore with that many slots (the header says so). `last_runs`:
// the path's --once-per record, as closing "last --once-per run (SCHEDULE): ..." lines.
std::string format_listing_text(std::string_view path, const zkr::PathListing& listing, std::string_view chroot = {},
                                std::optional<int> slots = std::nullopt,
                                const std::vector<RunRecord>& last_runs = {});

// {["observed": TIME,] "path": ..., "exists": true|false, ["slots": N,] "contenders": [{"node",
// "sequence", "token", "session_id", "session", "owner", "since", "holds", "role", "scheme"}, ...],
// "not_contenders": [NAME, ...] [, "last_run": {...} (see run_record_json), "last_runs": [{...}, ...]]}
// on one line, followed by a newline; "observed" when given (the time the listing was read), "slots"
// only for a semaphore's path, "last_run" (the latest started) and "last_runs" (one per --once-per
// schedule, same vocabulary) only for a path with a --once-per record. Vocabulary:
// json_vocabulary.hpp.
std::string format_listing_json(std::string_view path, const zkr::PathListing& listing,
                                std::optional<int> slots = std::nullopt,
                                const std::vector<RunRecord>& last_runs = {},
                                std::optional<std::chrono::system_clock::time_point> observed = std::nullopt);

// Who holds, for "PATH is held by ..." messages: each holder's session, owner data (escaped for the
// terminal) and since when, e.g. `session 0x1000a2b3c0002 (owner "host-a", since
// 2026-12-01T05:40:23.579Z)`; several joined by ", "; "someone who has let go since" when the
// listing shows no holder (it was released between the refusal and the listing).
std::string describe_holders(const std::vector<zkr::ContenderInfo>& contenders);

// A JSON string literal (quotes included); invalid UTF-8 bytes become U+FFFD.
std::string json_string(std::string_view text);

// Text safe to write to a terminal: C0 and C1 controls, DEL and bytes that are not UTF-8 become
// "\xNN" escapes (a C1 control as the escapes of both its UTF-8 bytes), so that input can neither
// forge a second line nor send control sequences. Valid UTF-8 otherwise passes unchanged.
std::string escape_for_terminal(std::string_view text);

// "2024-05-01T12:00:00.123Z"
std::string format_utc(std::chrono::system_clock::time_point time);

}  // namespace zklock
