// SPDX-License-Identifier: Apache-2.0
// TreeCache and NodeCache on real servers: the initial load, ordered events under a writer, a
// deleted subtree, a node created and deleted at once (no ghost), the depth limit and the node
// limit, "stale" while the server is stopped and the differences told after its restart, a session
// expired under the cache, the node cache's created/changed/deleted, a callback that blocks
// while the tree changes (the events waiting for it stay bounded), and one let through an event at
// a time (several events waiting for one node, under and past max_pending_events); the Asio wait,
// also when the cache is loaded already (it completes as if by post). The sanitizer pass runs
// these too (scripts/sanitize-subset).
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <fmt/format.h>

#include <zkr/asio.hpp>
#include <zkr/cache.hpp>
#include <zkr/error.hpp>

#include "internals.hpp"
#include "session_core.hpp"

#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

using Kind = CacheEvent::Kind;

// What the callback was told, in order.
class Heard {
 public:
  TreeCache::Callback callback() {
    return [this](const CacheEvent& event) {
      std::lock_guard guard(mutex_);
      events_.push_back(event);
    };
  }
  std::vector<CacheEvent> events() const {
    std::lock_guard guard(mutex_);
    return events_;
  }
  // "added /x =data", "removed /x", "initialized", ...: for readable failures.
  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    for (const auto& event : events()) {
      std::string line(to_string(event.kind));
      if (!event.path.empty()) line += " " + event.path;
      if (event.kind == Kind::added || event.kind == Kind::updated) line += " =" + event.node.data;
      out.push_back(line);
    }
    return out;
  }
  std::size_t count(Kind kind) const {
    std::size_t n = 0;
    for (const auto& event : events()) n += event.kind == kind;
    return n;
  }
  void clear() {
    std::lock_guard guard(mutex_);
    events_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<CacheEvent> events_;
};

// A callback that records what it is told and, while held, waits before each event until it is let
// through (each wait bounded): the events that come meanwhile wait in the cache's queue.
class Gate {
 public:
  TreeCache::Callback callback() {
    return [this](const CacheEvent& event) {
      std::unique_lock guard(mutex_);
      changed_.wait_for(guard, testenv::scaled(30s), [&] { return !held_ || permits_ > 0; });
      if (held_ && permits_ > 0) --permits_;
      std::string line(to_string(event.kind));
      if (!event.path.empty()) line += " " + event.path;
      if (event.kind == Kind::added || event.kind == Kind::updated) line += " =" + event.node.data;
      lines_.push_back(line);
      changed_.notify_all();
    };
  }
  void hold() {
    std::lock_guard guard(mutex_);
    held_ = true;
    permits_ = 0;
  }
  void let_through(std::size_t events) {
    std::lock_guard guard(mutex_);
    permits_ += events;
    changed_.notify_all();
  }
  void release() {
    std::lock_guard guard(mutex_);
    held_ = false;
    changed_.notify_all();
  }
  // Waits (bounded) until `count` events were told in all.
  bool told(std::size_t count) {
    std::unique_lock guard(mutex_);
    return changed_.wait_for(guard, testenv::scaled(10s), [&] { return lines_.size() >= count; });
  }
  std::vector<std::string> lines() const {
    std::lock_guard guard(mutex_);
    return lines_;
  }
  // Releases the gate when it goes out of scope: declare it after the cache, so that a failed
  // ASSERT never leaves the cache's stop() waiting for a held callback.
  [[nodiscard]] auto opener() {
    struct Opener {
      Gate* gate;
      ~Opener() { gate->release(); }
    };
    return Opener{this};
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool held_ = false;
  std::size_t permits_ = 0;
  std::vector<std::string> lines_;
};

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& line : lines) out += line + "\n";
  return out;
}

// path -> data of a snapshot.
std::map<std::string, std::string> contents(const std::map<std::string, NodeData>& snapshot) {
  std::map<std::string, std::string> out;
  for (const auto& [path, node] : snapshot) out[path] = node.data;
  return out;
}

// The server's subtree under `root` (path -> data), read with the raw client.
std::map<std::string, std::string> server_tree(RawClient& raw, const std::string& root) {
  std::map<std::string, std::string> out;
  std::vector<std::string> todo{root};
  while (!todo.empty()) {
    const std::string path = todo.back();
    todo.pop_back();
    char buffer[1024];
    int length = sizeof buffer;
    if (zoo_get(raw.handle(), path.c_str(), 0, buffer, &length, nullptr) != ZOK) continue;
    out[path] = std::string(buffer, length < 0 ? 0 : length);
    for (const auto& child : raw.children(path)) todo.push_back(path + "/" + child);
  }
  return out;
}

