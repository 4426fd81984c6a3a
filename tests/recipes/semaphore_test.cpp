// SPDX-License-Identifier: Apache-2.0
// The semaphore on real servers: never more than N, queue order, bounded wake-ups, leases freed
// when a holder dies, and participants that disagree on N.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <functional>
#include <future>
#include <mutex>
#include <random>
#include <regex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/semaphore.hpp>

#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class SemaphoreTest : public ServerTest {
 protected:
  Sessions sessions;
  std::string parent_data() {
    char buffer[128];
    int length = sizeof buffer;
    if (zoo_get(raw.handle(), path.c_str(), 0, buffer, &length, nullptr) != ZOK || length < 0) return {};
    return std::string(buffer, static_cast<std::size_t>(length));
  }

  void TearDown() override { sessions.close_all(); }
};

// Ten contenders on N = 2, queued in a known order; the test releases a random holder each round.
TEST_F(SemaphoreTest, NeverMoreThanNEveryoneAcquiresInOrderWithBoundedWakeups) {
  constexpr int kLimit = 2;
  constexpr int kContenders = 10;
  std::vector<std::unique_ptr<Semaphore>> semaphores;
  std::mutex mutex;
  std::vector<int> grant_order;
  std::vector<Lease> leases(kContenders);
  int holding = 0, most_holding = 0;
  auto close_sessions = sessions.closer();
  for (int i = 0; i < kContenders; ++i) {
    semaphores.push_back(std::make_unique<Semaphore>(sessions.add(servers), path, kLimit));
    semaphores.back()->async_acquire(-1ns, [&, i](std::error_code ec, Lease lease) {
      ASSERT_FALSE(ec) << ec.message();
      std::lock_guard guard(mutex);
      grant_order.push_back(i);
      leases[i] = std::move(lease);
      most_holding = std::max(most_holding, ++holding);
    });
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(i + 1); }));
  }
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return grant_order.size() == kLimit;
  }));
  // Every waiter has listed the queue and set its watch.
  std::this_thread::sleep_for(testenv::scaled(300ms));
  const auto wakeups_before = sessions.wakeups();

  std::mt19937 random(std::random_device{}());
  int releases = 0;
  std::uint64_t most_wakeups_for_one_release = 0;
  while (true) {
    const auto wakeups_before_release = sessions.wakeups();
    std::vector<int> holders;
    {
      std::lock_guard guard(mutex);
      for (int i : grant_order)
        if (leases[i] && !leases[i].lost()) holders.push_back(i);
      if (holders.empty()) break;
    }
    const int victim = holders[std::uniform_int_distribution<std::size_t>(0, holders.size() - 1)(random)];
    std::size_t granted_before;
    {
      std::lock_guard guard(mutex);
      granted_before = grant_order.size();
      leases[victim].release();
      leases[victim] = Lease{};
      --holding;
    }
    ++releases;
    if (granted_before < kContenders) {
      ASSERT_TRUE(eventually([&] {
        std::lock_guard guard(mutex);
        return grant_order.size() == granted_before + 1;
      })) << "a release promoted nobody";
    }
    // A second grant for one release would exceed N; the touches behind a grant settle too.
    std::this_thread::sleep_for(100ms);
    most_wakeups_for_one_release =
        std::max(most_wakeups_for_one_release, sessions.wakeups() - wakeups_before_release);
    std::lock_guard guard(mutex);
    EXPECT_LE(holding, kLimit);
  }
  EXPECT_EQ(releases, kContenders);
  EXPECT_EQ(most_holding, kLimit);
  std::lock_guard guard(mutex);
  EXPECT_EQ(grant_order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  // Per release, whatever the queue length: the two children watchers, and through their two
  // touches the two waiters behind them (the one right behind watches both). A waiter that
  // looked again keeps its earlier, superseded watch until that fires: at most one more per
  // watched node. Eight in all; a herd would notify every waiter, and at least as many per
  // release as waiters remain.
  const auto wakeups = sessions.wakeups() - wakeups_before;
  RecordProperty("wakeups", static_cast<int>(wakeups));
  RecordProperty("most_wakeups_for_one_release", static_cast<int>(most_wakeups_for_one_release));
  EXPECT_LE(most_wakeups_for_one_release, 8u) << "wake-ups: " << wakeups;
  EXPECT_LE(wakeups, 7u * (kContenders - kLimit)) << "wake-ups: " << wakeups;
  EXPECT_GE(wakeups, static_cast<std::uint64_t>(kContenders - kLimit));  // every promotion was a wake-up
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// Many rounds of random holds by six threads: the count of holders never exceeds N, and all get in.
TEST_F(SemaphoreTest, SixThreadsHammeringNeverExceedTheLimit) {
  constexpr int kLimit = 2;
  constexpr int kContenders = 6;
  constexpr int kRounds = 5;
  std::atomic<int> inside{0}, most{0}, violations{0};
  std::vector<int> acquired(kContenders, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kContenders; ++i) sessions.add(servers);
  for (int i = 0; i < kContenders; ++i) {
    threads.emplace_back([&, i] {
      Semaphore semaphore(sessions[i], path, kLimit);
      std::mt19937 random(static_cast<unsigned>(i) * 7919u + 1);
      for (int round = 0; round < kRounds; ++round) {
        auto lease = semaphore.try_acquire_for(testenv::scaled(20s));
        if (!lease) continue;
        const int now = inside.fetch_add(1) + 1;
        if (now > kLimit) ++violations;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        ++acquired[i];
        std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 40)(random)));
        inside.fetch_sub(1);
        lease->release();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_LE(most.load(), kLimit);
  EXPECT_EQ(most.load(), kLimit);  // the two leases were actually used together
  for (int i = 0; i < kContenders; ++i) EXPECT_EQ(acquired[i], kRounds) << "contender " << i;
}

TEST_F(SemaphoreTest, LeasesHaveDistinctGrowingTokensAndTheLimitIsRecorded) {
  Semaphore a(sessions.add(servers), path, 3), b(sessions.add(servers), path, 3);
  Lease first = a.acquire();
  Lease second = b.acquire();
  auto third = a.try_acquire();
  ASSERT_TRUE(third);
  EXPECT_FALSE(b.try_acquire());  // three leases out
  EXPECT_LT(first.token(), second.token());
  EXPECT_LT(second.token(), third->token());
  EXPECT_EQ(first.token().value(), raw.stat(first.node_path()).czxid);
  EXPECT_EQ(parent_data(), "max_leases=3");
  EXPECT_EQ(Semaphore::recorded_limit(sessions[0], path), 3);
  EXPECT_EQ(Semaphore::recorded_limit(sessions[0], path + "-none"), std::nullopt);
  // The refused attempt's node is deleted after try_acquire returns, from b's session.
  std::vector<ContenderInfo> rows;
  ASSERT_TRUE(eventually([&] { return (rows = a.contenders()).size() == 3u; })) << rows.size();
  EXPECT_TRUE(rows[0].holds && rows[1].holds && rows[2].holds);
  second.release();
  auto fourth = b.try_acquire_for(testenv::scaled(5s));
  ASSERT_TRUE(fourth);
  EXPECT_GT(fourth->token(), third->token());
}

TEST_F(SemaphoreTest, AParticipantWithAnotherLimitIsRefusedAndLeavesNoNode) {
  Semaphore two(sessions.add(servers), path, 2);
  Lease lease = two.acquire();
  Semaphore three(sessions.add(servers), path, 3);
  try {
    three.acquire();
    FAIL() << "a participant with another limit got a lease";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::limit_mismatch);
    EXPECT_EQ(e.path(), path);
    EXPECT_NE(std::string(e.what()).find("max_leases=2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("asks for 3"), std::string::npos) << e.what();
  }
  std::error_code ec;
  EXPECT_FALSE(three.try_acquire_for(1s, {}, ec));
  EXPECT_EQ(ec, errc::limit_mismatch);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
  std::promise<std::error_code> async_outcome;
  auto close_sessions = sessions.closer();
  three.async_acquire(1s, [&](std::error_code result, Lease) { async_outcome.set_value(result); });
  EXPECT_EQ(async_outcome.get_future().get(), errc::limit_mismatch);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
}

TEST_F(SemaphoreTest, APathWithoutARecordedLimitIsRefused) {
  raw.create("/zkr-test");
  ASSERT_EQ(raw.create(path, "something else"), ZOK);
  Semaphore semaphore(sessions.add(servers), path, 2);
  try {
    semaphore.acquire();
    FAIL() << "a path without a recorded limit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::limit_mismatch);
    EXPECT_NE(std::string(e.what()).find("no lease limit"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  raw.remove(path);
}

// A path our semaphore recorded its limit on, where a Curator or kazoo semaphore then put its
// nodes: our queue would not count their leases, so it refuses, naming the peer, and leaves nothing.
TEST_F(SemaphoreTest, PeerSemaphoreNodesOnOurPathAreRefusedNamingThePeer) {
  raw.create("/zkr-test");
  ASSERT_EQ(raw.create(path, "max_leases=2"), ZOK);
  Semaphore semaphore(sessions.add(servers), path, 2);
  const auto refusal = [&] {
    try {
      semaphore.try_acquire_for(testenv::scaled(5s));
      return std::string("granted");
    } catch (const Error& e) {
      return e.code() == errc::incompatible_peer ? std::string(e.what()) : "another error: " + std::string(e.what());
    }
  };
  ASSERT_EQ(raw.create(path + "/leases"), ZOK);
  EXPECT_NE(refusal().find("Curator InterProcessSemaphoreV2"), std::string::npos) << refusal();
  EXPECT_TRUE(eventually([&] { return nodes() == std::vector<std::string>{"leases"}; }));
  raw.remove(path + "/leases");

  const std::string kazoo_lease = path + "/0123456789abcdef0123456789abcdef";
  ASSERT_EQ(raw.create(kazoo_lease, "", ZOO_EPHEMERAL), ZOK);
  EXPECT_NE(refusal().find("kazoo Semaphore"), std::string::npos) << refusal();
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
  raw.remove(kazoo_lease);
  EXPECT_TRUE(semaphore.try_acquire());  // our own layout alone again
}

TEST_F(SemaphoreTest, BadArgumentsAreRefused) {
  Session& session = sessions.add(servers);
  try {
    Semaphore semaphore(session, path, 0);
    FAIL() << "accepted a limit of 0";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
  EXPECT_THROW(Semaphore(session, "relative", 2), Error);
}

TEST_F(SemaphoreTest, LeasesOfAKilledHolderAreFreed) {
  auto holder_a = start_peer("lease", servers, path, 2000, "2");
  auto lease_a = holder_a->wait_for_line("LEASE", testenv::scaled(15s));
  ASSERT_TRUE(lease_a);
  auto holder_b = start_peer("lease", servers, path, 2000, "2");
  auto lease_b = holder_b->wait_for_line("LEASE", testenv::scaled(15s));
  ASSERT_TRUE(lease_b);
  Semaphore semaphore(sessions.add(servers), path, 2);
  EXPECT_FALSE(semaphore.try_acquire());
  holder_b->signal(SIGKILL);
  auto lease = semaphore.try_acquire_for(testenv::scaled(15s));
  ASSERT_TRUE(lease);
  EXPECT_GT(lease->token().value(), number_of(*lease_b));
  EXPECT_EQ(nodes().size(), 2u);
  holder_a->close_stdin();
  EXPECT_TRUE(holder_a->wait(testenv::scaled(10s)));
}

// The chain of predecessor watches survives waiters leaving the queue.
TEST_F(SemaphoreTest, WaitersMoveUpWhenAWaiterAheadGivesUp) {
  Semaphore semaphore_a(sessions.add(servers), path, 2), semaphore_b(sessions.add(servers), path, 2);
  Lease first = semaphore_a.acquire();
  Lease second = semaphore_b.acquire();
  std::stop_source give_up;
  std::promise<std::error_code> quitter;
  auto close_sessions = sessions.closer();
  semaphore_a.async_acquire(-1ns, [&](std::error_code ec, Lease) { quitter.set_value(ec); }, give_up.get_token());
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  std::promise<Lease> patient;
  semaphore_b.async_acquire(-1ns, [&](std::error_code ec, Lease lease) {
    EXPECT_FALSE(ec);
    patient.set_value(std::move(lease));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 4; }));
  std::this_thread::sleep_for(200ms);
  give_up.request_stop();
  EXPECT_EQ(quitter.get_future().get(), errc::cancelled);
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  auto patient_future = patient.get_future();
  EXPECT_EQ(patient_future.wait_for(300ms), std::future_status::timeout);  // still two leases out
  first.release();  // not its predecessor: only the children watch it moved up to can see this
  ASSERT_EQ(patient_future.wait_for(testenv::scaled(5s)), std::future_status::ready);
  EXPECT_GT(patient_future.get().token(), second.token());
}

// Two leases returned at once promote two waiters: the second learns of its promotion through the
// first one's touch.
TEST_F(SemaphoreTest, TwoReleasesAtOncePromoteTwoWaiters) {
  Semaphore semaphore_a(sessions.add(servers), path, 2), semaphore_b(sessions.add(servers), path, 2);
  Lease first = semaphore_a.acquire();
  Lease second = semaphore_a.acquire();
  std::atomic<int> granted{0};
  std::vector<Lease> waiting(3);
  auto close_sessions = sessions.closer();
  for (int i = 0; i < 3; ++i) {
    semaphore_b.async_acquire(-1ns, [&, i](std::error_code ec, Lease lease) {
      if (ec) return;  // session_closed for the one still waiting when the test ends
      waiting[i] = std::move(lease);
      ++granted;
    });
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(3 + i); }));
  }
  std::this_thread::sleep_for(200ms);
  first.release();
  second.release();
  ASSERT_TRUE(eventually([&] { return granted.load() == 2; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(granted.load(), 2);
  sessions.close_all();
}

TEST_F(SemaphoreTest, TimeoutAndCancelLeaveNoNode) {
  Semaphore semaphore(sessions.add(servers), path, 1);
  Lease lease = semaphore.acquire();
  std::error_code ec;
  EXPECT_FALSE(semaphore.try_acquire_for(200ms, {}, ec));
  EXPECT_EQ(ec, errc::timed_out);
  EXPECT_FALSE(semaphore.try_acquire_for(0ms, {}, ec));
  EXPECT_EQ(ec, errc::would_block);
  std::stop_source stop;
  auto waiting = std::async(std::launch::async, [&] { return semaphore.try_acquire_for(60s, stop.get_token()); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  stop.request_stop();
  EXPECT_FALSE(waiting.get());
  EXPECT_TRUE(eventually([&] { return nodes().size() == 1; }));
}

// ---- the peers' layouts (SemaphoreLayout::curator_v2, SemaphoreLayout::kazoo) ----

class PeerSemaphoreTest : public SemaphoreTest, public ::testing::WithParamInterface<SemaphoreLayout> {
 protected:
  SemaphoreOptions options() const {
    SemaphoreOptions result;
    result.layout = GetParam();
    return result;
  }
  bool kazoo() const { return GetParam() == SemaphoreLayout::kazoo; }
  std::string lock_parent() const { return kazoo() ? path + "-__lock__" : path + "/locks"; }
  std::string lease_parent() const { return kazoo() ? path : path + "/leases"; }
  std::vector<std::string> internal_lock_nodes() { return raw.children(lock_parent()); }
  std::vector<std::string> lease_nodes() { return raw.children(lease_parent()); }

  void TearDown() override {
    SemaphoreTest::TearDown();
    if (kazoo()) {  // kazoo's parents are persistent
      raw.remove(lock_parent());
      raw.remove(path);
    }
  }
};

// The nodes are named, placed and recorded as the peer's own semaphore does (its internal lock's
// nodes are the ones the peer's lock sees), the token is the lease node's czxid, and a lease is
// lost with its session like any lease.
TEST_P(PeerSemaphoreTest, NodesAreThePeersAndTheLeaseIsAGrant) {
  Semaphore semaphore(sessions.add(servers), path, 1, options());
  Lease lease = semaphore.acquire();
  ASSERT_EQ(lease_nodes().size(), 1u);
  const std::string lease_node = lease_nodes().front();
  EXPECT_EQ(lease.node_path(), lease_parent() + "/" + lease_node);
  EXPECT_EQ(lease.token().value(), raw.stat(lease.node_path()).czxid);
  const std::regex lease_name(kazoo() ? "[0-9a-f]{32}" : "_c_[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-lease-[0-9]{10}");
  EXPECT_TRUE(std::regex_match(lease_node, lease_name)) << lease_node;
  if (kazoo()) {
    EXPECT_EQ(parent_data(), "1");
  }
  EXPECT_TRUE(eventually([&] { return internal_lock_nodes().empty(); })) << "the internal lock was not released";

  // A waiter holds the internal lock while it waits, as the peers' waiters do.
  Semaphore other(sessions.add(servers), path, 1, options());
  std::promise<Lease> waiter;
  auto close_sessions = sessions.closer();
  other.async_acquire(-1ns, [&](std::error_code ec, Lease next) {
    EXPECT_FALSE(ec) << ec.message();
    waiter.set_value(std::move(next));
  });
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().size() == 1; }));
  const std::regex lock_name(kazoo() ? "[0-9a-f]{32}__lock__[0-9]{10}"
                                     : "_c_[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}-lock-[0-9]{10}");
  EXPECT_TRUE(std::regex_match(internal_lock_nodes().front(), lock_name)) << internal_lock_nodes().front();
  auto rows = semaphore.contenders();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[0].holds);
  EXPECT_EQ(rows[0].token, lease.token());
  EXPECT_FALSE(rows[1].holds);

  lease.release();
  auto next_future = waiter.get_future();
  ASSERT_EQ(next_future.wait_for(testenv::scaled(10s)), std::future_status::ready);
  Lease next = next_future.get();
  EXPECT_GT(next.token(), lease.token());
  EXPECT_TRUE(eventually([&] { return internal_lock_nodes().empty() && lease_nodes().size() == 1; }));
  std::promise<LossReason> lost;
  next.on_lost([&](LossReason why) { lost.set_value(why); });
  sessions[1].close();
  EXPECT_EQ(lost.get_future().get(), LossReason::session_closed);
  EXPECT_TRUE(next.lost());
}

// Whether the wait is for the internal lock or, holding it, for a lease: a timeout, a try and a
// cancellation each leave no node behind; the holder's lease stays.
TEST_P(PeerSemaphoreTest, TimeoutsTriesAndCancellationLeaveNoNode) {
  Semaphore semaphore(sessions.add(servers), path, 1, options());
  Lease lease = semaphore.acquire();
  Semaphore other(sessions.add(servers), path, 1, options());
  std::error_code ec;
  EXPECT_FALSE(other.try_acquire_for(0ms, {}, ec));
  EXPECT_EQ(ec, errc::would_block);
  // Two waiters at once: one holds the internal lock and counts, the other waits for the lock.
  auto first = std::async(std::launch::async, [&] {
    std::error_code first_ec;
    other.try_acquire_for(testenv::scaled(400ms), {}, first_ec);
    return first_ec;
  });
  auto second = std::async(std::launch::async, [&] {
    std::error_code second_ec;
    semaphore.try_acquire_for(testenv::scaled(400ms), {}, second_ec);
    return second_ec;
  });
  EXPECT_EQ(first.get(), errc::timed_out);
  EXPECT_EQ(second.get(), errc::timed_out);
  EXPECT_TRUE(eventually([&] { return internal_lock_nodes().empty() && lease_nodes().size() == 1; }));

  std::stop_source stop;
  auto cancelled = std::async(std::launch::async, [&] { return other.try_acquire_for(60s, stop.get_token()); });
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().size() == 1; }));
  stop.request_stop();
  EXPECT_FALSE(cancelled.get());
  std::promise<std::error_code> async_outcome;
  std::stop_source async_stop;
  auto close_sessions = sessions.closer();
  other.async_acquire(-1ns, [&](std::error_code result, Lease) { async_outcome.set_value(result); },
                      async_stop.get_token());
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().size() == 1; }));
  async_stop.request_stop();
  EXPECT_EQ(async_outcome.get_future().get(), errc::cancelled);
  EXPECT_TRUE(eventually([&] { return internal_lock_nodes().empty() && lease_nodes().size() == 1; }));
  EXPECT_FALSE(lease.lost());
  EXPECT_TRUE(semaphore.contenders().front().holds);
}

