// SPDX-License-Identifier: Apache-2.0
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

class LockTest : public ServerTest {};

// A HeldLock moved into a lambda run by a thread of its own, which releases it on release() (or at
// the end).
class OnAnotherThread {
 public:
  explicit OnAnotherThread(HeldLock held)
      : worker_([moved = std::move(held), go = go_.get_future()]() mutable {
          go.wait();
          moved.release();
        }) {}
  ~OnAnotherThread() { release(); }
  void release() {
    if (!worker_.joinable()) return;
    go_.set_value();
    worker_.join();
  }

 private:
  std::promise<void> go_;
  std::thread worker_;
};

// Locks on one path, each on a session of its own, so that each one's requests can be counted.
struct LocksOnOwnSessions {
  LocksOnOwnSessions(const std::string& servers, const std::string& path, int count) {
    for (int i = 0; i < count; ++i) {
      sessions.push_back(std::make_unique<Session>(session_options(servers)));
      locks.push_back(std::make_unique<Lock>(*sessions.back(), path));
    }
  }
  std::uint64_t requests_besides_heartbeats(int i) const {
    const SessionMetrics metrics = sessions[i]->metrics();
    return metrics.requests_sent - metrics.heartbeats_sent;
  }
  // Queues lock i; its grant lands in `into`, read through holds() and released through release().
  // What its session had sent (besides heartbeats) when told of the grant: expect_requests_at_grant.
  void queue(int i, HeldLock& into) {
    locks[i]->async_acquire(-1ns, [this, &into, i](std::error_code ec, HeldLock lock) {
      if (ec) return;  // session_closed for a waiter still queued when the test ends
      const auto sent = requests_besides_heartbeats(i);
      const auto now = std::chrono::steady_clock::now();
      std::lock_guard guard(mutex);
      into = std::move(lock);
      at_grant[i] = sent;
      told_at[i] = now;
    });
  }
  // Checks that lock i had sent `expected` requests (besides heartbeats) at its grant, its blocker
  // released at `released_at`. The count is read in the grant's callback, which runs on the
  // callback thread a moment after the grant; a holder may watch its own node 50 ms after its grant
  // (see schedule_own_node_watch_locked), so a callback later than that (a loaded machine, a
  // sanitizer) may count that one watch too, and nothing more.
  void expect_requests_at_grant(int i, std::uint64_t expected, std::chrono::steady_clock::time_point released_at,
                                std::string_view what) {
    std::lock_guard guard(mutex);
    const auto told_after = std::chrono::duration_cast<std::chrono::milliseconds>(told_at[i] - released_at);
    EXPECT_GE(at_grant[i], expected) << what;
    EXPECT_LE(at_grant[i], expected + (told_after >= 50ms ? 1 : 0))
        << what << " (the grant's callback ran " << told_after.count() << " ms after the release)";
  }
  bool holds(const HeldLock& lock) {
    std::lock_guard guard(mutex);
    return static_cast<bool>(lock);
  }
  void release(HeldLock& lock) {
    std::lock_guard guard(mutex);
    lock.release();
  }
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<Lock>> locks;
  std::mutex mutex;
  std::map<int, std::uint64_t> at_grant;
  std::map<int, std::chrono::steady_clock::time_point> told_at;
};

TEST_F(LockTest, OneHolderAmongTwoClientsAndTokensGrow) {
  Session a(session_options(servers)), b(session_options(servers));
  Lock lock_a(a, path), lock_b(b, path);
  HeldLock held = lock_a.acquire();
  EXPECT_TRUE(held);
  EXPECT_FALSE(lock_b.try_acquire());
  EXPECT_FALSE(lock_b.try_acquire_for(200ms));
  const FencingToken first = held.token();
  held.release();
  auto second = lock_b.try_acquire_for(testenv::scaled(5s));
  ASSERT_TRUE(second);
  EXPECT_GT(second->token(), first);
  EXPECT_EQ(second->session_id(), b.id());
  second->release();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

TEST_F(LockTest, TokenIsTheCzxidTheServerReports) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  Stat stat = raw.stat(held.node_path());
  EXPECT_EQ(held.token().value(), stat.czxid);
  EXPECT_EQ(stat.ephemeralOwner, session.id());
  EXPECT_NE(held.node_path().find("/_c_"), std::string::npos);
  EXPECT_NE(held.node_path().find("-lock-"), std::string::npos);
}

