// SPDX-License-Identifier: Apache-2.0
// One swarm run: actors on several sessions carry out a list of operations against a world (the
// fake or real servers), and after every step the model's invariants are checked (checks.cpp).
//
//   swarm.cpp         the run: steps, quiet points, harvesting outcomes, the end phase, teardown
//   acquisitions.cpp  the operations on locks, read/write locks, semaphores and their holds
//   elections.cpp     latches, selectors, leader watches
//   generator.cpp     the next operation, drawn from a seed and the model's state
//   checks.cpp        the invariants
//
// The model is what the test itself saw: which HeldLocks it keeps (and on which thread each was
// acquired and whether it was moved), which grants (nodes) those are, which acquisitions are
// pending and what each must come to, what it injected. Only the driver thread reads or changes
// it; outcomes from actors and callbacks arrive through small mutex-guarded records.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/cache.hpp>
#include <zkr/leader_watch.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>

#include "actor.hpp"
#include "config.hpp"
#include "ops.hpp"
#include "world.hpp"

namespace zkr::swarm {

using Clock = std::chrono::steady_clock;

// What broke, with the step and the operation that showed it.
struct Failure {
  std::string invariant;  // "hang", "two holders", "metrics", ... (what shrinking preserves)
  std::string resource;   // the resource it concerns, if any (also preserved)
  std::string message;
  int step = -1;  // index into the op list; -1: the end phase
};

// The interleaving a run ran, step by step, beside its operations: a generated run depends on
// timing as well as on its seed (a bounded wait ends granted or timed out depending on when the
// step that frees it comes), so this is what a replay needs besides the list. A replay given it
// starts each step no earlier than the same time after the one before, and says where the
// outcomes it saw first differ from the recorded ones.
struct StepTiming {
  int gap_ms = 0;  // from the start of the step before to the start of this one
  // The acquisitions that ended by this step's quiet point: the op index of each and how it
  // ended (g granted, t timed out, c cancelled, b busy, f failed otherwise).
  std::vector<std::pair<int, char>> outcomes;
  bool operator==(const StepTiming&) const = default;
};
using Schedule = std::vector<StepTiming>;
std::string to_text(const Schedule& schedule);  // "0 12 431:3t,5g ..." (gap[:outcomes] per step)
Schedule schedule_from_text(std::string_view text);
// The schedule of the steps at `kept` (indices in order): removed steps' gaps go to the next kept
// step, and outcomes of removed operations are forgotten (the rest renumbered).
Schedule keep_steps(const Schedule& schedule, const std::vector<std::size_t>& kept);

struct RunResult {
  std::optional<Failure> failure;
  std::vector<Op> ops;  // the ops carried out (as generated, or as given)
  Schedule schedule;    // as ran, one entry per op carried out
  // With a schedule to follow: where the run's outcomes first differed from it (empty: nowhere).
  std::string divergence;
  int steps_run = 0;
  int skipped = 0;      // ops whose object was missing when they ran
  std::map<std::string, int> counts;  // grants, losses, faults, overlaps refused by a fence, ...
};

// Ordering of what happened, across threads: grants seen, releases, losses told, terms.
std::uint64_t next_event();

// "[acquire:0.1.2.5] actor 0 on s1: acquire lock2 /swarm/lock2, ...": for reports.
std::string describe(const Op& op);

// A HeldLock the program keeps, built where it is stored: the blocking calls' results are bound
// to their thread only as long as they are not moved, so they are never moved into place.
struct HoldBox {
  struct FromHeld {};
  struct FromOptional {};
  HoldBox() = default;
  template <typename Make>
  HoldBox(FromHeld, Make make) : direct(make()) {}
  template <typename Make>
  HoldBox(FromOptional, Make make) : maybe(make()) {}

