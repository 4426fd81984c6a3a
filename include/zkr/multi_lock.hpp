// SPDX-License-Identifier: Apache-2.0
// MultiLock: several lock paths taken as one - all of them or none.
//
// Each path is an ordinary lock path: the node on it is a Lock's ("_c_<uuid>-lock-<seq>"), so a
// MultiLock excludes, and is excluded by, a Lock, Curator's InterProcessMutex (and so its
// InterProcessMultiLock) and kazoo's Lock on any one of its paths.
//
// The paths are taken in one global order, their byte-wise sorted order, whatever order they were
// given in: a MultiLock waits for a path only while it holds none that sorts after it. Two
// MultiLocks over overlapping paths therefore never wait for each other in a cycle. (A peer's
// multi-lock takes its paths in the order it was given: give it them sorted, too.)
//
// Acquiring first asks for every path at once without waiting, the creates of the nodes merged
// into one ZooKeeper multi-op where the session can batch them (see AcquisitionBatch in
// zkr/lock.hpp), so an uncontended MultiLock costs one round trip. It keeps the paths granted in
// order up to the first one held by someone else, lets go of the nodes after that one at once,
// waits for that one, and then asks for the rest the same way. Giving up part-way (a timeout, a
// stop request, an error) deletes every node it created: nothing stays held, nothing is left behind.
//
// A held MultiLock carries one HeldLock per path, each with its own fencing token (the nodes of
// one multi-op share a czxid; tokens on each path still grow with every grant on it). Losing any
// path loses the whole: lost() turns true, the lost_token() is stopped and the on_lost() callbacks
// run, once. The paths still held stay held until release() or the destructor lets go of them
// all, so that the critical section can stop before another holder comes in.
//
// Threads, as for a Lock (zkr/lock.hpp): the blocking calls bind the HeldLocks to the calling
// thread, and a thread asking again for a MultiLock it holds is refused with errc::would_deadlock
// or, with LockOptions::reentrant, given one more hold on each of the same grants. A thread that
// holds any of the paths through another Lock or MultiLock object is refused as well.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/lock.hpp>

namespace zkr {

// A granted MultiLock: one HeldLock per path, in the MultiLock's paths() order. Move-only;
// releases every path on destruction. Moving it moves each HeldLock (which then binds no thread,
// as a moved HeldLock does).
class HeldMultiLock {
 public:
  HeldMultiLock() = default;  // holds nothing
  // The library's (see detail::Passkey): the granted paths' locks, in order.
  HeldMultiLock(detail::Passkey, std::vector<HeldLock> locks);
  HeldMultiLock(HeldMultiLock&& other) noexcept;
  HeldMultiLock& operator=(HeldMultiLock&& other) noexcept;
  ~HeldMultiLock();

  explicit operator bool() const noexcept { return !locks_.empty(); }

  // One per path, in the MultiLock's paths() order.
  const std::vector<HeldLock>& locks() const noexcept { return locks_; }
  std::vector<FencingToken> tokens() const;
  // The token of the lock on `path` (one of the MultiLock's paths); an invalid token otherwise.
  FencingToken token(std::string_view path) const;

  // True once any path's grant is lost; never reset.
  bool lost() const;
  // Why the first path lost was lost, and which path it was.
  std::optional<LossReason> loss_reason() const;
  std::string lost_path() const;
  // Requested once any path is lost.
  std::stop_token lost_token() const;
  // Runs once, on the session's callback thread, when the first path is lost (at once, on that
  // thread, if one already is). Must not block for long.
  void on_lost(std::function<void(LossReason)> callback);

  // Lets go of every path (HeldLock::release, last path first). Idempotent, non-blocking.
  void release();

  struct LossState;  // the library's: the one loss of the whole

 private:
  std::vector<HeldLock> locks_;
  std::shared_ptr<LossState> loss_;
};

// Called once with the outcome of MultiLock::async_acquire, on the session's callback thread.
using MultiAcquireHandler = std::function<void(std::error_code, HeldMultiLock)>;

// Several lock paths taken as one, all or none, in one global order (so two multi-locks never
// deadlock).
class MultiLock {
 public:
  // `paths`: at least one, each a valid lock path, none twice (in any order; they are taken
  // sorted). `options` apply to every path. Throws Error(errc::invalid_path) naming the bad path,
  // Error(errc::invalid_argument) for an empty list, a path given twice, or options a Lock refuses.
  MultiLock(Session& session, std::vector<std::string> paths, LockOptions options = {});
  static std::optional<MultiLock> make(Session& session, std::vector<std::string> paths, LockOptions options,
                                       std::error_code& ec) noexcept;
  MultiLock(MultiLock&& other) noexcept;  // the same lock, as a moved Lock is
  MultiLock& operator=(MultiLock&& other) noexcept;
  ~MultiLock();

  // Sorted: the order the paths are taken in, and the order of HeldMultiLock::locks().
  const std::vector<std::string>& paths() const { return paths_; }

  // Waits until every path is granted. Throws Error as Lock::acquire() does, naming the path that
  // failed: errc::cancelled, errc::would_deadlock, errc::session_closed, zk_errc::no_auth,
  // errc::incompatible_peer, ...; nothing is held then.
  HeldMultiLock acquire(std::stop_token stop = {});
  // Does not wait: empty if someone else holds any of the paths. Throws as acquire(), and
  // errc::session_lost or zk_errc::connection_loss when the session is not usable right now.
  std::optional<HeldMultiLock> try_acquire();
  // Waits at most `timeout` for all of them: empty if it ran out or stop was requested.
  std::optional<HeldMultiLock> try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop = {});

  // Without exceptions, as Lock's (errc::would_block, errc::timed_out, errc::cancelled in ec when
  // it gave up).
  HeldMultiLock acquire(std::stop_token stop, std::error_code& ec) noexcept;
  std::optional<HeldMultiLock> try_acquire(std::error_code& ec) noexcept;
  std::optional<HeldMultiLock> try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                               std::error_code& ec) noexcept;
  // Callback form: runs once on the session's callback thread. A negative timeout waits forever;
  // zero does not wait. Binds no thread (as Lock::async_acquire). Throws only on a moved-from
  // MultiLock (errc::invalid_argument).
  void async_acquire(std::chrono::nanoseconds timeout, MultiAcquireHandler handler, std::stop_token stop = {});

 private:
  struct Outcome;
  Outcome run(std::chrono::nanoseconds timeout, std::stop_token stop);
  const std::shared_ptr<detail::SessionCore>& core() const;  // throws if moved from

  std::shared_ptr<detail::SessionCore> core_;
  std::vector<std::string> paths_;
  LockOptions options_;
  std::uint64_t identity_ = 0;
};

}  // namespace zkr
