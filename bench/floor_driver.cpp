// SPDX-License-Identifier: Apache-2.0
// The floor: the raw ZooKeeper C client doing exactly the operations a lock round needs, with no
// recipe around it. Every other driver is judged against these numbers.
//
//   uncontended  create2 (ephemeral sequential) -> getChildren -> delete, each waiting for its reply
//   pipelined    create2 and getChildren sent back to back; the delete is sent without waiting
//   contended    N sessions queue on one path; a waiter watches its predecessor (data watch) and
//                rereads the children when it goes: the hand-off delete -> watch fires -> getChildren
//   herd         one holder, N waiters queued, then the whole queue drains
//   scale        N ephemeral sequential creates pipelined on one session, under N distinct parents
//   scale_listed N such creates, each followed at once by getChildren of its parent: the least
//                any lock sends to learn that it holds
//   scale_batched the same N locks as a batching lock takes them: creates merged 100 to a
//                multi-op with a stamp node whose zxid is the fencing token, each lock's parent
//                listed with a watch right after its multi is sent
//   heartbeat    N sessions, each holding one ephemeral node under a path of its own, idle until
//                told: the C client's own pings, nothing else
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "driver_common.hpp"
#include "raw_zk.hpp"

namespace {

using namespace bench;

std::string created_name(const char* path) { return path ? std::string(path) : std::string(); }

// True if `own` has the lowest sequence among `children`; otherwise sets `predecessor` to the child
// just below it.
bool lowest_or_predecessor(const std::vector<std::string>& children, std::int64_t own,
                           std::string& predecessor) {
  std::int64_t best = -1;
  for (const auto& child : children) {
    auto sequence = lock_sequence(child);
    if (sequence && *sequence < own && *sequence > best) {
      best = *sequence;
      predecessor = child;
    }
  }
  return best < 0;
}

std::int64_t sequence_of(const std::string& node_path) {
  auto sequence = lock_sequence(std::string_view(node_path).substr(node_path.rfind('/') + 1));
  if (!sequence) fail(fmt::format("created node {} has no sequence suffix", node_path));
  return *sequence;
}

// One contender on its own session: the minimal correct lock loop over the C client.
class FloorContender {
 public:
  FloorContender(const DriverArgs& args)
      : handle_(args.connect, args.session_timeout_ms), lock_path_(args.path),
        prefix_(lock_node_prefix(args.path)) {}

  // Returns true when holding; false when `stop` became true while waiting (the node is deleted).
  bool acquire(const std::atomic<bool>& stop) {
    char created[512];
    Stat stat{};
    int rc = zoo_create2(handle_.get(), prefix_.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created, &stat);
    if (rc != ZOK) fail(fmt::format("create2 {}: {}", prefix_, zerror(rc)));
    node_ = created;
    std::int64_t own = sequence_of(node_);
    for (;;) {
      std::string predecessor;
      if (lowest_or_predecessor(handle_.children(lock_path_), own, predecessor)) return true;
      {
        std::lock_guard lock(mutex_);
        woken_ = false;
      }
      std::string predecessor_path = lock_path_ + "/" + predecessor;
      char data[64];
      int length = sizeof data;
      rc = zoo_wget(handle_.get(), predecessor_path.c_str(), &FloorContender::predecessor_watcher,
                    this, data, &length, &stat);
      if (rc == ZNONODE) continue;
      if (rc != ZOK) fail(fmt::format("wget {}: {}", predecessor_path, zerror(rc)));
      std::unique_lock lock(mutex_);
      while (!woken_) {
        if (stop.load()) {
          lock.unlock();
          release();
          return false;
        }
        woken_cv_.wait_for(lock, std::chrono::milliseconds(50));
      }
    }
  }

  void release() {
    int rc = zoo_delete(handle_.get(), node_.c_str(), -1);
    if (rc != ZOK) fail(fmt::format("delete {}: {}", node_, zerror(rc)));
  }

  std::uint64_t wakeups() const { return wakeups_.load(); }

 private:
  static void predecessor_watcher(zhandle_t*, int type, int, const char*, void* context) {
    if (type != ZOO_DELETED_EVENT && type != ZOO_CHANGED_EVENT) return;  // session events too
    auto* self = static_cast<FloorContender*>(context);
    self->wakeups_.fetch_add(1);
    std::lock_guard lock(self->mutex_);
    self->woken_ = true;
    self->woken_cv_.notify_all();
  }

