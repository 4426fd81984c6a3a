// SPDX-License-Identifier: Apache-2.0
// Which recipe, ours or a peer library's, wrote the children of a recipe path, and whether a
// recipe may share the path with them. A recipe that finds nodes of a layout it cannot share
// refuses (errc::incompatible_peer) instead of running a second, disjoint queue beside them: the
// peers do not see our nodes, nor we theirs, and each queue would grant on its own. No I/O: the
// contender queue feeds it the listing it makes anyway (ContenderRequest::check_children).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/names.hpp>

#include "acquisition.hpp"

namespace zkr::detail {

// The recipes whose nodes a child name reveals. One kind may be written by several recipes
// (Curator's LeaderSelector runs on its InterProcessMutex): what matters is the queue it joins.
enum class PeerNode {
  unknown,             // no recipe's node: never a contender, never a conflict
  curator_latch,       // "_c_<uuid>-latch-<seq>": Curator LeaderLatch, zkr::LeaderLatch
  curator_lock,        // "_c_<uuid>-lock-<seq>", "lock-<seq>": Curator InterProcessMutex and LeaderSelector, zkr::Lock
  curator_read_write,  // "__READ__", "__WRIT__": Curator InterProcessReadWriteLock, zkr::ReadWriteLock
  kazoo_lock,          // "<32 hex>__lock__<seq>": kazoo Lock and Election
  kazoo_read_lock,     // "<32 hex>__rlock__<seq>": kazoo ReadLock
  curator_semaphore,   // "locks" and "leases" children: Curator InterProcessSemaphoreV2
  kazoo_semaphore,     // "<32 hex>" lease nodes: kazoo Semaphore
};

PeerNode classify_child(std::string_view child);
// "Curator LeaderLatch (or zkr::LeaderLatch)", ...
std::string_view describe(PeerNode kind);
// The kind our own contender node is of.
PeerNode node_kind(ContenderScheme naming, ContenderRole role);

// Why `our_recipe` ("a zkr::LeaderSelector with the curator_lock layout") cannot join `path` with
// `children` there, naming the first child of a kind `shares` refuses; empty when every child is
// of a kind it shares (or no recipe's node).
std::string peer_conflict(const std::vector<std::string>& children, std::string_view path,
                          std::string_view our_recipe, const std::function<bool(PeerNode)>& shares);

// A ContenderRequest::check_children that refuses (errc::incompatible_peer, the words in
// `refusal`) a listing with a child of a kind `shares` refuses, as peer_conflict() describes it.
// A semaphore, say: refuse_peers(path, "a zkr::Semaphore", [](PeerNode k) { return k == PeerNode::curator_lock; }, refusal).
std::function<std::error_code(const std::vector<std::string>&)> refuse_peers(std::string path, std::string our_recipe,
                                                                             std::function<bool(PeerNode)> shares,
                                                                             std::shared_ptr<RefusalDetail> refusal);

}  // namespace zkr::detail