TEST_F(LockTest, FiveContendersAcquireInQueueOrder) {
  constexpr int kContenders = 5;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kContenders; ++i) {
    sessions.push_back(std::make_unique<Session>(session_options(servers)));
    locks.push_back(std::make_unique<Lock>(*sessions.back(), path));
  }
  std::mutex mutex;
  std::vector<int> order;
  std::vector<HeldLock> held(kContenders);
  for (int i = 0; i < kContenders; ++i) {
    locks[i]->async_acquire(-1ns, [&, i](std::error_code ec, HeldLock lock) {
      ASSERT_FALSE(ec) << ec.message();
      std::lock_guard guard(mutex);
      order.push_back(i);
      held[i] = std::move(lock);
    });
    // Queue position is creation order: let each node exist before the next contender starts.
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(i + 1); }));
  }
  for (int i = 0; i < kContenders; ++i) {
    ASSERT_TRUE(eventually([&] {
      std::lock_guard guard(mutex);
      return order.size() == static_cast<std::size_t>(i + 1);
    }));
    std::lock_guard guard(mutex);
    held[order.back()].release();
  }
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

// A release wakes two waiters whatever the queue length: the next holder, and the waiter after it,
// which lists the children again so that its own turn costs no request (see the test above).
TEST_F(LockTest, OneReleaseGrantsOneOfFiftyWaitersAndWakesOnlyOneMore) {
  constexpr int kWaiters = 50;
  Session holder_session(session_options(servers)), waiter_session(session_options(servers));
  Lock holder_lock(holder_session, path);
  HeldLock held = holder_lock.acquire();
  std::vector<std::unique_ptr<Lock>> locks;
  std::atomic<int> granted{0};
  std::vector<HeldLock> grants(kWaiters);
  std::mutex mutex;
  for (int i = 0; i < kWaiters; ++i) {
    locks.push_back(std::make_unique<Lock>(waiter_session, path));
    locks.back()->async_acquire(-1ns, [&, i](std::error_code ec, HeldLock lock) {
      if (ec) return;  // session_closed for those still waiting when the test ends
      std::lock_guard guard(mutex);
      grants[i] = std::move(lock);
      ++granted;
    });
  }
  ASSERT_TRUE(eventually([&] { return nodes().size() == kWaiters + 1; }));
  // Every waiter has its watch set once each has listed the children and asked for its blocker.
  ASSERT_TRUE(eventually([&] { return waiter_session.metrics().requests_sent >= 3 * kWaiters; }));
  std::this_thread::sleep_for(200ms);
  const auto before = waiter_session.metrics().wakeups;
  held.release();
  ASSERT_TRUE(eventually([&] { return granted.load() == 1; }));
  std::this_thread::sleep_for(testenv::scaled(500ms));
  EXPECT_EQ(waiter_session.metrics().wakeups - before, 2u);
  EXPECT_EQ(granted.load(), 1);
  waiter_session.close();  // before the state the callbacks use goes away
}

// At depth, a waiter's turn costs it no request: when the node two places ahead goes (which grants
// its blocker), it lists the children again, so that its blocker's release then grants it by the
// deletion event alone, without a listing in between.
TEST_F(LockTest, AtDepthAWaitersTurnNeedsNoRequest) {
  constexpr int kContenders = 4;
  LocksOnOwnSessions contenders(servers, path, kContenders);
  std::vector<HeldLock> held(kContenders);
  held[0] = contenders.locks[0]->acquire();
  for (int i = 1; i < kContenders; ++i) {
    contenders.queue(i, held[i]);
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(i + 1); }));
  }
  auto granted = [&](int i) { return eventually([&] { return contenders.holds(held[i]); }); };
  std::this_thread::sleep_for(testenv::scaled(300ms));  // every waiter has set its watches

  held[0].release();
  ASSERT_TRUE(granted(1));
  std::this_thread::sleep_for(testenv::scaled(300ms));  // the second waiter has listed again
  const auto requests_before_its_turn = contenders.requests_besides_heartbeats(2);
  const auto wakeups_before_its_turn = contenders.sessions[2]->metrics().wakeups;
  const auto released_at = std::chrono::steady_clock::now();
  contenders.release(held[1]);
  ASSERT_TRUE(granted(2));
  std::this_thread::sleep_for(testenv::scaled(100ms));
  contenders.expect_requests_at_grant(2, requests_before_its_turn, released_at,
                                      "the waiter asked the server something between its blocker's release and its grant");
  EXPECT_EQ(contenders.sessions[2]->metrics().wakeups - wakeups_before_its_turn, 1u);
  // Create, listing, the blocker's and the look-ahead's watches, the look-ahead's listing: its
  // children watch vouches for the waiter's node, so no read of its own node.
  EXPECT_EQ(requests_before_its_turn, 5u);
  contenders.release(held[2]);
  ASSERT_TRUE(granted(3));
  contenders.release(held[3]);
}

