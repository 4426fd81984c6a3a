// SPDX-License-Identifier: Apache-2.0
// LeaderWatch on real servers: each change of leader told once and in order (resign, close,
// kill), the leader's data, token and session, connection drops and a session replaced under the
// watch, and stop().
#include <gtest/gtest.h>

#include <csignal>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/leader_watch.hpp>

#include "internals.hpp"
#include "session_core.hpp"

#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class LeaderWatchTest : public ServerTest {
 protected:
  Sessions sessions;
  void TearDown() override { sessions.close_all(); }
};

// What the callback was told, in order.
class Told {
 public:
  LeaderWatch::Callback callback() {
    return [this](const std::optional<Participant>& leader) {
      std::lock_guard guard(mutex_);
      calls_.push_back(leader);
    };
  }
  std::vector<std::optional<Participant>> calls() const {
    std::lock_guard guard(mutex_);
    return calls_;
  }
  // The participant data of each call ("" for nobody).
  std::vector<std::string> data() const {
    std::vector<std::string> out;
    for (const auto& call : calls()) out.push_back(call ? call->data : "");
    return out;
  }
  // The participant data of the latest call ("" for nobody); none before the first call.
  std::optional<std::string> latest_data() const {
    std::lock_guard guard(mutex_);
    if (calls_.empty()) return std::nullopt;
    return calls_.back() ? calls_.back()->data : "";
  }
  std::optional<Participant> last() const {
    std::lock_guard guard(mutex_);
    return calls_.empty() ? std::nullopt : calls_.back();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::optional<Participant>> calls_;
};

TEST_F(LeaderWatchTest, TellsEachChangeOfLeaderOnceAndInOrderEndingWithNobody) {
  Told told;
  Session& watcher = sessions.add(servers);
  LeaderWatch watch(watcher, path, told.callback());
  ASSERT_TRUE(eventually([&] { return told.calls().size() == 1; }));  // the path does not exist yet
  EXPECT_FALSE(told.last());

  Session& first_session = sessions.add(servers);
  LeaderLatch first(first_session, path, {.participant_data = "first"});
  first.start();
  auto term = first.wait_for_leadership(testenv::scaled(10s));
  ASSERT_TRUE(term);
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "first"; }, testenv::scaled(10s)));
  const Participant seen = *told.last();
  EXPECT_EQ(seen.token, term->token());
  EXPECT_EQ(seen.session_id, first_session.id());
  EXPECT_EQ(seen.node, term->node_path().substr(path.size() + 1));
  EXPECT_TRUE(seen.leader);
  EXPECT_EQ(watch.leader()->node, seen.node);

  LeaderLatch second(sessions.add(servers), path, {.participant_data = "second"});
  second.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  ASSERT_TRUE(first.resign());  // second leads; first queues again behind it
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "second"; }));
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  second.close();
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "first"; }));
  first.close();
  ASSERT_TRUE(eventually([&] { return told.latest_data() == ""; }));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(told.data(), (std::vector<std::string>{"", "first", "second", "first", ""}));
  // The second term of "first" is another node, with a larger token.
  const auto calls = told.calls();
  EXPECT_GT(calls[3]->token, calls[1]->token);
  EXPECT_NE(calls[3]->node, calls[1]->node);
  EXPECT_FALSE(watch.error());
}

TEST_F(LeaderWatchTest, AKilledLeaderProcessIsFollowedByItsSuccessor) {
  auto peer = start_peer("elect", servers, path, 2000, "peer");
  auto leader_line = peer->wait_for_line("LEADER", testenv::scaled(15s));
  ASSERT_TRUE(leader_line);
  Told told;
  LeaderWatch watch(sessions.add(servers), path, told.callback());
  ASSERT_TRUE(eventually([&] { return told.last().has_value(); }));
  EXPECT_EQ(told.last()->data, "peer");
  EXPECT_EQ(told.last()->token.value(), number_of(*leader_line));
  LeaderLatch latch(sessions.add(servers), path, {.participant_data = "ours"});
  latch.start();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
  peer->signal(SIGKILL);
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "ours"; }, testenv::scaled(15s)));
  EXPECT_EQ(told.data(), (std::vector<std::string>{"peer", "ours"}));
  EXPECT_EQ(told.last()->token, latch.leadership().token());
}

// The watch's own session is lost (cut off behind a proxy) and replaced; meanwhile the leader
// changed twice. The replacement session reads again and tells the leader as it is now.
TEST_F(LeaderWatchTest, AReplacedSessionReadsAgainAndTellsTheLeaderAsItIsNow) {
  testenv::Proxy proxy(servers);
  Session& watcher = sessions.add(proxy.address(), 3000ms);
  Told told;
  auto close_sessions = sessions.closer();
  LeaderWatch watch(watcher, path, told.callback());
  auto first = std::make_unique<LeaderLatch>(sessions.add(servers), path, ElectionOptions{.participant_data = "first"});
  first->start();
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "first"; }, testenv::scaled(10s)));
  const auto lost_before = watcher.metrics().sessions_lost;
  proxy.blackhole();
  ASSERT_TRUE(eventually([&] { return watcher.metrics().sessions_lost > lost_before; }, testenv::scaled(15s)));
  LeaderLatch second(sessions.add(servers), path, {.participant_data = "second"});
  second.start();
  first.reset();  // closes: second leads while the watch cannot see
  ASSERT_TRUE(second.wait_for_leadership(testenv::scaled(10s)));
  proxy.pass();
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "second"; }, testenv::scaled(20s)));
  EXPECT_EQ(told.data(), (std::vector<std::string>{"", "first", "second"}));
  EXPECT_EQ(told.last()->token, second.leadership().token());
}

