// SPDX-License-Identifier: Apache-2.0
// Group membership: a member's ephemeral node kept across session losses, and a view of the
// group kept by one children watch.
#include <zkr/group.hpp>

#include <algorithm>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include <boost/asio/steady_timer.hpp>

#include <zkr/names.hpp>

#include "callback_gate.hpp"
#include "completion.hpp"
#include "internals.hpp"
#include "node_steps.hpp"
#include "session_core.hpp"
#include "watched_read.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"
#include "request_limits.hpp"

namespace zkr {
namespace {


// A node of our id owned by another session is looked at again this often, for one session timeout.
constexpr auto kTakenRetry = std::chrono::milliseconds(250);

constexpr std::string_view kPartySuffix = "__party__";

// Runs `task` on the worker thread after `delay`, unless `self` is gone by then.
template <typename Self, typename Task>
void after(const std::shared_ptr<detail::SessionCore>& core, std::weak_ptr<Self> self, std::chrono::milliseconds delay,
           Task task) {
  core->post_to_worker([core, self, delay, task] {
    auto timer = std::make_shared<boost::asio::steady_timer>(core->worker(), delay);
    timer->async_wait([timer, self, task](boost::system::error_code ec) {
      if (ec) return;
      if (auto alive = self.lock()) task(*alive);
    });
  });
}

std::string data_problem(GroupLayout layout) {
  return std::string("a member has no data of its own in the ") + std::string(to_string(layout)) +
         " layout (its node carries the member id)";
}

std::string id_problem(GroupLayout layout, std::string_view id, std::string_view data) {
  if (layout != GroupLayout::curator && !data.empty())
    return data_problem(layout);
  if (layout == GroupLayout::kazoo_party) return {};
  if (id.empty()) return "the member id is empty";
  if (id.find('/') != std::string_view::npos) return "the member id contains '/'";
  if (layout == GroupLayout::curator && (id == "." || id == "..")) return "the member id is '.' or '..'";
  return {};
}

// A member's create must fit the server's request limit (src/request_limits.hpp): its node's path
// (which the member id names in the curator and shallow layouts) and its data (the member's, or the
// id in kazoo's layouts). Empty if it fits, else the problem.
std::string size_problem(GroupLayout layout, std::string_view path, std::string_view id, std::string_view data) {
  switch (layout) {
    case GroupLayout::curator:
      if (auto problem = detail::request_size_problem(path.size() + 1 + id.size(), data.size()); !problem.empty())
        return "member data (in the node named by the member id): " + problem;
      return {};
    case GroupLayout::kazoo_party:
      if (auto problem = detail::request_size_problem(path.size(), id.size()); !problem.empty())
        return "member id (the node's data): " + problem;
      return {};
    case GroupLayout::kazoo_shallow_party:
      // "<32 hex>-<id>", and the id again as data.
      if (auto problem = detail::request_size_problem(path.size() + 34 + id.size(), id.size()); !problem.empty())
        return "member id (in the node's name and its data): " + problem;
      return {};
  }
  return {};
}

}  // namespace

std::string_view to_string(GroupLayout layout) noexcept {
  switch (layout) {
    case GroupLayout::curator: return "curator";
    case GroupLayout::kazoo_party: return "kazoo_party";
    case GroupLayout::kazoo_shallow_party: return "kazoo_shallow_party";
  }
  return "unknown";
}

std::string_view to_string(MembershipState state) noexcept {
  switch (state) {
    case MembershipState::left: return "left";
    case MembershipState::joining: return "joining";
    case MembershipState::joined: return "joined";
    case MembershipState::lost: return "lost";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------------------
// GroupMember

struct GroupMember::State final : detail::SessionListener, std::enable_shared_from_this<State> {
  State(std::shared_ptr<detail::SessionCore> session_core, std::string group, std::string member, std::string payload,
        GroupMemberOptions member_options, MembershipListener on_event)
      : core(std::move(session_core)),
        path(std::move(group)),
        id(std::move(member)),
        data(std::move(payload)),
        options(member_options),
        listener(std::move(on_event)) {}

  // ---- joining (under core->mutex()) ----

  void join_locked() {
    if (ended) return;
    if (!wanted) failure.clear();
    wanted = true;
    if (state == MembershipState::joined) return;
    if (state != MembershipState::joining) set_state_locked(MembershipState::joining, {});
    create_locked();
  }

  std::string node_name_locked(std::uint64_t generation) {
    switch (options.layout) {
      case GroupLayout::curator: return id;
      case GroupLayout::kazoo_party:
        // A name per session: a node of the lost session can never be taken for ours.
        if (name_generation != generation) guid = detail::new_hex_guid(), name_generation = generation;
        return guid + std::string(kPartySuffix);
      case GroupLayout::kazoo_shallow_party:
        if (name_generation != generation) guid = detail::new_hex_guid(), name_generation = generation;
        return guid + "-" + id;
    }
    return id;
  }

  void create_locked() {
    const std::uint64_t generation = core->generation_locked();
    if (creating || !wanted || state == MembershipState::joined || !core->usable_locked(generation)) return;
    creating = true;
    const std::uint64_t attempt = ++attempts;
    node_path = path + "/" + node_name_locked(generation);
    const std::string payload = options.layout == GroupLayout::curator ? data : id;
    std::weak_ptr<State> weak = weak_from_this();
    detail::create_with_parents(core, generation, node_path, payload, CreateMode::ephemeral, options.acl,
                                [weak, attempt, generation](zk_errc rc, std::string, NodeStat) {
                                  if (auto self = weak.lock()) self->on_created(attempt, generation, rc);
                                });
  }

  void on_created(std::uint64_t attempt, std::uint64_t generation, zk_errc rc) {
    std::lock_guard lock(core->mutex());
    // A create that met connection trouble may have taken effect all the same.
    if (is_connection_trouble(rc) && core->generation_locked() == generation) {
      doubtful_create = node_path;
      doubtful_generation = generation;
    }
    if (attempt != attempts) {
      // Left (or superseded) meanwhile: a node that was made anyway goes, and one that may have been.
      if (rc == zk_errc::ok && !wanted && core->usable_locked(generation)) remove_locked(generation, node_path);
      if (!wanted) remove_doubtful_locked();
      return;
    }
    creating = false;
    if (rc == zk_errc::ok) return joined_locked(generation);
    if (rc == zk_errc::node_exists) return check_owner_locked(generation);
    // Connection trouble: on_reconnected / on_new_session try again, or now if that came first.
    if (is_connection_trouble(rc) || is_session_ended(rc)) return create_locked();
    fail_locked(make_error_code(rc));
  }

  // Our node already exists: ours if our own create took effect before its reply was lost (the
  // same session owns it); another session's otherwise, which we wait out for a session timeout.
  void check_owner_locked(std::uint64_t generation) {
    creating = true;
    const std::uint64_t attempt = ++attempts;
    std::weak_ptr<State> weak = weak_from_this();
    auto checked = [weak, attempt, generation](const auto& self, zk_errc rc, NodeStat stat) {
      if (attempt != self->attempts) return;
      self->creating = false;
      if (rc == zk_errc::no_node) return self->create_locked();  // gone meanwhile: try again
      if (rc != zk_errc::ok) {
        if (is_connection_trouble(rc) || is_session_ended(rc)) return self->create_locked();  // if usable
        return self->fail_locked(make_error_code(rc));
      }
      if (stat.ephemeral_owner == self->core->session_id() && self->core->usable_locked(generation))
        return self->joined_locked(generation);
      if (self->own_sessions.contains(stat.ephemeral_owner)) {
        // Our own node of a session this Session lost, which the server has not expired yet (after
        // a server restart it gives every session a fresh timeout): the same member, so it goes.
        self->creating = true;
        self->core->remove(generation, self->node_path, stat.version,
                           detail::when_alive_locked(weak, [attempt](const auto& again, zk_errc) {
                             if (attempt != again->attempts) return;
                             again->creating = false;
                             again->create_locked();
                           }));
        return;
      }
      const auto now = std::chrono::steady_clock::now();
      if (!self->taken_since) self->taken_since = now;
      if (now - *self->taken_since > self->core->negotiated_timeout())
        return self->fail_locked(make_error_code(zk_errc::node_exists));
      after(self->core, weak, kTakenRetry, [](State& again) {
        std::lock_guard inner(again.core->mutex());
        again.create_locked();
      });
    };
    core->exists(generation, node_path, detail::when_alive_locked(weak, checked));
  }

  void joined_locked(std::uint64_t generation) {
    taken_since.reset();
    doubtful_create.clear();  // the node is ours, and known
    own_sessions.insert(core->session_id());
    joined_generation = generation;
    set_state_locked(MembershipState::joined, {});
    watch_node_locked(generation);
  }

  // A data watch on our node: it tells of its deletion by someone else (an operator).
  void watch_node_locked(std::uint64_t generation) {
    std::weak_ptr<State> weak = weak_from_this();
    const std::string watched = node_path;
    core->get_data(
        generation, watched,
        [weak, generation, watched](zk_errc rc, std::string, NodeStat) {
          auto self = weak.lock();
          if (!self || rc != zk_errc::no_node) return;
          std::lock_guard lock(self->core->mutex());
          self->on_node_gone_locked(generation, watched);
        },
        [weak, generation, watched](NodeEvent event) {
          auto self = weak.lock();
          if (!self) return;
          std::lock_guard lock(self->core->mutex());
          if (event == NodeEvent::deleted) return self->on_node_gone_locked(generation, watched);
          if (event == NodeEvent::changed && self->state == MembershipState::joined &&
              self->joined_generation == generation && self->node_path == watched)
            self->watch_node_locked(generation);  // our own set_data: keep watching
        });
  }

  void on_node_gone_locked(std::uint64_t generation, const std::string& watched) {
    if (state != MembershipState::joined || joined_generation != generation || node_path != watched) return;
    lost_locked(LossReason::node_deleted);
    if (wanted) create_locked();
  }

  void lost_locked(LossReason reason) {
    set_state_locked(MembershipState::lost, reason);
    if (!options.rejoin) wanted = false;
  }

  void fail_locked(std::error_code why) {
    wanted = false;
    failure = why;
    taken_since.reset();
    set_state_locked(MembershipState::left, LossReason::session_lost, why);
  }

  // ---- leaving (under core->mutex()) ----

  void leave_locked() {
    const bool was_member = wanted || state == MembershipState::joined;
    wanted = false;
    ++attempts;  // a create in flight is no longer wanted
    creating = false;
    taken_since.reset();
    if (state == MembershipState::joined && joined_generation == core->generation_locked())
      remove_locked(joined_generation, node_path);
    remove_doubtful_locked();
    if (was_member || state != MembershipState::left) set_state_locked(MembershipState::left, LossReason::session_closed);
  }

  // A create of ours whose reply was lost (doubtful_create) may have made our node: once no longer
  // wanted, it goes if it is there and our session's (another session's node of the same name is
  // left alone). Retried on reconnection while the session lives; a new session has no such node.
  void remove_doubtful_locked() {
    if (doubtful_create.empty() || wanted) return;
    const std::uint64_t generation = doubtful_generation;
    if (core->generation_locked() != generation) {
      doubtful_create.clear();
      return;
    }
    if (!core->usable_locked(generation)) return;  // on_reconnected comes back here
    std::weak_ptr<State> weak = weak_from_this();
    auto checked = [generation, node = doubtful_create](const auto& self, zk_errc rc, NodeStat stat) {
      if (self->doubtful_create != node || self->doubtful_generation != generation || self->wanted) return;
      if (is_connection_trouble(rc)) {
        if (self->core->usable_locked(generation)) self->remove_doubtful_locked();
        return;
      }
      self->doubtful_create.clear();
      if (rc == zk_errc::ok && stat.ephemeral_owner == self->core->session_id()) self->remove_locked(generation, node);
      else self->detach_if_idle_locked();
    };
    core->exists(generation, doubtful_create, detail::when_alive_locked(weak, checked));
  }

  // Deleted until done: retried on reconnection while the session lives (it takes the node along
  // when it ends).
  void remove_locked(std::uint64_t generation, std::string node) {
    pending_removal = node;
    removal_generation = generation;
    std::weak_ptr<State> weak = weak_from_this();
    auto removed = [generation, node](const auto& self, zk_errc rc) {
      if (self->pending_removal != node || self->removal_generation != generation) return;
      if (is_connection_trouble(rc) && self->core->generation_locked() == generation) {
        // on_reconnected sends it again, or now if the connection is back already.
        if (self->core->usable_locked(generation)) self->remove_locked(generation, node);
        return;
      }
      self->pending_removal.clear();
      self->detach_if_idle_locked();
    };
    core->remove(generation, node, -1, detail::when_alive_locked(weak, removed));
  }

  void detach_if_idle_locked() {
    if (destroyed && pending_removal.empty() && doubtful_create.empty() && attached) {
      attached = false;
      core->detach(this);
    }
  }

  // ---- telling ----

  void set_state_locked(MembershipState next, std::optional<LossReason> reason, std::error_code error = {}) {
    // Metrics: a join after a loss is a rejoin; leaving forgets the loss.
    if (next == MembershipState::joined) ++(rejoining ? core->group_rejoins : core->group_joins);
    if (next == MembershipState::lost) ++core->group_losses;
    if (next == MembershipState::joined || next == MembershipState::left) rejoining = false;
    if (next == MembershipState::lost) rejoining = true;
    state = next;
    state_changed.notify_all();
    settle_join_waiters_locked();
    if (!listener) return;
    MembershipEvent event{next, reason.value_or(LossReason::session_lost), node_path, error};
    core->post_callback([weak = weak_from_this(), event] {
      if (auto self = weak.lock()) self->gate.run([&] { self->listener(event); });
    });
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_reconnected(std::uint64_t generation) override {
    if (!pending_removal.empty() && removal_generation == generation) remove_locked(generation, pending_removal);
    remove_doubtful_locked();
    create_locked();
  }
  void on_new_session(std::uint64_t) override {
    pending_removal.clear();  // went with the old session
    doubtful_create.clear();
    detach_if_idle_locked();
    create_locked();
  }
  void on_session_lost(std::uint64_t generation, LossReason reason) override {
    creating = false;
    ++attempts;
    if (state == MembershipState::joined && joined_generation == generation) lost_locked(reason);
  }
  void on_session_ended(std::error_code why) override {
    ended = true;
    wanted = false;
    ++attempts;
    failure = why ? why : make_error_code(errc::session_closed);
    pending_removal.clear();
    doubtful_create.clear();
    if (state != MembershipState::left) set_state_locked(MembershipState::left, LossReason::session_closed);
    state_changed.notify_all();
    if (attached) {
      attached = false;
      core->detach(this);
    }
  }

  // ---- asynchronous joins (under core->mutex()) ----

  struct JoinWaiter {
    JoinHandler handler;
    std::optional<std::stop_callback<std::function<void()>>> stop;
    std::unique_ptr<boost::asio::steady_timer> timer;  // the worker thread's
  };

  // Joined: every waiter succeeds; no longer wanted (left, failed, closed): every waiter fails.
  void settle_join_waiters_locked() {
    if (join_waiters.empty()) return;
    std::error_code ec;
    if (state == MembershipState::joined) ec = {};
    else if (!wanted) ec = failure ? failure : make_error_code(errc::cancelled);
    else return;
    auto waiters = std::move(join_waiters);
    join_waiters.clear();
    for (auto& entry : waiters) end_waiter_locked(entry.second, ec);
  }

  void end_join_waiter_locked(std::uint64_t waiter_id, std::error_code ec) {
    auto it = join_waiters.find(waiter_id);
    if (it == join_waiters.end()) return;
    auto waiter = std::move(it->second);
    join_waiters.erase(it);
    end_waiter_locked(waiter, ec);
  }

  void end_waiter_locked(const std::shared_ptr<JoinWaiter>& waiter, std::error_code ec) {
    core->post_to_worker([waiter] {
      if (waiter->timer) waiter->timer->cancel();
    });
    core->post_callback([waiter, ec] { waiter->handler(ec); });
  }

  // Blocks until joined, failed, stopped, or `deadline`.
  std::error_code wait_joined(std::optional<std::chrono::steady_clock::time_point> deadline, std::stop_token stop) {
    std::stop_callback wake(stop, [this] {
      std::lock_guard lock(core->mutex());
      state_changed.notify_all();
    });
    std::unique_lock lock(core->mutex());
    if (ended) return make_error_code(errc::session_closed);
    join_locked();
    auto done = [&] { return state == MembershipState::joined || !wanted || stop.stop_requested(); };
    if (deadline) state_changed.wait_until(lock, *deadline, done);
    else state_changed.wait(lock, done);
    if (state == MembershipState::joined) return {};
    if (!wanted) return failure ? failure : make_error_code(errc::cancelled);
    if (stop.stop_requested()) return make_error_code(errc::cancelled);
    return make_error_code(errc::timed_out);
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const std::string id;
  std::string data;  // under core->mutex()
  const GroupMemberOptions options;
  const MembershipListener listener;
  detail::CallbackGate gate;

  // Under core->mutex().
  MembershipState state = MembershipState::left;
  bool rejoining = false;  // lost since the last join (for the metrics: the next join is a rejoin)
  bool wanted = false;  // join() was called and neither leave() nor a failure since
  bool creating = false;
  bool ended = false;
  bool attached = true;
  bool destroyed = false;
  std::uint64_t attempts = 0;
  std::uint64_t joined_generation = 0;
  std::uint64_t name_generation = 0;
  std::string guid;
  std::string node_path;
  std::string pending_removal;
  std::uint64_t removal_generation = 0;
  std::string doubtful_create;  // a create's node whose reply met connection trouble (see remove_doubtful_locked)
  std::uint64_t doubtful_generation = 0;
  std::optional<std::chrono::steady_clock::time_point> taken_since;
  std::set<std::int64_t> own_sessions;  // the sessions this member was joined on
  std::error_code failure;
  std::condition_variable state_changed;
  std::map<std::uint64_t, std::shared_ptr<JoinWaiter>> join_waiters;
  std::uint64_t next_join_waiter = 0;
};

GroupMember::GroupMember(Session& session, std::string path, std::string member_id, std::string data,
                         GroupMemberOptions options, MembershipListener listener) {
  detail::require_valid_path(path, "join group");
  if (auto problem = id_problem(options.layout, member_id, data); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "join group", path, problem);
  if (auto problem = size_problem(options.layout, path, member_id, data); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "join group", path, problem);
  state_ = std::make_shared<State>(detail::Internals::core(session), std::move(path), std::move(member_id),
                                   std::move(data), options, std::move(listener));
  std::lock_guard lock(state_->core->mutex());
  if (state_->core->ended()) {
    state_->ended = true;
    state_->attached = false;
    return;
  }
  state_->core->attach(state_);
}

std::optional<GroupMember> GroupMember::make(Session& session, std::string path, std::string member_id,
                                             std::string data, GroupMemberOptions options,
                                             MembershipListener listener, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<GroupMember>(std::in_place, session, std::move(path), std::move(member_id), std::move(data),
                                      options, std::move(listener));
  });
}

GroupMember::~GroupMember() {
  if (!state_) return;
  {
    std::lock_guard lock(state_->core->mutex());
    state_->leave_locked();
    state_->destroyed = true;
    state_->detach_if_idle_locked();
  }
  state_->gate.stop();
}

const std::string& GroupMember::path() const { return state_->path; }
const std::string& GroupMember::id() const { return state_->id; }

void GroupMember::join(std::stop_token stop) {
  throw_if(state_->wait_joined(std::nullopt, std::move(stop)), "join group", state_->path);
}

bool GroupMember::try_join_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  const auto ec = state_->wait_joined(deadline, std::move(stop));
  if (ec == errc::timed_out || ec == errc::cancelled) return false;
  throw_if(ec, "join group", state_->path);
  return true;
}

void GroupMember::join(std::stop_token stop, std::error_code& ec) noexcept {
  detail::without_exceptions(ec, [&] { join(std::move(stop)); });
}

bool GroupMember::try_join_for(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return try_join_for(timeout, std::move(stop)); });
}

