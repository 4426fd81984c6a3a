// SPDX-License-Identifier: Apache-2.0
#include "session_core.hpp"

#include <time.h>

#include <algorithm>
#include <future>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#include "guid.hpp"
#include "log.hpp"
#include "request_limits.hpp"
#include "state_check.hpp"
#include "tls_probe.hpp"

namespace zkr::detail {
namespace {

// The deadline timer wakes at least this often, so that a deadline passed during a suspend of the
// machine (which CLOCK_BOOTTIME counts and the timer's clock does not) is seen promptly on resume.
constexpr auto kDeadlineCheckInterval = std::chrono::milliseconds(100);
// A look at the deadline this long after the one before slept through the time in between (the
// process was frozen or starved, the machine suspended): see deadline_verdict_locked.
constexpr auto kMonitorAsleepAfter = std::chrono::milliseconds(500);
constexpr auto kMinHeartbeatInterval = std::chrono::milliseconds(20);
// What a long heartbeat interval has beyond a tick: the previous heartbeat's round trip must fit
// in it for the next one to be credited with that one's send time (see long_heartbeat).
constexpr auto kHeartbeatSlack = std::chrono::milliseconds(100);
// How often the server watch looks at the connection (see SessionCore::watch_server).
constexpr auto kServerWatchInterval = std::chrono::milliseconds(100);
// Creates per multi-op in an acquisition batch: few enough that a refused multi costs little to
// redo one by one. Their size is bounded too (see send_batched_requests_locked).
constexpr std::size_t kCreatesPerMulti = 100;
// The node each batched multi-op creates, sets and deletes again (see send_batched_creates_locked),
// "zkr-batch-stamp-<GUID>": named afresh for each multi-op, so that no node of anyone else's (a
// user's node under a lock path, another batch's stamp) can be in its way or be touched by it.
constexpr std::string_view kBatchStampPrefix = "zkr-batch-stamp-";

// What the three ops on a multi-op's stamp under `parent` count against the request limit.
std::size_t stamp_request_bytes(const std::string& parent) { return 3 * request_bytes(parent.size(), 0); }

// The latest reply through the leader that any session of this process had on a connection to each
// server (as current_server() names it). The server watch asks it before ending a connection that
// is not quiet: a server that none of the process's sessions heard through the leader for a while
// answers, if anything, from its own copy (a follower cut off from the leader serves reads and
// pings for syncLimit ticks), so every connection to it may go; one that another session just
// heard through the leader is working, and only a quiet connection is ended there.
class LeaderProofsByServer {
 public:
  static LeaderProofsByServer& instance() {
    // Never destroyed: a session that outlives static destruction (a global one) still notes.
    static auto* const proofs = new LeaderProofsByServer;
    return *proofs;
  }
  void note(const std::string& server, BootClock::time_point answered) {
    if (server.empty()) return;
    std::lock_guard lock(mutex_);
    if (latest_.size() >= kMaxServers && !latest_.contains(server)) latest_.clear();  // forgetting only costs quiet-only
    auto& latest = latest_[server];
    latest = std::max(latest, answered);
  }
  // Whether a session of the process heard through the leader on `server` since `since`.
  bool heard_since(const std::string& server, BootClock::time_point since) const {
    std::lock_guard lock(mutex_);
    const auto it = latest_.find(server);
    return it != latest_.end() && it->second >= since;
  }

 private:
  static constexpr std::size_t kMaxServers = 1024;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, BootClock::time_point> latest_;  // guarded by mutex_
};

}  // namespace

// A ZooKeeper server negotiates the requested timeout, clamped to its [min, max]SessionTimeout
// (by default 2 and 20 ticks); it answers above the request only to raise it to its minimum. A
// handshake outside that (a non-ZooKeeper service that answered with other bytes) is refused.
std::string SessionCore::implausible_handshake(std::chrono::milliseconds negotiated) const {
  constexpr auto kHighestMinimum = std::chrono::milliseconds(120'000);
  if (negotiated > std::chrono::milliseconds::zero() &&
      negotiated <= std::max(options_.session_timeout, kHighestMinimum))
    return {};
  return fmt::format("the server answered with a session timeout of {} ms (requested {} ms): is it a ZooKeeper "
                     "server?",
                     negotiated.count(), options_.session_timeout.count());
}

SessionCore::SessionCore(SessionOptions options, ConnectionFactory factory)
    : options_(std::move(options)),
      connection_factory_(std::move(factory)),
      worker_guard_(boost::asio::make_work_guard(*worker_)),
      callbacks_guard_(boost::asio::make_work_guard(*callbacks_)),
      deadline_timer_(*worker_),
      heartbeat_timer_(*worker_),
      server_watch_timer_(*worker_) {
  servers_ = options_.servers;
  worker_thread_ = std::thread([worker = worker_] { worker->run(); });
  callback_thread_ = std::thread([callbacks = callbacks_] { callbacks->run(); });
  // The closer thread starts with the first lost session (close_in_background): most sessions
  // never have one, and a short-lived process (zklock) pays for every thread it starts.
}

SessionCore::~SessionCore() { close(); }

std::chrono::milliseconds SessionCore::effective_timeout() const {
  auto timeout = negotiated_timeout();
  return timeout > std::chrono::milliseconds::zero() ? timeout : options_.session_timeout;
}

namespace {

// The session's timing, from its timeout, its lead time and the ensemble's tick (see the top of
// zkr/session.hpp): written once here, for the session and for shortest_session_timeout().
//
// Short heartbeats, every min(T/6, tick/2): a sync's send time less tick/2 + one interval (forward
// lag), never later than the previous request's send, is a moment the leader had heard of the
// session by. Long heartbeats, every min(T/4, (T - margin) / 3) (a quarter of the timeout, or less where a
// long lead time leaves less than three intervals), once that is at least a tick and
// kHeartbeatSlack: a
// sync's credit is then the send time of the previous answered request on the same connection
// (see credit_for_locked), whose answer came at least a tick before the sync was sent, so that a
// leader ping fell in between on the follower-leader stream the sync later took; the forward lag
// is one interval. Either way the session tolerates at least two intervals of silence.
std::chrono::milliseconds short_heartbeat(std::chrono::milliseconds timeout, std::chrono::milliseconds tick) {
  return std::max(std::min(timeout / 6, tick / 2), kMinHeartbeatInterval);
}

// A freeze needs no shorter interval: the monitor, waking past the deadline, asks before it
// declares anything (deadline_verdict_locked).
std::optional<std::chrono::milliseconds> long_heartbeat(std::chrono::milliseconds timeout, std::chrono::milliseconds margin,
                                                        std::chrono::milliseconds tick) {
  const auto interval = std::min(timeout / 4, (timeout - margin) / 3);
  if (interval >= tick + kHeartbeatSlack) return interval;
  return std::nullopt;
}

std::chrono::milliseconds heartbeat_interval_for(std::chrono::milliseconds timeout, std::chrono::milliseconds margin,
                                                 std::chrono::milliseconds tick) {
  if (const auto interval = long_heartbeat(timeout, margin, tick)) return *interval;
  return short_heartbeat(timeout, tick);
}

// How much earlier than its send a sync is credited at worst when no earlier answer qualifies
// (short heartbeats; the first sync on a connection): tick/2 + one interval.
std::chrono::milliseconds fallback_lag_for(std::chrono::milliseconds timeout, std::chrono::milliseconds margin,
                                           std::chrono::milliseconds tick) {
  return tick / 2 + heartbeat_interval_for(timeout, margin, tick);
}

std::chrono::milliseconds forward_lag_for(std::chrono::milliseconds timeout, std::chrono::milliseconds margin,
                                          std::chrono::milliseconds tick) {
  if (const auto interval = long_heartbeat(timeout, margin, tick)) return *interval;
  return fallback_lag_for(timeout, margin, tick);
}

// The most lead time a session of `timeout` can give: at least two heartbeats must fit into the
// silence it tolerates, with short heartbeats or with long ones.
std::chrono::milliseconds lead_time_room(std::chrono::milliseconds timeout, std::chrono::milliseconds tick) {
  const auto short_interval = short_heartbeat(timeout, tick);
  const auto with_short = timeout - (tick / 2 + short_interval) - 2 * short_interval;
  if (timeout / 4 < tick + kHeartbeatSlack) return with_short;  // never long heartbeats
  return std::max(with_short, timeout - 3 * (tick + kHeartbeatSlack));
}

}  // namespace

}  // namespace zkr::detail

namespace zkr {

BootClock::time_point BootClock::now() noexcept {
  timespec now{};
  ::clock_gettime(clock_id, &now);
  return time_point(std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec));
}

std::chrono::milliseconds shortest_session_timeout(std::chrono::milliseconds lead_time,
                                                   std::chrono::milliseconds ensemble_tick_time) {
  // The room for lead time grows with the timeout: search the smallest timeout that has enough.
  std::chrono::milliseconds low{1}, high{std::chrono::hours(24 * 365)};
  while (low < high) {
    const auto middle = low + (high - low) / 2;
    if (detail::lead_time_room(middle, ensemble_tick_time) >= lead_time) high = middle;
    else low = middle + std::chrono::milliseconds(1);
  }
  return low;
}

}  // namespace zkr

