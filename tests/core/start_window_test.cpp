// SPDX-License-Identifier: Apache-2.0
// The session's start window (SessionOptions::max_starting_acquisitions) against a real server:
// a burst of async acquisitions sends only the window's creates at once and still grants every one,
// in order; what must end promptly (a deadline, a stop token, a try) is never held back; a waiter
// gives its slot back once it waits on a watch; held-back acquisitions outlive their Lock object
// and are answered when the session closes first; their records' memory goes back once all started.
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

using namespace std::chrono_literals;

// Answers of async acquisitions, in the order they came, waited for with a bound.
struct Answers {
  explicit Answers(std::size_t count) : held(count), errors(count), order() {}
  AcquireHandler handler(std::size_t i) {
    return [this, i](std::error_code ec, HeldLock granted) {
      std::lock_guard guard(mutex);
      errors[i] = ec;
      held[i] = std::move(granted);
      order.push_back(i);
      changed.notify_all();
    };
  }
  bool wait_for(std::size_t count, std::chrono::milliseconds bound = testenv::scaled(30s)) {
    std::unique_lock guard(mutex);
    return changed.wait_for(guard, bound, [&] { return order.size() >= count; });
  }
  std::size_t answered() {
    std::lock_guard guard(mutex);
    return order.size();
  }
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<HeldLock> held;
  std::vector<std::error_code> errors;
  std::vector<std::size_t> order;
};

class StartWindowTest : public ServerTest {
 protected:
  // A session through `proxy` (so that replies can be slowed) with a window of `window`.
  std::unique_ptr<Session> session_with_window(testenv::Proxy& proxy, std::size_t window) {
    SessionOptions options;
    options.servers = proxy.address();
    options.max_starting_acquisitions = window;
    return std::make_unique<Session>(options);
  }
  // `count` locks on paths that exist (a missing path costs the requests that create it).
  std::vector<std::unique_ptr<Lock>> locks(Session& session, std::size_t count) {
    for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
      raw.create(path.substr(0, slash));
      if (slash == std::string::npos) break;
    }
    std::vector<std::unique_ptr<Lock>> made;
    for (std::size_t i = 0; i < count; ++i) {
      const auto lock_path = fmt::format("{}/l{:02}", path, i);
      EXPECT_EQ(raw.create(lock_path), ZOK) << lock_path;
      made.push_back(std::make_unique<Lock>(session, lock_path));
    }
    return made;
  }
  static std::uint64_t requests(const Session& session) {
    const SessionMetrics metrics = session.metrics();
    return metrics.requests_sent - metrics.heartbeats_sent;
  }
  // Asks for every lock of `made` at once, waiting for ever, with replies slowed to a round trip of
  // 60 ms so that none comes back meanwhile; returns the requests the session sent by then.
  std::uint64_t burst(testenv::Proxy& proxy, Session& session, const std::vector<std::unique_ptr<Lock>>& made,
                      Answers& answers) {
    proxy.set_latency(30ms);
    const auto before = requests(session);
    for (std::size_t i = 0; i < made.size(); ++i) made[i]->async_acquire(-1ns, answers.handler(i));
    return requests(session) - before;
  }
};

TEST_F(StartWindowTest, ABurstSendsOnlyTheWindowAtOnceAndGrantsEveryLockInOrder) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 4);
  auto made = locks(*session, 40);
  Answers answers(made.size());
  const auto before = requests(*session);
  // Four acquisitions started: each a create and a listing.
  EXPECT_EQ(burst(proxy, *session, made, answers), 8u);
  ASSERT_TRUE(answers.wait_for(made.size())) << answers.answered() << " of 40 answered";
  for (std::size_t i = 0; i < made.size(); ++i) {
    EXPECT_FALSE(answers.errors[i]) << i << ": " << answers.errors[i].message();
    EXPECT_TRUE(answers.held[i]) << i;
  }
  // Admitted in the order asked, so created in that order: the tokens grow with the index.
  for (std::size_t i = 1; i < made.size(); ++i)
    EXPECT_GT(answers.held[i].token(), answers.held[i - 1].token()) << i;
  EXPECT_EQ(requests(*session) - before, 80u);  // nothing more than the 40 acquisitions' own
  for (auto& held : answers.held) held.release();
}

