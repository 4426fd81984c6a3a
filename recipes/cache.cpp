// SPDX-License-Identifier: Apache-2.0
// TreeCache and NodeCache: a subtree mirrored by one data watch and one children watch per cached
// node, and read again as a whole after every reconnection or new session.
//
// Why a node never turns into a ghost: a node enters the cache only with a successful read of its
// data, and that read sets its data watch. ZooKeeper delivers a watch before the reply to any later
// read on the same session, so the deletion of a cached node is heard (its data watch fires
// "deleted") before any listing that no longer shows it; a node created and deleted between two
// reads answers its first read with "no node" and is never added.
//
// Why a full read after reconnecting: the client sends its watches again on reconnection and the
// server fires those whose nodes changed meanwhile, but nothing says when that is over. Reading
// every cached node again gives the moment the cache is known current again ("resynchronised"),
// and it is the only way after a new session, whose handle carries none of the old watches.
#include <zkr/cache.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <list>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>

#include <boost/asio/steady_timer.hpp>

#include <zkr/names.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"
#include "state_check.hpp"

namespace zkr {
namespace {


std::string child_path(const std::string& parent, const std::string& name) {
  return parent == "/" ? "/" + name : parent + "/" + name;
}
// What every descendant's path starts with.
std::string subtree_prefix(const std::string& path) { return path == "/" ? "/" : path + "/"; }
std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string_view to_string(CacheEvent::Kind kind) noexcept {
  switch (kind) {
    case CacheEvent::Kind::added: return "added";
    case CacheEvent::Kind::updated: return "updated";
    case CacheEvent::Kind::removed: return "removed";
    case CacheEvent::Kind::initialized: return "initialized";
    case CacheEvent::Kind::stale: return "stale";
    case CacheEvent::Kind::resynchronised: return "resynchronised";
    case CacheEvent::Kind::failed: return "failed";
  }
  return "unknown";
}

struct TreeCache::State final : detail::SessionListener, std::enable_shared_from_this<State> {
  enum class Watched { data, children };  // a node's two watches
  // Kept small: a cached node costs its entry, its path and data, and its two watches (ours and the
  // C client's records of them). Its children and its depth are read from the paths.
  struct Node {
    NodeData node;
    std::uint64_t incarnation = 0;  // the read that added it: watches of another one are stale
    std::uint32_t slot = 0;         // its place in `slots`
    bool data_watch = false;        // set, or being set by a read in flight
    bool children_watch = false;    // likewise
    bool& watch_set(Watched watched) { return watched == Watched::data ? data_watch : children_watch; }
  };
  using NodeMap = std::map<std::string, Node, std::less<>>;
  // What a read in flight and a watch carry to find their node again, rather than a copy of its
  // path: a slot, taken when the node's first read is sent, and the incarnation of that read.
  struct NodeRef {
    std::uint64_t incarnation = 0;
    std::uint32_t slot = 0;
  };

  State(std::shared_ptr<detail::SessionCore> session_core, std::string cached_root, Callback on_event,
        TreeCacheOptions cache_options)
      : core(std::move(session_core)),
        root(std::move(cached_root)),
        callback(std::move(on_event)),
        options(cache_options) {}

  // ---- reading (under core->mutex() and mirror_mutex) ----

  // Reads of the open round are counted: the round is complete when the last one answered.
  std::uint64_t begin_read_locked() {
    ++counters.reads;
    if (!round_open) return 0;
    ++round_outstanding;
    return round;
  }
  // Called after the reply was handled (which may have sent more reads of the round).
  void end_read_locked(std::uint64_t read_round, zk_errc rc) {
    if (read_round == 0 || read_round != round || !round_open) return;
    if (is_connection_trouble(rc) || is_session_ended(rc)) {
      round_open = false;  // the next connection reads again
      return;
    }
    if (--round_outstanding == 0) complete_round_locked();
  }
  // A read that cannot be sent now (no connection): the round cannot complete on this connection.
  bool can_read_locked() {
    if (stopped) return false;
    if (core->usable_locked(core->generation_locked())) return true;
    round_open = false;
    return false;
  }