namespace zkr::detail {

std::chrono::milliseconds SessionCore::heartbeat_interval() const {
  const auto timeout = effective_timeout();
  return heartbeat_interval_for(timeout, margin_for(timeout), options_.ensemble_tick_time);
}

std::chrono::milliseconds SessionCore::forward_lag() const {
  const auto timeout = effective_timeout();
  return forward_lag_for(timeout, margin_for(timeout), options_.ensemble_tick_time);
}

std::chrono::milliseconds SessionCore::fallback_lag() const {
  const auto timeout = effective_timeout();
  return fallback_lag_for(timeout, margin_for(timeout), options_.ensemble_tick_time);
}

// The requested margin, clamped so that at least two heartbeats fit into the silence tolerated.
std::chrono::milliseconds SessionCore::margin_for(std::chrono::milliseconds timeout) const {
  auto margin = options_.safety_margin > std::chrono::milliseconds::zero() ? options_.safety_margin : timeout / 4;
  return std::max(std::min(margin, lead_time_room(timeout, options_.ensemble_tick_time)), std::chrono::milliseconds::zero());
}

std::chrono::milliseconds SessionCore::lead_time() const { return margin_for(effective_timeout()); }

std::chrono::milliseconds SessionCore::silence_tolerance() const {
  const auto timeout = effective_timeout();
  return timeout - margin_for(timeout) - forward_lag();
}

// Halfway between one heartbeat interval (the silence a healthy server shows just before a reply)
// and the silence tolerated: the other half is left for the move (see watch_server).
std::chrono::milliseconds SessionCore::move_after() const { return (silence_tolerance() + heartbeat_interval()) / 2; }

// While a session lives, the time left after a move, halved: a second silent server is left in
// time too. Before there is one, an equal share of the connect timeout for each server.
std::chrono::milliseconds SessionCore::attempt_patience() const {
  if (!session_established_)
    return options_.connect_timeout / static_cast<int>(std::max<std::size_t>(server_count_, 1));
  return (silence_tolerance() - heartbeat_interval()) / 4;
}

void SessionCore::connect_or_throw() {
  if (auto problem = describe_servers_problem(options_.servers); !problem.empty())
    throw Error(make_error_code(errc::invalid_connect_string), "connect to", options_.servers, problem);
  if (options_.session_timeout <= std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                "session timeout must be positive");
  if (options_.connect_timeout <= std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                "connect timeout must be positive");
  if (options_.safety_margin < std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                "safety margin must not be negative");
  if (options_.ensemble_tick_time <= std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                "ensemble tick time must be positive");
  if (options_.host_resolution_interval < std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                "host resolution interval must not be negative");
  for (const auto& entry : options_.metrics_path_labels.paths)
    if (!entry.starts_with('/'))
      throw Error(make_error_code(errc::invalid_argument), "connect to", options_.servers,
                  fmt::format("metrics path label '{}' is not an absolute path or prefix", entry));

  if (options_.tls) {
    // The C client resolves nothing through the relay: a name no server has is found here.
    if (const auto unresolvable = describe_unresolvable_hosts(options_.servers); !unresolvable.empty())
      throw Error(make_error_code(errc::unknown_host), "connect to", options_.servers,
                  fmt::format("cannot resolve {}", unresolvable));
    // The failure handler runs on the relay's thread, which finish_close joins before this goes.
    tls_relay_ = std::make_unique<TlsRelay>(options_.servers, *options_.tls, options_.session_timeout,
                                            [this](const TlsFailure& failure) { on_tls_failure(failure); });
  }

  std::unique_lock lock(mutex_);
  std::error_code parse_error;
  if (const auto list = parse_servers(options_.servers, parse_error)) server_count_ = list->hosts.size();
  open_connection_locked();
  if (!connection_) {
    // Not even a handle: a name of the connect string does not resolve. Waiting will not help a
    // first connect; say why at once.
    std::string reason = last_connect_problem_;
    lock.unlock();
    close();
    throw Error(make_error_code(errc::unknown_host), "connect to", options_.servers, reason);
  }
  const auto settled_by = [&](std::chrono::steady_clock::time_point until) {
    return state_changed_.wait_until(lock, until, [this] {
      auto state = state_.load();
      return state == SessionState::connected || state == SessionState::auth_failed ||
             state == SessionState::closed || (tls_failure_ && tls_failure_->every_server_failed);
    });
  };
  // A timeout names its cause. Unless the handshake already told one (a service that is not
  // ZooKeeper), the last tenth of the wait (at most a second) asks each host directly whether it
  // refuses, accepts or does not answer, so that the whole call keeps to the connect timeout.
  const auto deadline = std::chrono::steady_clock::now() + options_.connect_timeout;
  const auto probe_budget = std::min<std::chrono::milliseconds>(options_.connect_timeout / 10, std::chrono::seconds(1));
  // In plain text: the hosts (at most 8) that answer a TLS handshake, within the budget; with
  // `every`, none unless all of them do.
  const auto hosts_speaking_tls = [&](bool every) {
    std::vector<std::pair<std::string, std::future<bool>>> tls_probes;
    std::error_code ec;
    const auto list = parse_servers(options_.servers, ec);
    if (!list || options_.tls || (every && list->hosts.size() > 8)) return std::string();
    for (const auto& host : list->hosts)
      if (tls_probes.size() < 8) tls_probes.emplace_back(host, std::async(std::launch::async, speaks_tls, host, probe_budget));
    std::string found;
    bool all = true;
    for (auto& [host, answered] : tls_probes) {
      const bool tls = answered.get();
      all = all && tls;
      if (tls && found.empty()) found = host;
    }
    return every && !all ? std::string() : found;
  };
  std::string tls_only;  // a server that speaks only TLS, given plain text
  // A TLS-only port closes each plain-text connection unanswered, and the C client tries again,
  // quietly, until the timeout: a first connect that has not settled shortly asks the hosts at
  // once. Only when every one of them speaks TLS is that the answer this early.
  bool settled = false;
  if (!options_.tls) {
    constexpr auto kAskForTlsAfter = std::chrono::milliseconds(300);
    settled = settled_by(std::min(deadline - probe_budget, std::chrono::steady_clock::now() + kAskForTlsAfter));
    if (!settled && last_connect_problem_.empty()) {
      lock.unlock();
      tls_only = hosts_speaking_tls(/*every=*/true);
      lock.lock();
      if (state_.load() == SessionState::connected) tls_only.clear();
    }
  }
  if (tls_only.empty() && !settled) settled = settled_by(deadline - probe_budget);
  std::string unreachable;
  if (tls_only.empty() && !settled && last_connect_problem_.empty()) {
    lock.unlock();
    // Meanwhile, in plain text: does a host answer a TLS handshake? (Within the same budget.)
    auto tls_probes = std::async(std::launch::async, hosts_speaking_tls, /*every=*/false);
    unreachable = describe_unreachable_servers(options_.servers, probe_budget);
    tls_only = tls_probes.get();
    lock.lock();
  }
  if (!tls_only.empty()) {
    lock.unlock();
    close();
    throw Error(make_error_code(errc::tls_server_requires_tls), "connect to", options_.servers,
                fmt::format("{} answers a TLS handshake and gave no session to plain text: it is a TLS port "
                            "(secureClientPort); give the session TLS options",
                            tls_only));
  }
  if (!settled) settled = settled_by(deadline);
  if (tls_failure_ && tls_failure_->every_server_failed && state_.load() != SessionState::connected) {
    // Every server refused the TLS connection: waiting longer will not help, and this is not a
    // timeout. (With several servers, the first one's failure is not enough: the next may do.)
    const TlsFailure failure = *tls_failure_;
    lock.unlock();
    close();
    throw Error(failure.code, "connect to", options_.servers, failure.message);
  }
  SessionState outcome = state_.load();
  std::string detail = fmt::format("no session within {} ms", options_.connect_timeout.count());
  if (!last_connect_problem_.empty()) detail += "; " + last_connect_problem_;
  else if (!unreachable.empty()) detail += "; " + unreachable;
  lock.unlock();
  if (settled && outcome == SessionState::connected) return;
  close();
  if (outcome == SessionState::auth_failed)
    throw Error(make_error_code(errc::auth_failed), "connect to", options_.servers,
                "the ensemble refused the digest credentials");
  throw Error(make_error_code(errc::connect_timeout), "connect to", options_.servers, detail);
}

void SessionCore::open_connection_locked() {
  ++generation_;
  session_established_ = false;
  session_id_ = 0;
  // Until the session is established, the server can have heard from us no earlier than now.
  last_leader_proof_ = BootClock::now();
  credited_touch_ = last_leader_proof_ - fallback_lag();
  recheck_since_.reset();
  ++connection_epoch_;
  std::weak_ptr<SessionCore> self = weak_from_this();
  const std::uint64_t generation = generation_;
  std::error_code ec;
  // Through TLS, the relay serves this handle's connections while the handle lives (until its
  // close, retired or not): the admission goes with the handle.
  std::shared_ptr<void> admission = tls_relay_ ? tls_relay_->admit_client_handle() : nullptr;
  std::unique_ptr<ZooKeeperConnection> made = connection_factory_(
      tls_relay_ ? tls_relay_->client_connect_string() : servers_, options_.session_timeout,
      [self, generation](ConnectionEvent event) {
        if (auto core = self.lock()) core->on_connection_event(generation, event);
      },
      ec);
  if (made && admission)
    connection_ = std::shared_ptr<ZooKeeperConnection>(made.release(), [admission](ZooKeeperConnection* handle) mutable {
      delete handle;
      admission.reset();
    });
  else
    connection_ = std::move(made);
  if (connection_) connection_->set_host_resolution_interval(options_.host_resolution_interval);
  servers_to_apply_ = false;  // a new handle starts on servers_
  if (!connection_) {
    const std::string unresolvable = describe_unresolvable_hosts(servers_);
    last_connect_problem_ = unresolvable.empty() ? fmt::format("cannot start a connection: {}", ec.message())
                                                 : fmt::format("cannot resolve {}", unresolvable);
    log(LogLevel::error, "connecting to {}: {}; trying again", servers_, last_connect_problem_);
    set_state_locked(session_ever_established_ ? SessionState::lost : SessionState::connecting);
    schedule_reopen_locked();
    return;
  }
  attempt_server_.clear();
  arm_server_watch_locked(generation);
  if (options_.credentials) {
    std::string user_password = options_.credentials->user + ":" + options_.credentials->password;
    connection_->add_digest_auth(user_password, [](zk_errc rc) {
      if (rc != zk_errc::ok) log(LogLevel::warning, "digest authentication failed: {}", make_error_code(rc).message());
    });
  }
  set_state_locked(SessionState::connecting);
}

// A replacement handle that could not be made (typically: the resolver is down during the very
// outage that lost the session) is tried again, with backoff, until it works or the session is
// closed. Never given up: waiters and elections wait for a session, not for an error.
void SessionCore::schedule_reopen_locked() {
  constexpr auto kFirst = std::chrono::milliseconds(100), kMost = std::chrono::milliseconds(5000);
  reopen_backoff_ = std::clamp(reopen_backoff_ * 2, kFirst, kMost);
  const std::uint64_t generation = generation_;
  post_to_worker([self = weak_from_this(), generation, delay = reopen_backoff_] {
    auto core = self.lock();
    if (!core) return;
    core->reopen_timer_ = std::make_unique<boost::asio::steady_timer>(*core->worker_, delay);
    core->reopen_timer_->async_wait([self, generation](boost::system::error_code ec) {
      if (ec) return;
      auto again = self.lock();
      if (!again) return;
      std::lock_guard lock(again->mutex_);
      if (again->ended() || again->connection_ || again->generation_ != generation) return;
      again->open_connection_locked();
    });
  });
}

// The session's states and the only ways between them; closed and auth_failed are terminal.
bool session_transition_allowed(SessionState from, SessionState to) {
  using S = SessionState;
  switch (from) {
    case S::connecting: return to != S::suspended;
    case S::connected: return to == S::suspended || to == S::lost || to == S::closed || to == S::auth_failed;
    case S::suspended: return to == S::connected || to == S::lost || to == S::closed || to == S::auth_failed;
    case S::lost: return to == S::connecting || to == S::closed || to == S::auth_failed;
    case S::closed:
    case S::auth_failed: return false;
  }
  return false;
}

void SessionCore::set_state_locked(SessionState state) {
  if (state_.load() == state) return;
  if (kStateChecks && !session_transition_allowed(state_.load(), state))
    state_check_failed("session state", to_string(state_.load()), to_string(state));
  state_ = state;
  state_changed_.notify_all();
  for (const auto& listener : state_listeners_) {
    auto callback = listener.callback;
    post_callback([callback, state] { (*callback)(state); });
  }
}

void SessionCore::on_connection_event(std::uint64_t generation, ConnectionEvent event) {
  std::unique_lock lock(mutex_);
  if (generation != generation_ || ended() || !connection_) return;
  switch (event) {
    case ConnectionEvent::connected: {
      if (const auto problem = implausible_handshake(connection_->negotiated_timeout()); !problem.empty()) {
        // Something answered that is not a ZooKeeper server (an HTTP server, say): no session.
        last_connect_problem_ = problem;
        log(LogLevel::error, "connecting to {}: {}; trying again", servers_, problem);
        close_in_background(std::move(connection_));
        set_state_locked(session_ever_established_ ? SessionState::lost : SessionState::connecting);
        schedule_reopen_locked();
        break;
      }
      // Backoff between handles ends with a session, not with a handle made: a peer that answers
      // every connect with an absurd handshake is tried again less and less often.
      reopen_backoff_ = std::chrono::milliseconds::zero();
      negotiated_timeout_ = connection_->negotiated_timeout();
      session_id_ = connection_->session_id();
      const bool resumed = session_established_;
      if (!resumed) {
        session_ever_established_ = true;
        last_connect_problem_.clear();
        // A new session is created by the leader just before this reply: its clock starts here,
        // not when the connection was opened (the client may have tried silent servers first).
        last_leader_proof_ = BootClock::now();
        credited_touch_ = last_leader_proof_ - fallback_lag();
        session_established_ = true;
        ++session_metrics_.sessions_established;
      }
      on_server_since_ = BootClock::now();
      connected_server_ = connection_->current_server();
      move_refused_ = false;
      ++connection_epoch_;  // answers on the connection before do not vouch for this one
      last_leader_send_ = on_server_since_ - fallback_lag();
      set_state_locked(SessionState::connected);
      announce_deadline_locked();  // a new session's, or a resumed one's under a renegotiated timeout
      for (const auto& listener : snapshot_listeners_locked()) {
        if (resumed) listener->on_reconnected(generation);
        else listener->on_new_session(generation);
      }
      log(LogLevel::info, LogContext{session_id_.load(), {}, {}}, "session {} {} (timeout {} ms)",
          session_id_text(session_id_.load()),
          resumed ? "reconnected" : "established", negotiated_timeout_.load().count());
      schedule_deadline_check_locked();
      post_to_worker([self = weak_from_this(), generation] {
        if (auto core = self.lock()) core->send_heartbeat(generation);
      });
      break;
    }
    case ConnectionEvent::connecting:
      if (state_ != SessionState::connected) break;
      ++session_metrics_.suspensions;
      if (options_.loss_policy == LossPolicy::on_disconnect) {
        ++session_metrics_.losses_by_disconnect;
        declare_lost_locked(LossReason::connection_lost, SessionLossCause::disconnect);
      } else {
        set_state_locked(SessionState::suspended);
        for (const auto& listener : snapshot_listeners_locked()) listener->on_suspended(generation);
      }
      break;
    case ConnectionEvent::expired:
      if (!session_established_) break;
      ++session_metrics_.losses_by_expiry;
      declare_lost_locked(LossReason::session_lost, SessionLossCause::server_expiry);
      break;
    case ConnectionEvent::auth_failed: {
      end_reason_ = make_error_code(errc::auth_failed);
      set_state_locked(SessionState::auth_failed);
      auto connection = std::move(connection_);
      ++generation_;
      for (const auto& listener : snapshot_listeners_locked()) listener->on_session_ended(end_reason_);
      refuse_queued_starts_locked();
      close_in_background(std::move(connection));
      break;
    }
    case ConnectionEvent::closed:
      break;
  }
}

// A lost session is never resumed: a fresh session replaces it. Its handle is closed (which
// deletes its ephemeral nodes at once if the server can still be reached) only once every holder
// told of the loss has let go, or once the server would have expired the session anyway: closing
// it earlier would hand a lock to the next waiter while its old holder is still stopping.
void SessionCore::declare_lost_locked(LossReason reason, SessionLossCause cause) {
  if (!session_established_) return;
  ++session_metrics_.sessions_lost;
  last_loss_cause_.store(static_cast<int>(cause) + 1);
  const bool server_expired = cause == SessionLossCause::server_expiry;
  const std::uint64_t lost_generation = generation_;
  recheck_since_.reset();
  log(LogLevel::warning, LogContext{session_id_.load(), {}, {}}, "session {} lost: {}", session_id_text(session_id_.load()),
      to_string(cause));
  set_state_locked(SessionState::lost);
  retired_.push_back(RetiredConnection{lost_generation, std::move(connection_), 0, nullptr});
  // Holders call hold_lost_session_locked from here.
  for (const auto& listener : snapshot_listeners_locked()) listener->on_session_lost(lost_generation, reason);
  auto retired = std::find_if(retired_.begin(), retired_.end(),
                              [&](const RetiredConnection& r) { return r.generation == lost_generation; });
  if (server_expired || retired->holders_stopping == 0) {
    close_retired_locked(lost_generation);
  } else {
    // The latest the server can still keep the session: it may have heard from us until now.
    const auto close_by = effective_timeout() + options_.ensemble_tick_time;
    retired->close_timer = std::make_unique<boost::asio::steady_timer>(*worker_, close_by);
    retired->close_timer->async_wait([self = weak_from_this(), lost_generation](boost::system::error_code ec) {
      if (ec) return;
      auto core = self.lock();
      if (!core) return;
      std::lock_guard lock(core->mutex_);
      if (core->ended()) return;
      log(LogLevel::warning, "closing lost session of generation {}: its holders did not let go in time",
          lost_generation);
      core->close_retired_locked(lost_generation);
    });
  }
  open_connection_locked();
}

void SessionCore::hold_lost_session_locked(std::uint64_t generation) {
  for (auto& retired : retired_)
    if (retired.generation == generation) ++retired.holders_stopping;
}

void SessionCore::let_go_locked(std::uint64_t generation) {
  for (auto& retired : retired_) {
    if (retired.generation != generation) continue;
    if (--retired.holders_stopping <= 0) close_retired_locked(generation);
    return;
  }
}

void SessionCore::close_retired_locked(std::uint64_t generation) {
  auto it = std::find_if(retired_.begin(), retired_.end(),
                         [&](const RetiredConnection& r) { return r.generation == generation; });
  if (it == retired_.end()) return;
  auto connection = std::move(it->connection);
  if (it->close_timer) {
    // Timers belong to the worker thread.
    boost::asio::post(*worker_, [timer = std::shared_ptr<boost::asio::steady_timer>(std::move(it->close_timer))] {
      timer->cancel();
    });
  }
  retired_.erase(it);
  close_in_background(std::move(connection));
}

std::optional<SessionLossCause> SessionCore::last_loss_cause() const {
  const int stored = last_loss_cause_.load();
  if (stored == 0) return std::nullopt;
  return static_cast<SessionLossCause>(stored - 1);
}

// A deadline passed while someone was looking is a loss, declared at once: the holders hear it
// the lead time before the leader could expire the session. A deadline found passed by a look
// that comes kMonitorAsleepAfter or more after the one before was slept through: the holders
// were not told in time anyway, and the session may well be alive (a frozen process is not a
// lost one). The monitor then asks the ensemble and gives the answer until recheck_until_locked();
// meanwhile nothing is granted (in_doubt). A heartbeat goes out at once, and another a tick after
// the first answer, which is credited with a send after the wake (credit_for_locked): that proof
// ends the doubt (note_leader_proof), or an earlier one that leaves the deadline far enough ahead
// for it. A sync answered means the leader had not expired the session when it answered, so it
// never did, and nothing held on it was ever given away; its credit gives the session a deadline
// as after any heartbeat. No such proof in time, and the session is declared lost as it would
// have been.
SessionCore::DeadlineVerdict SessionCore::deadline_verdict_locked(std::uint64_t generation) {
  if (generation != generation_) return DeadlineVerdict::lost;
  const auto now = BootClock::now();
  const auto previous_look = std::exchange(last_deadline_look_, now);
  if (!recheck_since_) {
    if (now < deadline_locked()) return DeadlineVerdict::alive;
    if (now - previous_look >= kMonitorAsleepAfter && session_established_) start_recheck_locked(now, previous_look);
  }
  if (recheck_since_ && now < recheck_until_locked()) return DeadlineVerdict::in_doubt;
  ++session_metrics_.losses_by_deadline;
  declare_lost_locked(LossReason::session_lost, SessionLossCause::local_deadline);
  return DeadlineVerdict::lost;
}

// Half the lead time past the later of the deadline and the wake: should the answer not come,
// the holders are still told before the earliest moment the leader could expire the session as
// far as the latest proof shows, with half the lead time to spare, unless the wake itself came
// later than that.
BootClock::time_point SessionCore::recheck_until_locked() const {
  const auto timeout = negotiated_timeout_.load();
  return std::max(*recheck_since_, deadline_locked()) + margin_for(timeout) / 2;
}

void SessionCore::start_recheck_locked(BootClock::time_point now, BootClock::time_point previous_look) {
  recheck_since_ = now;
  recheck_followup_sent_ = false;
  ++session_metrics_.deadline_rechecks;
  log(LogLevel::warning, LogContext{session_id_.load(), {}, {}},
      "session {}: the monitor did not run for {} ms and finds its deadline passed; asking the ensemble before "
      "declaring it lost",
      session_id_text(session_id_.load()),
      std::chrono::duration_cast<std::chrono::milliseconds>(now - previous_look).count());
  if (state_ == SessionState::connected) send_heartbeat_after_locked(generation_, std::chrono::milliseconds::zero());
}

void SessionCore::end_recheck_alive_locked() {
  log(LogLevel::warning, LogContext{session_id_.load(), {}, {}},
      "session {}: proven alive after {} ms in doubt; nothing was lost", session_id_text(session_id_.load()),
      std::chrono::duration_cast<std::chrono::milliseconds>(BootClock::now() - *recheck_since_).count());
  recheck_since_.reset();
  const std::uint64_t generation = generation_;
  post_to_worker([self = weak_from_this(), generation] {
    auto core = self.lock();
    if (!core) return;
    std::lock_guard lock(core->mutex_);
    if (generation != core->generation_ || core->ended()) return;
    for (const auto& listener : core->snapshot_listeners_locked()) listener->on_deadline_renewed(generation);
  });
}

BootClock::time_point SessionCore::deadline_locked() const {
  const auto timeout = negotiated_timeout_.load();
  return credited_touch_ + timeout - margin_for(timeout);
}

void SessionCore::schedule_deadline_check_locked() {
  const std::uint64_t generation = generation_;
  last_deadline_look_ = BootClock::now();
  post_to_worker([self = weak_from_this(), generation] {
    auto core = self.lock();
    if (!core) return;
    std::unique_lock lock(core->mutex_);
    if (generation != core->generation_) return;
    core->arm_deadline_timer_locked(generation);
  });
}

void SessionCore::arm_deadline_timer_locked(std::uint64_t generation) {
  const auto next_look = recheck_since_ ? recheck_until_locked() : deadline_locked();
  const auto remaining = std::chrono::ceil<std::chrono::milliseconds>(next_look - BootClock::now());
  deadline_timer_.expires_after(std::clamp(remaining, std::chrono::milliseconds(1), kDeadlineCheckInterval));
  deadline_timer_.async_wait([self = weak_from_this(), generation](boost::system::error_code ec) {
    if (ec) return;
    if (auto core = self.lock()) core->on_deadline_timer(generation);
  });
}

void SessionCore::on_deadline_timer(std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (generation != generation_) return;
  if (state_ != SessionState::connected && state_ != SessionState::suspended) return;
  if (deadline_verdict_locked(generation) == DeadlineVerdict::lost) return;
  arm_deadline_timer_locked(generation);
}

void SessionCore::send_heartbeat(std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (generation != generation_ || ended()) return;
  if (state_ == SessionState::connected) {
    ++heartbeats_sent_;
    sync(generation, "/", [](zk_errc) {});
  }
  heartbeat_timer_.expires_after(heartbeat_interval());
  heartbeat_timer_.async_wait([self = weak_from_this(), generation](boost::system::error_code ec) {
    if (ec) return;
    if (auto core = self.lock()) core->send_heartbeat(generation);
  });
}

// The next heartbeat after `delay` rather than when due (the recheck's).
void SessionCore::send_heartbeat_after_locked(std::uint64_t generation, std::chrono::milliseconds delay) {
  // Timers belong to the worker thread.
  post_to_worker([self = weak_from_this(), generation, delay] {
    auto core = self.lock();
    if (!core) return;
    std::lock_guard lock(core->mutex_);
    if (generation != core->generation_ || core->ended()) return;
    core->heartbeat_timer_.expires_after(delay);  // cancels the wait for the due one
    core->heartbeat_timer_.async_wait([self, generation](boost::system::error_code ec) {
      if (ec) return;
      if (auto again = self.lock()) again->send_heartbeat(generation);
    });
  });
}


// The server watch. The C client leaves a server that does not answer only after 2/3 of the session
// timeout, for a fresh connect as for a connected session: later than the monitor tolerates
// silence (zklock's 20 s session: 13.3 s against 12 s), so one silent server (a host that lost
// power, a cut cable) would cost the session while the rest of the ensemble serves. The watch
// sends the connection on to the next server of the list (ZooKeeperConnection::
// leave_current_server, the client's own connection-loss path) when
//   - connected: nothing was answered through the leader for move_after() since the latest proof
//     or the latest (re)connect, whichever is later: halfway between one heartbeat interval and the
//     tolerated silence, which leaves half the rest for the move and the reconnect;
//   - connecting: the attempt on one server has gone unanswered for attempt_patience().
// Moving proves nothing and moves no deadline: the session's deadline is still the latest proof
// through the leader plus the tolerated silence (see deadline_locked), so a session whose last
// proof is too old is declared lost in time wherever it is connected, and the lead time argument
// of zkr/session.hpp holds unchanged. A resumed session proves itself with its first heartbeat on
// the new server. With one server in the list there is nowhere to go: the watch does nothing.
void SessionCore::arm_server_watch_locked(std::uint64_t generation) {
  // Timers belong to the worker thread.
  post_to_worker([self = weak_from_this(), generation] {
    auto core = self.lock();
    if (!core) return;
    std::lock_guard lock(core->mutex_);
    if (generation != core->generation_ || core->ended()) return;
    core->server_watch_timer_.expires_after(kServerWatchInterval);
    core->server_watch_timer_.async_wait([self, generation](boost::system::error_code ec) {
      if (ec) return;
      if (auto again = self.lock()) again->watch_server(generation);
    });
  });
}

void SessionCore::watch_server(std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (generation != generation_ || ended() || !connection_) return;
  if (server_count_ >= 2) {
    const auto now = BootClock::now();
    if (now - last_server_watch_ >= kMonitorAsleepAfter) {
      // The watch slept (the process was frozen): a silence it slept through is not the server's.
      on_server_since_ = now;
      attempt_since_ = now;
    }
    last_server_watch_ = now;
    if (state_ == SessionState::connected) {
      attempt_server_.clear();
      const auto quiet_since = std::max(last_leader_proof_, on_server_since_);
      if (now - quiet_since >= move_after()) {
        const std::string server = connection_->current_server();
        // Half that time: on a server no session of the process heard through the leader for it
        // (LeaderProofsByServer), every connection is ended, replies from the server's own copy
        // or not; elsewhere only one that heard nothing at all for it (see zk_client.cpp).
        const auto quiet_for = move_after() / 2;
        const bool cut_off = !LeaderProofsByServer::instance().heard_since(server, now - quiet_for);
        const bool left = connection_->leave_current_server(cut_off ? std::chrono::milliseconds::zero() : quiet_for);
        if (left || !move_refused_)
          log(LogLevel::warning, LogContext{session_id_.load(), {}, {}},
              "session {}: no reply through the leader for {} ms on {}{}; {}", session_id_text(session_id_.load()),
              std::chrono::duration_cast<std::chrono::milliseconds>(now - quiet_since).count(), server,
              cut_off ? "" : " (other sessions of the process hear the leader there)",
              left ? "moving to the next server" : "its connection could not be ended (tried again at each look)");
        // Refused: again at the next look, as the other sessions' proofs there age or the
        // connection goes quiet. Moved: not again before another move_after().
        move_refused_ = !left;
        if (left) on_server_since_ = now;
      } else {
        move_refused_ = false;
      }
    } else {
      std::string server = connection_->current_server();
      if (server != attempt_server_) {
        attempt_server_ = std::move(server);
        attempt_since_ = now;
      } else if (!attempt_server_.empty() && now - attempt_since_ >= attempt_patience()) {
        const bool left = connection_->leave_current_server(attempt_patience() / 2);
        // Nothing to end is the usual case between the client's attempts (its socket closed, the
        // next not yet open): not worth a warning at each look.
        log(left ? LogLevel::warning : LogLevel::debug, LogContext{session_id_.load(), {}, {}},
            "connecting to {}: no answer for {} ms; {}", attempt_server_,
            std::chrono::duration_cast<std::chrono::milliseconds>(now - attempt_since_).count(),
            left ? "trying the next server" : "no quiet connection to it to end (the client is between attempts)");
        attempt_since_ = now;
      }
    }
  }
  arm_server_watch_locked(generation);
}

void SessionCore::note_leader_proof(std::uint64_t generation, BootClock::time_point sent,
                                    BootClock::time_point previous_send) {
  std::lock_guard lock(mutex_);
  if (generation != generation_) return;
  const auto answered = BootClock::now();
  LeaderProofsByServer::instance().note(connected_server_, answered);
  const auto credit = credit_for_locked(sent, previous_send);
  recent_answers_[recent_answer_next_++ % recent_answers_.size()] = {connection_epoch_, sent, answered};
  if (sent > last_leader_proof_) last_leader_proof_ = sent;
  if (credit > credited_touch_) {
    credited_touch_ = credit;
    announce_deadline_locked();
  }
  if (!recheck_since_) return;
  if (sent >= *recheck_since_ && !recheck_followup_sent_) {
    // The first answer to a request sent since the wake vouches for a heartbeat sent a tick after
    // it (credit_for_locked): that one goes out then rather than an interval on.
    recheck_followup_sent_ = true;
    send_heartbeat_after_locked(generation, options_.ensemble_tick_time + kHeartbeatSlack);
  }
  // Settled once a proof is credited with a moment since the wake, or once the deadline is far
  // enough ahead for that follow-up's answer to come before it (then the heartbeats run as usual).
  const auto followup_answered_by = answered + options_.ensemble_tick_time + 2 * kHeartbeatSlack;
  if (credited_touch_ >= *recheck_since_ || (recheck_followup_sent_ && deadline_locked() > followup_answered_by))
    end_recheck_alive_locked();
}

// The moment the leader had heard of the session by, proven by a request sent at `sent` and
// answered through the leader (see the top of zkr/session.hpp). The follower we are connected to
// tells the leader of the sessions it heard from in its answer to each leader ping (every half
// tick), on the stream our request then took to the leader. An earlier request on the same
// connection answered at least a tick before `sent` reached the follower before a ping that came
// before our request on that stream: the leader had heard of it, sent at `earlier.sent`, before it
// answered ours. Without such an answer: tick/2 + one heartbeat interval before `sent` (the
// follower answered a leader ping within half a tick before forwarding ours, and the session's
// previous request was at most an interval before that), but never later than the previous
// request's send on the same connection: after a gap in the heartbeats (a frozen process) it was
// longer ago. A (re)connect, which the leader validated, counts as a request sent tick/2 + one
// interval before it.
BootClock::time_point SessionCore::credit_for_locked(BootClock::time_point sent,
                                                    BootClock::time_point previous_send) const {
  auto credit = std::min(sent - fallback_lag(), previous_send);
  const auto answered_by = sent - options_.ensemble_tick_time;
  for (const auto& earlier : recent_answers_)
    if (earlier.epoch == connection_epoch_ && earlier.answered <= answered_by && earlier.sent > credit)
      credit = earlier.sent;
  return credit;
}

template <typename Callback, typename Issue, typename... FailArgs>
void SessionCore::issue(std::uint64_t generation, Proof proof, Callback done, Issue issue_request,
                        FailArgs... fail_args) {
  auto fail_later = [this, fail_args...](Callback failed, zk_errc rc) {
    post_to_worker([failed = std::move(failed), rc, fail_args...] { failed(rc, fail_args...); });
  };
  if (generation != generation_ || !connection_) {
    fail_later(std::move(done), zk_errc::invalid_state);
    return;
  }
  ++requests_sent_;
  ++in_flight_;
  // One allocation per request for what its reply needs. The callback handed to the adapter
  // carries only the block's address, which std::function stores without an allocation of its
  // own; it owns the block once the request is queued, the adapter running it exactly once then.
  struct Pending {
    Callback done;
    std::weak_ptr<SessionCore> core;
    std::uint64_t generation;
    BootClock::time_point sent;
    BootClock::time_point previous_send;  // the request through the leader sent before it
    Proof proof;
  };
  const auto sent = BootClock::now();
  const auto previous_send = last_leader_send_;
  if (proof == Proof::leader) last_leader_send_ = sent;
  auto pending =
      std::make_unique<Pending>(Pending{std::move(done), weak_from_this(), generation, sent, previous_send, proof});
  Callback reply = [raw = pending.get()](zk_errc rc, auto... results) {
    const std::unique_ptr<Pending> owned(raw);
    auto core = owned->core.lock();
    if (core && owned->proof == Proof::leader && server_answered(rc))
      core->note_leader_proof(owned->generation, owned->sent, owned->previous_send);
    if (core) core->reply_arrived();
    owned->done(rc, std::move(results)...);
    if (core) core->request_finished();
  };
  if (zk_errc rc = issue_request(*connection_, std::move(reply)); rc != zk_errc::ok) {
    request_finished();
    fail_later(std::move(pending->done), rc);
    return;
  }
  (void)pending.release();  // the reply owns it now (and may have run already)
}

void SessionCore::create(std::uint64_t generation, const std::string& path, const std::string& data,
                         CreateMode mode, NodeAcl acl, CreateCallback done) {
  issue(
      generation, Proof::leader, std::move(done),
      [&](ZooKeeperConnection& c, CreateCallback cb) { return c.create(path, data, mode, acl, std::move(cb)); },
      std::string(), NodeStat{});
}

void SessionCore::get_children(std::uint64_t generation, const std::string& path, ChildrenCallback done,
                               NodeWatch watch, WatchOwner owner) {
  issue(
      generation, Proof::none, std::move(done),
      [&](ZooKeeperConnection& c, ChildrenCallback cb) {
        return c.get_children(path, std::move(cb), std::move(watch), std::move(owner));
      },
      std::vector<std::string>(), NodeStat{});
}

void SessionCore::get_data(std::uint64_t generation, const std::string& path, DataCallback done, NodeWatch watch,
                           WatchOwner owner) {
  issue(
      generation, Proof::none, std::move(done),
      [&](ZooKeeperConnection& c, DataCallback cb) {
        return c.get_data(path, std::move(cb), std::move(watch), std::move(owner));
      },
      std::string(), NodeStat{});
}

void SessionCore::drop_abandoned_watches(std::uint64_t generation, std::string prefix) {
  post_to_worker([self = weak_from_this(), generation, prefix = std::move(prefix)] {
    auto core = self.lock();
    if (!core) return;
    std::lock_guard lock(core->mutex_);
    if (generation == core->generation_ && core->connection_) core->connection_->drop_abandoned_watches(prefix);
  });
}

void SessionCore::exists(std::uint64_t generation, const std::string& path, StatCallback done) {
  issue(
      generation, Proof::none, std::move(done),
      [&](ZooKeeperConnection& c, StatCallback cb) { return c.exists(path, std::move(cb)); }, NodeStat{});
}

void SessionCore::set_data(std::uint64_t generation, const std::string& path, const std::string& data, int version,
                           StatCallback done) {
  issue(
      generation, Proof::leader, std::move(done),
      [&](ZooKeeperConnection& c, StatCallback cb) { return c.set_data(path, data, version, std::move(cb)); },
      NodeStat{});
}

void SessionCore::remove(std::uint64_t generation, const std::string& path, int version, ResultCallback done) {
  issue(
      generation, Proof::leader, std::move(done),
      [&](ZooKeeperConnection& c, ResultCallback cb) { return c.remove(path, version, std::move(cb)); });
}

void SessionCore::multi(std::uint64_t generation, const std::vector<MultiOp>& ops, MultiCallback done) {
  issue(
      generation, Proof::leader, std::move(done),
      [&](ZooKeeperConnection& c, MultiCallback cb) { return c.multi(ops, std::move(cb)); },
      std::vector<MultiOpOutcome>());
}

// A sync is answered only after the leader answered the server we talk to: the monitor's proof.
void SessionCore::sync(std::uint64_t generation, const std::string& path, ResultCallback done) {
  issue(
      generation, Proof::leader, std::move(done),
      [&](ZooKeeperConnection& c, ResultCallback cb) { return c.sync(path, std::move(cb)); });
}

bool SessionCore::open_batch_locked() {
  if (batch_) return false;
  batch_ = std::make_unique<AcquisitionBatchState>();
  batch_->owner = std::this_thread::get_id();
  return true;
}

SessionCore::StartSlot SessionCore::take_start_slot_locked() {
  const std::size_t limit = options_.max_starting_acquisitions;
  if (limit == 0 || ended() || batch_open_here_locked()) return StartSlot::not_counted;
  // In order: none starts ahead of those already waiting.
  if (!queued_starts_.empty() || starting_ >= limit) return StartSlot::full;
  ++starting_;
  return StartSlot::taken;
}

void SessionCore::queue_start_locked(PendingStartPtr& start) {
  queued_starts_.push_back(std::move(start));
}

void* SessionCore::start_record_memory_locked(std::size_t bytes) {
  if (!start_records_memory_) start_records_memory_.emplace(&start_records_heap_);
  void* memory = start_records_memory_->allocate(bytes, alignof(std::max_align_t));
  ++start_records_;
  return memory;
}

void SessionCore::give_back_start_record_memory(void* memory, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  start_records_memory_->deallocate(memory, bytes, alignof(std::max_align_t));
  if (--start_records_ == 0) start_records_memory_.reset();
}

std::size_t SessionCore::start_record_memory_in_use() const {
  std::lock_guard lock(mutex_);
  return start_records_heap_.in_use;
}

void* SessionCore::CountedHeap::do_allocate(std::size_t bytes, std::size_t alignment) {
  void* memory = std::pmr::new_delete_resource()->allocate(bytes, alignment);
  in_use += bytes;
  return memory;
}

void SessionCore::CountedHeap::do_deallocate(void* memory, std::size_t bytes, std::size_t alignment) {
  std::pmr::new_delete_resource()->deallocate(memory, bytes, alignment);
  in_use -= bytes;
}

void DiscardPendingStart::operator()(PendingStart* start) const noexcept {
  // The record may hold the last reference to the session: kept here until its memory is back.
  const std::shared_ptr<SessionCore> core = start->core_;
  const std::size_t bytes = start->footprint_;
  start->~PendingStart();
  core->give_back_start_record_memory(start, bytes);
}

void SessionCore::release_start_slot_locked() {
  --starting_;
  if (queued_starts_.empty() || admission_posted_ || ended()) return;
  // Admitting starts a contender, which takes this mutex: on the worker, not here.
  admission_posted_ = true;
  post_to_worker([weak = weak_from_this()] {
    if (auto core = weak.lock()) core->admit_queued_starts();
  });
}

void SessionCore::admit_queued_starts() {
  std::vector<PendingStartPtr> admitted;
  {
    std::lock_guard lock(mutex_);
    admission_posted_ = false;
    // Nothing is queued without a limit (take_start_slot_locked), so there is one here.
    while (!queued_starts_.empty() && !ended() && starting_ < options_.max_starting_acquisitions) {
      admitted.push_back(std::move(queued_starts_.front()));
      queued_starts_.pop_front();
      ++starting_;
    }
  }
  for (auto& start : admitted) {
    try {
      start->admit();
    } catch (const std::exception& e) {
      // Out of memory past the point where the acquisition could still be told: its slot stays
      // taken, the others are admitted all the same.
      log(LogLevel::error, "starting a held-back acquisition failed: {}", e.what());
    }
  }
}

void SessionCore::refuse_queued_starts_locked() {
  if (queued_starts_.empty()) return;
  auto refused = std::make_shared<std::deque<PendingStartPtr>>(std::move(queued_starts_));
  queued_starts_.clear();
  post_callback([refused, why = end_reason_] {
    for (auto& start : *refused) start->refuse(why);
    refused->clear();
  });
}

bool SessionCore::batch_open_here_locked() const {
  return batch_ && batch_->owner == std::this_thread::get_id();
}

void SessionCore::create_in_batch_locked(std::uint64_t generation, std::string parent, std::string path_prefix,
                                         std::string data, NodeAcl acl, CreateCallback done) {
  // A full multi-op's worth goes out at once, with the listings asked for so far (each one's
  // create is among them: an acquisition asks for both together), so that the server works while
  // the batch is still being filled.
  if (batch_->creates.size() >= kCreatesPerMulti) send_batched_requests_locked(*batch_);
  batch_->creates.push_back({generation, std::move(parent), std::move(path_prefix), std::move(data), acl, std::move(done)});
}

void SessionCore::get_children_in_batch_locked(std::uint64_t generation, std::string path, ChildrenCallback done,
                                               NodeWatch watch) {
  batch_->listings.push_back({generation, std::move(path), std::move(done), std::move(watch)});
}

void SessionCore::send_batch_locked() {
  if (!batch_) return;
  const std::unique_ptr<AcquisitionBatchState> batch = std::move(batch_);
  send_batched_requests_locked(*batch);
}

// The creates go out before the listings: each listing then sees the node created for it (the
// server answers one session's requests in order), and no listing depends on anything else.
void SessionCore::send_batched_requests_locked(AcquisitionBatchState& batch) {
  // A multi-op takes each parent once: the nodes it creates share its zxid, which is their
  // token, and two grants of one lock must never share a token. And it never grows past the
  // server's request limit, counted as a recipe counts a single create (request_bytes: the
  // recipe's constructor made sure that one fits), its stamp's ops included: the server would drop
  // the connection, and with it whatever else the session was doing. A create that fits with no
  // other goes out alone, as a plain create.
  std::vector<BatchedCreate> chunk;
  std::size_t chunk_bytes = 0;
  for (auto& create : batch.creates) {
    const bool parent_taken = std::any_of(chunk.begin(), chunk.end(),
                                          [&](const BatchedCreate& taken) { return taken.parent == create.parent; });
    const std::size_t create_bytes = request_bytes(create.parent.size(), create.data.size());
    if (!chunk.empty() && (parent_taken || chunk_bytes + create_bytes > kServerRequestLimit ||
                           chunk.size() == kCreatesPerMulti || create.generation != chunk.front().generation))
      send_batched_creates_locked(std::exchange(chunk, {}));
    if (chunk.empty()) chunk_bytes = stamp_request_bytes(create.parent);
    chunk_bytes += create_bytes;
    chunk.push_back(std::move(create));
  }
  if (!chunk.empty()) send_batched_creates_locked(std::move(chunk));
  for (auto& listing : batch.listings)
    get_children(listing.generation, listing.path, std::move(listing.done), std::move(listing.watch));
  batch.creates.clear();
  batch.listings.clear();
}

// One multi-op creates the nodes. It does not report a create's Stat (the C client offers no
// create2 inside a multi), and the token is the node's czxid: so the multi also creates a stamp
// node under the first parent, sets it (a set reports its Stat: mzxid is the multi's zxid, which
// is the czxid of every node the multi creates) and deletes it again. No read ever shows the stamp;
// its parent's sequence counter moves by one more. A refused multi applied nothing: each create it
// held answers with its own code, or with runtime_inconsistency when another op was the cause.
void SessionCore::send_batched_creates_locked(std::vector<BatchedCreate> creates) {
  const std::uint64_t generation = creates.front().generation;
  if (creates.size() == 1) {
    auto& only = creates.front();
    create(generation, only.path_prefix, only.data, CreateMode::ephemeral_sequential, only.acl, std::move(only.done));
    return;
  }
  const std::string stamp = fmt::format("{}/{}{}", creates.front().parent, kBatchStampPrefix, new_guid());
  std::vector<MultiOp> ops;
  ops.reserve(creates.size() + 3);
  ops.push_back({.kind = MultiOp::Kind::create, .path = stamp, .data = {}, .mode = CreateMode::ephemeral,
                 .acl = creates.front().acl});
  ops.push_back({.kind = MultiOp::Kind::set, .path = stamp, .data = {}});
  std::vector<CreateCallback> replies;
  replies.reserve(creates.size());
  for (auto& create : creates) {
    ops.push_back({.kind = MultiOp::Kind::create, .path = std::move(create.path_prefix), .data = std::move(create.data),
                   .mode = CreateMode::ephemeral_sequential, .acl = create.acl});
    replies.push_back(std::move(create.done));
  }
  ops.push_back({.kind = MultiOp::Kind::remove, .path = stamp, .data = {}});
  constexpr std::size_t kFirstCreate = 2;
  multi(generation, ops, [replies = std::move(replies)](zk_errc rc, std::vector<MultiOpOutcome> outcomes) {
    NodeStat created;
    if (rc == zk_errc::ok) created.czxid = outcomes[1].stat.mzxid;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (rc == zk_errc::ok) {
        replies[i](rc, std::move(outcomes[kFirstCreate + i].created_path), created);
        continue;
      }
      zk_errc own = outcomes.empty() ? rc : outcomes[kFirstCreate + i].rc;  // no outcomes: no answer at all
      if (!outcomes.empty() && own == zk_errc::ok) own = zk_errc::runtime_inconsistency;  // rolled back
      replies[i](own, std::string(), NodeStat{});
    }
  });
}

