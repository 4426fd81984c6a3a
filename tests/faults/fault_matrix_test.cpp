// SPDX-License-Identifier: Apache-2.0
// The fault matrix (see docs/RELIABILITY.md for the row -> test table). Rows already proved by
// tests/core/lock_fault_test.cpp (2, 4, 7, 8, 9, 12, 13, 14) and tests/zklock (16) are not repeated
// here; this file holds the others. Real servers; real processes where the row names a process.
//
// Session timeouts are short (a few seconds, scaled by ZKR_TEST_TIMEOUT_SCALE) and the servers run
// with tickTime 100 ms, so the whole file stays within a CI budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <numeric>
#include <thread>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/lock.hpp>
#include <zkr/names.hpp>

#include "test_support.hpp"

namespace zkr::test {
namespace {

std::int64_t sequence_of(const std::string& node_path) {
  auto name = parse_contender_name(node_path.substr(node_path.rfind('/') + 1));
  return name ? name->sequence : -1;
}

std::int64_t number_after_space(const std::string& line) { return std::stoll(line.substr(line.find(' ') + 1)); }

// "leader", "follower", "standalone", or "" if the server does not answer.
std::string four_letter_word_mode(const std::string& address) {
  const std::string reply = testenv::four_letter_word(address, "srvr");
  const auto at = reply.find("Mode: ");
  if (at == std::string::npos) return {};
  const auto end = reply.find('\n', at);
  return reply.substr(at + 6, end == std::string::npos ? std::string::npos : end - at - 6);
}

class FaultMatrix : public ::testing::Test {
 protected:
  std::string servers = testenv::shared_server();
  std::string path = testenv::unique_path();
  RawClient raw{servers};

  std::vector<std::string> nodes() { return raw.children(path); }

  // A persistent parent: the server never reaps it in mid-test, so sequence numbers never restart.
  void make_persistent_parent() {
    raw.create("/zkr-test");
    ASSERT_EQ(raw.create(path), ZOK);
  }

  void TearDown() override {
    if (raw.children(path).empty()) raw.remove(path);
  }

  // A lead time of zero: the library's default (a quarter of the timeout).
  std::unique_ptr<testenv::Process> start_holder(const std::string& connect, std::chrono::milliseconds session,
                                                 std::chrono::milliseconds tick = 100ms,
                                                 std::chrono::milliseconds lead_time = 0ms) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    return std::make_unique<testenv::Process>(
        std::vector<std::string>{ZKR_TEST_HOLDER, connect, path, std::to_string(session.count()),
                                 std::to_string(tick.count()), std::to_string(lead_time.count())},
        options);
  }
  void expect_half_timeout_freeze_changes_nothing(std::chrono::milliseconds timeout, std::chrono::milliseconds tick,
                                                  std::chrono::milliseconds lead_time);
};

// Several clients, each on its own session and thread, take turns on one lock until stopped.
// Each grant records its token; a grant that begins while another holder is inside and has not
// been told it lost counts as an overlap.
class ContentionRun {
 public:
  ContentionRun(std::string servers, std::string path, int clients, std::chrono::milliseconds session_timeout)
      : grants_by_client_(clients) {
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, servers, path, session_timeout, c] { run(servers, path, session_timeout, c); });
    }
  }
  ~ContentionRun() { stop(); }

  void stop() {
    stop_ = true;
    for (auto& thread : threads_)
      if (thread.joinable()) thread.join();
  }

  int grants() const { return total_grants_.load(); }
  int grants_of(int client) const { return grants_by_client_[client].load(); }
  int clients() const { return static_cast<int>(grants_by_client_.size()); }
  int overlaps() const { return overlaps_.load(); }
  int stale_admits() const { return stale_admits_.load(); }
  int failures() const { return failures_.load(); }
  std::vector<std::int64_t> tokens() const {
    std::lock_guard lock(mutex_);
    return tokens_;
  }

 private:
  void run(const std::string& servers, const std::string& path, std::chrono::milliseconds session_timeout, int c) {
    try {
      Session session(session_options(servers, session_timeout));
      Lock lock(session, path);
      const auto end = std::chrono::steady_clock::now() + testenv::scaled(std::chrono::seconds(120));
      while (!stop_ && std::chrono::steady_clock::now() < end) {
        std::error_code ec;
        auto held = lock.try_acquire_for(testenv::scaled(std::chrono::seconds(5)), {}, ec);
        if (!held) continue;
        {
          std::lock_guard guard(mutex_);
          if (inside_ != nullptr && !inside_->lost()) ++overlaps_;
          inside_ = &*held;
          tokens_.push_back(held->token().value());
          // A refusal is fine only for a holder already told it lost.
          if (!resource_.admit("x", held->token()) && !held->lost()) ++stale_admits_;
        }
        ++grants_by_client_[c];
        ++total_grants_;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        {
          std::lock_guard guard(mutex_);
          if (inside_ == &*held) inside_ = nullptr;
        }
      }
    } catch (const std::exception&) {
      ++failures_;
    }
  }

  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::vector<std::atomic<int>> grants_by_client_;
  std::atomic<int> total_grants_{0}, overlaps_{0}, stale_admits_{0}, failures_{0};
  mutable std::mutex mutex_;
  HeldLock* inside_ = nullptr;
  std::vector<std::int64_t> tokens_;
  FenceGate resource_;
};