// The initial load is complete and its `initialized` event delivered (the flag turns first).
bool loaded(const TreeCache& cache, const Heard& heard) {
  return cache.wait_initialized(testenv::scaled(10s)) &&
         eventually([&] { return heard.count(Kind::initialized) == 1; });
}

class CacheTest : public ServerTest {
 protected:
  Sessions sessions;
  void SetUp() override { raw.create(path.substr(0, path.rfind('/'))); }  // the tests' common parent
  void TearDown() override { sessions.close_all(); }
  void set(const std::string& node, const std::string& data) {
    ASSERT_EQ(zoo_set(raw.handle(), node.c_str(), data.data(), static_cast<int>(data.size()), -1), ZOK) << node;
  }
  // Writes `data` to `node` and waits until the cache has read it: its event is queued by then.
  bool write_read(const TreeCache& cache, const std::string& node, const std::string& data) {
    set(node, data);
    return eventually([&] {
      const auto cached = cache.get(node);
      return cached && cached->data == data;
    });
  }
};

TEST_F(CacheTest, LoadsTheTreeOnceParentsBeforeChildrenThenSaysInitialized) {
  ASSERT_EQ(raw.create(path, "root"), ZOK);
  ASSERT_EQ(raw.create(path + "/a", "A"), ZOK);
  ASSERT_EQ(raw.create(path + "/a/x", "AX"), ZOK);
  ASSERT_EQ(raw.create(path + "/b", ""), ZOK);
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  EXPECT_EQ(contents(cache.snapshot()), server_tree(raw, path));
  EXPECT_EQ(cache.children(path), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::initialized) == 1; }));
  auto lines = heard.lines();
  ASSERT_EQ(lines.size(), 5u) << joined(lines);
  EXPECT_EQ(lines[0], "added " + path + " =root");
  EXPECT_EQ(lines[4], "initialized");
  const auto at = [&](const std::string& line) { return std::find(lines.begin(), lines.end(), line) - lines.begin(); };
  EXPECT_LT(at("added " + path + "/a =A"), at("added " + path + "/a/x =AX"));
  EXPECT_FALSE(cache.stale());
  EXPECT_EQ(cache.metrics().nodes, 4u);
  EXPECT_EQ(cache.metrics().added, 4u);
}

// children() is read from the mirror's paths: a child's own subtree is skipped, and names that sort
// between a child and its subtree ("a-b", "a.c" before "a/x") or right after it ("a0") are not.
TEST_F(CacheTest, ChildrenAreEachCachedNodesDirectChildrenSorted) {
  for (const char* node : {"", "/a", "/a/x", "/a/x/y", "/a-b", "/a.c", "/a0", "/b"})
    ASSERT_EQ(raw.create(path + node), ZOK) << node;
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(loaded(cache, heard));
  EXPECT_EQ(cache.children(path), (std::vector<std::string>{"a", "a-b", "a.c", "a0", "b"}));
  EXPECT_EQ(cache.children(path + "/a"), std::vector<std::string>{"x"});
  EXPECT_EQ(cache.children(path + "/a/x/y"), std::vector<std::string>{});
  EXPECT_EQ(cache.children(path + "/absent"), std::vector<std::string>{});
  ASSERT_EQ(raw.remove(path + "/a.c"), ZOK);
  ASSERT_EQ(raw.create(path + "/a/w"), ZOK);
  ASSERT_TRUE(eventually([&] { return cache.children(path + "/a") == std::vector<std::string>{"w", "x"}; }));
  ASSERT_TRUE(eventually([&] { return !cache.get(path + "/a.c"); }));
  EXPECT_EQ(cache.children(path), (std::vector<std::string>{"a", "a-b", "a0", "b"}));
  EXPECT_EQ(contents(cache.snapshot()), server_tree(raw, path));
}

