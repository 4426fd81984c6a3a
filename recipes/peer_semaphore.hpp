// SPDX-License-Identifier: Apache-2.0
// A zkr::Semaphore participant in a peer's semaphore protocol (SemaphoreLayout::curator_v2,
// SemaphoreLayout::kazoo): the peer's internal lock (a contender of the queue, named as the peer
// names it), then, holding it, a count of the lease nodes, then our lease node. See
// zkr/semaphore.hpp for what each layout gives.
#pragma once

#include <chrono>
#include <memory>
#include <stop_token>
#include <string>
#include <vector>

#include <zkr/semaphore.hpp>

#include "acquisition.hpp"

namespace zkr::detail {

struct PeerLayoutPaths {
  std::string internal_lock;  // the parent of the internal lock's nodes
  std::string leases;         // the parent of the lease nodes
};
PeerLayoutPaths peer_layout_paths(SemaphoreLayout layout, const std::string& path);

struct PeerLeaseRequest {
  SemaphoreLayout layout = SemaphoreLayout::curator_v2;
  std::string path;
  int max_leases = 1;
  std::string owner_data;
  NodeAcl acl = NodeAcl::open;
  std::chrono::nanoseconds timeout{-1};  // negative: for ever; zero: do not wait
  std::shared_ptr<RefusalDetail> refusal;
};

// Runs `done` once on the session's callback thread with the granted lease contender (or an
// error); a stop request cancels. Whatever the outcome, nothing of ours is left behind but a
// granted lease: the internal lock's node and an ungranted lease node are deleted.
void start_peer_lease(const std::shared_ptr<SessionCore>& core, PeerLeaseRequest request, Acquisition::Done done,
                      std::stop_token stop);

// Lease holders (every lease node, in creation order), then the waiters on the internal lock.
std::vector<ContenderInfo> list_peer_semaphore(const std::shared_ptr<SessionCore>& core, SemaphoreLayout layout,
                                               const std::string& path);

}  // namespace zkr::detail