// The node two places ahead can go without granting anything (a waiter that gave up): the waiter
// behind looks again, still waits, and is granted only at its turn, still without a request then.
TEST_F(LockTest, AWaiterWhoseSecondBlockerGaveUpWaitsForItsTurn) {
  LocksOnOwnSessions contenders(servers, path, 4);
  enum { kHolder, kQuitter, kBlocker, kWaiter };
  HeldLock holder = contenders.locks[kHolder]->acquire();
  std::promise<std::optional<HeldLock>> quitter_outcome;
  std::thread quitter(
      [&] { quitter_outcome.set_value(contenders.locks[kQuitter]->try_acquire_for(testenv::scaled(1500ms))); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  HeldLock blocker, waiter;
  contenders.queue(kBlocker, blocker);
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  contenders.queue(kWaiter, waiter);
  ASSERT_TRUE(eventually([&] { return nodes().size() == 4; }));

  // The quitter, the waiter's second blocker, gives up while the holder holds.
  const auto waiter_wakeups = contenders.sessions[kWaiter]->metrics().wakeups;
  quitter.join();
  EXPECT_FALSE(quitter_outcome.get_future().get().has_value());
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  ASSERT_TRUE(eventually([&] { return contenders.sessions[kWaiter]->metrics().wakeups > waiter_wakeups; }));
  std::this_thread::sleep_for(testenv::scaled(300ms));
  EXPECT_FALSE(contenders.holds(blocker));
  EXPECT_FALSE(contenders.holds(waiter));

  holder.release();
  ASSERT_TRUE(eventually([&] { return contenders.holds(blocker); }));
  std::this_thread::sleep_for(testenv::scaled(300ms));
  EXPECT_FALSE(contenders.holds(waiter)) << "granted beside its blocker";
  const auto requests_before_its_turn = contenders.requests_besides_heartbeats(kWaiter);
  const auto released_at = std::chrono::steady_clock::now();
  contenders.release(blocker);
  ASSERT_TRUE(eventually([&] { return contenders.holds(waiter); }));
  contenders.expect_requests_at_grant(kWaiter, requests_before_its_turn, released_at,
                                      "the waiter asked the server something between its blocker's release and its grant");
  contenders.release(waiter);
}

// A holder that sent nothing since its grant costs nothing but the session's heartbeat: the listing
// that granted it also watches the path's children, which stands in for a watch on its own node
// until someone else comes or goes.
TEST_F(LockTest, AnIdleHolderSendsNothingButTheHeartbeat) {
  LocksOnOwnSessions holder(servers, path, 1);
  holder.locks[0]->acquire().release();  // the path exists from now on
  ASSERT_TRUE(eventually([&] { return nodes().empty(); }));
  const auto before = holder.requests_besides_heartbeats(0);
  HeldLock held = holder.locks[0]->acquire();
  const auto at_the_grant = holder.requests_besides_heartbeats(0);
  EXPECT_EQ(at_the_grant - before, 2u) << "a create and a listing";
  std::this_thread::sleep_for(testenv::scaled(300ms));  // well past the deferred own-node watch
  EXPECT_EQ(holder.requests_besides_heartbeats(0), at_the_grant) << "the holder asked the server something";
  held.release();
}

// The waiter next in line is granted by its blocker's deletion alone, which is safe only while its
// own node is known to stand: its listing's children watch says so until the path changes, so it
// sends no read of its own node (create, listing, the blocker's watch: three requests).
TEST_F(LockTest, TheWaiterNextInLineSendsNoReadOfItsOwnNode) {
  LocksOnOwnSessions contenders(servers, path, 2);
  HeldLock holder = contenders.locks[0]->acquire();
  HeldLock waiter;
  contenders.queue(1, waiter);
  ASSERT_TRUE(eventually([&] { return contenders.requests_besides_heartbeats(1) >= 3; }));
  std::this_thread::sleep_for(testenv::scaled(300ms));
  EXPECT_EQ(contenders.requests_besides_heartbeats(1), 3u);
  const auto released_at = std::chrono::steady_clock::now();
  holder.release();
  ASSERT_TRUE(eventually([&] { return contenders.holds(waiter); }));
  contenders.expect_requests_at_grant(1, 3, released_at, "not granted by the deletion event alone");
  contenders.release(waiter);
}

// Once the path changes (here a third contender queues), the listing no longer vouches for the
// waiter's node: the waiter next in line reads its own node with a watch (one request), and its
// blocker's deletion still grants it without a listing.
TEST_F(LockTest, TheWaiterNextInLineWatchesItsOwnNodeOnceThePathChanges) {
  LocksOnOwnSessions contenders(servers, path, 3);
  enum { kHolder, kWaiter, kLast };
  HeldLock holder = contenders.locks[kHolder]->acquire();
  HeldLock waiter, last;
  contenders.queue(kWaiter, waiter);
  ASSERT_TRUE(eventually([&] { return contenders.requests_besides_heartbeats(kWaiter) >= 3; }));
  std::this_thread::sleep_for(testenv::scaled(200ms));
  const auto before = contenders.requests_besides_heartbeats(kWaiter);
  contenders.queue(kLast, last);
  ASSERT_TRUE(eventually([&] { return contenders.requests_besides_heartbeats(kWaiter) == before + 1; }))
      << "the waiter did not watch its own node once the path changed";
  std::this_thread::sleep_for(testenv::scaled(200ms));
  const auto released_at = std::chrono::steady_clock::now();
  holder.release();
  ASSERT_TRUE(eventually([&] { return contenders.holds(waiter); }));
  contenders.expect_requests_at_grant(kWaiter, before + 1, released_at, "the waiter listed again before its grant");
  EXPECT_FALSE(contenders.holds(last));
  contenders.release(waiter);
  ASSERT_TRUE(eventually([&] { return contenders.holds(last); }));
  contenders.release(last);
}

TEST_F(LockTest, TimeoutAndCancelLeaveNoNode) {
  Session a(session_options(servers)), b(session_options(servers));
  Lock lock_a(a, path), lock_b(b, path);
  HeldLock held = lock_a.acquire();

  std::error_code ec;
  auto none = lock_b.try_acquire_for(300ms, {}, ec);
  EXPECT_FALSE(none);
  EXPECT_EQ(ec, errc::timed_out);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));

  std::stop_source stop;
  auto waiter = std::async(std::launch::async, [&] { return lock_b.try_acquire_for(60s, stop.get_token(), ec); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  stop.request_stop();
  EXPECT_FALSE(waiter.get());
  EXPECT_EQ(ec, errc::cancelled);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));

  std::stop_source stop_forever;
  auto blocking = std::async(std::launch::async, [&] { return lock_b.acquire(stop_forever.get_token()); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  stop_forever.request_stop();
  try {
    blocking.get();
    FAIL() << "acquire should have thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::cancelled);
    EXPECT_EQ(e.path(), path);
  }
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));

  auto nonblocking = lock_b.try_acquire_for(0ms, {}, ec);
  EXPECT_EQ(ec, errc::would_block);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
}

