// SPDX-License-Identifier: Apache-2.0
// The multi-lock on real servers: all paths or none, one global order (no deadlock between
// multi-locks over overlapping paths given in opposite orders), a token per path, the loss of one
// path losing the whole, and nothing left behind when it gives up part-way.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <list>
#include <thread>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <zkr/asio.hpp>
#include <zkr/error.hpp>
#include <zkr/multi_lock.hpp>

#include "internals.hpp"
#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class MultiLockTest : public ServerTest {
 protected:
  Sessions sessions;
  std::string a = path + "/a", b = path + "/b", c = path + "/c";

  void TearDown() override {
    locks_elsewhere.clear();
    sessions.close_all();
  }

  // `lock_path` taken by a plain Lock on `other` (the Lock stays until TearDown).
  HeldLock hold_elsewhere(Session& other, const std::string& lock_path) {
    return locks_elsewhere.emplace_back(other, lock_path).acquire();
  }
  std::list<Lock> locks_elsewhere;

  // Every contender node under the three paths.
  std::size_t node_count() { return raw.children(a).size() + raw.children(b).size() + raw.children(c).size(); }
};

TEST_F(MultiLockTest, TakesEveryPathInOneMultiOpAndReleasesThemAll) {
  Session& session = sessions.add(servers);
  MultiLock locks(session, {c, a, b});
  EXPECT_EQ(locks.paths(), (std::vector<std::string>{a, b, c}));
  // The first acquisition creates the paths (a multi-op refused for a missing parent goes out again
  // create by create); the paths exist from then on.
  locks.acquire().release();
  HeldMultiLock held = locks.acquire();
  ASSERT_EQ(held.locks().size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(held.locks()[i].node_path().rfind(locks.paths()[i] + "/_c_", 0), 0u) << held.locks()[i].node_path();
    EXPECT_NE(held.locks()[i].node_path().find("-lock-"), std::string::npos);
  }
  // Uncontended, the three creates went out in one multi-op: one transaction, one czxid.
  const auto tokens = held.tokens();
  EXPECT_TRUE(tokens[0].valid());
  EXPECT_EQ(tokens[0], tokens[1]);
  EXPECT_EQ(tokens[1], tokens[2]);
  EXPECT_EQ(held.token(b), tokens[1]);
  EXPECT_FALSE(held.token(path).valid());
  EXPECT_EQ(node_count(), 3u);
  held.release();
  EXPECT_TRUE(eventually([&] { return node_count() == 0; }));
}

TEST_F(MultiLockTest, AllOrNoneAndNothingLeftBehindWhenItGivesUp) {
  Session& other = sessions.add(servers);
  Session& session = sessions.add(servers);
  HeldLock held_b = hold_elsewhere(other, b);
  MultiLock locks(session, {a, b, c});
  EXPECT_FALSE(locks.try_acquire());
  EXPECT_TRUE(eventually([&] { return node_count() == 1; })) << "a node of the refused attempt stayed";
  std::error_code ec;
  EXPECT_FALSE(locks.try_acquire_for(300ms, {}, ec));
  EXPECT_EQ(ec, errc::timed_out);
  EXPECT_TRUE(eventually([&] { return node_count() == 1; })) << "a node of the timed-out attempt stayed";
  EXPECT_TRUE(raw.children(a).empty());
  EXPECT_TRUE(raw.children(c).empty());

  // A stop request while it waits for b (holding a) gives up the same way.
  std::stop_source stop;
  auto waiting = std::async(std::launch::async, [&] { return locks.acquire(stop.get_token(), ec); });
  ASSERT_TRUE(eventually([&] { return raw.children(a).size() == 1 && raw.children(b).size() == 2; }));
  stop.request_stop();
  EXPECT_FALSE(waiting.get());
  EXPECT_EQ(ec, errc::cancelled);
  EXPECT_TRUE(eventually([&] { return node_count() == 1; })) << "a node of the cancelled attempt stayed";

  // Once b is free, all three are granted.
  held_b.release();
  auto all = locks.try_acquire_for(testenv::scaled(10s));
  ASSERT_TRUE(all);
  EXPECT_FALSE(all->lost());
}