void SessionCore::request_finished() {
  if (--in_flight_ == 0) {
    {
      std::lock_guard lock(in_flight_mutex_);
      in_flight_drained_.notify_all();
    }
    if (servers_to_apply_)
      post_to_worker([self = weak_from_this()] {
        auto core = self.lock();
        if (!core) return;
        std::lock_guard lock(core->mutex_);
        core->apply_servers_if_quiet_locked();
      });
  }
}

// A reply is in and its callback, which may send the next request, has not run yet: if no other
// request is in flight, a server list waiting for a quiet moment goes to the client now. (A
// service that sends a request after each reply would otherwise never leave one.)
void SessionCore::reply_arrived() {
  if (!servers_to_apply_ || in_flight_.load() != 1) return;
  std::lock_guard lock(mutex_);
  apply_servers_if_quiet_locked(1);
}

std::string SessionCore::current_server() const {
  std::lock_guard lock(mutex_);
  return connection_ ? connection_->current_server() : std::string();
}

std::string SessionCore::servers() const {
  std::lock_guard lock(mutex_);
  return servers_;
}

bool SessionCore::set_servers(const std::string& servers) {
  std::error_code ec;
  const auto next = parse_servers(servers, ec);
  if (!next)
    throw Error(make_error_code(errc::invalid_connect_string), "set the servers to", servers,
                describe_servers_problem(servers));
  std::lock_guard lock(mutex_);
  if (ended()) throw Error(make_error_code(errc::session_closed), "set the servers to", servers, "the session is closed");
  const auto current = parse_servers(servers_, ec);  // checked by connect_or_throw or here
  if (next->chroot != current->chroot)
    throw Error(make_error_code(errc::invalid_argument), "set the servers to", servers,
                fmt::format("the chroot cannot change (the session's is {})",
                            current->chroot.empty() ? "none" : "'" + current->chroot + "'"));
  const auto as_set = [](std::vector<std::string> hosts) {
    std::sort(hosts.begin(), hosts.end());
    hosts.erase(std::unique(hosts.begin(), hosts.end()), hosts.end());
    return hosts;
  };
  if (as_set(next->hosts) == as_set(current->hosts)) return false;
  if (tls_relay_) {
    // The C client names nothing the relay cannot resolve (as at the start).
    if (const auto unresolvable = describe_unresolvable_hosts(servers); !unresolvable.empty())
      throw Error(make_error_code(errc::unknown_host), "set the servers to", servers,
                  fmt::format("cannot resolve {}", unresolvable));
    tls_relay_->set_servers(servers);  // new handles connect through its new ports at once
  }
  servers_ = servers;
  server_count_ = next->hosts.size();
  log(LogLevel::info, LogContext{session_id_.load(), {}, {}}, "servers now {}", servers_);
  servers_to_apply_ = true;
  apply_servers_if_quiet_locked();
  return true;
}