// A poller retrying a lock that is held for a long time (try_acquire_for in a loop) keeps a
// bounded number of watches, not one more per attempt: an attempt that gives up stops watching.
TEST_F(LockTest, AttemptsThatGiveUpLeaveNoWatchBehind) {
  Session a(session_options(servers)), b(session_options(servers));
  Lock lock_a(a, path), lock_b(b, path);
  HeldLock held = lock_a.acquire();
  const auto& core = detail::Internals::core(b);
  const std::size_t before = core->pending_watches();
  constexpr int kAttempts = 20;
  for (int i = 0; i < kAttempts; ++i) {
    std::error_code ec;
    EXPECT_FALSE(lock_b.try_acquire_for(30ms, {}, ec));
    EXPECT_EQ(ec, errc::timed_out);
  }
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
  EXPECT_TRUE(eventually([&] { return core->pending_watches() <= before + 2; }))
      << core->pending_watches() - before << " watches left after " << kAttempts << " attempts gave up";
}

TEST_F(LockTest, ManyLocksOnOneSession) {
  Session session(session_options(servers));
  std::vector<HeldLock> held;
  for (int i = 0; i < 20; ++i) {
    Lock lock(session, fmt::format("{}/l{}", path, i));
    held.push_back(lock.acquire());
  }
  std::vector<FencingToken> tokens;
  for (auto& h : held) tokens.push_back(h.token());
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
  EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end());
  held.clear();
  EXPECT_TRUE(eventually([&] {
    for (int i = 0; i < 20; ++i)
      if (!raw.children(fmt::format("{}/l{}", path, i)).empty()) return false;
    return true;
  }));
}

TEST_F(LockTest, ReleaseIsIdempotentAndLossIsNotRelease) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  held.release();
  held.release();
  EXPECT_FALSE(held.lost());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  HeldLock moved = lock.acquire();
  HeldLock target = std::move(moved);
  EXPECT_TRUE(target);
  EXPECT_FALSE(moved);
}

