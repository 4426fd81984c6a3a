// SPDX-License-Identifier: Apache-2.0
// The one JSON vocabulary of zklock's machine output: --list --json, --list --watch --json, the
// --once-per record in them, and --log-format json. The same thing has the same name and type
// everywhere: a lock path is "lock" in log records and "path" in a listing (the thing listed),
// a fencing token is a number "token", a session is a number "session_id" together with the text
// "session" ("0x...", as ZKLOCK_SESSION_ID, the text output and the library's log records write
// it), times are UTC RFC 3339 strings. Reasons and outcomes are identifiers (lower case,
// underscores), the same as the library's metrics labels where both name a thing.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <zkr/session.hpp>

namespace zklock {

// `"session_id":N,"session":"0x..."` (no braces, no leading comma). N is the id as an unsigned
// 64-bit number: a JSON reader that keeps integers exact (Python, jq 1.7, Go's json.Number) reads
// it as is; one that reads doubles (JavaScript) may round it, and should use "session".
std::string json_session_fields(std::int64_t session_id);

// The session id in "0x..." text (as written by zkr::session_id_text), or nothing if it is not one.
std::optional<std::int64_t> parse_session_id_text(std::string_view text);

// "2026-01-31T23:59:59.123456Z", microseconds, as the library's log records write "time".
std::string format_utc_micros(std::chrono::system_clock::time_point time);

// Levels of the log records, from the library's (debug, info, warning, error) plus "notice": a
// routine outcome worth seeing that is no fault (the lock held with -n, a -w timeout).
namespace level {
inline constexpr std::string_view info = "info";
inline constexpr std::string_view notice = "notice";
inline constexpr std::string_view warning = "warning";
inline constexpr std::string_view error = "error";
}  // namespace level

// A "lost" record's "reason": why the grant was lost, named as the library's metrics label it
// (zkr_locks_lost_total{reason}): session_lost, connection_lost, node_deleted, session_closed.
std::string_view loss_reason_name(zkr::LossReason reason) noexcept;
// zklock's own reasons, when the library gave none: the release could not confirm the lock was
// held to the end; the keeper stopped the job at the session monitor's deadline before the
// monitor's verdict came.
inline constexpr std::string_view unconfirmed_loss = "unconfirmed";
inline constexpr std::string_view keeper_deadline_loss = "keeper_deadline";

}  // namespace zklock
