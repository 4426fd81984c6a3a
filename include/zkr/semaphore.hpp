// SPDX-License-Identifier: Apache-2.0
// Semaphore: at most N leases held at once on a ZooKeeper path, each with a fencing token.
//
// Each acquisition queues an ephemeral sequential node "<path>/_c_<uuid>-lock-<seq>"; the first N
// nodes in sequence order hold a lease. A lease is a HeldLock: its token is the czxid of its
// node, and it is lost, with a callback and a std::stop_token, when the session monitor declares
// the session lost. The N leases held at one time have different tokens.
//
// Order, precisely: contenders become entitled in queue order (first come, first served): a
// contender is entitled once fewer than N nodes are ahead of it, which happens only after every
// node ahead of it was entitled, so a lease entitled later has a larger token than every lease
// entitled before it. Each waiter learns of its entitlement through its own notification, so two
// waiters entitled by releases a moment apart can see acquire() return in the other order (the
// later one, with the larger token, first) by at most that notification delay. An entitled node
// whose owner is dead or frozen keeps its place, and its lease slot, until its session ends.
//
// Wake-ups without a herd and without relying on any one waiter: the first two waiters watch the
// path's children (any release wakes both, so a dead or frozen first waiter cannot hide a release
// from the second); every later waiter watches the two waiters ahead of it, each of which
// rewrites its node once when it becomes the first waiter and once when granted, so that the
// waiters behind move up. A release wakes a constant number of waiters whatever the queue length
// (measured: at most eight watch notifications; see docs/RELIABILITY.md). Two dead or frozen
// waiters next to each other can still delay the waiters behind them until one of their sessions
// ends.
//
// contenders() lists a node as holding once its owner took the lease; an entitled node whose
// owner has not (yet) is listed as waiting, though it counts against N.
//
// The limit N is part of the path, not of each participant: the first participant that creates
// the path records "max_leases=N" in the path node's data, and every acquisition compares its own
// N with the recorded one once its node exists. A participant with a different N gets
// errc::limit_mismatch (and its node is deleted) instead of a lease: participants that disagree
// cannot both hold leases by their own count. A path node that exists without a recorded limit
// (created by hand or by another recipe) is refused the same way; create it with the data
// "max_leases=N", or let the semaphore create it. Nodes of another recipe under the path (a Curator
// or kazoo semaphore's leases or lock, a latch, a kazoo lock), which our queue would not count,
// make the acquisition fail with errc::incompatible_peer naming that recipe (its node deleted).
// Those are recognised by name alone: a child named "locks", "leases" or 32 hex digits, even one of
// the user's own nested paths, is taken for a peer semaphore's, since running beside one would
// grant more than N leases.
// The path is a container node: the server
// removes it some time after the last contender left, and the next participant records its N
// afresh.
//
// Layouts shared with Curator and kazoo (SemaphoreOptions::layout; docs/recipes.md, "Semaphores
// shared with Curator and kazoo"). All of the above is the library's own layout. With
// SemaphoreLayout::curator_v2 or SemaphoreLayout::kazoo a participant takes part in Curator's
// InterProcessSemaphoreV2 or kazoo's Semaphore on the same path, in their protocol: it takes the
// peer's internal lock (its nodes named as the peer names them), holding it waits until fewer
// than N lease nodes exist, creates its lease node and releases the lock. The lease is a grant as
// above (token = czxid of the lease node, loss through the session monitor, release retried, no
// node left by a timeout, a cancellation or an error), but the order and wake-ups are the peer's:
// a waiter holds the internal lock while it waits, so a dead or frozen waiter stops every
// acquisition until its session ends. Curator records no limit (every participant must use the
// same N); kazoo records N in the path's data, and another N is refused with
// errc::limit_mismatch. Participants of different layouts on one path do not see each other.
#pragma once

#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/lock.hpp>

namespace zkr {

// A held lease: token, loss signal, release() (or destruction) gives it back.
using Lease = HeldLock;

// Whose nodes and protocol a semaphore uses on its path. Participants on one path must all use
// the same layout (and the same limit); see "Layouts shared with Curator and kazoo" above.
enum class SemaphoreLayout {
  zkrecipes,   // this library's: one queue under the path, the limit recorded in the path's data
  curator_v2,  // Curator's InterProcessSemaphoreV2: "<path>/locks" and "<path>/leases"
  kazoo,       // kazoo's Semaphore: leases under the path, its lock at "<path>-__lock__"
};
std::string_view to_string(SemaphoreLayout layout) noexcept;

// How a Semaphore takes part.
struct SemaphoreOptions {
  // Stored in the lease node for operators. Empty means default_owner_data().
  std::string owner_data;
  NodeAcl acl = NodeAcl::open;
  SemaphoreLayout layout = SemaphoreLayout::zkrecipes;
};

// A semaphore: at most `max_leases` participants hold a lease at once.
class Semaphore {
 public:
  // Throws Error: errc::invalid_path naming the path, errc::invalid_argument if max_leases < 1.
  Semaphore(Session& session, std::string path, int max_leases, SemaphoreOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<Semaphore> make(Session& session, std::string path, int max_leases, SemaphoreOptions options,
                                       std::error_code& ec) noexcept;
  ~Semaphore();

  const std::string& path() const { return path_; }
  int max_leases() const { return max_leases_; }

  // Waits for a lease. Throws Error: errc::limit_mismatch (the path records another limit; the
  // message says which), errc::cancelled when stop is requested, errc::session_closed,
  // zk_errc::no_auth (ACL refusal), other ZooKeeper errors.
  Lease acquire(std::stop_token stop = {});
  // Does not wait: empty if N leases are held. Throws as acquire().
  std::optional<Lease> try_acquire();
  // Waits at most `timeout`: empty if it ran out or stop was requested. Throws as acquire().
  std::optional<Lease> try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop = {});
  // The same without exceptions, as Lock's: giving up is errc::would_block (every lease taken,
  // try_acquire), errc::timed_out or errc::cancelled; otherwise ec is what the throwing form
  // throws (errc::limit_mismatch, errc::session_closed, ...).
  Lease acquire(std::stop_token stop, std::error_code& ec) noexcept;  // an empty Lease on failure
  std::optional<Lease> try_acquire(std::error_code& ec) noexcept;
  std::optional<Lease> try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                       std::error_code& ec) noexcept;
  // Callback form, as Lock::async_acquire: the handler runs once on the session's callback
  // thread. A negative timeout waits forever; zero does not wait.
  void async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop = {});

  // Lease holders first, then waiters in queue order.
  std::vector<ContenderInfo> contenders() const;
  std::vector<ContenderInfo> contenders(std::error_code& ec) const noexcept;

  // The limit recorded on `path`: nullopt if the path does not exist or records none. Throws
  // Error as list_contenders().
  static std::optional<int> recorded_limit(Session& session, std::string_view path);
  // Without exceptions: nullopt with ec clear when nothing is recorded, nullopt with ec set on failure.
  static std::optional<int> recorded_limit(Session& session, std::string_view path, std::error_code& ec) noexcept;

 private:
  detail::Acquisition acquisition() const;  // the one front end (recipes/acquisition.hpp)
  std::shared_ptr<detail::SessionCore> core_;
  std::string path_;
  int max_leases_;
  SemaphoreOptions options_;
};

}  // namespace zkr
