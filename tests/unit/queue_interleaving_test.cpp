// SPDX-License-Identifier: Apache-2.0
// Rare interleavings of the contender queue and the session, built deterministically on the fake
// ZooKeeper (fake_zookeeper.hpp): lost replies, expiry at awkward moments, a predecessor vanishing
// between two requests, cancel and timeout racing the create or the grant, a silent server, and a
// container parent reaped under our feet. Each test holds the fake's deliveries or injects a fault
// at the exact step, instead of hoping that timing produces the case.
#include <gtest/gtest.h>

#include <boost/asio/post.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <testenv.hpp>
#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/multi_lock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>

#include "internals.hpp"
#include "fake_zookeeper.hpp"
#include "session_core.hpp"

namespace zkr::fake {
namespace {

using namespace std::chrono_literals;
using testenv::scaled;

constexpr auto kForever = std::chrono::hours(1);

// An acquisition on its own thread. Destroying it first cancels it (the jthread's stop token) and
// joins, so a failing test never hangs on an acquisition that cannot finish.
class BackgroundAcquire {
 public:
  using Acquire = std::function<std::optional<HeldLock>(std::stop_token, std::error_code&)>;

  BackgroundAcquire(Lock& lock, std::chrono::nanoseconds timeout)
      : BackgroundAcquire([&lock, timeout](std::stop_token stop, std::error_code& ec) {
          return lock.try_acquire_for(timeout, stop, ec);
        }) {}
  BackgroundAcquire(Semaphore& semaphore, std::chrono::nanoseconds timeout)
      : BackgroundAcquire([&semaphore, timeout](std::stop_token stop, std::error_code& ec) {
          return semaphore.try_acquire_for(timeout, stop, ec);
        }) {}
  explicit BackgroundAcquire(Acquire acquire)
      : thread_([this, acquire = std::move(acquire)](std::stop_token stop) {
          std::error_code ec;
          auto held = acquire(stop, ec);
          std::lock_guard guard(mutex_);
          error_ = ec;
          held_ = std::move(held);
          done_ = true;
          finished_.notify_all();
        }) {}

  // True once the acquisition has an outcome (waits at most `timeout`).
  bool finished(std::chrono::milliseconds timeout = 0ms) {
    std::unique_lock lock(mutex_);
    return finished_.wait_for(lock, timeout, [this] { return done_; });
  }
  std::error_code error() {
    std::lock_guard lock(mutex_);
    return error_;
  }
  HeldLock take() {
    std::lock_guard lock(mutex_);
    if (!held_) return {};
    HeldLock out = std::move(*held_);
    held_.reset();
    return out;
  }
  void cancel() { thread_.request_stop(); }

 private:
  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::error_code error_;
  std::optional<HeldLock> held_;
  std::jthread thread_;  // last: starts once the members above exist, and is joined first
};

// The create takes effect, then its reply is lost with the connection.
Fault lost_create_reply(const std::string& path_prefix) {
  Fault fault;
  fault.op = Op::create;
  fault.path_prefix = path_prefix;
  fault.rc = zk_errc::connection_loss;
  fault.after_apply = true;
  fault.drop_connection = true;
  return fault;
}

class QueueInterleaving : public ::testing::Test {
 protected:
  std::shared_ptr<FakeServer> server = std::make_shared<FakeServer>();

  // Long enough that no heartbeat (one every timeout/6) falls inside a test unless it wants one.
  std::unique_ptr<Session> open_session(std::chrono::milliseconds session_timeout = 120s) {
    SessionOptions options;
    options.session_timeout = session_timeout;
    // The fake answers at once: no follower lags behind its leader by more than this.
    options.ensemble_tick_time = 20ms;
    return open_session_with(options);
  }
  // A session on the fake with these options (its servers and connect timeout set here).
  std::unique_ptr<Session> open_session_with(SessionOptions options) {
    options.servers = "fake:2181";
    options.connect_timeout = scaled(10s);
    auto core = std::make_shared<detail::SessionCore>(options, fake_factory(server));
    core->connect_or_throw();
    return std::make_unique<Session>(detail::Internals::key(), core);
  }

  bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout = 10s) {
    return server->wait_until(predicate, scaled(timeout));
  }

  std::vector<RequestRecord> requests_of(std::int64_t session, Op op, const std::string& path_prefix) const {
    std::vector<RequestRecord> out;
    for (const auto& record : server->requests())
      if (record.session == session && record.op == op && record.path.rfind(path_prefix, 0) == 0) out.push_back(record);
    return out;
  }

  static std::string child_of(const std::string& parent, const std::string& name) { return parent + "/" + name; }
};

// The create took effect but its reply was lost with the connection; the same session comes back.
// The contender must find its node by its GUID, adopt it (its owner is this session), and hold
// with the token of that node: no second node, no orphan.
TEST_F(QueueInterleaving, LostCreateReplyOnTheSameSessionIsFoundByGuidAndAdopted) {
  const std::string parent = "/locks/lost-reply";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  server->inject(lost_create_reply(parent + "/"));

  Lock lock(*session, parent);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  auto lost_creates = requests_of(session_id, Op::create, parent + "/");
  ASSERT_EQ(lost_creates.size(), 1u);
  ASSERT_TRUE(lost_creates[0].applied);
  ASSERT_EQ(server->children(parent).size(), 1u);
  EXPECT_FALSE(acquire.finished());

  server->reconnect(session_id);
  ASSERT_TRUE(acquire.finished(scaled(10s)));
  ASSERT_FALSE(acquire.error()) << acquire.error().message();
  HeldLock held = acquire.take();

  const auto children = server->children(parent);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(held.node_path(), lost_creates[0].created);
  EXPECT_EQ(held.node_path(), child_of(parent, children[0]));
  const auto node = server->node(held.node_path());
  ASSERT_TRUE(node);
  EXPECT_EQ(held.token(), FencingToken(node->stat.czxid));
  EXPECT_EQ(node->stat.ephemeral_owner, session_id);
  EXPECT_EQ(held.session_id(), session_id);
  EXPECT_EQ(requests_of(session_id, Op::create, parent + "/").size(), 1u);  // never created twice

  held.release();
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
}

// The same with kazoo's node names ("<32 hex>__lock__<seq>", an election in the kazoo layout): the
// GUID the contender looks for is kazoo's form of it, and the node found is adopted.
TEST_F(QueueInterleaving, LostCreateReplyOfAKazooNamedNodeIsFoundByGuidAndAdopted) {
  const std::string parent = "/elections/lost-kazoo-reply";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  server->inject(lost_create_reply(parent + "/"));

  LeaderLatch latch(*session, parent, {.participant_data = "ours", .layout = ElectionLayout::kazoo});
  latch.start();
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  ASSERT_EQ(server->children(parent).size(), 1u);
  const auto created = server->children(parent)[0];
  const auto name = parse_contender_name(created);
  ASSERT_TRUE(name);
  EXPECT_EQ(name->scheme, ContenderScheme::kazoo);

  server->reconnect(session_id);
  auto term = latch.wait_for_leadership(scaled(10s));
  ASSERT_TRUE(term);
  EXPECT_EQ(term->node_path(), child_of(parent, created));
  EXPECT_EQ(server->children(parent).size(), 1u);
  EXPECT_EQ(requests_of(session_id, Op::create, parent + "/").size(), 1u);  // never created twice
  latch.close();
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
}

// The reply of the create is lost, and the session expires before the client reconnects. The node
// of the old session goes with it; the contender must start afresh on the new session and never
// adopt anything of the old one.
TEST_F(QueueInterleaving, LostCreateReplyThenExpiryQueuesAfreshOnTheNewSession) {
  const std::string parent = "/locks/lost-then-expired";
  server->ensure_path(parent);
  auto session = open_session();
  const auto old_session = session->id();
  server->inject(lost_create_reply(parent + "/"));

  Lock lock(*session, parent);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  const auto lost_create = requests_of(old_session, Op::create, parent + "/").at(0);
  ASSERT_TRUE(lost_create.applied);
  const FencingToken old_token(lost_create.applied ? server->node(lost_create.created)->stat.czxid : 0);

  server->expire_session(old_session, /*tell_client_now=*/false);
  EXPECT_FALSE(server->node(lost_create.created));  // the ephemeral went with its session
  server->reconnect(old_session);                   // and the client learns it now

  ASSERT_TRUE(acquire.finished(scaled(10s)));
  ASSERT_FALSE(acquire.error()) << acquire.error().message();
  HeldLock held = acquire.take();
  const auto new_session = session->id();
  EXPECT_NE(new_session, old_session);
  EXPECT_EQ(held.session_id(), new_session);
  EXPECT_NE(held.node_path(), lost_create.created);
  const auto children = server->children(parent);
  ASSERT_EQ(children.size(), 1u);
  const auto node = server->node(child_of(parent, children[0]));
  ASSERT_TRUE(node);
  EXPECT_EQ(node->stat.ephemeral_owner, new_session);
  EXPECT_EQ(held.token(), FencingToken(node->stat.czxid));
  EXPECT_GT(held.token(), old_token);
  // The new node carries a new GUID: nothing of the old attempt's name was reused.
  const std::string old_name = lost_create.created.substr(parent.size() + 1);
  EXPECT_NE(children[0].substr(0, 40), old_name.substr(0, 40));
  const auto metrics = session->metrics();
  EXPECT_EQ(metrics.losses_by_expiry, 1u);
  EXPECT_EQ(metrics.sessions_established, 2u);
}

// After a lost reply, the node that carries our GUID belongs to ANOTHER session (the fake rewrites
// the owner when it applies the create). It is never ours: not adopted, not deleted by us; we
// create a fresh node, which waits behind the foreign one like any other contender.
TEST_F(QueueInterleaving, NodeWithOurGuidOwnedByAnotherSessionIsNeverAdoptedNorDeleted) {
  const std::string parent = "/locks/foreign-owner";
  server->ensure_path(parent);
  auto other = open_session();
  auto session = open_session();
  const auto session_id = session->id();
  const auto other_id = other->id();
  Fault fault = lost_create_reply(parent + "/");
  fault.session = session_id;
  fault.owner_override = other_id;
  server->inject(fault);

  Lock lock(*session, parent);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  const auto lost_create = requests_of(session_id, Op::create, parent + "/").at(0);
  const std::string foreign = lost_create.created;
  const auto foreign_before = server->node(foreign);
  ASSERT_TRUE(foreign_before);
  ASSERT_EQ(foreign_before->stat.ephemeral_owner, other_id);

  server->reconnect(session_id);
  // A fresh node of ours, queued behind the foreign one and watching it.
  ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == 2 && server->data_watches(foreign) == 1; }));
  EXPECT_FALSE(acquire.finished());
  const auto foreign_after = server->node(foreign);
  ASSERT_TRUE(foreign_after);
  EXPECT_EQ(foreign_after->stat.czxid, foreign_before->stat.czxid);
  EXPECT_EQ(foreign_after->stat.ephemeral_owner, other_id);
  EXPECT_EQ(foreign_after->stat.version, foreign_before->stat.version);
  EXPECT_TRUE(requests_of(session_id, Op::remove, foreign).empty());
  EXPECT_EQ(requests_of(session_id, Op::create, parent + "/").size(), 2u);

  // When the other session ends, its node goes and ours is granted.
  other->close();
  ASSERT_TRUE(acquire.finished(scaled(10s)));
  ASSERT_FALSE(acquire.error()) << acquire.error().message();
  HeldLock held = acquire.take();
  EXPECT_NE(held.node_path(), foreign);
  EXPECT_GT(held.token(), FencingToken(foreign_before->stat.czxid));
  const auto children = server->children(parent);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(held.node_path(), child_of(parent, children[0]));
  EXPECT_EQ(server->node(held.node_path())->stat.ephemeral_owner, session_id);
}