// A waiter holds the internal lock while it counts. A dropped connection does not disturb it; a
// lost session voids its count, and it starts over on the next session, queueing for the
// internal lock again (behind whoever took it meanwhile) before it is granted.
TEST_P(PeerSemaphoreTest, AWaiterWhoseSessionIsLostWhileCountingStartsOver) {
  testenv::Proxy proxy(servers);
  Semaphore holder_side(sessions.add(servers), path, 1, options());
  Lease held = holder_side.acquire();
  Semaphore waiter_side(sessions.add(proxy.address()), path, 1, options());
  std::promise<std::pair<std::error_code, Lease>> outcome;
  auto close_sessions = sessions.closer();
  waiter_side.async_acquire(-1ns, [&](std::error_code ec, Lease lease) { outcome.set_value({ec, std::move(lease)}); });
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().size() == 1; }));
  const std::string counting = internal_lock_nodes().front();

  proxy.reset();  // the same session reconnects; the children watch is set again
  ASSERT_TRUE(sessions[1].wait_connected(testenv::scaled(10s)));
  proxy.blackhole();  // now the session is lost, and the server expires it
  ASSERT_TRUE(eventually([&] { return sessions[1].metrics().sessions_lost == 1; }, testenv::scaled(15s)));
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().empty(); }, testenv::scaled(15s)))
      << "the lost session's internal lock node stayed";
  proxy.pass();
  ASSERT_TRUE(eventually([&] { return internal_lock_nodes().size() == 1 && internal_lock_nodes().front() != counting; },
                         testenv::scaled(15s)))
      << "the waiter did not queue again on its new session";
  auto future = outcome.get_future();
  EXPECT_EQ(future.wait_for(200ms), std::future_status::timeout) << "granted while the lease was held";
  held.release();
  ASSERT_EQ(future.wait_for(testenv::scaled(10s)), std::future_status::ready);
  auto [ec, lease] = future.get();
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_GT(lease.token(), held.token());
  EXPECT_EQ(lease.session_id(), sessions[1].id());
  EXPECT_TRUE(eventually([&] { return internal_lock_nodes().empty() && lease_nodes().size() == 1; }));
}