void expect_strictly_increasing(const std::vector<std::int64_t>& values) {
  for (std::size_t i = 1; i < values.size(); ++i)
    ASSERT_LT(values[i - 1], values[i]) << "at grant " << i;
}

// ---- Row 1: no fault. N clients x M acquisitions. ----
TEST_F(FaultMatrix, Row01NoFaultOneHolderGrowingTokensQueueOrderAtMostTwoWakeupsPerRelease) {
  make_persistent_parent();
  constexpr int kClients = 4, kAcquisitions = 12;
  std::vector<std::unique_ptr<Session>> sessions;
  for (int c = 0; c < kClients; ++c) sessions.push_back(std::make_unique<Session>(session_options(servers)));
  std::mutex mutex;
  std::vector<std::int64_t> tokens, sequences;
  std::atomic<int> inside{0}, overlaps{0}, failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      Lock lock(*sessions[c], path);
      for (int i = 0; i < kAcquisitions; ++i) {
        auto held = lock.try_acquire_for(testenv::scaled(30s));
        if (!held) {
          ++failures;
          return;
        }
        if (inside.fetch_add(1) != 0) ++overlaps;
        {
          std::lock_guard guard(mutex);
          tokens.push_back(held->token().value());
          sequences.push_back(sequence_of(held->node_path()));
        }
        std::this_thread::sleep_for(2ms);
        inside.fetch_sub(1);
        held->release();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(overlaps.load(), 0) << "two holders at once";
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(kClients * kAcquisitions));
  expect_strictly_increasing(tokens);
  // Queue order: each grant goes to the lowest sequence left, so grants follow creation order.
  expect_strictly_increasing(sequences);
  // At most two wake-ups per release: each deleted node was watched by at most its successor and
  // the waiter after it (see decide()), never by the whole queue.
  std::uint64_t wakeups = 0;
  for (auto& session : sessions) wakeups += session->metrics().wakeups;
  EXPECT_LE(wakeups, 2 * tokens.size()) << "a release woke more than two waiters";
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// ---- Row 3: holder process frozen for T/2: nothing changes. ----
// The holder (its own process, so that SIGSTOP freezes its monitor too) is frozen for half its
// timeout while a waiter queues; for another T after the thaw it keeps writing with its token, is
// never told lost, keeps its session, and the waiter is not granted.
void FaultMatrix::expect_half_timeout_freeze_changes_nothing(std::chrono::milliseconds timeout,
                                                             std::chrono::milliseconds tick,
                                                             std::chrono::milliseconds lead_time) {
  auto holder = start_holder(servers, timeout, tick, lead_time);
  auto session_line = holder->wait_for_line("SESSION", testenv::scaled(15s));
  auto acquired = holder->wait_for_line("ACQUIRED", testenv::scaled(15s));
  ASSERT_TRUE(session_line && acquired);
  const std::int64_t holder_session = std::stoll(session_line->substr(8), nullptr, 16);
  const std::int64_t token = number_after_space(*acquired);
  ASSERT_EQ(nodes().size(), 1u);
  const std::string holder_node = path + "/" + nodes()[0];

  Session waiter(session_options(servers));
  Lock lock(waiter, path);
  std::promise<HeldLock> grant;
  lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock held) {
    if (!ec) grant.set_value(std::move(held));
  });
  auto granted = grant.get_future();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));

  holder->freeze();
  std::this_thread::sleep_for(timeout / 2);
  holder->thaw();

  const auto watch_until = std::chrono::steady_clock::now() + timeout;
  int writes_after_thaw = 0;
  while (std::chrono::steady_clock::now() < watch_until) {
    auto line = holder->read_line(testenv::scaled(2s));
    ASSERT_TRUE(line) << "the thawed holder went silent";
    ASSERT_FALSE(line->starts_with("LOST")) << *line;
    if (line->starts_with("WRITE")) {
      EXPECT_EQ(number_after_space(*line), token);
      ++writes_after_thaw;
    }
  }
  EXPECT_GT(writes_after_thaw, 0);
  EXPECT_EQ(granted.wait_for(0s), std::future_status::timeout) << "a second holder was granted";
  const Stat stat = raw.stat(holder_node);
  EXPECT_EQ(stat.czxid, token);
  EXPECT_EQ(stat.ephemeralOwner, holder_session) << "the holder's session was replaced";

  holder->close_stdin();  // releases
  ASSERT_EQ(granted.wait_for(testenv::scaled(15s)), std::future_status::ready);
  EXPECT_GT(granted.get().token().value(), token);
  EXPECT_TRUE(holder->wait(testenv::scaled(10s)));
}