// Our listing shows the predecessor, which is deleted before our watch on it is set: the get_data
// answers NONODE. The contender must look again (not hang on a watch that will never fire) and
// be granted.
TEST_F(QueueInterleaving, PredecessorDeletedBetweenListingAndWatchIsRecheckedAndGranted) {
  const std::string parent = "/locks/vanishing-predecessor";
  server->ensure_path(parent);
  auto holder_session = open_session();
  auto waiter_session = open_session();
  const auto waiter_id = waiter_session->id();
  Lock holder_lock(*holder_session, parent), waiter_lock(*waiter_session, parent);
  HeldLock holder = holder_lock.acquire();
  const std::string predecessor = holder.node_path();

  server->pause(waiter_id);
  BackgroundAcquire waiter(waiter_lock, kForever);
  // The create and the listing have been applied; their replies wait on the wire.
  ASSERT_TRUE(wait_until([&] { return requests_of(waiter_id, Op::get_children, parent).size() == 1; }));
  ASSERT_EQ(server->children(parent).size(), 2u);
  holder.release();
  ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == 1; }));
  server->resume(waiter_id);

  ASSERT_TRUE(waiter.finished(scaled(10s)));
  ASSERT_FALSE(waiter.error()) << waiter.error().message();
  HeldLock held = waiter.take();
  EXPECT_TRUE(held);
  // The interleaving really happened: the watch on the stale predecessor found no node.
  const auto watches = requests_of(waiter_id, Op::get_data, predecessor);
  ASSERT_FALSE(watches.empty());
  EXPECT_EQ(watches.front().reported_rc, zk_errc::no_node);
  EXPECT_EQ(server->data_watches(predecessor), 0u);
  EXPECT_EQ(server->children(parent).size(), 1u);
}

// Cancelled (stop token) while the create is still in flight: the acquisition reports cancelled at
// once, and the node that the create made is deleted as soon as its name is known.
TEST_F(QueueInterleaving, CancelWhileTheCreateIsInFlightDeletesTheNodeOnceItsNameArrives) {
  const std::string parent = "/locks/cancel-in-flight";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  Lock lock(*session, parent);

  server->pause(session_id);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return requests_of(session_id, Op::get_children, parent).size() == 1; }));
  ASSERT_EQ(server->children(parent).size(), 1u);
  acquire.cancel();
  ASSERT_TRUE(acquire.finished(scaled(10s)));
  EXPECT_EQ(acquire.error(), make_error_code(errc::cancelled));
  EXPECT_FALSE(acquire.take());
  // The reply with the node's name has not arrived: nothing can have been deleted yet.
  const std::string created = requests_of(session_id, Op::create, parent + "/").at(0).created;
  EXPECT_TRUE(server->node(created));

  server->resume(session_id);
  ASSERT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
  const auto removes = requests_of(session_id, Op::remove, created);
  ASSERT_EQ(removes.size(), 1u);
  EXPECT_EQ(removes[0].reported_rc, zk_errc::ok);
  EXPECT_EQ(session->metrics().acquire_cancellations, 1u);
  EXPECT_EQ(session->metrics().acquisitions, 0u);
}

// Cancelled while the outcome of its create is unknown (reply lost, connection down): once the
// same session is back, the contender finds its node by GUID and deletes it instead of adopting.
TEST_F(QueueInterleaving, CancelWhileTheCreateOutcomeIsUnknownDeletesTheNodeOnceFound) {
  const std::string parent = "/locks/cancel-while-recovering";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  server->inject(lost_create_reply(parent + "/"));
  Lock lock(*session, parent);

  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  const std::string created = requests_of(session_id, Op::create, parent + "/").at(0).created;
  acquire.cancel();
  ASSERT_TRUE(acquire.finished(scaled(10s)));
  EXPECT_EQ(acquire.error(), make_error_code(errc::cancelled));
  EXPECT_TRUE(server->node(created));  // unknown to us until the session is back

  server->reconnect(session_id);
  ASSERT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
  const auto removes = requests_of(session_id, Op::remove, created);
  ASSERT_EQ(removes.size(), 1u);
  EXPECT_EQ(removes[0].reported_rc, zk_errc::ok);
  EXPECT_EQ(requests_of(session_id, Op::create, parent + "/").size(), 1u);  // no second attempt
  EXPECT_EQ(session->metrics().acquisitions, 0u);
}

class TimeoutRacingGrant : public QueueInterleaving {
 protected:
  const std::string parent = "/locks/timeout-race";
  std::unique_ptr<Session> holder_session = (server->ensure_path(parent), open_session());
  std::unique_ptr<Session> waiter_session = open_session();
  std::int64_t waiter_id = waiter_session->id();
  Lock holder_lock{*holder_session, parent};
  Lock waiter_lock{*waiter_session, parent};

  // The waiter queued behind `holder`, its watch on the holder's node set.
  void wait_until_watching(const HeldLock& holder) {
    ASSERT_TRUE(wait_until([&] {
      // the holder's own-node watch and the waiter's watch on it
      return server->children(parent).size() == 2 && server->data_watches(holder.node_path()) == 2 &&
             server->queued(waiter_id) == 0;
    }));
  }

  bool on_the_wire(const std::string& what) const {
    auto entries = server->queued_entries(waiter_id);
    return std::find(entries.begin(), entries.end(), what) != entries.end();
  }
  std::string waiter_node() const { return requests_of(waiter_id, Op::create, parent + "/").at(0).created; }

  // Another client's waiter (made directly on the server), queued right after the holder. The
  // waiter behind it watches it, and its deletion does not grant anything while the holder holds:
  // deleting it after the holder has gone makes the waiter list the queue, and that listing grants.
  std::string foreign_waiter() {
    std::string created;
    EXPECT_EQ(server->create(parent + "/_c_00000000-0000-0000-0000-000000000000-lock-", "another client",
                             detail::CreateMode::ephemeral_sequential, holder_session->id(), &created),
              zk_errc::ok);
    return created;
  }
  void wait_until_watching(const std::string& predecessor) {
    ASSERT_TRUE(wait_until([&] {
      return server->children(parent).size() == 3 && server->data_watches(predecessor) == 1 &&
             server->queued(waiter_id) == 0;
    }));
  }
};

// The holder releases, but the wake-up is still on the wire when the waiter's timeout fires: the
// waiter reports timed_out and its node is deleted; the late wake-up then changes nothing.
TEST_F(TimeoutRacingGrant, TimeoutWinsWhileTheWakeUpIsOnTheWire) {
  HeldLock holder = holder_lock.acquire();
  BackgroundAcquire waiter(waiter_lock, scaled(300ms));
  wait_until_watching(holder);
  server->pause(waiter_id);
  holder.release();
  const std::string wake_up = "deleted " + holder.node_path();
  ASSERT_TRUE(wait_until([&] { return on_the_wire(wake_up); }));

  ASSERT_TRUE(waiter.finished(scaled(10s)));
  EXPECT_EQ(waiter.error(), make_error_code(errc::timed_out));
  EXPECT_FALSE(waiter.take());
  // The delete goes out with the timeout (right after the outcome), the wake-up still undelivered.
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
  EXPECT_TRUE(on_the_wire(wake_up));
  EXPECT_TRUE(on_the_wire("remove " + waiter_node()));

  server->resume(waiter_id);
  ASSERT_TRUE(wait_until([&] { return server->queued(waiter_id) == 0; }));
  EXPECT_TRUE(server->children(parent).empty());
  EXPECT_EQ(waiter_session->metrics().acquire_timeouts, 1u);
  EXPECT_EQ(waiter_session->metrics().acquisitions, 0u);
}

// The timeout fires while the listing that would grant is on the wire: timed_out, node deleted,
// and the late listing grants nothing.
TEST_F(TimeoutRacingGrant, TimeoutWinsWhileTheGrantingListingIsOnTheWire) {
  HeldLock holder = holder_lock.acquire();
  const std::string predecessor = foreign_waiter();
  BackgroundAcquire waiter(waiter_lock, scaled(300ms));
  wait_until_watching(predecessor);
  server->pause(waiter_id);
  holder.release();
  ASSERT_EQ(server->remove(predecessor), zk_errc::ok);
  const std::string wake_up = "deleted " + predecessor;
  const std::string listing = "get_children " + parent;
  ASSERT_TRUE(wait_until([&] { return on_the_wire(wake_up); }));
  ASSERT_TRUE(server->step_through(waiter_id, wake_up));  // the waiter lists the children again
  ASSERT_TRUE(wait_until([&] { return on_the_wire(listing); }));

  ASSERT_TRUE(waiter.finished(scaled(10s)));
  EXPECT_EQ(waiter.error(), make_error_code(errc::timed_out));
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
  EXPECT_TRUE(on_the_wire(listing));  // the listing that would have granted, undelivered
  EXPECT_TRUE(on_the_wire("remove " + waiter_node()));
  server->resume(waiter_id);
  ASSERT_TRUE(wait_until([&] { return server->queued(waiter_id) == 0; }));
  EXPECT_TRUE(server->children(parent).empty());
  EXPECT_EQ(waiter_session->metrics().acquisitions, 0u);
}

// The grant arrives first, just before the timeout: the lock is granted, the timer is disarmed (it
// neither deletes the node nor reports anything later), and the lock is usable and released.
TEST_F(TimeoutRacingGrant, GrantWinsAndTheTimeoutNeverTouchesTheGrantedLock) {
  HeldLock holder = holder_lock.acquire();
  const auto timeout = scaled(500ms);
  const auto started = std::chrono::steady_clock::now();
  BackgroundAcquire waiter(waiter_lock, timeout);
  wait_until_watching(holder);
  server->pause(waiter_id);
  holder.release();
  while (!waiter.finished() && server->queued(waiter_id) > 0) server->step(waiter_id);
  ASSERT_TRUE(waiter.finished(scaled(10s)));
  ASSERT_FALSE(waiter.error()) << waiter.error().message();
  HeldLock held = waiter.take();
  server->resume(waiter_id);
  EXPECT_GT(held.token(), holder.token());

  // Past the moment the timeout would have fired: still held, node still there.
  std::this_thread::sleep_until(started + timeout + scaled(200ms));
  EXPECT_FALSE(held.lost());
  ASSERT_EQ(server->children(parent).size(), 1u);
  EXPECT_EQ(held.node_path(), child_of(parent, server->children(parent)[0]));
  EXPECT_EQ(waiter_session->metrics().acquire_timeouts, 0u);
  held.release();
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
}

// The real race, without holding anything: release and timeout land close together, many times.
// Whichever wins, the outcome is consistent: a grant holds the only node and releases it, or a
// timeout leaves no node behind.
TEST_F(TimeoutRacingGrant, WhicheverWinsTheOutcomeIsConsistent) {
  int granted = 0, timed_out = 0;
  for (int round = 0; round < 30; ++round) {
    HeldLock holder = holder_lock.acquire();
    const auto timeout = 20ms;
    BackgroundAcquire waiter(waiter_lock, timeout);
    // Release around the moment the timeout fires: before, at, or after it, whatever the waiter
    // is doing then (creating, listing, watching, or already giving up).
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 10) * 3);
    holder.release();
    ASSERT_TRUE(waiter.finished(scaled(10s)));
    if (!waiter.error()) {
      ++granted;
      HeldLock held = waiter.take();
      EXPECT_GT(held.token(), holder.token());
      ASSERT_EQ(server->children(parent).size(), 1u);
      EXPECT_EQ(held.node_path(), child_of(parent, server->children(parent)[0]));
      held.release();
    } else {
      ++timed_out;
      EXPECT_EQ(waiter.error(), make_error_code(errc::timed_out));
    }
    ASSERT_TRUE(wait_until([&] { return server->children(parent).empty(); })) << "round " << round;
  }
  fmt::print("{} rounds granted, {} timed out\n", granted, timed_out);
}

