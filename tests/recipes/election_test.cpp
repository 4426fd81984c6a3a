// SPDX-License-Identifier: Apache-2.0
// Leader election on real servers: one leader, handover on kill, freeze, resign and expiry, the
// leader as seen by a non-participant, and the selector's run-and-requeue cycle.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_future.hpp>
#include <fmt/format.h>

#include <zkr/asio.hpp>
#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>

#include "internals.hpp"
#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class ElectionTest : public ServerTest {
 protected:
  Sessions sessions;

  void TearDown() override { sessions.close_all(); }
};

// Node name prefixes as the peers write them (the server appends the sequence).
constexpr const char* kCuratorLockPrefix = "_c_1f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-lock-";
constexpr const char* kKazooLockPrefix = "0123456789abcdef0123456789abcdef__lock__";

// Adds under `path` (a container, created if need be) an ephemeral node of the raw client named
// `prefix`, sequential unless told otherwise, as a peer's participant would; returns its name.
std::string add_peer_node(RawClient& raw, const std::string& path, const std::string& prefix, bool sequential = true) {
  raw.create(path.substr(0, path.rfind('/')));
  raw.create(path, {}, ZOO_CONTAINER);
  if (raw.create(path + "/" + prefix, "peer", ZOO_EPHEMERAL | (sequential ? ZOO_SEQUENCE : 0)) != ZOK) return {};
  for (const auto& child : raw.children(path))
    if (child.starts_with(prefix)) return child;
  return {};
}

// Index of the one latch that leads, -1 if none does, -2 if several do.
int sole_leader(const std::vector<std::unique_ptr<LeaderLatch>>& latches) {
  int leader = -1;
  for (std::size_t i = 0; i < latches.size(); ++i) {
    if (!latches[i]->is_leader()) continue;
    if (leader != -1) return -2;
    leader = static_cast<int>(i);
  }
  return leader;
}

TEST_F(ElectionTest, OneLeaderAmongFiveAndEveryoneAgreesWhoItIs) {
  std::vector<std::unique_ptr<LeaderLatch>> latches;
  for (int i = 0; i < 5; ++i) {
    latches.push_back(std::make_unique<LeaderLatch>(sessions.add(servers), path,
                                                    ElectionOptions{.participant_data = fmt::format("node-{}:{}", i, 9000 + i)}));
    latches.back()->start();
  }
  ASSERT_TRUE(eventually([&] { return nodes().size() == 5 && sole_leader(latches) >= 0; }));
  std::this_thread::sleep_for(200ms);  // nobody else may think it leads a moment later
  const int leader = sole_leader(latches);
  ASSERT_GE(leader, 0);
  const Leadership term = latches[leader]->leadership();
  ASSERT_TRUE(term);
  EXPECT_EQ(term.token().value(), raw.stat(term.node_path()).czxid);
  EXPECT_NE(term.node_path().find("-latch-"), std::string::npos);  // Curator LeaderLatch's names

  // A process that does not take part reads the same leader and the queue behind it.
  Session& observer = sessions.add(servers);
  auto seen = election_leader(observer, path);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->data, fmt::format("node-{}:{}", leader, 9000 + leader));
  EXPECT_EQ(seen->token, term.token());
  EXPECT_EQ(seen->session_id, sessions[leader].id());
  auto everyone = election_participants(observer, path);
  ASSERT_EQ(everyone.size(), 5u);
  EXPECT_TRUE(everyone[0].leader);
  for (std::size_t i = 1; i < everyone.size(); ++i) {
    EXPECT_FALSE(everyone[i].leader);
    EXPECT_GT(everyone[i].token, everyone[i - 1].token);  // queue order is creation order
  }
  EXPECT_EQ(latches[3]->leader()->data, seen->data);
  EXPECT_EQ(latches[3]->participants().size(), 5u);
  EXPECT_FALSE(election_leader(observer, path + "-nobody"));
  EXPECT_TRUE(election_participants(observer, path + "-nobody").empty());
}

