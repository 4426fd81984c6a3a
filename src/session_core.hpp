// SPDX-License-Identifier: Apache-2.0
// SessionCore: the session, its monitor, and the executors every recipe runs on.
//
// Threads:
//   - the C client's completion thread runs request completions and watches (never blocks);
//   - the worker thread runs the monitor's timers, heartbeats, acquisition timeouts, and
//     completions of requests that could not even be queued;
//   - the callback thread runs user code (state listeners, loss callbacks, async handlers), so
//     that a slow user callback never delays the monitor;
//   - the closer thread runs zookeeper_close for lost sessions, which blocks and must not run on
//     the others; it starts with the first lost session.
//
// One mutex guards the session state and the state of every contender on it: completions,
// timers and user calls all take it, and nobody calls out to user code or closes a handle while
// holding it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <memory_resource>
#include <mutex>
#include <array>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <zkr/session.hpp>

#include "lock_metrics.hpp"
#include "tls_relay.hpp"
#include "zk_client.hpp"

namespace zkr {

// How a recipe's completions sort the C client's codes (the conditions of zkr/error.hpp).
inline bool is_connection_trouble(zk_errc rc) { return make_error_code(rc) == condition::connection_trouble; }
inline bool is_session_ended(zk_errc rc) { return make_error_code(rc) == condition::session_ended; }

}  // namespace zkr

namespace zkr::detail {

using Clock = std::chrono::steady_clock;

// An absent path takes no children watch: a watched listing looks again this often until it exists.
constexpr auto kMissingPathRetry = std::chrono::milliseconds(500);

using BootClock = zkr::BootClock;  // the session deadline's clock

// What a contender (recipes/) hears from its session. Called with the session mutex held.
class SessionListener {
 public:
  virtual ~SessionListener() = default;
  // The connection is back on the same session (generation unchanged).
  virtual void on_reconnected(std::uint64_t generation) = 0;
  // A new session is connected (after the previous one was lost).
  virtual void on_new_session(std::uint64_t generation) = 0;
  // The session of `generation` is lost; the reason says why.
  virtual void on_session_lost(std::uint64_t generation, LossReason reason) = 0;
  // The monitor, which slept through the deadline of `generation` (DeadlineVerdict::in_doubt),
  // has a proof that the session lives: what waited for the verdict can go on.
  virtual void on_deadline_renewed(std::uint64_t /*generation*/) {}
  // Closed by the owner, or credentials refused: nothing will ever connect again.
  virtual void on_session_ended(std::error_code why) = 0;
  // The connection dropped; the session of `generation` may still be alive (a view goes stale).
  virtual void on_suspended(std::uint64_t /*generation*/) {}

 private:
  friend class SessionCore;
  // The session's list of attached listeners runs through the listeners themselves: with
  // thousands of held locks on one session, attaching costs no allocation and detaching no search.
  std::shared_ptr<SessionListener> attached_self_;  // the session's strong reference while attached
  SessionListener* previous_attached_ = nullptr;
  SessionListener* next_attached_ = nullptr;
};

// An acquisition held back by the start window (SessionOptions::max_starting_acquisitions). Its
// record is made in memory of the session's own (SessionCore::start_record_memory_locked).
class PendingStart {
 public:
  // A slot is taken for it: start it (outside the session mutex, on the worker thread).
  virtual void admit() = 0;
  // The session ended before it was admitted: report `why` (on the callback thread).
  virtual void refuse(std::error_code why) = 0;

 protected:
  // `footprint`: the bytes of its record, from start_record_memory_locked.
  PendingStart(std::shared_ptr<SessionCore> core, std::size_t footprint)
      : core_(std::move(core)), footprint_(footprint) {}
  virtual ~PendingStart() = default;
  const std::shared_ptr<SessionCore>& core() const { return core_; }