// A release while the connection is down is not forgotten: the delete goes out once the same
// session is back.
TEST_F(QueueInterleaving, ReleaseWhileDisconnectedDeletesAfterReconnecting) {
  const std::string parent = "/locks/release-disconnected";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  const std::string node = held.node_path();

  server->drop_connection(session_id);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  held.release();
  EXPECT_TRUE(server->node(node));  // nothing can reach the server now
  EXPECT_FALSE(held.lost());

  server->reconnect(session_id);
  ASSERT_TRUE(wait_until([&] { return !server->node(node); }));
  const auto removes = requests_of(session_id, Op::remove, node);
  ASSERT_EQ(removes.size(), 1u);
  EXPECT_EQ(removes[0].reported_rc, zk_errc::ok);
  EXPECT_FALSE(held.lost());
}

// The delete of a release takes effect but its reply is lost with the connection. The release is
// retried after reconnecting; its NONODE answer means done, not failure; nothing is left behind.
TEST_F(QueueInterleaving, LostReleaseReplyIsRetriedAndNoNodeMeansDone) {
  const std::string parent = "/locks/lost-release-reply";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  const std::string node = held.node_path();
  Fault fault = lost_create_reply(node);
  fault.op = Op::remove;
  server->inject(fault);

  held.release();
  EXPECT_FALSE(server->node(node));  // the delete took effect...
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));  // ...unbeknownst
  server->reconnect(session_id);
  ASSERT_TRUE(wait_until([&] {
    auto removes = requests_of(session_id, Op::remove, node);
    return removes.size() == 2 && server->queued(session_id) == 0;
  }));
  const auto removes = requests_of(session_id, Op::remove, node);
  EXPECT_TRUE(removes[0].applied);
  EXPECT_EQ(removes[1].reported_rc, zk_errc::no_node);
  EXPECT_TRUE(server->children(parent).empty());
  EXPECT_FALSE(held.lost());
  // Another contender is granted at once: nothing of ours blocks the queue.
  auto next = lock.try_acquire();
  ASSERT_TRUE(next);
  EXPECT_GT(next->token(), held.token());
}

// The session expires while the reply of our create is still on the wire: the create took effect
// on the old session, whose node then went with it. The contender queues on the new session.
TEST_F(QueueInterleaving, ExpiryWhileTheCreateReplyIsOnTheWireQueuesOnTheNewSession) {
  const std::string parent = "/locks/expiry-create-in-flight";
  server->ensure_path(parent);
  auto session = open_session();
  const auto old_session = session->id();
  Lock lock(*session, parent);

  server->pause(old_session);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return requests_of(old_session, Op::get_children, parent).size() == 1; }));
  ASSERT_EQ(server->children(parent).size(), 1u);
  const auto old_node = requests_of(old_session, Op::create, parent + "/").at(0).created;
  const FencingToken old_token(server->node(old_node)->stat.czxid);
  server->expire_session(old_session);
  EXPECT_FALSE(server->node(old_node));
  server->resume(old_session);

  ASSERT_TRUE(acquire.finished(scaled(10s)));
  ASSERT_FALSE(acquire.error()) << acquire.error().message();
  HeldLock held = acquire.take();
  EXPECT_NE(held.session_id(), old_session);
  EXPECT_NE(held.node_path(), old_node);
  EXPECT_GT(held.token(), old_token);
  const auto children = server->children(parent);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(server->node(child_of(parent, children[0]))->stat.ephemeral_owner, session->id());
  EXPECT_EQ(session->metrics().losses_by_expiry, 1u);
}

// The waiter is woken (its predecessor, another client's waiter, left after the holder), and the
// reply of the listing that would grant it is lost with the connection. It lists again after
// reconnecting and is granted.
TEST_F(TimeoutRacingGrant, LostReplyOfTheGrantingListingIsRetriedAfterReconnecting) {
  HeldLock holder = holder_lock.acquire();
  const std::string predecessor = foreign_waiter();
  BackgroundAcquire waiter(waiter_lock, kForever);
  wait_until_watching(predecessor);
  Fault fault = lost_create_reply(parent);
  fault.op = Op::get_children;
  fault.session = waiter_id;
  server->inject(fault);

  holder.release();
  ASSERT_EQ(server->remove(predecessor), zk_errc::ok);
  ASSERT_TRUE(wait_until([&] { return waiter_session->state() == SessionState::suspended; }));
  EXPECT_FALSE(waiter.finished());
  server->reconnect(waiter_id);
  ASSERT_TRUE(waiter.finished(scaled(10s)));
  ASSERT_FALSE(waiter.error()) << waiter.error().message();
  HeldLock held = waiter.take();
  EXPECT_GT(held.token(), holder.token());
  EXPECT_EQ(server->pending_faults(), 0u);
  ASSERT_EQ(server->children(parent).size(), 1u);
  EXPECT_EQ(held.node_path(), child_of(parent, server->children(parent)[0]));
}

// The reply of the get_data that sets the holder's watch on its own node is lost with the
// connection. The real client then never registers that watch (the server drops a connection's
// watches; the client re-registers only those whose reply it saw). The holder must still learn
// that an operator deleted its node. (A holder sets that watch once the path's children change:
// until then the listing's children watch stands in for it.)
TEST_F(QueueInterleaving, HolderStillLearnsOfItsNodeDeletedAfterItsWatchReplyWasLost) {
  const std::string parent = "/locks/own-watch-reply-lost";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  Fault fault = lost_create_reply(parent + "/");
  fault.op = Op::get_data;
  fault.session = session_id;
  server->inject(fault);

  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  ASSERT_EQ(server->create(parent + "/someone-else"), zk_errc::ok);  // the path changes
  // The own-node watch (its only get_data) is the request that loses its reply.
  ASSERT_TRUE(wait_until([&] { return server->pending_faults() == 0; }));
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  server->reconnect(session_id);
  ASSERT_TRUE(session->wait_connected(scaled(10s)));

  std::promise<LossReason> lost;
  held.on_lost([&lost](LossReason reason) { lost.set_value(reason); });
  auto told = lost.get_future();
  ASSERT_EQ(server->remove(held.node_path()), zk_errc::ok);
  ASSERT_EQ(told.wait_for(scaled(5s)), std::future_status::ready) << "the holder was never told its node is gone";
  EXPECT_EQ(told.get(), LossReason::node_deleted);
  EXPECT_TRUE(held.lost());
}

// A release waiting for the connection to come back, and the session expires instead: the node
// went with the session, so nothing is deleted on the new session (only ever our own node, on the
// session that created it), and the contender is done.
TEST_F(QueueInterleaving, ReleasePendingWhenTheSessionExpiresIsNeverSentOnTheNewSession) {
  const std::string parent = "/locks/release-then-expiry";
  server->ensure_path(parent);
  auto session = open_session();
  const auto old_session = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  const std::string node = held.node_path();

  server->drop_connection(old_session);
  ASSERT_TRUE(wait_until([&] { return session->state() == SessionState::suspended; }));
  held.release();
  server->expire_session(old_session, /*tell_client_now=*/false);
  server->reconnect(old_session);
  ASSERT_TRUE(session->wait_connected(scaled(10s)));
  ASSERT_NE(session->id(), old_session);

  EXPECT_FALSE(server->node(node));
  EXPECT_FALSE(held.lost());  // released before the loss: a release is not a loss
  auto next = lock.try_acquire();  // the queue is free on the new session
  ASSERT_TRUE(next);
  EXPECT_GT(next->token(), held.token());
  for (const auto& record : server->requests())
    if (record.op == Op::remove) ADD_FAILURE() << "unexpected delete of " << record.path << " by session " << record.session;
}

// With LossPolicy::on_disconnect a dropped connection loses the session at once: the holder is
// told connection_lost, a waiter queues again on the new session and is granted there.
TEST_F(QueueInterleaving, LoseOnDisconnectTellsTheHolderAndRequeuesTheWaiter) {
  const std::string parent = "/locks/lose-on-disconnect";
  server->ensure_path(parent);
  SessionOptions options;
  options.servers = "fake:2181";
  options.session_timeout = 120s;
  options.connect_timeout = scaled(10s);
  options.loss_policy = LossPolicy::on_disconnect;
  auto core = std::make_shared<detail::SessionCore>(options, fake_factory(server));
  core->connect_or_throw();
  Session session(detail::Internals::key(), core);
  const auto old_session = session.id();
  Lock lock(session, parent);
  HeldLock holder = lock.acquire();
  std::promise<LossReason> lost;
  holder.on_lost([&lost](LossReason reason) { lost.set_value(reason); });
  auto told = lost.get_future();
  BackgroundAcquire waiter(lock, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == 2 && server->queued(old_session) == 0; }));

  server->drop_connection(old_session);
  ASSERT_EQ(told.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_EQ(told.get(), LossReason::connection_lost);
  EXPECT_EQ(session.metrics().losses_by_disconnect, 1u);
  // The waiter queues again on the new session, behind the old session's nodes: the server keeps
  // them until it expires that session, and until then nobody may be granted.
  ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == 3; }));
  EXPECT_FALSE(waiter.finished());
  server->expire_session(old_session);

  ASSERT_TRUE(waiter.finished(scaled(10s)));
  ASSERT_FALSE(waiter.error()) << waiter.error().message();
  HeldLock held = waiter.take();
  EXPECT_NE(held.session_id(), old_session);
  EXPECT_EQ(held.session_id(), session.id());
  EXPECT_GT(held.token(), holder.token());
  ASSERT_EQ(server->children(parent).size(), 1u);
  EXPECT_EQ(held.node_path(), child_of(parent, server->children(parent)[0]));
}

// The server watch (SessionCore::watch_server) with a connect string of two servers: the session's
// server goes silent (the fake's connection answers nothing). With a 3 s session and a 20 ms tick the
// session sends a heartbeat every 0.75 s (a quarter of the timeout), tolerates 3 - 0.75 - 0.75 =
// 1.5 s of silence and leaves a silent server after (1.5 + 0.75) / 2 = 1.125 s.
class ServerWatch : public QueueInterleaving {
 protected:
  std::unique_ptr<Session> open_on_two_servers() {
    SessionOptions options;
    options.servers = "fake:2181,fake2:2181";
    options.session_timeout = 3s;
    options.connect_timeout = scaled(10s);
    options.ensemble_tick_time = 20ms;
    auto core = std::make_shared<detail::SessionCore>(options, fake_factory(server));
    core->connect_or_throw();
    return std::make_unique<Session>(detail::Internals::key(), core);
  }
};

// The next server answers: the session resumes there long before its deadline, and the lock is kept.
TEST_F(ServerWatch, ASilentServerIsLeftForTheNextBeforeTheDeadline) {
  const std::string parent = "/locks/silent-server";
  server->ensure_path(parent);
  auto session = open_on_two_servers();
  ASSERT_EQ(session->silence_tolerance(), 1500ms);
  ASSERT_EQ(detail::Internals::core(*session)->heartbeat_interval(), 750ms);
  const auto id = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();

  const auto paused_at = std::chrono::steady_clock::now();
  server->pause(id);
  ASSERT_TRUE(wait_until([&] { return server->server_moves(id) >= 1; }, 5s));
  const auto moved_after = std::chrono::steady_clock::now() - paused_at;
  EXPECT_GE(moved_after, 375ms);  // 1.125 s after the latest proof, at most a heartbeat (0.75 s) before the pause
  EXPECT_LT(moved_after, session->silence_tolerance());
  std::this_thread::sleep_for(session->silence_tolerance());  // past where the silence would have ended it
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session->state(), SessionState::connected);
  EXPECT_EQ(session->id(), id);
  EXPECT_EQ(server->server_moves(id), 1);
  EXPECT_EQ(session->metrics().sessions_lost, 0u);
}