// The C client's zoo_set_servers ends the connection when its server is no longer listed (or, when
// servers were added, with the probability that evens their load), from the calling thread and
// without failing the requests sent on it: their replies would never come, and the next
// connection would be dropped when a reply failed to match them. So the list goes to the client
// only while nothing is in flight (but `answered` requests whose replies are in, their callbacks
// still to run): issue() sends under mutex_, held here, and reply_arrived and request_finished
// call again as replies come in. A session lost meanwhile opens its next handle on the new
// list directly.
void SessionCore::apply_servers_if_quiet_locked(int answered) {
  if (!servers_to_apply_ || !connection_ || ended() || in_flight_.load() != answered) return;
  servers_to_apply_ = false;
  const std::string client_servers = tls_relay_ ? tls_relay_->client_connect_string() : servers_;
  if (const zk_errc rc = connection_->set_servers(client_servers); rc != zk_errc::ok)
    log(LogLevel::warning, LogContext{session_id_.load(), {}, {}}, "the client refused the servers {}: {}", servers_,
        make_error_code(rc).message());
  // The client's I/O thread notices a connection it was told to end only when it next wakes: a
  // request (the heartbeat, sent now) wakes it.
  send_heartbeat_after_locked(generation_, std::chrono::milliseconds::zero());
}

