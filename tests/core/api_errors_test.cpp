// SPDX-License-Identifier: Apache-2.0
// The non-throwing forms of the public API (the overloads taking std::error_code&): each reports
// the code its throwing form would throw, on a real server, clears ec on success, and returns an
// empty result on failure. And a service built with -fno-exceptions that uses only them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <stdexcept>
#include <stop_token>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/fenced.hpp>
#include <zkr/leader_watch.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>

#include "test_support.hpp"
#include "without_exceptions.hpp"

namespace zkr::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ApiErrorsTest : public ServerTest {
 protected:
  // An error_code that is set, so that a form that succeeds must clear it.
  static std::error_code stale() { return make_error_code(errc::internal_error); }
};

// The helper every non-throwing form runs through: each kind of exception becomes a code.
TEST(WithoutExceptions, MapsEachExceptionToItsCode) {
  std::error_code ec = make_error_code(errc::internal_error);
  EXPECT_EQ(detail::without_exceptions(ec, [] { return 7; }), 7);
  EXPECT_FALSE(ec);
  EXPECT_EQ(detail::without_exceptions(ec, []() -> int { throw Error(make_error_code(errc::timed_out), "x"); }), 0);
  EXPECT_EQ(ec, errc::timed_out);
  detail::without_exceptions(ec, [] { throw std::system_error(std::make_error_code(std::errc::permission_denied)); });
  EXPECT_EQ(ec, std::errc::permission_denied);
  detail::without_exceptions(ec, [] { throw std::bad_alloc(); });
  EXPECT_EQ(ec, std::errc::not_enough_memory);
  EXPECT_FALSE(detail::without_exceptions(ec, []() -> std::optional<int> { throw std::logic_error("bug"); }));
  EXPECT_EQ(ec, errc::internal_error);
}

TEST_F(ApiErrorsTest, SessionConnectReportsWhatTheConstructorThrows) {
  std::error_code ec = stale();
  auto session = Session::connect(session_options(servers), ec);
  ASSERT_TRUE(session) << ec.message();
  EXPECT_FALSE(ec);
  EXPECT_EQ(session->state(), SessionState::connected);

  auto bad = Session::connect(session_options("zk1:2181,:2181"), ec);
  EXPECT_FALSE(bad);
  EXPECT_EQ(ec, errc::invalid_connect_string);

  // Nothing listens on port 1: the connect timeout runs out.
  SessionOptions unreachable = session_options("127.0.0.1:1");
  unreachable.connect_timeout = 500ms;
  auto none = Session::connect(unreachable, ec);
  EXPECT_FALSE(none);
  EXPECT_EQ(ec, errc::connect_timeout);
  EXPECT_EQ(ec, condition::connection_trouble);

  auto missing = DigestCredentials::from_file("/nonexistent/zkr-credentials", ec);
  EXPECT_FALSE(missing);
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
}