// A move proves nothing: when the next server is silent too, the session is still declared lost at
// the deadline of its latest proof, not later.
TEST_F(ServerWatch, MovingDoesNotMoveTheDeadline) {
  const std::string parent = "/locks/silent-servers";
  server->ensure_path(parent);
  server->set_next_server_silent(true);
  auto session = open_on_two_servers();
  const auto id = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  std::promise<std::chrono::steady_clock::time_point> lost;
  held.on_lost([&lost](LossReason) { lost.set_value(std::chrono::steady_clock::now()); });
  auto told = lost.get_future();

  const auto paused_at = std::chrono::steady_clock::now();
  server->pause(id);
  ASSERT_EQ(told.wait_for(scaled(10s)), std::future_status::ready);
  const auto told_after = told.get() - paused_at;
  EXPECT_GE(server->server_moves(id), 1);
  // The latest answered proof was sent at most a heartbeat before the pause, and is credited with
  // the send of the answer before it: the deadline falls within a heartbeat of the tolerated
  // silence after the pause.
  const auto heartbeat = detail::Internals::core(*session)->heartbeat_interval();
  EXPECT_LE(told_after, session->silence_tolerance() + heartbeat + 200ms);
  EXPECT_GE(told_after, session->silence_tolerance() - heartbeat - 100ms);
  EXPECT_EQ(session->last_loss_cause(), SessionLossCause::local_deadline);
}

// Someone else (an operator) deletes the holder's node: the holder is told, with the reason.
TEST_F(QueueInterleaving, HolderNodeDeletedBySomeoneElseIsLostAsNodeDeleted) {
  const std::string parent = "/locks/deleted-under-holder";
  server->ensure_path(parent);
  auto session = open_session();
  const auto session_id = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  // The listing's children watch, which stands in for the own-node watch until the path changes.
  ASSERT_TRUE(wait_until([&] { return server->children_watches(parent) == 1; }));
  std::promise<LossReason> lost;
  held.on_lost([&lost](LossReason reason) { lost.set_value(reason); });
  auto told = lost.get_future();

  ASSERT_EQ(server->remove(held.node_path()), zk_errc::ok);
  ASSERT_EQ(told.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_EQ(told.get(), LossReason::node_deleted);
  EXPECT_TRUE(held.lost());
  EXPECT_EQ(held.loss_reason(), LossReason::node_deleted);
  EXPECT_TRUE(held.lost_token().stop_requested());
  EXPECT_EQ(session->metrics().locks_lost, 1u);
  held.release();  // nothing of ours is left to delete
  EXPECT_TRUE(requests_of(session_id, Op::remove, parent + "/").empty());
}

// A holder on a lock path, and an operator's session to break it with (break_holder()).
class BreakHolderInterleaving : public QueueInterleaving {
 protected:
  void hold(const std::string& parent) {
    server->ensure_path(parent);
    holder_session = open_session();
    operator_session = open_session();
    lock.emplace(*holder_session, parent);
    held = lock->acquire();
    node = held.node_path();
  }
  // `change` runs on the fake just before the operator's delete of the holder's node applies.
  void before_the_delete(std::function<void()> change) {
    Fault fault;
    fault.op = Op::remove;
    fault.path_prefix = node;
    fault.session = operator_session->id();
    fault.before = std::move(change);
    server->inject(std::move(fault));
  }

  std::unique_ptr<Session> holder_session, operator_session;
  std::optional<Lock> lock;
  HeldLock held;
  std::string node;
};

// break_holder() reads the holder's node (its czxid must be the token the operator was shown),
// then deletes it. A node that took the shown node's name in between (the same GUID and sequence
// number: its parent reaped and made again, and a GUID used again, as a kazoo Lock reuses its
// prefix) is another grant's and must stay. ZooKeeper makes a delete conditional on the data
// version only: the shown node had been rewritten by its owner (version 1, as a semaphore's grant
// rewrites it), the newcomer has version 0.
TEST_F(BreakHolderInterleaving, ANodeThatTookTheShownNodesNameMeanwhileIsLeftAlone) {
  hold("/locks/break-name-reused");
  ASSERT_EQ(server->set_data(node, "rewritten by its owner"), zk_errc::ok);
  const auto rows = list_contenders(*operator_session, "/locks/break-name-reused");
  ASSERT_EQ(rows.size(), 1u);
  const ContenderInfo shown = rows.front();
  ASSERT_TRUE(shown.holds);
  before_the_delete([&] {
    EXPECT_EQ(server->remove(node), zk_errc::ok);
    EXPECT_EQ(server->create(node, "another grant", detail::CreateMode::ephemeral, holder_session->id()), zk_errc::ok);
  });

  EXPECT_FALSE(break_holder(*operator_session, "/locks/break-name-reused", shown));
  const auto left = server->node(node);
  ASSERT_TRUE(left) << "break_holder deleted a node of the same name that it was never shown";
  EXPECT_NE(FencingToken(left->stat.czxid), shown.token);
}

// The holder's owner rewrites its node between the read and the delete (a semaphore's grant): the
// versioned delete is refused, the node is read again, still holds the token, and is deleted.
TEST_F(BreakHolderInterleaving, AHolderThatRewroteItsNodeMeanwhileIsStillBroken) {
  hold("/locks/break-rewritten");
  const ContenderInfo shown = list_contenders(*operator_session, "/locks/break-rewritten").at(0);
  before_the_delete([&] { EXPECT_EQ(server->set_data(node, "rewritten by its owner"), zk_errc::ok); });

  EXPECT_TRUE(break_holder(*operator_session, "/locks/break-rewritten", shown));
  EXPECT_FALSE(server->node(node));
  const auto removes = requests_of(operator_session->id(), Op::remove, node);
  ASSERT_EQ(removes.size(), 2u);
  EXPECT_EQ(removes[0].reported_rc, zk_errc::bad_version);
  EXPECT_EQ(removes[1].reported_rc, zk_errc::ok);
  EXPECT_TRUE(wait_until([&] { return held.lost(); }));
}

// The waiter's blocker is deleted, but the event that grants it is handled only after the waiter's
// session passed its deadline, while the monitor's thread is busy (for the monitor, a freeze it
// slept through). The grant must not be handed out on a session the server may already have
// expired: it waits for the monitor's verdict (a heartbeat at once, answered or not). Here the
// replies stay held: the session is declared lost half the lead time after the wake, and the
// waiter is granted on the next one.
class GrantPastTheDeadline : public QueueInterleaving {
 protected:
  ~GrantPastTheDeadline() override { unblock(); }  // a failed step leaves the worker busy otherwise

  // A holder and a waiter (timeout 2 s) on `parent`; returns when the grant's event has been
  // handled with the waiter's deadline passed and the monitor's thread still busy.
  void hold_the_grant_past_the_deadline(const std::string& parent) {
    server->ensure_path(parent);
    holder_session_ = open_session();
    waiter_session_ = open_session(scaled(2000ms));
    old_session_ = waiter_session_->id();
    holder_lock_ = std::make_unique<Lock>(*holder_session_, parent);
    waiter_lock_ = std::make_unique<Lock>(*waiter_session_, parent);
    HeldLock held = holder_lock_->acquire();
    const std::string holder_node = held.node_path();
    waiter_ = std::make_unique<BackgroundAcquire>(*waiter_lock_, kForever);
    ASSERT_TRUE(wait_until([&] { return server->data_watches(holder_node) >= 1; }));
    // The worker is made busy first, so that no heartbeat goes out from here on; then every reply
    // is held. Every request the step below answers was sent before the sleep, and a proof is
    // never credited later than its own send, so the deadline is at most the timeout less the
    // margin from then: the sleep passes it whatever the credit.
    const auto core = detail::Internals::core(*waiter_session_);
    std::promise<void> busy;
    boost::asio::post(core->worker(), [released = unblock_.get_future().share(), &busy] {
      busy.set_value();
      released.wait();
    });
    busy.get_future().wait();
    server->pause(old_session_);
    held.release();
    ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == 1; }));
    std::this_thread::sleep_for(core->silence_tolerance() + core->forward_lag() + 200ms);  // past any deadline
    ASSERT_TRUE(server->step_through(old_session_, "deleted " + holder_node));
  }

  void unblock() {
    if (!unblocked_) unblock_.set_value();
    unblocked_ = true;
  }

  HeldLock granted() {
    EXPECT_TRUE(waiter_->finished(scaled(10s)));
    EXPECT_FALSE(waiter_->error()) << waiter_->error().message();
    return waiter_->take();
  }

  std::unique_ptr<Session> holder_session_, waiter_session_;
  std::int64_t old_session_ = 0;
  std::unique_ptr<Lock> holder_lock_, waiter_lock_;
  std::unique_ptr<BackgroundAcquire> waiter_;
  std::promise<void> unblock_;
  bool unblocked_ = false;
};

TEST_F(GrantPastTheDeadline, WithNoAnswerTheSessionIsLostAndTheGrantMadeOnTheNext) {
  ASSERT_NO_FATAL_FAILURE(hold_the_grant_past_the_deadline("/locks/grant-past-deadline"));
  const auto woke = std::chrono::steady_clock::now();
  unblock();

  ASSERT_TRUE(wait_until([&] { return waiter_session_->metrics().losses_by_deadline == 1; }, scaled(5s)));
  EXPECT_LE(std::chrono::steady_clock::now() - woke, waiter_session_->lead_time() / 2 + scaled(500ms))
      << "the doubt lasted longer than half the lead time";
  server->resume(old_session_);
  EXPECT_NE(granted().session_id(), old_session_) << "granted on a session past its deadline";
  EXPECT_EQ(waiter_session_->metrics().deadline_rechecks, 1u);
}

// The same with the replies flowing again at the wake: the heartbeats sent since prove the session
// alive, and the waiter is granted on it, its deadline ahead again. Nothing was lost.
TEST_F(GrantPastTheDeadline, AnAnswerSinceTheWakeLetsTheGrantGoOnTheSameSession) {
  ASSERT_NO_FATAL_FAILURE(hold_the_grant_past_the_deadline("/locks/grant-after-recheck"));
  unblock();
  server->resume(old_session_);

  HeldLock held = granted();
  EXPECT_EQ(held.session_id(), old_session_);
  EXPECT_FALSE(held.lost());
  std::promise<BootClock::time_point> current;
  auto listening = waiter_session_->on_deadline([&current, first = true](SessionDeadline deadline) mutable {
    if (std::exchange(first, false)) current.set_value(deadline.at);
  });
  EXPECT_GT(current.get_future().get(), BootClock::now()) << "granted with the deadline still passed";
  const auto metrics = waiter_session_->metrics();
  EXPECT_EQ(metrics.deadline_rechecks, 1u);
  EXPECT_EQ(metrics.losses_by_deadline, 0u);
  EXPECT_EQ(metrics.sessions_lost, 0u);
}

