// Who leads, pushed to a callback: one children watch on the election path, a read of the first
// node's data when the first node changed, and a read again whenever the session (re)connects.
#include <zkr/leader_watch.hpp>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <boost/asio/steady_timer.hpp>

#include <zkr/error.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "without_exceptions.hpp"

namespace zkr {

struct LeaderWatch::State final : detail::SessionListener, std::enable_shared_from_this<State> {
  State(std::shared_ptr<detail::SessionCore> session_core, std::string watched, Callback on_change)
      : core(std::move(session_core)), path(std::move(watched)), callback(std::move(on_change)) {}

  // ---- reading (under core->mutex()) ----

  // Lists the children. Every listing supersedes the earlier ones: their replies and their leader
  // reads are stale from here on. One children watch at a time: the client keeps it across
  // connection drops (it sends it again on reconnection, and the server fires it for a change
  // made meanwhile), so a listing sets one only while none is set or being set.
  void refresh_locked() {
    if (stopped) return;
    const std::uint64_t generation = core->generation_locked();
    if (!core->usable_locked(generation)) return;  // on_reconnected / on_new_session read again
    const std::uint64_t listing = ++listings;
    std::weak_ptr<State> weak = weak_from_this();
    detail::NodeWatch watch;
    if (watching == 0) {
      watching = listing;
      watch = [weak, listing](NodeEvent) {
        auto self = weak.lock();
        if (!self) return;
        std::lock_guard lock(self->core->mutex());
        if (listing != self->watching) return;  // an earlier session's
        self->watching = 0;
        self->refresh_locked();
      };
    }
    core->get_children(
        generation, path,
        [weak, listing, generation](zk_errc rc, std::vector<std::string> children, NodeStat) {
          if (auto self = weak.lock()) self->on_children(listing, generation, rc, std::move(children));
        },
        std::move(watch));
  }

  void on_children(std::uint64_t listing, std::uint64_t generation, zk_errc rc, std::vector<std::string> children) {
    std::lock_guard lock(core->mutex());
    if (listing == watching && rc != zk_errc::ok) {
      // The client sets a listing's watch only with its reply: there is none. A later listing
      // that counted on this one's watch lists again (with one).
      watching = 0;
      if (listing != listings) return refresh_locked();
    }
    if (stopped || listing != listings) return;
    if (rc == zk_errc::no_node) {
      report_locked(std::nullopt);
      retry_later_locked();
      return;
    }
    if (rc != zk_errc::ok) return fail_locked(rc);
    std::vector<ContenderName> queue;
    for (const auto& child : children)
      if (auto name = parse_contender_name(child)) queue.push_back(std::move(*name));
    if (queue.empty()) return report_locked(std::nullopt);
    sort_by_sequence(queue);
    const std::string first = queue.front().name;
    if (last_node && *last_node == first) return;  // the same leader: nothing to tell
    std::weak_ptr<State> weak = weak_from_this();
    core->get_data(generation, path + "/" + first,
                   [weak, listing, first](zk_errc data_rc, std::string data, detail::NodeStat stat) {
                     auto self = weak.lock();
                     if (!self) return;
                     std::lock_guard inner(self->core->mutex());
                     if (self->stopped || listing != self->listings) return;
                     if (data_rc == zk_errc::no_node) return self->refresh_locked();  // gone already: look again
                     if (data_rc != zk_errc::ok) return self->fail_locked(data_rc);
                     self->report_locked(Participant{first, std::move(data), FencingToken(stat.czxid),
                                                     stat.ephemeral_owner, true});
                   });
  }

  // Connection trouble waits for the session's next connection (on_reconnected / on_new_session
  // read again); anything else (no_auth on the path) stops the watch.
  void fail_locked(zk_errc rc) {
    if (is_connection_trouble(rc) || is_session_ended(rc)) return;
    stop_locked(make_error_code(rc));
  }

  void retry_later_locked() {
    std::weak_ptr<State> weak = weak_from_this();
    const std::uint64_t listing = listings;
    // Timers belong to the worker thread.
    core->post_to_worker([weak, listing] {
      auto self = weak.lock();
      if (!self) return;
      if (!self->retry_timer) self->retry_timer = std::make_unique<boost::asio::steady_timer>(self->core->worker());
      self->retry_timer->expires_after(detail::kMissingPathRetry);
      self->retry_timer->async_wait([weak, listing](boost::system::error_code ec) {
        auto again = weak.lock();
        if (ec || !again) return;
        std::lock_guard lock(again->core->mutex());
        if (listing == again->listings) again->refresh_locked();
      });
    });
  }