TEST_F(ApiErrorsTest, DataCallsReportTheServersCodes) {
  Session session(session_options(servers));
  raw.create(path.substr(0, path.rfind('/')));  // the tests' common parent, if no test made it yet
  std::error_code ec = stale();
  EXPECT_EQ(session.create(path, "v1", ec), path);
  EXPECT_FALSE(ec);

  EXPECT_EQ(session.create(path, "again", ec), "");
  EXPECT_EQ(ec, zk_errc::node_exists);
  EXPECT_EQ(session.create("relative", "", ec), "");
  EXPECT_EQ(ec, errc::invalid_path);
  EXPECT_EQ(session.create(path + "/e", "", CreateMode::ephemeral, NodeAcl::open, ec), path + "/e");
  EXPECT_FALSE(ec);

  NodeData data = session.get(path, ec);
  EXPECT_FALSE(ec);
  EXPECT_EQ(data.data, "v1");
  data = session.get(path + "/missing", ec);
  EXPECT_EQ(ec, zk_errc::no_node);
  EXPECT_EQ(data.data, "");
  session.get(path + "/missing", [](NodeEvent) {}, ec);
  EXPECT_EQ(ec, zk_errc::no_node);

  ec = stale();
  EXPECT_FALSE(session.exists(path + "/missing", ec));
  EXPECT_FALSE(ec) << "no node is an answer, not an error";
  EXPECT_TRUE(session.exists(path, ec));

  EXPECT_THAT(session.children(path, ec), ::testing::ElementsAre("e"));
  EXPECT_FALSE(ec);
  EXPECT_TRUE(session.children(path + "/missing", [](NodeEvent) {}, ec).empty());
  EXPECT_EQ(ec, zk_errc::no_node);

  EXPECT_EQ(session.set(path, "v2", data.stat.version + 5, ec).version, 0);
  EXPECT_EQ(ec, zk_errc::bad_version);
  EXPECT_EQ(session.set(path, "v2", ec).version, data.stat.version + 1);
  EXPECT_FALSE(ec);

  session.remove(path, ec);
  EXPECT_EQ(ec, zk_errc::not_empty);
  session.remove(path + "/e", 7, ec);
  EXPECT_EQ(ec, zk_errc::bad_version);

  Transaction refused;
  refused.set(path, "v3").create(path + "/e");
  EXPECT_TRUE(session.commit(refused, ec).empty());
  EXPECT_EQ(ec, zk_errc::node_exists);
  EXPECT_EQ(session.get(path).data, "v2") << "nothing of a refused transaction is applied";
  Transaction accepted;
  accepted.remove(path + "/e").set(path, "v3");
  EXPECT_EQ(session.commit(accepted, ec).size(), 2u);
  EXPECT_FALSE(ec);
  session.remove(path, ec);
  EXPECT_FALSE(ec);

  session.close();
  session.exists(path, ec);
  EXPECT_EQ(ec, errc::session_closed);
}

