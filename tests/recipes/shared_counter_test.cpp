// SPDX-License-Identifier: Apache-2.0
// SharedCounter on real servers: each layout's bytes exactly as the peers write them, data of
// another layout refused and left alone, no wrapping, concurrent adds summing exactly, a lost
// reply never applied twice, and the listener's values, stale and fresh across a dropped
// connection, an expired session and a restarted server.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <zkr/asio.hpp>
#include <zkr/error.hpp>
#include <zkr/shared_counter.hpp>

#include "internals.hpp"
#include "session_core.hpp"

#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class SharedCounterTest : public ServerTest {
 protected:
  Sessions sessions;
  void TearDown() override { sessions.close_all(); }

  // The node's bytes as the server keeps them, or nullopt if there is no node.
  std::optional<std::string> raw_data(const std::string& node) {
    char buffer[256];
    int length = sizeof buffer;
    Stat stat{};
    const int rc = zoo_get(raw.handle(), node.c_str(), 0, buffer, &length, &stat);
    if (rc == ZNONODE) return std::nullopt;
    if (rc != ZOK) throw std::runtime_error(std::string("zoo_get: ") + zerror(rc));
    return std::string(buffer, static_cast<std::size_t>(std::max(length, 0)));
  }
  void make_parent() { raw.create(path.substr(0, path.rfind('/'))); }
};

// What a listener was told, in order.
class Updates {
 public:
  SharedCounter::Listener listener() {
    return [this](const CounterUpdate& update) {
      std::lock_guard guard(mutex_);
      updates_.push_back(update);
    };
  }
  std::vector<CounterUpdate> all() const {
    std::lock_guard guard(mutex_);
    return updates_;
  }
  std::optional<CounterUpdate> last() const {
    std::lock_guard guard(mutex_);
    return updates_.empty() ? std::nullopt : std::optional(updates_.back());
  }
  bool last_is(std::int64_t value, bool stale) const {
    auto update = last();
    return update && update->value == value && update->stale == stale && !update->error;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<CounterUpdate> updates_;
};

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

TEST_F(SharedCounterTest, EachLayoutWritesExactlyThePeersBytes) {
  Session& session = sessions.add(servers);
  struct Case {
    CounterLayout layout;
    std::string five, minus_two;
  };
  const std::vector<Case> cases = {
      {CounterLayout::curator_atomic_long, bytes({0, 0, 0, 0, 0, 0, 0, 5}),
       bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})},
      {CounterLayout::curator_shared_count, bytes({0, 0, 0, 5}), bytes({0xff, 0xff, 0xff, 0xfe})},
      {CounterLayout::kazoo, "5", "-2"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(to_string(c.layout)));
    const std::string node = path + "/" + std::string(to_string(c.layout));
    SharedCounter counter(session, node, {.layout = c.layout});
    EXPECT_EQ(counter.read().version, -1);  // no node: 0, and nothing created by a read
    EXPECT_EQ(counter.get(), 0);
    EXPECT_FALSE(raw_data(node));
    EXPECT_EQ(counter.add(5), 5);  // creates the node and its parent
    EXPECT_EQ(raw_data(node), c.five);
    EXPECT_EQ(counter.add(-7), -2);
    EXPECT_EQ(raw_data(node), c.minus_two);
    EXPECT_EQ(counter.read().version, 1);
    // A peer's bytes read back; empty data (kazoo's ensure_path) reads as 0.
    ASSERT_EQ(zoo_set(raw.handle(), node.c_str(), c.five.data(), static_cast<int>(c.five.size()), -1), ZOK);
    EXPECT_EQ(counter.get(), 5);
    ASSERT_EQ(zoo_set(raw.handle(), node.c_str(), "", 0, -1), ZOK);
    EXPECT_EQ(counter.get(), 0);
    EXPECT_TRUE(counter.compare_and_set(0, 7));
    EXPECT_FALSE(counter.compare_and_set(0, 9));
    EXPECT_EQ(counter.get(), 7);
    counter.set(-2);
    EXPECT_EQ(raw_data(node), c.minus_two);
  }
}