  // A reply or a watch of the connection of `generation`: `handle(*self, args...)` runs with both
  // locks held, unless the cache stopped or moved to another connection since; then the events it
  // made are handed on.
  template <typename Handle>
  auto on_connection(std::uint64_t generation, Handle handle) {
    return [weak = weak_from_this(), generation, handle = std::move(handle)](auto... args) {
      auto self = weak.lock();
      if (!self) return;
      std::lock_guard lock(self->core->mutex());
      std::lock_guard mirror(self->mirror_mutex);
      if (self->ignore_locked(generation)) return;
      handle(*self, std::move(args)...);
      self->flush_events_locked();
    };
  }

  // Sends one read (`request`: get_data or get_children) of `path` on the current connection,
  // counted in the open round; `handle(self, rc, reply, stat)` runs on its reply.
  template <typename Request, typename Handle>
  void read_locked(Request request, const std::string& path, detail::NodeWatch watch, Handle handle) {
    const std::uint64_t generation = core->generation_locked();
    const std::uint64_t read_round = begin_read_locked();
    ((*core).*request)(generation, path,
                       on_connection(generation,
                                     [read_round, handle = std::move(handle)](State& self, zk_errc rc, auto reply,
                                                                              NodeStat stat) {
                                       handle(self, rc, std::move(reply), stat);
                                       self.end_read_locked(read_round, rc);
                                     }),
                       std::move(watch), detail::WatchOwner{});
  }

  // A node a listing (or the root) names that is not cached yet: read its data, with its watch.
  void fetch_locked(const std::string& path) {
    if (!can_read_locked()) return;
    const NodeRef ref{next_incarnation++, take_slot_locked()};
    auto [in_flight, inserted] = pending.try_emplace(path, ref);
    if (!inserted) forget_fetch_locked(std::exchange(in_flight->second, ref));
    read_locked(&detail::SessionCore::get_data, path, watch_for(Watched::data, ref, core->generation_locked()),
                [path, ref](State& self, zk_errc rc, std::string data, NodeStat stat) {
                  self.on_fetched_locked(path, ref, rc, std::move(data), stat);
                });
  }

  void on_fetched_locked(const std::string& path, NodeRef ref, zk_errc rc, std::string data, const NodeStat& stat) {
    auto in_flight = pending.find(path);
    if (in_flight == pending.end() || in_flight->second.incarnation != ref.incarnation) return;  // superseded
    pending.erase(in_flight);
    const auto discard = [&] { free_slots.push_back(ref.slot); };
    if (rc == zk_errc::no_node) {
      discard();
      if (path == root) schedule_root_poll_locked();
      return;  // created and deleted before we read it: never told
    }
    if (rc != zk_errc::ok) {
      discard();
      return fail_unless_transient_locked(rc);
    }
    if (nodes.contains(path) || (path != root && !nodes.contains(parent_of(path)))) return discard();  // its parent went
    if (nodes.size() >= options.max_nodes) {
      discard();
      return stop_locked(make_error_code(errc::cache_limit));
    }
    if (!options.cache_data) data.clear();
    auto added = nodes.try_emplace(path).first;
    Node& node = added->second;
    node.node = NodeData{std::move(data), stat};
    node.incarnation = ref.incarnation;
    node.slot = ref.slot;
    node.data_watch = true;  // registered with the reply
    slots[ref.slot] = added;
    counters.data_bytes += node.node.data.size();
    emit_locked(CacheEvent::Kind::added, path, node.node);
    if (depth_of(path) < options.max_depth) reread_locked(Watched::children, added);
  }