INSTANTIATE_TEST_SUITE_P(Layouts, PeerSemaphoreTest,
                         ::testing::Values(SemaphoreLayout::curator_v2, SemaphoreLayout::kazoo),
                         [](const auto& param_info) { return std::string(to_string(param_info.param)); });

// Semaphores are not batched, in any layout: an acquisition started inside an open
// AcquisitionBatch goes out at once (a peer layout's internal lock included), so a wait for it
// inside the batch's scope ends; a lock in the same batch is still held back until the send.
TEST_F(SemaphoreTest, AnAcquisitionInsideABatchGoesOutAtOnceInEveryLayout) {
  Session& session = sessions.add(servers);
  auto close_sessions = sessions.closer();
  for (const SemaphoreLayout layout : {SemaphoreLayout::zkrecipes, SemaphoreLayout::curator_v2, SemaphoreLayout::kazoo}) {
    SCOPED_TRACE(to_string(layout));
    const std::string semaphore_path = fmt::format("{}-{}", path, to_string(layout));
    SemaphoreOptions in_layout;
    in_layout.layout = layout;
    Semaphore semaphore(session, semaphore_path, 1, in_layout);
    Lock lock(session, semaphore_path + "-lock");
    using Outcome = std::pair<std::error_code, Lease>;
    auto leased = std::make_shared<std::promise<Outcome>>();
    auto locked = std::make_shared<std::promise<Outcome>>();
    auto lease_future = leased->get_future(), lock_future = locked->get_future();
    {
      AcquisitionBatch batch(session);
      lock.async_acquire(-1ns, [locked](std::error_code ec, HeldLock held) { locked->set_value({ec, std::move(held)}); });
      semaphore.async_acquire(-1ns,
                              [leased](std::error_code ec, Lease lease) { leased->set_value({ec, std::move(lease)}); });
      EXPECT_EQ(lease_future.wait_for(testenv::scaled(10s)), std::future_status::ready)
          << "the semaphore's acquisition was held back by the open batch";
      EXPECT_EQ(lock_future.wait_for(200ms), std::future_status::timeout) << "the batch sent the lock early";
    }
    ASSERT_EQ(lease_future.wait_for(testenv::scaled(10s)), std::future_status::ready);
    ASSERT_EQ(lock_future.wait_for(testenv::scaled(10s)), std::future_status::ready);
    auto [lease_ec, lease] = lease_future.get();
    ASSERT_FALSE(lease_ec) << lease_ec.message();
    EXPECT_TRUE(lease);
    auto [lock_ec, held] = lock_future.get();
    EXPECT_FALSE(lock_ec) << lock_ec.message();
    lease.release();
    held.release();
    if (layout == SemaphoreLayout::kazoo) {  // kazoo's parents are persistent
      EXPECT_TRUE(eventually([&] { return raw.children(semaphore_path).empty(); }));
      raw.remove(semaphore_path + "-__lock__");
      raw.remove(semaphore_path);
    }
  }
}