// Either freeze outlasts the deadline of the latest proof confirmed before it: the monitor, waking
// past it, asks the ensemble before it declares anything (see the top of zkr/session.hpp).
//
// T = 6 s, a quarter of it as lead time and a 100 ms tick: a heartbeat every 1.5 s, as at 30 s and
// a 2 s tick.
TEST_F(FaultMatrix, Row03HolderProcessFrozenForHalfTheTimeoutChangesNothing) {
  expect_half_timeout_freeze_changes_nothing(testenv::scaled(6000ms), 100ms, 0ms);
}

// zklock's defaults (a 20 s session, a 6 s lead time, Debian's 2 s tick), all scaled by 0.4: a
// heartbeat every 1.87 s.
TEST_F(FaultMatrix, Row03HalfTimeoutFreezeWithZklocksProportionsChangesNothing) {
  expect_half_timeout_freeze_changes_nothing(testenv::scaled(8000ms), testenv::scaled(800ms), testenv::scaled(2400ms));
}

// ---- Row 5: link blackholed for less than T. ----
// Default policy: a silence shorter than the session tolerates costs nothing, and once the client
// notices the broken connection (here at once: the proxy resets it, where a real cut makes the C
// client wait 2T/3 without a reply) it comes back on the same session; the lock is kept. A
// blackhole longer than the tolerated silence is row 4: the holder is told, before the server
// could expire the session.
TEST_F(FaultMatrix, Row05ShortBlackholeKeepsTheLockWithTheDefaultPolicy) {
  const auto timeout = testenv::scaled(6000ms);
  testenv::Proxy proxy(servers);
  auto options = session_options(proxy.address(), timeout);
  options.safety_margin = timeout / 20;
  Session session(options);
  ASSERT_EQ(session.options().loss_policy, LossPolicy::at_deadline);
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  const auto id = session.id();
  const std::string node = held.node_path();
  std::mutex mutex;
  std::vector<SessionState> seen;
  auto states = session.on_state_change([&](SessionState state) {
    std::lock_guard guard(mutex);
    seen.push_back(state);
  });

  proxy.blackhole();
  std::this_thread::sleep_for(session.silence_tolerance() / 2);
  proxy.reset();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return seen.size() >= 2;
  }));
  ASSERT_TRUE(session.wait_connected(testenv::scaled(10s)));
  {
    std::lock_guard guard(mutex);
    EXPECT_EQ(seen[0], SessionState::suspended);
    EXPECT_EQ(seen[1], SessionState::connected);
  }

  EXPECT_EQ(session.id(), id);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session.metrics().sessions_lost, 0u);
  auto children = nodes();
  ASSERT_EQ(children.size(), 1u) << "a node was left behind or duplicated";
  EXPECT_EQ(path + "/" + children[0], node);
  EXPECT_EQ(raw.stat(node).czxid, held.token().value());
  held.release();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// Lose-on-disconnect: lost as soon as the drop is noticed (while the server still keeps the
