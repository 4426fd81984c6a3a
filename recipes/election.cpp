// SPDX-License-Identifier: Apache-2.0
// Leader election: the one-holder queue of the mutual-exclusion lock (predecessor watches) in the
// node layout of the peer it shares the path with, plus the life cycle of a participant.
// Everything about nodes, watches, connection loss, GUIDs, owner checks and cancellation is the
// contender queue's, reached through the same front end as zkr::Lock (acquisition.hpp).
#include <zkr/election.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>

#include "acquisition.hpp"
#include "internals.hpp"
#include "path_check.hpp"
#include "contender_queue.hpp"
#include "peer_layout.hpp"
#include "without_exceptions.hpp"

namespace zkr {

// ---- one term ----

struct Leadership::Term {
  explicit Term(HeldLock lock) : held(std::move(lock)) {}

  // Ends the term: the work is told to stop, then the node is deleted (the next participant
  // leads once the server has done so). Idempotent. Stop callbacks on ended_token() are user
  // code that may call the latch or selector: never call this, or request the stop, with their
  // mutex held.
  void end() {
    ended.request_stop();
    held.release();
  }
  // The term is over for the participant's own answers: ended, or lost as far as the session
  // already knows (the loss is recorded before the callbacks that tell of it run).
  bool over() const { return ended.stop_requested() || held.lost(); }

  HeldLock held;
  std::stop_source ended;
};

Leadership::Leadership(detail::Passkey, std::shared_ptr<Term> term) : term_(std::move(term)) {
  if (term_) share(term_->held);
}
bool Leadership::ended() const { return term_ && term_->ended.stop_requested(); }
std::stop_token Leadership::ended_token() const { return term_ ? term_->ended.get_token() : std::stop_token{}; }

std::string_view to_string(ElectionLayout layout) noexcept {
  switch (layout) {
    case ElectionLayout::recipe_default: return "recipe_default";
    case ElectionLayout::curator_latch: return "curator_latch";
    case ElectionLayout::curator_lock: return "curator_lock";
    case ElectionLayout::kazoo: return "kazoo";
  }
  return "unknown";
}

std::string_view to_string(LeadershipEvent event) noexcept {
  switch (event) {
    case LeadershipEvent::gained: return "gained";
    case LeadershipEvent::lost: return "lost";
    case LeadershipEvent::resigned: return "resigned";
  }
  return "unknown";
}

namespace {

using Term = Leadership::Term;

LockOptions lock_options(const ElectionOptions& options) {
  LockOptions out;
  out.owner_data = options.participant_data;
  out.acl = options.acl;
  return out;
}

// The queue a participant joins on its path: its node layout, the peers' nodes it refuses to
// share the path with, and the one-holder request. Made once per latch or selector.
class ElectionQueue {
 public:
  // `recipe` names the participant in errors ("leader latch"); `recipe_default` is its layout
  // when the options leave it to the recipe.
  ElectionQueue(Session& session, const std::string& path, const ElectionOptions& options, std::string_view recipe,
                std::string_view class_name, ElectionLayout recipe_default)
      : core_(detail::Internals::core(session)),
        path_(path),
        operation_(fmt::format("join {} on", recipe)),
        options_(detail::checked_lock_options(*core_, path_, lock_options(options), recipe)) {
    layout_ = options.layout == ElectionLayout::recipe_default ? recipe_default : options.layout;
    switch (layout_) {
      case ElectionLayout::curator_latch: role_ = ContenderRole::latch; break;
      case ElectionLayout::curator_lock: break;
      case ElectionLayout::kazoo: naming_ = ContenderScheme::kazoo; break;
      default:
        throw Error(make_error_code(errc::invalid_argument), recipe, path_,
                    fmt::format("ElectionOptions::layout {} is none of ElectionLayout's", static_cast<int>(layout_)));
    }
    our_recipe_ = fmt::format("a {} with the {} layout", class_name, to_string(layout_));
  }

  HeldLock acquire(std::stop_token stop) const {
    return HeldLock(detail::Internals::key(), acquisition().wait(std::move(stop)));
  }
  // The handler runs on the session's callback thread; `refusal` then says why, if refused.
  void async_acquire(AcquireHandler handler, std::stop_token stop,
                     std::shared_ptr<detail::RefusalDetail> refusal) const {
    acquisition().start(
        std::chrono::nanoseconds(-1),
        [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<detail::Contender>& contender) {
          handler(ec, contender ? HeldLock(detail::Internals::key(), contender) : HeldLock{});
        },
        std::move(stop), std::move(refusal));
  }