void GroupMember::async_join(std::chrono::nanoseconds timeout, JoinHandler handler, std::stop_token stop) {
  auto waiter = std::make_shared<State::JoinWaiter>();
  waiter->handler = std::move(handler);
  std::uint64_t id = 0;
  {
    std::lock_guard lock(state_->core->mutex());
    if (state_->ended) return state_->end_waiter_locked(waiter, make_error_code(errc::session_closed));
    id = ++state_->next_join_waiter;
    state_->join_waiters.emplace(id, waiter);
    state_->join_locked();
    state_->settle_join_waiters_locked();  // joined already
  }
  std::weak_ptr<State> weak = state_;
  if (timeout >= std::chrono::nanoseconds::zero()) {
    auto core = state_->core;
    core->post_to_worker([core, weak, waiter, id, timeout] {
      waiter->timer = std::make_unique<boost::asio::steady_timer>(core->worker(), timeout);
      waiter->timer->async_wait([weak, id](boost::system::error_code ec) {
        auto self = weak.lock();
        if (ec || !self) return;
        std::lock_guard lock(self->core->mutex());
        self->end_join_waiter_locked(id, make_error_code(errc::timed_out));
      });
    });
  }
  if (stop.stop_possible()) {
    waiter->stop.emplace(std::move(stop), [weak, id] {
      if (auto self = weak.lock()) {
        std::lock_guard lock(self->core->mutex());
        self->end_join_waiter_locked(id, make_error_code(errc::cancelled));
      }
    });
  }
}