  HeldLock& held() { return maybe ? *maybe : direct; }
  std::mutex mutex;  // around every call on the HeldLock (callbacks release it too)
  std::optional<HeldLock> maybe;
  HeldLock direct;
};

// The outcome of an acquisition, filled by the actor (blocking calls) or the handler (async).
struct Outcome {
  std::mutex mutex;
  bool done = false;
  std::error_code ec;
  std::shared_ptr<HoldBox> box;  // the grant, if any
  std::string unexpected;         // an exception the API does not promise
  std::uint64_t event = 0;
};

struct Hold {
  int id = 0;
  std::shared_ptr<HoldBox> box;
  int resource = 0;
  int slot = 0;
  int epoch = 0;         // the slot's session generation (bumps when reopened)
  int lock_object = -1;  // which Lock object (reentrancy is per object)
  int owner = 0;         // the actor that keeps it now
  int origin = 0;        // the actor whose blocking call returned it
  bool blocking = false; // bound to its thread by a blocking call
  bool moved = false;
  bool released = false;
  bool destroyed = false;
  bool release_on_loss = false;  // an on_lost callback releases it
  std::string node;
  FencingToken token;
  int step = 0;
};

struct Grant {
  std::string node;
  int resource = 0;
  int slot = 0;
  int epoch = 0;
  std::int64_t session_id = 0;
  FencingToken token;
  std::uint64_t acquisition_event = 0;  // when its acquisition began
  std::uint64_t observed_event = 0;     // when the test saw the grant
  std::uint64_t ended_event = 0;        // when its end (last release, loss told) was seen; 0: not yet
  std::optional<LossReason> loss;
  int holds = 0;  // holds not yet released
  int step = 0;
  bool loss_watched = false;  // an on_lost callback records when the loss is told
  std::shared_ptr<std::atomic<std::uint64_t>> told = std::make_shared<std::atomic<std::uint64_t>>(0);
};

struct Pending {
  int id = 0;
  OpKind kind = OpKind::acquire;
  int step = 0;
  int actor = 0;
  int slot = 0;
  int epoch = 0;
  int resource = 0;
  int lock_object = -1;
  bool blocking = false;
  bool held_back = false;  // in an open AcquisitionBatch: goes out with send()
  bool release_in_handler = false;
  bool stop_requested = false;
  bool unstoppable = false;  // async without a stop token: a cancel does not reach it
  // An acquisition the start window counts (SessionOptions::max_starting_acquisitions): async, for
  // ever, without a stop token, of a lock or read/write lock, outside an open batch of its thread.
  bool window_counted = false;
  std::int64_t started_session = 0;  // the session's id when it began (0: between sessions)
  std::optional<Clock::time_point> prompt_by;  // must have ended by then
  std::string expectation;                     // why (for messages)
  std::string expected_node;                   // a reentrant acquisition: the grant it reenters
  bool expect_refusal = false;                 // would_deadlock
  bool thread_may_hold = false;                // the model has a hold of this thread on the path
  bool expect_grant = false;                   // free, or reentrant
  std::uint64_t started_event = 0;
  Clock::time_point started;
  std::stop_source stop;  // async forms
  std::shared_ptr<Outcome> outcome = std::make_shared<Outcome>();
  std::string what;  // the op, described
};

// What the test counted per metrics series (one session epoch, one path).
struct SeriesCount {
  std::uint64_t asked = 0, grants = 0, timeouts = 0, cancellations = 0, busy = 0, failures = 0, gave_up = 0;
  std::array<std::uint64_t, 4> losses{};
};

class Swarm {
 public:
  Swarm(SwarmConfig config, World& world);
  ~Swarm();

  // Carries out `ops` (generated from the seed as it goes when `generate` is set, up to `steps`).
  // With `follow` (a recorded schedule), each step starts no earlier than its recorded gap after
  // the one before.
  RunResult run(std::vector<Op> ops, bool generate, int steps, const Schedule& follow = {});

  struct CounterCall;  // one call on the shared counter, as its actor saw it (counters.cpp)