TEST_F(ElectionTest, ResignHandsOverAtOnceAndRequeuesAtTheBack) {
  // Sessions far longer than the test's wait: the handover cannot come from an expiry.
  std::vector<std::unique_ptr<LeaderLatch>> latches;
  for (int i = 0; i < 3; ++i) {
    latches.push_back(std::make_unique<LeaderLatch>(sessions.add(servers, 20000ms), path,
                                                    ElectionOptions{.participant_data = fmt::format("p{}", i)}));
    latches.back()->start();
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(i + 1); }));
  }
  auto first = latches[0]->wait_for_leadership(testenv::scaled(5s));
  ASSERT_TRUE(first);
  std::mutex mutex;
  std::vector<LeadershipEvent> events;
  auto close_sessions = sessions.closer();
  auto subscription = latches[0]->on_change([&](LeadershipEvent event, const Leadership&) {
    std::lock_guard guard(mutex);
    events.push_back(event);
  });
  const auto before = std::chrono::steady_clock::now();
  ASSERT_TRUE(latches[0]->resign());
  EXPECT_TRUE(first->ended());
  EXPECT_FALSE(first->lost());  // resigning is not losing
  EXPECT_FALSE(latches[0]->is_leader());
  auto second = latches[1]->wait_for_leadership(testenv::scaled(5s));
  ASSERT_TRUE(second);
  EXPECT_LT(std::chrono::steady_clock::now() - before, 20000ms);
  EXPECT_GT(second->token(), first->token());
  EXPECT_FALSE(latches[2]->is_leader());
  ASSERT_TRUE(eventually([&] { return latches[0]->participants().size() == 3; }));
  auto order = latches[0]->participants();
  EXPECT_EQ(order[0].data, "p1");
  EXPECT_EQ(order[1].data, "p2");
  EXPECT_EQ(order[2].data, "p0");  // the resigner queued again at the back
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return !events.empty();
  }));
  std::lock_guard guard(mutex);
  EXPECT_EQ(events.front(), LeadershipEvent::resigned);
}

TEST_F(ElectionTest, KilledLeaderIsSucceededByExactlyOneWithALargerToken) {
  auto peer = start_peer("elect", servers, path, 2000, "peer");
  auto leader_line = peer->wait_for_line("LEADER", testenv::scaled(15s));
  ASSERT_TRUE(leader_line);
  std::vector<std::unique_ptr<LeaderLatch>> latches;
  for (int i = 0; i < 2; ++i) {
    latches.push_back(std::make_unique<LeaderLatch>(sessions.add(servers), path));
    latches.back()->start();
  }
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));
  EXPECT_EQ(sole_leader(latches), -1);
  peer->signal(SIGKILL);
  ASSERT_TRUE(eventually([&] { return sole_leader(latches) >= 0; }, testenv::scaled(15s)));
  std::this_thread::sleep_for(300ms);
  const int leader = sole_leader(latches);
  ASSERT_GE(leader, 0) << "two leaders";
  EXPECT_GT(latches[leader]->leadership().token().value(), number_of(*leader_line));
  EXPECT_EQ(latches[leader]->leadership().session_id(), sessions[leader].id());
}

TEST_F(ElectionTest, FrozenLeaderIsReplacedAndOnThawLearnsItLostWhileItsWritesAreRefused) {
  auto peer = start_peer("elect", servers, path, 2000, "frozen");
  auto leader_line = peer->wait_for_line("LEADER", testenv::scaled(15s));
  ASSERT_TRUE(leader_line);
  FenceGate resource;
  const FencingToken old_token(number_of(*leader_line));
  ASSERT_TRUE(resource.admit("config", old_token));

  peer->freeze();
  LeaderLatch latch(sessions.add(servers), path);
  latch.start();
  auto term = latch.wait_for_leadership(testenv::scaled(20s));  // the server expires the frozen session
  ASSERT_TRUE(term);
  EXPECT_GT(term->token(), old_token);
  ASSERT_TRUE(resource.admit("config", term->token()));

  peer->thaw();
  int refused = 0;
  std::optional<std::string> lost;
  for (int i = 0; i < 400 && !lost; ++i) {
    auto line = peer->read_line(testenv::scaled(5s));
    ASSERT_TRUE(line) << "the thawed leader went silent";
    if (line->starts_with("WRITE")) {
      EXPECT_FALSE(resource.admit("config", FencingToken(number_of(*line))));
      ++refused;
    } else if (line->starts_with("LOST")) {
      lost = line;
    }
  }
  ASSERT_TRUE(lost) << "the old leader was never told";
  // Told by its session monitor on thaw (or, if the server's deletion of its node arrives first,
  // by the node watch): either way before it could believe it leads for long.
  EXPECT_TRUE(*lost == "LOST session lost" || *lost == "LOST lock node deleted") << *lost;
  EXPECT_EQ(resource.highest("config"), term->token());
  EXPECT_TRUE(latch.is_leader());  // the thawed peer queued again behind us
  peer->close_stdin();
  EXPECT_TRUE(peer->wait(testenv::scaled(10s)));
}