 private:
  detail::Acquisition acquisition() const {
    return {core_, operation_, path_, [this](std::chrono::nanoseconds timeout, auto refusal) {
              return request(timeout, std::move(refusal));
            }};
  }

  detail::ContenderRequest request(std::chrono::nanoseconds timeout,
                                   std::shared_ptr<detail::RefusalDetail> refusal) const {
    auto request = detail::one_holder_request(path_, options_, role_, timeout, refusal);
    if (naming_ == ContenderScheme::kazoo) {
      request.kazoo_naming = true;
      request.marker = "__lock__";
    }
    // Only nodes of our own layout share our queue: any other queue of contenders (a peer's latch
    // beside our lock names, kazoo's beside Curator's) would be a second one with a leader of its
    // own. Curator's semaphore keeps its nodes under "locks" and "leases", which no election lists
    // and which count nothing of ours: those names are no rival (and may be the user's own paths
    // nested under this one). A kazoo Semaphore's 32-hex leases are: it counts every child of its
    // path as a lease, our nodes included.
    const auto ours = detail::node_kind(naming_, role_);
    request.check_children = detail::refuse_peers(
        path_, our_recipe_,
        [ours](detail::PeerNode kind) { return kind == ours || kind == detail::PeerNode::curator_semaphore; },
        std::move(refusal));
    return request;
  }

  std::shared_ptr<detail::SessionCore> core_;
  std::string path_;
  std::string operation_;
  LockOptions options_;
  ElectionLayout layout_ = ElectionLayout::curator_lock;
  ContenderRole role_ = ContenderRole::exclusive;
  ContenderScheme naming_ = ContenderScheme::zkrecipes_or_curator;
  std::string our_recipe_;
};

std::vector<Participant> to_participants(std::vector<ContenderInfo> rows) {
  std::vector<Participant> out;
  out.reserve(rows.size());
  for (auto& row : rows)
    out.push_back(Participant{std::move(row.node), std::move(row.owner_data), row.token, row.session_id, row.holds});
  return out;
}

std::optional<Participant> first_leader(std::vector<Participant> participants) {
  if (participants.empty() || !participants.front().leader) return std::nullopt;
  return std::move(participants.front());
}

// A term whose node loss also ends it, and tells `on_loss` (on the session's callback thread).
std::shared_ptr<Term> begin_term(HeldLock held, std::function<void(const std::shared_ptr<Term>&)> on_loss) {
  auto term = std::make_shared<Term>(std::move(held));
  std::weak_ptr<Term> weak = term;
  term->held.on_lost([weak, on_loss = std::move(on_loss)](LossReason) {
    auto ended = weak.lock();
    if (!ended) return;
    ended->ended.request_stop();
    if (on_loss) on_loss(ended);
  });
  return term;
}

}  // namespace

std::vector<Participant> election_participants(Session& session, std::string_view path) {
  return to_participants(list_contenders(session, path, 1));
}

std::optional<Participant> election_leader(Session& session, std::string_view path) {
  return first_leader(election_participants(session, path));
}

std::vector<Participant> election_participants(Session& session, std::string_view path, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return election_participants(session, path); });
}

std::optional<Participant> election_leader(Session& session, std::string_view path, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return election_leader(session, path); });
}

// ---- LeaderLatch ----

struct LeaderLatch::State : std::enable_shared_from_this<State> {
  using Listener = std::function<void(LeadershipEvent, const Leadership&)>;
  enum class Phase { idle, waiting, leading, stopped, closed };

  State(Session& session, std::string checked, const ElectionOptions& options)
      : core(detail::Internals::core(session)),
        path(std::move(checked)),
        queue(session, path, options, "leader latch", "zkr::LeaderLatch", ElectionLayout::curator_latch) {}

