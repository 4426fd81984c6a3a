#include "session_core.hpp"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#include "log.hpp"

namespace zkr::detail {
namespace {

constexpr int kInvalidState = static_cast<int>(zk_errc::invalid_state);

// True if a result code proves that the server received and answered the request.
bool server_answered(int rc) {
  switch (static_cast<zk_errc>(rc)) {
    case zk_errc::connection_loss:
    case zk_errc::operation_timeout:
    case zk_errc::invalid_state:
    case zk_errc::session_expired:
    case zk_errc::closing:
    case zk_errc::auth_failed:
    case zk_errc::session_moved:
    case zk_errc::marshalling_error:
    case zk_errc::system_error:
    case zk_errc::runtime_inconsistency:
      return false;
    default:
      return rc == 0 || rc <= static_cast<int>(zk_errc::api_error);
  }
}

}  // namespace

SessionCore::SessionCore(SessionOptions options, ConnectionFactory factory)
    : options_(std::move(options)),
      connection_factory_(std::move(factory)),
      worker_guard_(boost::asio::make_work_guard(worker_)),
      callbacks_guard_(boost::asio::make_work_guard(callbacks_)),
      deadline_timer_(worker_),
      heartbeat_timer_(worker_) {
  worker_thread_ = std::thread([this] { worker_.run(); });
  callback_thread_ = std::thread([this] { callbacks_.run(); });
}

SessionCore::~SessionCore() { close(); }

std::chrono::milliseconds SessionCore::margin_for(std::chrono::milliseconds timeout) const {
  auto margin = options_.safety_margin > std::chrono::milliseconds::zero() ? options_.safety_margin : timeout / 4;
  return std::min(margin, timeout * 2 / 3);
}

std::chrono::milliseconds SessionCore::lead_time() const {
  auto timeout = negotiated_timeout();
  return margin_for(timeout > std::chrono::milliseconds::zero() ? timeout : options_.session_timeout);
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

  std::unique_lock lock(mutex_);
  open_connection_locked();
  bool settled = state_changed_.wait_for(lock, options_.connect_timeout, [this] {
    auto state = state_.load();
    return state == SessionState::connected || state == SessionState::auth_failed ||
           state == SessionState::closed;
  });
  SessionState outcome = state_.load();
  lock.unlock();
  if (settled && outcome == SessionState::connected) return;
  close();
  if (outcome == SessionState::auth_failed)
    throw Error(make_error_code(errc::auth_failed), "connect to", options_.servers,
                "the ensemble refused the digest credentials");
  throw Error(make_error_code(errc::connect_timeout), "connect to", options_.servers,
              fmt::format("no session within {} ms", options_.connect_timeout.count()));
}

void SessionCore::open_connection_locked() {
  ++generation_;
  session_established_ = false;
  session_id_ = 0;
  // Until the first reply, the server can have heard from us no earlier than now.
  last_acknowledged_send_ = Clock::now();
  std::weak_ptr<SessionCore> self = weak_from_this();
  const std::uint64_t generation = generation_;
  std::error_code ec;
  connection_ = connection_factory_(
      options_.servers, options_.session_timeout,
      [self, generation](ConnectionEvent event) {
        if (auto core = self.lock()) core->on_connection_event(generation, event);
      },
      ec);
  if (!connection_) {
    log(LogLevel::error, "zookeeper_init failed for {}: {}", options_.servers, ec.message());
    return;
  }
  if (options_.credentials) {
    std::string user_password = options_.credentials->user + ":" + options_.credentials->password;
    connection_->add_digest_auth(user_password, [](int rc) {
      if (rc != 0) log(LogLevel::warning, "digest authentication failed: {}", zookeeper_error(rc).message());
    });
  }
  set_state_locked(SessionState::connecting);
}

void SessionCore::set_state_locked(SessionState state) {
  if (state_.load() == state) return;
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
      negotiated_timeout_ = connection_->negotiated_timeout();
      session_id_ = connection_->session_id();
      const bool resumed = session_established_;
      if (!resumed) {
        session_established_ = true;
        ++session_metrics_.sessions_established;
      }
      set_state_locked(SessionState::connected);
      for (const auto& listener : snapshot_listeners_locked()) {
        if (resumed) listener->on_reconnected(generation);
        else listener->on_new_session(generation);
      }
      log(LogLevel::info, "session 0x{:x} {} (timeout {} ms)", session_id_.load(),
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
        declare_lost_locked(LossReason::connection_lost, lock);
      } else {
        set_state_locked(SessionState::suspended);
      }
      break;
    case ConnectionEvent::expired:
      if (!session_established_) break;
      ++session_metrics_.losses_by_expiry;
      declare_lost_locked(LossReason::session_lost, lock);
      break;
    case ConnectionEvent::auth_failed: {
      end_reason_ = make_error_code(errc::auth_failed);
      set_state_locked(SessionState::auth_failed);
      auto connection = std::move(connection_);
      ++generation_;
      for (const auto& listener : snapshot_listeners_locked()) listener->on_session_ended(end_reason_);
      close_in_background(std::move(connection));
      break;
    }
    case ConnectionEvent::closed:
      break;
  }
}