TEST_F(ElectionTest, AWaiterThatExpiresDoesNotDisturbTheOrder) {
  testenv::Proxy proxy(servers);
  LeaderLatch first(sessions.add(servers), path, {.participant_data = "first"});
  first.start();
  ASSERT_TRUE(first.wait_for_leadership(testenv::scaled(5s)));
  Session& expiring_session = sessions.add(proxy.address(), 10000ms);
  LeaderLatch expiring(expiring_session, path, {.participant_data = "expiring"});
  expiring.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  LeaderLatch last(sessions.add(servers), path, {.participant_data = "last"});
  last.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }));

  auto id = detail::Internals::core(expiring_session)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  // The last participant's predecessor vanished: it watches the leader now and must not lead.
  std::this_thread::sleep_for(500ms);
  EXPECT_TRUE(first.is_leader());
  EXPECT_FALSE(last.is_leader());
  proxy.reset();
  // The expired waiter queues again on its new session, behind the last one.
  ASSERT_TRUE(eventually([&] { return nodes().size() == 3; }, testenv::scaled(15s)));
  auto order = first.participants();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0].data, "first");
  EXPECT_EQ(order[1].data, "last");
  EXPECT_EQ(order[2].data, "expiring");
  ASSERT_TRUE(first.resign());
  ASSERT_TRUE(last.wait_for_leadership(testenv::scaled(5s)));
  EXPECT_FALSE(expiring.is_leader());
}

TEST_F(ElectionTest, LatchListenersHearGainedAndLostAndTheLatchQueuesAgain) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 3000ms);
  LeaderLatch latch(session, path);
  std::mutex mutex;
  std::vector<std::pair<LeadershipEvent, FencingToken>> events;
  auto close_sessions = sessions.closer();
  auto subscription = latch.on_change([&](LeadershipEvent event, const Leadership& term) {
    std::lock_guard guard(mutex);
    events.emplace_back(event, term.token());
  });
  latch.start();
  auto term = latch.wait_for_leadership(testenv::scaled(5s));
  ASSERT_TRUE(term);
  std::atomic<bool> work_stopped{false};
  std::stop_callback on_end(term->ended_token(), [&] { work_stopped = true; });
  proxy.blackhole();  // the monitor declares the session lost before the server can expire it
  ASSERT_TRUE(eventually([&] { return term->lost(); }, testenv::scaled(15s)));
  EXPECT_EQ(term->loss_reason(), LossReason::session_lost);
  // The stops are requested on the session's callback thread, just after lost() turns true.
  EXPECT_TRUE(eventually([&] { return work_stopped.load(); }));
  EXPECT_TRUE(eventually([&] { return term->lost_token().stop_requested(); }));
  EXPECT_FALSE(latch.is_leader());
  proxy.pass();
  auto again = latch.wait_for_leadership(testenv::scaled(20s));  // a new session, a new node
  ASSERT_TRUE(again);
  EXPECT_GT(again->token(), term->token());
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return events.size() >= 3;
  }));
  std::lock_guard guard(mutex);
  EXPECT_EQ(events[0], std::make_pair(LeadershipEvent::gained, term->token()));
  EXPECT_EQ(events[1], std::make_pair(LeadershipEvent::lost, term->token()));
  EXPECT_EQ(events[2], std::make_pair(LeadershipEvent::gained, again->token()));
}