 private:
  struct LatchSlot;
  struct SelectorSlot;
  struct WatchSlot;
  struct SessionSlot;
  struct ActorState;

  // ---- the run (swarm.cpp) ----
  void setup();
  bool step(const Op& op);  // false: skipped
  void settle_after(int actor);
  void harvest();
  void harvest_outcome(Pending& pending);
  void end_phase();
  void teardown();
  void fail(std::string invariant, std::string resource, std::string message);
  bool failed() const { return failure_.has_value(); }
  Session* session(int slot);
  bool usable(int slot) const;
  bool healthy(int slot);
  void count(const std::string& what, int n = 1) { counts_[what] += n; }
  // ZKR_SWARM_TRACE=1: each step and outcome on stderr, for reading a replay.
  template <typename... Args>
  void trace(fmt::format_string<Args...> format, Args&&... args) {
    if (tracing_) fmt::print(stderr, "  swarm| {}\n", fmt::format(format, std::forward<Args>(args)...));
  }
  bool tracing_ = false;

  // ---- acquisitions and holds (acquisitions.cpp) ----
  bool acquire(const Op& op);
  bool hold_op(const Op& op);
  bool batch_op(const Op& op);
  bool control_op(const Op& op);
  bool gate_reopen();
  int lock_object(int slot, int resource, int size_class);
  std::unique_ptr<Pending> new_pending(const Op& op);  // its id, step, actor, session and start
  void predict(Pending& pending, const Op& op);
  bool free_for(const Pending& pending);
  Hold* find_hold(int actor, int resource, int rank, bool include_released);
  void note_grant(const Pending& pending, const std::shared_ptr<HoldBox>& box);
  void release_hold(Hold& hold, bool destroy);
  void let_go(Hold& hold, std::optional<LossReason> lost_before = std::nullopt);
  void note_loss(Grant& grant, LossReason reason);
  void watch_loss(Hold& hold);
  std::vector<std::string> contender_nodes(int resource);

  // ---- elections (elections.cpp) ----
  bool election_op(const Op& op);
  LatchSlot& latch(int slot, int resource);
  SelectorSlot& selector(int slot);
  void harvest_elections();
  void close_elections();

  // ---- sessions and faults (swarm.cpp) ----
  bool session_op(const Op& op);
  bool fault_op(const Op& op);
  void open_slot(int slot);

  // ---- invariants (checks.cpp) ----
  void check_step();
  void check_end();
  void check_exclusion();
  void check_losses_told();
  void check_loss_policies();  // on_disconnect never suspends; only it loses with connection_lost
  void check_watch_count();
  std::string waiter_watch_problem();  // each lock waiter watches the node ahead (and its blocker)
  void check_orphans();
  std::string metrics_problem(bool final);  // empty: they agree
  std::string watch_problem();
  std::string cache_problem();
  std::string latch_problem();
  std::string start_window_problem();
  bool window_exempt(const Pending& pending) const;  // its create may be unanswered beside the window's
  void note_join_held_back(LatchSlot& latch, const Op& op);
  void eventually(std::string_view invariant, std::chrono::milliseconds bound,
                  const std::function<std::string()>& problem);
  void check_new_grant(const Grant& grant, const Pending& pending);
  void check_loss_explained(Grant& grant);
  void check_gate(const Hold& hold, bool admitted, FencingToken highest_before);

  // ---- the shared counter (counters.cpp) ----
  bool counter_op(const Op& op);
  std::optional<Op> counter_op_for_step() const;  // the generator's: every few steps, idle actors call it
  void check_counter();
  std::vector<std::shared_ptr<CounterCall>> counter_calls_;
  std::string counter_path_;  // one of this run's own: a real server outlives the run

