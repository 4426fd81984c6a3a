// SPDX-License-Identifier: Apache-2.0
#include <zkr/multi_lock.hpp>

#include <algorithm>
#include <atomic>
#include <future>
#include <mutex>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <zkr/error.hpp>

#include "acquisition.hpp"
#include "acquisition_count.hpp"
#include "contender_queue.hpp"
#include "contender_wait.hpp"
#include "internals.hpp"
#include "thread_holds.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"

namespace zkr {

using detail::Contender;
using Contenders = std::vector<std::shared_ptr<Contender>>;

namespace detail {
namespace {

bool worth_waiting_after(std::error_code tried) {
  // A path someone else holds, or a session that is not usable right now: a MultiLock that may
  // wait queues on it (the queue waits for the session as a Lock's acquire does).
  return tried == errc::would_block || tried == errc::session_lost || tried == condition::connection_trouble;
}

// One acquisition of a MultiLock, on the session's callback thread: rounds of tries without
// waiting (all remaining paths at once, batched), each followed by a wait for the first path of
// the round that someone else held. The ordering rule lives here, in decide_round_locked: a wait
// starts only while every path held sorts before the one waited for.
class MultiAcquisition : public std::enable_shared_from_this<MultiAcquisition> {
 public:
  // The outcome, with the path that failed and the refusal's words (empty on success).
  using Done = std::function<void(std::error_code, std::string failed_path, std::string why, Contenders)>;

  MultiAcquisition(std::shared_ptr<SessionCore> core, const std::vector<std::string>& paths,
                   const LockOptions& options, std::chrono::nanoseconds timeout, std::stop_token stop, Done done)
      : core_(std::move(core)),
        paths_(paths),
        options_(options),
        no_wait_(timeout == std::chrono::nanoseconds::zero()),
        stop_(cancel_.get_token()),
        forward_stop_(std::move(stop), [this] { cancel_.request_stop(); }),
        done_(std::move(done)),
        held_(paths_.size()),
        refusal_(std::make_shared<RefusalDetail>()) {
    if (timeout > std::chrono::nanoseconds::zero()) deadline_ = Clock::now() + timeout;
    // One acquisition per path for the metrics, decided here once the whole is (acquisition_count.hpp):
    // a path granted and let go of in an earlier round counts nothing.
    counts_.reserve(paths_.size());
    for (const auto& path : paths_) counts_.emplace_back(*core_, path, true);
  }

  void start() {
    if (deadline_) arm_deadline();
    std::unique_lock lock(mutex_);
    try_round_locked(lock);
  }

 private:
  ContenderRequest request(std::size_t index, std::chrono::nanoseconds timeout) const {
    auto request = one_holder_request(paths_[index], options_, ContenderRole::exclusive, timeout, refusal_);
    request.counted = counts_[index].step_part();
    return request;
  }

  // Every path from next_ on, asked for at once without waiting; decide_round_locked takes the outcome.
  void try_round_locked(std::unique_lock<std::mutex>& lock) {
    if (stop_.stop_requested()) return fail_locked(make_error_code(errc::cancelled), next_);
    tried_from_ = next_;
    tried_.assign(paths_.size() - next_, {});
    pending_ = tried_.size();
    const auto self = shared_from_this();
    lock.unlock();  // contenders take the session mutex; their outcomes come on the callback thread
    bool batched = false;
    {
      std::lock_guard session(core_->mutex());
      batched = core_->open_batch_locked();
    }
    for (std::size_t i = tried_from_; i < paths_.size(); ++i) {
      auto asked = request(i, std::chrono::nanoseconds::zero());
      // Only into a batch of our own: one the caller opened would hold the creates until it sends.
      asked.batchable = batched;
      start_contender_async(
          core_, std::move(asked),
          [self, i](std::error_code ec, const std::shared_ptr<Contender>& contender) { self->tried(i, ec, contender); },
          stop_);
    }
    if (batched) {
      std::lock_guard session(core_->mutex());
      core_->send_batch_locked();
    }
    lock.lock();
  }

  // A path held while the acquisition goes on is let go of as soon as it is lost: a lost grant
  // keeps its session's handle open (the server may still have its node, see SessionCore), and
  // with it every node of that session - among them our own waiting node on a later path, left
  // behind when the session was replaced. Our new node on that path would queue behind it until
  // that session's close timer (a session timeout later). succeed_locked takes an empty place
  // again, as it does a lost one.
  void keep_locked(std::size_t index, std::shared_ptr<Contender> contender) {
    contender->on_lost([self = weak_from_this(), index, granted = std::weak_ptr<Contender>(contender)](LossReason) {
      auto acquisition = self.lock();
      if (!acquisition) return;
      std::lock_guard lock(acquisition->mutex_);
      auto& held = acquisition->held_;
      // Only while it is still ours: once the acquisition ends, its grants (if any) are the caller's.
      if (index >= held.size() || !held[index] || held[index] != granted.lock()) return;
      std::exchange(held[index], nullptr)->release();
    });
    held_[index] = std::move(contender);
  }