TEST_F(ElectionTest, ClosingAWaitingLatchLeavesNoNodeAndWaitsFail) {
  LeaderLatch leader(sessions.add(servers), path);
  leader.start();
  ASSERT_TRUE(leader.wait_for_leadership(testenv::scaled(5s)));
  LeaderLatch waiter(sessions.add(servers), path);
  EXPECT_THROW(waiter.wait_for_leadership(1ms), Error);  // not started
  waiter.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  EXPECT_FALSE(waiter.wait_for_leadership(100ms));
  std::stop_source stop;
  auto waiting = std::async(std::launch::async, [&] { return waiter.wait_for_leadership(-1ns, stop.get_token()); });
  stop.request_stop();
  EXPECT_FALSE(waiting.get());
  waiter.close();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 1; }));
  try {
    waiter.wait_for_leadership(1ms);
    FAIL() << "a closed latch cannot lead";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::cancelled);
  }
  leader.close();
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  EXPECT_FALSE(leader.is_leader());
}

TEST_F(ElectionTest, ClosedSessionEndsParticipationWithThatError) {
  Session& session = sessions.add(servers);
  LeaderLatch latch(session, path);
  latch.start();
  ASSERT_TRUE(latch.wait_for_leadership(testenv::scaled(5s)));
  session.close();
  try {
    ASSERT_TRUE(eventually([&] { return !latch.is_leader(); }));
    latch.wait_for_leadership(testenv::scaled(5s));
    FAIL() << "expected the session's end to end participation";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::session_closed);
  }
  EXPECT_EQ(latch.error(), errc::session_closed);
}

