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

ThreadHolds::Verdict ThreadHolds::check(const AcquisitionByThread& acquisition) {
  const auto self = std::this_thread::get_id();
  std::lock_guard guard(mutex_);
  for (Entry& entry : entries_) {
    if (entry.thread != self || entry.core != acquisition.core || entry.path != acquisition.path) continue;
    // A lost grant's node is gone or goes with its session: waiting behind it ends.
    if (entry.contender->lost()) continue;
    if (acquisition.reentrant && entry.lock == acquisition.lock && entry.role == acquisition.role) {
      ++entry.holds;
      return {{}, {}, entry.contender};
    }
    std::string why = fmt::format("this thread holds {} on {} (node {}) and would wait for itself", held_as(entry.role),
                                  entry.path, entry.contender->node_path());
    if (entry.role == ContenderRole::read && acquisition.role == ContenderRole::write)
      why += ": a read lock cannot be upgraded; release it first";
    else if (entry.role == ContenderRole::write && acquisition.role == ContenderRole::read)
      why += ": a write lock cannot be downgraded; release it first";
    else if (entry.lock == acquisition.lock && entry.role == acquisition.role)
      why += ": release it first, pass the HeldLock down, or make the lock reentrant (LockOptions::reentrant)";
    else
      why += " (another Lock object on the same path): release it first, or share one reentrant Lock";
    return {make_error_code(errc::would_deadlock), std::move(why), nullptr};
  }
  return {};
}

void ThreadHolds::bind(const AcquisitionByThread& acquisition, std::shared_ptr<Contender> contender) {
  std::lock_guard guard(mutex_);
  entries_.push_back({acquisition.core, std::string(acquisition.path), acquisition.role, acquisition.lock,
                      std::this_thread::get_id(), std::move(contender), 1});
}

void ThreadHolds::unbind_thread(const Contender* contender) noexcept {
  std::lock_guard guard(mutex_);
  for (Entry& entry : entries_)
    if (entry.contender.get() == contender) entry.thread = {};
}

bool ThreadHolds::drop_hold(const Contender* contender) noexcept {
  std::shared_ptr<Contender> last;  // destroyed outside the mutex
  std::lock_guard guard(mutex_);
  const auto entry = std::find_if(entries_.begin(), entries_.end(),
                                  [&](const Entry& e) { return e.contender.get() == contender; });
  if (entry == entries_.end()) return true;
  if (--entry->holds > 0) return false;
  last = std::move(entry->contender);
  entries_.erase(entry);
  return true;
}

}  // namespace zkr::detail