TEST_F(SharedCounterTest, DataOfAnotherLayoutIsRefusedNamingThePathAndNeverOverwritten) {
  Session& session = sessions.add(servers);
  make_parent();
  struct Case {
    CounterLayout layout;
    std::string data, found;
  };
  const std::vector<Case> cases = {
      {CounterLayout::kazoo, "2.5", "the text \"2.5\""},  // a kazoo Counter of floats
      {CounterLayout::kazoo, "99999999999999999999", "past the signed 64-bit range"},
      {CounterLayout::kazoo, bytes({0, 0, 0, 5}), "4 bytes (00 00 00 05)"},
      {CounterLayout::curator_shared_count, bytes({0, 0, 0, 0, 0, 0, 0, 5}), "8 bytes (00 00 00 00 00 00 00 05)"},
      {CounterLayout::curator_atomic_long, "17", "the text \"17\""},
      // kazoo's text as wide as Curator's bytes: it reads as a number in text, so it is kazoo's.
      {CounterLayout::curator_shared_count, "1234", "the text \"1234\""},
      {CounterLayout::curator_shared_count, "-123", "the text \"-123\""},
      {CounterLayout::curator_shared_count, "12.5", "the text \"12.5\""},
      {CounterLayout::curator_shared_count, "-inf", "the text \"-inf\""},
      {CounterLayout::curator_atomic_long, "12345678", "the text \"12345678\""},
      {CounterLayout::curator_atomic_long, "-1234567", "the text \"-1234567\""},
      {CounterLayout::curator_atomic_long, "1.25e+20", "the text \"1.25e+20\""},
      // Printable bytes that repr() of an int never writes: not kazoo's.
      {CounterLayout::kazoo, "+123", "the text \"+123\""},
      {CounterLayout::kazoo, "0012", "the text \"0012\""},
      {CounterLayout::kazoo, "-0", "the text \"-0\""},
      {CounterLayout::kazoo, " 12", "the text \" 12\""},
  };
  for (const auto& c : cases) {
    const std::string node = testenv::unique_path("node");
    raw.create(node.substr(0, node.rfind('/')));
    ASSERT_EQ(raw.create(node, c.data), ZOK);
    SharedCounter counter(session, node, {.layout = c.layout});
    for (int operation = 0; operation < 3; ++operation) {
      try {
        if (operation == 0) counter.get();
        if (operation == 1) counter.add(1);
        if (operation == 2) counter.set(1);
        ADD_FAILURE() << "read " << c.found << " as " << to_string(c.layout);
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), errc::undecodable_data) << e.what();
        EXPECT_EQ(e.path(), node);
        EXPECT_NE(std::string(e.what()).find(c.found), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(std::string(to_string(c.layout))), std::string::npos) << e.what();
      }
    }
    EXPECT_EQ(raw_data(node), c.data);
    EXPECT_EQ(raw.stat(node).version, 0);
  }
}