// The callback form of wait_for_leadership: each way a wait ends reaches its handler once, on
// the session's callback thread.
TEST_F(ElectionTest, AsyncWaitsForLeadershipEndWithTheTermOrWhy) {
  Session& session = sessions.add(servers);
  LeaderLatch first(session, path), second(session, path), never_started(session, path);
  EXPECT_THROW(never_started.async_wait_for_leadership(-1ns, [](std::error_code, Leadership) {}), Error);
  first.start();
  std::promise<std::pair<std::error_code, Leadership>> led;
  first.async_wait_for_leadership(-1ns, [&](std::error_code ec, Leadership term) { led.set_value({ec, term}); });
  auto [first_ec, first_term] = led.get_future().get();
  ASSERT_FALSE(first_ec) << first_ec.message();
  EXPECT_TRUE(first_term && first_term.token().valid());
  second.start();

  auto outcome_of = [&](std::chrono::nanoseconds timeout, std::stop_token stop = {}) {
    auto outcome = std::make_shared<std::promise<std::error_code>>();
    auto future = outcome->get_future();
    second.async_wait_for_leadership(timeout, [outcome](std::error_code ec, Leadership term) {
      EXPECT_FALSE(term);
      outcome->set_value(ec);
    }, stop);
    return future;
  };
  EXPECT_EQ(outcome_of(0ns).get(), errc::timed_out);
  EXPECT_EQ(outcome_of(200ms).get(), errc::timed_out);
  std::stop_source stop;
  auto cancelled = outcome_of(-1ns, stop.get_token());
  EXPECT_EQ(cancelled.wait_for(100ms), std::future_status::timeout);
  stop.request_stop();
  EXPECT_EQ(cancelled.get(), errc::cancelled);
  std::stop_source stopped_already;
  stopped_already.request_stop();
  EXPECT_EQ(outcome_of(-1ns, stopped_already.get_token()).get(), errc::cancelled);

  // A pending wait hears the hand-over; another pending one hears its latch close.
  std::promise<Leadership> next;
  second.async_wait_for_leadership(10s, [&](std::error_code ec, Leadership term) {
    EXPECT_FALSE(ec) << ec.message();
    next.set_value(term);
  });
  first.close();
  auto next_future = next.get_future();
  ASSERT_EQ(next_future.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_GT(next_future.get().token(), first_term.token());
  LeaderLatch third(session, path);
  third.start();
  auto closed = std::make_shared<std::promise<std::error_code>>();
  third.async_wait_for_leadership(-1ns, [closed](std::error_code ec, Leadership) { closed->set_value(ec); });
  third.close();
  EXPECT_EQ(closed->get_future().get(), errc::cancelled);
}

// The Asio forms complete as if by post, also when they fail at once: on a latch never started
// (whose callback form throws), a handler bound to a strand and started from it runs after the
// call returned.
TEST_F(ElectionTest, AsioWaitsThatFailAtOnceCompleteOnlyAfterTheCallReturned) {
  Session& session = sessions.add(servers);
  LeaderLatch never_started(session, path);
  boost::asio::io_context io;
  auto strand = boost::asio::make_strand(io);
  bool returned = false;
  std::vector<std::string> outcomes;
  const auto record = [&](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
      outcomes.push_back("no error");
    } catch (const Error& e) {
      outcomes.push_back(fmt::format("{} {}", e.code() == errc::invalid_argument ? "refused" : e.code().message(),
                                     returned ? "after the call" : "inside the call"));
    }
  };
  boost::asio::post(strand, [&] {
    asio::async_wait_for_leadership(never_started,
                                    boost::asio::bind_executor(strand, [&](std::exception_ptr error, Leadership) {
                                      record(error);
                                    }));
    asio::async_wait_for_leadership_for(
        never_started, 1s,
        boost::asio::bind_executor(strand, [&](std::exception_ptr error, std::optional<Leadership>) { record(error); }));
    returned = true;
  });
  io.run_for(testenv::scaled(10s));
  EXPECT_EQ(outcomes, (std::vector<std::string>{"refused after the call", "refused after the call"}));
  // A handler without an executor of its own is posted to Asio's system executor.
  auto refused = asio::async_wait_for_leadership(never_started, boost::asio::use_future);
  ASSERT_EQ(refused.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_THROW(refused.get(), Error);
}

TEST_F(ElectionTest, InvalidPathsAndEmptyFunctionsAreRefused) {
  Session& session = sessions.add(servers);
  EXPECT_THROW(LeaderLatch(session, "no-slash"), Error);
  try {
    LeaderSelector selector(session, path, nullptr);
    FAIL() << "accepted an empty function";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
  EXPECT_THROW(election_leader(session, "/a//b"), Error);
}

TEST_F(ElectionTest, SelectorsTakeTurnsWithoutOverlapAndTokensGrow) {
  constexpr int kSelectors = 3;
  std::atomic<int> inside{0}, overlaps{0};
  std::mutex mutex;
  std::vector<std::int64_t> tokens;
  std::vector<int> terms_by(kSelectors, 0);
  std::vector<std::unique_ptr<LeaderSelector>> selectors;
  for (int i = 0; i < kSelectors; ++i) {
    selectors.push_back(std::make_unique<LeaderSelector>(sessions.add(servers), path, [&, i](const Leadership& term) {
      if (inside.fetch_add(1) != 0) ++overlaps;
      {
        std::lock_guard guard(mutex);
        tokens.push_back(term.token().value());
        ++terms_by[i];
      }
      std::this_thread::sleep_for(20ms);
      inside.fetch_sub(1);
    }));
  }
  for (auto& selector : selectors) selector->start();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return tokens.size() >= 15 && std::all_of(terms_by.begin(), terms_by.end(), [](int n) { return n >= 2; });
  }, testenv::scaled(30s)));
  for (auto& selector : selectors) selector->close();
  EXPECT_EQ(overlaps.load(), 0);
  std::lock_guard guard(mutex);
  EXPECT_TRUE(std::is_sorted(tokens.begin(), tokens.end()));
  EXPECT_EQ(std::adjacent_find(tokens.begin(), tokens.end()), tokens.end());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

