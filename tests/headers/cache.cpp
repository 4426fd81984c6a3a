// SPDX-License-Identifier: Apache-2.0
#include <zkr/cache.hpp>

// recipes.md, "Caches": a tree cache with its events, a node cache, errors as zkr::Error.
bool header_cache_uses(zkr::Session& session) {
  try {
    zkr::TreeCache tree(session, "/config", [](const zkr::CacheEvent& event) {
      (void)(event.kind == zkr::CacheEvent::Kind::added && !zkr::to_string(event.kind).empty());
    }, zkr::TreeCacheOptions{.max_depth = 2});
    zkr::NodeCache node(session, "/config/flag");
    (void)node.current();
    return tree.wait_initialized(std::chrono::seconds(1)) && !tree.stale() && tree.metrics().nodes == tree.size();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::invalid_path || error.code() == zkr::errc::cache_limit;
  }
}
