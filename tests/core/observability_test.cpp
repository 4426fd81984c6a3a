// SPDX-License-Identifier: Apache-2.0
// Per-lock metrics and the structured log against a real server: the gauges, histograms and
// reasons follow what the test does to the locks; opted-in paths get series of their own up to
// the cap, all other paths share path=""; the JSON-lines sink carries the session, path and node
// of a grant's and a loss's lines, read back by Python's json module.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <future>
#include <stop_token>
#include <thread>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>

#include "../unit/python_readers.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

using ::testing::Contains;
using ::testing::StartsWith;

const LockMetrics* series_of(const SessionMetrics& metrics, std::string_view path) {
  for (const auto& lock : metrics.locks)
    if (lock.path == path) return &lock;
  return nullptr;
}

std::uint64_t lost_by(const LockMetrics& lock, LossReason reason) {
  return lock.losses[static_cast<std::size_t>(reason)];
}

TEST(LockMetricsTest, FollowGrantsWaitsFailuresAndLossesOfOneLabelledPath) {
  const std::string servers = testenv::shared_server();
  const std::string base = testenv::unique_path();
  const std::string path = base + "/jobs/a";
  auto options = session_options(servers);
  options.metrics_path_labels.paths = {base + "/jobs/"};
  Session session(options), other(session_options(servers));
  Lock lock(session, path), lock_elsewhere(other, path);
  auto series = [&] { return *series_of(session.metrics(), path); };

  {
    HeldLock held = lock.acquire();
    EXPECT_EQ(series().held, 1);
    EXPECT_EQ(series().waiting, 0);
  }
  EXPECT_EQ(series().held, 0);
  EXPECT_EQ(series().wait.count, 1u);
  EXPECT_EQ(series().hold.count, 1u);

  HeldLock held_elsewhere = lock_elsewhere.acquire();
  EXPECT_FALSE(lock.try_acquire());
  EXPECT_FALSE(lock.try_acquire_for(100ms));
  std::stop_source stop;
  std::jthread waiter([&] { EXPECT_FALSE(lock.try_acquire_for(testenv::scaled(30s), stop.get_token())); });
  EXPECT_TRUE(eventually([&] { return series().waiting == 1; }));
  stop.request_stop();
  waiter.join();
  held_elsewhere.release();
  LockMetrics after_waits = series();
  EXPECT_EQ(after_waits.waiting, 0);
  EXPECT_EQ(after_waits.busy, 1u);
  EXPECT_EQ(after_waits.timeouts, 1u);
  EXPECT_EQ(after_waits.cancellations, 1u);
  EXPECT_EQ(after_waits.failures, 0u);
  EXPECT_EQ(after_waits.wait.count, 1u);  // only grants are waits

  // An operator deletes the held node: lost, reason node_deleted; the hold ends there.
  HeldLock held = lock.acquire();
  RawClient raw(servers);
  ASSERT_EQ(raw.remove(held.node_path()), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  const LockMetrics after_loss = series();
  EXPECT_EQ(lost_by(after_loss, LossReason::node_deleted), 1u);
  EXPECT_EQ(lost_by(after_loss, LossReason::session_lost), 0u);
  EXPECT_EQ(after_loss.held, 0);
  EXPECT_EQ(after_loss.wait.count, 2u);
  EXPECT_EQ(after_loss.hold.count, 2u);
  held.release();
  EXPECT_EQ(series().hold.count, 2u);  // releasing a lost grant ends no second hold

  // Closing the session loses what it holds: reason session_closed.
  HeldLock closing = lock.acquire();
  session.close();
  EXPECT_EQ(lost_by(series(), LossReason::session_closed), 1u);
  EXPECT_EQ(series().held, 0);
  // The buckets are cumulative and end with the count.
  const DurationHistogram hold = series().hold;
  for (std::size_t i = 1; i < hold.cumulative_counts.size(); ++i)
    EXPECT_LE(hold.cumulative_counts[i - 1], hold.cumulative_counts[i]);
  EXPECT_EQ(hold.cumulative_counts.back(), hold.count);
  EXPECT_EQ(hold.count, 3u);
}

TEST(LockMetricsTest, OnlyOptedInPathsGetSeriesUpToTheCapAndTheRestShareTheEmptyPath) {
  const std::string servers = testenv::shared_server();
  const std::string base = testenv::unique_path();
  auto options = session_options(servers);
  options.metrics_path_labels = {.paths = {base + "/jobs/", base + "/exact"}, .max_paths = 2};
  Session session(options);
  for (const char* name : {"/jobs/a", "/exact", "/jobs/b", "/plain", "/exact/below", "/jobs"})
    Lock(session, base + name).acquire().release();
  const SessionMetrics metrics = session.metrics();
  ASSERT_EQ(metrics.locks.size(), 3u);  // "", then the first two opted-in paths, sorted
  EXPECT_EQ(metrics.locks[0].path, "");
  EXPECT_EQ(metrics.locks[1].path, base + "/exact");
  EXPECT_EQ(metrics.locks[2].path, base + "/jobs/a");
  for (const auto& lock : metrics.locks) EXPECT_EQ(lock.held, 0) << lock.path;
  EXPECT_EQ(metrics.locks[1].wait.count, 1u);
  EXPECT_EQ(metrics.locks[2].wait.count, 1u);
  // /jobs/b past the cap; /plain, /exact/below and /jobs itself never opted in.
  EXPECT_EQ(metrics.locks[0].wait.count, 4u);
  EXPECT_EQ(metrics.unlabelled_overflow, 1u);
  EXPECT_EQ(metrics.acquisitions, 6u);
}

TEST(LockMetricsTest, EveryRecipeRecordsItsGrantsThroughTheQueue) {
  const std::string servers = testenv::shared_server();
  const std::string base = testenv::unique_path();
  auto options = session_options(servers);
  options.metrics_path_labels.paths = {base + "/"};
  Session session(options);
  ReadWriteLock read_write(session, base + "/read-write");
  HeldLock reader = read_write.read_lock().acquire();
  // Another thread: this one asking again for the read lock it holds would be refused (would_deadlock).
  HeldLock second_reader = std::async(std::launch::async, [&] { return read_write.read_lock().acquire(); }).get();
  Semaphore semaphore(session, base + "/semaphore", 3);
  Lease lease = semaphore.acquire(), second_lease = semaphore.acquire();
  LeaderLatch latch(session, base + "/election");
  latch.start();
  ASSERT_TRUE(latch.wait_for_leadership(testenv::scaled(10s)));
  const SessionMetrics metrics = session.metrics();
  for (const auto& [name, held] : {std::pair{"/read-write", 2}, {"/semaphore", 2}, {"/election", 1}}) {
    const LockMetrics* series = series_of(metrics, base + name);
    ASSERT_NE(series, nullptr) << name;
    EXPECT_EQ(series->held, held) << name;
    EXPECT_EQ(series->wait.count, static_cast<std::uint64_t>(held)) << name;
  }
}

// A lease is one acquisition of its semaphore in every layout: one series, under the semaphore's
// own path, with one grant and one hold per lease, and one busy try. A peer layout's internal lock
// is a step of that acquisition, counted nowhere: not under its own path (opted in here with the
// rest of the base), not under "".
TEST(LockMetricsTest, ASemaphoreLeaseIsCountedOnceUnderTheSemaphoresPathInEveryLayout) {
  const std::string servers = testenv::shared_server();
  const std::string base = testenv::unique_path();
  auto options = session_options(servers);
  options.metrics_path_labels.paths = {base + "/"};
  RawClient raw(servers);
  for (const SemaphoreLayout layout : {SemaphoreLayout::zkrecipes, SemaphoreLayout::curator_v2, SemaphoreLayout::kazoo}) {
    SCOPED_TRACE(to_string(layout));
    const std::string path = fmt::format("{}/{}", base, to_string(layout));
    Session session(options);
    SemaphoreOptions in_layout;
    in_layout.layout = layout;
    Semaphore semaphore(session, path, 1, in_layout);
    Lease lease = semaphore.acquire();
    SessionMetrics metrics = session.metrics();
    EXPECT_EQ(metrics.acquisitions, 1u);
    const LockMetrics* series = series_of(metrics, path);
    EXPECT_NE(series, nullptr) << "no series under the semaphore's path";
    if (series) {
      EXPECT_EQ(series->held, 1);
      EXPECT_EQ(series->waiting, 0);
      EXPECT_EQ(series->wait.count, 1u);
    }
    std::vector<std::string> paths;
    for (const auto& lock : metrics.locks) paths.push_back(lock.path);
    EXPECT_EQ(paths, (std::vector<std::string>{"", path}));
    EXPECT_EQ(metrics.locks[0].wait.count, 0u);
    EXPECT_EQ(metrics.locks[0].held, 0);

    Semaphore other(session, path, 1, in_layout);
    EXPECT_FALSE(other.try_acquire());
    lease.release();
    EXPECT_TRUE(eventually([&] {
      const SessionMetrics now = session.metrics();
      return std::all_of(now.locks.begin(), now.locks.end(), [](const LockMetrics& lock) { return lock.held == 0; });
    }));
    metrics = session.metrics();
    if ((series = series_of(metrics, path))) {
      EXPECT_EQ(series->wait.count, 1u);
      EXPECT_EQ(series->hold.count, 1u);
      EXPECT_EQ(series->busy, 1u);
      EXPECT_EQ(series->waiting, 0);
      EXPECT_EQ(series->cancellations + series->timeouts + series->failures, 0u);
    }
    EXPECT_EQ(metrics.acquisitions, 1u);
    EXPECT_EQ(metrics.acquire_cancellations + metrics.acquire_timeouts, 0u);
    EXPECT_EQ(metrics.locks.size(), 2u);
    session.close();
    if (layout == SemaphoreLayout::kazoo) {  // kazoo's parents are persistent
      raw.remove(path + "-__lock__");
      raw.remove(path);
    }
  }
}

TEST(LockMetricsTest, ALabelThatIsNotAnAbsolutePathIsRefusedNamingIt) {
  auto options = session_options(testenv::shared_server());
  options.metrics_path_labels.paths = {"locks/"};
  try {
    Session session(options);
    FAIL() << "a relative label path was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'locks/'"));
  }
}