// A thread that asks again for a lock it holds is refused at once, naming the node, instead of
// waiting for itself for ever (bounded here: the old behaviour would time out the future).
TEST_F(LockTest, AThreadAskingAgainForALockItHoldsIsRefused) {
  Session session(session_options(servers));
  Lock lock(session, path);
  Lock other_object(session, path);
  HeldLock held = lock.acquire();
  std::stop_source give_up;
  auto again = std::async(std::launch::async, [&] {
    // The same thread as the holder: run both on this helper thread.
    HeldLock mine = lock.acquire();
    try {
      lock.acquire(give_up.get_token());
      return std::string("granted twice");
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), errc::would_deadlock);
      EXPECT_EQ(error.code(), condition::bad_input);
      return std::string(error.what()) + "|" + mine.node_path();
    }
  });
  // The first acquire() above waits for `held` (another thread's): release it once it queued.
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  held.release();
  const auto status = again.wait_for(testenv::scaled(20s));
  if (status != std::future_status::ready) give_up.request_stop();  // lets the helper thread end
  ASSERT_EQ(status, std::future_status::ready) << "the thread waited for itself";
  const std::string outcome = again.get();
  const std::string node = outcome.substr(outcome.find('|') + 1);
  EXPECT_NE(outcome.find("this thread holds the lock, node " + node + ", and would wait for itself"),
            std::string::npos)
      << outcome;
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));

  // Every blocking form, and another Lock object on the same path; nothing is left queued.
  HeldLock mine = lock.acquire();
  EXPECT_THROW(lock.try_acquire(), Error);
  EXPECT_THROW(lock.try_acquire_for(testenv::scaled(5s)), Error);
  std::error_code ec;
  EXPECT_FALSE(lock.try_acquire_for(testenv::scaled(5s), {}, ec));
  EXPECT_EQ(ec, errc::would_deadlock);
  try {
    other_object.acquire();
    ADD_FAILURE() << "another Lock object on the same path was granted to the holding thread";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::would_deadlock);
    EXPECT_NE(std::string(error.what()).find("another Lock object on the same path"), std::string::npos);
  }
  EXPECT_EQ(nodes().size(), 1u);
  mine.release();
  HeldLock after_release = lock.acquire();  // released: no longer held by this thread
  EXPECT_TRUE(after_release);
}

// A lock handed to another thread is that thread's: the first thread may wait for it.
TEST_F(LockTest, AThreadMayWaitForALockItHandedToAnotherThread) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  std::promise<void> release;
  std::thread worker([handed = std::move(held), go = release.get_future()]() mutable {
    go.wait();
    handed.release();
  });
  auto waited = std::async(std::launch::async, [&] { return lock.try_acquire_for(testenv::scaled(20s)); });
  std::this_thread::sleep_for(100ms);
  release.set_value();
  worker.join();
  EXPECT_TRUE(waited.get());
}