 private:
  friend struct DiscardPendingStart;
  std::shared_ptr<SessionCore> core_;
  std::size_t footprint_;
};
// Destroys a record and gives its memory back to the session. Without the session mutex: what the
// record owns (the caller's handler) may take it when destroyed.
struct DiscardPendingStart {
  void operator()(PendingStart* start) const noexcept;
};
using PendingStartPtr = std::unique_ptr<PendingStart, DiscardPendingStart>;

class SessionCore : public std::enable_shared_from_this<SessionCore> {
 public:
  explicit SessionCore(SessionOptions options, ConnectionFactory factory = connect_zookeeper);
  ~SessionCore();

  // Opens the first connection and waits for it (throws Error like Session's constructor).
  void connect_or_throw();
  void close();

  std::mutex& mutex() const { return mutex_; }

  // ---- state (callers hold mutex() where noted) ----
  SessionState state() const { return state_.load(); }
  std::int64_t session_id() const { return session_id_.load(); }
  std::optional<SessionLossCause> last_loss_cause() const;
  std::uint64_t generation_locked() const { return generation_; }
  bool usable_locked(std::uint64_t generation) const {
    return generation == generation_ && state_ == SessionState::connected;
  }
  bool ended() const {
    auto state = state_.load();
    return state == SessionState::closed || state == SessionState::auth_failed;
  }
  std::chrono::milliseconds negotiated_timeout() const { return negotiated_timeout_.load(); }
  std::chrono::milliseconds lead_time() const;
  std::chrono::milliseconds heartbeat_interval() const;
  // How late the leader may hear of this session, through a follower (see zkr/session.hpp).
  std::chrono::milliseconds forward_lag() const;
  // What a proof is credited with when no earlier answer vouches for it: tick/2 + one heartbeat
  // interval before its send (the first on a connection; every one with short heartbeats).
  std::chrono::milliseconds fallback_lag() const;
  std::chrono::milliseconds silence_tolerance() const;
  // Silence on a connected server before the session leaves it for the next (see watch_server).
  std::chrono::milliseconds move_after() const;
  // How long one connect attempt may go unanswered before the next server is tried.
  std::chrono::milliseconds attempt_patience() const;
  // Before a grant: whether the session of `generation` is inside its deadline (alive). Past it,
  // the session is declared lost right here (lost), unless the monitor slept through the deadline
  // and is asking the ensemble (in_doubt: no grant yet; listeners hear on_deadline_renewed, or the
  // loss). See the top of zkr/session.hpp.
  enum class DeadlineVerdict { alive, in_doubt, lost };
  DeadlineVerdict deadline_verdict_locked(std::uint64_t generation);
  // A holder on the lost session of `generation` has been told and is still stopping: the old
  // handle stays open (so the server keeps the node) until let_go_locked, or until the server
  // would have expired the session anyway.
  void hold_lost_session_locked(std::uint64_t generation);
  void let_go_locked(std::uint64_t generation);
  const SessionOptions& options() const { return options_; }
  // Session::servers and Session::set_servers.
  std::string servers() const;
  bool set_servers(const std::string& servers);
  std::string current_server() const;  // the connection's (ZooKeeperConnection::current_server)
  bool wait_connected(std::chrono::milliseconds timeout) const;
  ClientId client_id() const;
  std::size_t pending_watches() const;  // the current connection's (see ZooKeeperConnection)
  SessionMetrics metrics() const;
  std::error_code end_reason_locked() const { return end_reason_; }