void GroupMember::leave() {
  std::lock_guard lock(state_->core->mutex());
  state_->leave_locked();
}

void GroupMember::set_data(std::string data) {
  if (state_->options.layout != GroupLayout::curator)
    throw Error(make_error_code(errc::invalid_argument), "set member data", state_->path,
                data_problem(state_->options.layout));
  // Kept for rejoins too: refused before it replaces the data a rejoin would create.
  if (auto problem = size_problem(state_->options.layout, state_->path, state_->id, data); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "set member data", state_->path, problem);
  auto reply = std::make_shared<std::promise<zk_errc>>();
  auto answered = reply->get_future();
  std::string node;
  {
    std::lock_guard lock(state_->core->mutex());
    state_->data = data;
    if (state_->state != MembershipState::joined) return;  // the next join writes it
    node = state_->node_path;
    state_->core->set_data(state_->joined_generation, node, data, -1,
                           [reply](zk_errc rc, NodeStat) { reply->set_value(rc); });
  }
  const auto wait = state_->core->negotiated_timeout() + state_->core->options().connect_timeout;
  if (answered.wait_for(wait) != std::future_status::ready)
    throw Error(make_error_code(errc::timed_out), "set member data", node);
  if (const auto rc = answered.get(); rc != zk_errc::ok) throw Error(make_error_code(rc), "set member data", node);
}