// The session expires with a holder and three waiters on it. The holder is told lost; the waiters
// queue again on the new session, in their order, and each grant carries a larger token than
// anything granted on the old session.
TEST_F(QueueInterleaving, ExpiryWithAHolderAndThreeWaitersRequeuesTheWaitersInOrder) {
  const std::string parent = "/locks/expiry-queue";
  server->ensure_path(parent);
  auto session = open_session();
  const auto old_session = session->id();
  Lock lock(*session, parent);
  HeldLock holder = lock.acquire();
  std::promise<LossReason> lost;
  holder.on_lost([&lost](LossReason reason) { lost.set_value(reason); });
  auto told = lost.get_future();

  std::vector<std::unique_ptr<BackgroundAcquire>> waiters;
  for (std::size_t i = 1; i <= 3; ++i) {
    waiters.push_back(std::make_unique<BackgroundAcquire>(lock, kForever));
    ASSERT_TRUE(wait_until([&] { return server->children(parent).size() == i + 1; }));
  }
  ASSERT_TRUE(wait_until([&] {
    std::size_t watches = 0;
    for (const auto& name : server->children(parent)) watches += server->data_watches(child_of(parent, name));
    // The own-node watches of the holder and the first waiter (the next arrival changed the path
    // their listings watched), each waiter's watch on its predecessor, and the second and third
    // waiters' watch on what their predecessor waits for.
    return watches == 2 + 3 + 2;
  }));
  const FencingToken highest_old(server->last_zxid());

  server->expire_session(old_session);
  ASSERT_EQ(told.wait_for(scaled(10s)), std::future_status::ready);
  EXPECT_EQ(told.get(), LossReason::session_lost);
  EXPECT_TRUE(holder.lost());

  FencingToken previous = highest_old;
  for (std::size_t i = 0; i < waiters.size(); ++i) {
    ASSERT_TRUE(waiters[i]->finished(scaled(10s))) << "waiter " << i;
    ASSERT_FALSE(waiters[i]->error()) << waiters[i]->error().message();
    for (std::size_t later = i + 1; later < waiters.size(); ++later) EXPECT_FALSE(waiters[later]->finished());
    HeldLock held = waiters[i]->take();
    EXPECT_NE(held.session_id(), old_session);
    EXPECT_EQ(held.session_id(), session->id());
    EXPECT_GT(held.token(), previous) << "waiter " << i;
    previous = held.token();
    held.release();
  }
  EXPECT_TRUE(wait_until([&] { return server->children(parent).empty(); }));
  const auto metrics = session->metrics();
  EXPECT_EQ(metrics.losses_by_expiry, 1u);
  EXPECT_EQ(metrics.sessions_established, 2u);
  EXPECT_EQ(metrics.locks_lost, 1u);
}

// Every held lock on a session is in the session's list of listeners, and releasing one takes it
// out wherever it is (first, in the middle, last). A loss then reaches exactly the holders still
// there, and a loss token works whether it was taken before the loss or only after it.
TEST_F(QueueInterleaving, ExpiryAfterSomeReleasesTellsExactlyTheRemainingHolders) {
  constexpr std::size_t kLocks = 5;
  auto session = open_session();
  const auto old_session = session->id();
  std::vector<std::unique_ptr<Lock>> locks;
  std::vector<HeldLock> held;
  std::vector<std::promise<LossReason>> lost(kLocks);
  std::vector<std::future<LossReason>> told;
  for (std::size_t i = 0; i < kLocks; ++i) {
    const std::string path = fmt::format("/locks/many-holders/{}", i);
    server->ensure_path(path);
    locks.push_back(std::make_unique<Lock>(*session, path));
    held.push_back(locks.back()->acquire());
    held.back().on_lost([&lost, i](LossReason reason) { lost[i].set_value(reason); });
    told.push_back(lost[i].get_future());
  }
  // Confirmed: the delete's answer, and with it the detach, is handled before the expiry below.
  for (std::size_t i : {0u, 2u, 4u})
    ASSERT_EQ(held[i].release_and_confirm(scaled(10s)), ReleaseOutcome::held_to_the_end) << "holder " << i;
  std::atomic<bool> stopped_before{false};
  std::stop_callback on_stop(held[1].lost_token(), [&stopped_before] { stopped_before = true; });

  server->expire_session(old_session);
  for (std::size_t i : {1u, 3u}) {
    ASSERT_EQ(told[i].wait_for(scaled(10s)), std::future_status::ready) << "holder " << i;
    EXPECT_EQ(told[i].get(), LossReason::session_lost);
    EXPECT_TRUE(held[i].lost());
  }
  EXPECT_TRUE(stopped_before) << "a token taken before the loss was not stopped";
  EXPECT_TRUE(held[3].lost_token().stop_requested()) << "a token taken after the loss is not stopped";
  for (std::size_t i : {0u, 2u, 4u}) {
    EXPECT_EQ(told[i].wait_for(0ms), std::future_status::timeout) << "released holder " << i << " told of a loss";
    EXPECT_FALSE(held[i].lost());
  }
  EXPECT_EQ(session->metrics().locks_lost, 2u);

  // The list still takes new listeners after all this: a lock on the new session.
  HeldLock again = locks[0]->acquire();
  EXPECT_EQ(again.session_id(), session->id());
  EXPECT_NE(again.session_id(), old_session);
}

// The server stops answering (every reply held). The monitor declares the session lost by its own
// deadline, last proof of life + timeout - margin - forward lag, without waiting for the client library to
// notice anything, and tells the holder then.
TEST_F(QueueInterleaving, SilentServerIsDeclaredLostByTheDeadline) {
  const auto timeout = scaled(2000ms);
  const std::string parent = "/locks/silent-server";
  server->ensure_path(parent);
  auto session = open_session(timeout);
  const auto old_session = session->id();
  Lock lock(*session, parent);
  HeldLock held = lock.acquire();
  // Let the heartbeats run for a while, answered.
  ASSERT_TRUE(wait_until([&] { return session->metrics().heartbeats_sent >= 2; }));

  std::promise<std::chrono::steady_clock::time_point> session_lost, lock_lost;
  auto subscription = session->on_state_change([&session_lost, first = true](SessionState state) mutable {
    if (state == SessionState::lost && std::exchange(first, false))
      session_lost.set_value(std::chrono::steady_clock::now());
  });
  held.on_lost([&lock_lost](LossReason) { lock_lost.set_value(std::chrono::steady_clock::now()); });
  auto session_lost_at = session_lost.get_future();
  auto lock_lost_at = lock_lost.get_future();

  server->pause(old_session);
  const auto paused_at = std::chrono::steady_clock::now();
  ASSERT_EQ(session_lost_at.wait_for(timeout * 3), std::future_status::ready);
  const auto declared = session_lost_at.get();
  ASSERT_EQ(lock_lost_at.wait_for(scaled(5s)), std::future_status::ready);
  const auto holder_told = lock_lost_at.get();

  const auto last_acknowledged_send = server->last_answered_send(old_session);
  const auto margin = session->lead_time();
  EXPECT_EQ(margin, timeout / 4);  // the default safety margin fits
  // The latest answer is credited with an earlier one at least a tick older, or with the rule
  // without one (fallback lag): the deadline lies between those two.
  const auto& core = detail::Internals::core(*session);
  const auto deadline = last_acknowledged_send + timeout - margin - core->fallback_lag();
  const auto latest_deadline = last_acknowledged_send + timeout - margin - 20ms;  // the fake's tick
  const auto earliest_server_expiry = last_acknowledged_send + timeout - core->forward_lag();
  const auto ms_since_pause = [&](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - paused_at).count();
  };
  const auto measured = fmt::format(
      "ms after the pause: last acknowledged send {:.1f}, deadline {:.1f}, declared {:.1f}, holder told {:.1f}",
      ms_since_pause(last_acknowledged_send), ms_since_pause(deadline), ms_since_pause(declared),
      ms_since_pause(holder_told));
  fmt::print("{}\n", measured);
  SCOPED_TRACE(measured);
  EXPECT_LE(last_acknowledged_send, paused_at);
  // Not before the deadline (the server heard from us until last_acknowledged_send)...
  EXPECT_GE(declared, deadline - 5ms);
  // ...and by the deadline, with a bounded scheduling delay that stays far from the server's expiry.
  EXPECT_LE(declared, latest_deadline + margin / 5);
  EXPECT_LT(holder_told, earliest_server_expiry);
  EXPECT_EQ(held.loss_reason(), LossReason::session_lost);

  const auto metrics = session->metrics();
  EXPECT_EQ(metrics.losses_by_deadline, 1u);
  EXPECT_EQ(metrics.losses_by_expiry, 0u);
  // A new session replaces it; the old one is never resumed.
  ASSERT_TRUE(session->wait_connected(scaled(10s)));
  EXPECT_NE(session->id(), old_session);
  server->resume(old_session);
}

// Long heartbeats (zkr/session.hpp): with a 6 s session, a 2.1 s lead time and a 400 ms tick, a
// sync every (6 - 2.1) / 3 = 1.3 s, each credited with the send of the one before, answered at
// least a tick earlier: its deadline is that send plus 3.9 s, 2.6 s after its own send, where the
// rule without an earlier answer gives 3.9 s - (0.2 + 1.3) s = 2.4 s. Never more than the
// tolerated silence.
TEST_F(QueueInterleaving, LongHeartbeatsAreEachCreditedWithTheOneBefore) {
  SessionOptions options;
  options.session_timeout = 6000ms;
  options.ensemble_tick_time = 400ms;
  options.safety_margin = 2100ms;
  auto opened = open_session_with(options);
  Session& session = *opened;
  const auto& core = detail::Internals::core(session);
  ASSERT_EQ(core->heartbeat_interval(), 1300ms);
  ASSERT_EQ(session.lead_time(), 2100ms);
  ASSERT_EQ(session.silence_tolerance(), 2600ms);
  std::mutex mutex;
  std::vector<std::chrono::milliseconds> ahead;  // each deadline, less the moment it was heard
  auto listening = session.on_deadline([&](SessionDeadline deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - BootClock::now());
    std::lock_guard lock(mutex);
    ahead.push_back(left);
  });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mutex);
    return ahead.size() >= 5;
  }));
  std::lock_guard lock(mutex);
  std::chrono::milliseconds most{0};
  for (const auto left : ahead) {
    EXPECT_LE(left, session.silence_tolerance()) << "a deadline further ahead than the silence tolerated";
    most = std::max(most, left);
  }
  EXPECT_GT(most, 2500ms) << "no heartbeat was credited with the one before it";
}

// Short heartbeats are credited with their send less half a tick and one interval: the session's
// previous request was at most an interval earlier. Not after a gap: a 4 s session, a 200 ms lead
// time and a 1.5 s tick send one every 667 ms with a 1.417 s forward lag, and the worker is kept
// busy (a freeze) for 1.6 s, less than the deadline is ahead. The first heartbeat after the gap
// must not be credited with a moment after the last one before it, so every deadline heard just
// after the gap is at most the timeout less the lead time after the gap began.
TEST_F(QueueInterleaving, AHeartbeatAfterAGapIsNotCreditedWithTheGap) {
  SessionOptions options;
  options.session_timeout = 4000ms;
  options.ensemble_tick_time = 1500ms;
  options.safety_margin = 200ms;
  auto opened = open_session_with(options);
  Session& session = *opened;
  const auto& core = detail::Internals::core(session);
  ASSERT_EQ(core->heartbeat_interval(), 666ms);
  ASSERT_EQ(core->forward_lag(), 1416ms);
  std::mutex mutex;
  std::vector<std::pair<BootClock::time_point, BootClock::time_point>> heard;  // when, the deadline
  auto listening = session.on_deadline([&](SessionDeadline deadline) {
    std::lock_guard lock(mutex);
    heard.emplace_back(BootClock::now(), deadline.at);
  });
  ASSERT_TRUE(wait_until([&] {
    std::lock_guard lock(mutex);
    return heard.size() >= 3;
  }));

  std::promise<void> unblock, busy;
  auto worker_busy = std::make_shared<std::shared_future<void>>(unblock.get_future().share());
  boost::asio::post(core->worker(), [worker_busy, &busy] {
    busy.set_value();
    worker_busy->wait();
  });
  busy.get_future().wait();
  const auto gap_began = BootClock::now();  // no heartbeat is sent from here on
  std::this_thread::sleep_for(1600ms);
  const auto gap_ended = BootClock::now();
  unblock.set_value();
  std::this_thread::sleep_for(400ms);  // the first heartbeat after the gap is answered; not the second

  std::lock_guard lock(mutex);
  int after_gap = 0;
  for (const auto& [when, deadline] : heard) {
    if (when < gap_ended) continue;
    ++after_gap;
    EXPECT_LE(deadline, gap_began + options.session_timeout - options.safety_margin)
        << "a heartbeat after the gap was credited with a moment inside it";
  }
  EXPECT_GE(after_gap, 1) << "no heartbeat was answered after the gap";
  EXPECT_EQ(session.metrics().sessions_lost, 0u);
}

