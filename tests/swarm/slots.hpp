// SPDX-License-Identifier: Apache-2.0
// The objects a swarm run keeps per session slot and per actor (internal to tests/swarm).
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include <testenv.hpp>
#include <zkr/fence_gate.hpp>

#include "swarm.hpp"

namespace zkr::swarm {

// A term of leadership as the test saw it begin or end (recorded on the callback thread or the
// selector's thread).
struct TermEvent {
  LeadershipEvent event = LeadershipEvent::gained;
  std::string node;
  FencingToken token;
  std::int64_t session_id = 0;
  std::uint64_t seq = 0;
};

struct LatchShared {
  std::mutex mutex;
  std::vector<TermEvent> events;  // not yet harvested
  bool close_on_gain = false;
  bool closed_by_listener = false;  // close_on_gain was carried out
  LeaderLatch* latch = nullptr;  // for the listener that closes it
};

struct Swarm::LatchSlot {
  std::unique_ptr<LeaderLatch> latch;
  std::shared_ptr<LatchShared> shared = std::make_shared<LatchShared>();
  Subscription listener;
  bool started = false;
  bool closed = false;
  int held_back_by = -1;  // the actor whose open AcquisitionBatch holds its join back, until sent
};

struct SelectorShared {
  std::mutex mutex;
  std::condition_variable_any changed;
  bool yield = false;         // the running function returns
  bool close_inside = false;  // the next term's function closes the selector
  LeaderSelector* selector = nullptr;
  std::optional<Leadership> running;  // the term whose function runs
  std::vector<TermEvent> events;
};

struct Swarm::SelectorSlot {
  std::unique_ptr<LeaderSelector> selector;
  std::shared_ptr<SelectorShared> shared = std::make_shared<SelectorShared>();
  bool started = false;
  bool closed = false;
};

struct WatchShared {
  std::mutex mutex;
  LeaderWatch* watch = nullptr;
  bool stop_inside = false;
  bool stopped_inside = false;
  int calls = 0;
};

struct Swarm::WatchSlot {
  std::unique_ptr<LeaderWatch> watch;
  std::shared_ptr<WatchShared> shared = std::make_shared<WatchShared>();
  bool stopped = false;
};

// A node as a tree cache must mirror it: its ephemeral owner and its data's last change (mzxid).
using CachedNode = std::pair<std::int64_t, std::int64_t>;

// What a tree cache's callback was told (path -> owner and data's change), recorded on the
// callback thread.
struct CacheTold {
  std::mutex mutex;
  std::map<std::string, CachedNode> nodes;
};

struct Swarm::SessionSlot {
  int slot = 0;
  int epoch = 0;
  std::unique_ptr<Session> session;
  bool closed = false;
  std::shared_ptr<std::atomic<bool>> closed_by_listener = std::make_shared<std::atomic<bool>>(false);
  Subscription close_on_change;
  std::map<std::pair<int, int>, std::unique_ptr<Lock>> locks;            // (resource, size class)
  std::map<int, std::unique_ptr<ReadWriteLock>> rwlocks;                 // size class
  std::map<std::pair<int, int>, std::unique_ptr<Semaphore>> semaphores;  // (resource, size class)
  std::map<int, std::unique_ptr<LatchSlot>> latches;                     // resource
  std::unique_ptr<SelectorSlot> selector;
  std::map<int, std::unique_ptr<WatchSlot>> watches;  // resource
  bool used_peer_semaphore = false;
  bool used_elections = false;
  // The start window check's: acquisitions the window does not count (Pending::window_counted)
  // that ended since the session last had no create unanswered, each of which may have left one.
  std::size_t window_exempt_ended = 0;
  // The session id and the next Pending::id when the session last had none unanswered: an
  // acquisition pending since before then on that session has no create out (its create and
  // first listing were answered; it does not create again without a new session).
  std::int64_t drained_session = 0;
  int drained_before_id = 0;
  // Objects of earlier epochs, kept until teardown (their HeldLocks may still be around).
  std::vector<std::unique_ptr<SessionSlot>> earlier;
  std::unique_ptr<TreeCache> cache;  // of the whole swarm tree (kRoot)
  std::shared_ptr<CacheTold> cache_told;  // its callback's
  // How often the session said it was suspended (the loss policy check); before the session goes.
  std::shared_ptr<std::atomic<int>> suspensions_told = std::make_shared<std::atomic<int>>(0);
  Subscription suspensions_watch;
};

struct Swarm::ActorState {
  Actor actor;
  std::unique_ptr<AcquisitionBatch> batch;
  int batch_slot = -1;
  int batch_epoch = -1;
  bool batch_effective = false;  // the first batch open on its session: it holds acquisitions back
  int blocking_pending = 0;      // the id of its blocking acquisition, while it runs
};

struct GateState {
  testenv::TempDir dir{"zkr-swarm-gate"};
  std::unique_ptr<DurableFenceGate> gate;
  std::map<std::string, FencingToken> highest;  // what the test expects the gate to hold
  std::filesystem::path file() const { return dir.file("fence.gate"); }
};

}  // namespace zkr::swarm
