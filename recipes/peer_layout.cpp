// SPDX-License-Identifier: Apache-2.0
#include "peer_layout.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <zkr/error.hpp>

namespace zkr::detail {

PeerNode node_kind(ContenderScheme naming, ContenderRole role) {
  if (naming == ContenderScheme::kazoo) return role == ContenderRole::read ? PeerNode::kazoo_read_lock : PeerNode::kazoo_lock;
  switch (role) {
    case ContenderRole::exclusive: return PeerNode::curator_lock;
    case ContenderRole::read:
    case ContenderRole::write: return PeerNode::curator_read_write;
    case ContenderRole::latch: return PeerNode::curator_latch;
  }
  return PeerNode::unknown;
}

PeerNode classify_child(std::string_view child) {
  if (auto name = parse_contender_name(child)) return node_kind(name->scheme, name->role);
  // Curator's semaphore keeps its mutex and its leases in two persistent children of the path.
  if (child == "locks" || child == "leases") return PeerNode::curator_semaphore;
  // kazoo's semaphore names each lease by a bare uuid4().hex, with no sequence.
  if (is_kazoo_id(child)) return PeerNode::kazoo_semaphore;
  return PeerNode::unknown;
}

std::string_view describe(PeerNode kind) {
  switch (kind) {
    case PeerNode::unknown: return "unknown";
    case PeerNode::curator_latch: return "Curator LeaderLatch (or zkr::LeaderLatch)";
    case PeerNode::curator_lock: return "Curator InterProcessMutex or LeaderSelector (or zkr::Lock, zkr::LeaderSelector)";
    case PeerNode::curator_read_write: return "Curator InterProcessReadWriteLock (or zkr::ReadWriteLock)";
    case PeerNode::kazoo_lock: return "kazoo Lock or Election";
    case PeerNode::kazoo_read_lock: return "kazoo ReadLock";
    case PeerNode::curator_semaphore: return "Curator InterProcessSemaphoreV2";
    case PeerNode::kazoo_semaphore: return "kazoo Semaphore";
  }
  return "unknown";
}

std::string peer_conflict(const std::vector<std::string>& children, std::string_view path,
                          std::string_view our_recipe, const std::function<bool(PeerNode)>& shares) {
  for (const auto& child : children) {
    const PeerNode kind = classify_child(child);
    if (kind == PeerNode::unknown || shares(kind)) continue;
    return fmt::format("path {} has {} nodes ({}); {} there would run a second, disjoint queue", path,
                       describe(kind), child, our_recipe);
  }
  return {};
}

std::function<std::error_code(const std::vector<std::string>&)> refuse_peers(std::string path, std::string our_recipe,
                                                                             std::function<bool(PeerNode)> shares,
                                                                             std::shared_ptr<RefusalDetail> refusal) {
  return [path = std::move(path), our_recipe = std::move(our_recipe), shares = std::move(shares),
          refusal = std::move(refusal)](const std::vector<std::string>& children) {
    auto problem = peer_conflict(children, path, our_recipe, shares);
    if (problem.empty()) return std::error_code{};
    refusal->set(std::move(problem));
    return make_error_code(errc::incompatible_peer);
  };
}

}  // namespace zkr::detail