  // A slot for a node whose first read is about to be sent; it is freed when the node leaves the
  // cache or that read turns out not to add it.
  std::uint32_t take_slot_locked() {
    if (free_slots.empty()) {
      slots.push_back(nodes.end());
      return static_cast<std::uint32_t>(slots.size() - 1);
    }
    const std::uint32_t slot = free_slots.back();
    free_slots.pop_back();
    return slot;
  }
  void forget_fetch_locked(NodeRef ref) { free_slots.push_back(ref.slot); }
  NodeMap::iterator find_locked(NodeRef ref) {
    if (ref.slot >= slots.size()) return nodes.end();
    const auto found = slots[ref.slot];
    return found != nodes.end() && found->second.incarnation == ref.incarnation ? found : nodes.end();
  }

  // How far below the root a path is (0: the root).
  int depth_of(std::string_view path) const {
    const auto slashes = [](std::string_view of) { return std::count(of.begin(), of.end(), '/'); };
    if (path == root) return 0;
    return static_cast<int>(slashes(path) - (root == "/" ? 0 : slashes(root)));
  }

  // The names of a cached node's cached children, sorted. They are the map's keys that follow
  // "path/" and hold no further slash; each child's subtree ("path/name/...") sorts as one block,
  // ending before "path/name0" ('0' follows '/'), and is skipped at once.
  std::vector<std::string> children_locked(std::string_view path) const {
    std::vector<std::string> names;
    const std::string prefix = subtree_prefix(std::string(path));
    for (auto it = nodes.lower_bound(prefix); it != nodes.end() && it->first.starts_with(prefix);) {
      const std::string_view rest = std::string_view(it->first).substr(prefix.size());
      const auto slash = rest.find('/');
      if (slash == std::string_view::npos) {
        names.emplace_back(rest);
        ++it;
      } else {
        it = nodes.lower_bound(prefix + std::string(rest.substr(0, slash)) + '0');
      }
    }
    return names;
  }

  // Reads a cached node again, with the watch of that kind unless one is set (one data watch and one
  // children watch per node at a time): its data after its data watch fired or in a round, its
  // children likewise or once it was added. A listing brings the cache in line with it: new names
  // are fetched, names gone are removed with their subtrees.
  void reread_locked(Watched watched, NodeMap::iterator found) {
    if (!can_read_locked()) return;
    Node& node = found->second;
    const NodeRef ref{node.incarnation, node.slot};
    bool& watch_set = node.watch_set(watched);
    const bool watching = !watch_set;
    detail::NodeWatch watch;
    if (watching) {
      watch_set = true;
      watch = watch_for(watched, ref, core->generation_locked());
    }
    auto handle = [watched, ref, watching](State& self, zk_errc rc, auto reply, NodeStat stat) {
      auto read = self.find_locked(ref);
      if (read == self.nodes.end()) return;
      if (watching && rc != zk_errc::ok) read->second.watch_set(watched) = false;  // registered only with a reply
      if (rc == zk_errc::no_node) return self.remove_subtree_locked(read->first);
      if (rc != zk_errc::ok) return self.fail_unless_transient_locked(rc);
      if constexpr (std::is_same_v<decltype(reply), std::string>) self.on_data_locked(read, std::move(reply), stat);
      else self.on_children_locked(read, std::move(reply));
    };
    if (watched == Watched::data) read_locked(&detail::SessionCore::get_data, found->first, std::move(watch), handle);
    else read_locked(&detail::SessionCore::get_children, found->first, std::move(watch), handle);
  }

  void on_data_locked(NodeMap::iterator found, std::string data, const NodeStat& stat) {
    Node& node = found->second;
    if (stat.mzxid == node.node.stat.mzxid && stat.czxid == node.node.stat.czxid) {
      node.node.stat = stat;  // its children changed: same data
      return;
    }
    if (!options.cache_data) data.clear();
    counters.data_bytes = counters.data_bytes - node.node.data.size() + data.size();
    node.node = NodeData{std::move(data), stat};
    emit_locked(CacheEvent::Kind::updated, found->first, node.node);
  }