MembershipState GroupMember::state() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->state;
}

std::string GroupMember::node() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->state == MembershipState::joined ? state_->node_path : std::string();
}

// ---------------------------------------------------------------------------------------------
// GroupView

struct GroupView::State final : detail::SessionListener, std::enable_shared_from_this<State> {
  State(std::shared_ptr<detail::SessionCore> session_core, std::string watched, GroupLayout group_layout,
        Callback on_change)
      : core(std::move(session_core)), path(std::move(watched)), layout(group_layout), callback(std::move(on_change)) {}

  bool is_member_node(const std::string& name) const {
    return layout != GroupLayout::kazoo_party || name.find(kPartySuffix) != std::string::npos;
  }

  GroupMemberInfo info_of(const std::string& name, std::string node_data, const NodeStat& stat) const {
    GroupMemberInfo info;
    switch (layout) {
      case GroupLayout::curator: info.id = name; break;
      case GroupLayout::kazoo_party: info.id = node_data; break;
      case GroupLayout::kazoo_shallow_party: {
        const auto dash = name.find('-');
        info.id = dash == std::string::npos ? name : name.substr(dash + 1);
        break;
      }
    }
    info.data = std::move(node_data);
    info.node = name;
    info.session_id = stat.ephemeral_owner;
    return info;
  }