void SessionCore::attach(std::shared_ptr<SessionListener> listener) {
  SessionListener* added = listener.get();
  if (added->attached_self_) return;  // attached already
  added->attached_self_ = std::move(listener);
  added->previous_attached_ = last_listener_;
  added->next_attached_ = nullptr;
  (last_listener_ ? last_listener_->next_attached_ : first_listener_) = added;
  last_listener_ = added;
}

void SessionCore::detach(SessionListener* listener) {
  if (!listener->attached_self_) return;
  (listener->previous_attached_ ? listener->previous_attached_->next_attached_ : first_listener_) =
      listener->next_attached_;
  (listener->next_attached_ ? listener->next_attached_->previous_attached_ : last_listener_) =
      listener->previous_attached_;
  listener->previous_attached_ = listener->next_attached_ = nullptr;
  // Never the last reference: whoever detaches a contender is running one of its methods.
  listener->attached_self_.reset();
}

// Listeners attach and detach while being notified: iterate over a copy.
std::vector<std::shared_ptr<SessionListener>> SessionCore::snapshot_listeners_locked() const {
  std::vector<std::shared_ptr<SessionListener>> listeners;
  for (SessionListener* listener = first_listener_; listener; listener = listener->next_attached_)
    listeners.push_back(listener->attached_self_);
  return listeners;
}