  // ---- requests (caller holds mutex()) ----
  // Each is sent on the connection of `generation`. If that connection is gone or the request
  // cannot be queued, the callback runs later on the worker thread with the ZooKeeper code
  // (zk_errc::invalid_state for a stale generation). Callbacks run without the mutex held.
  // Pipelined before a listing that must see every committed write (after a connection loss).
  void sync(std::uint64_t generation, const std::string& path, ResultCallback done);
  void create(std::uint64_t generation, const std::string& path, const std::string& data, CreateMode mode,
              NodeAcl acl, CreateCallback done);
  void get_children(std::uint64_t generation, const std::string& path, ChildrenCallback done, NodeWatch watch = {},
                    WatchOwner owner = {});
  // A watch with an owner is forgotten once the owner expired and drop_abandoned_watches sweeps its path.
  void get_data(std::uint64_t generation, const std::string& path, DataCallback done, NodeWatch watch = {},
                WatchOwner owner = {});
  // Forgets, on the worker, the current connection's watches under `prefix` whose owner expired
  // (ZooKeeperConnection::drop_abandoned_watches); nothing if the generation has changed.
  void drop_abandoned_watches(std::uint64_t generation, std::string prefix);
  void exists(std::uint64_t generation, const std::string& path, StatCallback done);
  void set_data(std::uint64_t generation, const std::string& path, const std::string& data, int version,
                StatCallback done);
  void remove(std::uint64_t generation, const std::string& path, int version, ResultCallback done);
  void multi(std::uint64_t generation, const std::vector<MultiOp>& ops, MultiCallback done);

  // ---- acquisition batches (zkr::AcquisitionBatch; caller holds mutex()) ----
  // While a batch is open, the creates and listings of the acquisitions its thread starts wait
  // until a multi-op's worth of creates is pending, or for send_batch_locked: then the creates go
  // first, merged into multi-ops (see send_batched_creates_locked), then the listings in the order
  // they were asked for. A request that is not an acquisition's create or listing, or comes from
  // another thread, goes out as always. open_batch_locked is false if a batch is open already:
  // the new one merges nothing and its send does nothing.
  bool open_batch_locked();
  void send_batch_locked();
  bool batch_open_here_locked() const;
  // An ephemeral sequential create of `path_prefix` under `parent`. The reply's NodeStat carries
  // only the czxid: the multi-op that made the node reports no Stat of its creates.
  void create_in_batch_locked(std::uint64_t generation, std::string parent, std::string path_prefix,
                              std::string data, NodeAcl acl, CreateCallback done);
  void get_children_in_batch_locked(std::uint64_t generation, std::string path, ChildrenCallback done,
                                    NodeWatch watch);

  // The start window. An acquisition that may be held back asks for a slot: `taken` (it starts
  // now and gives the slot back with release_start_slot_locked once its first answers are in),
  // `not_counted` (no window applies: none configured, the session has ended, or an
  // AcquisitionBatch is open on this thread), or `full` (queue it with queue_start_locked; it is
  // admitted in order as slots come free, or refused when the session ends).
  enum class StartSlot { taken, not_counted, full };
  StartSlot take_start_slot_locked();
  // Takes `start` (and leaves it there if this throws: the caller destroys it without the mutex).
  void queue_start_locked(PendingStartPtr& start);
  // Memory for a held-back acquisition's record, `bytes` long (max_align_t aligned). A burst's
  // records are made on the caller's thread and freed on the worker: from the process heap, their
  // freed pieces would go to the worker's next allocations, long-lived ones among them, which then
  // pin the burst's pages for as long as its locks are held. In a pool of the session's own they
  // go back to the system together once the last is gone.
  void* start_record_memory_locked(std::size_t bytes);
  void give_back_start_record_memory(void* memory, std::size_t bytes);  // takes the mutex
  // Bytes the records' pool has from the process heap (none once every record is gone).
  std::size_t start_record_memory_in_use() const;
  void release_start_slot_locked();

  // ---- listeners (caller holds mutex()) ----
  void attach(std::shared_ptr<SessionListener> listener);
  void detach(SessionListener* listener);

  [[nodiscard]] Subscription on_state_change(std::function<void(SessionState)> listener);
  [[nodiscard]] Subscription on_deadline(std::function<void(SessionDeadline)> listener);

  // ---- executors ----
  boost::asio::io_context& worker() { return *worker_; }
  // True on the session's own worker, callback and closer threads.
  bool on_library_thread() const;
  void post_to_worker(std::function<void()> task);
  // Runs `task` on the callback thread, guarded as run_user_callback(). A task that runs several
  // user callbacks guards each of them itself.
  void post_callback(std::function<void()> task);
  // Runs one user callback; an exception it throws is logged and stops there, so that the other
  // callbacks of the same event still run.
  static void run_user_callback(const std::function<void()>& callback) noexcept;