TEST_F(MultiLockTest, WaitsHoldingOnlyPathsBeforeTheOneItWaitsFor) {
  Session& other = sessions.add(servers);
  Session& session = sessions.add(servers);
  HeldLock held_b = hold_elsewhere(other, b);
  MultiLock locks(session, {a, b, c});
  auto waiting = std::async(std::launch::async, [&] { return locks.try_acquire_for(testenv::scaled(20s)); });
  // While it waits for b, it holds a and has no node on c (holding c, it could keep a holder of c
  // that waits for b waiting for ever). The first round's nodes on b and c come and go first.
  ASSERT_TRUE(eventually([&] {
    return raw.children(a).size() == 1 && raw.children(b).size() == 2 && raw.children(c).empty();
  }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(raw.children(a).size(), 1u);
  EXPECT_TRUE(raw.children(c).empty());
  // c stays free meanwhile for anyone.
  Lock last(other, c);
  EXPECT_TRUE(last.try_acquire());
  held_b.release();
  auto all = waiting.get();
  ASSERT_TRUE(all);
  EXPECT_EQ(node_count(), 3u);
}

// Two multi-locks over overlapping paths given in opposite orders, and a plain Lock on the path they
// share: no two holders of a path overlap, and no one waits for ever (each wait is bounded).
TEST_F(MultiLockTest, OppositeOrdersDoNotDeadlock) {
  constexpr int kRounds = 8;
  std::array<std::atomic<int>, 3> holders{};
  std::atomic<int> overlaps{0}, granted{0}, gave_up{0};
  for (int i = 0; i < 3; ++i) sessions.add(servers);
  auto enter = [&](std::initializer_list<int> which) {
    for (int p : which)
      if (holders[static_cast<std::size_t>(p)].fetch_add(1) != 0) ++overlaps;
    std::this_thread::sleep_for(3ms);
    for (int p : which) holders[static_cast<std::size_t>(p)].fetch_sub(1);
  };
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    MultiLock locks(sessions[0], {a, b, c});
    for (int round = 0; round < kRounds; ++round) {
      auto held = locks.try_acquire_for(testenv::scaled(15s));
      if (!held) { ++gave_up; continue; }
      ++granted;
      enter({0, 1, 2});
    }
  });
  threads.emplace_back([&] {
    MultiLock locks(sessions[1], {c, b});
    for (int round = 0; round < kRounds; ++round) {
      auto held = locks.try_acquire_for(testenv::scaled(15s));
      if (!held) { ++gave_up; continue; }
      ++granted;
      enter({1, 2});
    }
  });
  threads.emplace_back([&] {
    Lock lock(sessions[2], b);
    for (int round = 0; round < kRounds; ++round) {
      auto held = lock.try_acquire_for(testenv::scaled(15s));
      if (!held) { ++gave_up; continue; }
      ++granted;
      enter({1});
    }
  });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(gave_up.load(), 0) << "a wait ran out: a cycle of waits?";
  EXPECT_EQ(granted.load(), 3 * kRounds);
  EXPECT_TRUE(eventually([&] { return node_count() == 0; }));
}

TEST_F(MultiLockTest, TokensGrowOnEveryPath) {
  Session& session = sessions.add(servers);
  MultiLock locks(session, {a, b});
  auto first = locks.acquire().tokens();
  {
    Lock single(session, b);
    HeldLock between = single.acquire();
    EXPECT_GT(between.token(), first[1]);
  }
  auto second = locks.acquire().tokens();
  EXPECT_GT(second[0], first[0]);
  EXPECT_GT(second[1], first[1]);
}

TEST_F(MultiLockTest, LosingOnePathLosesTheWholeOnce) {
  Session& session = sessions.add(servers);
  MultiLock locks(session, {a, b, c});
  HeldMultiLock held = locks.acquire();
  std::atomic<int> told{0};
  held.on_lost([&](LossReason reason) {
    EXPECT_EQ(reason, LossReason::node_deleted);
    ++told;
  });
  std::stop_token lost = held.lost_token();
  ASSERT_EQ(raw.remove(held.locks()[1].node_path()), ZOK);  // an operator breaks the lock on b
  ASSERT_TRUE(eventually([&] { return lost.stop_requested() && told.load() == 1; }));
  EXPECT_TRUE(held.lost());
  EXPECT_EQ(held.loss_reason(), LossReason::node_deleted);
  EXPECT_EQ(held.lost_path(), b);
  // The other paths stay held until released; a second loss tells no one again.
  EXPECT_EQ(raw.children(a).size(), 1u);
  ASSERT_EQ(raw.remove(held.locks()[2].node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return held.locks()[2].lost(); }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(told.load(), 1);
  // A callback added once lost runs at once.
  std::promise<LossReason> late;
  held.on_lost([&](LossReason reason) { late.set_value(reason); });
  auto late_reason = late.get_future();
  ASSERT_EQ(late_reason.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_EQ(late_reason.get(), LossReason::node_deleted);
  held.release();
  EXPECT_TRUE(eventually([&] { return node_count() == 0; }));
}

TEST_F(MultiLockTest, SessionExpiryLosesTheWhole) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  MultiLock locks(session, {a, b});
  HeldMultiLock held = locks.acquire();
  std::atomic<int> told{0};
  held.on_lost([&](LossReason) { ++told; });
  auto id = detail::Internals::core(session)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return node_count() == 0; }));
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return held.lost_token().stop_requested(); }));
  EXPECT_TRUE(eventually([&] { return told.load() == 1; }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(told.load(), 1) << "both paths were lost, the whole once";
  // The replacement session takes both again.
  auto again = locks.try_acquire_for(testenv::scaled(15s));
  ASSERT_TRUE(again);
  EXPECT_GT(again->tokens()[0], held.tokens()[0]);
}

// The session that holds a and waits for b expires: the wait goes on on the replacement session,
// and a, lost meanwhile, is taken again before the grant is handed out.
TEST_F(MultiLockTest, PathLostWhileWaitingIsTakenAgain) {
  testenv::Proxy proxy(servers);
  Session& other = sessions.add(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  HeldLock held_b = hold_elsewhere(other, b);
  MultiLock locks(session, {a, b});
  auto waiting = std::async(std::launch::async, [&] { return locks.try_acquire_for(testenv::scaled(20s)); });
  ASSERT_TRUE(eventually([&] { return raw.children(a).size() == 1 && raw.children(b).size() == 2; }));
  auto id = detail::Internals::core(session)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return raw.children(a).empty() && raw.children(b).size() == 1; }));
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return raw.children(b).size() == 2; })) << "the wait did not go on on a new session";
  held_b.release();
  auto held = waiting.get();
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->lost());
  EXPECT_EQ(raw.children(a).size(), 1u);
  EXPECT_EQ(raw.children(b).size(), 1u);
  EXPECT_EQ(held->locks()[0].session_id(), held->locks()[1].session_id());
}

