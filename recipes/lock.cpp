#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include <algorithm>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "acquisition.hpp"
#include "internals.hpp"
#include "contender_queue.hpp"
#include "request_limits.hpp"

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

HeldLock::HeldLock(detail::Passkey, std::shared_ptr<detail::Contender> contender) : Grant(std::move(contender)) {}
HeldLock::HeldLock(HeldLock&&) noexcept = default;
HeldLock& HeldLock::operator=(HeldLock&& other) noexcept {
  if (this != &other) {
    release();
    contender_ = std::move(other.contender_);
  }
  return *this;
}
HeldLock::~HeldLock() { release(); }

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
    : core_(detail::Internals::core(session)),
      path_(checked_path(std::move(path))),
      options_(detail::checked_lock_options(*core_, path_, std::move(options), "lock")),
      role_(role) {}

Lock::~Lock() = default;

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
  // A semaphore's path counts our node as one of its N leases, and we would count its leases as
  // our predecessors: neither recipe's promise would hold. The semaphore records its limit in the
  // path node; refuse a path that carries one (the semaphore refuses a path without one).
  request.check_parent = [refusal = std::move(refusal)](const std::string& data) -> std::error_code {
    const auto limit = detail::semaphore_limit_of(data);
    if (!limit) return {};
    refusal->set(fmt::format(
        "the path belongs to a semaphore (it records max_leases={}); a lock, read/write lock or election "
        "cannot share it",
        *limit));
    return make_error_code(errc::limit_mismatch);
  };
  return request;
}

}  // namespace detail

namespace {

std::optional<HeldLock> held(std::shared_ptr<Contender> granted) {
  if (!granted) return std::nullopt;
  return HeldLock(detail::Internals::key(), std::move(granted));
}

}  // namespace

detail::Acquisition Lock::acquisition() const {
  return {core_, "acquire lock", path_, [this](std::chrono::nanoseconds timeout, auto refusal) {
            return detail::one_holder_request(path_, options_, role_, timeout, std::move(refusal));
          }};
}

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                              std::error_code& ec) noexcept {
  return held(acquisition().try_for(timeout, std::move(stop), ec));
}

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return held(acquisition().try_for(timeout, std::move(stop)));
}

std::optional<HeldLock> Lock::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

HeldLock Lock::acquire(std::stop_token stop) { return *held(acquisition().wait(std::move(stop))); }

void Lock::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  acquisition().start(
      timeout,
      [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        handler(ec, contender ? HeldLock(detail::Internals::key(), contender) : HeldLock{});
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
