// SPDX-License-Identifier: Apache-2.0
// Who leads, pushed to a callback: one children watch on the election path, a read of the first
// node's data when the first node changed, and a read again whenever the session (re)connects.
#include <zkr/leader_watch.hpp>

#include <algorithm>
#include <mutex>

#include <zkr/error.hpp>

#include "callback_gate.hpp"
#include "completion.hpp"
#include "internals.hpp"
#include "session_core.hpp"
#include "watched_read.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"

namespace zkr {

struct LeaderWatch::State final : detail::SessionListener, std::enable_shared_from_this<State> {
  State(std::shared_ptr<detail::SessionCore> session_core, std::string watched, Callback on_change)
      : core(std::move(session_core)), path(std::move(watched)), callback(std::move(on_change)) {}

  // ---- reading (under core->mutex()) ----

  // Lists the children, with the children watch that lists them again (see WatchedRead).
  void refresh_locked() {
    if (!stopped) listing.list_children_locked(*this, path);
  }

  // The latest listing's reply.
  void on_children_locked(std::uint64_t generation, zk_errc rc, std::vector<std::string> children) {
    if (stopped) return;
    if (rc == zk_errc::no_node) {
      report_locked(std::nullopt);
      listing.retry_later_locked(*this, detail::kMissingPathRetry);
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
    // Its reply is stale once another listing went out.
    auto leader_read = [latest = listing.latest_locked(), first](const std::shared_ptr<State>& self, zk_errc data_rc,
                                                                 std::string data, NodeStat stat) {
      if (self->stopped || latest != self->listing.latest_locked()) return;
      if (data_rc == zk_errc::no_node) return self->refresh_locked();  // gone already: look again
      if (data_rc != zk_errc::ok) return self->fail_locked(data_rc);
      self->report_locked(Participant{first, std::move(data), FencingToken(stat.czxid), stat.ephemeral_owner, true});
    };
    core->get_data(generation, path + "/" + first, detail::when_alive_locked(weak_from_this(), leader_read));
  }

  // Connection trouble waits for the session's next connection (on_reconnected / on_new_session
  // read again); anything else (no_auth on the path) stops the watch.
  void fail_locked(zk_errc rc) {
    if (is_connection_trouble(rc) || is_session_ended(rc)) return;
    stop_locked(make_error_code(rc));
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
    listing.stop_locked(*this);
    core->detach(this);
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_reconnected(std::uint64_t) override { refresh_locked(); }  // the watch set stays set
  void on_new_session(std::uint64_t) override {
    listing.forget_watch_locked();
    refresh_locked();
  }
  void on_session_lost(std::uint64_t, LossReason) override {}  // the replacement reads again
  void on_session_ended(std::error_code why) override { stop_locked(why ? why : make_error_code(errc::session_closed)); }

  // ---- calling back (callback thread) ----

  void deliver(const std::optional<Participant>& leader) {
    gate.run([&] {
      {
        std::lock_guard guard(told_mutex);
        told = leader;
      }
      callback(leader);
    });
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const Callback callback;

  // Under core->mutex().
  bool stopped = false;
  std::error_code failure;
  detail::WatchedRead listing;
  std::optional<std::string> last_node;  // the leader's node as last reported ("" for nobody)

  detail::CallbackGate gate;
  std::mutex told_mutex;
  std::optional<Participant> told;  // under told_mutex
};

LeaderWatch::LeaderWatch(Session& session, std::string path, Callback callback) {
  detail::require_valid_path(path, "watch leader of");
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
  std::lock_guard guard(state_->told_mutex);
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
  state_->gate.stop();
}

}  // namespace zkr