  // ---- metrics fed by the recipes ----
  std::atomic<std::uint64_t> wakeups{0}, acquisitions{0}, acquire_timeouts{0},
      acquire_cancellations{0}, locks_lost{0};
  std::atomic<std::uint64_t> counter_writes{0}, counter_conflicts{0}, counter_unknown_outcomes{0};
  std::atomic<std::uint64_t> group_joins{0}, group_rejoins{0}, group_losses{0}, group_views_stale{0};
  std::atomic<std::uint64_t> barrier_passes{0}, barrier_timeouts{0}, barrier_cancellations{0}, barrier_failures{0};
  std::atomic<std::int64_t> total_wait_ns{0}, total_hold_ns{0};
  LockMetricsRegistry& lock_metrics() { return lock_metrics_; }

 private:
  void open_connection_locked();
  void schedule_reopen_locked();
  std::string implausible_handshake(std::chrono::milliseconds negotiated) const;
  void on_connection_event(std::uint64_t generation, ConnectionEvent event);
  void declare_lost_locked(LossReason reason, SessionLossCause cause);
  void set_state_locked(SessionState state);
  void schedule_deadline_check_locked();
  void arm_deadline_timer_locked(std::uint64_t generation);
  void on_deadline_timer(std::uint64_t generation);
  void start_recheck_locked(BootClock::time_point now, BootClock::time_point previous_look);
  BootClock::time_point recheck_until_locked() const;
  void end_recheck_alive_locked();
  void send_heartbeat(std::uint64_t generation);
  void send_heartbeat_after_locked(std::uint64_t generation, std::chrono::milliseconds delay);
  void arm_server_watch_locked(std::uint64_t generation);
  void watch_server(std::uint64_t generation);
  void close_in_background(std::shared_ptr<ZooKeeperConnection> connection);
  void close_retired_locked(std::uint64_t generation);
  BootClock::time_point deadline_locked() const;
  std::chrono::milliseconds margin_for(std::chrono::milliseconds timeout) const;
  std::chrono::milliseconds effective_timeout() const;
  // What a reply proves: only replies that went through the leader move the deadline.
  enum class Proof { none, leader };
  template <typename Callback, typename Issue, typename... FailArgs>
  void issue(std::uint64_t generation, Proof proof, Callback done, Issue issue_request, FailArgs... fail_args);
  void note_leader_proof(std::uint64_t generation, BootClock::time_point sent, BootClock::time_point previous_send);
  void request_finished();
  void reply_arrived();
  void apply_servers_if_quiet_locked(int answered = 0);
  std::vector<std::shared_ptr<SessionListener>> snapshot_listeners_locked() const;
  struct BatchedCreate {
    std::uint64_t generation;
    std::string parent, path_prefix, data;
    NodeAcl acl;
    CreateCallback done;
  };
  void send_batched_creates_locked(std::vector<BatchedCreate> creates);
  struct AcquisitionBatchState;
  void send_batched_requests_locked(AcquisitionBatchState& batch);

  const SessionOptions options_;
  const ConnectionFactory connection_factory_;