// A thread whose grant was lost may acquire again at once: the lost node is no obstacle it holds.
TEST_F(LockTest, AThreadWhoseGrantWasLostMayAcquireAgain) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  ASSERT_EQ(raw.remove(held.node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  auto again = lock.try_acquire_for(testenv::scaled(10s));
  ASSERT_TRUE(again);
  EXPECT_GT(again->token(), held.token());
}

// Reentrant: the holding thread gets more holds on the same node; the last release deletes it.
TEST_F(LockTest, ReentrantLockCountsHoldsOnOneNode) {
  Session session(session_options(servers)), other(session_options(servers));
  Lock lock = reentrant_lock(session, path);
  Lock others_lock(other, path);
  HeldLock outer = lock.acquire();
  HeldLock inner = lock.acquire();
  auto innermost = lock.try_acquire();
  ASSERT_TRUE(innermost);
  EXPECT_EQ(inner.token(), outer.token());
  EXPECT_EQ(innermost->node_path(), outer.node_path());
  EXPECT_EQ(nodes().size(), 1u);
  innermost->release();
  inner.release();
  inner.release();  // idempotent: still one hold less, not two
  EXPECT_FALSE(others_lock.try_acquire_for(300ms)) << "released before the outermost hold let go";
  // The timed-out attempt's node goes after it returns; ours stays.
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
  EXPECT_EQ(raw.stat(outer.node_path()).czxid, outer.token().value());
  outer.release();
  EXPECT_TRUE(others_lock.try_acquire_for(testenv::scaled(10s)));
}

// Reentrant and moved: a thread holding a grant twice hands one HeldLock to another thread. It
// still holds the grant through the other and reenters at once; the moved hold is its new
// thread's, and the grant ends only when the last HeldLock of it is released, wherever it lives.
TEST_F(LockTest, MovingOneReentrantHoldLeavesTheThreadItsOtherHolds) {
  Session session(session_options(servers)), other(session_options(servers));
  Lock lock = reentrant_lock(session, path);
  Lock others_lock(other, path);
  HeldLock kept = lock.acquire();
  OnAnotherThread handed(lock.acquire());
  // Bounded: the old behaviour queued behind the thread's own node and waited for ever.
  auto again = lock.try_acquire_for(testenv::scaled(5s));
  handed.release();
  ASSERT_TRUE(again) << "the thread holding `kept` waited for its own grant";
  EXPECT_EQ(again->node_path(), kept.node_path());
  EXPECT_EQ(nodes().size(), 1u);
  // The moved hold let go on its thread; the thread's two holds keep the grant.
  EXPECT_FALSE(others_lock.try_acquire_for(300ms)) << "released while the thread still held it";
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
  again->release();
  kept.release();
  EXPECT_TRUE(others_lock.try_acquire_for(testenv::scaled(10s)));
}

// The other way round: the moved hold outlives the thread's own. The thread holds nothing then,
// so it waits for the moved hold as for anyone's (neither reentered nor refused), and the node
// goes only with the moved hold's release.
TEST_F(LockTest, AMovedReentrantHoldKeepsTheGrantAfterTheThreadLetGo) {
  Session session(session_options(servers));
  Lock lock = reentrant_lock(session, path);
  HeldLock kept = lock.acquire();
  OnAnotherThread handed(lock.acquire());
  const std::string node = kept.node_path();
  kept.release();
  std::error_code ec;
  EXPECT_FALSE(lock.try_acquire_for(300ms, {}, ec)) << "reentered a grant the thread no longer holds";
  EXPECT_EQ(ec, errc::timed_out);
  EXPECT_NE(raw.stat(node).czxid, 0) << "the grant ended while a moved HeldLock still held it";
  auto waiting = std::async(std::launch::async, [&] { return lock.try_acquire_for(testenv::scaled(20s)); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  handed.release();
  auto granted = waiting.get();
  ASSERT_TRUE(granted);
  EXPECT_NE(granted->node_path(), node);
  EXPECT_EQ(raw.stat(node).czxid, 0);
}

// What a thread holds belongs to a Lock object, not to the address it had: a Lock built where
// a destroyed one was (here: an optional reset and emplaced again) is another Lock object, and
// is refused as one instead of reentering the old object's grant.
TEST_F(LockTest, ALockBuiltWhereADestroyedOneWasIsAnotherLockObject) {
  Session session(session_options(servers));
  LockOptions options;
  options.reentrant = true;
  std::optional<Lock> lock;
  lock.emplace(session, path, options);
  const void* first_address = &*lock;
  HeldLock held = lock->acquire();
  lock.reset();
  lock.emplace(session, path, options);
  ASSERT_EQ(static_cast<const void*>(&*lock), first_address);
  std::error_code ec;
  auto again = lock->try_acquire_for(testenv::scaled(5s), {}, ec);
  EXPECT_FALSE(again) << "a new Lock object reentered the grant of the one destroyed at its address";
  EXPECT_EQ(ec, errc::would_deadlock);
  EXPECT_EQ(nodes().size(), 1u);
}

// A moved Lock is the same Lock: the thread reenters through it the grant it got through the
// moved-from object (which, moved from, refuses to acquire, saying so).
TEST_F(LockTest, AMovedLockIsTheSameLock) {
  Session session(session_options(servers));
  Lock original = reentrant_lock(session, path);
  HeldLock held = original.acquire();
  Lock moved = std::move(original);
  std::error_code ec;
  auto again = moved.try_acquire_for(testenv::scaled(5s), {}, ec);
  ASSERT_TRUE(again) << ec.message();
  EXPECT_EQ(again->node_path(), held.node_path());
  EXPECT_EQ(nodes().size(), 1u);
  try {
    original.acquire();
    ADD_FAILURE() << "a moved-from Lock acquired";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::invalid_argument);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("moved from"));
  }
}

// Upgrading a read lock or downgrading a write lock on one thread would wait for itself.
TEST_F(LockTest, ReadWriteUpgradeAndDowngradeOnOneThreadAreRefused) {
  Session session(session_options(servers));
  ReadWriteLock rw(session, path);
  // The message of the would_deadlock refusal of lock.acquire(), or what happened instead.
  const auto refusal = [](Lock& lock) -> std::string {
    try {
      lock.acquire();
      return "granted";
    } catch (const Error& error) {
      return error.code() == errc::would_deadlock ? error.what() : "another error: " + std::string(error.what());
    }
  };
  {
    HeldLock read = rw.read_lock().acquire();
    EXPECT_THAT(refusal(rw.write_lock()), ::testing::HasSubstr("a read lock cannot be upgraded"));
  }
  HeldLock write = rw.write_lock().acquire();
  EXPECT_THAT(refusal(rw.read_lock()), ::testing::HasSubstr("a write lock cannot be downgraded"));
  EXPECT_EQ(nodes().size(), 1u);
}

TEST_F(LockTest, InvalidPathsAreRefusedByName) {
  Session session(session_options(servers));
  for (std::string bad : std::vector<std::string>{"relative", "/trailing/", "/a//b", "/a/../b", "/zookeeper/x", std::string("/a\0b", 4)}) {
    try {
      Lock lock(session, bad);
      FAIL() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), errc::invalid_path);
      EXPECT_EQ(e.path(), bad);
    }
  }
}