template <typename Event>
Subscription SessionCore::subscribe_locked(std::vector<Listener<Event>> SessionCore::*listeners,
                                          std::function<void(Event)> callback) {
  const std::uint64_t id = next_listener_id_++;
  (this->*listeners).push_back({id, std::make_shared<std::function<void(Event)>>(std::move(callback))});
  return Subscription([self = weak_from_this(), id, listeners] {
    if (auto core = self.lock()) {
      std::lock_guard inner(core->mutex_);
      std::erase_if((*core).*listeners, [id](const Listener<Event>& l) { return l.id == id; });
    }
  });
}

Subscription SessionCore::on_state_change(std::function<void(SessionState)> listener) {
  std::lock_guard lock(mutex_);
  return subscribe_locked(&SessionCore::state_listeners_, std::move(listener));
}

Subscription SessionCore::on_deadline(std::function<void(SessionDeadline)> listener) {
  std::lock_guard lock(mutex_);
  auto subscription = subscribe_locked(&SessionCore::deadline_listeners_, std::move(listener));
  if (session_established_) {
    // The newcomer hears the current deadline at once; the others heard it already.
    post_callback([callback = deadline_listeners_.back().callback, deadline = SessionDeadline{session_id_, deadline_locked()}] {
      (*callback)(deadline);
    });
  }
  return subscription;
}