  // Queues a new node; its outcome arrives on the callback thread. Caller holds `mutex`.
  void join_locked() {
    if (core->ended()) {  // no outcome would ever be delivered: the callback thread is gone
      phase = Phase::stopped;
      {
        std::lock_guard session_lock(core->mutex());
        error = core->end_reason_locked();
      }
      if (!error) error = make_error_code(errc::session_closed);
      changed_locked();
      return;
    }
    phase = Phase::waiting;
    const std::uint64_t my_attempt = ++attempt;
    wait_stop = std::stop_source();
    std::weak_ptr<State> weak = shared_from_this();
    auto refusal = std::make_shared<detail::RefusalDetail>();
    queue.async_acquire(
        [weak, my_attempt, refusal](std::error_code ec, HeldLock held) {
          if (auto self = weak.lock()) self->on_outcome(my_attempt, ec, std::move(held), refusal->get());
        },
        wait_stop.get_token(), refusal);
  }

  void on_outcome(std::uint64_t my_attempt, std::error_code ec, HeldLock held, std::string refusal) {
    std::lock_guard guard(mutex);
    if (my_attempt != attempt || phase != Phase::waiting) return;  // `held`, if any, releases itself
    if (ec) {
      if (ec == errc::cancelled) return;
      error = ec;
      error_detail = std::move(refusal);
      phase = Phase::stopped;
      changed_locked();
      return;
    }
    std::weak_ptr<State> weak = shared_from_this();
    term = begin_term(std::move(held), [weak](const std::shared_ptr<Term>& lost_term) {
      if (auto self = weak.lock()) self->on_term_lost(lost_term);
    });
    phase = Phase::leading;
    notify_locked(LeadershipEvent::gained, term);
    changed_locked();
  }

  void on_term_lost(const std::shared_ptr<Term>& lost_term) {
    std::lock_guard guard(mutex);
    if (term != lost_term) return;  // resigned or closed first
    term.reset();
    lost_term->end();  // its stop was requested by begin_term's callback, outside this mutex
    notify_locked(LeadershipEvent::lost, lost_term);
    if (phase == Phase::leading) join_locked();  // at the back, on the session's next connection
    changed_locked();
  }

  // Wakes wait_for_leadership() and settles the async waits once the latch no longer waits.
  void changed_locked() {
    changed.notify_all();
    if (waiters.empty() || phase == Phase::waiting || phase == Phase::idle) return;
    const auto outcome = settled_outcome_locked();
    for (auto& [id, settle] : std::exchange(waiters, {})) settle(outcome.first, outcome.second);
  }

  // What a wait for leadership learns once the latch leads, stopped or was closed.
  std::pair<std::error_code, std::shared_ptr<Term>> settled_outcome_locked() const {
    if (phase == Phase::leading) return {{}, term};
    if (phase == Phase::stopped) return {error ? error : make_error_code(errc::session_closed), nullptr};
    return {make_error_code(errc::cancelled), nullptr};
  }

  // Listeners run on the session's callback thread, in the order the events happened.
  void notify_locked(LeadershipEvent event, const std::shared_ptr<Term>& which) {
    if (listeners.empty()) return;
    std::vector<std::shared_ptr<Listener>> snapshot;
    for (const auto& [id, listener] : listeners) snapshot.push_back(listener);
    core->post_callback([snapshot = std::move(snapshot), event, which] {
      const Leadership leadership(detail::Internals::key(), which);
      // One listener that throws does not keep the event from the others.
      for (const auto& listener : snapshot)
        detail::SessionCore::run_user_callback([&] { (*listener)(event, leadership); });
    });
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const ElectionQueue queue;

  mutable std::mutex mutex;
  std::condition_variable_any changed;
  Phase phase = Phase::idle;
  std::uint64_t attempt = 0;
  std::stop_source wait_stop;
  std::shared_ptr<Term> term;
  std::error_code error;
  std::string error_detail;  // what the error was about, when the code alone does not say
  std::vector<std::pair<std::uint64_t, std::shared_ptr<Listener>>> listeners;
  std::uint64_t next_listener_id = 1;
  // Pending async_wait_for_leadership() calls (by id): each settles once, without blocking.
  using Settle = std::function<void(std::error_code, const std::shared_ptr<Term>&)>;
  std::vector<std::pair<std::uint64_t, Settle>> waiters;
  std::uint64_t next_waiter_id = 1;
};

LeaderLatch::LeaderLatch(Session& session, std::string path, ElectionOptions options)
    : state_(std::make_shared<State>(session, detail::valid_path(std::move(path), "election path"), options)) {}

std::optional<LeaderLatch> LeaderLatch::make(Session& session, std::string path, ElectionOptions options,
                                             std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<LeaderLatch>(std::in_place, session, std::move(path), std::move(options)); });
}

