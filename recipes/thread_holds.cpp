// SPDX-License-Identifier: Apache-2.0
#include "thread_holds.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "contender_queue.hpp"

namespace zkr::detail {
namespace {

std::string_view held_as(ContenderRole role) {
  switch (role) {
    case ContenderRole::read: return "the read lock";
    case ContenderRole::write: return "the write lock";
    default: return "the lock";
  }
}

}  // namespace

ThreadHolds& ThreadHolds::instance() {
  static ThreadHolds holds;
  return holds;
}

std::uint64_t ThreadHolds::new_lock_identity() noexcept {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// The rule of the top of thread_holds.hpp; every check goes through here.
bool ThreadHolds::held_by_locked(const HeldGrant& grant, std::thread::id thread) const {
  if (grant.contender->lost()) return false;  // its node is gone or goes with its session: waiting behind it ends
  return std::any_of(grant.holds.begin(), grant.holds.end(), [&](const Hold* hold) { return hold->thread_ == thread; });
}

std::shared_ptr<Hold> ThreadHolds::add_hold_locked(HeldGrant& grant) {
  auto hold = std::make_shared<Hold>(true);
  hold->thread_ = std::this_thread::get_id();
  grant.holds.push_back(hold.get());
  return hold;
}

ThreadHolds::Verdict ThreadHolds::check(const AcquisitionByThread& acquisition) {
  const auto self = std::this_thread::get_id();
  std::lock_guard guard(mutex_);
  for (HeldGrant& grant : grants_) {
    if (grant.core != acquisition.core || grant.path != acquisition.path || !held_by_locked(grant, self)) continue;
    const bool same_lock = grant.lock == acquisition.lock && grant.role == acquisition.role;
    if (acquisition.reentrant && same_lock) return {{}, {}, grant.contender, add_hold_locked(grant)};
    // The Error names the path already: the words say whose node and what to do, once each.
    std::string why = fmt::format("this thread holds {}, node {}, and would wait for itself", held_as(grant.role),
                                  grant.contender->node_path());
    if (grant.role == ContenderRole::read && acquisition.role == ContenderRole::write)
      why += ": a read lock cannot be upgraded; release it first";
    else if (grant.role == ContenderRole::write && acquisition.role == ContenderRole::read)
      why += ": a write lock cannot be downgraded; release it first";
    else if (same_lock)
      why += ": release it first, pass the HeldLock down, or make the lock reentrant (LockOptions::reentrant)";
    else
      why += " through another Lock object on the same path: release it first, or share one reentrant Lock";
    return {make_error_code(errc::would_deadlock), std::move(why), nullptr, nullptr};
  }
  return {};
}

std::shared_ptr<Hold> ThreadHolds::bind(const AcquisitionByThread& acquisition, std::shared_ptr<Contender> contender) {
  std::lock_guard guard(mutex_);
  grants_.push_back({acquisition.core, std::string(acquisition.path), acquisition.role, acquisition.lock,
                     std::move(contender), {}});
  return add_hold_locked(grants_.back());
}

void ThreadHolds::unbind(Hold& hold) noexcept {
  if (!hold.counted_) return;
  std::lock_guard guard(mutex_);
  hold.thread_ = {};
}

ThreadHolds::LetGo ThreadHolds::let_go(Hold& hold) noexcept {
  if (hold.released_.exchange(true, std::memory_order_acq_rel)) return LetGo::already;
  if (!hold.counted_) return LetGo::last;  // a grant of one hold
  std::shared_ptr<Contender> last;  // destroyed outside the mutex
  std::lock_guard guard(mutex_);
  const auto grant = std::find_if(grants_.begin(), grants_.end(), [&](const HeldGrant& g) {
    return std::find(g.holds.begin(), g.holds.end(), &hold) != g.holds.end();
  });
  if (grant == grants_.end()) return LetGo::last;
  grant->holds.erase(std::find(grant->holds.begin(), grant->holds.end(), &hold));
  if (!grant->holds.empty()) return LetGo::not_last;
  last = std::move(grant->contender);
  grants_.erase(grant);
  return LetGo::last;
}

}  // namespace zkr::detail