// session and its node), then acquired again with a new token; no node left behind.
TEST_F(FaultMatrix, Row05ShortBlackholeLosesAndReacquiresWithLoseOnDisconnect) {
  const auto timeout = testenv::scaled(6000ms);
  testenv::Proxy proxy(servers);
  auto options = session_options(proxy.address(), timeout);
  options.loss_policy = LossPolicy::on_disconnect;
  Session session(options);
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  const std::string old_node = held.node_path();
  std::promise<LossReason> lost;
  held.on_lost([&](LossReason reason) { lost.set_value(reason); });

  proxy.sever();  // the drop is noticed at once, and no new connection gets through
  auto reason = lost.get_future();
  ASSERT_EQ(reason.wait_for(timeout), std::future_status::ready);
  EXPECT_EQ(reason.get(), LossReason::connection_lost);
  // Told before the server could expire the session: its node is still there.
  EXPECT_NE(raw.stat(old_node).czxid, 0) << "the holder heard of the loss only after the expiry";
  proxy.pass();

  auto again = lock.try_acquire_for(testenv::scaled(30s));
  ASSERT_TRUE(again);
  EXPECT_GT(again->token(), held.token());
  EXPECT_NE(again->session_id(), held.session_id());
  ASSERT_TRUE(eventually([&] { return nodes().size() == 1; }));
  EXPECT_EQ(path + "/" + nodes()[0], again->node_path());
  again->release();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// ---- Row 6: connection reset (RST) of holder and waiter. ----
TEST_F(FaultMatrix, Row06ResetReconnectsTheSameSessionsWithWatchesAndNoDuplicateNode) {
  testenv::Proxy holder_proxy(servers), waiter_proxy(servers);
  Session holder(session_options(holder_proxy.address(), testenv::scaled(8000ms)));
  Session waiter(session_options(waiter_proxy.address(), testenv::scaled(8000ms)));
  Lock holder_lock(holder, path), waiter_lock(waiter, path);
  HeldLock held = holder_lock.acquire();
  std::promise<HeldLock> grant;
  waiter_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock lock) {
    if (!ec) grant.set_value(std::move(lock));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  std::this_thread::sleep_for(300ms);  // the waiter lists the children and sets its watch
  auto before = nodes();
  std::sort(before.begin(), before.end());
  const auto holder_id = holder.id(), waiter_id = waiter.id();

  holder_proxy.reset();
  waiter_proxy.reset();
  ASSERT_TRUE(eventually([&] {
    return holder.metrics().suspensions >= 1 && waiter.metrics().suspensions >= 1 &&
           holder.state() == SessionState::connected && waiter.state() == SessionState::connected;
  }));
  EXPECT_EQ(holder.id(), holder_id);
  EXPECT_EQ(waiter.id(), waiter_id);
  EXPECT_EQ(holder.metrics().sessions_lost + waiter.metrics().sessions_lost, 0u);
  EXPECT_FALSE(held.lost());
  auto after = nodes();
  std::sort(after.begin(), after.end());
  EXPECT_EQ(after, before) << "a duplicate node appeared or one went missing";

  // The waiter's watch came back with the connection: the release wakes it.
  auto granted = grant.get_future();
  EXPECT_EQ(granted.wait_for(0s), std::future_status::timeout);
  held.release();
  ASSERT_EQ(granted.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_GT(granted.get().token(), held.token());
}

// ---- Row 10: ensemble leader frozen longer than syncLimit x tickTime. ----
TEST(FaultMatrixEnsemble, Row10LeaderFrozenPastSyncLimitNewLeaderClientsMoveTokensGrow) {
  testenv::Cluster cluster({.servers = 3, .tick_ms = 100, .sync_limit = 5});
  const std::string path = testenv::unique_path();
  ContentionRun run(cluster.connect_string(), path, 3, testenv::scaled(4000ms));
  ASSERT_TRUE(eventually([&] { return run.grants() >= 15; }, testenv::scaled(30s)));
  const int old_leader = cluster.leader();
  ASSERT_GE(old_leader, 0);

  cluster.freeze(old_leader);
  const auto frozen_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(eventually([&] {
    const int leader = cluster.leader();
    return leader >= 0 && leader != old_leader;
  }, testenv::scaled(30s))) << "no new leader while the old one is frozen";
  // Every client, whichever server it was on, is granted again under the new leader.
  std::vector<int> before(run.clients());
  for (int c = 0; c < run.clients(); ++c) before[c] = run.grants_of(c);
  const bool everyone_moved = eventually([&] {
    for (int c = 0; c < run.clients(); ++c)
      if (run.grants_of(c) <= before[c]) return false;
    return true;
  }, testenv::scaled(40s));
  // Stay frozen for at least syncLimit x tickTime (500 ms) in any case.
  std::this_thread::sleep_until(frozen_at + 1s);
  cluster.thaw(old_leader);
  EXPECT_TRUE(everyone_moved) << "a client never got the lock again under the new leader";

  // The old leader steps down and follows; grants go on.
  EXPECT_TRUE(eventually([&] {
    return four_letter_word_mode(cluster.server_address(old_leader)) == "follower";
  }, testenv::scaled(60s)));
  const int after_thaw = run.grants();
  EXPECT_TRUE(eventually([&] { return run.grants() >= after_thaw + 10; }, testenv::scaled(30s)));
  run.stop();

  EXPECT_EQ(run.failures(), 0);
  EXPECT_EQ(run.overlaps(), 0);
  EXPECT_EQ(run.stale_admits(), 0);
  const auto tokens = run.tokens();
  expect_strictly_increasing(tokens);
  EXPECT_GT(FencingToken(tokens.back()).epoch(), FencingToken(tokens.front()).epoch()) << "no new epoch";
}

// ---- Row 11: quorum lost (2 of 3 stopped) for longer than T. ----
TEST(FaultMatrixEnsemble, Row11QuorumLostNoGrantsHoldersToldLostNoOrphansAfterRecovery) {
  testenv::Cluster cluster({.servers = 3, .tick_ms = 100, .sync_limit = 5});
  const std::string path = testenv::unique_path();
  const auto timeout = testenv::scaled(3000ms);
  auto raw = std::make_unique<RawClient>(cluster.connect_string());
  Session holder(session_options(cluster.connect_string(), timeout));
  Session waiter(session_options(cluster.connect_string(), timeout));
  Lock holder_lock(holder, path), waiter_lock(waiter, path);
  HeldLock held = holder_lock.acquire();
  std::promise<HeldLock> grant;
  waiter_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock lock) {
    if (!ec) grant.set_value(std::move(lock));
  });
  ASSERT_TRUE(eventually([&] { return raw->children(path).size() == 2; }));
  auto granted = grant.get_future();

  const int survivor = cluster.leader() >= 0 ? cluster.leader() : 0;
  std::vector<int> stopped;
  for (int i = 0; i < cluster.size(); ++i)
    if (i != survivor) stopped.push_back(i);
  for (int i : stopped) cluster.kill(i);

  ASSERT_TRUE(eventually([&] { return held.lost(); }, 2 * timeout)) << "the holder was not told";
  EXPECT_EQ(held.loss_reason(), LossReason::session_lost);
  // Longer than T without a quorum: nobody is granted.
  EXPECT_EQ(granted.wait_for(timeout + timeout / 2), std::future_status::timeout) << "granted without a quorum";

  for (int i : stopped) cluster.start(i);
  ASSERT_TRUE(cluster.wait_for_leader(testenv::scaled(60s)));
  raw = std::make_unique<RawClient>(cluster.connect_string());  // the old one's session may have expired
  ASSERT_EQ(granted.wait_for(testenv::scaled(60s)), std::future_status::ready);
  HeldLock next = granted.get();
  EXPECT_GT(next.token(), held.token());
  EXPECT_EQ(raw->stat(held.node_path()).czxid, 0) << "the lost holder's node outlived the recovery";
  auto children = raw->children(path);
  EXPECT_EQ(children.size(), 1u) << "orphaned nodes after the recovery";
  next.release();
  held.release();
  holder.close();
  waiter.close();
  EXPECT_TRUE(eventually([&] { return raw->children(path).empty(); }, testenv::scaled(20s)))
      << "orphaned nodes after the recovery";
}

}  // namespace
}  // namespace zkr::test