  void tried(std::size_t index, std::error_code ec, std::shared_ptr<Contender> contender) {
    std::unique_lock lock(mutex_);
    tried_[index - tried_from_] = {ec, ec ? nullptr : std::move(contender)};
    if (--pending_ == 0) decide_round_locked(lock);
  }

  // Keeps the paths granted in order up to the first that was not; lets go of those after it at
  // once (holding a path while waiting for one that sorts before it could close a cycle of waits).
  void decide_round_locked(std::unique_lock<std::mutex>& lock) {
    std::size_t first_refused = paths_.size();
    for (std::size_t i = tried_from_; i < paths_.size(); ++i) {
      auto& [ec, contender] = tried_[i - tried_from_];
      if (first_refused == paths_.size() && !ec) keep_locked(i, std::move(contender));
      else if (first_refused == paths_.size()) first_refused = i;
      else if (contender) contender->release();
    }
    const std::error_code refused =
        first_refused == paths_.size() ? std::error_code() : tried_[first_refused - tried_from_].first;
    tried_.clear();
    if (!refused) return succeed_locked(lock);
    if (no_wait_ || !worth_waiting_after(refused)) return fail_locked(refused, first_refused);
    next_ = first_refused;
    wait_locked();
  }

  void wait_locked() {
    std::chrono::nanoseconds timeout(-1);
    if (deadline_) {
      timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(*deadline_ - Clock::now());
      if (timeout <= std::chrono::nanoseconds::zero()) return fail_locked(make_error_code(errc::timed_out), next_);
    }
    const std::size_t index = next_;
    auto asked = request(index, timeout);
    asked.batchable = false;  // a wait goes out at once, whatever batch is open
    start_contender_async(
        core_, std::move(asked),
        [self = shared_from_this(), index](std::error_code ec, const std::shared_ptr<Contender>& contender) {
          std::unique_lock lock(self->mutex_);
          if (ec) return self->fail_locked(ec, index);
          self->keep_locked(index, contender);
          self->next_ = index + 1;
          if (self->next_ == self->paths_.size()) return self->succeed_locked(lock);
          self->try_round_locked(lock);
        },
        stop_);
  }

  void succeed_locked(std::unique_lock<std::mutex>& lock) {
    // A path held since an earlier round may have been lost meanwhile (its session, say; then
    // keep_locked let go of it already): take it again, and, to keep the order, every path after it.
    std::size_t lost = 0;
    {
      // Decided under the session mutex, which every loss takes: no path is lost between this check
      // and the grant being counted, so each path's hold is counted from here to its end.
      std::lock_guard session(core_->mutex());
      while (lost < held_.size() && held_[lost] && held_[lost]->held_locked()) ++lost;
      if (lost == held_.size())
        for (const auto& count : counts_) count.decide({});
    }
    if (lost == held_.size()) return finish_locked({}, {});
    const std::size_t from = lost;
    release_from_locked(from);
    if (no_wait_) return fail_locked(make_error_code(errc::session_lost), from);
    next_ = from;
    try_round_locked(lock);
  }

  void release_from_locked(std::size_t from) {
    for (std::size_t i = held_.size(); i-- > from;)
      if (auto contender = std::exchange(held_[i], nullptr)) contender->release();
  }

  void fail_locked(std::error_code ec, std::size_t index) {
    if (ec == errc::cancelled && timed_out_) ec = make_error_code(errc::timed_out);
    release_from_locked(0);
    finish_locked(ec, index < paths_.size() ? paths_[index] : std::string());
  }

  void finish_locked(std::error_code ec, std::string failed_path) {
    disarm_deadline();
    for (const auto& count : counts_) count.decide(ec);  // a success was decided by succeed_locked
    Contenders granted = ec ? Contenders{} : std::move(held_);
    // Always from the callback thread, never from the caller's stack.
    core_->post_callback([done = std::move(done_), ec, failed_path = std::move(failed_path),
                          why = ec ? refusal_->get() : std::string(), granted = std::move(granted)]() mutable {
      done(ec, std::move(failed_path), std::move(why), std::move(granted));
    });
  }

