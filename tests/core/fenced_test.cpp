// SPDX-License-Identifier: Apache-2.0
// The session's data API and writes fenced by a grant's own node (zkr/fenced.hpp), against a real
// server: all ops or none, refused by the server once the lock node is gone.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/fenced.hpp>
#include <zkr/lock.hpp>
#include <zkr/semaphore.hpp>

#include "internals.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

class FencedTest : public ServerTest {
 protected:
  // Where the tests write their data: beside the lock path, never under it.
  std::string data = path + "-data";

  void SetUp() override {
    raw.create("/zkr-test");
    ASSERT_EQ(raw.create(data), ZOK);
  }

  // The node's data as the server has it, or nullopt if there is no node.
  std::optional<std::string> read(const std::string& node) {
    char buffer[1024];
    int length = sizeof buffer;
    const int rc = zoo_get(raw.handle(), node.c_str(), 0, buffer, &length, nullptr);
    if (rc == ZNONODE) return std::nullopt;
    if (rc != ZOK) throw std::runtime_error("zoo_get failed: " + std::string(zerror(rc)));
    return std::string(buffer, length < 0 ? 0 : static_cast<std::size_t>(length));
  }

  // Runs `commit` and returns the Error it throws (a test failure if it does not throw).
  template <typename Commit>
  static Error refusal_of(Commit commit) {
    try {
      commit();
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "the commit was not refused";
    return Error(make_error_code(errc::internal_error), "not refused");
  }
};

TEST_F(FencedTest, DataApiReadsAndWritesOnTheSession) {
  Session session(session_options(servers));
  EXPECT_EQ(session.create(data + "/a", "one"), data + "/a");
  const std::string sequential = session.create(data + "/seq-", "", CreateMode::persistent_sequential);
  EXPECT_EQ(sequential.size(), (data + "/seq-").size() + 10) << sequential;
  auto got = session.get(data + "/a");
  EXPECT_EQ(got.data, "one");
  EXPECT_EQ(got.stat.version, 0);
  EXPECT_EQ(got.stat.data_length, 3);
  EXPECT_EQ(session.set(data + "/a", "two", 0).version, 1);
  EXPECT_EQ(read(data + "/a"), "two");
  auto stale = refusal_of([&] { session.set(data + "/a", "three", 0); });
  EXPECT_EQ(stale.code(), zk_errc::bad_version);
  EXPECT_EQ(stale.path(), data + "/a");
  auto kids = session.children(data);
  std::sort(kids.begin(), kids.end());
  ASSERT_EQ(kids.size(), 2u);
  EXPECT_EQ(kids[0], "a");
  ASSERT_TRUE(session.exists(data + "/a"));
  session.remove(data + "/a");
  EXPECT_FALSE(session.exists(data + "/a"));
  EXPECT_EQ(refusal_of([&] { session.get(data + "/a"); }).code(), zk_errc::no_node);
  EXPECT_EQ(refusal_of([&] { session.remove(data + "/a"); }).code(), zk_errc::no_node);
}

TEST_F(FencedTest, WatchesHearTheNextChangeOnce) {
  Session session(session_options(servers));
  session.create(data + "/watched", "one");
  std::promise<NodeEvent> data_event, children_event;
  std::atomic<int> data_calls{0};
  session.get(data + "/watched", [&](NodeEvent event) {
    if (data_calls++ == 0) data_event.set_value(event);
  });
  session.children(data, [&](NodeEvent event) { children_event.set_value(event); });
  session.set(data + "/watched", "two");
  session.set(data + "/watched", "three");  // one-shot: not heard
  auto heard = data_event.get_future();
  ASSERT_EQ(heard.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_EQ(heard.get(), NodeEvent::changed);
  session.create(data + "/sibling");
  auto heard_children = children_event.get_future();
  ASSERT_EQ(heard_children.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_EQ(heard_children.get(), NodeEvent::children_changed);
  EXPECT_EQ(data_calls.load(), 1);
}

TEST_F(FencedTest, TransactionAppliesAllOpsOrNoneAndNamesTheOpThatFailed) {
  Session session(session_options(servers));
  session.create(data + "/old", "x");
  auto results = session.commit(Transaction().create(data + "/new", "n").set(data + "/old", "y").check(data + "/new"));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].created_path, data + "/new");
  EXPECT_EQ(results[1].stat.version, 1);
  EXPECT_EQ(read(data + "/old"), "y");

  auto refused = refusal_of([&] {
    session.commit(Transaction().create(data + "/third", "t").create(data + "/new").set(data + "/old", "z"));
  });
  EXPECT_EQ(refused.code(), zk_errc::node_exists);
  EXPECT_EQ(refused.path(), data + "/new");
  EXPECT_NE(std::string(refused.what()).find("op 2 of 3: create " + data + "/new"), std::string::npos) << refused.what();
  EXPECT_FALSE(read(data + "/third")) << "an op of a refused transaction was applied";
  EXPECT_EQ(read(data + "/old"), "y");
}

TEST_F(FencedTest, BadPathsAreRefusedNamingThePathAndWhy) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  for (const std::string bad : {"relative", "/trailing/", "/a//b", "/zookeeper/quota"}) {
    auto get = refusal_of([&] { session.get(bad); });
    EXPECT_EQ(get.code(), errc::invalid_path) << bad;
    EXPECT_EQ(get.path(), bad);
    EXPECT_EQ(refusal_of([&] { session.create(bad, "x"); }).code(), errc::invalid_path) << bad;
    EXPECT_EQ(refusal_of([&] { Transaction().set(bad, "x"); }).code(), errc::invalid_path) << bad;
    EXPECT_EQ(refusal_of([&] { FencedTransaction(held).create(bad); }).code(), errc::invalid_path) << bad;
  }
  EXPECT_NE(std::string(refusal_of([&] { session.get("relative"); }).what()).find("is not absolute"), std::string::npos);
  EXPECT_EQ(refusal_of([] { FencedTransaction{HeldLock()}; }).code(), errc::invalid_argument);
}

