// SPDX-License-Identifier: Apache-2.0
// The contender queue: the one engine under every recipe (lock, read/write lock, election,
// semaphore).
//
// A contender creates a protected ephemeral sequential node under the recipe's path, finds the
// node that blocks it, watches only that node, re-checks when it changes, and is granted when
// nothing blocks it. The grant carries the node's czxid as the fencing token and is lost when the
// session is lost or the node is deleted. A recipe is a QueuePolicy: how its node is named, how
// many may hold at once, and which earlier nodes block it (queue_policy.hpp).
//
// Invariants enforced here, and only here:
//   - the fencing token is the czxid from our own create's reply (or, after a lost reply, from the
//     node found by our per-attempt GUID);
//   - a node found after a connection loss is adopted only if its ephemeralOwner is our current
//     session: a node of an older session is never ours;
//   - a node we created and no longer want (cancelled, timed out, released) is deleted, retried
//     through connection loss until done or until the session, and the node with it, is gone.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include <zkr/lock.hpp>
#include <zkr/names.hpp>

#include "acquisition_count.hpp"
#include "log.hpp"
#include "queue_policy.hpp"
#include "session_core.hpp"
#include "thread_holds.hpp"

namespace zkr::detail {

// The lease limit a semaphore records in its path node's data ("max_leases=N"), or nullopt if
// the data is no such record (semaphore.cpp). Recipes of one holder refuse such a path.
std::optional<int> semaphore_limit_of(std::string_view parent_data);

struct ContenderRequest {
  std::string parent;  // validated recipe path
  QueuePolicy policy;
  std::string owner_data;
  NodeAcl acl = NodeAcl::open;
  // Negative: wait forever. Zero: do not wait (would_block if someone else holds).
  std::chrono::nanoseconds timeout{-1};
  // Runs exactly once with the outcome. Inline: on whatever thread decides it, with the session
  // mutex held (only for trivial, non-blocking work such as setting a promise). Otherwise on the
  // session's callback thread.
  std::function<void(std::error_code, const std::shared_ptr<class Contender>&)> on_done;
  bool on_done_inline = false;
  // Data for the parent node when the queue has to create it (the semaphore records its limit
  // there). Ancestors above the parent are created empty.
  std::string parent_data;
  // If set, checked against the parent's data once our node exists (so the parent cannot be
  // swapped between the check and our create); an error ends the attempt with that error and
  // deletes our node. Runs with the session mutex held: must be quick and must not block. The
  // data is read in the acquisition's pipeline if parent_data is set, else only if the listing's
  // Stat of the parent shows that it has any.
  std::function<std::error_code(const std::string& parent_data)> check_parent;
  // How the parent is created when missing: a container by default; kazoo's recipes expect a
  // persistent one (they create it once and then rely on it).
  CreateMode parent_mode = CreateMode::container;

  // Our node's name, where a peer's layout dictates it (recipes/peer_semaphore.cpp). Curator's
  // protected form "_c_<uuid>-<marker>", or kazoo's "<32 hex><marker>"; the server appends the
  // sequence if `sequential`. Without a marker, the role's (node_marker()).
  bool kazoo_naming = false;
  std::optional<std::string> marker;
  bool sequential = true;
  // No queue: the contender holds as soon as its node exists (a semaphore lease created under
  // the peer's internal lock, which did the counting).
  bool held_once_created = false;
  // Nonzero: the contender lives on that session generation only, and fails with
  // errc::session_lost instead of queueing again on a later session (a lease created under an
  // internal lock that was lost with its session). A try that does not wait (timeout zero) gets
  // the generation it starts on (Contender::start): it never waits for a replacement session.
  std::uint64_t only_generation = 0;
  // If set, checked against every listing of the parent that includes our node (at join and at
  // each re-listing; see peer_layout.hpp): an error ends the attempt with that error and deletes
  // our node. Runs with the session mutex held: must be quick and must not block.
  std::function<std::error_code(const std::vector<std::string>& children)> check_children;

  // Whether an open AcquisitionBatch may hold this acquisition back (when it is started without
  // waiting). Set for the one-holder recipes only (one_holder_request: locks, read/write locks,
  // elections), whose acquisition is one plain contender: an ephemeral sequential node, no data
  // of the parent's to read first, a grant by the queue. Never a semaphore's, in any layout
  // (zkr/lock.hpp promises it): our layout records its limit in the parent and touches its nodes,
  // and a peer layout's internal lock is a step that the semaphore's acquisition waits on.
  bool batchable = false;

  // Whether the contender holds a slot of the session's start window (SessionCore::StartSlot),
  // which it gives back once its first answers are in (Contender::set_phase_locked).
  bool holds_start_slot = false;