  // The deadline of a bounded wait ends the rounds too: a round's try may wait for the connection
  // to come back (a Lock's try_acquire does), which must not outlast the caller's timeout. Timers
  // belong to the session's worker thread.
  void arm_deadline() {
    boost::asio::post(core_->worker(), [self = weak_from_this(), at = *deadline_] {
      auto acquisition = self.lock();
      if (!acquisition) return;
      acquisition->timer_ = std::make_unique<boost::asio::steady_timer>(acquisition->core_->worker(), at);
      acquisition->timer_->async_wait([self](boost::system::error_code ec) {
        auto again = self.lock();
        if (ec || !again) return;
        again->timed_out_ = true;
        again->cancel_.request_stop();
      });
    });
  }

  void disarm_deadline() {
    if (!deadline_) return;
    boost::asio::post(core_->worker(), [self = weak_from_this()] {
      if (auto acquisition = self.lock(); acquisition && acquisition->timer_) acquisition->timer_->cancel();
    });
  }

  const std::shared_ptr<SessionCore> core_;
  const std::vector<std::string> paths_;  // sorted
  const LockOptions options_;
  const bool no_wait_;
  std::optional<Clock::time_point> deadline_;
  // What every contender of this acquisition is cancelled by: the caller's stop request, or the
  // deadline (timed_out_ then tells the two apart).
  std::stop_source cancel_;
  const std::stop_token stop_;
  const std::stop_callback<std::function<void()>> forward_stop_;
  std::atomic<bool> timed_out_{false};
  std::unique_ptr<boost::asio::steady_timer> timer_;  // on the worker thread only
  Done done_;
  std::vector<AcquisitionCount> counts_;

  std::mutex mutex_;
  Contenders held_;      // granted, by index; none at or after next_ while a wait is on
  std::size_t next_ = 0;  // the first path not held
  std::size_t tried_from_ = 0;
  std::vector<std::pair<std::error_code, std::shared_ptr<Contender>>> tried_;  // the current round's outcomes
  std::size_t pending_ = 0;
  std::shared_ptr<RefusalDetail> refusal_;
};

}  // namespace
}  // namespace detail

// ---- HeldMultiLock ----

struct HeldMultiLock::LossState {
  void lose(LossReason why, const std::string& path) {
    std::vector<std::function<void(LossReason)>> to_tell;
    {
      std::lock_guard lock(mutex);
      if (reason) return;  // the whole is lost once
      reason = why;
      lost_path = path;
      to_tell = std::move(callbacks);
    }
    source.request_stop();
    for (const auto& callback : to_tell) detail::SessionCore::run_user_callback([&] { callback(why); });
  }