// The longest path the path check accepts is a path a Lock takes and acquires on a real server
// (with the shortest owner data, one byte: owner data is never empty), and the constructor's
// messages name the limits it applies: the path check and the request's size agree on one limit.
TEST_F(LockTest, TheLongestPathThePathCheckAcceptsIsAcquired) {
  // The boundary as the path check draws it, searched between a short path and one of 1 MiB.
  const auto path_of = [&](std::size_t bytes) { return path + "/" + std::string(bytes - path.size() - 1, 'p'); };
  std::size_t accepted = path.size() + 2, refused = 1 << 20;
  ASSERT_TRUE(path_problem(path_of(accepted)).empty());
  ASSERT_FALSE(path_problem(path_of(refused)).empty());
  while (refused - accepted > 1) {
    const std::size_t middle = accepted + (refused - accepted) / 2;
    (path_problem(path_of(middle)).empty() ? accepted : refused) = middle;
  }
  const std::string longest = path_of(accepted);
  const std::string refusal = path_problem(path_of(accepted + 1));
  EXPECT_NE(refusal.find(fmt::format("at most {} bytes", accepted)), std::string::npos) << refusal;

  Session session(session_options(servers));
  std::optional<HeldLock> held;
  try {
    Lock lock(session, longest, {.owner_data = "x"});
    held = lock.try_acquire_for(testenv::scaled(10s));
  } catch (const Error& e) {
    FAIL() << "a path of " << accepted << " bytes, which the path check accepts, was refused: " << e.what();
  }
  ASSERT_TRUE(held);
  EXPECT_EQ(held->token().value(), raw.stat(held->node_path()).czxid);
  held->release();
  EXPECT_TRUE(eventually([&] { return raw.children(longest).empty(); }));
  EXPECT_EQ(session.metrics().suspensions, 0u) << "the server dropped the connection";

  // One byte more of owner data does not fit with that path: the message says how long a path may
  // be with it.
  try {
    Lock lock(session, longest, {.owner_data = "xy"});
    ADD_FAILURE() << "two bytes of owner data were accepted under a path of " << accepted << " bytes";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    // (what() abbreviates the path.)
    EXPECT_NE(std::string(e.what()).find(fmt::format("at most {} bytes", accepted - 1)), std::string::npos) << e.what();
  }
  raw.remove(longest);
}

TEST_F(LockTest, ContendersListHolderFirstWithOwnerData) {
  Session a(session_options(servers)), b(session_options(servers));
  LockOptions options;
  options.owner_data = "host-a:1234";
  Lock lock_a(a, path, options), lock_b(b, path);
  HeldLock held = lock_a.acquire();
  lock_b.async_acquire(-1ns, [](std::error_code, HeldLock) {});
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  auto rows = list_contenders(a, path);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].holds);
  EXPECT_FALSE(rows[1].holds);
  EXPECT_EQ(rows[0].owner_data, "host-a:1234");
  EXPECT_EQ(rows[0].token, held.token());
  EXPECT_EQ(rows[0].session_id, a.id());
  EXPECT_EQ(rows[1].session_id, b.id());
  EXPECT_NE(rows[1].owner_data.find(':'), std::string::npos);  // default host:pid
  EXPECT_TRUE(list_contenders(a, path + "/none").empty());
}