LeaderLatch::~LeaderLatch() { close(); }

void LeaderLatch::start(std::error_code& ec) noexcept {
  detail::without_exceptions(ec, [&] { start(); });
}

std::optional<Leadership> LeaderLatch::wait_for_leadership(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                           std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    auto term = wait_for_leadership(timeout, stop);
    if (!term) ec = make_error_code(stop.stop_requested() ? errc::cancelled : errc::timed_out);
    return term;
  });
}

std::vector<Participant> LeaderLatch::participants(std::error_code& ec) const noexcept {
  return detail::without_exceptions(ec, [&] { return participants(); });
}

std::optional<Participant> LeaderLatch::leader(std::error_code& ec) const noexcept {
  return detail::without_exceptions(ec, [&] { return leader(); });
}

const std::string& LeaderLatch::path() const { return state_->path; }

void LeaderLatch::start() {
  std::lock_guard guard(state_->mutex);
  switch (state_->phase) {
    case State::Phase::idle:
    case State::Phase::stopped: state_->join_locked(); break;
    case State::Phase::closed:
      throw Error(make_error_code(errc::cancelled), "start leader latch", state_->path, "the latch was closed");
    default: break;
  }
}

void LeaderLatch::close() {
  std::shared_ptr<Term> ended;
  {
    std::lock_guard guard(state_->mutex);
    if (state_->phase == State::Phase::closed) return;
    state_->phase = State::Phase::closed;
    state_->wait_stop.request_stop();  // a waiting contender deletes its node
    ended = std::exchange(state_->term, nullptr);
    if (ended) state_->notify_locked(LeadershipEvent::resigned, ended);
    state_->changed_locked();
  }
  if (ended) ended->end();  // outside the mutex: stop callbacks may call the latch
}

bool LeaderLatch::is_leader() const {
  std::lock_guard guard(state_->mutex);
  return state_->term && !state_->term->over();
}

Leadership LeaderLatch::leadership() const {
  std::lock_guard guard(state_->mutex);
  return Leadership(detail::Internals::key(), state_->term);
}

std::optional<Leadership> LeaderLatch::wait_for_leadership(std::chrono::nanoseconds timeout, std::stop_token stop) {
  std::unique_lock guard(state_->mutex);
  if (state_->phase == State::Phase::idle)
    throw Error(make_error_code(errc::invalid_argument), "wait for leadership", state_->path,
                "start() the latch first");
  auto settled = [&] { return state_->phase != State::Phase::waiting; };
  if (timeout < std::chrono::nanoseconds::zero()) state_->changed.wait(guard, stop, settled);
  else state_->changed.wait_for(guard, stop, timeout, settled);
  switch (state_->phase) {
    case State::Phase::leading: return Leadership(detail::Internals::key(), state_->term);
    case State::Phase::stopped: throw Error(state_->error, "wait for leadership", state_->path, state_->error_detail);
    case State::Phase::closed:
      throw Error(make_error_code(errc::cancelled), "wait for leadership", state_->path, "the latch was closed");
    default: return std::nullopt;
  }
}