  RawHandle handle_;
  std::string lock_path_;
  std::string prefix_;
  std::string node_;
  std::mutex mutex_;
  std::condition_variable woken_cv_;
  bool woken_ = false;
  std::atomic<std::uint64_t> wakeups_{0};
};

void run_uncontended(const DriverArgs& args) {
  RawHandle handle(args.connect, args.session_timeout_ms);
  handle.ensure_path(args.path);
  const std::string prefix = lock_node_prefix(args.path);
  std::vector<double> samples;
  samples.reserve(args.iterations);
  char created[512];
  for (int round = 0; round < args.warmup + args.iterations; ++round) {
    auto start = Clock::now();
    Stat stat{};
    int rc = zoo_create2(handle.get(), prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created, &stat);
    if (rc != ZOK) fail(fmt::format("create2 {}: {}", prefix, zerror(rc)));
    std::string predecessor;
    if (!lowest_or_predecessor(handle.children(args.path), sequence_of(created), predecessor))
      fail(fmt::format("uncontended round found {} ahead of it", predecessor));
    rc = zoo_delete(handle.get(), created, -1);
    if (rc != ZOK) fail(fmt::format("delete {}: {}", created, zerror(rc)));
    if (round >= args.warmup) samples.push_back(micros_between(start, Clock::now()));
  }
  JsonLine line(args);
  add_latency_summary(line, std::move(samples), args);
  line.print();
  handle.delete_tree(args.path);
}

// State of one pipelined round, filled in by the completion thread.
struct PipelinedRound {
  std::mutex mutex;
  std::condition_variable done_cv;
  std::string node;
  bool lowest = false;
  int error = ZOK;
  bool done = false;
  std::atomic<int> deletes_outstanding{0};
};

void run_pipelined(const DriverArgs& args) {
  RawHandle handle(args.connect, args.session_timeout_ms);
  handle.ensure_path(args.path);
  const std::string prefix = lock_node_prefix(args.path);
  PipelinedRound round_state;
  auto on_created = [](int rc, const char* value, const Stat*, const void* data) {
    auto* state = static_cast<PipelinedRound*>(const_cast<void*>(data));
    std::lock_guard lock(state->mutex);
    if (rc != ZOK) state->error = rc;
    state->node = created_name(value);
  };
  // Replies come in request order, so the create's reply is already in when this runs.
  auto on_children = [](int rc, const String_vector* names, const void* data) {
    auto* state = static_cast<PipelinedRound*>(const_cast<void*>(data));
    std::lock_guard lock(state->mutex);
    if (rc != ZOK && state->error == ZOK) state->error = rc;
    if (state->error == ZOK) {
      std::vector<std::string> children(names->data, names->data + names->count);
      std::string predecessor;
      state->lowest = lowest_or_predecessor(children, sequence_of(state->node), predecessor);
    }
    state->done = true;
    state->done_cv.notify_all();
  };
  auto on_deleted = [](int rc, const void* data) {
    auto* state = static_cast<PipelinedRound*>(const_cast<void*>(data));
    if (rc != ZOK) fail(fmt::format("delete: {}", zerror(rc)));
    state->deletes_outstanding.fetch_sub(1);
  };
  std::vector<double> samples;
  samples.reserve(args.iterations);
  for (int round = 0; round < args.warmup + args.iterations; ++round) {
    auto start = Clock::now();
    {
      std::lock_guard lock(round_state.mutex);
      round_state.done = false;
      round_state.error = ZOK;
    }
    zoo_acreate2(handle.get(), prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE,
                 ZOO_EPHEMERAL_SEQUENTIAL, on_created, &round_state);
    zoo_aget_children(handle.get(), args.path.c_str(), 0, on_children, &round_state);
    std::string node;
    {
      std::unique_lock lock(round_state.mutex);
      if (!round_state.done_cv.wait_for(lock, std::chrono::seconds(30),
                                        [&] { return round_state.done; }))
        fail("pipelined round: no reply within 30 s");
      if (round_state.error != ZOK) fail(fmt::format("pipelined round: {}", zerror(round_state.error)));
      if (!round_state.lowest) fail("pipelined uncontended round found a node ahead of it");
      node = round_state.node;
    }
    round_state.deletes_outstanding.fetch_add(1);
    zoo_adelete(handle.get(), node.c_str(), -1, on_deleted, &round_state);
    if (round >= args.warmup) samples.push_back(micros_between(start, Clock::now()));
  }
  for (int spins = 0; round_state.deletes_outstanding.load() > 0 && spins < 30'000; ++spins)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  JsonLine line(args);
  add_latency_summary(line, std::move(samples), args);
  line.print();
  handle.delete_tree(args.path);
}

void run_contended(const DriverArgs& args) {
  {
    RawHandle setup(args.connect, args.session_timeout_ms);
    setup.ensure_path(args.path);
  }
  std::vector<std::unique_ptr<FloorContender>> contenders;
  for (int i = 0; i < args.contenders; ++i)
    contenders.push_back(std::make_unique<FloorContender>(args));
  std::atomic<bool> stop{false};
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> overlaps{0}, grants{0};
  std::vector<std::thread> threads;
  for (auto& contender : contenders) {
    threads.emplace_back([&, raw = contender.get()] {
      while (!stop.load()) {
        if (!raw->acquire(stop)) break;
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        inside.fetch_sub(1);
        raw->release();
        grants.fetch_add(1);
      }
    });
  }
  const SteadyRate run = measure_steady_rate(grants, args);
  stop.store(true);
  for (auto& thread : threads) thread.join();
  print_contended_line(args, run, overlaps.load(), grants.load());
  contenders.clear();
  RawHandle cleanup(args.connect, args.session_timeout_ms);
  cleanup.delete_tree(args.path);
}

void run_herd(const DriverArgs& args) {
  RawHandle observer(args.connect, args.session_timeout_ms);
  observer.ensure_path(args.path);
  std::atomic<bool> never{false};
  FloorContender holder(args);
  holder.acquire(never);
  std::vector<std::unique_ptr<FloorContender>> waiters;
  for (int i = 0; i < args.contenders; ++i) waiters.push_back(std::make_unique<FloorContender>(args));
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> overlaps{0}, granted{0};
  std::vector<std::thread> threads;
  for (auto& waiter : waiters) {
    threads.emplace_back([&, raw = waiter.get()] {
      if (!raw->acquire(never)) return;
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      inside.fetch_sub(1);
      granted.fetch_add(1);
      raw->release();
    });
  }
  // The holder releases only once every waiter is queued.
  for (int polls = 0; observer.children(args.path).size() < waiters.size() + 1; ++polls) {
    if (polls > 3000) fail("herd: waiters did not all queue within 60 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto start = Clock::now();
  holder.release();
  for (auto& thread : threads) thread.join();
  double drain_ms = micros_between(start, Clock::now()) / 1000;
  std::uint64_t wakeups = 0;
  for (auto& waiter : waiters) wakeups += waiter->wakeups();
  JsonLine line(args);
  line.add("waiters", args.contenders)
      .add("releases", static_cast<int>(args.contenders) + 1)
      .add("granted", granted.load())
      .add("client_wakeups", wakeups)
      .add("drain_ms", drain_ms)
      .add("overlaps", overlaps.load())
      .print();
  waiters.clear();
  observer.delete_tree(args.path);
}

struct ScaleProgress {
  std::atomic<int> outstanding{0};
  std::atomic<int> errors{0};

  // One reply in: `data` is the ScaleProgress the request was sent with.
  static void count_reply(const void* data, bool failed) {
    auto* state = static_cast<ScaleProgress*>(const_cast<void*>(data));
    if (failed) state->errors.fetch_add(1);
    state->outstanding.fetch_sub(1);
  }

  // Returns once every request sent is answered; fails the driver if one failed.
  void wait_all(const char* what) const {
    for (int spins = 0; outstanding.load() > 0; ++spins) {
      if (spins > 120'000) fail(fmt::format("scale: {} not done within 120 s", what));
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    if (errors.load() != 0) fail(fmt::format("scale: {} failed {} times", what, errors.load()));
  }
};

// What the scale scenarios share: one parent per lock, made before the clock starts (the library
// driver does the same), and the session that then takes the locks.
struct ScaleSetUp {
  RawHandle handle;
  std::vector<std::string> parents;
  std::vector<std::string> prefixes;  // each parent's lock node prefix

  explicit ScaleSetUp(const DriverArgs& args) : handle(args.connect, args.session_timeout_ms) {
    handle.ensure_path(args.path);
    ScaleProgress progress;
    for (int i = 0; i < args.iterations; ++i) {
      parents.push_back(fmt::format("{}/l{:05}", args.path, i));
      prefixes.push_back(lock_node_prefix(parents.back()));
    }
    for (const auto& parent : parents) {
      progress.outstanding.fetch_add(1);
      zoo_acreate(handle.get(), parent.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
                  [](int rc, const char*, const void* data) {
                    ScaleProgress::count_reply(data, rc != ZOK && rc != ZNODEEXISTS);
                  },
                  &progress);
    }
    progress.wait_all("parent creates");
  }

  void remove_tree(const DriverArgs& args) {
    handle.close();  // the ephemeral nodes go with the session
    RawHandle cleanup(args.connect, args.session_timeout_ms);
    cleanup.delete_tree(args.path);
  }
};

// The clock and the memory in use when the locks start being taken.
struct ScaleMeter {
  std::int64_t rss_before = resident_bytes();
  std::int64_t heap_before = heap_bytes_in_use();
  Clock::time_point start = Clock::now();

  double elapsed_ms() const { return micros_between(start, Clock::now()) / 1000; }

  void print(const DriverArgs& args, double elapsed) const {
    JsonLine line(args);
    line.add("locks", args.iterations)
        .add("time_ms", elapsed)
        .add("rss_per_lock_bytes",
             static_cast<double>(resident_bytes() - rss_before) / args.iterations)
        .add("heap_per_lock_bytes",
             static_cast<double>(heap_bytes_in_use() - heap_before) / args.iterations)
        .print();
  }
};

void run_scale(const DriverArgs& args, bool listed) {
  ScaleSetUp set_up(args);
  zhandle_t* handle = set_up.handle.get();
  ScaleProgress progress;
  auto on_created = [](int rc, const char*, const Stat*, const void* data) {
    ScaleProgress::count_reply(data, rc != ZOK);
  };
  auto on_children = [](int rc, const String_vector*, const void* data) {
    ScaleProgress::count_reply(data, rc != ZOK);
  };
  ScaleMeter meter;
  for (int i = 0; i < args.iterations; ++i) {
    progress.outstanding.fetch_add(1);
    zoo_acreate2(handle, set_up.prefixes[i].c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE,
                 ZOO_EPHEMERAL_SEQUENTIAL, on_created, &progress);
    if (listed) {
      progress.outstanding.fetch_add(1);
      zoo_aget_children(handle, set_up.parents[i].c_str(), 0, on_children, &progress);
    }
  }
  progress.wait_all("lock creates");
  meter.print(args, meter.elapsed_ms());
  set_up.remove_tree(args);
}

// One multi-op of scale_batched: the stamp's create and set, the chunk's lock creates, the stamp's
// delete. Everything the client writes the replies into lives here until the reply is in.
struct BatchChunk {
  static constexpr int kLocks = 100;
  static constexpr int kStampOpsBefore = 2;  // create and set; the delete comes last

  ScaleProgress* progress = nullptr;
  std::string stamp_path;
  std::vector<zoo_op_t> ops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::array<char, 512>> created;  // each lock needs its node's name to hold it
  Stat stamp_stat{};  // its mzxid is the multi's zxid: every lock node's czxid, the fencing token

  static void on_reply(int rc, const void* data) {
    auto* chunk = static_cast<BatchChunk*>(const_cast<void*>(data));
    bool failed = rc != ZOK;
    for (const auto& result : chunk->results) failed = failed || result.err != ZOK;
    ScaleProgress::count_reply(chunk->progress, failed);
  }
};

// Stands in for the watch a holder keeps on its own node; nothing fires it during the run.
void ignore_event(zhandle_t*, int, int, const char*, void*) {}

// The least a batching lock sends: creates merged into multi-ops, each stamped so that the multi's
// zxid comes back, and each lock's parent listed with a watch as soon as its multi is sent.
void run_scale_batched(const DriverArgs& args) {
  ScaleSetUp set_up(args);
  zhandle_t* handle = set_up.handle.get();
  ScaleProgress progress;
  auto on_children = [](int rc, const String_vector*, const Stat*, const void* data) {
    ScaleProgress::count_reply(data, rc != ZOK);
  };
  // The replies' storage is made before the meter starts, as the node prefixes are.
  const int chunk_count = (args.iterations + BatchChunk::kLocks - 1) / BatchChunk::kLocks;
  std::vector<BatchChunk> chunks(chunk_count);
  for (int c = 0; c < chunk_count; ++c) {
    int locks = std::min(BatchChunk::kLocks, args.iterations - c * BatchChunk::kLocks);
    chunks[c].progress = &progress;
    chunks[c].stamp_path = set_up.parents[c * BatchChunk::kLocks] + "/zkr-batch-stamp";
    chunks[c].ops.resize(locks + BatchChunk::kStampOpsBefore + 1);
    chunks[c].results.resize(chunks[c].ops.size());
    chunks[c].created.resize(locks);
  }
  ScaleMeter meter;
  for (int c = 0; c < chunk_count; ++c) {
    BatchChunk& chunk = chunks[c];
    const int first = c * BatchChunk::kLocks;
    const int locks = static_cast<int>(chunk.created.size());
    zoo_op_t* op = chunk.ops.data();
    zoo_create_op_init(op++, chunk.stamp_path.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL,
                       nullptr, 0);
    zoo_set_op_init(op++, chunk.stamp_path.c_str(), "", 0, -1, &chunk.stamp_stat);
    for (int i = 0; i < locks; ++i)
      zoo_create_op_init(op++, set_up.prefixes[first + i].c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL_SEQUENTIAL, chunk.created[i].data(),
                         static_cast<int>(chunk.created[i].size()));
    zoo_delete_op_init(op, chunk.stamp_path.c_str(), -1);
    progress.outstanding.fetch_add(1);
    int rc = zoo_amulti(handle, static_cast<int>(chunk.ops.size()), chunk.ops.data(),
                        chunk.results.data(), &BatchChunk::on_reply, &chunk);
    if (rc != ZOK) fail(fmt::format("scale_batched: multi not sent: {}", zerror(rc)));
    for (int i = first; i < first + locks; ++i) {
      progress.outstanding.fetch_add(1);
      zoo_awget_children2(handle, set_up.parents[i].c_str(), &ignore_event, nullptr, on_children,
                          &progress);
    }
  }
  progress.wait_all("batched creates and listings");
  const double elapsed = meter.elapsed_ms();
  // After the clock: the stamp's zxid must be the fencing token the first chunk's locks carry.
  Stat lock_stat{};
  const char* first_lock = chunks[0].created[0].data();
  int rc = zoo_exists(handle, first_lock, 0, &lock_stat);
  if (rc != ZOK) fail(fmt::format("scale_batched: exists {}: {}", first_lock, zerror(rc)));
  if (lock_stat.czxid != chunks[0].stamp_stat.mzxid)
    fail(fmt::format("scale_batched: {} has czxid {:#x}, the stamp's mzxid is {:#x}", first_lock,
                     lock_stat.czxid, chunks[0].stamp_stat.mzxid));
  meter.print(args, elapsed);
  set_up.remove_tree(args);
}

void run_heartbeat(const DriverArgs& args) {
  std::vector<std::unique_ptr<RawHandle>> handles;
  for (int i = 0; i < args.contenders; ++i) {
    handles.push_back(std::make_unique<RawHandle>(args.connect, args.session_timeout_ms));
    const std::string parent = fmt::format("{}/l{:04}", args.path, i);
    handles.back()->ensure_path(parent);
    char created[512];
    int rc = zoo_create(handles.back()->get(), lock_node_prefix(parent).c_str(), "", 0,
                        &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created);
    if (rc != ZOK) fail(fmt::format("heartbeat: create under {}: {}", parent, zerror(rc)));
  }
  hold_until_told(args);
  JsonLine(args).add("sessions", args.contenders).print();
  handles.clear();
  RawHandle cleanup(args.connect, args.session_timeout_ms);
  cleanup.delete_tree(args.path);
}

}  // namespace

int main(int argc, char** argv) {
  auto args = parse_driver_args("floor", argc, argv);
  try {
    if (args.scenario == "uncontended") run_uncontended(args);
    else if (args.scenario == "pipelined") run_pipelined(args);
    else if (args.scenario == "contended") run_contended(args);
    else if (args.scenario == "herd") run_herd(args);
    else if (args.scenario == "scale") run_scale(args, false);
    else if (args.scenario == "scale_listed") run_scale(args, true);
    else if (args.scenario == "scale_batched") run_scale_batched(args);
    else if (args.scenario == "heartbeat") run_heartbeat(args);
    else fail(fmt::format("floor driver: unknown scenario '{}'", args.scenario));
  } catch (const std::exception& error) {
    fail(fmt::format("floor driver: {}", error.what()));
  }
  return 0;
}