// Curator's SharedCount holds a Java int: this library never wraps it (nor an int64) but refuses
// the add, and writes nothing.
TEST_F(SharedCounterTest, AResultPastTheLayoutsRangeIsRefusedAndNothingIsWritten) {
  Session& session = sessions.add(servers);
  SharedCounter shared_count(session, path + "/int", {.layout = CounterLayout::curator_shared_count});
  shared_count.set(std::numeric_limits<std::int32_t>::max());
  std::error_code ec;
  shared_count.add(1, {}, ec);
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_EQ(ec, condition::bad_input);
  shared_count.set(std::int64_t{1} << 31, {}, ec);
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_EQ(shared_count.read().value, std::numeric_limits<std::int32_t>::max());
  EXPECT_EQ(shared_count.read().version, 0);
  EXPECT_EQ(shared_count.add(-1), std::numeric_limits<std::int32_t>::max() - 1);

  SharedCounter atomic_long(session, path + "/long", {.layout = CounterLayout::curator_atomic_long});
  atomic_long.set(std::numeric_limits<std::int64_t>::min());
  atomic_long.add(-1, {}, ec);
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_EQ(atomic_long.get(), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(SharedCounter(session, path + "/long", {.layout = CounterLayout::kazoo}).read({}, ec).value, 0);
  EXPECT_EQ(ec, errc::undecodable_data);
}

// The Curator layouts refuse data that reads as a number in text, so they must never write such
// bytes themselves: the few values whose bytes are such text ("1000" is SharedCount's 825241648)
// are refused as out of range, and nothing is written.
TEST_F(SharedCounterTest, TheCuratorLayoutsNeverWriteBytesThatReadAsText) {
  Session& session = sessions.add(servers);
  std::error_code ec;
  SharedCounter shared_count(session, path + "/int", {.layout = CounterLayout::curator_shared_count});
  shared_count.set(825241648, {}, ec);
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_FALSE(raw_data(path + "/int"));
  shared_count.set(825241647);  // "100/"
  EXPECT_EQ(raw_data(path + "/int"), "100/");
  shared_count.add(1, {}, ec);
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_FALSE(shared_count.compare_and_set(825241647, 825373492, {}, ec));
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_EQ(raw_data(path + "/int"), "100/");
  EXPECT_EQ(shared_count.read().version, 0);  // only the create

  SharedCounter atomic_long(session, path + "/long", {.layout = CounterLayout::curator_atomic_long});
  atomic_long.set(3544952156018063160, {}, ec);  // "12345678"
  EXPECT_EQ(ec, errc::out_of_range);
  atomic_long.set(3256439201066202679, {}, ec);  // "-1234567"
  EXPECT_EQ(ec, errc::out_of_range);
  EXPECT_FALSE(raw_data(path + "/long"));
  EXPECT_FALSE(decode_counter(CounterLayout::curator_shared_count, "1234"));
  EXPECT_EQ(decode_counter(CounterLayout::kazoo, "1234"), 1234);

  // The kazoo layout writes such a value as its text, as kazoo does.
  SharedCounter kazoo(session, path + "/text", {.layout = CounterLayout::kazoo});
  kazoo.set(1234);
  EXPECT_EQ(raw_data(path + "/text"), "1234");
}

TEST_F(SharedCounterTest, ConcurrentAddsFromManySessionsSumExactly) {
  constexpr int kSessions = 4, kThreadsPerSession = 2, kAdds = 25;
  for (int i = 0; i < kSessions; ++i) sessions.add(servers);
  std::atomic<std::int64_t> returned_sum{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kSessions * kThreadsPerSession; ++t)
    threads.emplace_back([&, t] {
      SharedCounter counter(sessions[static_cast<std::size_t>(t % kSessions)], path + "/count",
                            {.layout = CounterLayout::curator_shared_count});
      for (int n = 0; n < kAdds; ++n) {
        std::error_code ec;
        const auto value = counter.add(t + 1, {}, ec);
        if (ec) ++failures;
        returned_sum += value;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  std::int64_t expected = 0;
  for (int t = 0; t < kSessions * kThreadsPerSession; ++t) expected += (t + 1) * kAdds;
  SharedCounter counter(sessions[0], path + "/count", {.layout = CounterLayout::curator_shared_count});
  EXPECT_EQ(counter.get(), expected);
  // Every add wrote one version of its own, counted once as applied.
  EXPECT_EQ(counter.read().version, kSessions * kThreadsPerSession * kAdds - 1);
  std::uint64_t applied = 0;
  for (std::size_t i = 0; i < sessions.size(); ++i) applied += sessions[i].metrics().counter_writes;
  EXPECT_EQ(applied, static_cast<std::uint64_t>(kSessions * kThreadsPerSession * kAdds));
}

TEST_F(SharedCounterTest, CompareAndSetComparesValuesAndOperationsEndAtTheirBounds) {
  Session& session = sessions.add(servers);
  SharedCounter counter(session, path + "/cas", {.layout = CounterLayout::kazoo, .timeout = 2000ms});
  EXPECT_FALSE(counter.compare_and_set(1, 2));  // a missing node holds 0
  EXPECT_FALSE(raw_data(path + "/cas"));
  EXPECT_TRUE(counter.compare_and_set(0, 2));
  EXPECT_TRUE(counter.compare_and_set(2, 2));  // same value: written, a new version
  EXPECT_EQ(counter.read().version, 1);
  std::stop_source stop;
  stop.request_stop();
  std::error_code ec;
  counter.add(1, stop.get_token(), ec);
  EXPECT_EQ(ec, errc::cancelled);
  EXPECT_EQ(counter.get(), 2);
  try {
    SharedCounter(session, "relative");
    FAIL() << "accepted a relative path";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_path);
  }
  EXPECT_FALSE(SharedCounter::make(session, path, {.timeout = -1ms}, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
  EXPECT_THROW((void)counter.on_change(nullptr), Error);
  // No connection within the operation's bound: timed out, nothing written.
  testenv::Proxy proxy(servers);
  Session& cut = sessions.add(proxy.address());
  SharedCounter far(cut, path + "/cas", {.layout = CounterLayout::kazoo, .timeout = 300ms});
  proxy.blackhole();
  proxy.reset();
  proxy.blackhole();
  ASSERT_TRUE(eventually([&] { return cut.state() != SessionState::connected; }));
  far.add(1, {}, ec);
  EXPECT_EQ(ec, errc::timed_out);
  proxy.pass();
  EXPECT_EQ(counter.get(), 2);
}

// The server applies the add and its reply is lost: the counter reads the node again, finds its
// own bytes at the next version, and cannot tell its write from another writer's identical one:
// it says the outcome is unknown, and it never adds twice.
TEST_F(SharedCounterTest, ALostReplyNeverAppliesAnAddTwice) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address());
  SharedCounter counter(session, path + "/lost", {.layout = CounterLayout::curator_atomic_long});
  EXPECT_EQ(counter.add(10), 10);
  for (int opcode : {5 /* setData */}) {
    proxy.drop_next_reply({opcode});
    std::error_code ec;
    counter.add(1, {}, ec);
    EXPECT_EQ(ec, zk_errc::connection_loss);
    EXPECT_EQ(ec, condition::connection_trouble);
    EXPECT_EQ(proxy.dropped_replies(), 1);
    EXPECT_EQ(counter.get(), 11);  // applied once
    EXPECT_EQ(counter.read().version, 1);
  }
  // The same for the create of a missing node.
  SharedCounter fresh(session, path + "/lost-create", {.layout = CounterLayout::kazoo});
  proxy.drop_next_reply({1, 15});
  std::error_code ec;
  fresh.add(3, {}, ec);
  EXPECT_EQ(ec, zk_errc::connection_loss);
  EXPECT_NE(ec.message().size(), 0u);
  EXPECT_EQ(raw_data(path + "/lost-create"), "3");
  EXPECT_EQ(fresh.add(1), 4);  // and the counter carries on
  EXPECT_EQ(session.metrics().counter_unknown_outcomes, 2u);
}

TEST_F(SharedCounterTest, ListenerIsToldEachValueAndStaleAcrossADroppedConnection) {
  testenv::Proxy proxy(servers);
  Session& watcher = sessions.add(proxy.address());
  Session& writer = sessions.add(servers);
  Updates updates;
  auto close_sessions = sessions.closer();
  SharedCounter watched(watcher, path + "/watched", {.layout = CounterLayout::curator_shared_count});
  SharedCounter counter(writer, path + "/watched", {.layout = CounterLayout::curator_shared_count});
  auto subscription = watched.on_change(updates.listener());
  ASSERT_TRUE(eventually([&] { return updates.last_is(0, false); }));  // no node yet
  EXPECT_EQ(updates.last()->version, -1);
  counter.add(2);  // the missing node is looked at again within half a second
  ASSERT_TRUE(eventually([&] { return updates.last_is(2, false); }));
  counter.add(3);
  ASSERT_TRUE(eventually([&] { return updates.last_is(5, false); }));
  EXPECT_EQ(updates.last()->version, 1);

  const auto before = updates.all().size();
  proxy.blackhole();
  ASSERT_TRUE(eventually([&] { return updates.last_is(5, true); }));  // the client noticed the silence
  counter.add(1);  // while the watcher is cut off
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return updates.last_is(6, false); }));
  proxy.reset();  // a drop with no change: stale, then fresh with the same value
  ASSERT_TRUE(eventually([&] {
    const auto all = updates.all();
    return all.size() >= before + 4 && updates.last_is(6, false);
  }));
  auto all = updates.all();
  std::vector<std::pair<std::int64_t, bool>> told;
  for (std::size_t i = before; i < all.size(); ++i) told.emplace_back(all[i].value, all[i].stale);
  EXPECT_EQ(told, (std::vector<std::pair<std::int64_t, bool>>{{5, true}, {6, false}, {6, true}, {6, false}}));

  // Data that does not decode is told as an error with the last good value; a fix is told again.
  ASSERT_EQ(zoo_set(raw.handle(), (path + "/watched").c_str(), "x", 1, -1), ZOK);
  ASSERT_TRUE(eventually([&] { return updates.last() && updates.last()->error == errc::undecodable_data; }));
  EXPECT_EQ(updates.last()->value, 6);
  std::error_code ec;
  counter.set(1, {}, ec);  // refused: the data is not this layout's
  EXPECT_EQ(ec, errc::undecodable_data);
  ASSERT_EQ(zoo_set(raw.handle(), (path + "/watched").c_str(), bytes({0, 0, 0, 8}).data(), 4, -1), ZOK);
  ASSERT_TRUE(eventually([&] { return updates.last_is(8, false); }));
  subscription.reset();
  const auto told_count = updates.all().size();
  counter.add(1);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(updates.all().size(), told_count);
}