// A try behind a cut link returns, in every layout: the create it sent (a lease's, or a peer
// layout's internal lock's) gets no answer, and try_acquire, which does not wait, ends at the latest
// when the session is declared lost, never waiting for the replacement. No node of it is left once
// the link heals.
TEST_F(SemaphoreTest, TryBehindACutLinkReturnsInEveryLayoutAndLeavesNoNode) {
  constexpr auto kSessionTimeout = 2000ms;
  testenv::Proxy proxy(servers);
  auto close_sessions = sessions.closer();
  const std::vector<SemaphoreLayout> layouts{SemaphoreLayout::zkrecipes, SemaphoreLayout::curator_v2,
                                             SemaphoreLayout::kazoo};
  std::vector<std::unique_ptr<Semaphore>> semaphores;
  for (const SemaphoreLayout layout : layouts) {
    SemaphoreOptions in_layout;
    in_layout.layout = layout;
    semaphores.push_back(std::make_unique<Semaphore>(sessions.add(proxy.address(), kSessionTimeout),
                                                     fmt::format("{}-{}", path, to_string(layout)), 1, in_layout));
    semaphores.back()->acquire().release();  // the paths exist: each try's first request is a create
  }
  // Ephemeral nodes left under a semaphore's paths (kazoo's internal lock is a sibling).
  std::function<std::size_t(const std::string&)> ephemerals = [&](const std::string& node) {
    std::size_t count = raw.stat(node).ephemeralOwner != 0 ? 1 : 0;
    for (const auto& child : raw.children(node)) count += ephemerals(node + "/" + child);
    return count;
  };
  auto left = [&] {
    std::size_t count = 0;
    for (const auto& semaphore : semaphores) count += ephemerals(semaphore->path()) + ephemerals(semaphore->path() + "-__lock__");
    return count;
  };
  ASSERT_TRUE(eventually([&] { return left() == 0; }));
  proxy.blackhole();
  std::vector<std::future<std::pair<bool, std::error_code>>> tries;
  for (auto& semaphore : semaphores)
    tries.push_back(std::async(std::launch::async, [&semaphore] {
      std::error_code ec;
      auto lease = semaphore->try_acquire(ec);
      return std::make_pair(lease.has_value(), ec);
    }));
  std::vector<bool> returned;
  for (auto& attempt : tries) returned.push_back(attempt.wait_for(testenv::scaled(4 * kSessionTimeout)) == std::future_status::ready);
  proxy.pass();  // a try still waiting returns on the replacement session: the test ends either way
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    SCOPED_TRACE(to_string(layouts[i]));
    EXPECT_TRUE(returned[i]) << "try_acquire() did not return while the link was cut";
    auto [leased, ec] = tries[i].get();
    if (!returned[i]) continue;
    EXPECT_FALSE(leased);
    EXPECT_TRUE(ec == errc::session_lost || ec == zk_errc::connection_loss) << ec.message();
  }
  EXPECT_TRUE(eventually([&] { return left() == 0; }, testenv::scaled(4 * kSessionTimeout)))
      << "a create that reached the server late stayed";
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    SCOPED_TRACE(to_string(layouts[i]));
    EXPECT_TRUE(semaphores[i]->try_acquire_for(testenv::scaled(10s))) << "no lease on the replacement session";
  }
  EXPECT_TRUE(eventually([&] { return left() == 0; }));
  for (const auto& semaphore : semaphores) {  // kazoo's parents are persistent
    raw.remove(semaphore->path() + "-__lock__");
    raw.remove(semaphore->path());
  }
}