  // How the metrics count this contender (acquisition_count.hpp): unset, as an acquisition of its
  // own under its parent's path; a recipe that builds one acquisition of several contenders gives
  // each the part it plays.
  std::optional<AcquisitionCount> counted;
};

class Contender final : public SessionListener, public std::enable_shared_from_this<Contender> {
 public:
  enum class Phase : std::uint8_t {
    waiting_for_session,  // no usable session: (re)start when one connects
    creating,             // create + getChildren sent
    recovering,           // create's outcome unknown: looking for our GUID
    checking,             // getChildren sent
    watching,             // a blocker's data watch set
    held,
    releasing,            // delete sent, or waiting to resend it
    lost,
    finished,
  };
  static std::shared_ptr<Contender> start(std::shared_ptr<SessionCore> core, ContenderRequest request);
  // Only start() makes contenders (the key keeps others out; public for make_shared).
  struct StartKey {
    explicit StartKey() = default;
  };
  Contender(StartKey, std::shared_ptr<SessionCore> core, ContenderRequest request);
  ~Contender() override;

  // Gives up waiting: the outcome becomes `why` and our node (if any) is deleted. Returns false if
  // the contender was granted (or finished) first.
  bool cancel(std::error_code why);
  // Deletes our node if we still have one; idempotent. With `on_answer`, which then runs once
  // with the session mutex held (quick, non-blocking), when the server's answer tells whether the
  // node stood until the delete; false if there was no grant left to release (nothing runs).
  bool release(std::function<void(ReleaseOutcome)> on_answer = {});

  FencingToken token() const;
  std::string node_path() const;
  std::int64_t session_id() const;
  std::uint64_t generation() const;  // the session generation of our node
  bool lost() const;
  bool held_locked() const { return phase_ == Phase::held; }  // granted, not lost nor let go of (session mutex held)
  std::optional<LossReason> loss_reason() const;
  std::stop_token lost_token() const;
  void on_lost(std::function<void(LossReason)> callback);
  const std::shared_ptr<SessionCore>& core() const { return core_; }
  // The hold of the first grant object made for us without one (an async acquisition's HeldLock,
  // typically), kept inside the contender so that it costs no allocation of its own; null to
  // every later caller, who makes its own. `self` is this contender, which the hold keeps alive.
  static std::shared_ptr<Hold> spare_hold(const std::shared_ptr<Contender>& self);
  // What a write fenced by this grant checks: our node, on the session generation that owns it.
  // Empty unless held; then `refusal` says why ("released", "lost (node_deleted)", ...).
  struct FenceCheck {
    std::uint64_t generation = 0;
    std::string node_path;
  };
  std::optional<FenceCheck> fence_check_locked(std::string& refusal) const;

  // SessionListener (called with the session mutex held).
  void on_reconnected(std::uint64_t generation) override;
  void on_deadline_renewed(std::uint64_t generation) override;
  void on_new_session(std::uint64_t generation) override;
  void on_session_lost(std::uint64_t generation, LossReason reason) override;
  void on_session_ended(std::error_code why) override;

 private:

  // What to resend once the connection is back on the same session.
  enum class Retry : std::uint8_t { none, recover, check, remove, touch, watch_own };

  void set_phase_locked(Phase next);  // checked in sanitizer builds (state_check.hpp)
  void begin_locked();
  void ensure_parent_then_create_locked();
  void on_created(std::uint64_t attempt, zk_errc rc, std::string path, NodeStat stat);
  void on_children(std::uint64_t attempt, zk_errc rc, std::vector<std::string> children, NodeStat parent,
                   bool listing_watches_path);
  void on_path_changed_locked();
  void recover_locked();
  void check_locked();
  void verify_parent_locked(std::uint64_t attempt);
  void evaluate_locked(const std::vector<std::string>& children, bool listing_carries_watch = false);
  void watch_locked();
  void watch_children_locked();
  NodeWatch wake_to_check();
  bool listings_watch_path() const;
  NodeWatch path_watch();
  bool own_node_vouched_for_locked() const;
  // A reply or watch callback of the step just started (the current attempt, in `phase`): `body`
  // runs under the session mutex with the contender and the callback's arguments, only while the
  // contender exists and still waits on that attempt in that phase; a later step has made the
  // callback stale otherwise. A watch (`is_watch`) counts as a wake-up whether stale or not.
  template <typename Body>
  auto for_this_step(Phase phase, Body body, bool is_watch = false);
  void watch_second_blocker_locked(const std::string& node);
  bool first_sight_of_touch_locked(const std::string& node, std::int32_t version);
  void grant_locked();
  void forget_request_locked();
  void touch_locked();
  void touch_as_first_waiter_locked();
  void watch_own_node_locked();
  void own_node_gone_locked();
  void schedule_own_node_watch_locked();
  void remove_node_locked();
  void answer_release_locked(ReleaseOutcome outcome);
  void lose_locked(LossReason reason);
  void complete_locked(std::error_code outcome);
  detail::WatchOwner watch_owner_locked();
  void abandon_watches_locked();
  void finish_locked();
  void retry_after_reconnect_locked(Retry what);
  bool handle_session_trouble_locked(zk_errc rc, Retry what);
  void give_up_after_drops_locked();
  void arm_timeout();
  void cancel_timeout();
  std::string our_name() const;
  LogContext log_context_locked() const;

