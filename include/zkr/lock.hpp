// SPDX-License-Identifier: Apache-2.0
// Lock: a mutual-exclusion lock on a ZooKeeper path, with fencing.
//
// Each acquisition creates an ephemeral sequential node "<path>/_c_<uuid>-lock-<seq>" (the node
// naming Curator uses, so Curator's InterProcessMutex and this lock exclude each other; kazoo's
// "__lock__" nodes on the same path are recognised as contenders too). The lowest sequence holds.
// Each waiter watches its immediate predecessor, and the node that predecessor waits for so that
// it has listed the queue again before its turn: a release wakes the next holder and the waiter
// after it (two, whatever the queue length), and the next holder is granted by the deletion event
// alone.
//
// The fencing token of a grant is the czxid of its node, taken from the create's reply. It grows
// with every grant on the path, across leader changes and re-creation of the parent. Pass it to the
// resource with every write and have the resource refuse lower tokens (see fence_gate.hpp): that, not
// the lock, is what makes a correctness lock safe against paused holders.
//
// A thread that asks again for a lock it holds would queue behind itself for ever. The blocking
// calls (acquire, try_acquire, try_acquire_for) refuse that at once with errc::would_deadlock,
// naming the node the thread holds; with LockOptions::reentrant the same Lock object instead
// returns the grant the thread already holds: one more HeldLock of the same node (and token), as
// Curator's InterProcessMutex does. Read after write (downgrade) and write after read (upgrade)
// on one path are refused too. Different threads, different sessions, and async_acquire() queue
// as separate contenders, as before.
//
// Holds, precisely. Each HeldLock is one hold on its grant, released by itself alone: the grant's
// node is deleted when its last HeldLock is released (or destroyed), moved or not, on whatever
// thread; a FencedTransaction made from a HeldLock is refused once that HeldLock is released. A
// thread holds a grant while the grant is not lost and one of its HeldLocks was returned to that
// thread by a blocking call and has been neither moved nor released since. Moving a HeldLock (to
// another thread, say) takes that one hold from the thread and no other: the thread still
// reenters through the HeldLocks it kept, and with none left waits for the moved one as for
// anyone's. The library cannot see which thread a moved HeldLock went to, so it lets no thread
// reenter: on its new thread acquire() queues behind the grant like anyone's and is granted once
// the grant's last HeldLock is released (never, while that thread keeps the moved one: hand such
// a thread the HeldLock, or a reference to it, not the Lock).
//
// A Lock can be moved, not copied: the Lock moved to is the same lock (the grants held through
// the one moved from are reentered through it); the moved-from Lock refuses to acquire or to
// list, with errc::invalid_argument. A new Lock is another lock, even on the same path and at the
// address of a destroyed one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <zkr/fencing_token.hpp>
#include <zkr/names.hpp>
#include <zkr/session.hpp>

namespace zkr {

// How a Lock contends.
struct LockOptions {
  // Stored in the lock node for operators (--list). Empty means default_owner_data().
  std::string owner_data;
  NodeAcl acl = NodeAcl::open;
  // A thread that holds this Lock and acquires it again gets another hold on the same grant
  // instead of errc::would_deadlock (see the top of this file).
  bool reentrant = false;
};

namespace detail {
class Contender;
class Acquisition;
class Hold;
}

// What the holder of a grant of the contender queue learns of it: the base of a held lock or lease
// (HeldLock) and of a term of leadership (Leadership). An empty grant answers with empty values.
// All members are thread-safe.
class Grant {
 public:
  // The fencing token: the czxid of the grant's node, larger for every later grant on the path.
  FencingToken token() const;
  std::string node_path() const;
  std::int64_t session_id() const;

  // True once the grant is lost (session lost, node deleted, session closed); never reset. A grant
  // that was released (a lock released, a term resigned) is not "lost".
  bool lost() const;
  std::optional<LossReason> loss_reason() const;
  // Requested when the grant is lost; pass it to the critical section.
  std::stop_token lost_token() const;
  // Runs once on the session's callback thread when the grant is lost (at once, on that thread, if
  // it already is). Must not block for long.
  void on_lost(std::function<void(LossReason)> callback);