  std::stop_source source;
  mutable std::mutex mutex;
  std::optional<LossReason> reason;
  std::string lost_path;
  std::vector<std::function<void(LossReason)>> callbacks;
};

HeldMultiLock::HeldMultiLock(detail::Passkey, std::vector<HeldLock> locks) : locks_(std::move(locks)) {
  if (locks_.empty()) return;
  loss_ = std::make_shared<LossState>();
  for (auto& held : locks_)
    held.on_lost([loss = loss_, path = held.node_path()](LossReason reason) {
      loss->lose(reason, path.substr(0, path.rfind('/')));
    });
}

// Each HeldLock moves on its own, so that each unbinds its thread (recipes/thread_holds.hpp).
HeldMultiLock::HeldMultiLock(HeldMultiLock&& other) noexcept : loss_(std::move(other.loss_)) {
  locks_.reserve(other.locks_.size());
  for (auto& held : other.locks_) locks_.push_back(std::move(held));
  other.locks_.clear();
}

HeldMultiLock& HeldMultiLock::operator=(HeldMultiLock&& other) noexcept {
  if (this != &other) {
    release();
    locks_.clear();
    locks_.reserve(other.locks_.size());
    for (auto& held : other.locks_) locks_.push_back(std::move(held));
    other.locks_.clear();
    loss_ = std::move(other.loss_);
  }
  return *this;
}

HeldMultiLock::~HeldMultiLock() { release(); }

void HeldMultiLock::release() {
  for (auto held = locks_.rbegin(); held != locks_.rend(); ++held) held->release();
}

std::vector<FencingToken> HeldMultiLock::tokens() const {
  std::vector<FencingToken> tokens;
  tokens.reserve(locks_.size());
  for (const auto& held : locks_) tokens.push_back(held.token());
  return tokens;
}

FencingToken HeldMultiLock::token(std::string_view path) const {
  for (const auto& held : locks_) {
    const std::string node = held.node_path();
    if (node.size() > path.size() && node.compare(0, path.size(), path) == 0 && node[path.size()] == '/' &&
        node.find('/', path.size() + 1) == std::string::npos)
      return held.token();
  }
  return {};
}

bool HeldMultiLock::lost() const {
  return std::any_of(locks_.begin(), locks_.end(), [](const HeldLock& held) { return held.lost(); });
}

std::optional<LossReason> HeldMultiLock::loss_reason() const {
  if (loss_) {
    std::lock_guard lock(loss_->mutex);
    if (loss_->reason) return loss_->reason;
  }
  // Lost, and the callback thread has not told us yet.
  for (const auto& held : locks_)
    if (auto reason = held.loss_reason()) return reason;
  return std::nullopt;
}

std::string HeldMultiLock::lost_path() const {
  if (loss_) {
    std::lock_guard lock(loss_->mutex);
    if (loss_->reason) return loss_->lost_path;
  }
  for (const auto& held : locks_)
    if (held.lost()) {
      const std::string node = held.node_path();
      return node.substr(0, node.rfind('/'));
    }
  return {};
}

std::stop_token HeldMultiLock::lost_token() const { return loss_ ? loss_->source.get_token() : std::stop_token{}; }

void HeldMultiLock::on_lost(std::function<void(LossReason)> callback) {
  if (!loss_ || locks_.empty()) return;
  std::unique_lock lock(loss_->mutex);
  if (!loss_->reason) {
    loss_->callbacks.push_back(std::move(callback));
    return;
  }
  const LossReason reason = *loss_->reason;
  lock.unlock();
  // Already lost: on the callback thread, as every loss callback runs, through a lost path's
  // grant (which runs it at once there). One is lost: its loss is what set the reason.
  auto lost = std::find_if(locks_.begin(), locks_.end(), [](const HeldLock& held) { return held.lost(); });
  lost->on_lost([callback = std::move(callback), reason](LossReason) { callback(reason); });
}

// ---- MultiLock ----

namespace {

std::vector<std::string> checked_paths(std::vector<std::string> paths) {
  if (paths.empty())
    throw Error(make_error_code(errc::invalid_argument), "multi-lock", {}, "no paths: give at least one");
  for (const auto& path : paths)
    detail::require_valid_path(path, "multi-lock path");
  std::sort(paths.begin(), paths.end());
  if (auto twice = std::adjacent_find(paths.begin(), paths.end()); twice != paths.end())
    throw Error(make_error_code(errc::invalid_argument), "multi-lock", *twice,
                "this path is given twice: a multi-lock would wait for itself");
  return paths;
}

}  // namespace

MultiLock::MultiLock(Session& session, std::vector<std::string> paths, LockOptions options)
    : core_(detail::Internals::core(session)),
      paths_(checked_paths(std::move(paths))),
      identity_(detail::ThreadHolds::new_lock_identity()) {
  options_ = detail::checked_lock_options(*core_, paths_.back(), std::move(options), "multi-lock");
  // The request size check in checked_lock_options counts the path: the longest one decides.
  for (const auto& path : paths_) detail::checked_lock_options(*core_, path, options_, "multi-lock");
}

std::optional<MultiLock> MultiLock::make(Session& session, std::vector<std::string> paths, LockOptions options,
                                         std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<MultiLock>(std::in_place, session, std::move(paths), std::move(options)); });
}

MultiLock::MultiLock(MultiLock&& other) noexcept = default;
MultiLock& MultiLock::operator=(MultiLock&& other) noexcept = default;
MultiLock::~MultiLock() = default;

const std::shared_ptr<detail::SessionCore>& MultiLock::core() const {
  if (!core_)
    throw Error(make_error_code(errc::invalid_argument), "multi-lock", paths_.empty() ? "" : paths_.front(),
                "this MultiLock was moved from");
  return core_;
}

// What a blocking call got: the grants and their holds bound to the calling thread, or why not.
struct MultiLock::Outcome {
  std::error_code ec;
  std::string failed_path;
  std::string why;
  Contenders contenders;
  std::vector<std::shared_ptr<detail::Hold>> holds;

  // Built in place (guaranteed elision): a move on the way would unbind the holds.
  std::vector<HeldLock> locks() && {
    std::vector<HeldLock> locks;
    locks.reserve(contenders.size());
    for (std::size_t i = 0; i < contenders.size(); ++i)
      locks.emplace_back(detail::Internals::key(), std::move(contenders[i]), std::move(holds[i]));
    return locks;
  }
};