TEST_F(SharedCounterTest, AnExpiredSessionMakesTheListenerSayStaleUntilTheNewSessionReadsAgain) {
  testenv::Proxy proxy(servers);
  Session& watcher = sessions.add(proxy.address(), 3000ms);
  Session& writer = sessions.add(servers);
  Updates updates;
  auto close_sessions = sessions.closer();
  SharedCounter counter(writer, path + "/expiry", {.layout = CounterLayout::kazoo});
  counter.add(1);
  auto subscription = SharedCounter(watcher, path + "/expiry", {.layout = CounterLayout::kazoo}).on_change(updates.listener());
  ASSERT_TRUE(eventually([&] { return updates.last_is(1, false); }));
  const auto id = detail::Internals::core(watcher)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return updates.last_is(1, true); }));
  counter.add(1);
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return updates.last_is(2, false); }, testenv::scaled(15s)));
  EXPECT_NE(watcher.id(), id.session_id);
  counter.add(1);  // the new session's watch
  ASSERT_TRUE(eventually([&] { return updates.last_is(3, false); }));
  watcher.close();
  ASSERT_TRUE(eventually([&] { return updates.last() && updates.last()->error == errc::session_closed; }));
  EXPECT_TRUE(updates.last()->stale);
}

TEST_F(SharedCounterTest, AddsCarryOnAcrossAServerRestartAndTheListenerResynchronises) {
  testenv::Cluster cluster({.servers = 1});
  const std::string server = cluster.connect_string();
  Session& session = sessions.add(server);
  Updates updates;
  auto close_sessions = sessions.closer();
  SharedCounter counter(session, path + "/restart", {.layout = CounterLayout::curator_atomic_long,
                                                     .timeout = testenv::scaled(20s)});
  auto subscription = counter.on_change(updates.listener());
  EXPECT_EQ(counter.add(1), 1);
  ASSERT_TRUE(eventually([&] { return updates.last_is(1, false); }));
  cluster.kill(0);
  ASSERT_TRUE(eventually([&] { return updates.last_is(1, true); }));
  std::atomic<bool> added{false};
  std::thread adder([&] {
    std::error_code ec;
    counter.add(1, {}, ec);  // waits for the server (its bound is 20 s)
    added = !ec;
  });
  std::this_thread::sleep_for(300ms);
  cluster.start(0);
  adder.join();
  EXPECT_TRUE(added.load());
  ASSERT_TRUE(eventually([&] { return updates.last_is(2, false); }, testenv::scaled(15s)));
  EXPECT_EQ(counter.get(), 2);
}