void LeaderLatch::async_wait_for_leadership(std::chrono::nanoseconds timeout, LeadershipHandler handler,
                                            std::stop_token stop) {
  // One outcome, whichever comes first: the latch settles, the timeout passes, stop is requested.
  struct Wait {
    std::mutex mutex;
    bool done = false;
    std::uint64_t id = 0;  // in the latch's waiters
    std::unique_ptr<boost::asio::steady_timer> timer;  // on the worker thread only
    std::unique_ptr<std::stop_callback<std::function<void()>>> on_stop;
  };
  auto wait = std::make_shared<Wait>();
  const auto core = state_->core;
  auto settle = [wait, core, weak_state = std::weak_ptr<State>(state_), handler = std::move(handler)](
                    std::error_code ec, const std::shared_ptr<Term>& term) {
    {
      std::lock_guard guard(wait->mutex);
      if (std::exchange(wait->done, true)) return;
    }
    boost::asio::post(core->worker(), [wait] {
      if (wait->timer) wait->timer->cancel();
    });
    core->post_callback([wait, weak_state, handler, ec, term] {
      std::unique_ptr<std::stop_callback<std::function<void()>>> on_stop;
      {
        std::lock_guard guard(wait->mutex);
        on_stop = std::move(wait->on_stop);
      }
      on_stop.reset();  // off every lock: its destructor waits for a running stop callback
      if (auto state = weak_state.lock()) {
        std::lock_guard guard(state->mutex);
        std::erase_if(state->waiters, [id = wait->id](const auto& entry) { return entry.first == id; });
      }
      handler(ec, Leadership(detail::Internals::key(), term));
    });
  };
  {
    std::lock_guard guard(state_->mutex);
    if (state_->phase == State::Phase::idle)
      throw Error(make_error_code(errc::invalid_argument), "wait for leadership", state_->path,
                  "start() the latch first");
    wait->id = state_->next_waiter_id++;
    if (state_->phase != State::Phase::waiting) {
      const auto outcome = state_->settled_outcome_locked();
      settle(outcome.first, outcome.second);
      return;
    }
    if (timeout == std::chrono::nanoseconds::zero()) {
      settle(make_error_code(errc::timed_out), nullptr);
      return;
    }
    state_->waiters.emplace_back(wait->id, settle);
  }
  if (timeout > std::chrono::nanoseconds::zero()) {
    boost::asio::post(core->worker(), [wait, settle, timeout, core] {
      {
        std::lock_guard guard(wait->mutex);
        if (wait->done) return;
        wait->timer = std::make_unique<boost::asio::steady_timer>(core->worker(), timeout);
      }
      wait->timer->async_wait([settle](boost::system::error_code ec) {
        if (!ec) settle(make_error_code(errc::timed_out), nullptr);
      });
    });
  }
  if (stop.stop_possible()) {
    auto on_stop = std::make_unique<std::stop_callback<std::function<void()>>>(
        stop, [settle] { settle(make_error_code(errc::cancelled), nullptr); });
    std::lock_guard guard(wait->mutex);
    if (!wait->done) wait->on_stop = std::move(on_stop);
    else core->post_callback([on_stop = std::shared_ptr(std::move(on_stop))] {});  // destroyed off this lock
  }
}

std::error_code LeaderLatch::error() const {
  std::lock_guard guard(state_->mutex);
  return state_->error;
}

Subscription LeaderLatch::on_change(std::function<void(LeadershipEvent, const Leadership&)> listener) {
  std::lock_guard guard(state_->mutex);
  const std::uint64_t id = state_->next_listener_id++;
  state_->listeners.emplace_back(id, std::make_shared<State::Listener>(std::move(listener)));
  return Subscription([weak = std::weak_ptr<State>(state_), id] {
    auto state = weak.lock();
    if (!state) return;
    std::lock_guard inner(state->mutex);
    std::erase_if(state->listeners, [id](const auto& entry) { return entry.first == id; });
  });
}

bool LeaderLatch::resign() {
  std::shared_ptr<Term> ended;
  {
    std::lock_guard guard(state_->mutex);
    if (state_->phase != State::Phase::leading || !state_->term) return false;
    ended = std::exchange(state_->term, nullptr);
  }
  // Outside the mutex: stop callbacks on ended_token() may call the latch. The term is no longer
  // ours (is_leader() is false), and nothing else ends it twice.
  ended->ended.request_stop();
  std::lock_guard guard(state_->mutex);
  ended->held.release();  // the delete is sent before our new node's create: the next participant leads
  state_->notify_locked(LeadershipEvent::resigned, ended);
  if (state_->phase == State::Phase::leading) state_->join_locked();  // unless closed meanwhile
  state_->changed_locked();
  return true;
}

std::vector<Participant> LeaderLatch::participants() const {
  return to_participants(detail::list_contenders(state_->core, state_->path, 1));
}

std::optional<Participant> LeaderLatch::leader() const { return first_leader(participants()); }

// ---- LeaderSelector ----

struct LeaderSelector::State {
  State(Session& session, std::string checked, LeadershipFunction leadership_function, const SelectorOptions& options)
      : core(detail::Internals::core(session)),
        path(std::move(checked)),
        queue(session, path, options, "leader selector", "zkr::LeaderSelector", ElectionLayout::curator_lock),
        function(std::move(leadership_function)),
        auto_requeue(options.auto_requeue) {}