TEST_F(ApiErrorsTest, LockFormsReportEachOutcome) {
  Session session(session_options(servers));
  std::error_code ec = stale();

  EXPECT_FALSE(Lock::make(session, "relative/path", {}, ec));
  EXPECT_EQ(ec, errc::invalid_path);
  LockOptions creator_only;
  creator_only.acl = NodeAcl::creator_all;
  EXPECT_FALSE(Lock::make(session, path, creator_only, ec));
  EXPECT_EQ(ec, errc::invalid_argument) << "a creator-only ACL without credentials";
  EXPECT_FALSE(ReadWriteLock::make(session, "/zookeeper/x", {}, ec));
  EXPECT_EQ(ec, errc::invalid_path);

  auto lock = Lock::make(session, path, {}, ec);
  ASSERT_TRUE(lock);
  EXPECT_FALSE(ec);
  HeldLock held = lock->acquire({}, ec);
  ASSERT_TRUE(held);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(held.token().valid());

  // The same thread again would wait for itself.
  EXPECT_FALSE(lock->acquire({}, ec));
  EXPECT_EQ(ec, errc::would_deadlock);
  ec = stale();
  EXPECT_EQ(lock->contenders(ec).size(), 1u);
  EXPECT_FALSE(ec);

  // Another session: busy, then a timeout, then a cancellation.
  Session other_session(session_options(servers));
  Lock other(other_session, path);
  EXPECT_FALSE(other.try_acquire(ec));
  EXPECT_EQ(ec, errc::would_block);
  EXPECT_FALSE(other.try_acquire_for(50ms, {}, ec));
  EXPECT_EQ(ec, errc::timed_out);
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(other.acquire(stopped.get_token(), ec));
  EXPECT_EQ(ec, errc::cancelled);
  EXPECT_EQ(ec, condition::gave_up);

  held.release();
  HeldLock second = other.acquire({}, ec);
  EXPECT_TRUE(second);
  EXPECT_FALSE(ec);
  second.release();

  // release() does not wait for its delete, and this listing goes through another session.
  EXPECT_TRUE(eventually([&] { return list_contenders(session, path, 1, ec).empty(); }));
  EXPECT_FALSE(ec);
  EXPECT_TRUE(list_contenders(session, "no/slash", 1, ec).empty());
  EXPECT_EQ(ec, errc::invalid_path);
  EXPECT_FALSE(list_lock_path(session, path + "/missing", 1, ec).exists);
  EXPECT_FALSE(ec);

  other_session.close();
  EXPECT_FALSE(other.acquire({}, ec));
  EXPECT_EQ(ec, errc::session_closed);
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// A lost lock: an operator deletes its node; the fenced write is then refused without a throw.
TEST_F(ApiErrorsTest, FencedCommitOfALostLockReportsLockLost) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  std::error_code ec = stale();
  FencedTransaction write(held);
  write.create(path + "-data", "x");
  EXPECT_EQ(write.commit(ec).size(), 1u);
  EXPECT_FALSE(ec);

  ASSERT_EQ(raw.remove(held.node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  FencedTransaction late(held);
  late.remove(path + "-data");
  EXPECT_TRUE(late.commit(ec).empty());
  EXPECT_EQ(ec, errc::lock_lost);
  EXPECT_EQ(ec, condition::session_ended);
  EXPECT_NE(raw.stat(path + "-data").czxid, 0) << "nothing of the refused write was applied";
  raw.remove(path + "-data");
}

TEST_F(ApiErrorsTest, SemaphoreFormsReportEachOutcome) {
  Session session(session_options(servers));
  std::error_code ec = stale();
  EXPECT_FALSE(Semaphore::make(session, path, 0, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
  auto semaphore = Semaphore::make(session, path, 1, {}, ec);
  ASSERT_TRUE(semaphore);
  EXPECT_FALSE(ec);
  Lease lease = semaphore->acquire({}, ec);
  ASSERT_TRUE(lease);
  EXPECT_FALSE(ec);
  EXPECT_EQ(Semaphore::recorded_limit(session, path, ec), 1);
  EXPECT_FALSE(ec);
  EXPECT_EQ(semaphore->contenders(ec).size(), 1u);

  Session other_session(session_options(servers));
  Semaphore full(other_session, path, 1);
  EXPECT_FALSE(full.try_acquire(ec));
  EXPECT_EQ(ec, errc::would_block);
  Semaphore another_limit(other_session, path, 2);
  EXPECT_FALSE(another_limit.acquire({}, ec));
  EXPECT_EQ(ec, errc::limit_mismatch);

  // A lock on the semaphore's path: the path is another recipe's.
  Lock lock(other_session, path);
  EXPECT_FALSE(lock.acquire({}, ec));
  EXPECT_EQ(ec, errc::incompatible_peer);
  lease.release();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

TEST_F(ApiErrorsTest, ElectionFormsReportEachOutcome) {
  Session session(session_options(servers));
  std::error_code ec = stale();
  EXPECT_FALSE(LeaderLatch::make(session, "bad", {}, ec));
  EXPECT_EQ(ec, errc::invalid_path);
  EXPECT_FALSE(LeaderSelector::make(session, path, {}, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument) << "an empty leadership function";
  EXPECT_FALSE(LeaderWatch::make(session, path, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument) << "an empty callback";

  auto latch = LeaderLatch::make(session, path, {}, ec);
  ASSERT_TRUE(latch);
  EXPECT_FALSE(latch->wait_for_leadership(1s, {}, ec));
  EXPECT_EQ(ec, errc::invalid_argument) << "not started";
  latch->start(ec);
  EXPECT_FALSE(ec);
  auto term = latch->wait_for_leadership(testenv::scaled(10s), {}, ec);
  ASSERT_TRUE(term);
  EXPECT_FALSE(ec);
  EXPECT_EQ(latch->participants(ec).size(), 1u);
  EXPECT_TRUE(latch->leader(ec));
  EXPECT_EQ(election_participants(session, path, ec).size(), 1u);
  EXPECT_EQ(election_leader(session, path, ec)->token, term->token());
  EXPECT_FALSE(ec);

  LeaderLatch follower(session, path);
  follower.start(ec);
  EXPECT_FALSE(follower.wait_for_leadership(50ms, {}, ec));
  EXPECT_EQ(ec, errc::timed_out);
  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(follower.wait_for_leadership(1s, stopped.get_token(), ec));
  EXPECT_EQ(ec, errc::cancelled);
  follower.close();
  follower.start(ec);
  EXPECT_EQ(ec, errc::cancelled) << "a closed latch";
  EXPECT_FALSE(follower.wait_for_leadership(1s, {}, ec));
  EXPECT_EQ(ec, errc::cancelled);
  latch->close();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

TEST_F(ApiErrorsTest, DurableFenceGateFormsReportTheFilesProblem) {
  std::error_code ec = stale();
  EXPECT_FALSE(DurableFenceGate::open("/nonexistent-dir/gate", ec));
  EXPECT_EQ(ec, std::errc::no_such_file_or_directory);
  testenv::TempDir dir;
  auto gate = DurableFenceGate::open(dir.file("gate"), ec);
  ASSERT_TRUE(gate);
  EXPECT_FALSE(ec);
  EXPECT_TRUE(gate->admit("k", FencingToken(5), ec));
  EXPECT_FALSE(ec);
  EXPECT_FALSE(gate->admit("k", FencingToken(4), ec));
  EXPECT_FALSE(ec) << "a lower token is refused, not an error";
}

// The messages of two refusals say what is wrong once, in words that fit the case.
TEST_F(ApiErrorsTest, WouldDeadlockSaysItOnce) {
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  try {
    lock.acquire();
    FAIL() << "granted twice";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::would_deadlock);
    EXPECT_EQ(std::string(error.what()),
              "acquire lock " + path + ": would deadlock (this thread holds the lock, node " + held.node_path() +
                  ", and would wait for itself: release it first, pass the HeldLock down, or make the lock "
                  "reentrant (LockOptions::reentrant))");
  }
}

TEST_F(ApiErrorsTest, ALockOnASemaphoresPathSaysThePathIsTheSemaphores) {
  Session session(session_options(servers));
  Semaphore semaphore(session, path, 3);
  Lease lease = semaphore.acquire();
  Lock lock(session, path);
  try {
    lock.acquire();
    FAIL() << "a lock joined a semaphore's path";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::incompatible_peer);
    EXPECT_THAT(error.what(), Not(HasSubstr("disagree")));
    EXPECT_EQ(std::string(error.what()),
              "acquire lock " + path +
                  ": the path belongs to another recipe, which this one cannot share it with (a semaphore's: it "
                  "records max_leases=3; a lock, read/write lock or election cannot share it)");
  }
}

// A service built with -fno-exceptions (tests/core/no_exceptions_service.cpp) connects, locks and
// releases through the non-throwing forms alone, and reports a bad path without a throw.
TEST_F(ApiErrorsTest, AServiceBuiltWithoutExceptionsLocksAndReleases) {
  testenv::Process::Options merged;
  merged.merge_stderr = true;
  testenv::Process service({ZKR_NO_EXCEPTIONS_SERVICE, servers, path}, merged);
  const std::string output = service.read_all(testenv::scaled(30s));
  EXPECT_EQ(service.wait(testenv::scaled(10s)), 0) << output;
  EXPECT_THAT(output, HasSubstr("acquired token "));
  EXPECT_THAT(output, HasSubstr("released"));
  EXPECT_THAT(output, HasSubstr("bad path refused: invalid path"));
  EXPECT_THAT(output, HasSubstr("unreachable: ensemble not reachable within the connect timeout"));
  EXPECT_TRUE(nodes().empty());
}

}  // namespace
}  // namespace zkr::test
