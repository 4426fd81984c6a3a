// SPDX-License-Identifier: Apache-2.0
// Benchmark driver for this library's zkr::Lock. Same command line and output as the other drivers
// (driver_common.hpp), plus two scenarios only this library has an answer for:
//
//   uncontended  acquire() + release() on one session
//   contended    N sessions, one thread each, acquire/release in a loop
//   herd         one holder, N waiters queued, then the whole queue drains; counts watch events
//   loss         the holder's link is blackholed (testenv's Proxy, in process); measures how long
//                before the server could expire the session the holder is told "lost"
//   scale        N locks on N paths taken on one session with async_acquire; time, memory per
//                held lock, and the session's requests while holding them
//   scale_batched the same, the async_acquire calls made inside one AcquisitionBatch
//   heartbeat    N sessions, each holding one lock of its own, idle until told (hold_until_told):
//                what the session's heartbeat costs the servers
#include <zookeeper/zookeeper.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "driver_common.hpp"
#include "raw_zk.hpp"
#include "testenv.hpp"

namespace {

using namespace bench;
using namespace std::chrono_literals;

zkr::SessionOptions session_options(const DriverArgs& args, const std::string& servers) {
  zkr::SessionOptions options;
  options.servers = servers;
  options.session_timeout = std::chrono::milliseconds(args.session_timeout_ms);
  options.connect_timeout = 20s;
  if (args.start_window >= 0) options.max_starting_acquisitions = static_cast<std::size_t>(args.start_window);
  if (!args.tls_dir.empty()) {
    const std::filesystem::path dir = args.tls_dir;
    options.tls = zkr::TlsOptions{dir / "ca.pem", dir / "client.pem", dir / "client.key"};
  }
  return options;
}

// Deletes the run's subtree: with the raw C client, or through a TLS session when the server
// takes TLS only.
void delete_run_tree(const DriverArgs& args) {
  if (args.tls_dir.empty()) {
    RawHandle cleanup(args.connect, args.session_timeout_ms);
    cleanup.delete_tree(args.path);
    return;
  }
  zkr::Session session(session_options(args, args.connect));
  std::function<void(const std::string&)> remove = [&](const std::string& path) {
    std::error_code ec;
    for (const auto& child : session.children(path, ec)) remove(path + "/" + child);
    session.remove(path, ec);
  };
  remove(args.path);
}

void run_uncontended(const DriverArgs& args) {
  zkr::Session session(session_options(args, args.connect));
  zkr::Lock lock(session, args.path);
  std::vector<double> samples;
  samples.reserve(args.iterations);
  for (int round = 0; round < args.warmup + args.iterations; ++round) {
    auto start = Clock::now();
    zkr::HeldLock held = lock.acquire();
    held.release();
    if (round >= args.warmup) samples.push_back(micros_between(start, Clock::now()));
  }
  auto metrics = session.metrics();
  JsonLine line(args);
  add_latency_summary(line, std::move(samples), args);
  line.add("requests_sent", metrics.requests_sent).print();
  session.close();
  delete_run_tree(args);
}

void run_contended(const DriverArgs& args) {
  std::vector<std::unique_ptr<zkr::Session>> sessions;
  std::vector<std::unique_ptr<zkr::Lock>> locks;
  for (int i = 0; i < args.contenders; ++i) {
    sessions.push_back(std::make_unique<zkr::Session>(session_options(args, args.connect)));
    locks.push_back(std::make_unique<zkr::Lock>(*sessions.back(), args.path));
  }
  std::stop_source stop;
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> overlaps{0}, grants{0};
  std::vector<std::thread> threads;
  for (auto& lock : locks) {
    threads.emplace_back([&, raw = lock.get()] {
      while (!stop.stop_requested()) {
        std::error_code ec;
        auto held = raw->try_acquire_for(std::chrono::hours(1), stop.get_token(), ec);
        if (!held) break;  // cancelled at the end
        if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
        inside.fetch_sub(1);
        held->release();
        grants.fetch_add(1);
      }
    });
  }
  const SteadyRate run = measure_steady_rate(grants, args);
  stop.request_stop();
  for (auto& thread : threads) thread.join();
  print_contended_line(args, run, overlaps.load(), grants.load());
  locks.clear();
  sessions.clear();
  delete_run_tree(args);
}

void run_herd(const DriverArgs& args) {
  RawHandle observer(args.connect, args.session_timeout_ms);
  zkr::Session holder_session(session_options(args, args.connect));
  zkr::Lock holder_lock(holder_session, args.path);
  zkr::HeldLock holder = holder_lock.acquire();
  std::vector<std::unique_ptr<zkr::Session>> sessions;
  std::vector<std::unique_ptr<zkr::Lock>> locks;
  for (int i = 0; i < args.contenders; ++i) {
    sessions.push_back(std::make_unique<zkr::Session>(session_options(args, args.connect)));
    locks.push_back(std::make_unique<zkr::Lock>(*sessions.back(), args.path));
  }
  std::atomic<int> inside{0};
  std::atomic<std::uint64_t> overlaps{0}, granted{0};
  std::vector<std::thread> threads;
  for (auto& lock : locks) {
    threads.emplace_back([&, raw = lock.get()] {
      std::error_code ec;
      auto held = raw->try_acquire_for(120s, {}, ec);
      if (!held) return;
      granted.fetch_add(1);
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      inside.fetch_sub(1);
      held->release();
    });
  }
  for (int polls = 0; observer.children(args.path).size() < locks.size() + 1; ++polls) {
    if (polls > 3000) fail("herd: waiters did not all queue within 60 s");
    std::this_thread::sleep_for(20ms);
  }
  std::uint64_t watch_events_before = 0;
  for (auto& session : sessions) watch_events_before += session->metrics().wakeups;
  auto start = Clock::now();
  holder.release();
  for (auto& thread : threads) thread.join();
  double drain_ms = micros_between(start, Clock::now()) / 1000;
  std::uint64_t watch_events = 0;
  for (auto& session : sessions) watch_events += session->metrics().wakeups;
  JsonLine line(args);
  line.add("waiters", args.contenders)
      .add("releases", args.contenders + 1)
      .add("granted", granted.load())
      .add("client_wakeups", watch_events - watch_events_before)
      .add("drain_ms", drain_ms)
      .add("overlaps", overlaps.load())
      .print();
  locks.clear();
  sessions.clear();
  observer.delete_tree(args.path);
}

// Records when a watched node is deleted, as seen by an observer session that is not cut off.
struct DeletionWatch {
  std::mutex mutex;
  std::condition_variable changed;
  std::optional<Clock::time_point> deleted_at;