 protected:
  Grant() = default;
  explicit Grant(std::shared_ptr<detail::Contender> contender) : contender_(std::move(contender)) {}
  Grant(const Grant&) = default;
  Grant(Grant&&) noexcept = default;
  Grant& operator=(const Grant&) = default;
  Grant& operator=(Grant&&) noexcept = default;
  ~Grant() = default;
  // Shares another grant's node (a term shares its held lock's).
  void share(const Grant& other) { contender_ = other.contender_; }
  friend class FencedTransaction;  // checks the grant's node (zkr/fenced.hpp)

  std::shared_ptr<detail::Contender> contender_;
};

// What HeldLock::release_and_confirm() learned from the server.
enum class ReleaseOutcome {
  held_to_the_end,  // our delete removed our node: the grant stood, in its session, until the release
  lost,             // the node or its session was gone before the delete (loss_reason() may say why)
  unconfirmed,      // no answer in time, or one that cannot tell (below); the delete goes on as release()'s
};
std::string_view to_string(ReleaseOutcome outcome);

// A granted lock: one hold on its grant (see the top of this file). Move-only; releases on
// destruction. The token and the loss signal are Grant's.
class HeldLock : public Grant {
 public:
  HeldLock() = default;  // holds nothing
  // The library's (see detail::Passkey): a grant of the contender queue; `hold`: one the library
  // binds to a thread (see the top of this file), else a hold of its own.
  HeldLock(detail::Passkey, std::shared_ptr<detail::Contender> contender, std::shared_ptr<detail::Hold> hold = nullptr);
  HeldLock(HeldLock&&) noexcept;
  HeldLock& operator=(HeldLock&&) noexcept;
  ~HeldLock();

  explicit operator bool() const noexcept { return contender_ != nullptr; }

  // Deletes the node. Idempotent and non-blocking: if the connection is down the delete is retried
  // after reconnecting, until it succeeds or the session ends (which deletes the node as well).
  // Never touches a node other than this grant's own. A HeldLock that is not the last of its grant
  // (reentrant holds) only lets go of its hold.
  void release();
  // release(), then waits up to `timeout` for the server's answer to the delete, which tells
  // whether the grant stood until now: for a job that must know its work ran under the lock to the
  // end, without a separate read. One round trip; release() returns at once instead. `unconfirmed`
  // when no answer came in time, and when the connection dropped with the delete in flight and the
  // resent delete found the node gone (our first delete or another client's took it). A HeldLock
  // that is not the last of its grant lets go of its hold only and answers from what the session
  // knows. Throws errc::invalid_argument if this HeldLock holds nothing (empty or released): a
  // caller's mistake, with no non-throwing form (test the HeldLock first).
  ReleaseOutcome release_and_confirm(std::chrono::milliseconds timeout);

