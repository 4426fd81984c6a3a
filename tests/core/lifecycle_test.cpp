// SPDX-License-Identifier: Apache-2.0
// The session's lifecycle against user code: close, destroy, release and cancel from every callback
// the library runs (loss callbacks, state listeners, asynchronous handlers), from other threads at
// the same time, and during each phase of an acquisition. Nothing may hang, crash or leak, and
// every holder and every pending acquisition must hear how it ended. Real server.
//
// A hang here would hang the suite: each scenario runs on a thread of its own and, past a bound,
// the test reports the hang and ends the process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>

#include "internals.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

// Runs `scenario` and waits for it at most `bound`; a scenario that does not finish is a deadlock:
// reported, and the process ends (a deadlocked thread can be neither joined nor left behind).
void finishes_within(std::chrono::milliseconds bound, const char* what, std::function<void()> scenario) {
  auto task = std::make_shared<std::packaged_task<void()>>(std::move(scenario));
  auto done = task->get_future();
  std::thread([task] { (*task)(); }).detach();
  if (done.wait_for(testenv::scaled(bound)) != std::future_status::ready) {
    ADD_FAILURE() << what << " did not finish within " << bound.count() << " ms: deadlock";
    std::fprintf(stderr, "lifecycle_test: %s deadlocked; ending the process\n", what);
    std::_Exit(1);
  }
  done.get();  // rethrows a failure of the scenario
}

class LifecycleTest : public ServerTest {
 protected:
  // A real server-side expiry of a session that talks through `proxy`: cut off first, so that it
  // cannot reconnect (and take the session back) in between, then let it learn.
  void expire_behind(testenv::Proxy& proxy, const Session& session) {
    auto id = detail::Internals::core(session)->client_id();
    proxy.blackhole();
    testenv::expire_session(servers, id.session_id, id.password);
    proxy.reset();
  }
};

// An on_lost that closes the session, while close() runs on another thread.
TEST_F(LifecycleTest, OnLostClosingTheSessionWhileAnotherThreadClosesIt) {
  finishes_within(20s, "close() racing a close() from on_lost", [&] {
    Session session(session_options(servers));
    Lock first(session, path + "/a"), second(session, path + "/b");
    HeldLock a = first.acquire(), b = second.acquire();
    std::atomic<int> told{0};
    a.on_lost([&](LossReason) {
      session.close();
      ++told;
    });
    b.on_lost([&](LossReason) { ++told; });
    session.close();
    EXPECT_TRUE(eventually([&] { return told == 2; }));
  });
}

// close() from an asynchronous handler (the callback thread): the other holders are told (stop
// token and on_lost), and a pending acquisition completes with session_closed.
TEST_F(LifecycleTest, CloseFromAnAsyncHandlerTellsEveryHolderAndEndsPendingAcquisitions) {
  finishes_within(30s, "close() from an async handler", [&] {
    Session other(session_options(servers));
    Lock blocker_lock(other, path + "/blocked");
    HeldLock blocker = blocker_lock.acquire();

    Session session(session_options(servers));
    Lock held_lock(session, path + "/held"), pending_lock(session, path + "/blocked"),
        trigger_lock(session, path + "/trigger");
    HeldLock held = held_lock.acquire();
    std::promise<LossReason> held_told;
    held.on_lost([&](LossReason reason) { held_told.set_value(reason); });
    std::promise<std::error_code> pending_outcome;
    pending_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock) { pending_outcome.set_value(ec); });
    ASSERT_TRUE(eventually([&] { return raw.children(path + "/blocked").size() == 2; }));

    std::promise<void> closed_in_handler;
    trigger_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock) {
      EXPECT_FALSE(ec);
      session.close();  // on the callback thread
      closed_in_handler.set_value();
    });
    auto told = held_told.get_future();
    ASSERT_EQ(told.wait_for(testenv::scaled(10s)), std::future_status::ready);
    EXPECT_EQ(told.get(), LossReason::session_closed);
    EXPECT_TRUE(held.lost_token().stop_requested());
    auto outcome = pending_outcome.get_future();
    ASSERT_EQ(outcome.wait_for(testenv::scaled(10s)), std::future_status::ready);
    EXPECT_EQ(outcome.get(), errc::session_closed);
    closed_in_handler.get_future().wait();
    session.close();  // from this thread: waits for the close begun in the handler
    EXPECT_EQ(session.state(), SessionState::closed);
    // The session's nodes went with it; only the other session's holder is left.
    EXPECT_TRUE(eventually([&] { return raw.children(path + "/blocked").size() == 1; }));
    EXPECT_TRUE(raw.children(path + "/held").empty());
  });
}