  void on_children_locked(NodeMap::iterator found, std::vector<std::string> names) {
    const std::string path = found->first;  // `found` may go from here on (removals and fetches change the map)
    std::sort(names.begin(), names.end());
    const std::vector<std::string> cached = children_locked(path);
    std::vector<std::string> gone;
    std::set_difference(cached.begin(), cached.end(), names.begin(), names.end(), std::back_inserter(gone));
    std::vector<std::string> fresh;
    std::set_difference(names.begin(), names.end(), cached.begin(), cached.end(), std::back_inserter(fresh));
    for (const auto& name : gone) remove_subtree_locked(child_path(path, name));
    // Fetches in flight for names this listing no longer shows are superseded.
    const std::string prefix = subtree_prefix(path);
    for (auto it = pending.lower_bound(prefix); it != pending.end() && it->first.starts_with(prefix);) {
      const std::string name = it->first.substr(prefix.size());
      const bool direct_child = name.find('/') == std::string::npos && it->first != path;
      if (direct_child && !std::binary_search(names.begin(), names.end(), name)) {
        forget_fetch_locked(it->second);
        it = pending.erase(it);
      } else {
        ++it;
      }
    }
    for (const auto& name : fresh) {
      const std::string child = child_path(path, name);
      if (!pending.contains(child)) fetch_locked(child);
      if (stopped) return;
    }
  }

  // The data or the children watch of one incarnation of a node: the node's next change reads it
  // (or lists it) again, with a new watch; its deletion removes its subtree.
  detail::NodeWatch watch_for(Watched watched, NodeRef ref, std::uint64_t generation) {
    auto watch = on_connection(generation, [watched, slot = ref.slot, incarnation = ref.incarnation](
                                               State& self, NodeEvent event) {
      auto found = self.find_locked({incarnation, slot});
      if (found == self.nodes.end()) return;
      found->second.watch_set(watched) = false;
      if (event == NodeEvent::deleted) self.remove_subtree_locked(found->first);
      else self.reread_locked(watched, found);
    });
    // Two of these live as long as each cached node: within a 48-byte block of malloc's (a weak
    // reference, the generation, the node's slot and incarnation, which watch).
    static_assert(sizeof(watch) <= 40);
    return watch;
  }

  bool ignore_locked(std::uint64_t generation) const { return stopped || generation != core->generation_locked(); }

  // Removes a node and everything under it: descendants first, deepest paths before their parents.
  void remove_subtree_locked(std::string path) {  // a copy: the node's own key goes
    auto found = nodes.find(path);
    if (found == nodes.end()) return;
    const std::string prefix = subtree_prefix(path);
    std::vector<NodeMap::iterator> doomed;
    for (auto it = nodes.lower_bound(prefix); it != nodes.end() && it->first.starts_with(prefix); ++it)
      if (it != found) doomed.push_back(it);
    std::reverse(doomed.begin(), doomed.end());  // a child sorts after its parent: the deepest first
    doomed.push_back(found);                     // the node last
    for (auto node : doomed) {
      counters.data_bytes -= node->second.node.data.size();
      slots[node->second.slot] = nodes.end();
      free_slots.push_back(node->second.slot);
      emit_locked(CacheEvent::Kind::removed, node->first, std::move(node->second.node));
      nodes.erase(node);
    }
    for (auto it = pending.lower_bound(prefix); it != pending.end() && it->first.starts_with(prefix);) {
      forget_fetch_locked(it->second);
      it = pending.erase(it);
    }
    if (path == root) schedule_root_poll_locked();
  }

  // ---- rounds: the initial load, and each read-again after a reconnection or a new session ----

  void start_round_locked() {
    if (stopped) return;
    ++round;
    round_open = true;
    round_outstanding = 0;
    // Fetches of the old connection: the listings below fetch again.
    for (const auto& [path, ref] : std::exchange(pending, {})) forget_fetch_locked(ref);
    if (!nodes.contains(root)) {
      fetch_locked(root);
    } else {
      for (auto it = nodes.begin(); it != nodes.end(); ++it) {  // sends reads, changes no entry
        reread_locked(Watched::data, it);
        if (depth_of(it->first) < options.max_depth) reread_locked(Watched::children, it);
      }
    }
    if (round_open && round_outstanding == 0) complete_round_locked();
  }

