// SPDX-License-Identifier: Apache-2.0
// What a swarm run works on: the resource catalogue (the same in every run, so that an operation
// list means the same thing under any seed), and the per-seed configuration of the sessions.
#pragma once

#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/election.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>

namespace zkr::swarm {

enum class ResourceKind { lock, read_lock, write_lock, semaphore, latch, selector };

struct Resource {
  std::string_view name;
  ResourceKind kind;
  std::string path;
  bool reentrant = false;  // locks: LockOptions::reentrant
  SemaphoreLayout semaphore_layout = SemaphoreLayout::zkrecipes;
  int max_leases = 1;  // how many may hold at once (1 for locks and elections)
  ElectionLayout election_layout = ElectionLayout::recipe_default;
};

inline constexpr std::string_view kRoot = "/swarm";
inline constexpr std::string_view kDataRoot = "/swarm-data";  // where fenced writes go

const std::vector<Resource>& resources();
inline const Resource& resource(int index) { return resources().at(static_cast<std::size_t>(index)); }
bool is_lock_like(ResourceKind kind);  // lock, read_lock, write_lock
bool is_acquirable(ResourceKind kind);  // lock-like or semaphore
bool is_election(ResourceKind kind);
// Where FencedTransaction writes for this resource go (a persistent node made at setup).
std::string data_node(const Resource& resource);

// Owner data size classes: the default, 1 KiB, 600 KiB (two of them exceed a request), and the
// most the library accepts on the path.
std::size_t owner_data_bytes(int size_class, const std::string& path);
// A group member's data (group_join's arg, bits 4-5): a few bytes, 1 KiB, the most a create of
// member `id` may carry, or one byte more (refused where the member is made).
enum class MemberData { small, kib, at_the_limit, over_the_limit };
MemberData member_data_class(int arg);
// The size class for a roll of 0-99: mostly small, a tenth each of the others.
inline int member_data_draw(int roll) { return roll < 70 ? 0 : roll < 80 ? 1 : roll < 90 ? 2 : 3; }
std::size_t member_data_bytes(MemberData size, const std::string& id);
extern const std::string kGroupPath;
// The counter the peers add to (the real world's, with peers): the swarm's counter when they run.
extern const std::string kPeerCounterPath;

enum class MetricsLabels { off, prefix, exact };
std::string_view to_string(MetricsLabels labels);

// Crossings a run may leave out (ZKR_SWARM_EXCLUDE, comma-separated names), to show that the
// rest passes while a known defect is being fixed elsewhere.
enum class Exclusion {
  move_reentrant,           // moving a HeldLock whose grant has other holds
  large_batch,              // owner data over 1 KiB in batched acquisitions
  peer_semaphore_in_batch,  // a Curator- or kazoo-layout semaphore on a thread with an open batch
  peer_semaphore_metrics,   // metrics of sessions that used a Curator- or kazoo-layout semaphore
  fenced_released_hold,     // a fenced commit from a released hold whose grant has other holds
};
std::string_view to_string(Exclusion exclusion);
// Throws std::invalid_argument naming an unknown entry.
std::set<Exclusion> exclusions_from_text(std::string_view text);

enum class WorldKind { fake, real };

struct SwarmConfig {
  std::uint64_t seed = 1;
  WorldKind world = WorldKind::fake;
  int sessions = 3;
  int actors = 4;
  std::vector<LossPolicy> loss_policy;       // per session slot
  std::vector<MetricsLabels> metrics_labels;  // per session slot
  std::vector<std::size_t> start_window;      // per session slot: SessionOptions::max_starting_acquisitions
  bool selector_auto_requeue = true;
  std::set<Exclusion> exclusions;

  bool excluded(Exclusion exclusion) const { return exclusions.count(exclusion) != 0; }
  SessionOptions session_options(int slot) const;  // servers and timeouts come from the world
  std::string describe() const;
};

// The configuration a seed gives (sessions' loss policies and metrics labels).
SwarmConfig config_for_seed(std::uint64_t seed, WorldKind world, std::set<Exclusion> exclusions);

}  // namespace zkr::swarm