TEST_F(StartWindowTest, ZeroMeansNoWindow) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 0);
  auto made = locks(*session, 20);
  Answers answers(made.size());
  EXPECT_EQ(burst(proxy, *session, made, answers), 40u);
  ASSERT_TRUE(answers.wait_for(made.size()));
  for (std::size_t i = 0; i < made.size(); ++i) EXPECT_FALSE(answers.errors[i]) << i;
}

TEST_F(StartWindowTest, ADeadlineAStopTokenATryAndABlockingCallAreNeverHeldBack) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 1);
  auto made = locks(*session, 6);
  proxy.set_latency(30ms);
  Answers answers(made.size());
  const auto before = requests(*session);
  made[0]->async_acquire(-1ns, answers.handler(0));  // takes the only slot
  made[1]->async_acquire(-1ns, answers.handler(1));  // held back
  EXPECT_EQ(requests(*session) - before, 2u);
  std::stop_source stop;
  made[2]->async_acquire(5s, answers.handler(2));
  made[3]->async_acquire(-1ns, answers.handler(3), stop.get_token());
  made[4]->async_acquire(0ns, answers.handler(4));
  EXPECT_EQ(requests(*session) - before, 8u);  // three more started at once
  std::optional<HeldLock> blocking = made[5]->try_acquire_for(5s);  // would wait for lock 0 otherwise
  ASSERT_TRUE(blocking);
  EXPECT_TRUE(*blocking);
  ASSERT_TRUE(answers.wait_for(5));
  for (std::size_t i = 0; i < 5; ++i) EXPECT_FALSE(answers.errors[i]) << i << ": " << answers.errors[i].message();
}

TEST_F(StartWindowTest, AWaiterGivesItsSlotBackOnceItWaitsOnAWatch) {
  Session other(session_options(servers));
  Lock contended_by_other(other, path + "/busy");
  HeldLock busy = contended_by_other.acquire();
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 1);
  Lock contended(*session, path + "/busy");
  auto made = locks(*session, 3);
  Answers waiter(1), free_locks(made.size());
  contended.async_acquire(-1ns, waiter.handler(0));
  for (std::size_t i = 0; i < made.size(); ++i) made[i]->async_acquire(-1ns, free_locks.handler(i));
  // The waiter queued behind `busy` and freed its slot: the free locks are granted meanwhile.
  ASSERT_TRUE(free_locks.wait_for(made.size(), testenv::scaled(10s))) << free_locks.answered() << " of 3";
  EXPECT_EQ(waiter.answered(), 0u);
  busy.release();
  ASSERT_TRUE(waiter.wait_for(1));
  EXPECT_FALSE(waiter.errors[0]);
  EXPECT_GT(waiter.held[0].token(), busy.token());
}

TEST_F(StartWindowTest, AHeldBackAcquisitionOutlivesItsLockObject) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 1);
  proxy.set_latency(20ms);
  Answers answers(5);
  // Owner data of several lengths (none, short, longer than a path): the held-back record keeps
  // each Lock's path and owner data side by side.
  auto owner_data = [](std::size_t i) { return std::string(i * 37, static_cast<char>('a' + i)); };
  for (std::size_t i = 0; i < 5; ++i) {
    Lock temporary(*session, fmt::format("{}/t{}", path, i), {.owner_data = owner_data(i)});
    temporary.async_acquire(-1ns, answers.handler(i));
  }  // each Lock is gone before its acquisition starts
  ASSERT_TRUE(answers.wait_for(5));
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_FALSE(answers.errors[i]) << i;
    EXPECT_EQ(answers.held[i].node_path().rfind(fmt::format("{}/t{}/", path, i), 0), 0u) << answers.held[i].node_path();
    if (i == 0) continue;  // no owner data: the default's
    char data[256];
    int length = sizeof data;
    ASSERT_EQ(zoo_get(raw.handle(), answers.held[i].node_path().c_str(), 0, data, &length, nullptr), ZOK);
    EXPECT_EQ(std::string(data, static_cast<std::size_t>(length)), owner_data(i)) << i;
  }
}