// A session that loses on disconnect holds a and waits for b when its connection drops. Its grant
// on a, lost with the session, is let go of at once: a lost grant keeps the old session's handle
// open (see SessionCore), and the acquisition kept it until its own end - the old handle
// reconnected and kept the old session, with its own old waiting node on b, alive until the
// session's close timer, and the wait on the replacement session queued behind that node (the
// swarm's seed 31). The proxy sees the old handle: it is closed now. (A handle closed before it
// reconnects leaves its session to expire on the server, as after a plain Lock's loss.)
TEST_F(MultiLockTest, ConnectionDropWhileWaitingLetsGoOfTheOldSession) {
  testenv::Proxy proxy(servers);
  Session& other = sessions.add(servers);
  // Long enough that only a close, not the old handle's own timers, ends its connection here.
  auto options = session_options(proxy.address(), std::min<std::chrono::milliseconds>(testenv::scaled(30s), 60s));
  options.loss_policy = LossPolicy::on_disconnect;
  Session session(options);
  HeldLock held_b = hold_elsewhere(other, b);
  MultiLock locks(session, {a, b});
  std::stop_source stop;
  auto waiting = std::async(std::launch::async, [&] {
    std::error_code ec;
    locks.try_acquire_for(testenv::scaled(30s), stop.get_token(), ec);
    return ec;
  });
  ASSERT_TRUE(eventually([&] { return raw.children(a).size() == 1 && raw.children(b).size() == 2; }));
  const auto old_session = detail::Internals::core(session)->client_id().session_id;
  ASSERT_EQ(proxy.connections(), 1);
  proxy.reset();
  ASSERT_TRUE(eventually([&] {
    return session.state() == SessionState::connected &&
           detail::Internals::core(session)->client_id().session_id != old_session;
  }));
  // The wait goes on on the replacement session (whose node on b is there).
  EXPECT_TRUE(eventually([&] { return raw.children(b).size() >= 2; }));
  // Once the old handle had time to reconnect (the new one did), only the new one is left.
  EXPECT_TRUE(eventually([&] { return proxy.connections() == 1; }, testenv::scaled(5s)));
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(proxy.connections(), 1) << "the old session's handle is still open";
  stop.request_stop();
  EXPECT_EQ(waiting.get(), errc::cancelled);
}

// A bounded wait ends by its timeout even when the round's creates get no answer (a cut link):
// before the session is lost, and the creates that reach the server once the link heals are deleted.
TEST_F(MultiLockTest, TimeoutWhileTheLinkIsCutLeavesNoNode) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  MultiLock locks(session, {a, b, c});
  locks.acquire().release();  // the paths exist: the creates go out as one multi-op
  ASSERT_TRUE(eventually([&] { return node_count() == 0; }));
  proxy.blackhole();
  std::error_code ec;
  EXPECT_FALSE(locks.try_acquire_for(300ms, {}, ec));
  EXPECT_EQ(ec, errc::timed_out);
  EXPECT_EQ(session.metrics().sessions_lost, 0u) << "the timeout waited for the session's loss";
  proxy.pass();
  EXPECT_TRUE(eventually([&] { return node_count() == 0; })) << "a create that arrived late stayed";
  EXPECT_TRUE(locks.try_acquire_for(testenv::scaled(10s)));
}

