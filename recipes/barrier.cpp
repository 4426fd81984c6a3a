// SPDX-License-Identifier: Apache-2.0
// Barriers: one wait engine (NodeWait) that reruns a step of reads-with-watches until the step
// decides, across connection drops and session losses, bounded by a timeout and a stop token.
#include <zkr/barrier.hpp>

#include <algorithm>
#include <future>
#include <mutex>

#include <boost/asio/steady_timer.hpp>

#include <zkr/names.hpp>

#include "guid.hpp"
#include "internals.hpp"
#include "node_steps.hpp"
#include "session_core.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"
#include "request_limits.hpp"

namespace zkr {
namespace {

constexpr std::string_view kReadyNode = "ready";  // the peers' name for it, under the path


// One wait. `step` runs under the session mutex on a usable connection: at the start, whenever a
// watch it set fires, and on each reconnection and new session. It issues reads with watch() and
// ends the wait with finish_locked(). Replies of an earlier run are dropped (reply()), except those
// wrapped with reply_any() (answers that need no run of their own; creates and deletes whose outcome
// the recipe keeps track of take a plain callback and look at finished()).
class NodeWait final : public detail::SessionListener, public std::enable_shared_from_this<NodeWait> {
 public:
  using Step = std::function<void(NodeWait&, std::uint64_t generation)>;

  NodeWait(std::shared_ptr<detail::SessionCore> session_core, Step step, BarrierHandler done)
      : core_(std::move(session_core)), step_(std::move(step)), done_(std::move(done)) {}

  static void start(const std::shared_ptr<detail::SessionCore>& core, std::chrono::nanoseconds timeout,
                    std::stop_token stop, Step step, BarrierHandler done) {
    auto wait = std::make_shared<NodeWait>(core, std::move(step), std::move(done));
    if (stop.stop_possible()) {
      // Built before taking the mutex: it runs at once if stop was requested already.
      wait->stop_callback_.emplace(std::move(stop), [weak = std::weak_ptr<NodeWait>(wait)] {
        if (auto self = weak.lock()) {
          std::lock_guard lock(self->core_->mutex());
          self->finish_locked(make_error_code(errc::cancelled));
        }
      });
    }
    std::lock_guard lock(core->mutex());
    if (wait->finished_) return;
    if (core->ended()) return wait->finish_locked(make_error_code(errc::session_closed));
    core->attach(wait);
    wait->attached_ = true;
    wait->give_up_after_first_reply_ = timeout == std::chrono::nanoseconds::zero();
    if (timeout > std::chrono::nanoseconds::zero()) {
      core->post_to_worker([weak = std::weak_ptr<NodeWait>(wait), core, timeout] {
        auto self = weak.lock();
        if (!self) return;
        self->timer_ = std::make_unique<boost::asio::steady_timer>(core->worker(), timeout);
        self->timer_->async_wait([weak](boost::system::error_code ec) {
          auto again = weak.lock();
          if (ec || !again) return;
          std::lock_guard inner(again->core_->mutex());
          again->finish_locked(make_error_code(errc::timed_out));
        });
      });
    }
    wait->rerun_locked();
  }

  void rerun_locked() {
    if (finished_) return;
    const std::uint64_t generation = core_->generation_locked();
    if (!core_->usable_locked(generation)) return;  // on_reconnected / on_new_session run it again
    ++round_;
    step_(*this, generation);
  }

  // A watch that runs the step again (if no later run superseded the one that set it).
  detail::NodeWatch watch() {
    return [weak = weak_from_this(), round = round_](NodeEvent event) {
      if (event == NodeEvent::other) return;
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard lock(self->core_->mutex());
      if (round == self->round_) self->rerun_locked();
    };
  }

  // A reply handler run under the mutex, only if the wait is on and no later run superseded it.
  template <typename Handler>
  auto reply(Handler handler) {
    return [weak = weak_from_this(), round = round_, handler](auto... args) {
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard lock(self->core_->mutex());
      if (self->finished_ || round != self->round_) return;
      handler(*self, std::move(args)...);
      // A zero timeout: the first answer decides.
      if (self->give_up_after_first_reply_) self->finish_locked(make_error_code(errc::timed_out));
    };
  }
  template <typename Handler>
  auto reply_any(Handler handler) {
    return [weak = weak_from_this(), handler](auto... args) {
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard lock(self->core_->mutex());
      if (self->finished_) return;
      handler(*self, std::move(args)...);
    };
  }

