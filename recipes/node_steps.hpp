// SPDX-License-Identifier: Apache-2.0
// Small steps on nodes shared by the recipes that are not contender queues (group, barriers).
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <zkr/session.hpp>

#include "session_core.hpp"

namespace zkr::detail {

// Creates `path`. If its parent is missing, creates every ancestor as a container (open ACL: they
// may be shared with other recipes) in one pipeline and tries again, a few times (a container may
// be reaped in between). Call with core->mutex() held; `done` runs without it.
void create_with_parents(const std::shared_ptr<SessionCore>& core, std::uint64_t generation, std::string path,
                         std::string data, CreateMode mode, NodeAcl acl, CreateCallback done);

// "/a/b/c" -> "/a/b"; "/a" -> "/".
std::string parent_of(std::string_view path);

// 32 lowercase hex digits (a UUID without its dashes), as kazoo names its nodes.
std::string new_hex_guid();

}  // namespace zkr::detail