// A lost session is never resumed: its handle is closed (which also deletes its ephemeral nodes
// if the server can still be reached) and a fresh session replaces it.
void SessionCore::declare_lost_locked(LossReason reason, std::unique_lock<std::mutex>&) {
  if (!session_established_) return;
  ++session_metrics_.sessions_lost;
  const std::uint64_t lost_generation = generation_;
  log(LogLevel::warning, "session 0x{:x} lost ({})", session_id_.load(), to_string(reason));
  set_state_locked(SessionState::lost);
  for (const auto& listener : snapshot_listeners_locked()) listener->on_session_lost(lost_generation, reason);
  close_in_background(std::move(connection_));
  open_connection_locked();
}

Clock::time_point SessionCore::deadline_locked() const {
  auto timeout = negotiated_timeout_.load();
  return last_acknowledged_send_ + timeout - margin_for(timeout);
}

void SessionCore::schedule_deadline_check_locked() {
  const std::uint64_t generation = generation_;
  post_to_worker([self = weak_from_this(), generation] {
    auto core = self.lock();
    if (!core) return;
    std::unique_lock lock(core->mutex_);
    if (generation != core->generation_) return;
    core->deadline_timer_.expires_at(core->deadline_locked());
    core->deadline_timer_.async_wait([self, generation](boost::system::error_code ec) {
      if (ec) return;
      if (auto again = self.lock()) again->on_deadline_timer(generation);
    });
  });
}

void SessionCore::on_deadline_timer(std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (generation != generation_) return;
  if (state_ != SessionState::connected && state_ != SessionState::suspended) return;
  const auto deadline = deadline_locked();
  if (Clock::now() >= deadline) {
    ++session_metrics_.losses_by_deadline;
    declare_lost_locked(LossReason::session_lost, lock);
    return;
  }
  deadline_timer_.expires_at(deadline);
  deadline_timer_.async_wait([self = weak_from_this(), generation](boost::system::error_code ec) {
    if (ec) return;
    if (auto core = self.lock()) core->on_deadline_timer(generation);
  });
}

void SessionCore::send_heartbeat(std::uint64_t generation) {
  std::unique_lock lock(mutex_);
  if (generation != generation_ || ended()) return;
  if (state_ == SessionState::connected) {
    ++heartbeats_sent_;
    exists(generation, "/", [](int, NodeStat) {});
  }
  auto interval = std::max(negotiated_timeout_.load() / 6, std::chrono::milliseconds(20));
  heartbeat_timer_.expires_after(interval);
  heartbeat_timer_.async_wait([self = weak_from_this(), generation](boost::system::error_code ec) {
    if (ec) return;
    if (auto core = self.lock()) core->send_heartbeat(generation);
  });
}