  // A failed request: connection trouble waits for the next connection; anything else ends the wait.
  void failed_locked(zk_errc rc) {
    if (is_connection_trouble(rc) || is_session_ended(rc)) return;
    finish_locked(make_error_code(rc));
  }

  void finish_locked(std::error_code ec) {
    if (finished_) return;
    finished_ = true;
    if (!ec) ++core_->barrier_passes;
    else if (ec == errc::timed_out) ++core_->barrier_timeouts;
    else if (ec == errc::cancelled) ++core_->barrier_cancellations;
    else ++core_->barrier_failures;
    ++round_;
    if (attached_) {
      attached_ = false;
      core_->detach(this);
    }
    core_->post_to_worker([weak = weak_from_this()] {
      if (auto self = weak.lock(); self && self->timer_) self->timer_->cancel();
    });
    core_->post_callback([done = done_, ec, self = shared_from_this()] { done(ec); });
  }

  detail::SessionCore& core() { return *core_; }
  bool finished() const { return finished_; }  // under the mutex

  // ---- SessionListener (under the mutex) ----
  void on_reconnected(std::uint64_t) override { rerun_locked(); }
  void on_new_session(std::uint64_t) override { rerun_locked(); }
  void on_session_lost(std::uint64_t, LossReason) override { ++round_; }
  void on_session_ended(std::error_code why) override {
    finish_locked(why ? why : make_error_code(errc::session_closed));
  }

 private:
  const std::shared_ptr<detail::SessionCore> core_;
  const Step step_;
  const BarrierHandler done_;
  std::optional<std::stop_callback<std::function<void()>>> stop_callback_;
  std::unique_ptr<boost::asio::steady_timer> timer_;  // the worker thread's
  // Under the mutex.
  bool finished_ = false;
  bool attached_ = false;
  bool give_up_after_first_reply_ = false;
  std::uint64_t round_ = 0;
};

// A double barrier's step takes several replies: a zero timeout is the shortest one instead of
// "the first reply decides" (which would end an enter between its "ready" create and its answer).
std::chrono::nanoseconds zero_means_shortest(std::chrono::nanoseconds timeout) {
  return timeout == std::chrono::nanoseconds::zero() ? std::chrono::nanoseconds(1) : timeout;
}

// The blocking form of an asynchronous wait: true when done, false on timeout or stop.
template <typename Start>
bool wait_for_result(const std::string& path, const char* operation, Start start) {
  auto result = std::make_shared<std::promise<std::error_code>>();
  auto answered = result->get_future();
  start([result](std::error_code ec) { result->set_value(ec); });
  const auto ec = answered.get();
  if (!ec) return true;
  if (ec == errc::timed_out || ec == errc::cancelled) return false;
  throw Error(ec, operation, path);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Barrier

Barrier::Barrier(Session& session, std::string path, NodeAcl acl)
    : session_(&session), path_(std::move(path)), acl_(acl) {
  detail::require_valid_path(path_, "barrier");
}

std::optional<Barrier> Barrier::make(Session& session, std::string path, NodeAcl acl, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return std::optional<Barrier>(std::in_place, session, std::move(path), acl); });
}

void Barrier::set() {
  std::error_code ec;
  session_->create(path_, {}, CreateMode::persistent, acl_, ec);
  if (ec == zk_errc::no_node) {
    for (std::size_t slash = path_.find('/', 1); slash != std::string::npos; slash = path_.find('/', slash + 1)) {
      std::error_code ignored;
      session_->create(path_.substr(0, slash), {}, CreateMode::container, NodeAcl::open, ignored);
    }
    session_->create(path_, {}, CreateMode::persistent, acl_, ec);
  }
  if (ec && ec != zk_errc::node_exists) throw Error(ec, "set barrier", path_);
}

bool Barrier::remove() {
  std::error_code ec;
  session_->remove(path_, ec);
  if (ec == zk_errc::no_node) return false;
  throw_if(ec, "remove barrier", path_);
  return true;
}

bool Barrier::is_set() const { return session_->exists(path_).has_value(); }

void Barrier::async_wait(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop) {
  const std::string path = path_;
  NodeWait::start(
      detail::Internals::core(*session_), timeout, std::move(stop),
      [path](NodeWait& wait, std::uint64_t generation) {
        wait.core().get_data(generation, path, wait.reply([](NodeWait& self, zk_errc rc, std::string, NodeStat) {
          if (rc == zk_errc::no_node) return self.finish_locked({});
          if (rc != zk_errc::ok) self.failed_locked(rc);  // ok: the watch is set
        }),
                             wait.watch());
      },
      std::move(handler));
}

bool Barrier::wait(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return wait_for_result(path_, "wait on barrier",
                         [&](BarrierHandler done) { async_wait(timeout, std::move(done), std::move(stop)); });
}

void Barrier::set(std::error_code& ec) noexcept { detail::without_exceptions(ec, [&] { set(); }); }
bool Barrier::remove(std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return remove(); });
}
bool Barrier::wait(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return wait(timeout, std::move(stop)); });
}