  mutable std::mutex mutex_;
  mutable std::condition_variable state_changed_;
  std::atomic<SessionState> state_{SessionState::connecting};
  std::uint64_t generation_ = 0;
  std::shared_ptr<ZooKeeperConnection> connection_;
  bool session_established_ = false;  // this generation has been connected at least once
  bool session_ever_established_ = false;
  std::string last_connect_problem_;  // why the latest attempt to connect failed, for errors
  // SessionOptions::tls: the relay every connection goes through (made by connect_or_throw, gone
  // with finish_close), and its latest failure.
  std::unique_ptr<TlsRelay> tls_relay_;
  std::optional<TlsFailure> tls_failure_;
  void on_tls_failure(const TlsFailure& failure);
  std::atomic<std::int64_t> session_id_{0};
  std::atomic<std::chrono::milliseconds> negotiated_timeout_{std::chrono::milliseconds(0)};
  // Send time of the latest request answered through the leader (or the session's establishment).
  BootClock::time_point last_leader_proof_{};
  // The latest moment the leader had surely heard of the session by (credit_for_locked): the
  // deadline is this plus the timeout less the margin.
  BootClock::time_point credited_touch_{};
  // The latest answers through the leader, with the connection they came on (counted per
  // (re)connect): an earlier answer on the same connection can vouch for a later proof.
  struct Answer {
    std::uint64_t epoch = 0;
    BootClock::time_point sent{}, answered{};
  };
  std::array<Answer, 4> recent_answers_{};
  std::size_t recent_answer_next_ = 0;
  std::uint64_t connection_epoch_ = 0;
  // The latest request sent through the leader (a heartbeat, a write) on the current connection; a
  // (re)connect counts as one sent tick/2 + one interval before it (the leader validated it). Each
  // request carries the one before it: a proof no earlier answer vouches for is credited no later
  // than that (see credit_for_locked).
  BootClock::time_point last_leader_send_{};
  BootClock::time_point credit_for_locked(BootClock::time_point sent, BootClock::time_point previous_send) const;
  // The monitor's latest look at the deadline (on_deadline_timer, deadline_verdict_locked). A look
  // that comes long after the one before slept through whatever happened in between (the process
  // was frozen, the machine suspended): past the deadline, the session is then rechecked from
  // recheck_since_ on rather than declared lost at once.
  BootClock::time_point last_deadline_look_{};
  std::optional<BootClock::time_point> recheck_since_;
  bool recheck_followup_sent_ = false;  // the heartbeat a tick after the recheck's first answer
  // The server watch (watch_server): servers in the connect string, when the connection was last
  // (re)established or sent away, and the connect attempt being timed (server and start).
  std::size_t server_count_ = 0;
  // The servers of the connections: options_.servers until set_servers (guarded by mutex_), and
  // whether the current connection has yet to be given them.
  std::string servers_;
  std::atomic<bool> servers_to_apply_{false};
  BootClock::time_point on_server_since_{};
  std::string connected_server_;  // current_server() when the connection was last (re)established
  bool move_refused_ = false;     // the server watch's latest try found no connection it could end
  std::string attempt_server_;
  BootClock::time_point attempt_since_{};
  BootClock::time_point last_server_watch_{};  // the watch's latest run
  std::error_code end_reason_;
  // The attached listeners, in attach order (linked through SessionListener). Each holds the
  // session's strong reference to itself: the session keeps its active contenders alive until
  // they detach.
  SessionListener* first_listener_ = nullptr;
  SessionListener* last_listener_ = nullptr;
  template <typename Event>
  struct Listener {
    std::uint64_t id;
    std::shared_ptr<std::function<void(Event)>> callback;
  };
  template <typename Event>
  Subscription subscribe_locked(std::vector<Listener<Event>> SessionCore::*listeners,
                                std::function<void(Event)> callback);
  std::vector<Listener<SessionState>> state_listeners_;
  std::vector<Listener<SessionDeadline>> deadline_listeners_;
  std::uint64_t next_listener_id_ = 1;
  // Tells the deadline listeners the current session's deadline, if it moved since they last heard.
  void announce_deadline_locked();
  BootClock::time_point announced_deadline_{};

  // The open acquisition batch, if any (guarded by mutex_).
  struct AcquisitionBatchState {
    std::thread::id owner;
    std::vector<BatchedCreate> creates;
    struct Listing {
      std::uint64_t generation;
      std::string path;
      ChildrenCallback done;
      NodeWatch watch;
    };
    std::vector<Listing> listings;
  };
  std::unique_ptr<AcquisitionBatchState> batch_;

  void admit_queued_starts();
  void refuse_queued_starts_locked();
  std::size_t starting_ = 0;  // slots of the start window taken
  // The process heap, counted: what start_record_memory_in_use reports.
  class CountedHeap final : public std::pmr::memory_resource {
   public:
    std::size_t in_use = 0;  // under the session mutex, as every use of the pool