// The blocking forms, on the calling thread: refused or reentered as a Lock's are (see
// recipes/thread_holds.hpp), every path checked before anything is asked of the server.
MultiLock::Outcome MultiLock::run(std::chrono::nanoseconds timeout, std::stop_token stop) {
  auto& holds = detail::ThreadHolds::instance();
  const auto& session = core();
  auto mine = [&](const std::string& path) {
    return detail::AcquisitionByThread{session.get(), path, ContenderRole::exclusive, identity_, options_.reentrant};
  };
  Outcome outcome;
  for (const auto& path : paths_) {
    auto verdict = holds.check(mine(path));
    if (verdict.refusal) {
      outcome.ec = verdict.refusal;
      outcome.failed_path = path;
      outcome.why = std::move(verdict.why);
      break;
    }
    if (verdict.reentered) {
      outcome.contenders.push_back(std::move(verdict.reentered));
      outcome.holds.push_back(std::move(verdict.hold));
    }
  }
  if (!outcome.ec && !outcome.contenders.empty() && outcome.contenders.size() != paths_.size()) {
    // Some paths of this thread's grant are lost, the others still held: waiting for the lost ones
    // again while holding the rest could wait for ourselves.
    outcome.ec = make_error_code(errc::would_deadlock);
    outcome.failed_path = paths_.front();
    outcome.why = "this thread holds this multi-lock, which is lost: release it first";
  }
  if (outcome.ec || !outcome.contenders.empty()) {
    if (outcome.ec) {
      // Let go of the holds reentered so far (their HeldLocks would not be the last).
      for (std::size_t i = 0; i < outcome.contenders.size(); ++i)
        HeldLock(detail::Internals::key(), std::move(outcome.contenders[i]), std::move(outcome.holds[i]));
      outcome.contenders.clear();
      outcome.holds.clear();
    }
    return outcome;
  }
  auto result = std::make_shared<std::promise<std::tuple<std::error_code, std::string, std::string, Contenders>>>();
  auto future = result->get_future();
  std::make_shared<detail::MultiAcquisition>(
      session, paths_, options_, timeout, std::move(stop),
      [result](std::error_code ec, std::string failed_path, std::string why, Contenders granted) {
        result->set_value({ec, std::move(failed_path), std::move(why), std::move(granted)});
      })
      ->start();
  std::tie(outcome.ec, outcome.failed_path, outcome.why, outcome.contenders) = future.get();
  if (outcome.ec) return outcome;
  for (std::size_t i = 0; i < paths_.size(); ++i) outcome.holds.push_back(holds.bind(mine(paths_[i]), outcome.contenders[i]));
  return outcome;
}

HeldMultiLock MultiLock::acquire(std::stop_token stop) {
  auto outcome = run(std::chrono::nanoseconds(-1), std::move(stop));
  if (outcome.ec) throw Error(outcome.ec, "acquire multi-lock", outcome.failed_path, outcome.why);
  return HeldMultiLock(detail::Internals::key(), std::move(outcome).locks());
}

std::optional<HeldMultiLock> MultiLock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  auto outcome = run(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(stop));
  if (outcome.ec == condition::gave_up) return std::nullopt;
  if (outcome.ec) throw Error(outcome.ec, "acquire multi-lock", outcome.failed_path, outcome.why);
  return std::optional<HeldMultiLock>(std::in_place, detail::Internals::key(), std::move(outcome).locks());
}

std::optional<HeldMultiLock> MultiLock::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

HeldMultiLock MultiLock::acquire(std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return acquire(std::move(stop)); });
}

std::optional<HeldMultiLock> MultiLock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                        std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&]() -> std::optional<HeldMultiLock> {
    auto outcome = run(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(stop));
    if (outcome.ec) {
      ec = outcome.ec;
      return std::nullopt;
    }
    return std::optional<HeldMultiLock>(std::in_place, detail::Internals::key(), std::move(outcome).locks());
  });
}

std::optional<HeldMultiLock> MultiLock::try_acquire(std::error_code& ec) noexcept {
  return try_acquire_for(std::chrono::nanoseconds::zero(), {}, ec);
}

void MultiLock::async_acquire(std::chrono::nanoseconds timeout, MultiAcquireHandler handler, std::stop_token stop) {
  std::make_shared<detail::MultiAcquisition>(
      core(), paths_, options_, timeout, std::move(stop),
      [handler = std::move(handler)](std::error_code ec, std::string, std::string, Contenders granted) {
        std::vector<HeldLock> locks;
        locks.reserve(granted.size());
        for (auto& contender : granted) locks.emplace_back(detail::Internals::key(), std::move(contender));
        handler(ec, ec ? HeldMultiLock{} : HeldMultiLock(detail::Internals::key(), std::move(locks)));
      })
      ->start();
}

}  // namespace zkr