TEST_F(CacheTest, AMissingRootIsLoadedWhenItAppearsAndTheDepthLimitHolds) {
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback(), {.max_depth = 1, .missing_root_poll = 50ms});
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  EXPECT_EQ(cache.size(), 0u);
  ASSERT_EQ(raw.create(path, "r"), ZOK);
  ASSERT_EQ(raw.create(path + "/a", "A"), ZOK);
  ASSERT_EQ(raw.create(path + "/a/deep", "D"), ZOK);
  ASSERT_TRUE(eventually([&] { return cache.size() == 2; })) << joined(heard.lines());
  std::this_thread::sleep_for(200ms);  // time to (wrongly) read below the limit
  EXPECT_FALSE(cache.get(path + "/a/deep"));
  EXPECT_EQ(cache.get(path + "/a")->data, "A");
}

TEST_F(CacheTest, EventsOfEachPathComeInTheOrderTheServerAppliedThem) {
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(path + "/counter", "0"), ZOK);
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  // A writer on its own session: counter values up, and nodes created and deleted meanwhile.
  constexpr int kWrites = 60;
  std::thread writer([&] {
    RawClient own(servers);
    for (int i = 1; i <= kWrites; ++i) {
      const std::string value = std::to_string(i);
      zoo_set(own.handle(), (path + "/counter").c_str(), value.data(), static_cast<int>(value.size()), -1);
      if (i % 10 == 0) own.create(path + "/n" + value, value);
      if (i % 20 == 0) own.remove(path + "/n" + std::to_string(i - 10));
    }
  });
  writer.join();
  const auto expected = server_tree(raw, path);
  ASSERT_TRUE(eventually([&] { return contents(cache.snapshot()) == expected; })) << joined(heard.lines());
  // Each path's events: the counter only ever goes up; a node is added before it is removed.
  int last_counter = 0;
  std::map<std::string, std::string> seen;  // path -> last kind
  for (const auto& event : heard.events()) {
    if (event.path == path + "/counter" && event.kind == Kind::updated) {
      EXPECT_GT(std::stoi(event.node.data), last_counter) << joined(heard.lines());
      last_counter = std::stoi(event.node.data);
    }
    if (event.kind == Kind::added) {
      EXPECT_NE(seen[event.path], "added") << event.path;
      seen[event.path] = "added";
    }
    if (event.kind == Kind::removed) {
      EXPECT_EQ(seen[event.path], "added") << event.path;
      seen[event.path] = "removed";
    }
  }
  EXPECT_EQ(last_counter, kWrites);
}

TEST_F(CacheTest, ADeletedSubtreeIsRemovedDescendantsFirst) {
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(path + "/a"), ZOK);
  ASSERT_EQ(raw.create(path + "/a/b"), ZOK);
  ASSERT_EQ(raw.create(path + "/a/b/c"), ZOK);
  ASSERT_EQ(raw.create(path + "/keep"), ZOK);
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(loaded(cache, heard));
  heard.clear();
  ASSERT_EQ(raw.remove(path + "/a/b/c"), ZOK);
  ASSERT_EQ(raw.remove(path + "/a/b"), ZOK);
  ASSERT_EQ(raw.remove(path + "/a"), ZOK);
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::removed) == 3; })) << joined(heard.lines());
  EXPECT_EQ(heard.lines(), (std::vector<std::string>{"removed " + path + "/a/b/c", "removed " + path + "/a/b",
                                                     "removed " + path + "/a"}));
  EXPECT_EQ(cache.children(path), std::vector<std::string>{"keep"});
  // The root itself: everything goes, and it comes back when recreated.
  ASSERT_EQ(raw.remove(path + "/keep"), ZOK);
  ASSERT_EQ(raw.remove(path), ZOK);
  ASSERT_TRUE(eventually([&] { return cache.size() == 0; }));
}

TEST_F(CacheTest, ANodeCreatedAndDeletedBetweenTwoReadsLeavesNoGhost) {
  ASSERT_EQ(raw.create(path), ZOK);
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(loaded(cache, heard));
  heard.clear();
  // Created and deleted in one transaction: no read can ever see it. Then many quick pairs.
  Transaction flash;
  flash.create(path + "/flash", "x").remove(path + "/flash");
  session.commit(flash);
  std::thread writer([&] {
    RawClient own(servers);
    for (int i = 0; i < 40; ++i) {
      const std::string node = path + "/q" + std::to_string(i % 4);
      own.create(node, "v");
      own.remove(node);
    }
    own.create(path + "/last", "end");
  });
  writer.join();
  ASSERT_TRUE(eventually([&] { return cache.get(path + "/last").has_value(); })) << joined(heard.lines());
  std::this_thread::sleep_for(200ms);  // late replies would land now
  EXPECT_EQ(contents(cache.snapshot()), server_tree(raw, path));
  for (const auto& event : heard.events()) EXPECT_NE(event.path, path + "/flash") << joined(heard.lines());
  // Every quick node told as added was told as removed again.
  EXPECT_EQ(heard.count(Kind::added) - 1 /* /last */, heard.count(Kind::removed)) << joined(heard.lines());
}

