// SPDX-License-Identifier: Apache-2.0
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include <algorithm>
#include <future>
#include <mutex>
#include <new>
#include <utility>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "acquisition.hpp"
#include "internals.hpp"
#include "path_check.hpp"
#include "contender_queue.hpp"
#include "request_limits.hpp"
#include "thread_holds.hpp"
#include "without_exceptions.hpp"

namespace zkr {

using detail::Contender;
using detail::ContenderRequest;

// ---- Grant ----

FencingToken Grant::token() const { return contender_ ? contender_->token() : FencingToken{}; }
std::string Grant::node_path() const { return contender_ ? contender_->node_path() : std::string(); }
std::int64_t Grant::session_id() const { return contender_ ? contender_->session_id() : 0; }
bool Grant::lost() const { return contender_ && contender_->lost(); }
std::optional<LossReason> Grant::loss_reason() const {
  return contender_ ? contender_->loss_reason() : std::nullopt;
}
std::stop_token Grant::lost_token() const { return contender_ ? contender_->lost_token() : std::stop_token{}; }
void Grant::on_lost(std::function<void(LossReason)> callback) {
  if (contender_) contender_->on_lost(std::move(callback));
}

// ---- HeldLock ----

using LetGo = detail::ThreadHolds::LetGo;

HeldLock::HeldLock(detail::Passkey, std::shared_ptr<detail::Contender> contender, std::shared_ptr<detail::Hold> hold)
    : Grant(std::move(contender)) {
  if (!contender_) return;
  hold_ = hold ? std::move(hold) : detail::Contender::spare_hold(contender_);
  if (!hold_) hold_ = std::make_shared<detail::Hold>(false);
}

// The hold moves with the HeldLock; a moved one binds no thread (recipes/thread_holds.hpp).
HeldLock::HeldLock(HeldLock&& other) noexcept : Grant(std::move(other)), hold_(std::move(other.hold_)) {
  if (hold_) detail::ThreadHolds::instance().unbind(*hold_);
}

HeldLock& HeldLock::operator=(HeldLock&& other) noexcept {
  if (this != &other) {
    release();
    contender_ = std::move(other.contender_);
    hold_ = std::move(other.hold_);
    if (hold_) detail::ThreadHolds::instance().unbind(*hold_);
  }
  return *this;
}
HeldLock::~HeldLock() { release(); }

void HeldLock::release() {
  if (hold_ && detail::ThreadHolds::instance().let_go(*hold_) == LetGo::last) contender_->release();
}

ReleaseOutcome HeldLock::release_and_confirm(std::chrono::milliseconds timeout) {
  if (!hold_)
    throw Error(make_error_code(errc::invalid_argument), "release", node_path(), "this HeldLock holds nothing");
  switch (detail::ThreadHolds::instance().let_go(*hold_)) {
    case LetGo::already:
      throw Error(make_error_code(errc::invalid_argument), "release", node_path(), "already released");
    case LetGo::not_last: return contender_->lost() ? ReleaseOutcome::lost : ReleaseOutcome::held_to_the_end;
    case LetGo::last: break;
  }
  auto answer = std::make_shared<std::promise<ReleaseOutcome>>();
  std::future<ReleaseOutcome> answered = answer->get_future();
  if (!contender_->release([answer](ReleaseOutcome outcome) { answer->set_value(outcome); }))
    throw Error(make_error_code(errc::invalid_argument), "release", node_path(), "already released");
  if (answered.wait_for(timeout) != std::future_status::ready) return ReleaseOutcome::unconfirmed;
  return answered.get();
}

std::string_view to_string(ReleaseOutcome outcome) {
  switch (outcome) {
    case ReleaseOutcome::held_to_the_end: return "held to the end";
    case ReleaseOutcome::lost: return "lost";
    case ReleaseOutcome::unconfirmed: return "unconfirmed";
  }
  return "unknown";
}

// ---- Lock ----

Lock::Lock(Session& session, std::string path, LockOptions options)
    : Lock(session, std::move(path), std::move(options), ContenderRole::exclusive) {}

Lock::Lock(Session& session, std::string path, LockOptions options, ContenderRole role)
    : core_(detail::Internals::core(session)),
      path_(detail::valid_path(std::move(path), "lock path")),
      options_(detail::checked_lock_options(*core_, path_, std::move(options), "lock")),
      role_(role),
      identity_(detail::ThreadHolds::new_lock_identity()) {}

std::optional<Lock> Lock::make(Session& session, std::string path, LockOptions options, std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<Lock>(std::in_place, session, std::move(path), std::move(options)); });
}

Lock::Lock(Lock&& other) noexcept = default;
Lock& Lock::operator=(Lock&& other) noexcept = default;
Lock::~Lock() = default;

const std::shared_ptr<detail::SessionCore>& Lock::core() const {
  if (!core_) throw Error(make_error_code(errc::invalid_argument), "lock", path_, "this Lock was moved from");
  return core_;
}

namespace detail {

LockOptions checked_lock_options(const SessionCore& core, const std::string& path, LockOptions options,
                                 std::string_view recipe) {
  if (options.owner_data.empty()) options.owner_data = default_owner_data();
  if (auto problem = request_size_problem(path.size(), options.owner_data.size()); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), recipe, path, "owner_data: " + problem);
  // The server would answer "invalid ACL": say what is actually missing.
  if (options.acl != NodeAcl::open && !core.options().credentials)
    throw Error(make_error_code(errc::invalid_argument), recipe, path,
                "a creator-only ACL needs SessionOptions::credentials");
  return options;
}

