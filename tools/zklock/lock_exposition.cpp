// SPDX-License-Identifier: Apache-2.0
#include "lock_exposition.hpp"

#include <algorithm>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "metrics_file.hpp"

namespace zklock {
namespace {

// What a path is, for the kind label: its contenders' role, or the recipe recognised there.
std::string_view kind_of(const PathReading& reading) {
  if (reading.slots) return "semaphore";
  if (!reading.listing.contenders.empty()) {
    switch (reading.listing.contenders.front().role) {
      case zkr::ContenderRole::exclusive: return "lock";
      case zkr::ContenderRole::read:
      case zkr::ContenderRole::write: return "read_write";
      case zkr::ContenderRole::latch: return "election";
    }
  }
  if (reading.recipe) {
    switch (reading.recipe->kind) {
      case RecipeReading::Kind::group: return "group";
      case RecipeReading::Kind::double_barrier: return "double_barrier";
      case RecipeReading::Kind::counter: return "counter";
      default: break;
    }
  }
  return "lock";
}

double seconds_between(std::chrono::system_clock::time_point from, std::chrono::system_clock::time_point to) {
  return std::max(0.0, std::chrono::duration<double>(to - from).count());
}

// One metric family: its HELP and TYPE lines, then its samples.
struct Family {
  std::string_view name, help;
  std::string samples;
  void add(std::string_view labels, double value) {
    samples += fmt::format("{}{{{}}} {}\n", name, labels, value);
  }
  std::string text() const {
    if (samples.empty()) return {};
    return fmt::format("# HELP {} {}\n# TYPE {} gauge\n{}", name, help, name, samples);
  }
};

}  // namespace

std::string lock_exposition(const std::vector<PathReading>& paths, const ListingSummary& summary) {
  Family holders{"zklock_lock_holders", "Contenders that hold the path now (a semaphore's leases, readers).", {}};
  Family waiters{"zklock_lock_waiters", "Contenders queued on the path that do not hold.", {}};
  Family held{"zklock_lock_held_seconds", "How long the longest-standing holder's node has existed.", {}};
  Family oldest_wait{"zklock_lock_oldest_wait_seconds", "How long the first waiter's node has existed.", {}};
  Family token{"zklock_lock_token", "The highest fencing token among the holders (the node's czxid).", {}};
  Family slots{"zklock_lock_slots", "A semaphore's number of slots, as recorded on its path.", {}};
  Family members{"zklock_group_members", "Members of a group, or participants of a double barrier.", {}};
  for (const auto& reading : paths) {
    const std::string labels = fmt::format("lock=\"{}\",kind=\"{}\"", label_value(reading.path), kind_of(reading));
    if (reading.recipe && (reading.recipe->kind == RecipeReading::Kind::group ||
                           reading.recipe->kind == RecipeReading::Kind::double_barrier)) {
      members.add(labels, static_cast<double>(reading.recipe->members.size()));
      continue;
    }
    if (reading.recipe && reading.recipe->kind == RecipeReading::Kind::counter) continue;
    std::size_t holding = 0, waiting = 0;
    std::optional<std::chrono::system_clock::time_point> first_held, first_waiting;
    std::optional<zkr::FencingToken> highest;
    for (const auto& contender : reading.listing.contenders) {
      if (contender.holds) {
        ++holding;
        first_held = first_held ? std::min(*first_held, contender.created) : contender.created;
        if (!highest || *highest < contender.token) highest = contender.token;
      } else {
        ++waiting;
        first_waiting = first_waiting ? std::min(*first_waiting, contender.created) : contender.created;
      }
    }
    holders.add(labels, static_cast<double>(holding));
    waiters.add(labels, static_cast<double>(waiting));
    if (first_held) held.add(labels, seconds_between(*first_held, summary.observed));
    if (first_waiting) oldest_wait.add(labels, seconds_between(*first_waiting, summary.observed));
    if (highest) token.add(labels, static_cast<double>(highest->value()));
    if (reading.slots) slots.add(labels, *reading.slots);
  }
  std::string out;
  for (const Family* family : {&holders, &waiters, &held, &oldest_wait, &token, &slots, &members}) out += family->text();
  out += fmt::format(
      "# HELP zklock_listing_up 1 if the ensemble could be read for this listing, else 0.\n"
      "# TYPE zklock_listing_up gauge\nzklock_listing_up {}\n"
      "# HELP zklock_listing_complete 1 if every path under the prefix was read, 0 if the walk stopped at its bound.\n"
      "# TYPE zklock_listing_complete gauge\nzklock_listing_complete {}\n"
      "# HELP zklock_listing_paths_read Paths the walk read.\n"
      "# TYPE zklock_listing_paths_read gauge\nzklock_listing_paths_read {}\n"
      "# HELP zklock_listing_paths_dropped Paths with something to show left out by --max-locks.\n"
      "# TYPE zklock_listing_paths_dropped gauge\nzklock_listing_paths_dropped {}\n"
      "# HELP zklock_listing_timestamp_seconds When the listing was read, or last known current by the exporter's "
      "watches (Unix time).\n"
      "# TYPE zklock_listing_timestamp_seconds gauge\nzklock_listing_timestamp_seconds {:.3f}\n",
      summary.up ? 1 : 0, summary.complete ? 1 : 0, summary.paths_read, summary.dropped,
      std::chrono::duration<double>(summary.observed.time_since_epoch()).count());
  if (summary.walks)
    out += fmt::format(
        "# HELP zklock_listing_walks_total Walks of the prefix read from the ensemble; a scrape with no change under it "
        "since the last walk is answered from that walk.\n"
        "# TYPE zklock_listing_walks_total counter\nzklock_listing_walks_total {}\n",
        *summary.walks);
  return out;
}

}  // namespace zklock
