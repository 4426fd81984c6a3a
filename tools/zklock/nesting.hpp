// SPDX-License-Identifier: Apache-2.0
// A zklock run by the job of another zklock, on the lock its parent holds: refused when it would
// wait for itself. Decided by the node the parent holds, found on the ensemble (so "localhost:P"
// and "127.0.0.1:P" are one ensemble, and a chroot is taken into account), not by comparing
// connect strings as text.
#pragma once

#include <optional>
#include <string>

#include <zkr/names.hpp>
#include <zkr/session.hpp>

#include "cli_options.hpp"

namespace zklock {

// What the parent zklock told its job ($ZKLOCK_NODE, $ZKLOCK_SESSION_ID, $ZKLOCK_FENCING_TOKEN,
// $ZKLOCK_SERVERS); nullopt if this zklock does not run under one.
struct ParentGrant {
  std::string node;          // as the parent's session sees it (inside the parent's chroot)
  std::string chroot;        // the parent's chroot, "" if none
  std::int64_t session_id = 0;
  std::int64_t token = 0;
};
std::optional<ParentGrant> parent_grant_from_environment();

// Where the parent's node stands as a session with `chroot` sees it; nullopt if it lies outside.
std::optional<std::string> parent_node_seen_from(const ParentGrant& parent, const std::string& chroot);

// Would `options` (a run on options.lock_path) wait for the parent's node of `parent_role`? A
// reader waits only for a writer (or a plain lock); a semaphore's holder waits for itself only when
// its one slot is the parent's; anything else on an exclusively held path waits for ever.
bool waits_for_parent(const CliOptions& options, zkr::ContenderRole parent_role, std::optional<int> recorded_slots);

// The refusal to print (exit 64), or nullopt: the parent's grant is not on this path of this
// ensemble, or this zklock would not wait for it.
std::optional<std::string> nested_wait_refusal(zkr::Session& session, const CliOptions& options);

}  // namespace zklock