TEST_F(ElectionTest, SelectorFunctionIsToldWhenLeadershipIsLostAndTheSelectorRequeues) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 3000ms);
  std::promise<std::pair<bool, std::optional<LossReason>>> first_term_end;
  std::atomic<int> calls{0};
  std::atomic<std::int64_t> second_token{0};
  auto close_sessions = sessions.closer();
  LeaderSelector selector(session, path, [&](const Leadership& term) {
    if (++calls == 1) {
      std::condition_variable_any cv;
      std::mutex m;
      std::unique_lock lock(m);
      cv.wait(lock, term.ended_token(), [] { return false; });  // lead until told to stop
      first_term_end.set_value({term.lost(), term.loss_reason()});
      return;
    }
    second_token = term.token().value();
  });
  selector.start();
  ASSERT_TRUE(eventually([&] { return selector.is_leader(); }));
  const FencingToken first_token = election_leader(sessions.add(servers), path)->token;
  proxy.blackhole();
  auto ended = first_term_end.get_future();
  ASSERT_EQ(ended.wait_for(testenv::scaled(15s)), std::future_status::ready);
  auto [lost, reason] = ended.get();
  EXPECT_TRUE(lost);
  EXPECT_EQ(reason, LossReason::session_lost);
  proxy.pass();
  ASSERT_TRUE(eventually([&] { return second_token.load() != 0; }, testenv::scaled(20s)));
  EXPECT_GT(second_token.load(), first_token.value());
  EXPECT_GE(selector.terms(), 2u);
}

TEST_F(ElectionTest, SelectorWithoutAutoRequeueRunsOneTermUntilRequeued) {
  std::atomic<int> calls{0};
  LeaderSelector selector(sessions.add(servers), path, [&](const Leadership&) { ++calls; },
                          SelectorOptions{{}, false});
  selector.start();
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  ASSERT_TRUE(eventually([&] { return selector.requeue(); }));
  ASSERT_TRUE(eventually([&] { return calls.load() == 2; }));
  selector.close();
  EXPECT_FALSE(selector.requeue());
}

TEST_F(ElectionTest, ClosingASelectorStopsTheRunningFunction) {
  std::atomic<bool> running{false}, told{false};
  LeaderSelector selector(sessions.add(servers), path, [&](const Leadership& term) {
    running = true;
    while (!term.ended_token().stop_requested()) std::this_thread::sleep_for(5ms);
    told = true;
  });
  selector.start();
  ASSERT_TRUE(eventually([&] { return running.load(); }));
  selector.close();
  EXPECT_TRUE(told);
  EXPECT_FALSE(selector.is_leader());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

// ---- node layouts and the peers they share a path with ----

TEST_F(ElectionTest, EachLayoutNamesItsNodeAsItsPeerDoes) {
  struct Case {
    ElectionLayout layout;
    ContenderScheme scheme;
    ContenderRole role;
  };
  for (const auto& c : {Case{ElectionLayout::recipe_default, ContenderScheme::zkrecipes_or_curator, ContenderRole::latch},
                        Case{ElectionLayout::curator_latch, ContenderScheme::zkrecipes_or_curator, ContenderRole::latch},
                        Case{ElectionLayout::curator_lock, ContenderScheme::zkrecipes_or_curator, ContenderRole::exclusive},
                        Case{ElectionLayout::kazoo, ContenderScheme::kazoo, ContenderRole::exclusive}}) {
    SCOPED_TRACE(to_string(c.layout));
    const std::string where = testenv::unique_path();
    LeaderLatch latch(sessions.add(servers), where, {.participant_data = "ours", .layout = c.layout});
    latch.start();
    ASSERT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
    const auto name = parse_contender_name(raw.children(where).at(0));
    ASSERT_TRUE(name);
    EXPECT_EQ(name->scheme, c.scheme);
    EXPECT_EQ(name->role, c.role);
  }
  // The selector's default stays Curator LeaderSelector's.
  std::atomic<bool> led{false};
  LeaderSelector selector(sessions.add(servers), path, [&](const Leadership& term) {
    led = term.node_path().find("-lock-") != std::string::npos;
    while (!term.ended_token().stop_requested()) std::this_thread::sleep_for(5ms);
  });
  selector.start();
  EXPECT_TRUE(eventually([&] { return led.load(); }));
}

TEST_F(ElectionTest, ALayoutOutsideTheEnumIsRefused) {
  try {
    LeaderLatch latch(sessions.add(servers), path, {.participant_data = "ours", .layout = static_cast<ElectionLayout>(42)});
    FAIL() << "accepted layout 42";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("layout 42"), std::string::npos) << e.what();
  }
}