TEST_F(CacheTest, TooManyNodesStopTheCacheWithCacheLimit) {
  ASSERT_EQ(raw.create(path), ZOK);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(raw.create(path + "/" + std::to_string(i)), ZOK);
  Heard heard;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, heard.callback(), {.max_nodes = 3});
  ASSERT_TRUE(eventually([&] { return cache.error() == errc::cache_limit; }));
  EXPECT_FALSE(cache.wait_initialized(100ms));
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::failed) == 1; }));
  EXPECT_LE(cache.size(), 3u);
  EXPECT_THROW(TreeCache(session, "no-slash"), Error);
  std::error_code ec;
  EXPECT_FALSE(TreeCache::make(session, path, {}, {.max_depth = -1}, ec));
  EXPECT_EQ(ec, errc::invalid_argument);
}

TEST_F(CacheTest, NodeCacheTellsCreatedChangedAndDeleted) {
  Heard heard;
  Session& session = sessions.add(servers);
  NodeCache node(session, path, heard.callback(), 50ms);
  ASSERT_TRUE(node.wait_initialized(testenv::scaled(10s)));
  EXPECT_FALSE(node.current());
  ASSERT_EQ(raw.create(path, "one"), ZOK);
  ASSERT_TRUE(eventually([&] { return node.current() && node.current()->data == "one"; }));
  set(path, "two");
  ASSERT_TRUE(eventually([&] { return node.current() && node.current()->data == "two"; }));
  ASSERT_EQ(raw.create(path + "/child"), ZOK);  // not part of a node cache
  ASSERT_EQ(raw.remove(path + "/child"), ZOK);
  ASSERT_EQ(raw.remove(path), ZOK);
  ASSERT_TRUE(eventually([&] { return !node.current(); }));
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::removed) == 1; }));
  EXPECT_EQ(heard.lines(), (std::vector<std::string>{"initialized", "added " + path + " =one",
                                                     "updated " + path + " =two", "removed " + path}));
}