  // What only an acquisition reads, in a block of its own that the grant frees: a holder never
  // queues again (held leads only to lost, releasing or finished), so each of many held locks
  // keeps only what holding needs. A holder that touches its node (a semaphore's, see
  // touch_locked) keeps the block for the request's owner data.
  struct Acquiring {
    explicit Acquiring(ContenderRequest asked) : request(std::move(asked)) {}
    ContenderRequest request;
    std::string guid;                 // of the current attempt
    std::error_code parent_problem;   // check_parent's refusal, reported once the listing arrives
    // The touched nodes we watch that sent us to re-check (name, data version): a second look at
    // the same touch waits on the watch instead of re-checking forever.
    std::vector<std::pair<std::string, std::int32_t>> touches_seen;
    std::string blocker;  // the node we wait for, from the latest listing (see watch_locked)
    int parent_retries = 0;
    // The owner of the watches this acquisition sets on other contenders' nodes: made with the
    // first, let go once the acquisition is decided (abandon_watches_locked).
    std::shared_ptr<const void> watch_owner;
  };
  // The block, which exists until the grant (checked in sanitizer builds).
  Acquiring& acquiring() const;
  ContenderRequest& request() const { return acquiring().request; }

  const std::shared_ptr<SessionCore> core_;
  std::unique_ptr<Acquiring> acquiring_;

  // Everything below is guarded by core_->mutex(). The flags come first, packed together: a
  // contender lives as long as its lock is held, thousands of them on one session.
  Phase phase_ = Phase::waiting_for_session;
  Retry retry_ = Retry::none;
  enum class OwnWatch : std::uint8_t { none, pending, set };
  OwnWatch own_watch_ = OwnWatch::none;  // the data watch on node_path_ (see watch_own_node_locked)
  bool start_slot_ = false;     // a slot of the start window is ours (ContenderRequest::holds_start_slot)
  bool abandon_ = false;        // no longer wanted: delete the node once it is known
  bool completed_ = false;      // on_done has run
  // A children watch on our parent, registered by a listing of our current node (a one-holder
  // recipe's, see listings_watch_path), that has not fired: no child came or went since, so our
  // node is still there (on_path_changed_locked).
  bool path_watch_live_ = false;
  bool holding_lost_session_ = false;    // lost with our session; the session waits for our let-go
  bool delete_in_doubt_ = false;  // a delete of ours met a dropped connection: it may have taken effect
  bool parent_verified_ = true;     // check_parent passed for the current node (or there is none)
  bool first_waiter_touch_sent_ = false;  // for the current node
  // Whether the deletion alone of the node we wait for (Acquiring::blocker) grants us; whether
  // our watch on it is set and has not fired (see watch_locked).
  bool blocker_deletion_grants_ = false;
  bool blocker_watch_live_ = false;
  bool drop_counted_ = false;  // see drops_in_a_row_
  std::atomic<bool> spare_hold_taken_{false};  // see spare_hold
  // Dropped connections met by our requests since the last reply got through (see
  // kMaxDropsInARow), counted once per drop.
  int drops_in_a_row_ = 0;
  std::uint64_t generation_ = 0;  // the session generation our node belongs to
  std::uint64_t attempt_ = 0;     // bumps on every create attempt and every check
  std::string node_path_;
  // What few callers ask for, on the heap from the first ask: a contender lives as long as its
  // lock is held.
  struct Asked {
    std::function<void(ReleaseOutcome)> release_answer;           // release()'s on_answer, until it has run
    std::vector<std::function<void(LossReason)>> lost_callbacks;  // on_lost's, until the loss
  };
  Asked& asked_locked();
  std::unique_ptr<Asked> asked_;
  // The attempt that set our watch on the blocker, and the attempt it now serves (see watch_locked).
  std::uint64_t blocker_watch_attempt_ = 0;
  std::uint64_t blocker_watch_serves_ = 0;
  FencingToken token_;
  std::int64_t session_id_ = 0;
  std::optional<LossReason> loss_reason_;
  // Made by the first lost_token() (its shared state costs an allocation that most holders never
  // need): stopped on the callback thread with the loss callbacks, or made stopped once lost.
  mutable std::stop_source lost_source_{std::nostopstate};
  Clock::time_point granted_at_{};
  std::unique_ptr<boost::asio::steady_timer> timeout_timer_;
  std::unique_ptr<boost::asio::steady_timer> own_watch_timer_;
  AcquisitionCount counted_;  // what the metrics count us as (set in start)
  Hold spare_hold_{false};
};

template <typename Body>
auto Contender::for_this_step(Phase phase, Body body, bool is_watch) {
  return [self = weak_from_this(), attempt = attempt_, phase, is_watch, body = std::move(body)](auto... args) {
    auto contender = self.lock();
    if (!contender) return;
    if (is_watch) ++contender->core_->wakeups;
    std::unique_lock lock(contender->core_->mutex());
    if (attempt != contender->attempt_ || contender->phase_ != phase) return;
    body(*contender, std::move(args)...);
  };
}

// Reads who holds and who waits under `path` (see zkr::list_contenders). Throws Error.
std::vector<ContenderInfo> list_contenders(const std::shared_ptr<SessionCore>& core, const std::string& path,
                                           int max_holders);

}  // namespace zkr::detail
