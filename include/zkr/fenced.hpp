// SPDX-License-Identifier: Apache-2.0
// FencedTransaction: writes to ZooKeeper that the server refuses once the writer's grant is gone.
//
// The ops are committed as one multi together with a check of the grant's own node (the lock
// node of a HeldLock, the leader's node of a Leadership, the lease node of a Lease), first, on the
// session that created that node. The server applies all of them or none: once the node is gone
// (the session expired, an operator deleted it, the lock was released) the whole write is refused,
// whatever pause, partition or clock the writer went through. This is fencing done by ZooKeeper
// itself; no token has to be compared by anyone.
//
//     zkr::FencedTransaction txn(held);
//     txn.create("/app/jobs/42", "queued").set("/app/state", "v2").remove("/app/tmp");
//     txn.commit();  // throws Error(errc::lock_lost) if the lock is gone: nothing was applied
//
// The check asks only that the node exist (version -1): a grant's node name is unique to that
// acquisition (a fresh GUID and sequence number), so no later grant has the same node; only a
// node re-created by hand under the very same name would pass the check.
#pragma once

#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include <zkr/election.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>

namespace zkr {

// Writes committed as one ZooKeeper multi with a check of the holder's lock node: refused as a
// whole (errc::lock_lost) once the lock is gone.
class FencedTransaction {
 public:
  // Bound to a held lock or a lease (a Lease is a HeldLock): once that HeldLock is released (or
  // destroyed), commit() is refused, even while other HeldLocks of its grant (reentrant holds,
  // zkr/lock.hpp) keep the node. It follows the HeldLock through moves. Throws
  // Error(errc::invalid_argument) for an empty HeldLock (a caller's mistake: code built without
  // exceptions tests the HeldLock first).
  explicit FencedTransaction(const HeldLock& held);
  // Bound to a term of leadership: refused once the term ended (lost or resigned) as well.
  explicit FencedTransaction(const Leadership& term);

  // As Transaction's: each path is checked when the op is added (Error(errc::invalid_path); code
  // built without exceptions checks its paths with validate_path() first).
  FencedTransaction& create(std::string path, std::string data = {}, CreateMode mode = CreateMode::persistent,
                            NodeAcl acl = NodeAcl::open);
  FencedTransaction& set(std::string path, std::string data, int version = -1);
  FencedTransaction& remove(std::string path, int version = -1);
  FencedTransaction& check(std::string path, int version = -1);
  const Transaction& transaction() const { return ops_; }

  // Commits the ops (one result per op, in order) or none of them. Throws Error:
  //   errc::lock_lost: the HeldLock was released or the grant is known lost or released (nothing
  //     is sent), its session was
  //     replaced, or the server refused the check of the grant's node (the message says which);
  //   the server's code of the first of our ops that failed (node_exists, bad_version, ...),
  //     naming it ("op 2 of 3: create /a");
  //   zk_errc::connection_loss, errc::timed_out: the outcome is unknown, but all or nothing.
  std::vector<DataOpResult> commit();
  // The same without exceptions (zkr/session.hpp): an empty vector, and ec set, on failure.
  std::vector<DataOpResult> commit(std::error_code& ec) noexcept;

 private:
  std::shared_ptr<detail::Contender> contender_;
  std::shared_ptr<detail::Hold> hold_;  // the HeldLock's own hold, if made from one
  std::optional<Leadership> term_;
  Transaction ops_;
};

}  // namespace zkr