// A burst's held-back records live in a pool of the session's own (SessionCore::
// start_record_memory_locked), which goes back to the process heap once the last has started.
TEST_F(StartWindowTest, HeldBackRecordsGiveTheirMemoryBackOnceAllHaveStarted) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 1);
  auto made = locks(*session, 20);
  const auto& core = detail::Internals::core(*session);
  EXPECT_EQ(core->start_record_memory_in_use(), 0u);
  Answers answers(made.size());
  burst(proxy, *session, made, answers);
  EXPECT_GT(core->start_record_memory_in_use(), 19 * sizeof(void*)) << "19 acquisitions are held back";
  ASSERT_TRUE(answers.wait_for(made.size())) << answers.answered() << " of 20 answered";
  EXPECT_TRUE(eventually([&] { return core->start_record_memory_in_use() == 0; }))
      << core->start_record_memory_in_use() << " bytes kept";
  for (std::size_t i = 0; i < made.size(); ++i) EXPECT_FALSE(answers.errors[i]) << i;
  for (auto& held : answers.held) held.release();
}

TEST_F(StartWindowTest, HeldBackAcquisitionsAreAnsweredWhenTheSessionClosesAndLeaveNoNode) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 2);
  auto made = locks(*session, 12);
  Answers answers(made.size());
  burst(proxy, *session, made, answers);
  session->close();
  ASSERT_TRUE(answers.wait_for(made.size(), testenv::scaled(10s))) << answers.answered() << " of 12";
  for (std::size_t i = 2; i < made.size(); ++i)
    EXPECT_EQ(answers.errors[i], make_error_code(errc::session_closed)) << i << ": " << answers.errors[i].message();
  proxy.set_latency(0ms);
  for (std::size_t i = 0; i < made.size(); ++i)
    EXPECT_TRUE(eventually([&] { return raw.children(fmt::format("{}/l{:02}", path, i)).empty(); })) << i;
}

TEST_F(StartWindowTest, ABatchIsNeverHeldBack) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 1);
  auto made = locks(*session, 10);
  proxy.set_latency(30ms);
  Answers answers(made.size());
  const auto before = requests(*session);
  {
    AcquisitionBatch batch(*session);
    for (std::size_t i = 0; i < made.size(); ++i) made[i]->async_acquire(-1ns, answers.handler(i));
  }
  // Sent as the batch closed, before any reply: a multi-op per parent and one of the listings.
  EXPECT_EQ(requests(*session) - before, 11u);
  ASSERT_TRUE(answers.wait_for(made.size()));
  for (std::size_t i = 0; i < made.size(); ++i) EXPECT_FALSE(answers.errors[i]) << i;
}

TEST_F(StartWindowTest, ReadWriteLocksShareTheWindow) {
  testenv::Proxy proxy(servers);
  auto session = session_with_window(proxy, 2);
  std::vector<std::unique_ptr<ReadWriteLock>> made;
  for (int i = 0; i < 6; ++i) made.push_back(std::make_unique<ReadWriteLock>(*session, fmt::format("{}/rw{}", path, i)));
  proxy.set_latency(30ms);
  Answers answers(made.size());
  const auto before = requests(*session);
  for (std::size_t i = 0; i < made.size(); ++i)
    (i % 2 ? made[i]->read_lock() : made[i]->write_lock()).async_acquire(-1ns, answers.handler(i));
  EXPECT_EQ(requests(*session) - before, 4u);
  ASSERT_TRUE(answers.wait_for(made.size()));
  for (std::size_t i = 0; i < made.size(); ++i) EXPECT_FALSE(answers.errors[i]) << i;
}

}  // namespace
}  // namespace zkr::test
