// SPDX-License-Identifier: Apache-2.0
// The read/write lock on real servers: readers together, writers alone, writers not starved by
// readers that came later, and no herd.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/rwlock.hpp>

#include "recipe_test_support.hpp"

namespace zkr::test {
namespace {

class ReadWriteLockTest : public ServerTest {
 protected:
  Sessions sessions;

  void TearDown() override { sessions.close_all(); }
};

TEST_F(ReadWriteLockTest, FiveReadersHoldTogether) {
  std::vector<std::unique_ptr<ReadWriteLock>> locks;
  std::vector<HeldLock> reads;
  auto close_sessions = sessions.closer();
  for (int i = 0; i < 5; ++i) {
    locks.push_back(std::make_unique<ReadWriteLock>(sessions.add(servers), path));
    auto read = locks.back()->read_lock().try_acquire_for(testenv::scaled(5s));
    ASSERT_TRUE(read) << "reader " << i << " waited for other readers";
    EXPECT_NE(read->node_path().find("__READ__"), std::string::npos);
    reads.push_back(std::move(*read));
  }
  EXPECT_FALSE(locks[0]->write_lock().try_acquire());
  auto rows = list_contenders(sessions[0], path);
  ASSERT_EQ(rows.size(), 5u);
  for (const auto& row : rows) {
    EXPECT_TRUE(row.holds);
    EXPECT_EQ(row.role, ContenderRole::read);
  }
}

// Threads mix reads and writes: a writer is always alone, readers do overlap, everyone gets in.
TEST_F(ReadWriteLockTest, WritersAloneReadersTogetherUnderLoad) {
  constexpr int kThreads = 5;
  constexpr int kRounds = 6;
  std::atomic<int> readers{0}, writers{0}, violations{0}, most_readers{0};
  std::vector<int> done(kThreads, 0);
  for (int i = 0; i < kThreads; ++i) sessions.add(servers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      ReadWriteLock lock(sessions[i], path);
      std::mt19937 random(static_cast<unsigned>(i) + 11u);
      for (int round = 0; round < kRounds; ++round) {
        const bool write = (round + i) % 3 == 0;
        auto held = (write ? lock.write_lock() : lock.read_lock()).try_acquire_for(testenv::scaled(20s));
        if (!held) continue;
        if (write) {
          if (writers.fetch_add(1) != 0 || readers.load() != 0) ++violations;
        } else {
          const int now = readers.fetch_add(1) + 1;
          if (writers.load() != 0) ++violations;
          int seen = most_readers.load();
          while (now > seen && !most_readers.compare_exchange_weak(seen, now)) {
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(10, 40)(random)));
        (write ? writers : readers).fetch_sub(1);
        held->release();
        ++done[i];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GE(most_readers.load(), 2);  // reads did share
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(done[i], kRounds) << "thread " << i;
}

// A writer waits behind one reader while new readers keep arriving: it gets in as soon as the
// readers that were there before it leave, and the newcomers wait for it.
TEST_F(ReadWriteLockTest, AWriterIsNotStarvedByReadersThatCameLater) {
  ReadWriteLock early(sessions.add(servers), path), writer(sessions.add(servers), path);
  HeldLock first_read = early.read_lock().acquire();
  std::promise<HeldLock> write_grant;
  auto close_sessions = sessions.closer();
  writer.write_lock().async_acquire(-1ns, [&](std::error_code ec, HeldLock held) {
    EXPECT_FALSE(ec);
    write_grant.set_value(std::move(held));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 2; }));

  // A stream of readers, each arriving after the writer and each held until the test ends.
  Session& late_session = sessions.add(servers);
  std::vector<std::unique_ptr<ReadWriteLock>> late;
  std::atomic<int> late_granted{0};
  std::atomic<std::int64_t> first_late_token{0};
  std::vector<HeldLock> late_reads(6);
  std::mutex mutex;
  auto close_late_sessions = sessions.closer();
  for (int i = 0; i < 6; ++i) {
    late.push_back(std::make_unique<ReadWriteLock>(late_session, path));
    late.back()->read_lock().async_acquire(-1ns, [&, i](std::error_code ec, HeldLock held) {
      if (ec) return;
      std::lock_guard guard(mutex);
      if (late_granted++ == 0) first_late_token = held.token().value();
      late_reads[i] = std::move(held);
    });
    std::this_thread::sleep_for(30ms);
  }
  ASSERT_TRUE(eventually([&] { return nodes().size() == 8; }));
  EXPECT_EQ(late_granted.load(), 0);  // readers behind a waiting writer wait
  auto write_future = write_grant.get_future();
  EXPECT_EQ(write_future.wait_for(100ms), std::future_status::timeout);
  first_read.release();
  ASSERT_EQ(write_future.wait_for(testenv::scaled(5s)), std::future_status::ready);
  HeldLock write = write_future.get();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(late_granted.load(), 0);  // still the writer's turn
  write.release();
  ASSERT_TRUE(eventually([&] { return late_granted.load() == 6; }));  // then all readers together
  EXPECT_LT(write.token().value(), first_late_token.load());  // the late readers' nodes came later
  late_session.close();
}

// Ten writers queued behind one: a release grants one and wakes one more (the writer after it,
// which looks again so that its own turn needs no listing).
TEST_F(ReadWriteLockTest, AWriteReleaseGrantsOneWaitingWriterAndWakesOnlyOneMore) {
  Session& holder_session = sessions.add(servers);
  Session& waiter_session = sessions.add(servers);
  ReadWriteLock holder(holder_session, path);
  HeldLock held = holder.write_lock().acquire();
  std::vector<std::unique_ptr<ReadWriteLock>> locks;
  std::atomic<int> granted{0};
  std::vector<HeldLock> grants(10);
  auto close_sessions = sessions.closer();
  for (int i = 0; i < 10; ++i) {
    locks.push_back(std::make_unique<ReadWriteLock>(waiter_session, path));
    locks.back()->write_lock().async_acquire(-1ns, [&, i](std::error_code ec, HeldLock lock) {
      if (ec) return;
      grants[i] = std::move(lock);
      ++granted;
    });
  }
  ASSERT_TRUE(eventually([&] { return nodes().size() == 11; }));
  ASSERT_TRUE(eventually([&] { return waiter_session.metrics().requests_sent >= 30; }));
  std::this_thread::sleep_for(200ms);
  const auto before = waiter_session.metrics().wakeups;
  held.release();
  ASSERT_TRUE(eventually([&] { return granted.load() == 1; }));
  std::this_thread::sleep_for(testenv::scaled(500ms));
  EXPECT_EQ(waiter_session.metrics().wakeups - before, 2u);
  EXPECT_EQ(granted.load(), 1);
  waiter_session.close();
}

// Readers watch only the nearest earlier writer: every wake-up is a grant, and readers leaving
// wake nobody but the writer behind the last of them.
TEST_F(ReadWriteLockTest, ReadersWakeOnlyForTheirWriterAndEveryWakeupIsAGrant) {
  Session& writer_session = sessions.add(servers);
  Session& reader_session = sessions.add(servers);
  Session& second_writer_session = sessions.add(servers);
  ReadWriteLock writer(writer_session, path), second_writer(second_writer_session, path);
  HeldLock write = writer.write_lock().acquire();
  std::vector<std::unique_ptr<ReadWriteLock>> readers;
  std::mutex mutex;
  std::vector<HeldLock> reads;
  auto queue_readers = [&](int count) {
    for (int i = 0; i < count; ++i) {
      readers.push_back(std::make_unique<ReadWriteLock>(reader_session, path));
      readers.back()->read_lock().async_acquire(-1ns, [&](std::error_code ec, HeldLock held) {
        if (ec) return;
        std::lock_guard guard(mutex);
        reads.push_back(std::move(held));
      });
      const std::size_t expected = readers.size() + 1 + (readers.size() > 5 ? 1 : 0);
      ASSERT_TRUE(eventually([&] { return nodes().size() == expected; }));
    }
  };
  queue_readers(5);
  std::promise<HeldLock> second_write;
  auto close_sessions = sessions.closer();
  second_writer.write_lock().async_acquire(-1ns, [&](std::error_code ec, HeldLock held) {
    EXPECT_FALSE(ec);
    second_write.set_value(std::move(held));
  });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 7; }));
  queue_readers(5);  // behind the second writer
  std::this_thread::sleep_for(testenv::scaled(300ms));

