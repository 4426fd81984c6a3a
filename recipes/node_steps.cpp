// SPDX-License-Identifier: Apache-2.0
#include "node_steps.hpp"

#include <algorithm>
#include <vector>

#include "guid.hpp"

namespace zkr::detail {
namespace {

constexpr int kParentAttempts = 3;

void create_attempt(std::shared_ptr<SessionCore> core, std::uint64_t generation, std::string path, std::string data,
                    CreateMode mode, NodeAcl acl, CreateCallback done, int attempts_left) {
  core->create(generation, path, data, mode, acl,
               [core, generation, path, data, mode, acl, done, attempts_left](zk_errc rc, std::string created,
                                                                              NodeStat stat) {
                 if (rc != zk_errc::no_node || attempts_left <= 0) return done(rc, std::move(created), stat);
                 std::vector<std::string> ancestors;
                 const std::string parent = parent_of(path);
                 for (std::size_t slash = parent.find('/', 1); slash != std::string::npos;
                      slash = parent.find('/', slash + 1))
                   ancestors.push_back(parent.substr(0, slash));
                 if (parent != "/") ancestors.push_back(parent);
                 std::lock_guard lock(core->mutex());
                 for (std::size_t i = 0; i < ancestors.size(); ++i) {
                   const bool last = i + 1 == ancestors.size();
                   core->create(generation, ancestors[i], {}, CreateMode::container, NodeAcl::open,
                                [=](zk_errc, std::string, NodeStat) {
                                  if (!last) return;
                                  std::lock_guard again(core->mutex());
                                  create_attempt(core, generation, path, data, mode, acl, done, attempts_left - 1);
                                });
                 }
                 if (ancestors.empty()) create_attempt(core, generation, path, data, mode, acl, done, 0);
               });
}

}  // namespace

void create_with_parents(const std::shared_ptr<SessionCore>& core, std::uint64_t generation, std::string path,
                         std::string data, CreateMode mode, NodeAcl acl, CreateCallback done) {
  create_attempt(core, generation, std::move(path), std::move(data), mode, acl, std::move(done), kParentAttempts);
}

std::string parent_of(std::string_view path) {
  const auto slash = path.rfind('/');
  if (slash == 0 || slash == std::string_view::npos) return "/";
  return std::string(path.substr(0, slash));
}

std::string new_hex_guid() {
  std::string guid = new_guid();
  guid.erase(std::remove(guid.begin(), guid.end(), '-'), guid.end());
  return guid;
}

}  // namespace zkr::detail
