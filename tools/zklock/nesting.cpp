// SPDX-License-Identifier: Apache-2.0
#include "nesting.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include <zkr/lock.hpp>
#include <zkr/semaphore.hpp>

namespace zklock {

namespace {

std::optional<std::int64_t> parse_integer(const char* text, int base) {
  if (!text || !*text) return std::nullopt;
  std::string_view digits(text);
  if (base == 16 && (digits.starts_with("0x") || digits.starts_with("0X"))) digits.remove_prefix(2);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value, base);
  if (digits.empty() || error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return static_cast<std::int64_t>(value);
}

}  // namespace

std::optional<ParentGrant> parent_grant_from_environment() {
  const char* node = std::getenv("ZKLOCK_NODE");
  const char* servers = std::getenv("ZKLOCK_SERVERS");
  const auto session_id = parse_integer(std::getenv("ZKLOCK_SESSION_ID"), 16);
  const auto token = parse_integer(std::getenv("ZKLOCK_FENCING_TOKEN"), 10);
  if (!node || !*node || !servers || !session_id || !token) return std::nullopt;
  std::error_code ignored;
  const auto parent_servers = zkr::parse_servers(servers, ignored);
  if (!parent_servers) return std::nullopt;
  return ParentGrant{node, parent_servers->chroot, *session_id, *token};
}

std::optional<std::string> parent_node_seen_from(const ParentGrant& parent, const std::string& chroot) {
  const std::string absolute = parent.chroot + parent.node;
  if (chroot.empty()) return absolute;
  if (!absolute.starts_with(chroot + "/")) return std::nullopt;
  return absolute.substr(chroot.size());
}

bool waits_for_parent(const CliOptions& options, zkr::ContenderRole parent_role, std::optional<int> recorded_slots) {
  switch (options.kind) {
    case LockKind::semaphore: return options.slots == 1 || recorded_slots == 1;
    case LockKind::read: return parent_role != zkr::ContenderRole::read;
    case LockKind::mutex:
    case LockKind::write: return true;
  }
  return true;
}

std::optional<std::string> nested_wait_refusal(zkr::Session& session, const CliOptions& options) {
  const auto parent = parent_grant_from_environment();
  if (!parent) return std::nullopt;
  std::error_code ignored;
  const auto servers = zkr::parse_servers(options.servers, ignored);
  const auto seen = parent_node_seen_from(*parent, servers ? servers->chroot : "");
  if (!seen) return std::nullopt;
  const auto slash = seen->rfind('/');
  if (seen->substr(0, slash) != options.lock_path) return std::nullopt;
  const std::string name = seen->substr(slash + 1);

  const auto slots = zkr::Semaphore::recorded_limit(session, options.lock_path);
  const auto contenders = zkr::list_contenders(session, options.lock_path, slots.value_or(1));
  // The parent's very node, on this ensemble: its name, owner and czxid all match.
  const auto at = std::find_if(contenders.begin(), contenders.end(), [&](const zkr::ContenderInfo& contender) {
    return contender.node == name && contender.session_id == parent->session_id &&
           contender.token.value() == parent->token;
  });
  if (at == contenders.end()) return std::nullopt;
  const std::string held = fmt::format("{} is held by the zklock that runs this command (its node {})",
                                       options.lock_path, name);
  if (waits_for_parent(options, at->role, slots)) return held + ": a nested zklock on it would wait for itself for ever";
  // A reader shares the parent's read lock, unless a writer queued behind the parent: the reader
  // would queue behind that writer, which waits for the parent.
  if (options.kind == LockKind::read &&
      std::any_of(std::next(at), contenders.end(),
                  [](const zkr::ContenderInfo& later) { return later.role != zkr::ContenderRole::read; })) {
    return held + ": a writer waits behind it, and a nested shared lock would wait behind that writer for ever";
  }
  return std::nullopt;
}

}  // namespace zklock