// The Asio forms: each completes once, through the handler's executor (here the io_context run on
// this thread), as outstanding work of it; stop requested before or while an operation waits for
// the connection ends it with errc::cancelled and writes nothing.
TEST_F(SharedCounterTest, AsioFormsCompleteOnTheCallersExecutorAndStopCancelsThem) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 2000ms);
  SharedCounter counter(session, path, {.layout = CounterLayout::kazoo});
  boost::asio::io_context io;
  const auto io_thread = std::this_thread::get_id();
  std::vector<std::string> told;
  const auto on_io = [&](auto handler) { return boost::asio::bind_executor(io, std::move(handler)); };
  asio::async_add(counter, 5, on_io([&](std::exception_ptr error, std::int64_t written) {
    EXPECT_FALSE(error);
    EXPECT_EQ(std::this_thread::get_id(), io_thread);
    told.push_back("added " + std::to_string(written));
    asio::async_compare_and_set(counter, 5, 7, on_io([&](std::exception_ptr set_error, bool wrote) {
      EXPECT_FALSE(set_error);
      EXPECT_EQ(std::this_thread::get_id(), io_thread);
      told.push_back(wrote ? "set" : "not set");
      asio::async_get(counter, on_io([&](std::exception_ptr get_error, std::int64_t value) {
        EXPECT_FALSE(get_error);
        EXPECT_EQ(std::this_thread::get_id(), io_thread);
        told.push_back("got " + std::to_string(value));
      }));
    }));
  }));
  io.run();  // returns once the three have completed: each was work of the io_context
  EXPECT_EQ(told, (std::vector<std::string>{"added 5", "set", "got 7"}));
  EXPECT_FALSE(asio::async_compare_and_set(counter, 5, 9, boost::asio::use_future).get());

  std::stop_source stopped_before;
  stopped_before.request_stop();
  auto refused = asio::async_add(counter, 1, boost::asio::use_future, stopped_before.get_token());
  try {
    refused.get();
    ADD_FAILURE() << "an add with stop requested completed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), make_error_code(errc::cancelled));
  }

  proxy.blackhole();
  ASSERT_TRUE(eventually([&] { return session.state() != SessionState::connected; }));
  std::stop_source stop;
  auto waiting = asio::async_add(counter, 1, boost::asio::use_future, stop.get_token());
  EXPECT_EQ(waiting.wait_for(100ms), std::future_status::timeout) << "completed without a connection";
  stop.request_stop();
  ASSERT_EQ(waiting.wait_for(testenv::scaled(10s)), std::future_status::ready);
  try {
    waiting.get();
    ADD_FAILURE() << "a stopped add completed";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), make_error_code(errc::cancelled));
  }
  proxy.pass();
  EXPECT_EQ(asio::async_get(counter, boost::asio::use_future).get(), 7);
  EXPECT_EQ(raw_data(path), "7");
}