 private:
  friend class FencedTransaction;  // refused once this HeldLock is released (zkr/fenced.hpp)
  // This HeldLock's hold on the grant: moves with it, released once (recipes/thread_holds.hpp).
  std::shared_ptr<detail::Hold> hold_;
};

// One row of contenders(): the holder(s) first, then waiters in queue order.
struct ContenderInfo {
  std::string node;  // child name
  std::int64_t sequence = 0;  // the server's sequence number in the name
  FencingToken token;  // czxid
  std::int64_t session_id = 0;  // ephemeralOwner
  std::string owner_data;  // what the contender stored in its node (by default host:pid)
  std::chrono::system_clock::time_point created;  // the node's ctime
  ContenderScheme scheme = ContenderScheme::zkrecipes_or_curator;  // who wrote the node
  ContenderRole role = ContenderRole::exclusive;  // what it waits for or holds
  bool holds = false;  // true for a holder
};

// Reads the contenders under path (any process may, participant or not). `max_holders` is how many
// may hold at once (1 for a lock; readers before the first writer hold whatever it says).
std::vector<ContenderInfo> list_contenders(Session& session, std::string_view path,
                                           int max_holders = 1);
// Without exceptions (zkr/session.hpp): an empty vector, and ec set, on failure.
std::vector<ContenderInfo> list_contenders(Session& session, std::string_view path, int max_holders,
                                           std::error_code& ec) noexcept;

// What is under a lock path, for operators: list_contenders() tells a path that does not exist
// (or whose chroot does not) from one that is free only through this.
struct PathListing {
  bool exists = false;  // false when the path (or its chroot) does not exist
  std::vector<ContenderInfo> contenders;    // as list_contenders()
  std::vector<std::string> not_contenders;  // other children, sorted: never holders, never waited for
};
// Throws Error as list_contenders(). Logs a warning naming the children that are not contenders.
PathListing list_lock_path(Session& session, std::string_view path, int max_holders = 1);
PathListing list_lock_path(Session& session, std::string_view path, int max_holders, std::error_code& ec) noexcept;

// For operators breaking a stuck lock: deletes the node of `holder` (a row of list_contenders()),
// if it is still the node with that token. The delete is conditional on the data version read
// along with the token (ZooKeeper cannot condition one on the czxid), so a node that took the same
// name since is deleted only if it also has that version. Its owner is told node_deleted (through
// its own-node watch) only as soon as its session hears of it; the next waiter may be granted
// before that, so the fencing token is what still protects the resource. Returns false if the
// node was gone already (or is another grant's). Throws Error (zk_errc::no_auth when the ACL
// forbids it).
bool break_holder(Session& session, std::string_view path, const ContenderInfo& holder);
bool break_holder(Session& session, std::string_view path, const ContenderInfo& holder, std::error_code& ec) noexcept;

using AcquireHandler = std::function<void(std::error_code, HeldLock)>;

class ReadWriteLock;

// A lock on a path: ephemeral sequential nodes, the lowest holds, each waiter watches its
// predecessor. Every grant carries a fencing token.
class Lock {
 public:
  // Throws Error(errc::invalid_path) naming the path, or Error(errc::invalid_argument) for a
  // creator-only ACL on a session without credentials.
  Lock(Session& session, std::string path, LockOptions options = {});
  // The constructor without exceptions: the Lock, or nullopt with ec set to one of those codes.
  static std::optional<Lock> make(Session& session, std::string path, LockOptions options,
                                  std::error_code& ec) noexcept;
  Lock(Lock&& other) noexcept;  // the same lock (see the top of this file)
  Lock& operator=(Lock&& other) noexcept;
  ~Lock();
  const std::string& path() const { return path_; }

  // Waits until granted (through session losses: it queues again on the replacement). Throws
  // Error: errc::cancelled when stop is requested, errc::would_deadlock (this thread holds it),
  // errc::session_closed, zk_errc::no_auth (ACL refusal), errc::incompatible_peer (the path is a
  // semaphore's, or holds another library's nodes), other ZooKeeper errors (see zkr::condition).
  HeldLock acquire(std::stop_token stop = {});
  // Does not wait: an empty optional if someone else holds the lock. Throws as acquire(), and
  // errc::session_lost or zk_errc::connection_loss when the session is not usable right now.
  std::optional<HeldLock> try_acquire();
  // Waits at most `timeout`: empty if it ran out or stop was requested. Throws as acquire().
  std::optional<HeldLock> try_acquire_for(std::chrono::nanoseconds timeout,
                                          std::stop_token stop = {});