void SessionCore::note_answered(std::uint64_t generation, Clock::time_point sent) {
  std::lock_guard lock(mutex_);
  if (generation == generation_) last_acknowledged_send_ = std::max(last_acknowledged_send_, sent);
}

template <typename Callback, typename Issue, typename... FailArgs>
void SessionCore::issue(std::uint64_t generation, Callback done, Issue issue_request, FailArgs... fail_args) {
  auto shared_done = std::make_shared<Callback>(std::move(done));
  auto fail_later = [this, shared_done, fail_args...](int rc) {
    post_to_worker([shared_done, rc, fail_args...] { (*shared_done)(rc, fail_args...); });
  };
  if (generation != generation_ || !connection_) {
    fail_later(kInvalidState);
    return;
  }
  ++requests_sent_;
  ++in_flight_;
  const auto sent = Clock::now();
  Callback wrapped = [self = weak_from_this(), generation, sent, shared_done](int rc, auto... results) {
    auto core = self.lock();
    if (core && server_answered(rc)) core->note_answered(generation, sent);
    (*shared_done)(rc, std::move(results)...);
    if (core) core->request_finished();
  };
  if (int rc = issue_request(*connection_, std::move(wrapped)); rc != 0) {
    request_finished();
    fail_later(rc);
  }
}

void SessionCore::create(std::uint64_t generation, const std::string& path, const std::string& data,
                         CreateMode mode, NodeAcl acl, CreateCallback done) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, CreateCallback cb) { return c.create(path, data, mode, acl, std::move(cb)); },
      std::string(), NodeStat{});
}

void SessionCore::get_children(std::uint64_t generation, const std::string& path, ChildrenCallback done,
                               NodeWatch watch) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, ChildrenCallback cb) { return c.get_children(path, std::move(cb), std::move(watch)); },
      std::vector<std::string>());
}

void SessionCore::get_data(std::uint64_t generation, const std::string& path, DataCallback done, NodeWatch watch) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, DataCallback cb) { return c.get_data(path, std::move(cb), std::move(watch)); },
      std::string(), NodeStat{});
}

void SessionCore::exists(std::uint64_t generation, const std::string& path, StatCallback done) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, StatCallback cb) { return c.exists(path, std::move(cb)); }, NodeStat{});
}

void SessionCore::set_data(std::uint64_t generation, const std::string& path, const std::string& data, int version,
                           StatCallback done) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, StatCallback cb) { return c.set_data(path, data, version, std::move(cb)); },
      NodeStat{});
}

void SessionCore::remove(std::uint64_t generation, const std::string& path, int version, ResultCallback done) {
  issue(
      generation, std::move(done),
      [&](ZooKeeperConnection& c, ResultCallback cb) { return c.remove(path, version, std::move(cb)); });
}

void SessionCore::request_finished() {
  if (--in_flight_ == 0) {
    std::lock_guard lock(in_flight_mutex_);
    in_flight_drained_.notify_all();
  }
}

void SessionCore::attach(std::shared_ptr<SessionListener> listener) { listeners_.push_back(std::move(listener)); }

void SessionCore::detach(SessionListener* listener) {
  auto it = std::find_if(listeners_.begin(), listeners_.end(),
                         [listener](const auto& l) { return l.get() == listener; });
  // Never the last reference: whoever detaches a contender is running one of its methods.
  if (it != listeners_.end()) listeners_.erase(it);
}

// Listeners attach and detach while being notified: iterate over a copy.
std::vector<std::shared_ptr<SessionListener>> SessionCore::snapshot_listeners_locked() const {
  return listeners_;
}

Subscription SessionCore::on_state_change(std::function<void(SessionState)> listener) {
  std::lock_guard lock(mutex_);
  const std::uint64_t id = next_listener_id_++;
  state_listeners_.push_back({id, std::make_shared<std::function<void(SessionState)>>(std::move(listener))});
  return Subscription([self = weak_from_this(), id] {
    if (auto core = self.lock()) {
      std::lock_guard inner(core->mutex_);
      std::erase_if(core->state_listeners_, [id](const StateListener& l) { return l.id == id; });
    }
  });
}