// An answer that came less than a tick before the next heartbeat vouches for nothing: no leader
// ping need have fallen in between. A 12 s session, a 4.2 s lead time and an 800 ms tick: a sync
// every 2.6 s, 5.2 s of silence tolerated. Right after one deadline (heartbeat k answered), the
// replies are held from 2.1 s to 4.8 s: heartbeat k+1 (sent at 2.6 s) is answered at 4.8 s, 0.4 s
// before heartbeat k+2 is sent. Heartbeat k+2 must not be credited with k+1's send (its deadline
// 5.2 s ahead) but with the rule without an earlier answer: 3 s before its own send, 4.8 s ahead.
TEST_F(QueueInterleaving, AHeartbeatIsNotCreditedWithAnAnswerThatCameTooLate) {
  SessionOptions options;
  options.session_timeout = 12000ms;
  options.ensemble_tick_time = 800ms;
  options.safety_margin = 4200ms;
  auto opened = open_session_with(options);
  Session& session = *opened;
  const auto& core = detail::Internals::core(session);
  ASSERT_EQ(core->heartbeat_interval(), 2600ms);
  ASSERT_EQ(session.silence_tolerance(), 5200ms);
  std::mutex mutex;
  std::condition_variable heard_one;
  std::vector<std::pair<BootClock::time_point, std::chrono::milliseconds>> heard;  // when, how far ahead
  auto listening = session.on_deadline([&](SessionDeadline deadline) {
    const auto now = BootClock::now();
    std::lock_guard lock(mutex);
    heard.emplace_back(now, std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - now));
    heard_one.notify_all();
  });
  {
    // A heartbeat after the first (the first is sent with the connection): one answered on a
    // connection that had answered before.
    std::unique_lock lock(mutex);
    ASSERT_TRUE(heard_one.wait_for(lock, scaled(20s), [&] { return heard.size() >= 3; }));
  }
  const auto answered = BootClock::now();
  std::this_thread::sleep_until(answered + 2100ms);
  server->pause(session.id());
  std::this_thread::sleep_until(answered + 4800ms);
  server->resume(session.id());
  const auto resumed = BootClock::now();
  std::unique_lock lock(mutex);
  ASSERT_TRUE(heard_one.wait_for(lock, scaled(10s), [&] { return !heard.empty() && heard.back().first > resumed + 200ms; }));
  const auto next = std::find_if(heard.begin(), heard.end(), [&](const auto& each) { return each.first > resumed + 200ms; });
  EXPECT_LE(next->second, 5000ms) << "a heartbeat was credited with an answer less than a tick older than its send";
  EXPECT_GE(next->second, 4400ms);
}

// Session::on_deadline, which zklock relays to its keeper: the current deadline at once, then each
// move as the heartbeats are answered, each at most the silence the session tolerates after it was
// heard; and the last one heard before the server fell silent is the moment the monitor declares
// the session lost, never later.
TEST_F(QueueInterleaving, DeadlineListenerHearsEachMoveAndNoneLaterThanTheLoss) {
  const auto timeout = scaled(2000ms);
  auto session = open_session(timeout);
  const auto session_id = session->id();
  // Shared with the listeners: a notice already on the callback thread may still run after the
  // test's subscriptions are gone.
  struct Heard {
    std::mutex mutex;
    std::vector<std::pair<SessionDeadline, BootClock::time_point>> deadlines;  // with when each was heard
    std::promise<BootClock::time_point> session_lost;
    bool lost_told = false;
  };
  const auto shared = std::make_shared<Heard>();
  std::mutex& mutex = shared->mutex;
  auto& heard = shared->deadlines;
  auto deadlines = session->on_deadline([shared](SessionDeadline deadline) {
    std::lock_guard guard(shared->mutex);
    shared->deadlines.emplace_back(deadline, BootClock::now());
  });
  auto states = session->on_state_change([shared](SessionState state) {
    std::lock_guard guard(shared->mutex);
    if (state == SessionState::lost && !std::exchange(shared->lost_told, true))
      shared->session_lost.set_value(BootClock::now());
  });
  auto lost_at = shared->session_lost.get_future();
  const auto heard_count = [&] {
    std::lock_guard guard(mutex);
    return heard.size();
  };
  ASSERT_TRUE(wait_until([&] { return heard_count() >= 4; }));

  server->pause(session_id);
  ASSERT_EQ(lost_at.wait_for(timeout * 3), std::future_status::ready);
  const auto declared = lost_at.get();
  std::vector<std::pair<SessionDeadline, BootClock::time_point>> of_the_session;
  {
    std::lock_guard guard(mutex);
    for (const auto& entry : heard)
      if (entry.first.session_id == session_id) of_the_session.push_back(entry);
  }
  ASSERT_GE(of_the_session.size(), 4u);
  for (std::size_t i = 0; i < of_the_session.size(); ++i) {
    const auto& [deadline, when] = of_the_session[i];
    EXPECT_LE(deadline.at, when + session->silence_tolerance()) << "deadline " << i;
    if (i > 0) {
      EXPECT_GT(deadline.at, of_the_session[i - 1].first.at) << "deadline " << i << " did not move on";
    }
  }
  const auto last = of_the_session.back().first.at;
  EXPECT_LE(last, declared) << "a deadline later than the loss was announced";
  // Heard on the callback thread: on a loaded machine (a CI run's parallel tests on two cores) it
  // came 143 ms after a deadline that a 100 ms check finds; half the lead time still leaves the
  // other half before the server could expire the session.
  EXPECT_LE(declared - last, session->lead_time() / 2) << "the monitor declared the loss long after the deadline";
  server->resume(session_id);
}

// The container parent is reaped by the server after we created it and before our node's create
// arrives: the create answers NONODE, and the contender creates the parent again and is granted.
TEST_F(QueueInterleaving, ContainerParentReapedBetweenParentCreateAndNodeCreateIsRetried) {
  const std::string parent = "/locks/reaped-parent";
  auto session = open_session();
  const auto session_id = session->id();
  // The first node create finds no parent (and the contender creates it); the second one finds the
  // parent reaped just before it is applied.
  Fault reap;
  reap.op = Op::create;
  reap.path_prefix = parent + "/";
  reap.skip = 1;
  reap.before = [this, parent] { EXPECT_EQ(server->remove(parent), zk_errc::ok); };
  server->inject(reap);
  Lock lock(*session, parent);
  BackgroundAcquire acquire(lock, kForever);
  ASSERT_TRUE(acquire.finished(scaled(10s)));
  ASSERT_FALSE(acquire.error()) << acquire.error().message();
  HeldLock held = acquire.take();

  EXPECT_EQ(server->pending_faults(), 0u);
  const auto node_creates = requests_of(session_id, Op::create, parent + "/");
  ASSERT_EQ(node_creates.size(), 3u);
  EXPECT_EQ(node_creates[0].reported_rc, zk_errc::no_node);
  EXPECT_EQ(node_creates[1].reported_rc, zk_errc::no_node);
  EXPECT_EQ(node_creates[2].reported_rc, zk_errc::ok);
  std::size_t parent_creates = 0;
  for (const auto& record : requests_of(session_id, Op::create, parent))
    if (record.path == parent && record.applied) ++parent_creates;
  EXPECT_EQ(parent_creates, 2u);
  const auto parent_node = server->node(parent);
  ASSERT_TRUE(parent_node);
  EXPECT_EQ(parent_node->mode, detail::CreateMode::container);
  const auto children = server->children(parent);
  ASSERT_EQ(children.size(), 1u);
  EXPECT_EQ(held.node_path(), child_of(parent, children[0]));
  EXPECT_EQ(held.token(), FencingToken(server->node(held.node_path())->stat.czxid));
}

// Semaphore of 2. The first two waiters watch the children; the third watches the two waiters
// ahead of it. It lists the queue while both are still waiters; a release then promotes the
// first (its grant touches its node) and moves the second up to first waiter (which touches too),
// all before the third waiter's watches are set. The watches alone would wait for changes that
// already happened; the third waiter must see the touched versions, move up into the
// children-watching pair, and be granted once its turn comes.
TEST_F(QueueInterleaving, SemaphoreWaiterWhosePredecessorsMovedBeforeItsWatchesMovesUp) {
  const std::string path = "/semaphores/promoted-predecessor";
  auto holders_session = open_session();
  auto waiter_session = open_session();
  const auto waiter_id = waiter_session->id();
  Semaphore holders(*holders_session, path, 2), waiters(*waiter_session, path, 2);
  Lease first = holders.acquire();
  Lease second = holders.acquire();
  BackgroundAcquire first_waiter(holders, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 3 && server->children_watches(path) == 1; }));
  BackgroundAcquire second_waiter(holders, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 4 && server->children_watches(path) == 2; }));

  server->pause(waiter_id);
  BackgroundAcquire third_waiter(waiters, kForever);
  // Its listing (holder, holder, waiter, waiter, itself) is applied; the reply waits on the wire.
  ASSERT_TRUE(wait_until([&] { return requests_of(waiter_id, Op::get_children, path).size() == 1; }));
  first.release();
  ASSERT_TRUE(first_waiter.finished(scaled(10s)));
  ASSERT_FALSE(first_waiter.error()) << first_waiter.error().message();
  Lease promoted = first_waiter.take();
  ASSERT_TRUE(wait_until([&] { return server->node(promoted.node_path())->stat.version >= 2; }));  // the grant touch

  server->resume(waiter_id);
  // It watched the two waiters ahead, saw their touches, listed again and now watches the children.
  // (It may list a third time, when the second waiter's move-up touch lands after its second
  // listing; each listing leaves a watch, so count the sessions' watches, not the total.)
  ASSERT_TRUE(wait_until([&] { return requests_of(waiter_id, Op::get_children, path).size() >= 2; }));
  ASSERT_FALSE(requests_of(waiter_id, Op::get_data, promoted.node_path()).empty());
  ASSERT_TRUE(wait_until([&] { return server->children_watches(path, waiter_id) >= 1; }));
  EXPECT_FALSE(third_waiter.finished());

  second.release();
  ASSERT_TRUE(second_waiter.finished(scaled(10s)));
  Lease middle = second_waiter.take();
  EXPECT_FALSE(third_waiter.finished());
  promoted.release();
  ASSERT_TRUE(third_waiter.finished(scaled(10s))) << "the third waiter missed its promotion";
  ASSERT_FALSE(third_waiter.error()) << third_waiter.error().message();
  Lease granted = third_waiter.take();
  EXPECT_GT(granted.token(), middle.token());
  EXPECT_EQ(server->children(path).size(), 2u);
}