void SessionCore::announce_deadline_locked() {
  if (deadline_listeners_.empty() || !session_established_) return;
  const SessionDeadline deadline{session_id_, deadline_locked()};
  if (deadline.at == announced_deadline_) return;
  announced_deadline_ = deadline.at;
  for (const auto& listener : deadline_listeners_) {
    post_callback([callback = listener.callback, deadline] { (*callback)(deadline); });
  }
}

void SessionCore::post_to_worker(std::function<void()> task) { boost::asio::post(*worker_, std::move(task)); }

bool SessionCore::on_library_thread() const {
  const auto self = std::this_thread::get_id();
  return self == worker_thread_.get_id() || self == callback_thread_.get_id() || self == closer_thread_id_.load();
}

void SessionCore::post_callback(std::function<void()> task) {
  std::lock_guard lock(callbacks_mutex_);
  if (callbacks_stopped_) {
    // close() has drained the callback thread; the caller may hold the session mutex, so a late
    // callback (an acquisition attempted on a closed session, say) gets a thread of its own.
    std::thread([task = std::move(task)] { run_user_callback(task); }).detach();
    return;
  }
  boost::asio::post(*callbacks_, [task = std::move(task)] { run_user_callback(task); });
}

void SessionCore::run_user_callback(const std::function<void()>& callback) noexcept {
  try {
    callback();
  } catch (const std::exception& e) {
    log(LogLevel::error, "a user callback threw: {}", e.what());
  } catch (...) {
    log(LogLevel::error, "a user callback threw a non-standard exception");
  }
}