  // ---- reading (under core->mutex()) ----

  // Lists the members, with the children watch that lists them again (see WatchedRead).
  void refresh_locked() {
    if (!stopped && listing.list_children_locked(*this, path)) listing_back = false;
  }

  // The latest listing's reply.
  void on_children_locked(std::uint64_t generation, zk_errc rc, std::vector<std::string> children) {
    if (stopped || generation != core->generation_locked()) return;
    if (rc == zk_errc::no_node) {
      current.clear();
      known.clear();
      listing_back = true;
      publish_locked();
      listing.retry_later_locked(*this, detail::kMissingPathRetry);
      return;
    }
    if (rc != zk_errc::ok) {
      if (is_connection_trouble(rc) || is_session_ended(rc)) return;  // read again on reconnection
      return stop_locked(make_error_code(rc));
    }
    current.clear();
    for (auto& child : children)
      if (is_member_node(child)) current.insert(std::move(child));
    std::erase_if(known, [&](const auto& entry) { return !current.contains(entry.first); });
    for (const auto& name : current)
      if (!known.contains(name)) read_locked(generation, name);
    listing_back = true;
    publish_locked();
  }

  // Reads a member's node, with a data watch that reads it again when its data changes or the node
  // is deleted. A node deleted and created again under the same name (a member that rejoined,
  // another session's node in its place, in one multi-op or between two listings) may show in no
  // listing: the deletion of the node read last is what tells of it.
  void read_locked(std::uint64_t generation, const std::string& name) {
    if (!reading.insert(name).second) return;
    std::weak_ptr<State> weak = weak_from_this();
    core->get_data(
        generation, path + "/" + name,
        detail::when_alive_locked(weak, [generation, name](const auto& self, zk_errc rc, std::string data, NodeStat stat) {
          if (self->stopped || generation != self->core->generation_locked()) return;
          self->reading.erase(name);
          const bool again = self->read_again.erase(name) > 0;
          if (is_connection_trouble(rc) || is_session_ended(rc)) return;  // the listing on reconnection reads it again
          if (again && self->current.contains(name)) return self->read_locked(generation, name);
          if (rc == zk_errc::ok) {
            if (self->current.contains(name)) self->known.insert_or_assign(name, self->info_of(name, std::move(data), stat));
          } else if (rc != zk_errc::no_node) {
            // A member this view may not read (no_auth): it cannot know the group, and says so.
            return self->stop_locked(make_error_code(rc));
          }
          self->publish_locked();
        }),
        [weak, generation, name](NodeEvent event) {
          if (event != NodeEvent::changed && event != NodeEvent::deleted) return;
          auto self = weak.lock();
          if (!self) return;
          std::lock_guard lock(self->core->mutex());
          if (self->stopped || generation != self->core->generation_locked() || !self->current.contains(name)) return;
          self->known.erase(name);
          if (self->reading.contains(name)) self->read_again.insert(name);  // its reply may predate the change
          else self->read_locked(generation, name);
        });
  }