   private:
    void* do_allocate(std::size_t bytes, std::size_t alignment) override;
    void do_deallocate(void* memory, std::size_t bytes, std::size_t alignment) override;
    bool do_is_equal(const std::pmr::memory_resource& other) const noexcept override { return this == &other; }
  };
  CountedHeap start_records_heap_;
  // Made for the first record after none, destroyed with the last (which gives all back).
  std::optional<std::pmr::unsynchronized_pool_resource> start_records_memory_;
  std::size_t start_records_ = 0;  // made and not yet given back
  std::deque<PendingStartPtr> queued_starts_;
  bool admission_posted_ = false;  // admit_queued_starts is on its way to the worker

  // metrics (under mutex_ or atomic)
  SessionMetrics session_metrics_;
  // SessionLossCause + 1, 0 before any loss: atomic, so that it can be read from any callback.
  std::atomic<int> last_loss_cause_{0};
  std::atomic<std::uint64_t> requests_sent_{0}, heartbeats_sent_{0};
  LockMetricsRegistry lock_metrics_{options_.metrics_path_labels};

  // Shared with the threads that run them: a thread that outlives the session (one that was
  // running user code when the last reference went) still has its executor.
  std::shared_ptr<boost::asio::io_context> worker_ = std::make_shared<boost::asio::io_context>();
  std::shared_ptr<boost::asio::io_context> callbacks_ = std::make_shared<boost::asio::io_context>();
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> worker_guard_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> callbacks_guard_;
  boost::asio::steady_timer deadline_timer_;
  boost::asio::steady_timer heartbeat_timer_;
  boost::asio::steady_timer server_watch_timer_;
  std::thread worker_thread_;
  std::thread callback_thread_;
  // Handles of lost sessions, kept open while holders on them are still stopping.
  struct RetiredConnection {
    std::uint64_t generation = 0;
    std::shared_ptr<ZooKeeperConnection> connection;
    int holders_stopping = 0;
    std::unique_ptr<boost::asio::steady_timer> close_timer;
  };
  std::vector<RetiredConnection> retired_;  // guarded by mutex_
  // Closes lost sessions' handles one after the other on a thread of its own. zookeeper_close
  // can block for seconds (a partition, a handle that never was a session), so at close() the
  // session waits for it only so long; it is shared with its thread, which may finish later.
  struct Closer {
    std::mutex mutex;
    std::condition_variable changed;
    std::list<std::shared_ptr<ZooKeeperConnection>> queue;  // guarded by mutex
    bool stopping = false;                                  // guarded by mutex
    bool finished = false;                                  // guarded by mutex
    void run();
  };
  std::shared_ptr<Closer> closer_ = std::make_shared<Closer>();
  std::thread closer_thread_;  // started by close_in_background(), under closer_->mutex
  std::atomic<std::thread::id> closer_thread_id_{};  // for on_library_thread(), without that mutex
  // close(): the first caller ends the session; the others wait for it (or, on the session's own
  // threads, which it may be waiting for, return at once). Guarded by mutex_.
  bool close_started_ = false;
  bool close_finished_ = false;
  std::condition_variable close_finished_changed_;
  void end_session_for_listeners();
  void finish_close(bool was_connected, std::shared_ptr<ZooKeeperConnection> connection);
  // Replacement handles that could not even be made (a name that does not resolve during an
  // outage) are retried with this backoff.
  std::chrono::milliseconds reopen_backoff_{0};
  std::unique_ptr<boost::asio::steady_timer> reopen_timer_;
  std::mutex callbacks_mutex_;
  bool callbacks_stopped_ = false;  // guarded by callbacks_mutex_
  // Requests sent and not yet completed, so that close() can let them finish first.
  std::atomic<int> in_flight_{0};
  std::mutex in_flight_mutex_;
  std::condition_variable in_flight_drained_;
};

}  // namespace zkr::detail