// A callback that blocks while every node changes many times, a subtree goes and a node is
// deleted and made again: the events waiting for it stay within max_pending_events plus one per
// node (each node's events merge into one with its latest state), and once it runs again, what it
// was told adds up to the server's tree, in an order it could apply (a parent added before its
// children, removed after them; each node's values in the order written). Without the bound, every
// one of the ~300 changes waits.
TEST_F(CacheTest, ASlowCallbackHasBoundedEventsWaitingAndIsStillToldTheFinalTree) {
  constexpr int kNodes = 10, kWritesEach = 30;
  constexpr std::size_t kMaxPending = 8;
  ASSERT_EQ(raw.create(path), ZOK);
  for (int i = 0; i < kNodes; ++i) ASSERT_EQ(raw.create(fmt::format("{}/n{}", path, i), "0"), ZOK);
  ASSERT_EQ(raw.create(path + "/sub", "0"), ZOK);
  ASSERT_EQ(raw.create(path + "/sub/x", "0"), ZOK);
  std::mutex mutex;
  std::condition_variable released;
  bool hold = false;
  std::size_t told_after_release = 0, blocked = 0;
  std::map<std::string, std::string> told;  // the tree as the events tell it
  std::map<std::string, int> last_value;
  std::vector<std::string> misordered;
  Session& session = sessions.add(servers);
  TreeCache cache(
      session, path,
      [&](const CacheEvent& event) {
        std::unique_lock guard(mutex);
        if (hold) {
          ++blocked;
          released.wait_for(guard, testenv::scaled(30s), [&] { return !hold; });  // bounded
        }
        told_after_release += blocked > 0;
        const std::string& at = event.path;
        if (event.kind == Kind::removed) {
          auto below = told.upper_bound(at + "/");
          if (!told.contains(at) || (below != told.end() && below->first.starts_with(at + "/")))
            misordered.push_back("removed " + at);
          told.erase(at);
          last_value.erase(at);
        }
        if (event.kind != Kind::added && event.kind != Kind::updated) return;
        if ((event.kind == Kind::added) == told.contains(at) ||
            (at != path && !told.contains(at.substr(0, at.rfind('/')))))
          misordered.push_back(fmt::format("{} {}", to_string(event.kind), at));
        const int value = event.node.data.empty() ? 0 : std::stoi(event.node.data);
        if (last_value.contains(at) && value <= last_value[at]) misordered.push_back(at + " =" + event.node.data);
        told[at] = event.node.data;
        last_value[at] = value;
      },
      {.max_pending_events = kMaxPending});
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  ASSERT_TRUE(eventually([&] { return cache.metrics().events_pending == 0; }));
  {
    std::lock_guard guard(mutex);
    hold = true;
  }
  // The first event blocks the callback.
  std::thread writer([&] {
    RawClient own(servers);
    for (int round = 1; round <= kWritesEach; ++round) {
      const std::string value = std::to_string(round);
      for (int i = 0; i < kNodes; ++i)
        zoo_set(own.handle(), fmt::format("{}/n{}", path, i).c_str(), value.data(), static_cast<int>(value.size()), -1);
      if (round < kWritesEach / 2) {  // the parent's change waits before the child's
        zoo_set(own.handle(), (path + "/sub").c_str(), value.data(), static_cast<int>(value.size()), -1);
        zoo_set(own.handle(), (path + "/sub/x").c_str(), value.data(), static_cast<int>(value.size()), -1);
      }
      if (round == kWritesEach / 2) {
        own.create(path + "/late", value);
        own.remove(path + "/n0");
        own.remove(path + "/sub/x");
        own.remove(path + "/sub");
        own.remove(path + "/n1");
        own.create(path + "/n1", value);
      }
    }
  });
  writer.join();
  const auto expected = server_tree(raw, path);
  ASSERT_TRUE(eventually([&] { return contents(cache.snapshot()) == expected; }));
  // Every change has been read while the callback is still held: the queue is at its longest.
  const CacheMetrics held = cache.metrics();
  EXPECT_LE(held.events_pending, kMaxPending + 2 * (kNodes + 3)) << held.events_coalesced << " merged";
  EXPECT_GT(held.events_coalesced, 0u);
  {
    std::lock_guard guard(mutex);
    EXPECT_EQ(blocked, 1u);
    hold = false;
  }
  released.notify_all();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return told == expected;
  })) << held.events_pending << " waited";
  EXPECT_TRUE(eventually([&] { return cache.metrics().events_pending == 0; }));
  std::lock_guard guard(mutex);
  EXPECT_LE(told_after_release, kMaxPending + 2 * (kNodes + 3) + 1);
  EXPECT_TRUE(misordered.empty()) << joined(misordered);
}

// A callback slower than the changes, well under max_pending_events: two, then three events wait
// for one node, some of them told while others come; each is told once, in order.
TEST_F(CacheTest, EventsWaitingTwoAndMoreForOneNodeAreEachToldInOrder) {
  ASSERT_EQ(raw.create(path), ZOK);
  const std::string a = path + "/a", b = path + "/b";
  ASSERT_EQ(raw.create(a, "0"), ZOK);
  ASSERT_EQ(raw.create(b, "0"), ZOK);
  Gate gate;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, gate.callback());
  auto open_at_end = gate.opener();
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  ASSERT_TRUE(gate.told(4));  // the root, a, b, initialized
  gate.hold();
  ASSERT_TRUE(write_read(cache, a, "1"));
  ASSERT_TRUE(eventually([&] { return cache.metrics().events_pending == 0; }));  // taken: waits at the gate
  ASSERT_TRUE(write_read(cache, a, "2"));
  ASSERT_TRUE(write_read(cache, a, "3"));  // two events wait for a
  ASSERT_TRUE(write_read(cache, b, "1"));
  ASSERT_TRUE(write_read(cache, a, "4"));  // three
  EXPECT_EQ(cache.metrics().events_pending, 4u);
  gate.let_through(2);  // a=1 and a=2 told: a=3 and a=4 still wait
  ASSERT_TRUE(gate.told(4 + 2));
  ASSERT_TRUE(write_read(cache, a, "5"));
  ASSERT_TRUE(write_read(cache, b, "2"));
  gate.let_through(3);  // a=3, b=1, a=4
  ASSERT_TRUE(gate.told(4 + 5));
  ASSERT_TRUE(write_read(cache, a, "6"));
  gate.release();
  ASSERT_TRUE(gate.told(4 + 8));
  ASSERT_TRUE(eventually([&] { return cache.metrics().events_pending == 0; }));
  auto lines = gate.lines();
  lines.erase(lines.begin(), lines.begin() + 4);
  EXPECT_EQ(lines, (std::vector<std::string>{"updated " + a + " =1", "updated " + a + " =2", "updated " + a + " =3",
                                             "updated " + b + " =1", "updated " + a + " =4", "updated " + a + " =5",
                                             "updated " + b + " =2", "updated " + a + " =6"}))
      << joined(gate.lines());
  EXPECT_EQ(cache.metrics().events_coalesced, 0u);
}