  void complete_round_locked() {
    round_open = false;
    if (!is_initialized) {
      is_initialized = true;
      counters.initialized = true;
      emit_locked(CacheEvent::Kind::initialized, {}, {});
      initialized_changed.notify_all();
      finish_waiters_locked({});
    }
    if (is_stale) {
      is_stale = false;
      counters.stale = false;
      ++counters.resynchronisations;
      emit_locked(CacheEvent::Kind::resynchronised, {}, {});
    }
  }

  void mark_stale_locked() {
    round_open = false;
    if (is_stale || stopped) return;
    is_stale = true;
    counters.stale = true;
    emit_locked(CacheEvent::Kind::stale, {}, {});
  }

  void schedule_root_poll_locked() {
    if (root_poll_scheduled || stopped) return;
    root_poll_scheduled = true;
    // Timers belong to the worker thread.
    core->post_to_worker([weak = weak_from_this()] {
      auto self = weak.lock();
      if (!self) return;
      if (!self->poll_timer) self->poll_timer = std::make_unique<boost::asio::steady_timer>(self->core->worker());
      self->poll_timer->expires_after(self->options.missing_root_poll);
      self->poll_timer->async_wait([weak](boost::system::error_code ec) {
        auto again = weak.lock();
        if (!again) return;
        std::lock_guard lock(again->core->mutex());
        std::lock_guard mirror(again->mirror_mutex);
        again->root_poll_scheduled = false;
        if (ec || again->stopped) return;
        if (!again->nodes.contains(again->root) && !again->pending.contains(again->root)) {
          if (again->core->usable_locked(again->core->generation_locked())) again->fetch_locked(again->root);
        }
        again->flush_events_locked();
      });
    });
  }

  void fail_unless_transient_locked(zk_errc rc) {
    if (is_connection_trouble(rc) || is_session_ended(rc)) return;  // the next connection reads again
    stop_locked(make_error_code(rc));
  }

  // Stops for good. `why` set: the cache stopped by itself, and says so with a `failed` event.
  void stop_locked(std::error_code why) {
    if (stopped) return;
    if (why) emit_locked(CacheEvent::Kind::failed, {}, {});
    flush_events_locked();
    stopped = true;
    failure = why;
    round_open = false;
    initialized_changed.notify_all();
    finish_waiters_locked(why ? why : make_error_code(errc::cancelled));
    core->post_to_worker([weak = weak_from_this()] {
      if (auto self = weak.lock(); self && self->poll_timer) self->poll_timer->cancel();
    });
    core->detach(this);
  }

  void finish_waiters_locked(std::error_code result) {
    for (auto& waiter : std::exchange(waiters, {}))
      core->post_callback([waiter = std::move(waiter), result] { waiter(result); });
  }

  // ---- events ----

  void emit_locked(CacheEvent::Kind kind, std::string path, NodeData node) {
    switch (kind) {
      case CacheEvent::Kind::added: ++counters.added; break;
      case CacheEvent::Kind::updated: ++counters.updated; break;
      case CacheEvent::Kind::removed: ++counters.removed; break;
      default: break;
    }
    if (!callback) return;
    std::lock_guard guard(delivery_mutex);
    if (!delivery_stopped) enqueue_locked(CacheEvent{kind, std::move(path), std::move(node)});
  }