  // Tells the callback, in order, on the callback thread, unless this is the leader told last.
  void report_locked(std::optional<Participant> leader) {
    const std::string node = leader ? leader->node : std::string();
    if (last_node && *last_node == node) return;
    last_node = node;
    core->post_callback([weak = weak_from_this(), leader = std::move(leader)] {
      if (auto self = weak.lock()) self->deliver(leader);
    });
  }

  void stop_locked(std::error_code why) {
    if (stopped) return;
    stopped = true;
    failure = why;
    ++listings;  // every reply and watch in flight is stale
    core->post_to_worker([weak = weak_from_this()] {
      if (auto self = weak.lock(); self && self->retry_timer) self->retry_timer->cancel();
    });
    core->detach(this);
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_reconnected(std::uint64_t) override { refresh_locked(); }  // the watch set stays set
  void on_new_session(std::uint64_t) override {
    watching = 0;  // the lost session's watches went with its handle
    refresh_locked();
  }
  void on_session_lost(std::uint64_t, LossReason) override {}  // the replacement reads again
  void on_session_ended(std::error_code why) override { stop_locked(why ? why : make_error_code(errc::session_closed)); }

  // ---- calling back (callback thread) ----

  void deliver(const std::optional<Participant>& leader) {
    {
      std::lock_guard guard(delivery_mutex);
      if (delivery_stopped) return;
      told = leader;
      delivering_on = std::this_thread::get_id();
    }
    detail::SessionCore::run_user_callback([&] { callback(leader); });
    std::lock_guard guard(delivery_mutex);
    delivering_on = {};
    delivered.notify_all();
  }

  // No call starts after this returns; one running on another thread has returned by then.
  void stop_deliveries() {
    std::unique_lock guard(delivery_mutex);
    delivery_stopped = true;
    if (delivering_on == std::this_thread::get_id()) return;  // stopped from the callback itself
    delivered.wait(guard, [&] { return delivering_on == std::thread::id(); });
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const Callback callback;

  // Under core->mutex().
  bool stopped = false;
  std::error_code failure;
  std::uint64_t listings = 0;
  std::uint64_t watching = 0;  // the listing whose children watch is set or being set; 0: none
  std::optional<std::string> last_node;  // the leader's node as last reported ("" for nobody)
  std::unique_ptr<boost::asio::steady_timer> retry_timer;  // the worker thread's

  // Under delivery_mutex.
  std::mutex delivery_mutex;
  std::condition_variable delivered;
  bool delivery_stopped = false;
  std::thread::id delivering_on;
  std::optional<Participant> told;
};

LeaderWatch::LeaderWatch(Session& session, std::string path, Callback callback) {
  if (auto problem = path_problem(path); !problem.empty())
    throw Error(make_error_code(errc::invalid_path), "watch leader of", path, problem);
  if (!callback) throw Error(make_error_code(errc::invalid_argument), "watch leader of", path, "the callback is empty");
  state_ = std::make_shared<State>(detail::Internals::core(session), std::move(path), std::move(callback));
  std::lock_guard lock(state_->core->mutex());
  if (state_->core->ended()) {
    state_->stopped = true;
    state_->failure = make_error_code(errc::session_closed);
    return;
  }
  state_->core->attach(state_);
  state_->refresh_locked();
}

std::optional<LeaderWatch> LeaderWatch::make(Session& session, std::string path, Callback callback,
                                             std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<LeaderWatch>(std::in_place, session, std::move(path), std::move(callback)); });
}

LeaderWatch::~LeaderWatch() { stop(); }

const std::string& LeaderWatch::path() const { return state_->path; }

std::optional<Participant> LeaderWatch::leader() const {
  std::lock_guard guard(state_->delivery_mutex);
  return state_->told;
}

std::error_code LeaderWatch::error() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->failure;
}

void LeaderWatch::stop() {
  {
    std::lock_guard lock(state_->core->mutex());
    state_->stop_locked({});
  }
  state_->stop_deliveries();
}

}  // namespace zkr