TEST_F(FencedTest, CommitsEveryOpWhileTheLockIsHeld) {
  Session session(session_options(servers));
  session.create(data + "/state", "v1");
  session.create(data + "/tmp");
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  FencedTransaction txn(held);
  txn.create(data + "/job", "queued").set(data + "/state", "v2", 0).remove(data + "/tmp").check(data + "/job");
  auto results = txn.commit();
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].created_path, data + "/job");
  EXPECT_EQ(results[1].stat.version, 1);
  EXPECT_EQ(read(data + "/job"), "queued");
  EXPECT_EQ(read(data + "/state"), "v2");
  EXPECT_FALSE(read(data + "/tmp"));
}

TEST_F(FencedTest, OneFailingOpRefusesTheWholeFencedWriteAndIsNamed) {
  Session session(session_options(servers));
  session.create(data + "/state", "v1");
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  auto refused = refusal_of([&] {
    FencedTransaction(held).create(data + "/job").set(data + "/state", "v2", 7).commit();
  });
  EXPECT_EQ(refused.code(), zk_errc::bad_version);
  EXPECT_EQ(refused.path(), data + "/state");
  EXPECT_NE(std::string(refused.what()).find("op 2 of 2: set " + data + "/state (version 7)"), std::string::npos)
      << refused.what();
  EXPECT_FALSE(read(data + "/job"));
  EXPECT_FALSE(held.lost());
}

// The holder has not heard yet that its node is gone (the server's notification is held up on the
// way): only the server's check of the lock node stands between it and the data.
TEST_F(FencedTest, ServerRefusesTheWholeWriteOnceAnOperatorDeletedTheLockNode) {
  testenv::Proxy proxy(servers);
  Session session(session_options(proxy.address(), 8000ms));
  session.create(data + "/state", "v1");
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  FencedTransaction txn(held);
  txn.create(data + "/job", "stale").set(data + "/state", "stale");

  proxy.blackhole();
  ASSERT_EQ(raw.remove(held.node_path()), ZOK);
  auto commit = std::async(std::launch::async, [&] { return refusal_of([&] { txn.commit(); }); });
  // Let the commit pass its local check and send its multi into the held link.
  std::this_thread::sleep_for(testenv::scaled(500ms));
  EXPECT_FALSE(held.lost()) << "the holder heard of the deletion through a blackholed link";
  proxy.pass();
  ASSERT_EQ(commit.wait_for(testenv::scaled(20s)), std::future_status::ready);
  Error refused = commit.get();
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_EQ(refused.code(), condition::session_ended);
  EXPECT_EQ(refused.path(), held.node_path());
  EXPECT_NE(std::string(refused.what()).find("the server refused the check of the lock node"), std::string::npos)
      << refused.what();
  EXPECT_FALSE(read(data + "/job"));
  EXPECT_EQ(read(data + "/state"), "v1");
  EXPECT_TRUE(eventually([&] { return held.lost(); }));
  // Known lost now: refused at once, nothing sent.
  auto local = refusal_of([&] { txn.commit(); });
  EXPECT_EQ(local.code(), errc::lock_lost);
  EXPECT_NE(std::string(local.what()).find("lock node deleted"), std::string::npos) << local.what();
}

