// SPDX-License-Identifier: Apache-2.0
// The queue's decision rule, without a server: who holds and what each waiter watches.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "peer_layout.hpp"
#include "queue_policy.hpp"

namespace zkr::detail {
namespace {

std::vector<ContenderName> queue_of(const std::string& roles) {
  std::vector<ContenderName> queue;
  for (std::size_t i = 0; i < roles.size(); ++i) {
    ContenderRole role = roles[i] == 'r' ? ContenderRole::read : roles[i] == 'w' ? ContenderRole::write : ContenderRole::exclusive;
    queue.push_back({"n" + std::to_string(i), ContenderScheme::zkrecipes_or_curator, role, "g", static_cast<std::int64_t>(i)});
  }
  return queue;
}

TEST(QueuePolicyTest, LockHolderIsFirstAndWaitersWatchTheirPredecessor) {
  auto queue = queue_of("xxxx");
  const QueuePolicy lock{ContenderRole::exclusive, 1};
  EXPECT_TRUE(decide(queue, 0, lock).holds);
  for (std::size_t i = 1; i < queue.size(); ++i) {
    auto decision = decide(queue, i, lock);
    EXPECT_FALSE(decision.holds);
    EXPECT_FALSE(decision.watch_children);
    EXPECT_EQ(decision.blocker, i - 1);
    // Behind a waiting predecessor, also the node that predecessor waits for.
    EXPECT_EQ(decision.watch_second, i >= 2);
    if (i >= 2) {
      EXPECT_EQ(decision.second_blocker, i - 2);
    }
  }
}

TEST(QueuePolicyTest, SemaphoreFirstTwoWaitersWatchChildrenLaterOnesTheirTwoPredecessors) {
  auto queue = queue_of("xxxxxxx");
  const QueuePolicy semaphore{ContenderRole::exclusive, 2};
  EXPECT_TRUE(decide(queue, 0, semaphore).holds);
  EXPECT_TRUE(decide(queue, 1, semaphore).holds);
  auto first_waiter = decide(queue, 2, semaphore);
  EXPECT_FALSE(first_waiter.holds);
  EXPECT_TRUE(first_waiter.watch_children);
  EXPECT_TRUE(first_waiter.first_waiter);
  // The second waiter watches the children too: a dead first waiter cannot hide a release from it.
  auto second_waiter = decide(queue, 3, semaphore);
  EXPECT_FALSE(second_waiter.holds);
  EXPECT_TRUE(second_waiter.watch_children);
  EXPECT_FALSE(second_waiter.first_waiter);
  for (std::size_t i = 4; i < queue.size(); ++i) {
    auto decision = decide(queue, i, semaphore);
    EXPECT_FALSE(decision.holds);
    EXPECT_FALSE(decision.watch_children);
    EXPECT_FALSE(decision.first_waiter);
    EXPECT_EQ(decision.blocker, i - 1);
    EXPECT_TRUE(decision.watch_second);
    EXPECT_EQ(decision.second_blocker, i - 2);
  }
}

TEST(QueuePolicyTest, ReadersWaitForTheNearestEarlierWriterOnly) {
  auto queue = queue_of("rrwrrwr");
  const QueuePolicy read{ContenderRole::read, 1};
  const QueuePolicy write{ContenderRole::write, 1};
  EXPECT_TRUE(decide(queue, 0, read).holds);
  EXPECT_TRUE(decide(queue, 1, read).holds);
  EXPECT_FALSE(decide(queue, 2, write).holds);
  EXPECT_EQ(decide(queue, 2, write).blocker, 1u);
  EXPECT_EQ(decide(queue, 3, read).blocker, 2u);
  EXPECT_EQ(decide(queue, 4, read).blocker, 2u);
  EXPECT_EQ(decide(queue, 5, write).blocker, 4u);
  EXPECT_EQ(decide(queue, 6, read).blocker, 5u);
  // A writer's second watch is what its predecessor waits for, by the predecessor's role; readers
  // keep one watch (all those behind one writer would wake together).
  EXPECT_FALSE(decide(queue, 2, write).watch_second);  // its predecessor, a reader, holds
  EXPECT_TRUE(decide(queue, 5, write).watch_second);
  EXPECT_EQ(decide(queue, 5, write).second_blocker, 2u);  // the reader at 4 waits for the writer at 2
  for (std::size_t i = 0; i < queue.size(); ++i) EXPECT_FALSE(decide(queue, i, read).watch_second);
}

}  // namespace
}  // namespace zkr::detail

// ---- peer layouts (peer_layout.hpp) ----

namespace zkr::detail {
namespace {

TEST(PeerLayout, ChildNamesTellWhichRecipeWroteThem) {
  EXPECT_EQ(classify_child("_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-latch-0000000003"), PeerNode::curator_latch);
  EXPECT_EQ(classify_child("_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-lock-0000000003"), PeerNode::curator_lock);
  EXPECT_EQ(classify_child("_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-__WRIT__0000000003"), PeerNode::curator_read_write);
  EXPECT_EQ(classify_child("0123456789abcdef0123456789abcdef__lock__0000000003"), PeerNode::kazoo_lock);
  EXPECT_EQ(classify_child("0123456789abcdef0123456789abcdef__rlock__0000000003"), PeerNode::kazoo_read_lock);
  EXPECT_EQ(classify_child("locks"), PeerNode::curator_semaphore);
  EXPECT_EQ(classify_child("leases"), PeerNode::curator_semaphore);
  EXPECT_EQ(classify_child("0123456789abcdef0123456789abcdef"), PeerNode::kazoo_semaphore);
  for (const char* other : {"report-lock-0000000000", "lock", "0123456789ABCDEF0123456789ABCDEF", "config"})
    EXPECT_EQ(classify_child(other), PeerNode::unknown) << other;
  EXPECT_EQ(node_kind(ContenderScheme::kazoo, ContenderRole::exclusive), PeerNode::kazoo_lock);
  EXPECT_EQ(node_kind(ContenderScheme::zkrecipes_or_curator, ContenderRole::latch), PeerNode::curator_latch);
}

TEST(PeerLayout, TheFirstChildOfAKindNotSharedIsNamedWithItsRecipe) {
  const std::vector<std::string> children = {"config", "_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-lock-0000000001",
                                             "_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-latch-0000000003"};
  const auto only_locks = [](PeerNode kind) { return kind == PeerNode::curator_lock; };
  EXPECT_EQ(peer_conflict(children, "/x", "a zkr::LeaderSelector with the curator_lock layout", only_locks),
            "path /x has Curator LeaderLatch (or zkr::LeaderLatch) nodes "
            "(_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-latch-0000000003); a zkr::LeaderSelector with the curator_lock "
            "layout there would run a second, disjoint queue");
  EXPECT_EQ(peer_conflict({children[0], children[1]}, "/x", "us", only_locks), "");
  EXPECT_EQ(peer_conflict({}, "/x", "us", only_locks), "");
}

}  // namespace
}  // namespace zkr::detail