  // The same without exceptions (zkr/session.hpp). These report giving up in ec too: an empty
  // result with errc::would_block (held by someone else, try_acquire), errc::timed_out or
  // errc::cancelled (all three are condition::gave_up); otherwise ec is what the throwing form
  // throws (errc::would_deadlock, errc::session_closed, zk_errc::no_auth, ...).
  HeldLock acquire(std::stop_token stop, std::error_code& ec) noexcept;  // an empty HeldLock on failure
  std::optional<HeldLock> try_acquire(std::error_code& ec) noexcept;
  std::optional<HeldLock> try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                          std::error_code& ec) noexcept;
  // Callback form: the handler runs once on the session's callback thread with either an error
  // or the held lock. A negative timeout waits forever; zero does not wait. Throws only on a
  // moved-from Lock (errc::invalid_argument).
  void async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler,
                     std::stop_token stop = {});

  std::vector<ContenderInfo> contenders() const;
  std::vector<ContenderInfo> contenders(std::error_code& ec) const noexcept;

 private:
  friend class ReadWriteLock;
  Lock(Session& session, std::string path, LockOptions options, ContenderRole role);
  detail::Acquisition acquisition() const;  // the one front end (recipes/acquisition.hpp)
  const std::shared_ptr<detail::SessionCore>& core() const;  // throws if moved from
  struct ByThisThread;                       // the blocking forms' thread check (recipes/lock.cpp)

  std::shared_ptr<detail::SessionCore> core_;  // null once moved from: every call refused
  std::string path_;
  LockOptions options_;
  ContenderRole role_ = ContenderRole::exclusive;
  std::uint64_t identity_;  // what the holds of a thread know this lock by; moves with it
};

// Takes many locks at once on one session (a service taking the locks of all its shards at start):
//
//   zkr::AcquisitionBatch batch(session);
//   for (auto& lock : shard_locks) lock.async_acquire(timeout, handler);
//   batch.send();
//
// While it is open, the acquisitions this thread starts without waiting on the session
// (Lock::async_acquire, also of a ReadWriteLock's locks, LeaderLatch::start) are held back and
// sent a hundred at a time, the rest by send() or the destructor: their node creates merged into
// ZooKeeper multi-ops (one transaction each; locks on one path go into separate multi-ops, so that
// no two grants of a lock share a token), then their listings. No multi-op is larger than the
// server takes (jute.maxbuffer, counted as a single acquisition's request is checked when its
// recipe is made): locks with large owner data share smaller multi-ops, or go out alone, and
// nothing else on the session is disturbed. Each acquisition then runs as if started alone: same
// nodes, same queue order, same tokens (the node's czxid; the nodes of one multi-op share it). Two
// differences: the listing also watches the path's children, which tells a holder of its node's
// deletion until someone else comes or goes (one round trip later than a watch on the node
// would), so that a holder nobody contends with sends no request of its own after the grant (a
// holder then watches its node as usual); and a multi-op refused for one create's sake (its
// path's parent is missing, say) applies none, and its other acquisitions start again on their
// own. The server sees an extra node created and deleted in each multi-op
// ("zkr-batch-stamp-<GUID>" under the path of its first lock, named afresh for each multi-op, so
// that no other node, a user's included, is ever in its way or touched by it), which no read
// ever shows (a persistent recursive watch on the path hears it created and deleted); the
// sequence numbers on that path skip one.
//
// Blocking acquisitions, semaphores (in every layout, a peer layout's internal lock included),
// other threads' calls and other sessions' locks are not batched: they go out at once. A second
// batch opened on the session while one is open (on any thread) batches nothing. Nothing waits
// for send() but the batched acquisitions themselves.
class AcquisitionBatch {
 public:
  // A batch on `session`: nothing is sent before send().
  explicit AcquisitionBatch(Session& session);
  ~AcquisitionBatch();  // send(), if not sent yet
  AcquisitionBatch(const AcquisitionBatch&) = delete;
  AcquisitionBatch& operator=(const AcquisitionBatch&) = delete;
  // Sends every acquisition added since the last send(), their creates as multi-ops.
  void send();

 private:
  std::shared_ptr<detail::SessionCore> core_;
  bool open_ = false;
};

}  // namespace zkr