// A Curator LeaderLatch participant already queued leads before ours: the two agree on the order.
TEST_F(ElectionTest, LatchQueuesBehindACuratorLatchNodeAndLeadsOnceItGoes) {
  const std::string peer = add_peer_node(raw, path, kCuratorLatchPrefix);
  ASSERT_FALSE(peer.empty());
  LeaderLatch latch(sessions.add(servers), path);
  latch.start();
  EXPECT_FALSE(latch.wait_for_leadership(300ms));
  ASSERT_EQ(election_leader(sessions.add(servers), path)->node, peer);
  ASSERT_EQ(raw.remove(path + "/" + peer), ZOK);
  EXPECT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
}

// A peer's nodes that would make a second queue beside ours: the participant refuses with an error
// naming the peer's recipe and the node, and leaves no node of its own.
TEST_F(ElectionTest, EachLayoutRefusesPeerNodesItCannotShareAndLeavesNoNode) {
  struct Case {
    ElectionLayout layout;
    std::string peer_prefix;
    bool sequential;
    std::string peer_recipe;
  };
  const std::vector<Case> cases = {
      {ElectionLayout::recipe_default, kCuratorLockPrefix, true, "Curator InterProcessMutex or LeaderSelector"},
      {ElectionLayout::curator_latch, kKazooLockPrefix, true, "kazoo Lock or Election"},
      {ElectionLayout::curator_lock, kCuratorLatchPrefix, true, "Curator LeaderLatch"},
      {ElectionLayout::curator_lock, kKazooLockPrefix, true, "kazoo Lock or Election"},
      {ElectionLayout::kazoo, kCuratorLockPrefix, true, "Curator InterProcessMutex or LeaderSelector"},
      {ElectionLayout::kazoo, kCuratorLatchPrefix, true, "Curator LeaderLatch"},
      // kazoo's Semaphore counts every child of its path as a lease: ours would be counted.
      {ElectionLayout::kazoo, "0123456789abcdef0123456789abcdef", false, "kazoo Semaphore"},
      {ElectionLayout::curator_latch, "0123456789abcdef0123456789abcdef", false, "kazoo Semaphore"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} beside {}", to_string(c.layout), c.peer_prefix));
    const std::string where = testenv::unique_path();
    const std::string peer = add_peer_node(raw, where, c.peer_prefix, c.sequential);
    ASSERT_FALSE(peer.empty());
    LeaderLatch latch(sessions.add(servers), where, {.participant_data = "ours", .layout = c.layout});
    latch.start();
    try {
      latch.wait_for_leadership(testenv::scaled(10s));
      FAIL() << "joined beside " << peer;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), errc::incompatible_peer);
      const std::string what = e.what();
      EXPECT_NE(what.find(c.peer_recipe), std::string::npos) << what;
      EXPECT_NE(what.find(peer), std::string::npos) << what;
      EXPECT_NE(what.find(fmt::format("zkr::LeaderLatch with the {} layout", to_string(c.layout == ElectionLayout::recipe_default ? ElectionLayout::curator_latch : c.layout))), std::string::npos) << what;
    }
    EXPECT_EQ(latch.error(), errc::incompatible_peer);
    EXPECT_TRUE(eventually([&] { return raw.children(where) == std::vector<std::string>{peer}; }));
  }
}

