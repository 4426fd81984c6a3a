// SPDX-License-Identifier: Apache-2.0
// Session::set_servers against real ensembles: servers replaced, added and removed while sessions
// hold locks and keep requests in flight.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>

#include "internals.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

using detail::Internals;

// The library's default, 10 s (5 s of silence tolerated), longer under the sanitizers
// (ZKR_TEST_TIMEOUT_SCALE): a dozen sessions reconnecting at once on a loaded machine took over the
// 3 s a 6 s session tolerates, which is not what these tests check.
const std::chrono::milliseconds kSessionTimeout = std::min(testenv::scaled(10000ms), std::chrono::milliseconds(20000));

std::string current_server(const Session& session) { return Internals::core(session)->current_server(); }

// Keeps requests in flight on each session (a read after a read) until stopped, and counts those
// that failed other than with the connection (as any reconnection fails the requests then in
// flight): a request left behind by the client, never answered, fails with a timeout.
class Traffic {
 public:
  Traffic(std::vector<Session*> sessions, const std::string& path) {
    for (Session* session : sessions)
      threads_.emplace_back([this, session, path] {
        for (int i = 0; i < 1'000'000 && !stop_; ++i) {
          std::error_code ec;
          session->exists(path, ec);
          if (ec && ec != zk_errc::connection_loss) {
            ++failures_;
            std::lock_guard lock(mutex_);
            last_failure_ = ec.message();
          }
        }
      });
  }
  ~Traffic() { stop(); }
  void stop() {
    stop_ = true;
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
  }
  int failures() const { return failures_; }
  std::string last_failure() const {
    std::lock_guard lock(mutex_);
    return last_failure_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> failures_{0};
  mutable std::mutex mutex_;
  std::string last_failure_;  // guarded by mutex_
  std::vector<std::thread> threads_;
};

// A service connected to one server only is told of the other two, then that server leaves the
// ensemble: the session moves off it at once, with reads in flight, and keeps its id and its lock.
TEST(ServerListTest, ASessionToldToLeaveAServerMovesAndKeepsItsSessionAndItsLock) {
  testenv::Cluster cluster({.servers = 3});
  // The server left is a follower: the leader's stop would cost the session its grants whenever
  // the election outlasts the lead time (docs/operations.md), which is not this test's.
  const int left = cluster.follower(testenv::scaled(30s));
  const std::string others = cluster.connect_string_except(left);
  const std::string path = testenv::unique_path();
  Session session(session_options(cluster.server_address(left), kSessionTimeout));
  const std::int64_t id = session.id();
  Lock lock(session, path);
  auto held = lock.try_acquire_for(testenv::scaled(10s));
  ASSERT_TRUE(held);

  // Another session of the process on the same server, which loses its lock on any disconnection:
  // the move must end the moving session's connection and no other.
  auto bystander_options = session_options(cluster.server_address(left), kSessionTimeout);
  bystander_options.loss_policy = LossPolicy::on_disconnect;
  Session bystander(bystander_options);
  Lock bystander_lock(bystander, path + "-bystander");
  auto bystander_held = bystander_lock.try_acquire_for(testenv::scaled(10s));
  ASSERT_TRUE(bystander_held);

  Traffic traffic({&session}, path);
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(session.set_servers(others));
  EXPECT_EQ(session.servers(), others);
  EXPECT_EQ(session.options().servers, cluster.server_address(left)) << "options() are the ones given";
  const auto listed_servers = cluster.addresses_except(left);
  const std::set<std::string> listed(listed_servers.begin(), listed_servers.end());
  ASSERT_TRUE(eventually([&] { return listed.count(current_server(session)) == 1; }, testenv::scaled(10s)))
      << "still on " << current_server(session) << " of " << cluster.connect_string();

  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(bystander_held->lost()) << "the move ended another session's connection";
  EXPECT_EQ(bystander.metrics().suspensions, 0u);

  cluster.stop(left);
  // Longer than the session timeout: a session left on the stopped server would be lost by then.
  const auto until = std::chrono::steady_clock::now() + kSessionTimeout + 2s;
  bool held_throughout = true;
  while (std::chrono::steady_clock::now() < until && held_throughout) {
    held_throughout = !held->lost() && session.id() == id;
    std::this_thread::sleep_for(50ms);
  }
  traffic.stop();
  EXPECT_TRUE(held_throughout) << "the lock or the session was lost";
  EXPECT_EQ(session.state(), SessionState::connected);
  EXPECT_EQ(session.metrics().sessions_lost, 0u);
  EXPECT_EQ(traffic.failures(), 0) << "a read in flight failed: " << traffic.last_failure();

  Session other(session_options(others));
  Lock other_lock(other, path);
  EXPECT_FALSE(other_lock.try_acquire_for(1s)) << "the lock was free while held";
  held->release();
  EXPECT_TRUE(other_lock.try_acquire_for(testenv::scaled(10s)));
}

// Servers added to the list of a dozen services on one server: the C client moves about two thirds
// of them to the new servers (its rebalancing), each with reads in flight, and every one keeps its
// session and lock; with the whole list, each then survives the stop of the server they started on.
TEST(ServerListTest, AddedServersSpreadTheSessionsAndEachKeepsItsSessionAndItsLock) {
  testenv::Cluster cluster({.servers = 3});
  // The services start on a follower: the leader's stop would cost every session its grants
  // whenever the election outlasts their lead time (docs/operations.md), which is not this test's.
  const int first = cluster.follower(testenv::scaled(30s));
  const std::string base = testenv::unique_path();
  constexpr int kSessions = 12;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<Lock>> locks;
  std::vector<HeldLock> held;
  std::vector<std::int64_t> ids;
  std::vector<Session*> all;
  for (int i = 0; i < kSessions; ++i) {
    sessions.push_back(std::make_unique<Session>(session_options(cluster.server_address(first), kSessionTimeout)));
    locks.push_back(std::make_unique<Lock>(*sessions.back(), fmt::format("{}/lock-{}", base, i)));
    auto grant = locks.back()->try_acquire_for(testenv::scaled(10s));
    ASSERT_TRUE(grant) << "lock " << i;
    held.push_back(std::move(*grant));
    ids.push_back(sessions.back()->id());
    all.push_back(sessions.back().get());
  }

  Traffic traffic(all, base);
  std::this_thread::sleep_for(200ms);
  for (auto& session : sessions) ASSERT_TRUE(session->set_servers(cluster.connect_string()));
  // Each stays with the probability 1/3: all twelve stay once in half a million runs.
  const auto moved = [&] {
    return std::count_if(sessions.begin(), sessions.end(), [&](const auto& session) {
      const std::string server = current_server(*session);
      return !server.empty() && server != cluster.server_address(first);
    });
  };
  EXPECT_TRUE(eventually([&] { return moved() > 0; }, testenv::scaled(10s))) << "no session moved";
  std::this_thread::sleep_for(1s);
  const auto moved_before_the_stop = moved();

  cluster.stop(first);
  std::this_thread::sleep_for(kSessionTimeout + 2s);
  traffic.stop();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_FALSE(held[i].lost()) << "lock " << i;
    EXPECT_EQ(sessions[i]->id(), ids[i]) << "session " << i;
    EXPECT_EQ(sessions[i]->metrics().sessions_lost, 0u) << "session " << i;
  }
  EXPECT_EQ(traffic.failures(), 0) << "a read failed: " << traffic.last_failure();
  RecordProperty("moved_by_the_rebalancing", static_cast<int>(moved_before_the_stop));
}