// kazoo records the limit in the path's data and refuses another: so do we, in its layout, before
// any lease is taken and leaving no node. A path of our own layout is refused as well.
TEST_F(SemaphoreTest, KazooLayoutRefusesAnotherRecordedLimit) {
  raw.create("/zkr-test");
  SemaphoreOptions options;
  options.layout = SemaphoreLayout::kazoo;
  for (const std::string& data : {std::string("3"), std::string("max_leases=2")}) {
    ASSERT_EQ(raw.create(path, data), ZOK);
    Semaphore semaphore(sessions.add(servers), path, 2, options);
    try {
      semaphore.acquire();
      FAIL() << "a kazoo-layout participant accepted the path data '" << data << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), errc::limit_mismatch);
      EXPECT_EQ(e.path(), path);
      const std::string expected = data == "3" ? "records max_leases 3 (kazoo's layout), this participant asks for 2"
                                               : "zkrecipes' own layout";
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
    EXPECT_TRUE(eventually([&] { return nodes().empty() && raw.children(path + "-__lock__").empty(); }));
    raw.remove(path);
  }
  raw.remove(path + "-__lock__");
}

TEST_F(SemaphoreTest, AnUnknownLayoutIsRefused) {
  Session& session = sessions.add(servers);
  SemaphoreOptions options;
  options.layout = static_cast<SemaphoreLayout>(7);
  try {
    Semaphore semaphore(session, path, 2, options);
    FAIL() << "accepted an unknown layout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("unknown layout 7"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zkr::test