// Each Asio form runs its operation on a thread of its own, with a copy of the counter: that copy
// (a reference to the session) is dropped before the handler is called, so once the handler ran
// the Session can be destroyed and nothing of it is left. A handler with no executor of its own
// runs on that thread: neither the caller's nor the session's callback thread, so it may block
// without holding up the session's callbacks.
TEST_F(SharedCounterTest, AsioFormsLetGoOfTheSessionBeforeTheHandlerRuns) {
  auto session = std::make_unique<Session>(session_options(servers));
  auto counter = std::make_unique<SharedCounter>(*session, path, CounterOptions{.layout = CounterLayout::kazoo});
  std::weak_ptr<detail::SessionCore> core = detail::Internals::core(*session);
  std::promise<std::thread::id> callback_thread;
  auto subscription = counter->on_change([&, told = false](const CounterUpdate&) mutable {
    if (!std::exchange(told, true)) callback_thread.set_value(std::this_thread::get_id());
  });
  const auto session_thread = callback_thread.get_future().get();
  subscription.reset();

  // A plain handler runs on the operation's thread, and may block there: the session is not
  // held up, and the thread no longer holds it.
  std::promise<std::thread::id> entered;
  std::promise<void> release;
  auto released = release.get_future().share();
  asio::async_add(*counter, 1, [&, released](std::exception_ptr error, std::int64_t) {
    EXPECT_FALSE(error);
    entered.set_value(std::this_thread::get_id());
    released.wait();
  });
  const auto handler_thread = entered.get_future().get();
  EXPECT_NE(handler_thread, std::this_thread::get_id());
  EXPECT_NE(handler_thread, session_thread);
  counter.reset();
  session.reset();
  EXPECT_TRUE(core.expired()) << "the operation's thread still held the session in the handler";
  release.set_value();

  // A handler bound to an io_context: the same, seen from the io_context's thread.
  session = std::make_unique<Session>(session_options(servers));
  counter = std::make_unique<SharedCounter>(*session, path, CounterOptions{.layout = CounterLayout::kazoo});
  core = detail::Internals::core(*session);
  boost::asio::io_context io;
  bool expired_in_handler = false;
  asio::async_get(*counter, boost::asio::bind_executor(io, [&](std::exception_ptr error, std::int64_t value) {
    EXPECT_FALSE(error);
    EXPECT_EQ(value, 1);
    counter.reset();
    session.reset();
    expired_in_handler = core.expired();
  }));
  io.run();
  EXPECT_TRUE(expired_in_handler);
}

}  // namespace
}  // namespace zkr::test