void SessionCore::close_in_background(std::shared_ptr<ZooKeeperConnection> connection) {
  if (!connection) return;
  {
    std::lock_guard lock(closer_->mutex);
    closer_->queue.push_back(std::move(connection));
    if (!closer_thread_.joinable() && !closer_->finished) {
      closer_thread_ = std::thread([closer = closer_] { closer->run(); });
      closer_thread_id_ = closer_thread_.get_id();
    }
  }
  closer_->changed.notify_all();
}

void SessionCore::Closer::run() {
  std::unique_lock lock(mutex);
  while (true) {
    changed.wait(lock, [this] { return stopping || !queue.empty(); });
    if (queue.empty()) break;  // stopping, and nothing left
    auto connection = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    connection->close();
    connection.reset();
    lock.lock();
  }
  finished = true;
  changed.notify_all();
}

bool SessionCore::wait_connected(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return state_changed_.wait_for(lock, timeout, [this] {
    return state_ == SessionState::connected || ended();
  }) && state_ == SessionState::connected;
}

ClientId SessionCore::client_id() const {
  std::lock_guard lock(mutex_);
  return connection_ ? connection_->client_id() : ClientId{};
}

std::size_t SessionCore::pending_watches() const {
  std::lock_guard lock(mutex_);
  return connection_ ? connection_->pending_watches() : 0;
}

SessionMetrics SessionCore::metrics() const {
  SessionMetrics out;
  {
    // Both counters are raised under mutex_ (a heartbeat raises both): read together here, so that
    // requests_sent - heartbeats_sent never counts a heartbeat caught between its two increments.
    std::lock_guard lock(mutex_);
    out = session_metrics_;
    out.requests_sent = requests_sent_;
    out.heartbeats_sent = heartbeats_sent_;
  }
  out.wakeups = wakeups;
  out.acquisitions = acquisitions;
  out.acquire_timeouts = acquire_timeouts;
  out.acquire_cancellations = acquire_cancellations;
  out.locks_lost = locks_lost;
  out.total_wait = std::chrono::nanoseconds(total_wait_ns.load());
  out.total_hold = std::chrono::nanoseconds(total_hold_ns.load());
  out.locks = lock_metrics_.snapshot();
  out.unlabelled_overflow = lock_metrics_.overflow();
  out.counter_writes = counter_writes;
  out.counter_conflicts = counter_conflicts;
  out.counter_unknown_outcomes = counter_unknown_outcomes;
  out.group_joins = group_joins;
  out.group_rejoins = group_rejoins;
  out.group_losses = group_losses;
  out.group_views_stale = group_views_stale;
  out.barrier_passes = barrier_passes;
  out.barrier_timeouts = barrier_timeouts;
  out.barrier_cancellations = barrier_cancellations;
  out.barrier_failures = barrier_failures;
  out.state = state();
  out.negotiated_timeout = negotiated_timeout();
  out.lead_time = lead_time();
  return out;
}

// Closing ends the session for every listener at once (holders are told, pending acquisitions
// complete with session_closed), lets those notices run, and only then closes the handle, which
// deletes our nodes on the server: holders hear before anyone else can be granted their locks.
//
// close() may be called from the session's own threads: from a loss callback, an async handler,
// even by destroying the Session there. Finishing means waiting for those very threads, so there
// it is finished on a thread of its own and close() returns at once; elsewhere it blocks until the
// handle is closed. A second caller waits for the first, except on the session's own threads.
void SessionCore::close() {
  bool was_connected = false;
  std::shared_ptr<ZooKeeperConnection> connection;
  {
    std::unique_lock lock(mutex_);
    if (close_started_) {
      if (!on_library_thread()) close_finished_changed_.wait(lock, [this] { return close_finished_; });
      return;
    }
    close_started_ = true;
    was_connected = state_ == SessionState::connected;
    connection = std::move(connection_);
  }
  end_session_for_listeners();
  if (on_library_thread()) {
    std::shared_ptr<SessionCore> self;
    try {
      self = shared_from_this();
    } catch (const std::bad_weak_ptr&) {
      // Destroyed on one of its own threads (the last reference went there): finish here, without
      // waiting for this thread.
      finish_close(was_connected, std::move(connection));
      return;
    }
    std::thread([self, was_connected, connection = std::move(connection)]() mutable {
      self->finish_close(was_connected, std::move(connection));
    }).detach();
    return;
  }
  finish_close(was_connected, std::move(connection));
}

void SessionCore::end_session_for_listeners() {
  std::vector<std::shared_ptr<SessionListener>> ending_listeners;
  {
    std::lock_guard lock(mutex_);
    if (!end_reason_) end_reason_ = make_error_code(errc::session_closed);
    ++generation_;
    if (state_ != SessionState::auth_failed) set_state_locked(SessionState::closed);
    for (const auto& listener : snapshot_listeners_locked()) listener->on_session_ended(end_reason_);
    refuse_queued_starts_locked();
    ending_listeners = snapshot_listeners_locked();
    for (const auto& listener : ending_listeners) detach(listener.get());
  }
  ending_listeners.clear();  // outside the mutex: this may run destructors
}

void SessionCore::on_tls_failure(const TlsFailure& failure) {
  std::lock_guard lock(mutex_);
  if (ended()) return;
  tls_failure_ = failure;
  last_connect_problem_ = failure.message;
  log(LogLevel::error, LogContext{session_id_.load(), {}, {}}, "connecting to {}: {}; trying again", failure.server,
      failure.message);
  if (failure.every_server_failed) state_changed_.notify_all();
}

void SessionCore::finish_close(bool was_connected, std::shared_ptr<ZooKeeperConnection> connection) {
  const bool on_callback_thread = std::this_thread::get_id() == callback_thread_.get_id();
  // Holders hear first: the loss notices posted above run before the handle is closed (bounded: a
  // user callback may block). Not on the callback thread itself, which cannot wait for itself.
  if (!on_callback_thread) {
    auto told = std::make_shared<std::promise<void>>();
    auto done = told->get_future();
    post_callback([told] { told->set_value(); });
    done.wait_for(std::chrono::seconds(5));
  }
  // Let requests already sent (a release's delete, typically) complete first: the C client
  // drops, and leaks, completions still pending when it closes. Bounded: the ensemble may be gone.
  if (was_connected) {
    std::unique_lock lock(in_flight_mutex_);
    in_flight_drained_.wait_for(lock, std::chrono::seconds(2), [this] { return in_flight_.load() == 0; });
  }
  // Closing tells the server to end the session now, which deletes our ephemeral nodes at once.
  if (connection) connection->close();
  {
    // Handles still kept open for stopping holders: the owner is closing, so they go now.
    std::lock_guard lock(mutex_);
    while (!retired_.empty()) close_retired_locked(retired_.front().generation);
  }
  const auto self = std::this_thread::get_id();
  auto join_or_detach = [self](std::thread& thread) {
    if (!thread.joinable()) return;
    if (thread.get_id() == self) thread.detach();
    else thread.join();
  };
  // Lost sessions' handles: closed on the server if that can be done soon; otherwise the closer
  // finishes on its own (the server expires those sessions anyway). Without a session ever made
  // there is nothing to end on a server: a handle to a service that only looked like ZooKeeper
  // may block its close for seconds, which a failed first connect must not wait for.
  bool had_session = false;
  {
    std::lock_guard lock(mutex_);
    had_session = session_ever_established_;
  }
  {
    std::unique_lock lock(closer_->mutex);
    closer_->stopping = true;
    if (!closer_thread_.joinable()) closer_->finished = true;  // never started: no lost session
    closer_->changed.notify_all();
    const auto patience = had_session ? std::chrono::milliseconds(5000) : std::chrono::milliseconds(100);
    if (!closer_->changed.wait_for(lock, patience, [this] { return closer_->finished; }) && closer_thread_.joinable())
      closer_thread_.detach();
  }
  join_or_detach(closer_thread_);
  // Every handle that went through the relay is closed (or given up on): its ports go now.
  std::unique_ptr<TlsRelay> relay;
  {
    std::lock_guard lock(mutex_);
    relay = std::move(tls_relay_);
  }
  relay.reset();
  // Every contender has been told; timers still pending (heartbeat, deadline, acquisition
  // timeouts, reconnection) have nothing left to do.
  boost::asio::post(*worker_, [worker = worker_] { worker->stop(); });
  worker_guard_.reset();
  join_or_detach(worker_thread_);
  {
    // Whatever was posted before this runs before the callback thread ends; anything later runs
    // apart (see post_callback).
    std::lock_guard lock(callbacks_mutex_);
    callbacks_stopped_ = true;
  }
  callbacks_guard_.reset();
  join_or_detach(callback_thread_);
  std::lock_guard lock(mutex_);
  close_finished_ = true;
  close_finished_changed_.notify_all();
}

}  // namespace zkr::detail