TEST(ServerListTest, TheSameServersChangeNothingAndABadListIsRefusedWithItsReason) {
  testenv::Cluster cluster({.servers = 3});
  const std::string a = cluster.server_address(0), b = cluster.server_address(1), c = cluster.server_address(2);
  Session session(session_options(a + "," + b + "," + c + "/chrooted", kSessionTimeout));
  const std::string before = current_server(session);

  EXPECT_FALSE(session.set_servers(c + "," + a + "," + b + "/chrooted"));
  EXPECT_FALSE(session.set_servers(b + "," + c + "," + a + "," + b + "/chrooted"));
  EXPECT_EQ(session.servers(), a + "," + b + "," + c + "/chrooted");
  EXPECT_EQ(current_server(session), before);

  try {
    session.set_servers(a + ",nohost:notaport/chrooted");
    ADD_FAILURE() << "a bad list was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::invalid_connect_string);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("notaport"));
  }
  std::error_code ec;
  EXPECT_FALSE(session.set_servers(a + "," + b, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
  try {
    session.set_servers(a + "/elsewhere");
    ADD_FAILURE() << "a chroot change was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), errc::invalid_argument);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("the chroot cannot change (the session's is '/chrooted')"));
  }
  EXPECT_EQ(session.servers(), a + "," + b + "," + c + "/chrooted") << "a refused list changed the servers";
  EXPECT_EQ(session.state(), SessionState::connected);

  session.close();
  EXPECT_FALSE(session.set_servers(a + "/chrooted", ec));
  EXPECT_EQ(ec, errc::session_closed);
}

}  // namespace
}  // namespace zkr::test
