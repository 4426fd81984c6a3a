// SPDX-License-Identifier: Apache-2.0
#include "config.hpp"

#include <random>
#include <stdexcept>

#include <fmt/format.h>

#include "request_limits.hpp"

namespace zkr::swarm {

const std::vector<Resource>& resources() {
  static const std::vector<Resource> catalogue = [] {
    const std::string root(kRoot);
    std::vector<Resource> out;
    out.push_back({"lock0", ResourceKind::lock, root + "/lock0", true});
    out.push_back({"lock1", ResourceKind::lock, root + "/lock1", true});
    out.push_back({"lock2", ResourceKind::lock, root + "/lock2", false});
    out.push_back({"rw-read", ResourceKind::read_lock, root + "/rw", true});
    out.push_back({"rw-write", ResourceKind::write_lock, root + "/rw", true});
    out.push_back({"sem", ResourceKind::semaphore, root + "/sem", false, SemaphoreLayout::zkrecipes, 2});
    out.push_back({"sem-curator", ResourceKind::semaphore, root + "/sem-curator", false, SemaphoreLayout::curator_v2, 2});
    out.push_back({"sem-kazoo", ResourceKind::semaphore, root + "/sem-kazoo", false, SemaphoreLayout::kazoo, 2});
    out.push_back({"latch", ResourceKind::latch, root + "/latch", false, {}, 1, ElectionLayout::curator_latch});
    out.push_back({"latch-kazoo", ResourceKind::latch, root + "/latch-kazoo", false, {}, 1, ElectionLayout::kazoo});
    out.push_back({"selector", ResourceKind::selector, root + "/selector", false, {}, 1, ElectionLayout::curator_lock});
    return out;
  }();
  return catalogue;
}

bool is_lock_like(ResourceKind kind) {
  return kind == ResourceKind::lock || kind == ResourceKind::read_lock || kind == ResourceKind::write_lock;
}
bool is_acquirable(ResourceKind kind) { return is_lock_like(kind) || kind == ResourceKind::semaphore; }
bool is_election(ResourceKind kind) { return kind == ResourceKind::latch || kind == ResourceKind::selector; }

std::string data_node(const Resource& resource) { return fmt::format("{}/{}", kDataRoot, resource.name); }

std::size_t owner_data_bytes(int size_class, const std::string& path) {
  switch (size_class) {
    case 1: return 1024;
    case 2: return 600 * 1024;
    case 3: return detail::kServerRequestLimit - detail::kRequestAllowance - path.size();
    default: return 0;  // default_owner_data()
  }
}

MemberData member_data_class(int arg) { return static_cast<MemberData>((arg >> 4) & 3); }

std::size_t member_data_bytes(MemberData size, const std::string& id) {
  // The member's node is <group>/<id>; request_bytes() counts the rest of the create.
  const std::size_t most = detail::kServerRequestLimit - detail::request_bytes(kGroupPath.size() + 1 + id.size(), 0);
  switch (size) {
    case MemberData::kib: return 1024;
    case MemberData::at_the_limit: return most;
    case MemberData::over_the_limit: return most + 1;
    default: return 4;
  }
}

const std::string kGroupPath = std::string(kRoot) + "/group";
const std::string kPeerCounterPath = std::string(kRoot) + "/counter-peers";

std::string_view to_string(MetricsLabels labels) {
  switch (labels) {
    case MetricsLabels::off: return "off";
    case MetricsLabels::prefix: return "prefix";
    case MetricsLabels::exact: return "exact";
  }
  return "unknown";
}

namespace {
constexpr std::pair<Exclusion, std::string_view> kExclusionNames[] = {
    {Exclusion::move_reentrant, "move_reentrant"},
    {Exclusion::large_batch, "large_batch"},
    {Exclusion::peer_semaphore_in_batch, "peer_semaphore_in_batch"},
    {Exclusion::peer_semaphore_metrics, "peer_semaphore_metrics"},
    {Exclusion::fenced_released_hold, "fenced_released_hold"},
};
}  // namespace

std::string_view to_string(Exclusion exclusion) {
  for (const auto& [value, name] : kExclusionNames)
    if (value == exclusion) return name;
  return "unknown";
}

std::set<Exclusion> exclusions_from_text(std::string_view text) {
  std::set<Exclusion> out;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto name = text.substr(0, comma);
    text.remove_prefix(comma == std::string_view::npos ? text.size() : comma + 1);
    if (name.empty()) continue;
    bool found = false;
    for (const auto& [value, known] : kExclusionNames)
      if (known == name) {
        out.insert(value);
        found = true;
      }
    if (!found) {
      std::string names;
      for (const auto& [value, known] : kExclusionNames) names += fmt::format(" {}", known);
      throw std::invalid_argument(fmt::format("ZKR_SWARM_EXCLUDE: no crossing named '{}' (known:{})", name, names));
    }
  }
  return out;
}

SessionOptions SwarmConfig::session_options(int slot) const {
  SessionOptions options;
  options.loss_policy = loss_policy.at(static_cast<std::size_t>(slot));
  options.max_starting_acquisitions = start_window.at(static_cast<std::size_t>(slot));
  switch (metrics_labels.at(static_cast<std::size_t>(slot))) {
    case MetricsLabels::off: break;
    case MetricsLabels::prefix: options.metrics_path_labels.paths = {std::string(kRoot) + "/"}; break;
    case MetricsLabels::exact:
      for (const auto& resource : resources())
        if (is_acquirable(resource.kind)) options.metrics_path_labels.paths.push_back(resource.path);
      break;
  }
  return options;
}

std::string SwarmConfig::describe() const {
  std::string sessions_text;
  for (int slot = 0; slot < sessions; ++slot)
    sessions_text += fmt::format(" s{}({}, metrics {}, start window {})", slot,
                                 loss_policy[slot] == LossPolicy::on_disconnect ? "on_disconnect" : "at_deadline",
                                 to_string(metrics_labels[slot]), start_window[slot]);
  std::string excluded;
  for (auto exclusion : exclusions) excluded += fmt::format(" {}", to_string(exclusion));
  return fmt::format("seed {} ({} world), {} actors, sessions:{}; selector auto_requeue {}{}", seed,
                     world == WorldKind::fake ? "fake" : "real", actors, sessions_text, selector_auto_requeue,
                     excluded.empty() ? "" : "; excluded:" + excluded);
}

SwarmConfig config_for_seed(std::uint64_t seed, WorldKind world, std::set<Exclusion> exclusions) {
  SwarmConfig config;
  config.seed = seed;
  config.world = world;
  config.exclusions = std::move(exclusions);
  std::mt19937_64 random(seed ^ 0x5eedc0f1911ull);
  // Slot 0 loses on disconnect and slot 1 at the deadline in every run; slot 2 varies.
  config.loss_policy = {LossPolicy::on_disconnect, LossPolicy::at_deadline,
                        random() % 2 ? LossPolicy::on_disconnect : LossPolicy::at_deadline};
  for (int slot = 0; slot < config.sessions; ++slot)
    config.metrics_labels.push_back(static_cast<MetricsLabels>(random() % 3));
  config.selector_auto_requeue = random() % 4 != 0;
  // Drawn last, so that the draws above stay each seed's. Slot 0 starts one acquisition at a time,
  // slot 1 has the default window, slot 2 one of: none, one, two, the default.
  const std::size_t default_window = SessionOptions().max_starting_acquisitions;
  const std::size_t windows[] = {0, 1, 2, default_window};
  config.start_window = {1, default_window, windows[random() % 4]};
  return config;
}

}  // namespace zkr::swarm