// Semaphore of 2. A waiter is promoted, but its grant touch (the rewrite that tells the waiters
// behind it to move up) is lost with the connection before it takes effect, and the waiter
// between it and the last one is frozen (its session paused), so the grant touch is the last
// waiter's only news. The touch must be sent again once the same session is back, so that the
// last waiter moves up and is granted when its turn comes, frozen neighbour or not.
TEST_F(QueueInterleaving, SemaphoreTouchLostWithTheConnectionIsResentAndTheNextWaiterMovesUp) {
  const std::string path = "/semaphores/lost-touch";
  auto holders_session = open_session();
  auto promoted_session = open_session();
  auto frozen_session = open_session();
  auto last_session = open_session();
  const auto promoted_id = promoted_session->id();
  const auto frozen_id = frozen_session->id();
  const auto last_id = last_session->id();
  Semaphore holders(*holders_session, path, 2), promoted(*promoted_session, path, 2),
      frozen(*frozen_session, path, 2), last(*last_session, path, 2);
  Lease first = holders.acquire();
  Lease second = holders.acquire();
  BackgroundAcquire first_waiter(promoted, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 3 && server->children_watches(path) == 1; }));
  const std::string first_waiter_node = requests_of(promoted_id, Op::create, path + "/").at(0).created;
  // The first waiter's own touch (to version 1) is in.
  ASSERT_TRUE(wait_until([&] { return server->node(first_waiter_node)->stat.version == 1; }));
  BackgroundAcquire frozen_waiter(frozen, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 4 && server->children_watches(path) == 2; }));
  const std::string frozen_node = requests_of(frozen_id, Op::create, path + "/").at(0).created;
  BackgroundAcquire last_waiter(last, kForever);
  // The last waiter watches the two waiters ahead. The first one's touch (version 1) makes it list
  // once more at first sight and watch both again; only then has it settled.
  ASSERT_TRUE(wait_until([&] {
    return server->children(path).size() == 5 && requests_of(last_id, Op::get_children, path).size() >= 2 &&
           server->data_watches(first_waiter_node, last_id) >= 2 && server->data_watches(frozen_node, last_id) >= 2 &&
           server->queued(last_id) == 0;
  }));
  server->pause(frozen_id);
  const auto last_listings = requests_of(last_id, Op::get_children, path).size();
  Fault touch_lost;
  touch_lost.op = Op::set_data;
  touch_lost.path_prefix = first_waiter_node;
  touch_lost.session = promoted_id;
  touch_lost.rc = zk_errc::connection_loss;
  touch_lost.drop_connection = true;
  server->inject(touch_lost);

  first.release();
  ASSERT_TRUE(first_waiter.finished(scaled(10s)));
  ASSERT_FALSE(first_waiter.error()) << first_waiter.error().message();
  Lease promoted_lease = first_waiter.take();
  ASSERT_TRUE(wait_until([&] { return promoted_session->state() == SessionState::suspended; }));
  EXPECT_EQ(server->node(first_waiter_node)->stat.version, 1);  // the grant touch never arrived
  EXPECT_EQ(server->pending_faults(), 0u);
  EXPECT_EQ(requests_of(last_id, Op::get_children, path).size(), last_listings);  // nothing told the last waiter

  server->reconnect(promoted_id);
  ASSERT_TRUE(wait_until([&] { return server->node(first_waiter_node)->stat.version >= 2; }));
  // The last waiter saw the touch and moved up into the children-watching pair (it lists again).
  ASSERT_TRUE(wait_until([&] { return requests_of(last_id, Op::get_children, path).size() > last_listings; }));
  EXPECT_FALSE(last_waiter.finished());

  second.release();  // the frozen waiter's place now holds a lease it has not taken
  promoted_lease.release();
  ASSERT_TRUE(last_waiter.finished(scaled(10s))) << "the last waiter never moved up";
  ASSERT_FALSE(last_waiter.error()) << last_waiter.error().message();
  Lease granted = last_waiter.take();
  EXPECT_GT(granted.token(), promoted_lease.token());
  server->resume(frozen_id);
  ASSERT_TRUE(frozen_waiter.finished(scaled(10s)));
}

// A request the server answers by dropping the connection, every time it is sent (as it does
// with one larger than its jute.maxbuffer). Resending it after every reconnect would keep the
// session flapping forever; the acquisition gives up after a bounded number of drops in a row,
// deletes its node, and the session serves the other recipes as before.
TEST_F(QueueInterleaving, ARequestThatDropsTheConnectionEveryTimeFailsAfterABoundedNumberOfResends) {
  const std::string path = "/locks/refused";
  auto holder_session = open_session();
  auto session = open_session();
  const auto id = session->id();
  Lock holders(*holder_session, path), refused(*session, path), other(*session, "/locks/other");
  // Queued behind a holder and a waiter, our contender watches the waiter; when that waiter
  // leaves, it lists the queue again, and that listing is what the server refuses.
  HeldLock held_by_other = holders.acquire();
  BackgroundAcquire leaving(holders, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 2; }));
  BackgroundAcquire acquire(refused, kForever);
  ASSERT_TRUE(wait_until([&] { return server->children(path).size() == 3 && server->queued(id) == 0; }));
  constexpr int kFaults = 40;
  for (int i = 0; i < kFaults; ++i) {
    Fault drop;
    drop.op = Op::get_children;
    drop.path_prefix = path;
    drop.session = id;
    drop.rc = zk_errc::connection_loss;
    drop.drop_connection = true;
    server->inject(drop);
  }
  leaving.cancel();
  int reconnects = 0;
  for (; reconnects < kFaults && !acquire.finished(); ++reconnects) {
    if (!wait_until([&] { return !server->connected(id) || acquire.finished(); })) break;
    if (acquire.finished()) break;
    server->reconnect(id);
  }
  ASSERT_TRUE(acquire.finished(scaled(10s))) << "the refused request was resent " << reconnects << " times";
  EXPECT_EQ(acquire.error(), zk_errc::connection_loss);
  EXPECT_LE(reconnects, 12);
  EXPECT_GE(reconnects, 5);  // a passing drop or two is not a refusal
  if (!server->connected(id)) server->reconnect(id);
  // Its node is gone, the session lives, and another lock on it is granted at once.
  EXPECT_TRUE(wait_until([&] { return server->children(path).size() == 1; }))
      << server->children(path).size() << " connected " << server->connected(id) << " state "
      << static_cast<int>(session->state()) << " reconnects " << reconnects;
  EXPECT_TRUE(server->session_alive(id));
  auto held = other.try_acquire_for(scaled(5s));
  EXPECT_TRUE(held);
}

// A lock refuses a semaphore's path by the limit recorded in the path node's data. A path node
// without data needs no read for that: the listing's Stat of the parent shows it, so an
// acquisition is its create and its listing. A path node with data is read before any grant,
// and refused if it is a semaphore's record.
TEST_F(QueueInterleaving, LockReadsItsPathNodesDataOnlyWhenThereIsSome) {
  auto session = open_session();
  const auto id = session->id();
  // Requests on the path node itself (the own-node watch reads a child of it).
  const auto requests_on = [&](Op op, const std::string& node) {
    return server->count_requests(
        [&](const RequestRecord& record) { return record.session == id && record.op == op && record.path == node; });
  };
  server->ensure_path("/plain", detail::CreateMode::persistent);
  Lock plain(*session, "/plain");
  plain.acquire().release();
  EXPECT_EQ(requests_on(Op::get_data, "/plain"), 0u);
  EXPECT_EQ(requests_on(Op::get_children, "/plain"), 1u);

  server->ensure_path("/annotated", detail::CreateMode::persistent);
  ASSERT_EQ(server->set_data("/annotated", "owned by the nightly job"), zk_errc::ok);
  Lock annotated(*session, "/annotated");
  annotated.acquire().release();
  EXPECT_EQ(requests_on(Op::get_data, "/annotated"), 1u);

  server->ensure_path("/semaphore", detail::CreateMode::persistent);
  ASSERT_EQ(server->set_data("/semaphore", "max_leases=3"), zk_errc::ok);
  Lock on_a_semaphore(*session, "/semaphore");
  std::error_code ec;
  EXPECT_FALSE(on_a_semaphore.try_acquire_for(kForever, {}, ec));
  EXPECT_EQ(ec, errc::incompatible_peer);
  EXPECT_TRUE(wait_until([&] { return server->node("/semaphore")->children.empty(); }));
}


// An acquisition of a Curator-layout semaphore made on a closed session ends (session_closed)
// after the session's worker thread has stopped. Nothing it leaves queued for that worker may
// keep the session alive: once the program lets go of the Session and the Semaphore, the session
// is freed (before, a cleanup queued there held the acquisition, which holds the session).
// A grant and the expiry of the acquisition's timer, ordered both ways on purpose, for every
// recipe whose acquisition can time out while its grant is being decided: a lock, a semaphore of
// the library's own layout, and one in each peer's layout (where the grant is the lease's create,
// a step of its own). Whichever comes first is the one outcome: the caller sees it, the path's
// series counts exactly it, and no node is left behind once the grant (if any) is released.
enum class RacingRecipe { lock, semaphore, curator_semaphore, kazoo_semaphore };
enum class FirstToArrive { grant, timer };

std::string_view to_string(RacingRecipe recipe) {
  switch (recipe) {
    case RacingRecipe::lock: return "lock";
    case RacingRecipe::semaphore: return "semaphore";
    case RacingRecipe::curator_semaphore: return "curator_semaphore";
    case RacingRecipe::kazoo_semaphore: return "kazoo_semaphore";
  }
  return "?";
}

class GrantRacingTimer : public QueueInterleaving,
                         public ::testing::WithParamInterface<std::tuple<RacingRecipe, FirstToArrive>> {
 protected:
  RacingRecipe recipe() const { return std::get<0>(GetParam()); }
  bool grant_first() const { return std::get<1>(GetParam()) == FirstToArrive::grant; }

  const std::string path = fmt::format("/race/{}-{}", to_string(recipe()), grant_first() ? "grant" : "timer");

  std::unique_ptr<Session> open_labelled_session() {
    // Every parent there already: the grant is then the first listing (or lease create) answered.
    for (const auto& parent : contender_parents()) server->ensure_path(parent, detail::CreateMode::persistent);
    if (recipe() == RacingRecipe::semaphore) server->set_data(path, "max_leases=1");  // the limit its first acquirer records
    SessionOptions options;
    options.servers = "fake:2181";
    options.session_timeout = 120s;
    options.connect_timeout = scaled(10s);
    options.ensemble_tick_time = 20ms;
    options.metrics_path_labels.paths = {path};
    auto core = std::make_shared<detail::SessionCore>(options, fake_factory(server));
    core->connect_or_throw();
    return std::make_unique<Session>(detail::Internals::key(), core);
  }

  // The reply whose delivery grants, given what was delivered before it: the listing that finds
  // our node first; for a peer's lease (held once created), the listing that finds it created.
  bool grants(const std::string& entry, const std::vector<std::string>& delivered) const {
    if (recipe() == RacingRecipe::lock || recipe() == RacingRecipe::semaphore) return entry == "get_children " + path;
    const std::string leases = recipe() == RacingRecipe::curator_semaphore ? path + "/leases" : path;
    const bool lease_created = std::any_of(delivered.begin(), delivered.end(), [&](const std::string& done) {
      return done.starts_with("create " + leases + "/");
    });
    return lease_created && entry == "get_children " + leases;
  }

  // Where the recipe's layout puts its contenders' nodes.
  std::vector<std::string> contender_parents() const {
    if (recipe() == RacingRecipe::curator_semaphore) return {path + "/locks", path + "/leases"};
    if (recipe() == RacingRecipe::kazoo_semaphore) return {path, path + "-__lock__"};
    return {path};
  }

  // Every node a contender made (parents and the limit aside).
  std::vector<std::string> contender_nodes() const {
    std::vector<std::string> out;
    for (const auto& parent : contender_parents())
      for (const auto& child : server->children(parent)) out.push_back(child_of(parent, child));
    return out;
  }

  LockMetrics series(Session& session) const {
    for (const auto& series : session.metrics().locks)
      if (series.path == path) return series;
    ADD_FAILURE() << "no series for " << path;
    return {};
  }
};