ContenderRequest one_holder_request(const std::string& path, const LockOptions& options, ContenderRole role,
                                    std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal) {
  ContenderRequest request;
  request.parent = path;
  request.policy = {role, 1};
  request.owner_data = options.owner_data;
  request.acl = options.acl;
  request.timeout = timeout;
  request.batchable = true;  // the acquisitions an AcquisitionBatch takes in (zkr/lock.hpp): these only
  // A semaphore's path counts our node as one of its N leases, and we would count its leases as
  // our predecessors: neither recipe's promise would hold. The semaphore records its limit in the
  // path node; refuse a path that carries one (the semaphore refuses a path without one). The path
  // is another recipe's, whatever the limits: errc::incompatible_peer, not limit_mismatch.
  request.check_parent = [refusal = std::move(refusal)](const std::string& data) -> std::error_code {
    const auto limit = detail::semaphore_limit_of(data);
    if (!limit) return {};
    refusal->set(fmt::format(
        "a semaphore's: it records max_leases={}; a lock, read/write lock or election cannot share it",
        *limit));
    return make_error_code(errc::incompatible_peer);
  };
  return request;
}

}  // namespace detail

detail::Acquisition Lock::acquisition() const {
  return {core(), "acquire lock", path_, [this](std::chrono::nanoseconds timeout, auto refusal) {
            return detail::one_holder_request(path_, options_, role_, timeout, std::move(refusal));
          }};
}

// The blocking forms, on the calling thread: refused or reentered if the thread holds the lock
// already (recipes/thread_holds.hpp), else acquired, with a hold bound to the thread. The
// HeldLock is built in the return statement itself (guaranteed elision): a move on the way would
// unbind it.
struct Lock::ByThisThread {
  const Lock& lock;

  struct Granted {
    std::shared_ptr<Contender> contender;
    std::shared_ptr<detail::Hold> hold;
  };

  template <typename Acquire>
  Granted grant(Acquire acquire, std::error_code* ec) const {
    const detail::AcquisitionByThread mine{lock.core().get(), lock.path_, lock.role_, lock.identity_,
                                           lock.options_.reentrant};
    auto& holds = detail::ThreadHolds::instance();
    auto verdict = holds.check(mine);
    if (verdict.refusal) {
      if (!ec) throw Error(verdict.refusal, "acquire lock", lock.path_, verdict.why);
      *ec = verdict.refusal;
      return {};
    }
    if (verdict.reentered) return {std::move(verdict.reentered), std::move(verdict.hold)};
    auto contender = acquire();
    if (!contender) return {};
    auto hold = holds.bind(mine, contender);
    return {std::move(contender), std::move(hold)};
  }

  static std::optional<HeldLock> held(Granted granted) {
    if (!granted.contender) return std::nullopt;
    return std::optional<HeldLock>(std::in_place, detail::Internals::key(), std::move(granted.contender),
                                   std::move(granted.hold));
  }
};

// Giving up is reported in ec without an exception on the way (timeouts are a normal outcome).
std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                              std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return ByThisThread::held(ByThisThread{*this}.grant(
        [&] { return acquisition().try_for(timeout, std::move(stop), ec); }, &ec));
  });
}

std::optional<HeldLock> Lock::try_acquire(std::error_code& ec) noexcept {
  return try_acquire_for(std::chrono::nanoseconds::zero(), {}, ec);
}

HeldLock Lock::acquire(std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return acquire(std::move(stop)); });
}

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return ByThisThread::held(
      ByThisThread{*this}.grant([&] { return acquisition().try_for(timeout, std::move(stop)); }, nullptr));
}

std::optional<HeldLock> Lock::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

HeldLock Lock::acquire(std::stop_token stop) {
  auto granted = ByThisThread{*this}.grant([&] { return acquisition().wait(std::move(stop)); }, nullptr);
  return HeldLock(detail::Internals::key(), std::move(granted.contender), std::move(granted.hold));
}

void Lock::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  detail::start_lock_async(core(), {path_, options_, role_}, timeout, std::move(handler), std::move(stop));
}

std::vector<ContenderInfo> Lock::contenders() const {
  return detail::list_contenders(core(), path_, 1);
}

std::vector<ContenderInfo> Lock::contenders(std::error_code& ec) const noexcept {
  return detail::without_exceptions(ec, [&] { return contenders(); });
}

// ---- AcquisitionBatch ----

AcquisitionBatch::AcquisitionBatch(Session& session) : core_(detail::Internals::core(session)) {
  std::lock_guard lock(core_->mutex());
  open_ = core_->open_batch_locked();
}

AcquisitionBatch::~AcquisitionBatch() {
  try {
    send();
  } catch (...) {
    // Out of memory while sending: the acquisitions not sent fail with the session's end.
  }
}

void AcquisitionBatch::send() {
  if (!std::exchange(open_, false)) return;
  std::lock_guard lock(core_->mutex());
  core_->send_batch_locked();
}

// ---- ReadWriteLock ----

ReadWriteLock::ReadWriteLock(Session& session, std::string path, LockOptions options)
    : read_(session, path, options, ContenderRole::read), write_(session, path, options, ContenderRole::write) {}

std::optional<ReadWriteLock> ReadWriteLock::make(Session& session, std::string path, LockOptions options,
                                                 std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<ReadWriteLock>(std::in_place, session, std::move(path), std::move(options)); });
}

}  // namespace zkr
