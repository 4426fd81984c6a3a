// SPDX-License-Identifier: Apache-2.0
// AcquisitionBatch against a real server: batched grants are the same grants (one holder, the
// node's czxid as token, tokens growing on one path), a refused multi-op loses nobody, and a
// holder that sent nothing after its grant still hears of its node's deletion.
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include "test_support.hpp"

namespace zkr::test {
namespace {

class AcquisitionBatchTest : public ServerTest {
 protected:
  // Lock i is on path()/l<i>.
  std::string lock_path(int i) const { return fmt::format("{}/l{}", path, i); }
  // Creates `node` and its missing ancestors (persistent, empty). ZOK if it now exists.
  int make(const std::string& node) {
    for (std::size_t slash = node.find('/', 1);; slash = node.find('/', slash + 1)) {
      const int rc = raw.create(node.substr(0, slash));
      if (rc != ZOK && rc != ZNODEEXISTS) return rc;
      if (slash == std::string::npos) return ZOK;
    }
  }
};

// Grants collected from async_acquire, waited for with a bound.
struct Grants {
  explicit Grants(std::size_t count) : held(count), errors(count) {}
  void take(Lock& lock, std::size_t i) {
    lock.async_acquire(-1ns, [this, i](std::error_code ec, HeldLock granted) {
      std::lock_guard guard(mutex);
      errors[i] = ec;
      held[i] = std::move(granted);
      ++answered;
      changed.notify_all();
    });
  }
  // Takes every lock, in one batch on `session`.
  void take_in_one_batch(Session& session, const std::vector<std::unique_ptr<Lock>>& locks) {
    AcquisitionBatch batch(session);
    for (std::size_t i = 0; i < locks.size(); ++i) take(*locks[i], i);
  }
  bool wait_for(std::size_t count) {
    std::unique_lock guard(mutex);
    return changed.wait_for(guard, testenv::scaled(30s), [&] { return answered >= count; });
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<HeldLock> held;
  std::vector<std::error_code> errors;
  std::size_t answered = 0;
};

std::uint64_t requests_besides_heartbeats(const Session& session) {
  const SessionMetrics metrics = session.metrics();
  return metrics.requests_sent - metrics.heartbeats_sent;
}

TEST_F(AcquisitionBatchTest, GrantsEveryLockWithItsNodesCzxidAsToken) {
  constexpr int kLocks = 250;  // three multi-ops
  ASSERT_EQ(make(path), ZOK);
  for (int i = 0; i < kLocks; ++i) ASSERT_EQ(raw.create(lock_path(i)), ZOK);
  Session session(session_options(servers));
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(std::make_unique<Lock>(session, lock_path(i)));
  const std::uint64_t requests_before = requests_besides_heartbeats(session);
  Grants grants(kLocks);
  {
    AcquisitionBatch batch(session);
    for (int i = 0; i < kLocks; ++i) {
      grants.take(*locks[i], i);
      // The batch holds creates and listings back until a multi-op's worth is there.
      const std::uint64_t sent = requests_besides_heartbeats(session) - requests_before;
      if (i == 99) {
        EXPECT_EQ(sent, 0u);
      } else if (i == 100) {
        EXPECT_EQ(sent, 1u + 100u);  // one multi-op, then its hundred listings
      }
    }
  }
  ASSERT_TRUE(grants.wait_for(kLocks));
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_FALSE(grants.errors[i]) << i << ": " << grants.errors[i].message();
    ASSERT_TRUE(grants.held[i]) << i;
    const Stat stat = raw.stat(grants.held[i].node_path());
    EXPECT_EQ(grants.held[i].token().value(), stat.czxid) << grants.held[i].node_path();
    EXPECT_EQ(stat.ephemeralOwner, session.id());
    EXPECT_EQ(raw.children(lock_path(i)).size(), 1u) << "only the lock's node: the stamp is gone";
  }
  // Three multi-ops and one listing per lock. Past the moment a holder would set its own-node
  // watch, nothing more went out: the listings' children watches stand in for it.
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(requests_besides_heartbeats(session) - requests_before, 3u + kLocks);
  for (auto& held : grants.held) held.release();
  for (int i = 0; i < kLocks; ++i) EXPECT_TRUE(eventually([&] { return raw.children(lock_path(i)).empty(); }));
}

// Two grants of one lock never share a token, though the nodes of one multi-op share a czxid:
// locks on one path go into separate multi-ops.
TEST_F(AcquisitionBatchTest, LocksOnOnePathGetGrowingTokens) {
  constexpr int kSamePath = 3;
  Session session(session_options(servers));
  ASSERT_EQ(make(path), ZOK);
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kSamePath; ++i) locks.push_back(std::make_unique<Lock>(session, path));
  Lock other(session, lock_path(0));
  ASSERT_EQ(raw.create(lock_path(0)), ZOK);
  Grants grants(kSamePath + 1);
  {
    AcquisitionBatch batch(session);
    for (int i = 0; i < kSamePath; ++i) grants.take(*locks[i], i);
    grants.take(other, kSamePath);
  }
  std::vector<FencingToken> tokens;
  std::vector<bool> released(kSamePath, false);
  for (int turn = 0; turn < kSamePath; ++turn) {
    ASSERT_TRUE(grants.wait_for(static_cast<std::size_t>(turn) + 2)) << "turn " << turn;
    std::lock_guard guard(grants.mutex);
    int holders = 0;
    for (int i = 0; i < kSamePath; ++i) {
      if (!grants.held[i] || released[i]) continue;
      ++holders;
      released[i] = true;
      tokens.push_back(grants.held[i].token());
      EXPECT_EQ(grants.held[i].token().value(), raw.stat(grants.held[i].node_path()).czxid);
      grants.held[i].release();
    }
    EXPECT_EQ(holders, 1) << "turn " << turn;
  }
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(kSamePath));
  EXPECT_LT(tokens[0], tokens[1]);
  EXPECT_LT(tokens[1], tokens[2]);
  std::lock_guard guard(grants.mutex);
  EXPECT_TRUE(grants.held[kSamePath]);
}

