// SPDX-License-Identifier: Apache-2.0
// --list --prometheus and --list --listen: what the listing of one path, or of every path under a
// prefix (--recursive), shows, as Prometheus metrics in the text exposition format (0.0.4). Each
// path is a series labelled lock="PATH" and kind="lock|read_write|semaphore|election|group|
// double_barrier|counter"; the listing itself has series of its own (when it was read, whether it
// was complete, how many paths were left out by the bound on series).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <zkr/lock.hpp>

#include "contender_report.hpp"

namespace zklock {

// One path as --list read it.
struct PathReading {
  std::string path;
  zkr::PathListing listing;
  std::optional<int> slots;             // a semaphore's path
  std::optional<RecipeReading> recipe;  // another recipe's path
};

struct ListingSummary {
  std::chrono::system_clock::time_point observed;  // when the reading began (or was last known current)
  bool up = true;               // false: the ensemble could not be read (no path series then)
  bool complete = true;         // false: the walk stopped at its bound before the end
  std::size_t paths_read = 0;   // paths the walk read
  std::size_t dropped = 0;      // paths with something to show left out by --max-locks
  std::optional<std::uint64_t> walks;  // the exporter's walks of the prefix so far (a counter)
};

// The exposition text. Ages (held, oldest wait) are measured from `summary.observed` to each
// node's creation time, as the servers' clocks wrote it.
std::string lock_exposition(const std::vector<PathReading>& paths, const ListingSummary& summary);

}  // namespace zklock