  // Tells the callback when the members or `stale` changed. Live (fresh) once the latest listing
  // came back on a connected session and every member in it was read; stale from a connection
  // drop or a session loss until then. While live, a change is told only once its reads are back.
  void publish_locked() {
    if (stopped) return;
    const bool complete = listing_back && reading.empty();
    if (complete && core->state() == SessionState::connected) live = true;
    GroupSnapshot next;
    if (!live) {
      if (!published || told.stale) return;  // nothing fresh told yet, or stale told already
      next.members = told.members;           // the last known, marked stale
      next.stale = true;
      ++core->group_views_stale;
    } else {
      if (!complete) return;
      next.stale = false;
      for (const auto& name : current)
        if (auto it = known.find(name); it != known.end()) next.members.push_back(it->second);
      std::sort(next.members.begin(), next.members.end(), [](const auto& a, const auto& b) {
        return std::tie(a.id, a.node) < std::tie(b.id, b.node);
      });
      if (published && same(next, told)) return;
    }
    told = next;
    published = true;
    fresh_changed.notify_all();
    if (!callback) return;
    core->post_callback([weak = weak_from_this(), next] {
      if (auto self = weak.lock()) self->gate.run([&] { self->callback(next); });
    });
  }

  static bool same(const GroupSnapshot& a, const GroupSnapshot& b) {
    if (a.stale != b.stale || a.members.size() != b.members.size()) return false;
    for (std::size_t i = 0; i < a.members.size(); ++i) {
      const auto &x = a.members[i], &y = b.members[i];
      if (std::tie(x.id, x.data, x.node, x.session_id) != std::tie(y.id, y.data, y.node, y.session_id)) return false;
    }
    return true;
  }

