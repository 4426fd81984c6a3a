// SPDX-License-Identifier: Apache-2.0
// Which thread holds which lock, so that a thread asking again for a lock it holds is refused
// (errc::would_deadlock) or, with LockOptions::reentrant, given the grant it already has, instead
// of queueing behind itself for ever.
//
// The rule (written once, in ThreadHolds::held_by_locked): a thread holds a grant while the grant
// is not lost and one of its HeldLocks is bound to that thread. A blocking call (acquire,
// try_acquire, try_acquire_for) binds the HeldLock it returns to the calling thread; moving the
// HeldLock unbinds that one HeldLock, and nothing binds it again: the library cannot tell which
// thread a moved lock went to, and a thread that handed its lock away may rightly wait for it.
// The grant's other HeldLocks keep their bindings. Every HeldLock of a grant counts toward its
// end: the node goes when the last of them is released, bound or moved, wherever it lives. A lost
// grant binds nothing (a new acquisition waits only until the old node goes with its session);
// async_acquire() binds nothing. So the rule never refuses a wait that can end; it may miss one
// that cannot (on the thread a lock was moved to, or within its own thread), which then waits
// as any contender does.
//
// A Lock is known by an identity that moves with it and is never reused, not by its address: a
// Lock built where a destroyed one was is another Lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <zkr/names.hpp>

namespace zkr::detail {

class Contender;
class SessionCore;

// One HeldLock's hold on its grant. It moves with the HeldLock and is released once, by it; a
// FencedTransaction made from the HeldLock shares it, so that it is refused once this HeldLock
// (not the grant) is released.
class Hold {
 public:
  explicit Hold(bool counted) : counted_(counted) {}
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  bool released() const noexcept { return released_.load(std::memory_order_acquire); }

 private:
  friend class ThreadHolds;
  const bool counted_;  // one of the holds ThreadHolds keeps: a blocking acquisition's
  std::atomic<bool> released_{false};
  std::thread::id thread_;  // under ThreadHolds' mutex: the thread it is bound to (none once moved)
};

// A blocking acquisition about to start: by the Lock whose identity is `lock`, for `role` on `path`.
struct AcquisitionByThread {
  const SessionCore* core;
  std::string_view path;
  ContenderRole role;
  std::uint64_t lock;
  bool reentrant;
};

class ThreadHolds {
 public:
  static ThreadHolds& instance();
  // A Lock's identity: never 0, never given twice in a process.
  static std::uint64_t new_lock_identity() noexcept;

  struct Verdict {
    std::error_code refusal;  // errc::would_deadlock, with `why`
    std::string why;
    // Reentrant: the grant this thread holds, and one more hold on it, bound to this thread.
    std::shared_ptr<Contender> reentered;
    std::shared_ptr<Hold> hold;
  };
  // Before a blocking acquisition on the calling thread.
  Verdict check(const AcquisitionByThread& acquisition);
  // A blocking acquisition granted `contender` to the calling thread: its first hold, bound to it.
  std::shared_ptr<Hold> bind(const AcquisitionByThread& acquisition, std::shared_ptr<Contender> contender);
  // The HeldLock of `hold` was moved: it binds no thread any more (the grant's other holds do).
  void unbind(Hold& hold) noexcept;

  enum class LetGo { already, not_last, last };
  // The HeldLock of `hold` lets go of it: `last` if no other hold of its grant remains (the node
  // may go), `not_last` if some do, `already` if it was let go before.
  LetGo let_go(Hold& hold) noexcept;

 private:
  // A grant held by a blocking acquisition, with its holds (bound or moved) that are not released.
  struct HeldGrant {
    const SessionCore* core;
    std::string path;
    ContenderRole role;
    std::uint64_t lock;
    std::shared_ptr<Contender> contender;
    std::vector<Hold*> holds;  // owned by their HeldLocks, which let go before they let them die
  };
  bool held_by_locked(const HeldGrant& grant, std::thread::id thread) const;
  std::shared_ptr<Hold> add_hold_locked(HeldGrant& grant);

  std::mutex mutex_;
  std::vector<HeldGrant> grants_;  // a few per process: one per lock held by a blocking call
};

}  // namespace zkr::detail