TEST_F(MultiLockTest, CreatesWhoseReplyWasLostLeaveNoOrphan) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 8000ms);
  MultiLock locks(session, {a, b, c});
  proxy.drop_next_reply({14});  // the multi-op of the creates takes effect; its reply is lost
  auto held = locks.try_acquire_for(testenv::scaled(15s));
  ASSERT_TRUE(held);
  EXPECT_EQ(proxy.dropped_replies(), 1);
  EXPECT_EQ(node_count(), 3u) << "a node of the lost reply stayed beside the adopted one";
  held->release();
  EXPECT_TRUE(eventually([&] { return node_count() == 0; }));
}

TEST_F(MultiLockTest, ReentrancyAsALocks) {
  Session& session = sessions.add(servers);
  MultiLock locks(session, {a, b});
  HeldMultiLock held = locks.acquire();
  try {
    locks.acquire();
    ADD_FAILURE() << "a second acquire on the holding thread was not refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::would_deadlock);
  }
  // Through a plain Lock on one of its paths too, and the other way round.
  Lock single(session, b);
  EXPECT_THROW(single.acquire(), Error);
  held.release();
  HeldLock mine = single.acquire();
  std::error_code ec;
  EXPECT_FALSE(locks.try_acquire(ec));
  EXPECT_EQ(ec, errc::would_deadlock);
  EXPECT_TRUE(raw.children(a).empty()) << "a refused multi-lock created a node";
  mine.release();

  LockOptions options;
  options.reentrant = true;
  MultiLock reentrant(session, {a, b}, options);
  HeldMultiLock outer = reentrant.acquire();
  HeldMultiLock inner = reentrant.acquire();
  EXPECT_EQ(inner.tokens(), outer.tokens());
  inner.release();
  EXPECT_EQ(node_count(), 2u);
  outer.release();
  EXPECT_TRUE(eventually([&] { return node_count() == 0; }));
}

TEST_F(MultiLockTest, RefusedPathPartWayReleasesTheOthers) {
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(c, "max_leases=2"), ZOK);  // a semaphore's path
  Session& session = sessions.add(servers);
  MultiLock locks(session, {a, c});
  try {
    locks.acquire();
    ADD_FAILURE() << "a semaphore's path was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::incompatible_peer);
    EXPECT_EQ(error.path(), c);
  }
  EXPECT_TRUE(eventually([&] { return raw.children(a).empty(); }));
  raw.remove(c);
}

TEST_F(MultiLockTest, BadPathsAreRefusedByName) {
  Session& session = sessions.add(servers);
  try {
    MultiLock locks(session, {a, "relative"});
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::invalid_path);
    EXPECT_EQ(error.path(), "relative");
  }
  std::error_code ec;
  EXPECT_FALSE(MultiLock::make(session, {a, b, a}, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
  EXPECT_FALSE(MultiLock::make(session, {}, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST_F(MultiLockTest, AsyncAcquireRunsOnceWithEveryPath) {
  Session& other = sessions.add(servers);
  Session& session = sessions.add(servers);
  HeldLock held_b = hold_elsewhere(other, b);
  MultiLock locks(session, {a, b, c});
  std::promise<std::pair<std::error_code, HeldMultiLock>> outcome;
  locks.async_acquire(testenv::scaled(10s), [&](std::error_code ec, HeldMultiLock held) {
    outcome.set_value({ec, std::move(held)});
  });
  ASSERT_TRUE(eventually([&] { return raw.children(b).size() == 2; }));
  held_b.release();
  auto outcome_future = outcome.get_future();
  ASSERT_EQ(outcome_future.wait_for(testenv::scaled(15s)), std::future_status::ready);
  auto [ec, held] = outcome_future.get();
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(held.locks().size(), 3u);
  EXPECT_EQ(node_count(), 3u);
}

TEST_F(MultiLockTest, AsioFormsCompleteWithEveryPathOrNone) {
  Session& other = sessions.add(servers);
  Session& session = sessions.add(servers);
  MultiLock locks(session, {a, b, c});
  {
    auto granted = zkr::asio::async_acquire(locks, boost::asio::use_future);
    ASSERT_EQ(granted.wait_for(testenv::scaled(10s)), std::future_status::ready);
    EXPECT_EQ(granted.get().locks().size(), 3u);
  }
  HeldLock held_b = hold_elsewhere(other, b);
  auto refused = zkr::asio::async_try_acquire_for(locks, 200ms, boost::asio::use_future);
  ASSERT_EQ(refused.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_FALSE(refused.get());
  EXPECT_TRUE(eventually([&] { return node_count() == 1; }));
}

}  // namespace
}  // namespace zkr::test