TEST_F(LockTest, ReadersShareWritersExclude) {
  Session a(session_options(servers)), b(session_options(servers)), c(session_options(servers));
  ReadWriteLock rw_a(a, path), rw_b(b, path), rw_c(c, path);
  HeldLock read_a = rw_a.read_lock().acquire();
  auto read_b = rw_b.read_lock().try_acquire_for(testenv::scaled(5s));
  ASSERT_TRUE(read_b);  // readers share
  EXPECT_FALSE(rw_c.write_lock().try_acquire());
  // The refused attempt's node is deleted after it returns: let it go before the writer queues,
  // so that the third node below is the waiting writer's.
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  std::promise<HeldLock> writer;
  rw_c.write_lock().async_acquire(-1ns, [&](std::error_code ec, HeldLock held) {
    EXPECT_FALSE(ec);
    writer.set_value(std::move(held));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  // A reader that comes after the waiting writer waits for it: writers are not starved.
  Session d(session_options(servers));
  ReadWriteLock rw_d(d, path);
  EXPECT_FALSE(rw_d.read_lock().try_acquire_for(300ms));
  read_a.release();
  read_b->release();
  auto write = writer.get_future().get();
  EXPECT_GT(write.token(), read_b->token());
  EXPECT_NE(write.node_path().find("__WRIT__"), std::string::npos);
}

TEST_F(LockTest, AclRefusalIsReportedAndLeavesNothing) {
  // The lock's parent belongs to someone else, who lets others only read it.
  const int parent_rc = raw.create(path.substr(0, path.rfind('/')));
  ASSERT_TRUE(parent_rc == ZOK || parent_rc == ZNODEEXISTS) << zerror(parent_rc);
  ACL read_only[] = {{ZOO_PERM_READ, {const_cast<char*>("world"), const_cast<char*>("anyone")}}};
  ACL_vector read_only_acl = {1, read_only};
  ASSERT_EQ(raw.create(path, {}, 0, &read_only_acl), ZOK);
  Session session(session_options(servers));
  Lock lock(session, path);
  try {
    lock.acquire();
    FAIL() << "expected an ACL refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), zk_errc::no_auth);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_TRUE(nodes().empty());
}

TEST_F(LockTest, ClosingTheSessionLosesTheLock) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  std::promise<LossReason> reason;
  held.on_lost([&](LossReason r) { reason.set_value(r); });
  session.close();
  auto future = reason.get_future();
  ASSERT_EQ(future.wait_for(testenv::scaled(5s)), std::future_status::ready);
  EXPECT_EQ(future.get(), LossReason::session_closed);
  EXPECT_TRUE(held.lost_token().stop_requested());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  EXPECT_THROW(lock.acquire(), Error);
  // The callback form still answers once the session is closed.
  std::promise<std::error_code> outcome;
  lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock) { outcome.set_value(ec); });
  auto late = outcome.get_future();
  ASSERT_EQ(late.wait_for(testenv::scaled(5s)), std::future_status::ready);
  EXPECT_EQ(late.get(), errc::session_closed);
}

TEST_F(LockTest, AnOperatorDeletingTheNodeIsReportedAsLoss) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  ASSERT_EQ(raw.remove(held.node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  EXPECT_EQ(held.loss_reason(), LossReason::node_deleted);
}

// break_holder() is that operator: it deletes the holder's node (the holder is told node_deleted
// and a waiter is granted with a larger token), once only, and never a node it was not shown.
TEST_F(LockTest, BreakHolderDeletesTheHoldersNodeOnce) {
  Session holder_session(session_options(servers)), operator_session(session_options(servers));
  Lock lock(holder_session, path);
  HeldLock held = lock.acquire();
  Lock waiting(operator_session, path);
  auto waiter = std::async(std::launch::async, [&] { return waiting.acquire(); });
  ASSERT_TRUE(eventually([&] { return list_contenders(operator_session, path).size() == 2; }));

  const auto contenders = list_contenders(operator_session, path);
  ASSERT_TRUE(contenders.front().holds);
  ContenderInfo stale = contenders.front();
  stale.token = FencingToken(stale.token.value() + 1);  // the same name, another grant's token
  EXPECT_FALSE(break_holder(operator_session, path, stale));
  EXPECT_FALSE(held.lost());

  EXPECT_TRUE(break_holder(operator_session, path, contenders.front()));
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  EXPECT_EQ(held.loss_reason(), LossReason::node_deleted);
  ASSERT_EQ(waiter.wait_for(testenv::scaled(10s)), std::future_status::ready);
  HeldLock next = waiter.get();
  EXPECT_GT(next.token(), held.token());
  EXPECT_FALSE(break_holder(operator_session, path, contenders.front()));  // gone already

  ContenderInfo not_a_contender = contenders.front();
  not_a_contender.node = "config";
  try {
    break_holder(operator_session, path, not_a_contender);
    ADD_FAILURE() << "deleted a node that is not a contender's";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("'config' is not a contender node's name"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace zkr::test

namespace zkr::test {
namespace {

TEST(LockChrootTest, AMissingChrootIsNamedNotReportedAsAMissingNode) {
  const std::string chroot = testenv::unique_path("chroot");
  Session session(session_options(testenv::shared_server() + chroot));
  Lock lock(session, "/locks/job");
  try {
    lock.try_acquire_for(testenv::scaled(5s));
    FAIL() << "expected missing_chroot";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::missing_chroot) << e.what();
  }
  RawClient raw(testenv::shared_server());
  const int rc = raw.create("/zkr-test");
  ASSERT_TRUE(rc == ZOK || rc == ZNODEEXISTS);
  ASSERT_EQ(raw.create(chroot), ZOK);
  auto held = lock.try_acquire_for(testenv::scaled(5s));
  ASSERT_TRUE(held);
  EXPECT_EQ(raw.children(chroot + "/locks/job").size(), 1u);
}

}  // namespace
}  // namespace zkr::test