// A multi-op refused for one create's sake (its parent is missing) applies nothing; every
// acquisition it held starts again alone, and the one whose parent was missing makes it.
TEST_F(AcquisitionBatchTest, ARefusedMultiOpLosesNobody) {
  constexpr int kLocks = 10, kMissing = 5;
  ASSERT_EQ(make(path), ZOK);
  for (int i = 0; i < kLocks; ++i) {
    if (i == kMissing) continue;
    ASSERT_EQ(raw.create(lock_path(i)), ZOK);
  }
  Session session(session_options(servers));
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(std::make_unique<Lock>(session, lock_path(i)));
  Grants grants(kLocks);
  grants.take_in_one_batch(session, locks);
  ASSERT_TRUE(grants.wait_for(kLocks));
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_FALSE(grants.errors[i]) << i << ": " << grants.errors[i].message();
    EXPECT_EQ(grants.held[i].token().value(), raw.stat(grants.held[i].node_path()).czxid);
    EXPECT_EQ(raw.children(lock_path(i)).size(), 1u) << "no orphaned node under " << lock_path(i);
  }
}

// The multi-op took effect but its reply was lost with the connection: each acquisition finds its
// node by its GUID, as after a lost create, takes the node's czxid as its token, and leaves no
// orphan.
TEST_F(AcquisitionBatchTest, ALostMultiOpReplyFindsEveryNode) {
  constexpr int kLocks = 5;
  ASSERT_EQ(make(path), ZOK);
  for (int i = 0; i < kLocks; ++i) ASSERT_EQ(make(lock_path(i)), ZOK);
  testenv::Proxy proxy(servers);
  Session session(session_options(proxy.address(), 8000ms));
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(std::make_unique<Lock>(session, lock_path(i)));
  proxy.drop_next_reply({14});  // multi
  Grants grants(kLocks);
  grants.take_in_one_batch(session, locks);
  ASSERT_TRUE(grants.wait_for(kLocks));
  EXPECT_EQ(proxy.dropped_replies(), 1);
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_FALSE(grants.errors[i]) << i << ": " << grants.errors[i].message();
    const auto children = raw.children(lock_path(i));
    ASSERT_EQ(children.size(), 1u) << "an orphaned node under " << lock_path(i);
    EXPECT_EQ(lock_path(i) + "/" + children[0], grants.held[i].node_path());
    EXPECT_EQ(grants.held[i].token().value(), raw.stat(grants.held[i].node_path()).czxid);
  }
  EXPECT_EQ(session.metrics().sessions_lost, 0u);
}

