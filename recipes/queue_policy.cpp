// SPDX-License-Identifier: Apache-2.0
#include "queue_policy.hpp"

#include <algorithm>
#include <optional>

namespace zkr::detail {
namespace {

bool blocks_reader(ContenderRole role) { return role != ContenderRole::read; }

// The node a contender with `role` at `index` waits for under a one-holder policy: a reader the
// nearest earlier writer, anyone else its immediate predecessor. Nullopt if it holds.
std::optional<std::size_t> one_holder_blocker(const std::vector<ContenderName>& sorted, std::size_t index,
                                              ContenderRole role) {
  if (role == ContenderRole::read) {
    for (std::size_t i = index; i-- > 0;)
      if (blocks_reader(sorted[i].role)) return i;
    return std::nullopt;
  }
  if (index == 0) return std::nullopt;
  return index - 1;
}

}  // namespace

std::string_view node_marker(ContenderRole role) {
  switch (role) {
    case ContenderRole::exclusive: return "lock-";
    case ContenderRole::read: return "__READ__";
    case ContenderRole::write: return "__WRIT__";
    case ContenderRole::latch: return "latch-";
  }
  return "lock-";
}

// Who wakes whom, without a herd.
//
// Lock and writer (max_holders = 1): the holder is index 0; every waiter watches its immediate
// predecessor. A release deletes the holder's node, which wakes its successor, the next holder. A
// reader waits for the nearest earlier writer only.
//   - A lock or writer waiter whose predecessor is itself waiting also watches the node that
//     predecessor waits for (its "second blocker"). That node's deletion usually means the
//     predecessor has just been granted: the waiter lists the children again right then, while
//     the predecessor holds, so that the predecessor's release grants it by the deletion event
//     alone (its blocker is then the last obstacle) instead of costing a listing at its turn. A
//     release thus wakes the next holder and the waiter after it: two, whatever the queue length.
//     The second watch only ever makes a waiter look again; what grants is the listing.
//     Readers keep one watch: all the readers behind a writer would otherwise wake together.
//
// Semaphore (max_holders = N > 1): indices 0..N-1 hold. A waiter's place moves up whenever any
// node ahead of it goes, and a promotion deletes nothing; the wake-ups must also not depend on
// any one waiter's process, which may be dead or frozen while its session (and node) lives on.
//   - The first two waiters (indices N and N+1) watch the parent's children: any release wakes
//     both. If the first waiter's process is gone, the second still wakes, moves up, and is
//     granted on the next release: a dead or frozen waiter never makes the one behind it sleep.
//   - Every later waiter (index k > N+1) watches its two predecessors (k-1 and k-2), both
//     waiters. It must move up into the children-watching pair exactly when those two move up
//     (one becomes the first waiter, the other is granted). Both tell it, each by "touching" its
//     node (a data rewrite that fires the watch): a contender touches when it becomes the first
//     waiter and when it is granted. One of the two is enough, so one dead or frozen
//     predecessor does not stop the chain; two dead neighbours in a row can delay the waiters
//     behind them until one of their sessions ends.
//   - A waiter whose watch shows an already touched predecessor (version > 0: it moved before
//     the watch was set) checks again at once, once per touch.
// A release therefore wakes the two children watchers, and through their touches the next two
// waiters: a constant number of wake-ups whatever the queue length, plus two for every arrival or
// departure elsewhere in the queue (the children watches fire on any change).
//
// The grant touch is two conditional rewrites (to version 1, then to 2), so that a granted
// semaphore node always has version 2 or more and a first waiter's touch (to version 1 only)
// never does: the listing tells a lease holder from a node that is entitled but whose owner has
// not taken the lease (a dead waiter's node, or one a moment before its owner notices).
QueueDecision decide(const std::vector<ContenderName>& sorted, std::size_t index, const QueuePolicy& policy) {
  if (policy.role == ContenderRole::read) {
    if (const auto blocker = one_holder_blocker(sorted, index, policy.role)) return {false, *blocker, false};
    return {true, 0, false};
  }
  const auto limit = static_cast<std::size_t>(std::max(policy.max_holders, 1));
  if (index < limit) return {true, 0, false};
  if (limit == 1) {
    QueueDecision waiting{false, index - 1, false};
    if (const auto second = one_holder_blocker(sorted, index - 1, sorted[index - 1].role)) {
      waiting.watch_second = true;
      waiting.second_blocker = *second;
    }
    return waiting;
  }
  QueueDecision waiting;
  if (index <= limit + 1) {
    waiting.watch_children = true;
    waiting.first_waiter = index == limit;
    return waiting;
  }
  waiting.blocker = index - 1;
  waiting.watch_second = true;
  waiting.second_blocker = index - 2;
  return waiting;
}

}  // namespace zkr::detail