  // The selector's thread: queue, lead, end the term, queue again.
  void run(std::stop_token stop) {
    while (!stop.stop_requested()) {
      HeldLock held;
      try {
        held = queue.acquire(stop);
      } catch (const Error& e) {
        if (e.code() != errc::cancelled) {
          std::lock_guard guard(mutex);
          error = e.code();
          exception = std::current_exception();  // its message names what refused us
        }
        break;
      } catch (...) {
        std::lock_guard guard(mutex);
        exception = std::current_exception();
        break;
      }
      auto term = begin_term(std::move(held), nullptr);
      {
        std::lock_guard guard(mutex);
        current = term;
        ++terms;
      }
      {
        std::stop_callback end_on_close(stop, [term] { term->ended.request_stop(); });
        try {
          function(Leadership(detail::Internals::key(), term));
        } catch (...) {
          std::lock_guard guard(mutex);
          exception = std::current_exception();
        }
      }
      term->end();
      std::unique_lock guard(mutex);
      current.reset();
      if (auto_requeue) continue;
      idle = true;
      changed.wait(guard, stop, [this] { return requeue_requested; });
      idle = false;
      requeue_requested = false;
    }
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const ElectionQueue queue;
  const LeadershipFunction function;
  const bool auto_requeue;

  mutable std::mutex mutex;
  std::condition_variable_any changed;
  bool closed = false;
  bool idle = false;  // a term ended and the selector waits for requeue()
  bool requeue_requested = false;
  std::shared_ptr<Term> current;
  std::uint64_t terms = 0;
  std::error_code error;
  std::exception_ptr exception;
  std::jthread thread;  // last: stopped and joined before the rest goes
};

LeaderSelector::LeaderSelector(Session& session, std::string path, LeadershipFunction function,
                               SelectorOptions options) {
  path = detail::valid_path(std::move(path), "election path");
  if (!function)
    throw Error(make_error_code(errc::invalid_argument), "leader selector", path, "the leadership function is empty");
  state_ = std::make_shared<State>(session, std::move(path), std::move(function), options);
}

std::optional<LeaderSelector> LeaderSelector::make(Session& session, std::string path, LeadershipFunction function,
                                                   SelectorOptions options, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<LeaderSelector>(std::in_place, session, std::move(path), std::move(function),
                                         std::move(options));
  });
}

LeaderSelector::~LeaderSelector() { close(); }

void LeaderSelector::start(std::error_code& ec) noexcept {
  detail::without_exceptions(ec, [&] { start(); });
}

const std::string& LeaderSelector::path() const { return state_->path; }

void LeaderSelector::start() {
  std::lock_guard guard(state_->mutex);
  if (state_->closed)
    throw Error(make_error_code(errc::cancelled), "start leader selector", state_->path, "the selector was closed");
  if (state_->thread.joinable()) return;
  // The thread keeps the state alive: the selector may be destroyed by its own leadership
  // function, and the thread then finishes the term on its own.
  state_->thread = std::jthread([state = state_](std::stop_token stop) { state->run(stop); });
}

bool LeaderSelector::requeue() {
  std::lock_guard guard(state_->mutex);
  if (state_->closed || !state_->idle || state_->requeue_requested) return false;
  state_->requeue_requested = true;
  state_->changed.notify_all();
  return true;
}

void LeaderSelector::close() {
  std::jthread thread;
  {
    std::lock_guard guard(state_->mutex);
    state_->closed = true;
    thread = std::move(state_->thread);
  }
  // Outside the mutex: the stop ends the term, whose stop callbacks may call the selector.
  thread.request_stop();
  if (thread.get_id() == std::this_thread::get_id()) {
    // Called (or destroyed) from the leadership function: a thread cannot join itself. It ends
    // the term once the function returns and exits on its own, keeping the state alive.
    thread.detach();
    return;
  }
  if (thread.joinable()) thread.join();
}

bool LeaderSelector::is_leader() const {
  std::lock_guard guard(state_->mutex);
  return state_->current && !state_->current->over();
}

std::uint64_t LeaderSelector::terms() const {
  std::lock_guard guard(state_->mutex);
  return state_->terms;
}

std::error_code LeaderSelector::error() const {
  std::lock_guard guard(state_->mutex);
  return state_->error;
}

std::exception_ptr LeaderSelector::last_exception() const {
  std::lock_guard guard(state_->mutex);
  return state_->exception;
}

std::vector<Participant> LeaderSelector::participants() const {
  return to_participants(detail::list_contenders(state_->core, state_->path, 1));
}

std::optional<Participant> LeaderSelector::leader() const { return first_leader(participants()); }

}  // namespace zkr