TEST_F(FencedTest, ExpiredSessionCannotWrite) {
  testenv::Proxy proxy(servers);
  Session session(session_options(proxy.address(), 8000ms));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  FencedTransaction txn(held);
  txn.create(data + "/job", "stale");
  auto id = detail::Internals::core(session)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  proxy.pass();
  ASSERT_TRUE(eventually([&] { return held.lost(); }, testenv::scaled(20s)));
  ASSERT_TRUE(session.wait_connected(testenv::scaled(15s)));  // on a new session now
  auto refused = refusal_of([&] { txn.commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_FALSE(read(data + "/job"));
}

TEST_F(FencedTest, FrozenHolderWhoseLockWasGivenAwayCannotWriteWhenItThaws) {
  testenv::Proxy proxy(servers);
  Session frozen(session_options(proxy.address(), 3000ms));
  Session next(session_options(servers));
  Lock frozen_lock(frozen, path), next_lock(next, path);
  HeldLock stale = frozen_lock.acquire();
  FencedTransaction stale_write(stale);
  stale_write.create(data + "/owner", "frozen");
  std::promise<HeldLock> granted;
  next_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock l) {
    EXPECT_FALSE(ec);
    granted.set_value(std::move(l));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  proxy.blackhole();  // the holder is frozen as far as the ensemble can tell
  auto future = granted.get_future();
  ASSERT_EQ(future.wait_for(testenv::scaled(30s)), std::future_status::ready);
  HeldLock fresh = future.get();
  FencedTransaction(fresh).create(data + "/owner", "next").commit();
  proxy.pass();  // thaw
  auto refused = refusal_of([&] { stale_write.commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_EQ(read(data + "/owner"), "next");
  EXPECT_FALSE(fresh.lost());
}

TEST_F(FencedTest, ReleasedLockRefusesAtOnce) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  FencedTransaction txn(held);
  txn.create(data + "/job");
  held.release();
  auto refused = refusal_of([&] { txn.commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_NE(std::string(refused.what()).find("released"), std::string::npos) << refused.what();
  EXPECT_FALSE(read(data + "/job"));
}

// The rule is the HeldLock's, not its grant's: a transaction made from a reentrant hold is refused
// once that hold is released, though the grant stands through the thread's other hold (which
// still commits). A transaction follows its HeldLock through a move.
TEST_F(FencedTest, ReleasedReentrantHoldRefusesThoughTheGrantStands) {
  Session session(session_options(servers));
  Lock lock = reentrant_lock(session, path);
  HeldLock outer = lock.acquire();
  HeldLock inner = lock.acquire();
  FencedTransaction from_inner(inner);
  from_inner.create(data + "/inner");
  inner.release();
  auto refused = refusal_of([&] { from_inner.commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_NE(std::string(refused.what()).find("released"), std::string::npos) << refused.what();
  EXPECT_FALSE(read(data + "/inner")) << "a released HeldLock's transaction committed";
  FencedTransaction(outer).create(data + "/outer").commit();
  EXPECT_EQ(read(data + "/outer"), "");

  HeldLock before_move = lock.acquire();
  FencedTransaction follows(before_move);
  follows.create(data + "/moved");
  HeldLock after_move = std::move(before_move);
  before_move.release();  // holds nothing: lets nothing go
  follows.commit();
  EXPECT_EQ(read(data + "/moved"), "");
  after_move.release();
  EXPECT_EQ(refusal_of([&] { follows.remove(data + "/moved").commit(); }).code(), errc::lock_lost);
  EXPECT_EQ(read(data + "/moved"), "");
}

TEST_F(FencedTest, LeaderWritesOnlyDuringItsTerm) {
  Session session(session_options(servers));
  LeaderLatch latch(session, path);
  latch.start();
  auto term = latch.wait_for_leadership(testenv::scaled(10s));
  ASSERT_TRUE(term);
  FencedTransaction(*term).create(data + "/leader", "term 1").commit();
  EXPECT_EQ(read(data + "/leader"), "term 1");
  FencedTransaction late(*term);
  late.set(data + "/leader", "after resigning");
  ASSERT_TRUE(latch.resign());
  auto refused = refusal_of([&] { late.commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_EQ(read(data + "/leader"), "term 1");
}

TEST_F(FencedTest, LeaseHolderWritesOnlyWhileItHoldsTheLease) {
  Session session(session_options(servers));
  Semaphore semaphore(session, path, 2);
  Lease lease = semaphore.acquire();
  FencedTransaction(lease).create(data + "/slot", "lease").commit();
  EXPECT_EQ(read(data + "/slot"), "lease");
  ASSERT_EQ(raw.remove(lease.node_path()), ZOK);  // an operator takes the lease away
  auto refused = refusal_of([&] { FencedTransaction(lease).remove(data + "/slot").commit(); });
  EXPECT_EQ(refused.code(), errc::lock_lost);
  EXPECT_EQ(read(data + "/slot"), "lease");
}

}  // namespace
}  // namespace zkr::test