// Past max_pending_events, a node's event merges into the one waiting for it, also where several of
// its events were queued before the bound was reached and the first of them has been told since.
TEST_F(CacheTest, PastTheBoundEventsOfRepeatedNodesMergeIntoTheOnesWaiting) {
  ASSERT_EQ(raw.create(path), ZOK);
  const std::string a = path + "/a", b = path + "/b", c = path + "/c", d = path + "/d";
  for (const auto& node : {a, b, c}) ASSERT_EQ(raw.create(node, "0"), ZOK);
  Gate gate;
  Session& session = sessions.add(servers);
  TreeCache cache(session, path, gate.callback(), {.max_pending_events = 4});
  auto open_at_end = gate.opener();
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  ASSERT_TRUE(gate.told(5));  // the root, a, b, c, initialized
  ASSERT_TRUE(eventually([&] { return cache.metrics().events_pending == 0; }));
  gate.hold();
  const auto pending = [&](std::size_t events) {
    return eventually([&] { return cache.metrics().events_pending == events; });
  };
  ASSERT_TRUE(write_read(cache, a, "1"));
  ASSERT_TRUE(pending(0));  // taken by the callback, which waits at the gate
  for (const auto& [node, data] : {std::pair{a, "2"}, {a, "3"}, {b, "1"}, {c, "1"}})
    ASSERT_TRUE(write_read(cache, node, data));  // four wait: the bound
  gate.let_through(1);                            // a=1 told; a=2 taken
  ASSERT_TRUE(pending(3));
  ASSERT_TRUE(write_read(cache, b, "2"));  // the fourth again: a=3 b=1 c=1 b=2
  ASSERT_TRUE(write_read(cache, a, "4"));  // merges into a=3
  ASSERT_TRUE(write_read(cache, b, "3"));  // into b=2
  ASSERT_TRUE(write_read(cache, c, "2"));  // into c=1
  EXPECT_EQ(cache.metrics().events_pending, 4u);
  ASSERT_EQ(raw.remove(c), ZOK);  // c's waiting update goes: `removed` at the end
  ASSERT_TRUE(eventually([&] { return !cache.get(c); }));
  ASSERT_EQ(raw.create(d, "1"), ZOK);  // added at the end: a=4 b=1 b=3 removed-c added-d
  ASSERT_TRUE(eventually([&] { return cache.get(d).has_value(); }));
  gate.let_through(2);  // a=2 and a=4 told; b=1 taken
  ASSERT_TRUE(pending(3));
  ASSERT_TRUE(write_read(cache, a, "5"));  // the fourth: b=3 removed-c added-d a=5
  ASSERT_TRUE(write_read(cache, b, "4"));  // merges into b=3
  EXPECT_EQ(cache.metrics().events_coalesced, 5u);
  gate.release();
  ASSERT_TRUE(pending(0));
  auto lines = gate.lines();
  lines.erase(lines.begin(), lines.begin() + 5);
  EXPECT_EQ(lines, (std::vector<std::string>{"updated " + a + " =1", "updated " + a + " =2", "updated " + a + " =4",
                                             "updated " + b + " =1", "updated " + b + " =4", "removed " + c,
                                             "added " + d + " =1", "updated " + a + " =5"}))
      << joined(gate.lines());
  EXPECT_EQ(contents(cache.snapshot()), server_tree(raw, path));
}