// Curator's InterProcessSemaphoreV2 keeps its nodes under "locks" and "leases": no election lists
// them and that semaphore counts nothing of an election's, so they are no rival queue, and those
// names are as likely the user's own paths nested under the election's. A latch leads beside them.
TEST_F(ElectionTest, NestedLocksAndLeasesChildrenAreNoRivalQueue) {
  for (const auto layout : {ElectionLayout::curator_latch, ElectionLayout::curator_lock, ElectionLayout::kazoo}) {
    SCOPED_TRACE(std::string(to_string(layout)));
    const std::string where = testenv::unique_path();
    raw.create(where.substr(0, where.rfind('/')));
    ASSERT_EQ(raw.create(where), ZOK);
    for (const std::string nested : {"locks", "leases"}) {
      ASSERT_EQ(raw.create(where + "/" + nested), ZOK);
      ASSERT_EQ(raw.create(where + "/" + nested + "/app", "x"), ZOK);
    }
    LeaderLatch latch(sessions.add(servers), where, {.participant_data = "ours", .layout = layout});
    latch.start();
    EXPECT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
    EXPECT_FALSE(latch.error()) << latch.error().message();
    latch.close();
    EXPECT_TRUE(eventually([&] { return raw.children(where).size() == 2u; }));
  }
}

TEST_F(ElectionTest, SelectorRefusesACuratorLatchPathAndSaysWhyInItsLastException) {
  const std::string peer = add_peer_node(raw, path, kCuratorLatchPrefix);
  std::atomic<int> terms{0};
  LeaderSelector selector(sessions.add(servers), path, [&](const Leadership&) { ++terms; });
  selector.start();
  ASSERT_TRUE(eventually([&] { return selector.error() == errc::incompatible_peer; }));
  ASSERT_TRUE(selector.last_exception());
  try {
    std::rethrow_exception(selector.last_exception());
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Curator LeaderLatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("a zkr::LeaderSelector with the curator_lock layout"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(terms.load(), 0);
  EXPECT_TRUE(eventually([&] { return nodes() == std::vector<std::string>{peer}; }));
}

// Before Curator's latch layout, a latch and a selector on one path shared the "-lock-" queue. With
// the default layouts they would be two queues: the later one refuses. With one layout they share.
TEST_F(ElectionTest, LatchAndSelectorShareAPathOnlyWithOneLayout) {
  LeaderLatch latch(sessions.add(servers), path);
  latch.start();
  ASSERT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
  std::atomic<int> terms{0};
  LeaderSelector refused(sessions.add(servers), path, [&](const Leadership&) { ++terms; });
  refused.start();
  ASSERT_TRUE(eventually([&] { return refused.error() == errc::incompatible_peer; }));
  latch.close();
  ASSERT_TRUE(eventually([&] { return nodes().empty(); }));

  LeaderLatch sharing(sessions.add(servers), path, {.participant_data = "ours", .layout = ElectionLayout::curator_lock});
  sharing.start();
  ASSERT_TRUE(sharing.wait_for_leadership(testenv::scaled(10s)));
  std::atomic<bool> selector_led{false};
  LeaderSelector selector(sessions.add(servers), path, [&](const Leadership& term) {
    selector_led = true;
    while (!term.ended_token().stop_requested()) std::this_thread::sleep_for(5ms);
  });
  selector.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(selector_led.load()) << "two leaders";
  EXPECT_FALSE(selector.error());
  EXPECT_TRUE(sharing.resign());
  EXPECT_TRUE(eventually([&] { return selector_led.load() && !sharing.is_leader(); }));
  EXPECT_EQ(terms.load(), 0);
}

// A peer's node that arrives after we queued is found at our next listing (here: the waiter
// ahead of us leaves, and we look again).
TEST_F(ElectionTest, APeerNodeThatArrivesLaterIsRefusedAtTheNextListing) {
  std::vector<std::unique_ptr<LeaderLatch>> latches;
  for (int i = 0; i < 3; ++i) {
    latches.push_back(std::make_unique<LeaderLatch>(sessions.add(servers), path));
    latches.back()->start();
    ASSERT_TRUE(eventually([&] { return nodes().size() == static_cast<std::size_t>(i + 1); }));
  }
  ASSERT_EQ(sole_leader(latches), 0);
  const std::string peer = add_peer_node(raw, path, kKazooLockPrefix);
  latches[1]->close();
  ASSERT_TRUE(eventually([&] { return latches[2]->error() == errc::incompatible_peer; }));
  EXPECT_THROW(latches[2]->wait_for_leadership(0ms), Error);
  EXPECT_TRUE(eventually([&] { return nodes().size() == 2; }));  // the leader's and the peer's
}

}  // namespace
}  // namespace zkr::test