// Holders hear of a normal close() before their nodes go: by the time another session can see
// the node gone, the holder's loss callback has run.
TEST_F(LifecycleTest, HoldersAreToldBeforeTheirNodesGoOnANormalClose) {
  finishes_within(30s, "a normal close()", [&] {
    Session session(session_options(servers));
    Session waiter(session_options(servers));
    Lock lock(session, path), waiter_lock(waiter, path);
    HeldLock held = lock.acquire();
    std::atomic<std::int64_t> told_at{0}, granted_at{0};
    auto now_ns = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
    held.on_lost([&](LossReason) {
      std::this_thread::sleep_for(200ms);  // a holder that takes a moment to stop
      told_at = now_ns();
    });
    std::promise<void> granted;
    waiter_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock) {
      EXPECT_FALSE(ec);
      granted_at = now_ns();
      granted.set_value();
    });
    ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));
    session.close();
    ASSERT_EQ(granted.get_future().wait_for(testenv::scaled(10s)), std::future_status::ready);
    EXPECT_NE(told_at.load(), 0);
    EXPECT_LT(told_at.load(), granted_at.load());
  });
}

// Destroying the Session inside its own callbacks: a state listener, a loss callback, an async
// handler. (Under AddressSanitizer this used to be a use after free.)
TEST_F(LifecycleTest, DestroyingTheSessionInsideItsOwnCallbacks) {
  finishes_within(30s, "destroying the Session in a state listener", [&] {
    testenv::Proxy proxy(servers);
    auto session = std::make_unique<Session>(session_options(proxy.address()));
    std::promise<void> destroyed;
    Subscription subscription = session->on_state_change([&](SessionState state) {
      if (state != SessionState::closed && session) {
        session.reset();
        destroyed.set_value();
      }
    });
    // The server expires the session (cut off first, so that it cannot reconnect in between): the
    // listener hears "lost" and destroys the Session.
    expire_behind(proxy, *session);
    ASSERT_EQ(destroyed.get_future().wait_for(testenv::scaled(15s)), std::future_status::ready);
  });
  finishes_within(30s, "destroying the Session in an async handler", [&] {
    auto session = std::make_unique<Session>(session_options(servers));
    auto lock = std::make_unique<Lock>(*session, path + "/async");
    std::promise<void> destroyed;
    lock->async_acquire(-1ns, [&](std::error_code, HeldLock held) {
      held.release();
      lock.reset();
      session.reset();
      destroyed.set_value();
    });
    ASSERT_EQ(destroyed.get_future().wait_for(testenv::scaled(15s)), std::future_status::ready);
  });
  finishes_within(30s, "destroying the Session in on_lost", [&] {
    testenv::Proxy proxy(servers);
    auto session = std::make_unique<Session>(session_options(proxy.address()));
    Lock lock(*session, path + "/lost");
    auto held = std::make_unique<HeldLock>(lock.acquire());
    std::promise<void> destroyed;
    held->on_lost([&](LossReason) {
      held.reset();
      session.reset();
      destroyed.set_value();
    });
    expire_behind(proxy, *session);
    ASSERT_EQ(destroyed.get_future().wait_for(testenv::scaled(15s)), std::future_status::ready);
  });
}

// Release, cancel and close from other threads at the same time as acquisitions in every phase:
// nothing hangs, every acquisition gets an outcome, and no node is left behind.
TEST_F(LifecycleTest, CloseReleaseAndCancelRacingAcquisitionsInEveryPhase) {
  std::mt19937 random(20261201);
  for (int round = 0; round < 20; ++round) {
    const auto delay = std::chrono::microseconds(std::uniform_int_distribution<int>(0, 20000)(random));
    finishes_within(30s, "a racing close", [&] {
      Session holder_session(session_options(servers));
      Lock holder_lock(holder_session, path);
      HeldLock held = holder_lock.acquire();
      auto session = std::make_unique<Session>(session_options(servers));
      Lock lock(*session, path);
      std::atomic<int> outcomes{0};
      std::stop_source cancel;
      for (int i = 0; i < 3; ++i) {
        lock.async_acquire(
            -1ns, [&](std::error_code, HeldLock granted) { granted.release(), ++outcomes; }, cancel.get_token());
      }
      std::thread releaser([&] {
        std::this_thread::sleep_for(delay);
        held.release();
      });
      std::thread canceller([&] {
        std::this_thread::sleep_for(delay / 2);
        cancel.request_stop();
      });
      std::this_thread::sleep_for(delay);
      session->close();
      releaser.join();
      canceller.join();
      EXPECT_TRUE(eventually([&] { return outcomes == 3; })) << "round " << round;
      session.reset();
    });
  }
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
}

}  // namespace
}  // namespace zkr::test