  // The queue of events not yet delivered (under delivery_mutex). Up to options.max_pending_events
  // it holds every event; past it, a node's event merges into the one already waiting for that
  // node, so that a callback that falls behind is told each node's latest state once:
  //   added + updated = added (later data), updated + updated = updated (later data),
  //   removed + added = updated (the callback never saw the node go), added + removed = nothing.
  // A merge keeps the waiting event's place, which keeps a node's `added` before its children's;
  // one that turns into `removed` goes to the end, after its descendants' removals. A `stale` on a
  // waiting `resynchronised` drops both: the callback stays told `stale` until the next one.
  void enqueue_locked(CacheEvent event) {
    using Kind = CacheEvent::Kind;
    const bool over = queue.size() >= options.max_pending_events;
    if (over && event.kind == Kind::stale && waiting_resynchronised != queue.end()) {
      queue.erase(std::exchange(waiting_resynchronised, queue.end()));
      queue_coalesced += 2;
      return;
    }
    auto latest = event.path.empty() ? latest_of.end() : latest_of.find(event.path);
    if (over && latest != latest_of.end()) {
      const auto waiting = latest->second;
      const Kind before = waiting->kind, now = event.kind;
      if (now == Kind::removed && before == Kind::added) {  // never told: the callback never hears of it
        erase_queued_locked(waiting);
        queue_coalesced += 2;
        return;
      }
      if (now == Kind::updated || (now == Kind::added && before == Kind::removed)) {
        if (before == Kind::removed) waiting->kind = Kind::updated;
        waiting->node = std::move(event.node);
        ++queue_coalesced;
        return;
      }
      if (now == Kind::removed) {  // on an `updated`: to the end, as `removed`
        erase_queued_locked(waiting);
        ++queue_coalesced;
      }
    }
    queue.push_back(std::move(event));
    const auto added = std::prev(queue.end());
    if (added->kind == Kind::resynchronised) waiting_resynchronised = added;
    if (added->path.empty()) return;
    // The path's entry must view this event's path, not an earlier event's, which may be freed
    // first: an entry already there gets the new key with the new event.
    const std::string_view key(added->path);
    if (auto entry = latest_of.extract(key); !entry.empty()) {
      entry.key() = key;
      entry.mapped() = added;
      latest_of.insert(std::move(entry));
    } else {
      latest_of.emplace(key, added);
    }
    check_latest_locked();
  }

  CacheEvent dequeue_locked() {
    const auto first = queue.begin();
    if (waiting_resynchronised == first) waiting_resynchronised = queue.end();
    forget_latest_locked(first);  // while its path is still in the queue: the entry's key views it
    CacheEvent event = std::move(*first);
    queue.pop_front();
    check_latest_locked();
    return event;
  }

  // Takes a waiting event out of the queue, and its path's entry in latest_of if it names it.
  void erase_queued_locked(std::list<CacheEvent>::iterator event) {
    forget_latest_locked(event);
    queue.erase(event);
  }
  void forget_latest_locked(std::list<CacheEvent>::iterator event) {
    if (event->path.empty()) return;
    if (auto latest = latest_of.find(event->path); latest != latest_of.end() && latest->second == event)
      latest_of.erase(latest);
  }
  // In the checked builds (state_check.hpp): every entry's key is its own event's path, so no key
  // outlives the string it views.
  void check_latest_locked() const {
    if constexpr (!detail::kStateChecks) return;
    for (const auto& [key, event] : latest_of) {
      if (key.data() != event->path.data() || key.size() != event->path.size()) {
        std::fprintf(stderr, "zkrecipes: a TreeCache's index of waiting events has a key outside its event\n");
        std::abort();
      }
    }
  }