// A holder nobody contends with sent nothing after its grant: its listing's children watch must
// still tell it that an operator deleted its node.
TEST_F(AcquisitionBatchTest, AHolderThatSentNothingHearsOfItsNodesDeletion) {
  ASSERT_EQ(make(path), ZOK);
  ASSERT_EQ(raw.create(lock_path(0)), ZOK);
  ASSERT_EQ(raw.create(lock_path(1)), ZOK);
  Session session(session_options(servers));
  Lock first(session, lock_path(0)), second(session, lock_path(1));
  Grants grants(2);
  {
    AcquisitionBatch batch(session);
    grants.take(first, 0);
    grants.take(second, 1);
  }
  ASSERT_TRUE(grants.wait_for(2));
  const std::uint64_t settled = requests_besides_heartbeats(session);
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(requests_besides_heartbeats(session), settled) << "no own-node watch was needed";
  ASSERT_EQ(raw.remove(grants.held[0].node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return grants.held[0].lost(); }));
  EXPECT_EQ(grants.held[0].loss_reason(), LossReason::node_deleted);
  EXPECT_FALSE(grants.held[1].lost());
}

// Once someone else queues on the path, the holder watches its own node as any holder does: a
// later deletion of its node is still a loss, and the waiter is granted with a larger token.
TEST_F(AcquisitionBatchTest, AHolderWatchesItsNodeOnceSomeoneQueues) {
  ASSERT_EQ(make(path), ZOK);  // else the create goes out again alone, after making the path
  Session session(session_options(servers)), other_session(session_options(servers));
  Lock lock(session, path);
  Grants grants(1);
  {
    AcquisitionBatch batch(session);
    grants.take(lock, 0);
  }
  ASSERT_TRUE(grants.wait_for(1));
  ASSERT_FALSE(grants.errors[0]) << grants.errors[0].message();
  const std::uint64_t settled = requests_besides_heartbeats(session);
  Lock waiting(other_session, path);
  auto waiter = std::async(std::launch::async, [&] { return waiting.acquire(); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  // The waiter's node changed the path's children: the holder set its own-node watch.
  ASSERT_TRUE(eventually([&] { return requests_besides_heartbeats(session) == settled + 1; }));
  ASSERT_EQ(raw.remove(grants.held[0].node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return grants.held[0].lost(); }));
  EXPECT_EQ(grants.held[0].loss_reason(), LossReason::node_deleted);
  ASSERT_EQ(waiter.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_GT(waiter.get().token(), grants.held[0].token());
}

// A ReadWriteLock's locks and a LeaderLatch join a batch as a Lock does: one multi-op for the three.
TEST_F(AcquisitionBatchTest, ReadWriteLocksAndLatchesJoinTheBatch) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(make(lock_path(i)), ZOK);
  Session session(session_options(servers));
  ReadWriteLock read_write(session, lock_path(0));
  Lock plain(session, lock_path(1));
  LeaderLatch latch(session, lock_path(2));
  const std::uint64_t requests_before = requests_besides_heartbeats(session);
  Grants grants(2);
  {
    AcquisitionBatch batch(session);
    grants.take(read_write.read_lock(), 0);
    grants.take(plain, 1);
    latch.start();
    EXPECT_EQ(requests_besides_heartbeats(session), requests_before);
  }
  ASSERT_TRUE(grants.wait_for(2));
  const auto term = latch.wait_for_leadership(testenv::scaled(10s));
  ASSERT_TRUE(term);
  EXPECT_EQ(requests_besides_heartbeats(session) - requests_before, 1u + 3u);  // a multi-op, three listings
  for (const Grant* grant : {static_cast<const Grant*>(&grants.held[0]), static_cast<const Grant*>(&grants.held[1]),
                             static_cast<const Grant*>(&*term)})
    EXPECT_EQ(grant->token().value(), raw.stat(grant->node_path()).czxid) << grant->node_path();
}

// Paths short enough to live inside their std::string (no heap buffer): the multi-op's one-per-path
// check compared views into a vector that grew under them (caught by the sanitizer build).
TEST_F(AcquisitionBatchTest, ShortPathsShareAMultiOp) {
  constexpr int kLocks = 5;
  std::vector<std::string> paths;
  for (int i = 0; i < kLocks; ++i) paths.push_back(fmt::format("/zb{}-{}", ::getpid() % 100000, i));
  for (const auto& short_path : paths) ASSERT_EQ(make(short_path), ZOK) << short_path;
  Session session(session_options(servers));
  std::vector<std::unique_ptr<Lock>> locks;
  for (const auto& short_path : paths) locks.push_back(std::make_unique<Lock>(session, short_path));
  const std::uint64_t requests_before = requests_besides_heartbeats(session);
  Grants grants(kLocks);
  grants.take_in_one_batch(session, locks);
  ASSERT_TRUE(grants.wait_for(kLocks));
  EXPECT_EQ(requests_besides_heartbeats(session) - requests_before, 1u + kLocks);  // one multi-op
  for (int i = 0; i < kLocks; ++i) {
    ASSERT_FALSE(grants.errors[i]) << grants.errors[i].message();
    EXPECT_EQ(grants.held[i].token().value(), raw.stat(grants.held[i].node_path()).czxid);
    grants.held[i].release();
  }
  for (const auto& short_path : paths) {
    EXPECT_TRUE(eventually([&] { return raw.children(short_path).empty(); }));
    raw.remove(short_path);
  }
}

// Two locks whose owner data is 600 KB each: each fits a request alone, together they would not.
// The batch sends what fits, never a multi-op the server refuses by dropping the connection, so
// nothing else on the session is disturbed: with LossPolicy::on_disconnect a drop would lose the
// lock held meanwhile.
TEST_F(AcquisitionBatchTest, ABatchNeverSendsARequestLargerThanTheServerTakes) {
  for (int i = 0; i < 4; ++i) ASSERT_EQ(make(lock_path(i)), ZOK);
  SessionOptions options = session_options(servers);
  options.loss_policy = LossPolicy::on_disconnect;
  Session session(options);
  Lock unrelated(session, lock_path(3));
  HeldLock held = unrelated.acquire();
  std::this_thread::sleep_for(300ms);  // past the moment it sets its own-node watch (one request)
  const std::string big(600 * 1024, 'd');
  Lock first(session, lock_path(0), {.owner_data = big}), second(session, lock_path(1), {.owner_data = big});
  Lock small(session, lock_path(2));
  const std::uint64_t requests_before = requests_besides_heartbeats(session);
  Grants grants(3);
  {
    AcquisitionBatch batch(session);
    grants.take(first, 0);
    grants.take(second, 1);
    grants.take(small, 2);
  }
  ASSERT_TRUE(grants.wait_for(3));
  for (int i = 0; i < 3; ++i) {
    ASSERT_FALSE(grants.errors[i]) << i << ": " << grants.errors[i].message();
    EXPECT_EQ(grants.held[i].token().value(), raw.stat(grants.held[i].node_path()).czxid) << i;
    EXPECT_EQ(raw.children(lock_path(i)).size(), 1u) << "no orphaned node under " << lock_path(i);
  }
  EXPECT_FALSE(held.lost()) << "the batch disturbed the session: " << to_string(*held.loss_reason());
  const SessionMetrics metrics = session.metrics();
  EXPECT_EQ(metrics.suspensions, 0u);
  EXPECT_EQ(metrics.sessions_lost, 0u);
  // The first lock's create alone, the second's with the small one's in a multi-op, three listings.
  EXPECT_EQ(requests_besides_heartbeats(session) - requests_before, 2u + 3u);
}

// The stamp a multi-op creates and deletes is named for that multi-op alone: a user's node under a
// lock's path named as the stamp once was ("zkr-batch-stamp") is neither touched nor in the way,
// and the batch is still one multi-op.
TEST_F(AcquisitionBatchTest, AUserNodeNamedLikeTheStampIsNeitherTouchedNorInTheWay) {
  constexpr int kLocks = 3;
  for (int i = 0; i < kLocks; ++i) ASSERT_EQ(make(lock_path(i)), ZOK);
  const std::string users_node = lock_path(0) + "/zkr-batch-stamp";
  ASSERT_EQ(raw.create(users_node, "the user's data"), ZOK);
  Session session(session_options(servers));
  std::vector<std::unique_ptr<Lock>> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(std::make_unique<Lock>(session, lock_path(i)));
  const std::uint64_t requests_before = requests_besides_heartbeats(session);
  Grants grants(kLocks);
  grants.take_in_one_batch(session, locks);
  ASSERT_TRUE(grants.wait_for(kLocks));
  for (int i = 0; i < kLocks; ++i) ASSERT_FALSE(grants.errors[i]) << i << ": " << grants.errors[i].message();
  EXPECT_EQ(requests_besides_heartbeats(session) - requests_before, 1u + kLocks) << "the batch was taken apart";
  const Stat before_release = raw.stat(users_node);
  for (auto& granted : grants.held) granted.release();
  EXPECT_TRUE(eventually([&] { return raw.children(lock_path(0)).size() == 1; }));
  char data[64];
  int length = sizeof data;
  ASSERT_EQ(zoo_get(raw.handle(), users_node.c_str(), 0, data, &length, nullptr), ZOK);
  EXPECT_EQ(std::string(data, static_cast<std::size_t>(length)), "the user's data");
  EXPECT_EQ(raw.stat(users_node).mzxid, before_release.mzxid);
  raw.remove(users_node);
}

// A blocking acquisition on the batch's own thread is not held back (it would wait for a send
// that only its own return could make), and a second batch opened meanwhile batches nothing.
TEST_F(AcquisitionBatchTest, BlockingCallsAndSecondBatchesGoOutAtOnce) {
  Session session(session_options(servers));
  Lock blocking(session, lock_path(0)), queued(session, lock_path(1)), in_second(session, lock_path(2));
  Grants grants(2);
  AcquisitionBatch batch(session);
  auto held = blocking.try_acquire_for(testenv::scaled(10s));
  ASSERT_TRUE(held);
  grants.take(queued, 0);
  std::thread([&] {
    AcquisitionBatch second(session);  // on another thread, while the first is open
    grants.take(in_second, 1);
    std::this_thread::sleep_for(10ms);
  }).join();
  {
    std::unique_lock guard(grants.mutex);
    ASSERT_TRUE(grants.changed.wait_for(guard, testenv::scaled(10s), [&] { return static_cast<bool>(grants.held[1]); }))
        << "the second batch held its acquisition back";
    EXPECT_FALSE(grants.held[0]) << "the open batch sent its acquisition early";
  }
  batch.send();
  ASSERT_TRUE(grants.wait_for(2));
  EXPECT_FALSE(grants.errors[0]) << grants.errors[0].message();
  held->release();
}

}  // namespace
}  // namespace zkr::test
