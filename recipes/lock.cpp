#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include <algorithm>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "internals.hpp"
#include "contender_queue.hpp"
#include "request_limits.hpp"

namespace zkr {

using detail::Contender;
using detail::ContenderRequest;

// ---- HeldLock ----

HeldLock::HeldLock(detail::Passkey, std::shared_ptr<detail::Contender> contender)
    : contender_(std::move(contender)) {}
HeldLock::HeldLock(HeldLock&&) noexcept = default;
HeldLock& HeldLock::operator=(HeldLock&& other) noexcept {
  if (this != &other) {
    release();
    contender_ = std::move(other.contender_);
  }
  return *this;
}
HeldLock::~HeldLock() { release(); }

FencingToken HeldLock::token() const { return contender_ ? contender_->token() : FencingToken{}; }
std::string HeldLock::node_path() const { return contender_ ? contender_->node_path() : std::string(); }
std::int64_t HeldLock::session_id() const { return contender_ ? contender_->session_id() : 0; }
bool HeldLock::lost() const { return contender_ && contender_->lost(); }
std::optional<LossReason> HeldLock::loss_reason() const {
  return contender_ ? contender_->loss_reason() : std::nullopt;
}
std::stop_token HeldLock::lost_token() const { return contender_ ? contender_->lost_token() : std::stop_token{}; }
void HeldLock::on_lost(std::function<void(LossReason)> callback) {
  if (contender_) contender_->on_lost(std::move(callback));
}
void HeldLock::release() {
  if (contender_) contender_->release();
}

// ---- Lock ----

namespace {

std::string checked_path(std::string path) {
  if (auto problem = path_problem(path); !problem.empty())
    throw Error(make_error_code(errc::invalid_path), "lock path", path, problem);
  return path;
}

}  // namespace

Lock::Lock(Session& session, std::string path, LockOptions options)
    : Lock(session, std::move(path), std::move(options), ContenderRole::exclusive) {}

Lock::Lock(Session& session, std::string path, LockOptions options, ContenderRole role)
    : core_(detail::Internals::core(session)), path_(checked_path(std::move(path))), options_(std::move(options)), role_(role) {
  if (options_.owner_data.empty()) options_.owner_data = default_owner_data();
  if (auto problem = detail::request_size_problem(path_.size(), options_.owner_data.size()); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "lock", path_, "owner_data: " + problem);
  // The server would answer "invalid ACL": say what is actually missing.
  if (options_.acl != NodeAcl::open && !core_->options().credentials)
    throw Error(make_error_code(errc::invalid_argument), "lock", path_,
                "a creator-only ACL needs SessionOptions::credentials");
}

Lock::~Lock() = default;

namespace {

// Why an acquisition was refused, written by the parent check (under the session mutex) and read
// after the outcome.
struct RefusalDetail {
  std::mutex mutex;
  std::string text;
};

std::string detail_of(const std::shared_ptr<RefusalDetail>& refusal) {
  std::lock_guard lock(refusal->mutex);
  return refusal->text;
}

ContenderRequest make_request(const std::string& path, const LockOptions& options, ContenderRole role,
                              std::chrono::nanoseconds timeout,
                              std::shared_ptr<RefusalDetail> refusal = std::make_shared<RefusalDetail>()) {
  ContenderRequest request;
  request.parent = path;
  request.policy = {role, 1};
  request.owner_data = options.owner_data;
  request.acl = options.acl;
  request.timeout = timeout;
  // A semaphore's path counts our node as one of its N leases, and we would count its leases as
  // our predecessors: neither recipe's promise would hold. The semaphore records its limit in the
  // path node; refuse a path that carries one (the semaphore refuses a path without one).
  request.check_parent = [refusal = std::move(refusal)](const std::string& data) -> std::error_code {
    const auto limit = detail::semaphore_limit_of(data);
    if (!limit) return {};
    std::lock_guard lock(refusal->mutex);
    refusal->text = fmt::format(
        "the path belongs to a semaphore (it records max_leases={}); a lock, read/write lock or election "
        "cannot share it",
        *limit);
    return make_error_code(errc::limit_mismatch);
  };
  return request;
}

}  // namespace

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                              std::error_code& ec) noexcept {
  try {
    auto [result, contender] = detail::await_contender(
        core_, make_request(path_, options_, role_, std::max(timeout, std::chrono::nanoseconds::zero())),
        std::move(stop));
    ec = result;
    if (ec) return std::nullopt;
    return HeldLock(detail::Internals::key(), std::move(contender));
  } catch (const std::system_error& e) {
    ec = e.code();
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    ec = make_error_code(errc::internal_error);
  }
  return std::nullopt;
}

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  auto refusal = std::make_shared<RefusalDetail>();
  auto [result, contender] = detail::await_contender(
      core_, make_request(path_, options_, role_, std::max(timeout, std::chrono::nanoseconds::zero()), refusal),
      std::move(stop));
  if (result && result != condition::gave_up) throw Error(result, "acquire lock", path_, detail_of(refusal));
  if (result) return std::nullopt;
  return HeldLock(detail::Internals::key(), std::move(contender));
}

std::optional<HeldLock> Lock::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

HeldLock Lock::acquire(std::stop_token stop) {
  auto refusal = std::make_shared<RefusalDetail>();
  auto [result, contender] = detail::await_contender(
      core_, make_request(path_, options_, role_, std::chrono::nanoseconds(-1), refusal), std::move(stop));
  if (result) throw Error(result, "acquire lock", path_, detail_of(refusal));
  return HeldLock(detail::Internals::key(), std::move(contender));
}

void Lock::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  detail::start_contender_async(
      core_, make_request(path_, options_, role_, timeout),
      [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        handler(ec, ec ? HeldLock{} : HeldLock(detail::Internals::key(), contender));
      },
      std::move(stop));
}

std::vector<ContenderInfo> Lock::contenders() const {
  return detail::list_contenders(core_, path_, 1);
}

// ---- ReadWriteLock ----

ReadWriteLock::ReadWriteLock(Session& session, std::string path, LockOptions options)
    : read_(session, path, options, ContenderRole::read), write_(session, path, options, ContenderRole::write) {}

}  // namespace zkr