// The watches a server keeps, data and children (mntr's zk_watch_count; wchc and wchs list data
// watches only), or -1 if it does not say.
int server_watch_count(const std::string& server) {
  std::istringstream lines(testenv::four_letter_word(server, "mntr"));
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("zk_watch_count\t", 0) == 0) return std::stoi(line.substr(line.find('\t') + 1));
  return -1;
}

// Connection drops (same session): the client sends its watches again on each reconnection and
// the watch reads the leader again there, but it keeps one children watch, not one more per drop
// (the server keeps one per path and session whatever the client does, so it is counted in the
// client too); and that one still tells the next change of leader. A server of its own, and
// participants' nodes made by hand (a participant watches nodes of its own), so that the server's
// watches are the LeaderWatch's alone.
TEST_F(LeaderWatchTest, ReconnectionsPileUpNoWatches) {
  testenv::Cluster cluster({.servers = 1});
  const std::string server = cluster.server_address(0);
  testenv::Proxy proxy(server);
  Session& watcher = sessions.add(proxy.address());
  Session& first_participant = sessions.add(server);
  Session& second_participant = sessions.add(server);
  Told told;
  auto close_sessions = sessions.closer();
  first_participant.create(path.substr(0, path.rfind('/')));
  first_participant.create(path);
  first_participant.create(path + "/" + kCuratorLatchPrefix, "first", CreateMode::ephemeral_sequential);
  LeaderWatch watch(watcher, path, told.callback());
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "first"; }, testenv::scaled(10s)));
  const auto& core = detail::Internals::core(watcher);
  EXPECT_EQ(core->pending_watches(), 1u);
  EXPECT_EQ(server_watch_count(server), 1);
  constexpr int kDrops = 5;
  for (int drop = 0; drop < kDrops; ++drop) {
    const auto before = watcher.metrics().suspensions;
    proxy.reset();
    ASSERT_TRUE(eventually(
        [&] {
          const auto metrics = watcher.metrics();
          return metrics.suspensions > before && metrics.state == SessionState::connected;
        },
        testenv::scaled(10s)))
        << "drop " << drop;
    watcher.exists(path);  // answered after the watch's listing on reconnection
  }
  EXPECT_TRUE(eventually([&] { return core->pending_watches() == 1; }, testenv::scaled(2s)))
      << core->pending_watches() << " watches pending in the client after " << kDrops << " drops";
  EXPECT_EQ(server_watch_count(server), 1);
  second_participant.create(path + "/" + kCuratorLatchPrefix, "second", CreateMode::ephemeral_sequential);
  first_participant.close();  // its node goes with its session
  ASSERT_TRUE(eventually([&] { return told.latest_data() == "second"; }, testenv::scaled(10s)));
  EXPECT_EQ(told.data(), (std::vector<std::string>{"first", "second"}));
  EXPECT_TRUE(eventually([&] { return core->pending_watches() == 1; }));
  EXPECT_FALSE(watch.error());
}

TEST_F(LeaderWatchTest, StopEndsTheCallsEvenFromTheCallbackItself) {
  Session& session = sessions.add(servers);
  std::atomic<int> calls{0};
  std::unique_ptr<LeaderWatch> watch;
  std::mutex mutex;
  {
    std::lock_guard guard(mutex);  // the first call waits until `watch` is set
    watch = std::make_unique<LeaderWatch>(session, path, [&](const std::optional<Participant>&) {
      std::lock_guard inner(mutex);
      ++calls;
      watch->stop();  // returns at once from the callback
    });
  }
  ASSERT_TRUE(eventually([&] { return calls.load() == 1; }));
  LeaderLatch latch(sessions.add(servers), path);
  latch.start();
  ASSERT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(watch->leader());
}

TEST_F(LeaderWatchTest, BadArgumentsAreRefusedAndAClosedSessionStopsTheWatch) {
  Session& session = sessions.add(servers);
  try {
    LeaderWatch watch(session, "relative", [](const std::optional<Participant>&) {});
    FAIL() << "accepted a relative path";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_path);
  }
  try {
    LeaderWatch watch(session, path, nullptr);
    FAIL() << "accepted an empty callback";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
  }
  LeaderWatch watch(session, path, [](const std::optional<Participant>&) {});
  session.close();
  EXPECT_TRUE(eventually([&] { return watch.error() == errc::session_closed; }));
}

}  // namespace
}  // namespace zkr::test
