// SPDX-License-Identifier: Apache-2.0
// Caches: a node, or a whole subtree, mirrored in memory and kept current by watches.
//
// A TreeCache reads every node under its root once (the initial load, signalled once), then keeps
// a data watch and a children watch on each cached node, set again each time one fires, and tells
// a callback what changed: a node added, updated (its data or stat) or removed. A NodeCache is the
// same for one node.
//
// What makes a mirror trustworthy is knowing when it is not. While the connection is down, or
// after the session was lost, the server may change things the cache cannot hear of: the cache
// says it "may be stale" (stale(), and a `stale` event). Once connected again (on the same session
// or a new one) it reads every cached node again, tells the differences as ordinary events, and
// then says `resynchronised`. Every `stale` event is followed by a `resynchronised` one unless the
// cache stops first.
//
// Ordering: events for one path come in the order the server applied the changes they report
// (a node's `added` before its children's; a removed subtree's descendants before the node). A
// change made and undone between two reads may be merged away (a node created and deleted before
// the cache read it is never told), but the last state is never missed: once the writes stop, the
// cache equals the server's tree.
//
// A slow callback: events wait for it in the cache's own queue, on the callback thread's side, so
// the ZooKeeper completion thread never waits for it. Past TreeCacheOptions::max_pending_events
// waiting events, each node's new event merges into the one already waiting for that node (its
// latest state wins): the queue then grows only by one event per node that changed, and a callback
// that catches up is still told every node's final state, in the order above. Nothing is dropped
// without its later state taking its place, so what the callback was told still adds up to the
// mirror; metrics() says how many events wait and how many were merged away.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

namespace zkr {

// A change a cache reports to its callback.
struct CacheEvent {
  // What happened to the node.
  enum class Kind {
    added,           // a node is in the cache now: `node` is its data and stat
    updated,         // a cached node's data changed (its mzxid or czxid differ): `node` is the new state
    removed,         // a node left the cache (deleted, or its subtree was): `node` is its last known state
    initialized,     // the initial load is complete (once): every node under the root was read
    stale,           // the connection dropped or the session was lost: the cache may lag the server
    resynchronised,  // read again since `stale`; the differences were told before this event
    failed,          // the cache stopped by itself (the last event): error() says why
  };
  Kind kind = Kind::added;  // what happened
  std::string path;  // added, updated, removed: the node's path; else empty
  NodeData node;     // added, updated, removed
};
std::string_view to_string(CacheEvent::Kind kind) noexcept;  // "added", "updated", ...

// How a TreeCache follows its subtree.
struct TreeCacheOptions {
  // How deep below the root nodes are cached: 0 the root alone, 1 the root and its children, ...
  int max_depth = std::numeric_limits<int>::max();
  // false: keep each node's stat but not its data (events carry no data): less memory.
  bool cache_data = true;
  // Memory is bounded: a subtree with more nodes than this stops the cache with
  // errc::cache_limit (a `failed` event) rather than growing without limit.
  std::size_t max_nodes = 100'000;
  // A missing root takes no watch (ZooKeeper sets a data watch only on a node that exists): the
  // cache looks for it again this often until it exists.
  std::chrono::milliseconds missing_root_poll{500};
  // Events waiting for the callback past which each node's events merge into one with its latest
  // state (see above): with a slow callback the queue holds at most this many events plus one per
  // node changed meanwhile (fewer than 2 x max_nodes: the nodes the callback was told of, and those
  // cached now), never without bound. Each waiting event holds a copy of its node's data. 0: merge
  // from the first waiting event (a callback is told the latest state of what changed while it ran).
  std::size_t max_pending_events = 1'000;
};

// Cheap counters for an operator (TreeCache::metrics).
struct CacheMetrics {
  std::size_t nodes = 0;       // cached now
  std::size_t data_bytes = 0;  // sum of the cached nodes' data sizes
  std::uint64_t added = 0, updated = 0, removed = 0;  // changes seen so far (some may merge before told)
  std::uint64_t reads = 0;            // getData and getChildren requests sent
  // Full listings taken again after a loss or a gap; whether the view may be out of date; whether
  // the first listing came back.
  std::uint64_t resynchronisations = 0;
  bool stale = false;
  bool initialized = false;
  std::size_t events_pending = 0;      // waiting for the callback now
  std::uint64_t events_coalesced = 0;  // merged into a later event of their node (max_pending_events)
};

// A cache of a subtree: every node under a path, its data and stat, kept up to date by watches.
class TreeCache {
 public:
  // Runs on the session's callback thread, one event at a time and in order; must not block long.
  using Callback = std::function<void(const CacheEvent&)>;

