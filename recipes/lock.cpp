#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include <algorithm>
#include <future>
#include <mutex>

#include <zkr/error.hpp>

#include "contender_queue.hpp"

namespace zkr {

using detail::Contender;
using detail::ContenderRequest;

std::string_view to_string(LossReason reason) noexcept {
  switch (reason) {
    case LossReason::session_lost: return "session lost";
    case LossReason::connection_lost: return "connection lost";
    case LossReason::node_deleted: return "lock node deleted";
    case LossReason::session_closed: return "session closed";
  }
  return "unknown";
}

// ---- HeldLock ----

HeldLock::HeldLock(std::shared_ptr<detail::Contender> contender) : contender_(std::move(contender)) {}
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

bool is_give_up(std::error_code ec) {
  return ec == errc::timed_out || ec == errc::cancelled || ec == errc::would_block;
}

}  // namespace

Lock::Lock(Session& session, std::string path, LockOptions options)
    : Lock(session, std::move(path), std::move(options), ContenderRole::exclusive) {}

Lock::Lock(Session& session, std::string path, LockOptions options, ContenderRole role)
    : core_(session.core()), path_(checked_path(std::move(path))), options_(std::move(options)), role_(role) {
  if (options_.owner_data.empty()) options_.owner_data = default_owner_data();
  // The server would answer "invalid ACL": say what is actually missing.
  if (options_.acl != NodeAcl::open && !core_->options().credentials)
    throw Error(make_error_code(errc::invalid_argument), "lock", path_,
                "a creator-only ACL needs SessionOptions::credentials");
}

Lock::~Lock() = default;

namespace {

ContenderRequest make_request(const std::string& path, const LockOptions& options, ContenderRole role,
                              std::chrono::nanoseconds timeout) {
  ContenderRequest request;
  request.parent = path;
  request.policy = {role, 1};
  request.owner_data = options.owner_data;
  request.acl = options.acl;
  request.timeout = timeout;
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
    return HeldLock(std::move(contender));
  } catch (const std::system_error& e) {
    ec = e.code();
  } catch (...) {
    ec = std::make_error_code(std::errc::not_enough_memory);
  }
  return std::nullopt;
}

std::optional<HeldLock> Lock::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  std::error_code ec;
  auto held = try_acquire_for(timeout, std::move(stop), ec);
  if (ec && !is_give_up(ec)) throw Error(ec, "acquire lock", path_);
  return held;
}

std::optional<HeldLock> Lock::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

HeldLock Lock::acquire(std::stop_token stop) {
  auto [result, contender] =
      detail::await_contender(core_, make_request(path_, options_, role_, std::chrono::nanoseconds(-1)), std::move(stop));
  if (result) throw Error(result, "acquire lock", path_);
  return HeldLock(std::move(contender));
}

void Lock::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  detail::start_contender_async(
      core_, make_request(path_, options_, role_, timeout),
      [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        handler(ec, ec ? HeldLock{} : HeldLock(contender));
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