// Records written during the test to a file through json_lines_log_sink.
class JsonLinesLog : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = std::fopen(file_.c_str(), "w");
    ASSERT_NE(out_, nullptr);
    set_log_record_sink(json_lines_log_sink(out_), LogLevel::debug);
  }
  void TearDown() override {
    set_log_sink(nullptr);
    if (out_) std::fclose(out_);
  }
  std::vector<std::string> read_back() {
    set_log_sink(nullptr);
    std::fflush(out_);
    return read_json_lines(file_);
  }

  testenv::TempDir dir_{"zkr-json-log"};
  const std::string file_ = dir_.file("log.jsonl").string();
  std::FILE* out_ = nullptr;
};

TEST_F(JsonLinesLog, TheGrantAndTheLossOfALockCarryItsSessionPathAndNode) {
  const std::string servers = testenv::shared_server();
  const std::string path = testenv::unique_path();
  Session session(session_options(servers));
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  const std::string node = held.node_path();
  const std::string session_id = session_id_text(held.session_id());
  RawClient raw(servers);
  ASSERT_EQ(raw.remove(node), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));

  const auto records = read_back();
  const auto fields = [&](std::string_view level, const std::string& message) {
    return fmt::format("level={},message={},node={},path={},session={},time=", hex(level), hex(message), hex(node),
                       hex(path), hex(session_id));
  };
  EXPECT_THAT(records, Contains(StartsWith(fields("debug", fmt::format("lock {} granted (token {})", node,
                                                                        held.token().value())))));
  EXPECT_THAT(records, Contains(StartsWith(fields("warning", fmt::format("lock {} lost (lock node deleted)", node)))));
  // The session's own lines carry its id.
  EXPECT_THAT(records, Contains(StartsWith(fmt::format("level={},message={},session={},time=", hex("info"),
                                                       hex(fmt::format("session {} established (timeout {} ms)",
                                                                       session_id, session.negotiated_timeout().count())),
                                                       hex(session_id)))));
}

TEST(PlainLogSink, GetsTheSameTextAsBefore) {
  const std::string servers = testenv::shared_server();
  const std::string path = testenv::unique_path();
  std::mutex mutex;
  std::vector<std::string> lines;
  set_log_sink([&](LogLevel, std::string_view text) {
    std::lock_guard lock(mutex);
    lines.emplace_back(text);
  });
  Session session(session_options(servers));
  HeldLock held = Lock(session, path).acquire();
  const std::string node = held.node_path();
  RawClient raw(servers);
  ASSERT_EQ(raw.remove(node), ZOK);
  ASSERT_TRUE(eventually([&] { return held.lost(); }));
  set_log_sink(nullptr);
  std::lock_guard lock(mutex);
  EXPECT_THAT(lines, Contains(fmt::format("lock {} lost (lock node deleted)", node)));
}

}  // namespace
}  // namespace zkr::test