  // Starts loading at once (non-blocking). The root need not exist: the cache then holds nothing
  // and loads it when it appears. Throws Error: errc::invalid_path naming the root,
  // errc::invalid_argument for a negative max_depth, a zero max_nodes or a non-positive poll.
  TreeCache(Session& session, std::string root, Callback callback = {}, TreeCacheOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<TreeCache> make(Session& session, std::string root, Callback callback,
                                       TreeCacheOptions options, std::error_code& ec) noexcept;
  ~TreeCache();  // stop()
  TreeCache(const TreeCache&) = delete;
  TreeCache& operator=(const TreeCache&) = delete;

  const std::string& root() const;

  // The mirror as of the latest reply read (which may be ahead of the events delivered so far).
  std::optional<NodeData> get(std::string_view path) const;     // nullopt if not cached
  std::vector<std::string> children(std::string_view path) const;  // names, sorted; empty if none
  std::map<std::string, NodeData> snapshot() const;                // every cached node by path
  std::size_t size() const;

  bool initialized() const;
  // True from a connection drop or session loss until the cache has read everything again.
  bool stale() const;
  // Blocks until the initial load is complete (true), or the timeout passes or the cache stops
  // (false). Must not be called from the session's threads (a callback).
  bool wait_initialized(std::chrono::milliseconds timeout) const;
  // Calls `done` once the initial load is complete (soon if it is): with no error, or with the
  // error that stopped the cache first (errc::cancelled after stop()). Runs on the session's
  // callback thread, also when the load was complete already: never inside this call. For
  // zkr::asio::async_wait_initialized.
  void async_wait_initialized(std::function<void(std::error_code)> done);

  // Why the cache stopped by itself (zk_errc::no_auth, errc::cache_limit, errc::session_closed),
  // or no error. A stopped cache keeps its last contents and calls back no more.
  std::error_code error() const;
  CacheMetrics metrics() const;

  // Stops: no callback starts after it returns, and one running on another thread has returned.
  // From the callback itself it returns at once. Idempotent.
  void stop();

 private:
  struct State;  // recipes/cache.cpp
  std::shared_ptr<State> state_;
};

// One node mirrored: its data and stat, and an event each time it is created, changed or deleted
// (added, updated, removed), with the same stale/resynchronised signals as TreeCache.
class NodeCache {
 public:
  // Called on the session's callback thread for each change.
  using Callback = TreeCache::Callback;
  // Throws like TreeCache's constructor.
  NodeCache(Session& session, std::string path, Callback callback = {},
            std::chrono::milliseconds missing_node_poll = std::chrono::milliseconds(500));
  static std::optional<NodeCache> make(Session& session, std::string path, Callback callback,
                                       std::error_code& ec) noexcept;

  const std::string& path() const { return tree_.root(); }
  // The node as last read, nullopt if it does not exist (or the first read has not come yet).
  std::optional<NodeData> current() const { return tree_.get(tree_.root()); }
  bool initialized() const { return tree_.initialized(); }
  bool stale() const { return tree_.stale(); }
  bool wait_initialized(std::chrono::milliseconds timeout) const { return tree_.wait_initialized(timeout); }
  std::error_code error() const { return tree_.error(); }
  void stop() { tree_.stop(); }
  TreeCache& tree() { return tree_; }

 private:
  TreeCache tree_;
};

}  // namespace zkr