// ---------------------------------------------------------------------------------------------
// DoubleBarrier

struct DoubleBarrier::State : std::enable_shared_from_this<State> {
  std::shared_ptr<detail::SessionCore> core;
  std::string path;
  std::string node;  // "<path>/<uuid>", as Curator names a participant
  std::string data;
  int participants = 0;
  // Under core->mutex().
  std::uint64_t created_generation = 0;  // the session generation our node exists on; 0: none
  bool creating = false;
  bool removing = false;
  bool destroyed = false;  // the DoubleBarrier is gone: a wait still running gives up

  // Deletes our node if it exists (in the background; the session takes it along when it ends).
  void remove_node_locked() {
    const std::uint64_t generation = created_generation;
    if (generation == 0 || !core->usable_locked(generation)) return;
    created_generation = 0;
    core->remove(generation, node, -1, [](zk_errc) {});
  }
};

DoubleBarrier::DoubleBarrier(Session& session, std::string path, int participants, std::string data) {
  detail::require_valid_path(path, "double barrier");
  if (participants < 1)
    throw Error(make_error_code(errc::invalid_argument), "double barrier", path, "participants must be at least 1");
  state_ = std::make_shared<State>();
  state_->core = detail::Internals::core(session);
  state_->node = path + "/" + detail::new_guid();
  state_->path = std::move(path);
  state_->data = data.empty() ? default_owner_data() : std::move(data);
  state_->participants = participants;
  if (auto problem = detail::request_size_problem(state_->path.size(), state_->data.size()); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "double barrier", state_->path, "data: " + problem);
}

std::optional<DoubleBarrier> DoubleBarrier::make(Session& session, std::string path, int participants,
                                                 std::string data, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<DoubleBarrier>(std::in_place, session, std::move(path), participants, std::move(data));
  });
}

DoubleBarrier::~DoubleBarrier() {
  if (!state_) return;
  std::lock_guard lock(state_->core->mutex());
  state_->destroyed = true;
  state_->remove_node_locked();
}

const std::string& DoubleBarrier::path() const { return state_->path; }
int DoubleBarrier::participants() const { return state_->participants; }
std::string DoubleBarrier::node() const { return state_->node; }

void DoubleBarrier::async_enter(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop) {
  auto state = state_;
  NodeWait::start(
      state->core, zero_means_shortest(timeout), std::move(stop),
      [state](NodeWait& wait, std::uint64_t generation) {
        if (state->destroyed) return wait.finish_locked(make_error_code(errc::cancelled));
        // Our node first, on this session (a lost session took the earlier one along).
        if (state->created_generation != generation) {
          if (state->creating) return;
          state->creating = true;
          // The reply updates our state even if the wait is over by then (a node made for a wait
          // that gave up is deleted), so that no later enter() waits for a create already answered.
          detail::create_with_parents(
              state->core, generation, state->node, state->data, CreateMode::ephemeral, NodeAcl::open,
              [state, generation, weak = wait.weak_from_this()](zk_errc rc, std::string, NodeStat) {
                std::lock_guard lock(state->core->mutex());
                state->creating = false;
                // node_exists: our own create, whose reply was lost (the name is ours alone).
                const bool made = rc == zk_errc::ok || rc == zk_errc::node_exists;
                if (made) state->created_generation = generation;
                auto self = weak.lock();
                if (!self || self->finished()) {
                  if (made) state->remove_node_locked();
                  return;
                }
                if (made || is_connection_trouble(rc) || is_session_ended(rc)) return self->rerun_locked();
                self->finish_locked(make_error_code(rc));
              });
          return;
        }
        // Then count: all children, "ready" included, as both peers count.
        wait.core().get_children(
            generation, state->path,
            wait.reply([state, generation](NodeWait& self, zk_errc rc, std::vector<std::string> children, NodeStat) {
              if (rc == zk_errc::no_node) {  // the path went, our node with it
                state->created_generation = 0;
                return self.rerun_locked();
              }
              if (rc != zk_errc::ok) return self.failed_locked(rc);
              if (std::find(children.begin(), children.end(), kReadyNode) != children.end())
                return self.finish_locked({});
              if (static_cast<int>(children.size()) < state->participants) return;  // the watch wakes us
              self.core().create(generation, state->path + "/" + std::string(kReadyNode), {}, CreateMode::persistent,
                                 NodeAcl::open,
                                 self.reply_any([](NodeWait& again, zk_errc created, std::string, NodeStat) {
                                   if (created == zk_errc::ok || created == zk_errc::node_exists)
                                     return again.finish_locked({});
                                   if (is_connection_trouble(created)) return again.rerun_locked();
                                   again.failed_locked(created);
                                 }));
            }),
            wait.watch());
      },
      [state, handler = std::move(handler)](std::error_code ec) {
        if (ec) {  // gave up or failed: no node of ours left to count
          std::lock_guard lock(state->core->mutex());
          state->remove_node_locked();
        }
        handler(ec);
      });
}