  const auto reader_wakeups = reader_session.metrics().wakeups;
  write.release();
  ASSERT_TRUE(eventually([&] {
    std::lock_guard guard(mutex);
    return reads.size() == 5;
  }));
  std::this_thread::sleep_for(testenv::scaled(300ms));
  EXPECT_EQ(reader_session.metrics().wakeups - reader_wakeups, 5u);  // exactly the five granted
  {
    std::lock_guard guard(mutex);
    EXPECT_EQ(reads.size(), 5u);  // those behind the second writer still wait
  }

  // The second writer watches its immediate predecessor, the last of the first five readers.
  const auto writer_wakeups = second_writer_session.metrics().wakeups;
  std::size_t last_reader = 0;
  {
    std::lock_guard guard(mutex);
    for (std::size_t i = 1; i < reads.size(); ++i)
      if (reads[i].token() > reads[last_reader].token()) last_reader = i;
    for (std::size_t i = 0; i < reads.size(); ++i)
      if (i != last_reader) reads[i].release();
  }
  std::this_thread::sleep_for(testenv::scaled(300ms));
  EXPECT_EQ(second_writer_session.metrics().wakeups, writer_wakeups);
  {
    std::lock_guard guard(mutex);
    reads[last_reader].release();
  }
  auto second = second_write.get_future();
  ASSERT_EQ(second.wait_for(testenv::scaled(5s)), std::future_status::ready);
  EXPECT_EQ(second_writer_session.metrics().wakeups - writer_wakeups, 1u);
  reader_session.close();
}

}  // namespace
}  // namespace zkr::test
