// SPDX-License-Identifier: Apache-2.0
// --list output: the holders and waiters of a lock path, as a table or as JSON.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/group.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>
#include <zkr/shared_counter.hpp>

#include "once_per.hpp"

namespace zklock {

// --list on a path of the other recipes (group membership, shared counter, barrier, double
// barrier), recognised by what is there when the path holds no lock contender.
struct ListedNode {
  std::string name;  // the child's name; empty for the path's own node
  std::string data;
  zkr::NodeStat stat;
};

struct RecipeReading {
  enum class Kind {
    group,           // every child ephemeral: members (named per GroupLayout)
    double_barrier,  // "ready" and/or ephemeral children named by a UUID (32 hex or 8-4-4-4-12)
    // No children, no data: a free lock path and a barrier that is up look the same (ZooKeeper
    // tells a client nothing of a container), so both are said.
    empty,
    missing,         // no node: a barrier that is down (said with "does not exist")
    counter,         // no children, data that decodes in at least one CounterLayout
    unrecognised,    // no children, data that is no counter's (named, not guessed)
  };
  struct Member {
    std::string id;  // group: the member id; double barrier: empty
    std::string data;
    std::string node;
    std::int64_t session_id = 0;
    std::chrono::system_clock::time_point since;
  };
  struct CounterValue {
    zkr::CounterLayout layout;
    std::int64_t value = 0;
  };
  Kind kind = Kind::unrecognised;
  zkr::GroupLayout group_layout = zkr::GroupLayout::curator;  // group
  std::vector<Member> members;                                // group members, double-barrier participants
  bool ready = false;                                         // double barrier: its "ready" node exists
  std::vector<CounterValue> counter;  // counter: every layout the data decodes in (one, or several: ambiguous)
  std::string data;                   // barrier, counter, unrecognised: the node's data
  std::int32_t version = 0;           // the node's data version
};

// What `node` (the path's own) and `children` (those that are not contenders, with their data)
// are, or nothing when they are none of the above (children of mixed kinds, persistent children).
// Call it only for a path that exists with no contender and no semaphore limit recorded.
std::optional<RecipeReading> recognise_recipe(const ListedNode& node, const std::vector<ListedNode>& children);

// A table, one line per contender (holders first, then waiters in queue order), preceded by a
// header line; "PATH: free" when there is nobody; then one "not a contender: NAME" line per other
// child. "PATH: does not exist" when it does not (`chroot`, if any, is named: it may be the one
// missing). `slots`: the path is a semaphore with that many slots (the header says so). `last_runs`:
// the path's --once-per record, as closing "last --once-per run (SCHEDULE): ..." lines.
// `recipe`: what recognise_recipe() found, said in place of "free": e.g. "PATH: a group (curator
// layout), 2 members" and a table of them; "PATH: a counter, 42 (curator_atomic_long layout, ...)";
// after "free" or "does not exist", what a barrier there would be ("read as a barrier: up").
std::string format_listing_text(std::string_view path, const zkr::PathListing& listing, std::string_view chroot = {},
                                std::optional<int> slots = std::nullopt,
                                const std::vector<RunRecord>& last_runs = {},
                                const std::optional<RecipeReading>& recipe = std::nullopt);

// {["observed": TIME,] "path": ..., "exists": true|false, ["slots": N,] "contenders": [{"node",
// "sequence", "token", "session_id", "session", "owner", "since", "holds", "role", "scheme"}, ...],
// "not_contenders": [NAME, ...] [, "last_run": {...} (see run_record_json), "last_runs": [{...}, ...]]}
// on one line, followed by a newline; "observed" when given (the time the listing was read), "slots"
// only for a semaphore's path, "last_run" (the latest started) and "last_runs" (one per --once-per
// schedule, same vocabulary) only for a path with a --once-per record; "recipe" only when one was
// recognised: {"kind": "group", "layout", "members": [{"id", "data", "node", "session_id",
// "session", "since"}]}, {"kind": "double_barrier", "ready", "participants": [same fields, no
// "id"]}, {"kind": "empty", "barrier": "up"} (a free lock path, or a barrier that is up),
// {"kind": "missing", "barrier": "down"}, {"kind": "counter", "data_version", "bytes", "values":
// [{"layout", "value"}, ...]} (several values when the data fits several layouts) or {"kind":
// "unrecognised", "data_version", "bytes"}. Vocabulary: json_vocabulary.hpp.
std::string format_listing_json(std::string_view path, const zkr::PathListing& listing,
                                std::optional<int> slots = std::nullopt,
                                const std::vector<RunRecord>& last_runs = {},
                                std::optional<std::chrono::system_clock::time_point> observed = std::nullopt,
                                const std::optional<RecipeReading>& recipe = std::nullopt);

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