  // Has the callback thread deliver the queue: one task of this cache at a time, which delivers the
  // events waiting when it starts and posts itself again if more came meanwhile (so that the other
  // callbacks of the session get their turn).
  void flush_events_locked() {
    std::lock_guard guard(delivery_mutex);
    post_delivery_locked();
  }
  void post_delivery_locked() {
    if (queue.empty() || delivery_posted || delivery_stopped) return;
    delivery_posted = true;
    core->post_callback([weak = weak_from_this()] {
      if (auto self = weak.lock()) self->deliver();
    });
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_suspended(std::uint64_t) override {
    std::lock_guard mirror(mirror_mutex);
    mark_stale_locked();
    flush_events_locked();
  }
  void on_reconnected(std::uint64_t) override {  // the watches set stay set
    std::lock_guard mirror(mirror_mutex);
    mark_stale_locked();
    start_round_locked();
    flush_events_locked();
  }
  void on_new_session(std::uint64_t) override {
    std::lock_guard mirror(mirror_mutex);
    for (auto& [path, node] : nodes) node.data_watch = node.children_watch = false;  // gone with the old handle
    mark_stale_locked();
    start_round_locked();
    flush_events_locked();
  }
  void on_session_lost(std::uint64_t, LossReason) override {
    std::lock_guard mirror(mirror_mutex);
    mark_stale_locked();
    flush_events_locked();
  }
  void on_session_ended(std::error_code why) override {
    std::lock_guard mirror(mirror_mutex);
    stop_locked(why ? why : make_error_code(errc::session_closed));
  }

  // ---- calling back (callback thread) ----

  void deliver() {
    std::unique_lock guard(delivery_mutex);
    for (std::size_t turn = queue.size(); turn > 0 && !queue.empty() && !delivery_stopped; --turn) {
      const CacheEvent event = dequeue_locked();
      delivering_on = std::this_thread::get_id();
      guard.unlock();
      detail::SessionCore::run_user_callback([&] { callback(event); });
      guard.lock();
      delivering_on = {};
      delivered.notify_all();
    }
    delivery_posted = false;
    post_delivery_locked();
  }

  void stop_deliveries() {
    std::unique_lock guard(delivery_mutex);
    delivery_stopped = true;
    queue.clear();
    latest_of.clear();
    waiting_resynchronised = queue.end();
    if (delivering_on == std::this_thread::get_id()) return;  // stopped from the callback itself
    delivered.wait(guard, [&] { return delivering_on == std::thread::id(); });
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string root;
  const Callback callback;
  const TreeCacheOptions options;

  // Under core->mutex().
  bool stopped = false;
  std::error_code failure;
  std::uint64_t next_incarnation = 1;
  std::map<std::string, NodeRef, std::less<>> pending;  // fetches in flight: path -> the read's node
  std::vector<NodeMap::iterator> slots;                  // by NodeRef::slot; nodes.end() if free
  std::vector<std::uint32_t> free_slots;
  std::uint64_t round = 0;
  bool round_open = false;
  std::size_t round_outstanding = 0;
  bool root_poll_scheduled = false;
  std::unique_ptr<boost::asio::steady_timer> poll_timer;  // the worker thread's

  // Written under core->mutex() and mirror_mutex; the accessors read under mirror_mutex alone.
  mutable std::mutex mirror_mutex;
  mutable std::condition_variable initialized_changed;
  NodeMap nodes;
  bool is_initialized = false;
  bool is_stale = false;
  CacheMetrics counters;
  std::vector<std::function<void(std::error_code)>> waiters;

  // Under delivery_mutex (taken after the others).
  mutable std::mutex delivery_mutex;
  std::condition_variable delivered;
  bool delivery_stopped = false;
  std::thread::id delivering_on;
  std::list<CacheEvent> queue;  // not delivered yet (enqueue_locked)
  // Each path's last event in `queue`, keyed by a view of that event's own path: an entry goes
  // with its event (erase_queued_locked, dequeue_locked), and a later event's replaces it.
  std::unordered_map<std::string_view, std::list<CacheEvent>::iterator> latest_of;
  std::list<CacheEvent>::iterator waiting_resynchronised = queue.end();
  bool delivery_posted = false;
  std::uint64_t queue_coalesced = 0;
};

TreeCache::TreeCache(Session& session, std::string root, Callback callback, TreeCacheOptions options) {
  detail::require_valid_path(root, "cache");
  if (options.max_depth < 0)
    throw Error(make_error_code(errc::invalid_argument), "cache", root, "max_depth is negative");
  if (options.max_nodes == 0) throw Error(make_error_code(errc::invalid_argument), "cache", root, "max_nodes is 0");
  if (options.missing_root_poll <= std::chrono::milliseconds::zero())
    throw Error(make_error_code(errc::invalid_argument), "cache", root, "missing_root_poll is not positive");
  state_ = std::make_shared<State>(detail::Internals::core(session), std::move(root), std::move(callback), options);
  std::lock_guard lock(state_->core->mutex());
  std::lock_guard mirror(state_->mirror_mutex);
  if (state_->core->ended()) {
    state_->stopped = true;
    state_->failure = make_error_code(errc::session_closed);
    return;
  }
  state_->core->attach(state_);
  if (state_->core->state() != SessionState::connected) state_->mark_stale_locked();
  state_->start_round_locked();
  state_->flush_events_locked();
}

std::optional<TreeCache> TreeCache::make(Session& session, std::string root, Callback callback,
                                         TreeCacheOptions options, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<TreeCache>(std::in_place, session, std::move(root), std::move(callback), options);
  });
}

TreeCache::~TreeCache() { stop(); }

const std::string& TreeCache::root() const { return state_->root; }

std::optional<NodeData> TreeCache::get(std::string_view path) const {
  std::lock_guard mirror(state_->mirror_mutex);
  auto found = state_->nodes.find(path);
  if (found == state_->nodes.end()) return std::nullopt;
  return found->second.node;
}

std::vector<std::string> TreeCache::children(std::string_view path) const {
  std::lock_guard mirror(state_->mirror_mutex);
  if (!state_->nodes.contains(path)) return {};
  return state_->children_locked(path);
}

std::map<std::string, NodeData> TreeCache::snapshot() const {
  std::lock_guard mirror(state_->mirror_mutex);
  std::map<std::string, NodeData> out;
  for (const auto& [path, node] : state_->nodes) out.emplace_hint(out.end(), path, node.node);
  return out;
}

std::size_t TreeCache::size() const {
  std::lock_guard mirror(state_->mirror_mutex);
  return state_->nodes.size();
}

bool TreeCache::initialized() const {
  std::lock_guard mirror(state_->mirror_mutex);
  return state_->is_initialized;
}

bool TreeCache::stale() const {
  std::lock_guard mirror(state_->mirror_mutex);
  return state_->is_stale;
}

bool TreeCache::wait_initialized(std::chrono::milliseconds timeout) const {
  std::unique_lock mirror(state_->mirror_mutex);
  state_->initialized_changed.wait_for(mirror, timeout, [&] { return state_->is_initialized || state_->stopped; });
  return state_->is_initialized;
}

void TreeCache::async_wait_initialized(std::function<void(std::error_code)> done) {
  std::lock_guard lock(state_->core->mutex());
  std::lock_guard mirror(state_->mirror_mutex);
  if (!state_->is_initialized && !state_->stopped) {
    state_->waiters.push_back(std::move(done));
    return;
  }
  std::error_code result;
  if (!state_->is_initialized) result = state_->failure ? state_->failure : make_error_code(errc::cancelled);
  // Complete already: still on the callback thread, never inside this call (a caller that waits in
  // a loop would otherwise nest a call a turn).
  state_->core->post_callback([done = std::move(done), result] { done(result); });
}

std::error_code TreeCache::error() const {
  std::lock_guard lock(state_->core->mutex());
  return state_->failure;
}

CacheMetrics TreeCache::metrics() const {
  std::lock_guard mirror(state_->mirror_mutex);
  CacheMetrics out = state_->counters;
  out.nodes = state_->nodes.size();
  std::lock_guard guard(state_->delivery_mutex);
  out.events_pending = state_->queue.size();
  out.events_coalesced = state_->queue_coalesced;
  return out;
}

void TreeCache::stop() {
  {
    std::lock_guard lock(state_->core->mutex());
    std::lock_guard mirror(state_->mirror_mutex);
    state_->stop_locked({});
  }
  state_->stop_deliveries();
}

NodeCache::NodeCache(Session& session, std::string path, Callback callback, std::chrono::milliseconds missing_node_poll)
    : tree_(session, std::move(path), std::move(callback),
            TreeCacheOptions{.max_depth = 0, .cache_data = true, .max_nodes = 1, .missing_root_poll = missing_node_poll}) {}

std::optional<NodeCache> NodeCache::make(Session& session, std::string path, Callback callback,
                                         std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<NodeCache>(std::in_place, session, std::move(path), std::move(callback)); });
}

}  // namespace zkr