  void go_stale_locked() {
    live = false;
    listing_back = false;
    publish_locked();
  }

  void stop_locked(std::error_code why) {
    if (stopped) return;
    failure = why;
    if (why) go_stale_locked();  // tell the callback the view is stale for good
    told.stale = true;
    stopped = true;
    listing.stop_locked(*this);
    core->detach(this);
    fresh_changed.notify_all();
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_reconnected(std::uint64_t) override { refresh_locked(); }
  void on_new_session(std::uint64_t) override {
    listing.forget_watch_locked();
    reading.clear();
    read_again.clear();
    known.clear();
    refresh_locked();
  }
  void on_suspended(std::uint64_t) override { go_stale_locked(); }
  void on_session_lost(std::uint64_t, LossReason) override { go_stale_locked(); }
  void on_session_ended(std::error_code why) override {
    stop_locked(why ? why : make_error_code(errc::session_closed));
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const GroupLayout layout;
  const Callback callback;
  detail::CallbackGate gate;

  // Under core->mutex().
  bool stopped = false;
  std::error_code failure;
  detail::WatchedRead listing;
  bool listing_back = false;  // the latest listing came back
  bool live = false;          // fresh: see publish_locked
  std::set<std::string> current;                   // member nodes of the latest listing
  std::map<std::string, GroupMemberInfo> known;    // node name -> what its read found
  std::set<std::string> reading;                   // reads in flight
  std::set<std::string> read_again;                // in flight when a change was told: read once more
  GroupSnapshot told;
  bool published = false;
  std::condition_variable fresh_changed;
};

GroupView::GroupView(Session& session, std::string path, GroupLayout layout, Callback callback) {
  detail::require_valid_path(path, "view group");
  state_ = std::make_shared<State>(detail::Internals::core(session), std::move(path), layout, std::move(callback));
  std::lock_guard lock(state_->core->mutex());
  if (state_->core->ended()) {
    state_->stopped = true;
    state_->failure = make_error_code(errc::session_closed);
    return;
  }
  state_->core->attach(state_);
  state_->refresh_locked();
}

std::optional<GroupView> GroupView::make(Session& session, std::string path, GroupLayout layout, Callback callback,
                                         std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<GroupView>(std::in_place, session, std::move(path), layout, std::move(callback));
  });
}

GroupView::~GroupView() {
  if (state_) stop();
}

const std::string& GroupView::path() const { return state_->path; }

GroupSnapshot GroupView::snapshot() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->told;
}

bool GroupView::wait_fresh(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->core->mutex());
  return state_->fresh_changed.wait_for(lock, timeout, [&] { return !state_->told.stale || state_->stopped; }) &&
         !state_->told.stale;
}

std::error_code GroupView::error() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->failure;
}

void GroupView::stop() {
  {
    std::lock_guard lock(state_->core->mutex());
    state_->stop_locked({});
  }
  state_->gate.stop();
}

}  // namespace zkr