// The server stopped: the cache says stale; the tree changes before it can reconnect (its proxy
// holds it off while another client writes); once through, the cache tells the differences and
// says resynchronised.
TEST_F(CacheTest, StaleWhileTheServerIsStoppedThenTheDifferencesAfterItsRestart) {
  testenv::Cluster cluster;
  RawClient direct(cluster.connect_string());
  ASSERT_EQ(direct.create("/tree", "r"), ZOK);
  ASSERT_EQ(direct.create("/tree/changed", "old"), ZOK);
  ASSERT_EQ(direct.create("/tree/deleted", "d"), ZOK);
  testenv::Proxy proxy(cluster.server_address(0));
  Heard heard;
  Sessions own;  // closed before the cluster goes
  auto close_own = own.closer();
  Session& session = own.add(proxy.address(), 4000ms);
  TreeCache cache(session, "/tree", heard.callback());
  ASSERT_TRUE(loaded(cache, heard));
  EXPECT_FALSE(cache.stale());
  heard.clear();

  proxy.reset();
  proxy.blackhole();
  cluster.stop(0);
  ASSERT_TRUE(eventually([&] { return cache.stale(); }, testenv::scaled(10s)));
  cluster.start(0);
  ASSERT_TRUE(eventually([&] {
    return zoo_set(direct.handle(), "/tree/changed", "new", 3, -1) == ZOK;
  }, testenv::scaled(15s)));
  ASSERT_EQ(direct.remove("/tree/deleted"), ZOK);
  ASSERT_EQ(direct.create("/tree/added", "a"), ZOK);
  EXPECT_TRUE(cache.stale());
  proxy.pass();
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::resynchronised) == 1; }, testenv::scaled(20s)))
      << joined(heard.lines());
  EXPECT_FALSE(cache.stale());
  EXPECT_EQ(contents(cache.snapshot()), server_tree(direct, "/tree"));
  auto lines = heard.lines();
  ASSERT_GE(lines.size(), 5u) << joined(lines);
  EXPECT_EQ(lines.front(), "stale");
  EXPECT_EQ(lines.back(), "resynchronised");
  const std::vector<std::string> between(lines.begin() + 1, lines.end() - 1);
  std::vector<std::string> sorted = between;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"added /tree/added =a", "removed /tree/deleted",
                                              "updated /tree/changed =new"}))
      << joined(lines);
}

TEST_F(CacheTest, ASessionExpiredUnderTheCacheIsFollowedByAFullResynchronisation) {
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(path + "/stays", "s"), ZOK);
  ASSERT_EQ(raw.create(path + "/goes", "g"), ZOK);
  ASSERT_EQ(raw.create(path + "/goes/child", "c"), ZOK);
  ASSERT_EQ(raw.create(path + "/goes/child/grandchild", "gc"), ZOK);
  testenv::Proxy proxy(servers);
  Heard heard;
  Session& session = sessions.add(proxy.address(), 3000ms);
  TreeCache cache(session, path, heard.callback());
  ASSERT_TRUE(loaded(cache, heard));
  heard.clear();
  const auto old_session = session.id();
  auto id = detail::Internals::core(session)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_EQ(raw.remove(path + "/goes/child/grandchild"), ZOK);
  ASSERT_EQ(raw.remove(path + "/goes/child"), ZOK);
  ASSERT_EQ(raw.remove(path + "/goes"), ZOK);
  ASSERT_EQ(raw.create(path + "/new", "n"), ZOK);
  ASSERT_TRUE(eventually([&] { return cache.stale(); }, testenv::scaled(10s)));
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return heard.count(Kind::resynchronised) == 1; }, testenv::scaled(20s)))
      << joined(heard.lines());
  EXPECT_NE(session.id(), old_session);
  EXPECT_EQ(contents(cache.snapshot()), server_tree(raw, path));
  // The subtree that went while the cache could not hear is removed as one, descendants first.
  std::vector<std::string> removals;
  for (const auto& line : heard.lines())
    if (line.starts_with("removed")) removals.push_back(line);
  EXPECT_EQ(removals, (std::vector<std::string>{"removed " + path + "/goes/child/grandchild",
                                                "removed " + path + "/goes/child", "removed " + path + "/goes"}))
      << joined(heard.lines());
  // The new session's watches work: a change after the resynchronisation is heard.
  set(path + "/stays", "changed");
  ASSERT_TRUE(eventually([&] { return cache.get(path + "/stays")->data == "changed"; })) << joined(heard.lines());
  EXPECT_EQ(heard.count(Kind::stale), 1u) << joined(heard.lines());
}