  // ---- multi-locks, group membership, barriers (catalogue.cpp) ----
  struct Catalogue;
  std::shared_ptr<Catalogue> catalogue_;
  bool catalogue_op(const Op& op);
  std::optional<Op> catalogue_op_for_step() const;  // the generator's: every few steps
  void harvest_catalogue();
  void check_catalogue_step();      // after every step, faults or not
  std::string group_problem(bool at_end);  // once quiet: the group views
  std::string barrier_problem();  // once quiet: the barrier's waiters
  bool end_catalogue();             // end phase: lets go of everything; true while waits remain
  std::string catalogue_waits();  // for a report: what still waits, and the nodes on its paths
  void stop_catalogue();  // teardown
  // check_exclusion's: the paths held by multi-locks not lost; the metrics' and watch counts'.
  void multi_lock_holders(
      const std::function<void(const std::string& path, const std::string& node, FencingToken token)>& add);
  bool multi_lock_used(int slot, int epoch, const std::string& path) const;
  std::size_t multi_lock_contenders(int slot, const std::string& path) const;
  std::size_t multi_lock_pending_paths(int slot, int epoch) const;  // of its multi-locks still acquiring

  // ---- generation (generator.cpp) ----
  Op next_op();
  Op drawn_op();
  std::optional<Op> follow_up_for_step() const;  // right after a fault, on its session
  int hold_rank(const Hold& hold, bool counts_released) const;
  struct LastFault {
    int step = 0;
    int session = 0;
    OpKind kind = OpKind::fault_drop;
    bool slow_reconnect = false;  // not a fault: the world brought the connection back slow
    int steps = 0;                // how many steps it holds, its own included (fault_steps)
  };
  // What follows the first operation into a paused connection, one a step while the pause holds
  // (next_op sets it up): a burst of acquisitions the start window counts, one more than the
  // window; or the leave of the member whose join went in, its create still unanswered.
  struct Sequel {
    int session = 0;
    int left = 0;
    OpKind kind = OpKind::async_acquire;
    int arg = 0;
  };
  std::optional<Sequel> sequel_;
  std::optional<Op> sequel_op_for_step();
  std::optional<int> member_to_leave(int slot) const;  // catalogue.cpp: which member, if any
  std::optional<LastFault> last_fault_;

  SwarmConfig config_;
  World& world_;
  std::mt19937_64 random_;
  int step_index_ = 0;
  std::optional<Failure> failure_;
  Schedule schedule_;  // as ran (see StepTiming)
  std::map<std::string, int> counts_;

  // Acquisitions through zkr::asio (acquisitions.cpp) complete on this context's own thread. Before
  // the actors and sessions, so that it outlives every completion the library may still post.
  struct AsioContext;
  std::shared_ptr<AsioContext> asio_;
  void check_asio();  // every zkr::asio completion ran on its handler's executor, never inside its initiation
  std::vector<std::unique_ptr<ActorState>> actors_;
  std::vector<std::unique_ptr<SessionSlot>> slots_;
  std::vector<Hold> holds_;
  std::map<std::string, Grant> grants_;
  std::vector<std::unique_ptr<Pending>> pending_;
  int next_id_ = 1;
  // What was injected, per session id: the causes a loss may have.
  std::map<std::int64_t, std::set<OpKind>> faults_on_;
  // Every session id the slots had, as seen at a harvest: a node of another owner is a peer's.
  std::set<std::int64_t> own_sessions_;
  std::set<std::string> broken_nodes_;
  // on_lost callbacks registered on grants already lost, which must run at once.
  struct LateLossCallback {
    std::shared_ptr<std::atomic<bool>> ran;
    std::string what;
    int step = 0;
  };
  std::vector<LateLossCallback> late_loss_callbacks_;
  std::vector<std::pair<int, int>> restarts_;  // steps from which to which a restart may cost a grant
  // The resource side: a durable gate and what the test expects of it.
  std::unique_ptr<struct GateState> gate_;
  // The series counts per (slot, epoch, path).
  std::map<std::tuple<int, int, std::string>, SeriesCount> series_;
};

}  // namespace zkr::swarm
