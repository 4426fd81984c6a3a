// Which thread holds which lock, so that a thread asking again for a lock it holds is refused
// (errc::would_deadlock) or, with LockOptions::reentrant, given the grant it already has, instead
// of queueing behind itself for ever.
//
// A grant is bound to the thread whose blocking call (acquire, try_acquire, try_acquire_for)
// returned it, for as long as that very HeldLock holds it. Moving the HeldLock unbinds it: the
// library cannot tell where a moved lock went, and a thread that handed its lock to another
// thread may rightly wait for that thread to release it. A lost grant binds nothing either (a new
// acquisition waits only until the old node goes with its session). async_acquire() binds nothing.
// So the rule never refuses a wait that can end; it may miss one that cannot (a lock moved within
// its thread), which then waits as any contender does.
#pragma once

#include <cstddef>
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

// A blocking acquisition about to start: by `lock` (a Lock object), for `role` on `path`.
struct AcquisitionByThread {
  const SessionCore* core;
  std::string_view path;
  ContenderRole role;
  const void* lock;
  bool reentrant;
};

class ThreadHolds {
 public:
  static ThreadHolds& instance();

  struct Verdict {
    std::error_code refusal;               // errc::would_deadlock, with `why`
    std::string why;
    std::shared_ptr<Contender> reentered;  // reentrant: the grant this thread holds, one more hold on it
  };
  // Before a blocking acquisition on the calling thread.
  Verdict check(const AcquisitionByThread& acquisition);
  // A blocking acquisition granted `contender` to the calling thread.
  void bind(const AcquisitionByThread& acquisition, std::shared_ptr<Contender> contender);
  // The HeldLock of a bound grant was moved: no thread can be said to hold it any more.
  void unbind_thread(const Contender* contender) noexcept;
  // A HeldLock of a bound grant let go. True if it was the last of the grant's holds (the node
  // may go), false if reentrant holds remain.
  bool drop_hold(const Contender* contender) noexcept;

 private:
  struct Entry {
    const SessionCore* core;
    std::string path;
    ContenderRole role;
    const void* lock;
    std::thread::id thread;  // default id once unbound
    std::shared_ptr<Contender> contender;
    std::size_t holds = 1;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;  // a few per process: one per lock held by a blocking call
};

}  // namespace zkr::detail