// An operation already complete when it starts completes as if by post, never inside the call
// that starts it: a handler bound to a strand, started from that strand, runs after the call
// returned; the callback form runs on the session's callback thread, not the caller's.
TEST_F(CacheTest, AWaitForALoadedCacheCompletesOnlyAfterTheCallReturned) {
  ASSERT_EQ(raw.create(path, "r"), ZOK);
  Session& session = sessions.add(servers);
  TreeCache cache(session, path);
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  boost::asio::io_context io;
  auto strand = boost::asio::make_strand(io);
  bool returned = false;
  std::vector<std::string> outcomes;
  boost::asio::post(strand, [&] {
    asio::async_wait_initialized(cache, boost::asio::bind_executor(strand, [&](std::exception_ptr error) {
                                   outcomes.push_back(fmt::format("{} {}", error ? "failed" : "loaded",
                                                                  returned ? "after the call" : "inside the call"));
                                 }));
    returned = true;
  });
  io.run_for(testenv::scaled(10s));
  EXPECT_EQ(outcomes, std::vector<std::string>{"loaded after the call"});

  std::promise<std::thread::id> ran_on;
  cache.async_wait_initialized([&](std::error_code) { ran_on.set_value(std::this_thread::get_id()); });
  auto told = ran_on.get_future();
  ASSERT_EQ(told.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_NE(told.get(), std::this_thread::get_id());
}

// Where this frame is on the thread's stack (not in a coroutine's frame, which is on the heap).
[[gnu::noinline]] std::uintptr_t stack_position() {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
}

// A coroutine that awaits an already-complete operation in a loop: each turn resumes from the
// io_context, so its thread's stack stays where it was instead of growing by a frame a turn.
TEST_F(CacheTest, ACoroutineAwaitingALoadedCacheInALoopKeepsItsStack) {
  ASSERT_EQ(raw.create(path, "r"), ZOK);
  Session& session = sessions.add(servers);
  TreeCache cache(session, path);
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  constexpr int kTurns = 200'000;
  constexpr std::uintptr_t kTooDeep = 256 * 1024;  // far below any thread's stack size
  int turns = 0;
  std::uintptr_t deepest = 0;
  auto loop = [&]() -> boost::asio::awaitable<void> {
    const std::uintptr_t start = stack_position();
    for (; turns < kTurns; ++turns) {
      co_await asio::async_wait_initialized(cache, boost::asio::use_awaitable);
      const std::uintptr_t now = stack_position();
      deepest = std::max(deepest, start > now ? start - now : now - start);
      if (deepest > kTooDeep) co_return;  // growing: stop before the stack runs out
    }
  };
  boost::asio::io_context io;
  boost::asio::co_spawn(io, loop(), boost::asio::detached);
  io.run_for(testenv::scaled(60s));
  EXPECT_EQ(turns, kTurns);
  EXPECT_LE(deepest, 4096u);
}

TEST_F(CacheTest, TheInitialLoadCanBeAwaitedTheAsioWay) {
  ASSERT_EQ(raw.create(path, "r"), ZOK);
  Session& session = sessions.add(servers);
  TreeCache cache(session, path);
  boost::asio::io_context io;
  std::vector<std::string> outcomes;
  auto handler = [&](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
      outcomes.push_back(fmt::format("loaded {}", cache.size()));
    } catch (const Error& e) {
      outcomes.push_back(e.code().message());
    }
  };
  asio::async_wait_initialized(cache, boost::asio::bind_executor(io, handler));
  io.run_for(testenv::scaled(10s));
  // A stopped cache that never loaded completes the wait with errc::cancelled. Its session reaches
  // the server through a proxy that forwards nothing, so its first read cannot be answered before
  // stop() (a missing root is an answer: it completes the load, empty).
  testenv::Proxy proxy(servers);
  Session& cut_off = sessions.add(proxy.address());
  proxy.blackhole();
  TreeCache never(cut_off, path + "/absent-parent/x", {}, {.missing_root_poll = 10s});
  never.stop();
  proxy.pass();
  io.restart();
  asio::async_wait_initialized(never, boost::asio::bind_executor(io, handler));
  io.run_for(testenv::scaled(10s));
  EXPECT_EQ(outcomes, (std::vector<std::string>{"loaded 1", make_error_code(errc::cancelled).message()}));
}

}  // namespace
}  // namespace zkr::test