// The peers' leave protocol (Curator's DistributedDoubleBarrier, kazoo's DoubleBarrier): the
// participant whose node sorts lowest by name ("ready" aside) deletes it last, once it is alone;
// every other one deletes its own node and waits for the lowest to go. A peer waits for the lowest
// node only, so the lowest one leaving early would let it through while others are still in.
void DoubleBarrier::async_leave(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop) {
  auto state = state_;
  NodeWait::start(
      state->core, zero_means_shortest(timeout), std::move(stop),
      [state](NodeWait& wait, std::uint64_t generation) {
        if (state->removing) return;  // its reply runs the step again
        wait.core().get_children(
            generation, state->path,
            wait.reply([state, generation](NodeWait& self, zk_errc rc, std::vector<std::string> children, NodeStat) {
              if (rc == zk_errc::no_node) {  // the path went, our node with it
                state->created_generation = 0;
                return self.finish_locked({});
              }
              if (rc != zk_errc::ok) return self.failed_locked(rc);
              std::erase(children, std::string(kReadyNode));
              std::sort(children.begin(), children.end());
              const std::string ours = state->node.substr(state->path.size() + 1);
              const bool ours_in = state->created_generation == generation &&
                                   std::binary_search(children.begin(), children.end(), ours);
              if (!ours_in && state->created_generation == generation) state->created_generation = 0;  // deleted
              if (ours_in && (children.size() == 1 || children.front() != ours)) {
                state->removing = true;
                self.core().remove(generation, state->node, -1, [state, weak = self.weak_from_this()](zk_errc removed) {
                  std::lock_guard lock(state->core->mutex());
                  state->removing = false;
                  if (removed == zk_errc::ok || removed == zk_errc::no_node) state->created_generation = 0;
                  auto again = weak.lock();
                  if (!again || again->finished()) return;
                  if (removed == zk_errc::ok || removed == zk_errc::no_node || is_connection_trouble(removed) ||
                      is_session_ended(removed))
                    return again->rerun_locked();  // (a connection that is not back yet: on reconnection)
                  again->finish_locked(make_error_code(removed));
                });
                return;
              }
              // The lowest waits for the others; the others for every node to go (the lowest goes
              // last). The children watch wakes us as they go; the last to see none removes "ready".
              if (!children.empty()) return;
              self.core().remove(generation, state->path + "/" + std::string(kReadyNode), -1, [](zk_errc) {});
              self.finish_locked({});
            }),
            wait.watch());
      },
      [state, handler = std::move(handler)](std::error_code ec) {
        if (ec) {  // gave up or failed: out of the barrier all the same, so the others are not held
          std::lock_guard lock(state->core->mutex());
          state->remove_node_locked();
        }
        handler(ec);
      });
}

bool DoubleBarrier::enter(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return wait_for_result(state_->path, "enter double barrier",
                         [&](BarrierHandler done) { async_enter(timeout, std::move(done), std::move(stop)); });
}

bool DoubleBarrier::leave(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return wait_for_result(state_->path, "leave double barrier",
                         [&](BarrierHandler done) { async_leave(timeout, std::move(done), std::move(stop)); });
}

bool DoubleBarrier::enter(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return enter(timeout, std::move(stop)); });
}

bool DoubleBarrier::leave(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return leave(timeout, std::move(stop)); });
}

}  // namespace zkr