void SessionCore::post_to_worker(std::function<void()> task) { boost::asio::post(worker_, std::move(task)); }

void SessionCore::post_callback(std::function<void()> task) {
  std::lock_guard lock(callbacks_mutex_);
  if (callbacks_stopped_) {
    // close() has drained the callback thread; the caller may hold the session mutex, so a late
    // callback (an acquisition attempted on a closed session, say) gets a thread of its own.
    std::thread([task = std::move(task)] { run_user_callback(task); }).detach();
    return;
  }
  boost::asio::post(callbacks_, [task = std::move(task)] { run_user_callback(task); });
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
  std::lock_guard lock(closers_mutex_);
  closers_.emplace_back([connection = std::move(connection)] { connection->close(); });
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

SessionMetrics SessionCore::metrics() const {
  SessionMetrics out;
  {
    std::lock_guard lock(mutex_);
    out = session_metrics_;
  }
  out.requests_sent = requests_sent_;
  out.heartbeats_sent = heartbeats_sent_;
  out.wakeups = wakeups;
  out.acquisitions = acquisitions;
  out.acquire_timeouts = acquire_timeouts;
  out.acquire_cancellations = acquire_cancellations;
  out.locks_lost = locks_lost;
  out.total_wait = std::chrono::nanoseconds(total_wait_ns.load());
  out.total_hold = std::chrono::nanoseconds(total_hold_ns.load());
  return out;
}

void SessionCore::close() {
  std::call_once(close_once_, [this] {
    std::shared_ptr<ZooKeeperConnection> connection;
    std::vector<std::shared_ptr<SessionListener>> ending_listeners;
    bool was_connected = false;
    {
      std::lock_guard lock(mutex_);
      was_connected = state_ == SessionState::connected;
      if (!end_reason_) end_reason_ = make_error_code(errc::session_closed);
      connection = std::move(connection_);
      ++generation_;
      if (state_ != SessionState::auth_failed) set_state_locked(SessionState::closed);
      for (const auto& listener : snapshot_listeners_locked()) listener->on_session_ended(end_reason_);
      ending_listeners = std::move(listeners_);
      listeners_.clear();
    }
    ending_listeners.clear();  // outside the mutex: this may run destructors
    // Let requests already sent (a release's delete, typically) complete first: the C client
    // drops, and leaks, completions still pending when it closes. Bounded: the ensemble may be gone.
    if (was_connected) {
      std::unique_lock lock(in_flight_mutex_);
      in_flight_drained_.wait_for(lock, std::chrono::seconds(2), [this] { return in_flight_.load() == 0; });
    }
    // Closing tells the server to end the session now, which deletes our ephemeral nodes at once.
    if (connection) connection->close();
    {
      std::lock_guard lock(closers_mutex_);
      for (auto& closer : closers_) closer.join();
      closers_.clear();
    }
    // Every contender has been told; timers still pending (heartbeat, deadline, acquisition
    // timeouts) have nothing left to do.
    boost::asio::post(worker_, [this] {
      deadline_timer_.cancel();
      heartbeat_timer_.cancel();
      worker_.stop();
    });
    worker_guard_.reset();
    worker_thread_.join();
    // Run the loss callbacks already queued, then stop. close() may be called by user code on the
    // callback thread: it must not join itself.
    {
      // Whatever was posted before this runs before the thread ends; anything later runs apart.
      std::lock_guard lock(callbacks_mutex_);
      callbacks_stopped_ = true;
    }
    callbacks_guard_.reset();
    if (callback_thread_.get_id() == std::this_thread::get_id()) {
      callbacks_.stop();
      callback_thread_.detach();
    } else {
      callback_thread_.join();
    }
  });
}

}  // namespace zkr::detail
