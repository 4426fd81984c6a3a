// SPDX-License-Identifier: Apache-2.0
// A recipe's policy over the contender queue, and the queue's one pure decision: given the sorted
// contenders, does the one at `index` hold, and if not, what does it watch. No I/O: the contender
// (contender_queue.hpp) acts on the answer, listings (listing.cpp) show it, unit tests check it.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

#include <zkr/names.hpp>

namespace zkr::detail {

struct QueuePolicy {
  ContenderRole role = ContenderRole::exclusive;  // names our node and decides what blocks it
  int max_holders = 1;
  // Several hold at once: a promotion deletes nothing, so a grant rewrites (touches) its node to
  // wake the waiters behind it, and watches and listings read node versions (see decide()).
  bool promotes_without_deleting() const { return max_holders > 1; }
};

// What a contender at `index` of the sorted queue does next.
struct QueueDecision {
  bool holds = false;
  std::size_t blocker = 0;      // index of the node to watch when !holds and !watch_children
  bool watch_children = false;  // watch the parent's children instead (first two waiters, max_holders > 1)
  // Also watch this node, whose deletion makes us look again: for a semaphore waiter further back
  // the node before its blocker, for a lock or writer waiter the node its blocker waits for (see
  // decide()).
  bool watch_second = false;
  std::size_t second_blocker = 0;
  // This waiter is the first one: it tells the waiters behind it by touching its node.
  bool first_waiter = false;
};
QueueDecision decide(const std::vector<ContenderName>& sorted, std::size_t index, const QueuePolicy& policy);

// The name marker our nodes carry for a role ("lock-", "__READ__", "__WRIT__", "latch-").
std::string_view node_marker(ContenderRole role);

}  // namespace zkr::detail