TEST_P(GrantRacingTimer, TheFirstIsTheOneOutcomeCountedAndNoNodeIsLeft) {
  auto session = open_labelled_session();
  const std::int64_t id = session->id();
  auto core = detail::Internals::core(*session);
  std::optional<Lock> lock;
  std::optional<Semaphore> semaphore;
  if (recipe() == RacingRecipe::lock) {
    lock.emplace(*session, path);
  } else {
    SemaphoreOptions options;
    options.layout = recipe() == RacingRecipe::semaphore           ? SemaphoreLayout::zkrecipes
                     : recipe() == RacingRecipe::curator_semaphore ? SemaphoreLayout::curator_v2
                                                                   : SemaphoreLayout::kazoo;
    semaphore.emplace(*session, path, 1, options);
  }

  const auto timeout = scaled(1s);
  auto told = std::make_shared<std::promise<std::pair<std::error_code, HeldLock>>>();
  auto outcome = told->get_future();
  AcquireHandler handler = [told](std::error_code ec, HeldLock held) { told->set_value({ec, std::move(held)}); };
  server->pause(id);
  const auto started = std::chrono::steady_clock::now();
  if (lock) lock->async_acquire(timeout, handler);
  else semaphore->async_acquire(timeout, handler);

  // Deliver everything up to the reply that grants, and hold that one.
  std::vector<std::string> delivered;
  std::string next;
  for (int i = 0; i < 100 && !grants(next, delivered); ++i) {
    if (!next.empty()) {
      ASSERT_EQ(server->step(id), 1u);
      delivered.push_back(next);
    }
    ASSERT_TRUE(wait_until([&] { return !server->queued_entries(id).empty(); }))
        << "delivered: " << fmt::format("{}", fmt::join(delivered, "; "));
    next = server->queued_entries(id).front();
  }
  ASSERT_TRUE(grants(next, delivered)) << "delivered: " << fmt::format("{}", fmt::join(delivered, "; "));
  ASSERT_LT(std::chrono::steady_clock::now() - started, timeout) << "the machine is too slow for this timeout";

  // The callback thread held: a recipe that learns of its step's grant there (a peer's semaphore)
  // cannot act on it before the timer.
  std::promise<void> hold_started, let_go;
  auto let_go_future = let_go.get_future().share();
  core->post_callback([&hold_started, let_go_future] {
    hold_started.set_value();
    let_go_future.wait();
  });
  hold_started.get_future().wait();
  if (grant_first()) {
    ASSERT_EQ(server->step(id), 1u);  // the grant, decided on the connection's thread
    ASSERT_TRUE(wait_until([&] { return series(*session).held == 1; })) << "not granted by " << next;
  }
  std::this_thread::sleep_until(started + timeout + scaled(200ms));  // the timer has fired by now
  if (recipe() == RacingRecipe::curator_semaphore || recipe() == RacingRecipe::kazoo_semaphore) {
    // The acquisition ended (by the timer, with the callback thread held): its internal lock goes.
    const std::string internal = recipe() == RacingRecipe::curator_semaphore ? path + "/locks" : path + "-__lock__";
    EXPECT_TRUE(wait_until([&] { return server->children(internal).empty(); }));
  }
  let_go.set_value();
  server->resume(id);

  ASSERT_EQ(outcome.wait_for(scaled(10s)), std::future_status::ready);
  auto [ec, held] = outcome.get();
  ASSERT_TRUE(wait_until([&] { return server->queued(id) == 0; }));
  const LockMetrics counted = series(*session);
  EXPECT_EQ(counted.waiting, 0);
  if (grant_first()) {
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(held);
    EXPECT_EQ(counted.wait.count, 1u);
    EXPECT_EQ(counted.held, 1);
    EXPECT_EQ(counted.timeouts, 0u);
    EXPECT_EQ(contender_nodes(), std::vector<std::string>{held.node_path()});
    held.release();
  } else {
    EXPECT_EQ(ec, make_error_code(errc::timed_out));
    EXPECT_FALSE(held);
    EXPECT_EQ(counted.wait.count, 0u);
    EXPECT_EQ(counted.timeouts, 1u);
  }
  EXPECT_TRUE(wait_until([&] { return contender_nodes().empty(); }))
      << fmt::format("left behind: {}", fmt::join(contender_nodes(), ", "));
  const LockMetrics after = series(*session);
  EXPECT_EQ(after.held, 0);
  EXPECT_EQ(after.waiting, 0);
  EXPECT_EQ(after.wait.count + after.timeouts + after.cancellations + after.busy + after.failures, 1u)
      << "grants " << after.wait.count << ", timeouts " << after.timeouts;
  EXPECT_EQ(after.hold.count, after.wait.count);
  const SessionMetrics totals = session->metrics();
  EXPECT_EQ(totals.acquisitions + totals.acquire_timeouts, 1u);
}

INSTANTIATE_TEST_SUITE_P(BothOrders, GrantRacingTimer,
                         ::testing::Combine(::testing::Values(RacingRecipe::lock, RacingRecipe::semaphore,
                                                              RacingRecipe::curator_semaphore,
                                                              RacingRecipe::kazoo_semaphore),
                                            ::testing::Values(FirstToArrive::grant, FirstToArrive::timer)),
                         [](const auto& test) {
                           return fmt::format("{}_{}_first", to_string(std::get<0>(test.param)),
                                              std::get<1>(test.param) == FirstToArrive::grant ? "grant" : "timer");
                         });

// A multi-lock takes its paths in rounds: a path granted in a round is let go of again when a path
// before it is busy (c, after the busy b) or when the whole times out (a, kept while b is waited
// for). Neither is the caller's grant: each path's series counts the one outcome the caller saw,
// a timeout, and no grant or hold.
TEST_F(QueueInterleaving, AMultiLockCountsOnlyTheOutcomeOfTheWholeOnEachPath) {
  const std::vector<std::string> paths{"/multi/a", "/multi/b", "/multi/c"};
  for (const auto& path : paths) server->ensure_path(path, detail::CreateMode::persistent);
  SessionOptions options;
  options.servers = "fake:2181";
  options.session_timeout = 120s;
  options.connect_timeout = scaled(10s);
  options.ensemble_tick_time = 20ms;
  options.metrics_path_labels.paths = {"/multi/"};
  auto core = std::make_shared<detail::SessionCore>(options, fake_factory(server));
  core->connect_or_throw();
  Session session(detail::Internals::key(), core);
  auto other = open_session();
  Lock busy(*other, paths[1]);
  HeldLock held = busy.acquire();

  MultiLock multi(session, paths);
  EXPECT_FALSE(multi.try_acquire_for(scaled(300ms)));
  EXPECT_TRUE(wait_until([&] { return server->children(paths[0]).empty() && server->children(paths[2]).empty(); }));
  const auto metrics = session.metrics();
  for (const auto& path : paths) {
    SCOPED_TRACE(path);
    const auto series = std::find_if(metrics.locks.begin(), metrics.locks.end(),
                                     [&](const LockMetrics& m) { return m.path == path; });
    ASSERT_NE(series, metrics.locks.end());
    EXPECT_EQ(series->wait.count, 0u);
    EXPECT_EQ(series->timeouts, 1u);
    EXPECT_EQ(series->held, 0);
    EXPECT_EQ(series->waiting, 0);
    EXPECT_EQ(series->hold.count, 0u);
  }
  EXPECT_EQ(session.metrics().acquisitions, 0u);

  // Once b is free, the whole is granted: one grant on each path, held until released.
  held.release();
  auto granted = multi.try_acquire_for(scaled(2s));
  ASSERT_TRUE(granted);
  granted->release();
  EXPECT_TRUE(wait_until([&] { return server->children(paths[0]).empty() && server->children(paths[2]).empty(); }));
  for (const auto& series : session.metrics().locks) {
    if (series.path.empty()) continue;
    SCOPED_TRACE(series.path);
    EXPECT_EQ(series.wait.count, 1u);
    EXPECT_EQ(series.held, 0);
    EXPECT_EQ(series.hold.count, 1u);
  }
  EXPECT_EQ(session.metrics().acquisitions, 3u);
}

TEST_F(QueueInterleaving, APeerSemaphoreAcquisitionOnAClosedSessionLetsTheSessionGo) {
  auto session = open_session();
  const std::weak_ptr<detail::SessionCore> core = detail::Internals::core(*session);
  for (const auto layout : {SemaphoreLayout::curator_v2, SemaphoreLayout::kazoo}) {
    SemaphoreOptions options;
    options.layout = layout;
    Semaphore semaphore(*session, fmt::format("/semaphores/closed-{}", to_string(layout)), 2, options);
    session->close();
    auto told = std::make_shared<std::promise<std::error_code>>();
    auto outcome = told->get_future();
    semaphore.async_acquire(kForever, [told](std::error_code ec, HeldLock) { told->set_value(ec); });
    ASSERT_EQ(outcome.wait_for(scaled(10s)), std::future_status::ready);
    EXPECT_EQ(outcome.get(), errc::session_closed);
  }
  session.reset();
  EXPECT_TRUE(wait_until([&] { return core.expired(); })) << "the closed session is never freed";
}

// The fake's session clock: a session the server hears nothing of for its timeout is expired, as
// on a real server, and its client learns it on reconnecting; a connected session (a paused one
// too: its requests still arrive) is heard all along; one whose client closed its handle while
// cut off lingers, its nodes with it, until its timeout has passed.
TEST_F(QueueInterleaving, TheFakeExpiresASessionItHearsNothingOfForItsTimeout) {
  const std::string parent = "/locks/fake-time";
  server->ensure_path(parent);
  auto cut = open_session();
  auto paused = open_session();
  auto closed = open_session();
  Lock cut_lock(*cut, parent);
  HeldLock cut_held = cut_lock.acquire();
  const auto closed_node = closed->create(parent + "/member", {}, CreateMode::ephemeral);
  const auto cut_id = cut->id(), paused_id = paused->id(), closed_id = closed->id();

  server->drop_connection(cut_id);
  server->pause(paused_id);
  server->drop_connection(closed_id);
  ASSERT_TRUE(wait_until([&] { return closed->state() == SessionState::suspended; }));
  closed->close();
  EXPECT_TRUE(server->pass_time(119s).empty());
  EXPECT_TRUE(server->session_alive(cut_id));
  EXPECT_TRUE(server->session_alive(closed_id));
  EXPECT_TRUE(server->node(cut_held.node_path()));
  EXPECT_TRUE(server->node(closed_node));

  const auto expired = server->pass_time(1s);
  EXPECT_EQ(std::set<std::int64_t>(expired.begin(), expired.end()), (std::set<std::int64_t>{cut_id, closed_id}));
  EXPECT_FALSE(server->node(cut_held.node_path()));
  EXPECT_FALSE(server->node(closed_node));
  EXPECT_TRUE(server->session_alive(paused_id));
  EXPECT_FALSE(cut_held.lost());  // the client has heard nothing yet
  server->reconnect(cut_id);
  ASSERT_TRUE(wait_until([&] { return cut_held.lost(); }));
  EXPECT_EQ(cut_held.loss_reason(), LossReason::session_lost);
  server->resume(paused_id);
  EXPECT_TRUE(server->pass_time(1h).empty());  // connected sessions are heard

  // Time a session was heard again in does not count towards its next silence.
  server->drop_connection(paused_id);
  EXPECT_TRUE(server->pass_time(100s).empty());
  server->reconnect(paused_id);
  ASSERT_TRUE(wait_until([&] { return paused->state() == SessionState::connected; }));
  server->drop_connection(paused_id);
  EXPECT_TRUE(server->pass_time(100s).empty());
  EXPECT_TRUE(server->session_alive(paused_id));
}

}  // namespace
}  // namespace zkr::fake