  static void watcher(zhandle_t*, int type, int, const char*, void* context) {
    if (type != ZOO_DELETED_EVENT) return;
    auto* self = static_cast<DeletionWatch*>(context);
    std::lock_guard lock(self->mutex);
    self->deleted_at = Clock::now();
    self->changed.notify_all();
  }
};

void run_loss(const DriverArgs& args) {
  if (args.connect.find(',') != std::string::npos)
    fail("loss: --connect must name one server (the proxy sits in front of it)");
  RawHandle observer(args.connect, args.session_timeout_ms);
  std::vector<double> lead_vs_earliest_expiry_ms, lead_vs_server_delete_ms;
  int negotiated_ms = 0, lead_time_ms = 0;
  for (int trial = 0; trial < args.trials; ++trial) {
    zkr::testenv::Proxy proxy(args.connect);
    std::optional<Clock::time_point> lost_at;
    std::mutex mutex;
    std::condition_variable changed;
    DeletionWatch deletion;
    {
      zkr::Session session(session_options(args, proxy.address()));
      negotiated_ms = static_cast<int>(session.negotiated_timeout().count());
      lead_time_ms = static_cast<int>(session.lead_time().count());
      zkr::Lock lock(session, args.path);
      zkr::HeldLock held = lock.acquire();
      held.on_lost([&](zkr::LossReason) {
        std::lock_guard guard(mutex);
        lost_at = Clock::now();
        changed.notify_all();
      });
      Stat stat{};
      int rc = zoo_wexists(observer.get(), held.node_path().c_str(), &DeletionWatch::watcher,
                           &deletion, &stat);
      if (rc != ZOK) fail(fmt::format("loss: exists {}: {}", held.node_path(), zerror(rc)));
      // An acknowledged request right before the cut: the server heard from this session at or
      // after `heard_from`, so it cannot expire the session before heard_from + timeout.
      std::this_thread::sleep_for(200ms);
      auto heard_from = Clock::now();
      (void)lock.contenders();
      proxy.blackhole();
      auto limit = std::chrono::milliseconds(3 * negotiated_ms + 5000);
      {
        std::unique_lock guard(mutex);
        if (!changed.wait_for(guard, limit, [&] { return lost_at.has_value(); }))
          fail(fmt::format("loss: holder not told lost within {} ms", limit.count()));
      }
      {
        std::unique_lock guard(deletion.mutex);
        if (!deletion.changed.wait_for(guard, limit, [&] { return deletion.deleted_at.has_value(); }))
          fail(fmt::format("loss: server did not delete the holder's node within {} ms", limit.count()));
      }
      auto earliest_expiry = heard_from + std::chrono::milliseconds(negotiated_ms);
      lead_vs_earliest_expiry_ms.push_back(micros_between(*lost_at, earliest_expiry) / 1000);
      lead_vs_server_delete_ms.push_back(micros_between(*lost_at, *deletion.deleted_at) / 1000);
      proxy.pass();
    }
  }
  std::sort(lead_vs_earliest_expiry_ms.begin(), lead_vs_earliest_expiry_ms.end());
  std::sort(lead_vs_server_delete_ms.begin(), lead_vs_server_delete_ms.end());
  bool all_positive = lead_vs_earliest_expiry_ms.front() > 0 && lead_vs_server_delete_ms.front() > 0;
  JsonLine line(args);
  line.add("trials", args.trials)
      .add("negotiated_timeout_ms", negotiated_ms)
      .add("configured_lead_ms", lead_time_ms)
      .add("lead_vs_earliest_expiry_min_ms", lead_vs_earliest_expiry_ms.front())
      .add("lead_vs_earliest_expiry_median_ms", percentile(lead_vs_earliest_expiry_ms, 0.5))
      .add("lead_vs_server_delete_min_ms", lead_vs_server_delete_ms.front())
      .add("lead_vs_server_delete_median_ms", percentile(lead_vs_server_delete_ms, 0.5))
      .add("all_positive", all_positive)
      .print();
  observer.delete_tree(args.path);
}

void run_scale(const DriverArgs& args, bool batched) {
  RawHandle setup(args.connect, args.session_timeout_ms);
  setup.ensure_path(args.path);
  {
    // One parent per lock, made before the clock starts (the floor driver does the same).
    std::atomic<int> outstanding{0};
    for (int i = 0; i < args.iterations; ++i) {
      std::string parent = fmt::format("{}/l{:05}", args.path, i);
      outstanding.fetch_add(1);
      zoo_acreate(setup.get(), parent.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
                  [](int, const char*, const void* data) {
                    static_cast<std::atomic<int>*>(const_cast<void*>(data))->fetch_sub(1);
                  },
                  &outstanding);
    }
    for (int spins = 0; outstanding.load() > 0 && spins < 120'000; ++spins)
      std::this_thread::sleep_for(1ms);
  }
  zkr::Session session(session_options(args, args.connect));
  auto rss_before = resident_bytes();
  auto heap_before = heap_bytes_in_use();
  std::vector<std::unique_ptr<zkr::Lock>> locks;
  locks.reserve(args.iterations);
  for (int i = 0; i < args.iterations; ++i)
    locks.push_back(std::make_unique<zkr::Lock>(session, fmt::format("{}/l{:05}", args.path, i)));
  std::vector<zkr::HeldLock> held(args.iterations);
  std::mutex mutex;
  std::condition_variable all_done;
  int completed = 0, failures = 0;
  std::string first_error;
  auto requests_before_acquiring = session.metrics().requests_sent;
  auto start = Clock::now();
  {
    // Opened after the clock starts: what the batch itself costs is part of the time.
    std::optional<zkr::AcquisitionBatch> batch;
    if (batched) batch.emplace(session);
    for (int i = 0; i < args.iterations; ++i) {
      locks[i]->async_acquire(std::chrono::nanoseconds(-1),
                              [&, i](std::error_code ec, zkr::HeldLock lock) {
                                std::lock_guard guard(mutex);
                                if (ec) {
                                  if (failures++ == 0) first_error = ec.message();
                                } else {
                                  held[i] = std::move(lock);
                                }
                                if (++completed == args.iterations) all_done.notify_all();
                              });
    }
    if (batch) batch->send();
  }
  {
    std::unique_lock guard(mutex);
    if (!all_done.wait_for(guard, 120s, [&] { return completed == args.iterations; }))
      fail(fmt::format("scale: {} of {} acquisitions done within 120 s", completed, args.iterations));
  }
  double elapsed_ms = micros_between(start, Clock::now()) / 1000;
  if (failures > 0) fail(fmt::format("scale: {} acquisitions failed, first: {}", failures, first_error));
  auto rss_per_lock = static_cast<double>(resident_bytes() - rss_before) / args.iterations;
  auto heap_per_lock = static_cast<double>(heap_bytes_in_use() - heap_before) / args.iterations;
  // Traffic while holding: only the session's heartbeat should go out, nothing per lock.
  auto before = session.metrics();
  auto requests_to_acquire = before.requests_sent - requests_before_acquiring;
  std::this_thread::sleep_for(std::chrono::duration<double>(args.duration_s));
  auto after = session.metrics();
  // By now every own-node watch is set: what holding costs once the acquisitions are over.
  auto heap_per_lock_held = static_cast<double>(heap_bytes_in_use() - heap_before) / args.iterations;
  JsonLine line(args);
  line.add("locks", args.iterations)
      .add("time_ms", elapsed_ms)
      .add("rss_per_lock_bytes", rss_per_lock)
      .add("heap_per_lock_bytes", heap_per_lock)
      .add("heap_per_lock_after_hold_bytes", heap_per_lock_held)
      .add("requests_per_lock", static_cast<double>(requests_to_acquire) / args.iterations)
      .add("hold_seconds", args.duration_s)
      .add("requests_while_holding", after.requests_sent - before.requests_sent)
      .add("heartbeats_while_holding", after.heartbeats_sent - before.heartbeats_sent)
      // Nothing may be lost on the way: a session declared lost under the load would make every
      // other figure meaningless.
      .add("locks_lost", after.locks_lost)
      .add("negotiated_timeout_ms", static_cast<int>(session.negotiated_timeout().count()))
      .print();
  for (auto& lock : held) lock.release();
  held.clear();
  locks.clear();
  session.close();
  setup.delete_tree(args.path);
}

void run_heartbeat(const DriverArgs& args) {
  std::vector<std::unique_ptr<zkr::Session>> sessions;
  std::vector<std::unique_ptr<zkr::Lock>> locks;
  std::vector<zkr::HeldLock> held;
  for (int i = 0; i < args.contenders; ++i) {
    sessions.push_back(std::make_unique<zkr::Session>(session_options(args, args.connect)));
    locks.push_back(
        std::make_unique<zkr::Lock>(*sessions.back(), fmt::format("{}/l{:04}", args.path, i)));
    held.push_back(locks.back()->acquire());
  }
  std::uint64_t heartbeats_before = 0, heartbeats = 0, lost = 0;
  for (auto& session : sessions) heartbeats_before += session->metrics().heartbeats_sent;
  hold_until_told(args);
  for (auto& session : sessions) {
    heartbeats += session->metrics().heartbeats_sent;
    lost += session->metrics().locks_lost;
  }
  JsonLine(args)
      .add("sessions", args.contenders)
      .add("heartbeats_sent", heartbeats - heartbeats_before)
      .add("locks_lost", lost)
      .add("negotiated_timeout_ms", static_cast<int>(sessions.front()->negotiated_timeout().count()))
      .print();
  for (auto& lock : held) lock.release();
  held.clear();
  locks.clear();
  sessions.clear();
  RawHandle cleanup(args.connect, args.session_timeout_ms);
  cleanup.delete_tree(args.path);
}

}  // namespace

int main(int argc, char** argv) {
  auto args = parse_driver_args("ours", argc, argv);
  try {
    if (args.scenario == "uncontended") run_uncontended(args);
    else if (args.scenario == "contended") run_contended(args);
    else if (args.scenario == "herd") run_herd(args);
    else if (args.scenario == "loss") run_loss(args);
    else if (args.scenario == "scale") run_scale(args, false);
    else if (args.scenario == "scale_batched") run_scale(args, true);
    else if (args.scenario == "heartbeat") run_heartbeat(args);
    else fail(fmt::format("ours driver: unknown scenario '{}'", args.scenario));
  } catch (const std::exception& error) {
    fail(fmt::format("ours driver: {}", error.what()));
  }
  return 0;
}
