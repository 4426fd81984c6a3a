// SPDX-License-Identifier: Apache-2.0
// Our recipes beside real peers on the same path: Curator (Java) and kazoo (Python) participants
// run as processes against the shared server. Every participant, ours and theirs, appends
// "ENTER <who> <monotonic ns>" and "EXIT <who> <monotonic ns>" around each critical section to one
// log file (section_log.hpp); the test then checks that no two sections that must exclude each
// other overlap, and that every participant got in. The same under churn: interop_churn_test.cpp.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <csignal>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/multi_lock.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/cache.hpp>
#include <zkr/group.hpp>
#include <zkr/barrier.hpp>

#include "../core/test_support.hpp"
#include "section_log.hpp"

namespace zkr::test {
namespace {

constexpr int kIterations = 5;
constexpr int kHoldMs = 20;

class InteropTest : public ::testing::Test {
 protected:
  std::string servers = testenv::shared_server();
  std::string path = testenv::unique_path();
  RawClient raw{servers};
  SectionLog log;

  void SetUp() override {
    if (!ZKR_CURATOR_AVAILABLE && curator_needed_) GTEST_SKIP() << "javac, java or the Curator jars are missing";
  }

  // iterations and hold_ms: the peer's ITERATIONS and HOLD_MS (-1: a semaphore peer holds its first
  // lease until killed).
  std::unique_ptr<testenv::Process> start_curator(const std::string& mode, const std::string& who, int clients,
                                                  int iterations = kIterations, int hold_ms = kHoldMs) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    options.merge_stderr = true;
    // Short JIT and a small heap: two cores are shared with builds, and JVM start is slow.
    return std::make_unique<testenv::Process>(
        std::vector<std::string>{ZKR_JAVA, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m", "-cp",
                                 ZKR_CURATOR_CLASSPATH, "CuratorPeer", servers, path, mode, who, log.file(),
                                 std::to_string(iterations), std::to_string(hold_ms), std::to_string(clients)},
        options);
  }

  // mode: "" (a Lock that also counts "-lock-" nodes), "election" (kazoo's Election) or
  // "semaphore:N"; iterations and hold_ms as start_curator's.
  std::unique_ptr<testenv::Process> start_kazoo(const std::string& who, int clients, const std::string& mode = {},
                                                int iterations = kIterations, int hold_ms = kHoldMs) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    options.merge_stderr = true;
    std::vector<std::string> argv{"/usr/bin/python3", ZKR_KAZOO_PEER, servers, path, who, log.file(),
                                  std::to_string(iterations), std::to_string(hold_ms), std::to_string(clients)};
    if (!mode.empty()) argv.push_back(mode);
    return std::make_unique<testenv::Process>(argv, options);
  }

  // Waits for the peer's READY; fails the test with whatever it printed instead.
  static void await_ready(testenv::Process& peer) {
    auto line = peer.read_line(testenv::scaled(30s));
    while (line && *line != "READY" && !line->starts_with("ERROR")) line = peer.read_line(testenv::scaled(30s));
    ASSERT_TRUE(line) << "the peer did not start";
    ASSERT_EQ(*line, "READY") << *line;
  }

  static void await_done(testenv::Process& peer) {
    std::string output;
    auto line = peer.read_line(testenv::scaled(60s));
    while (line && *line != "DONE" && !line->starts_with("ERROR")) {
      output += *line + "\n";
      line = peer.read_line(testenv::scaled(60s));
    }
    ASSERT_TRUE(line) << "the peer did not finish; it said:\n" << output;
    ASSERT_EQ(*line, "DONE") << output;
    EXPECT_EQ(peer.wait(testenv::scaled(20s)), 0);
  }

  // Waits until a participant whose name starts with `prefix` has entered once, so that ours
  // start while the peer is still busy and the two really contend.
  void await_first_entry(const std::string& prefix) {
    ASSERT_TRUE(eventually([&] {
      std::ifstream in(log.file());
      std::string line;
      while (std::getline(in, line))
        if (line.starts_with("ENTER " + prefix)) return true;
      return false;
    }, testenv::scaled(30s))) << "the peer never entered";
  }

  // The number of times the log passes from one library's section to the other's: contention
  // shows as several switches.
  static int switches_between_libraries(std::vector<Section> sections) {
    std::sort(sections.begin(), sections.end(), [](const Section& a, const Section& b) { return a.enter < b.enter; });
    int switches = 0;
    for (std::size_t i = 1; i < sections.size(); ++i)
      if (sections[i].who.starts_with("ours") != sections[i - 1].who.starts_with("ours")) ++switches;
    return switches;
  }

  // Our side: `count` participants, each with its own session, kIterations sections each.
  // `acquire` returns an optional held lock (HeldLock, HeldMultiLock): empty if it timed out.
  template <typename Acquire>
  void run_ours(int count, const Acquire& acquire, const std::function<std::string(int)>& name) {
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < count; ++i) sessions.push_back(std::make_unique<Session>(session_options(servers, 10000ms)));
    std::vector<std::thread> threads;
    for (int i = 0; i < count; ++i) {
      threads.emplace_back([&, i] {
        for (int n = 0; n < kIterations; ++n) {
          auto held = acquire(*sessions[i], i);
          if (!held) {
            ADD_FAILURE() << name(i) << " timed out";
            return;
          }
          log.record("ENTER", name(i));
          std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
          log.record("EXIT", name(i));
          held->release();
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }

  // Our side of an election: `count` latches in `layout`, each with its own session, kIterations
  // terms each; each term is logged with its token, then resigned (the last one closed).
  void run_latches(int count, ElectionLayout layout) {
    std::vector<std::unique_ptr<Session>> sessions;
    for (int i = 0; i < count; ++i) sessions.push_back(std::make_unique<Session>(session_options(servers, 10000ms)));
    std::vector<std::thread> threads;
    for (int i = 0; i < count; ++i) {
      threads.emplace_back([&, i] {
        const std::string who = fmt::format("ours-{}", i);
        LeaderLatch latch(*sessions[i], path, {.participant_data = who, .layout = layout});
        latch.start();
        for (int n = 0; n < kIterations; ++n) {
          auto term = latch.wait_for_leadership(testenv::scaled(30s));
          if (!term) {
            ADD_FAILURE() << who << " never led";
            return;
          }
          log.record("ENTER", who, std::to_string(term->token().value()));
          std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
          log.record("EXIT", who);
          if (n + 1 < kIterations) latch.resign();
        }
        latch.close();
      });
    }
    for (auto& thread : threads) thread.join();
  }

  // Every term carries a token, and a later term a larger one, whichever library led.
  static void expect_tokens_grow(std::vector<Section> sections) {
    std::sort(sections.begin(), sections.end(), [](const Section& a, const Section& b) { return a.enter < b.enter; });
    for (std::size_t i = 0; i < sections.size(); ++i) {
      EXPECT_GT(sections[i].token, 0) << sections[i].who << " logged no token";
      if (i > 0) {
        EXPECT_GT(sections[i].token, sections[i - 1].token) << sections[i].who << " after " << sections[i - 1].who;
      }
    }
  }

  // The peer's two participants (started, not yet told to go) and two latches of ours in `layout`
  // on one path: one leader at a time, everyone leads every time, terms pass between the
  // libraries, tokens grow, and no node is left.
  void expect_one_leader_beside(testenv::Process& peer, const std::string& peer_name, ElectionLayout layout) {
    await_ready(peer);
    peer.write_stdin("GO\n");
    await_first_entry(peer_name);
    run_latches(2, layout);
    await_done(peer);
    auto sections = read_sections(log.file()).sections;
    auto bad = overlaps(sections, everyone_excludes);
    EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
    expect_everyone_in(sections, {peer_name + "-0", peer_name + "-1", "ours-0", "ours-1"});
    EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not hand over to each other";
    expect_tokens_grow(sections);
    EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
  }

  // Our participant that must refuse to join beside the peer's (running) election.
  void expect_selector_refused(const std::string& peer_recipe) {
    Session session(session_options(servers));
    LeaderSelector selector(session, path, [](const Leadership&) { ADD_FAILURE() << "led beside the peer"; });
    selector.start();
    ASSERT_TRUE(eventually([&] { return selector.error() == errc::incompatible_peer; }, testenv::scaled(10s)));
    try {
      std::rethrow_exception(selector.last_exception());
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(peer_recipe), std::string::npos) << e.what();
    }
  }

  // Kills the peer process that leads (its ENTER logged), and checks that our latch, queued behind
  // it, leads next once the server has expired the peer's session, with a larger token.
  void expect_ours_succeed_killed_peer(testenv::Process& peer, const std::string& peer_name, ElectionLayout layout) {
    await_first_entry(peer_name);
    Session session(session_options(servers, 10000ms));
    LeaderLatch latch(session, path, {.participant_data = "ours-0", .layout = layout});
    latch.start();
    ASSERT_TRUE(eventually([&] { return raw.children(path).size() == 2; }));
    EXPECT_FALSE(latch.wait_for_leadership(300ms)) << "led beside the peer";
    peer.signal(SIGKILL);
    peer.wait(testenv::scaled(10s));
    log.record("KILLED", peer_name);
    auto term = latch.wait_for_leadership(testenv::scaled(40s));  // the peer's session expires first
    ASSERT_TRUE(term);
    log.record("ENTER", "ours-0", std::to_string(term->token().value()));
    log.record("EXIT", "ours-0");
    latch.close();
    auto sections = read_sections(log.file()).sections;
    auto bad = overlaps(sections, everyone_excludes);
    EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
    expect_tokens_grow(sections);
    EXPECT_EQ(entries_by_participant(sections)["ours-0"], 1);
    EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
  }

  void expect_everyone_in(const std::vector<Section>& sections, const std::vector<std::string>& everyone) {
    auto counts = entries_by_participant(sections);
    for (const auto& who : everyone) EXPECT_EQ(counts[who], kIterations) << who << " did not get in every time";
    EXPECT_EQ(counts.size(), everyone.size());
  }

  bool curator_needed_ = true;
};

// The most sections open at one moment.
int most_at_once(const std::vector<Section>& sections) {
  std::vector<std::pair<std::int64_t, int>> events;  // (time, +1 enter / -1 exit); exits first on ties
  for (const auto& section : sections) {
    events.emplace_back(section.enter, 1);
    events.emplace_back(section.exit, -1);
  }
  std::sort(events.begin(), events.end());
  int open = 0, most = 0;
  for (const auto& [time, step] : events) most = std::max(most, open += step);
  return most;
}

// The fencing token on the first ENTER line of `who` in the log (peers write it there), even
// while that section is still open.
std::int64_t logged_token(const std::string& file, const std::string& who) {
  std::ifstream in(file);
  std::string event, name;
  std::int64_t ns = 0, token = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    if (fields >> event >> name >> ns >> token && event == "ENTER" && name == who) return token;
  }
  return 0;
}

// A zkr::Semaphore in a peer's layout beside that peer's own semaphore: N leases on one path,
// never more than N sections at once, leases passing between the libraries.
class SemaphoreInteropTest : public InteropTest {
 protected:
  static constexpr int kLeases = 2;

  void run_ours_beside_peer(SemaphoreLayout layout, const std::string& peer) {
    await_first_entry(peer);
    SemaphoreOptions options;
    options.layout = layout;
    run_ours(
        3,
        [&](Session& session, int) {
          Semaphore semaphore(session, path, kLeases, options);
          return semaphore.try_acquire_for(testenv::scaled(30s));
        },
        [](int i) { return fmt::format("ours-{}", i); });
  }

  void expect_at_most_n_and_shared(const std::string& peer) {
    auto sections = read_sections(log.file()).sections;
    EXPECT_LE(most_at_once(sections), kLeases);
    EXPECT_EQ(most_at_once(sections), kLeases) << "the leases were never all in use at once";
    expect_everyone_in(sections, {peer + "-0", peer + "-1", peer + "-2", "ours-0", "ours-1", "ours-2"});
    EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  }

  // Our lease holder in its own process (tests/recipes/recipe_peer_main.cpp), session 4 s.
  std::unique_ptr<testenv::Process> start_our_holder(const std::string& layout) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    return std::make_unique<testenv::Process>(
        std::vector<std::string>{ZKR_RECIPE_PEER, "lease", servers, path, "4000", "1:" + layout}, options);
  }

  // One lease: our process holds it, the peer waits; our process is killed and the peer gets the
  // lease once our session ended; the peer is killed and we get it once its session ended. The
  // tokens grow across the three grants.
  void pass_a_lease_through_killed_holders(SemaphoreLayout layout, std::unique_ptr<testenv::Process> peer,
                                           const std::string& peer_name) {
    auto our_holder = start_our_holder(std::string(to_string(layout)));
    auto our_lease = our_holder->wait_for_line("LEASE", testenv::scaled(15s));
    ASSERT_TRUE(our_lease);
    await_ready(*peer);
    peer->write_stdin("GO\n");
    SemaphoreOptions options;
    options.layout = layout;
    Session session(session_options(servers, 4000ms));
    Semaphore semaphore(session, path, 1, options);
    EXPECT_FALSE(semaphore.try_acquire_for(300ms)) << "a second lease while ours is held";
    our_holder->signal(SIGKILL);
    ASSERT_TRUE(our_holder->wait(testenv::scaled(10s)));
    ASSERT_TRUE(peer->wait_for_line("HOLDING", testenv::scaled(30s))) << "the peer never got the freed lease";
    const std::int64_t peer_token = logged_token(log.file(), peer_name);
    EXPECT_GT(peer_token, number_of(*our_lease));
    EXPECT_FALSE(semaphore.try_acquire()) << "a second lease while the peer holds one";
    peer->signal(SIGKILL);
    ASSERT_TRUE(peer->wait(testenv::scaled(10s)));
    auto lease = semaphore.try_acquire_for(testenv::scaled(40s));
    ASSERT_TRUE(lease) << "the killed peer's lease was not freed";
    EXPECT_GT(lease->token().value(), peer_token);
    EXPECT_EQ(semaphore.contenders().size(), 1u);
    lease->release();
  }

  static std::int64_t number_of(const std::string& line) { return std::stoll(line.substr(line.find(' ') + 1)); }
};

TEST_F(SemaphoreInteropTest, CuratorInterProcessSemaphoreV2AndOursShareNLeases) {
  auto curator = start_curator(fmt::format("semaphore:{}", kLeases), "curator", 3);
  await_ready(*curator);
  curator->write_stdin("GO\n");
  run_ours_beside_peer(SemaphoreLayout::curator_v2, "curator");
  await_done(*curator);
  expect_at_most_n_and_shared("curator");
  EXPECT_TRUE(eventually([&] { return raw.children(path + "/leases").empty(); }));
  EXPECT_TRUE(eventually([&] { return raw.children(path + "/locks").empty(); }));
}

TEST_F(SemaphoreInteropTest, CuratorLeasesOfKilledHoldersAreFreed) {
  pass_a_lease_through_killed_holders(SemaphoreLayout::curator_v2,
                                      start_curator("semaphore:1", "curator", 1, 1, -1), "curator-0");
}

class KazooSemaphoreInteropTest : public SemaphoreInteropTest {
 protected:
  KazooSemaphoreInteropTest() { curator_needed_ = false; }
};

TEST_F(KazooSemaphoreInteropTest, KazooSemaphoreAndOursShareNLeases) {
  auto kazoo = start_kazoo("kazoo", 3, fmt::format("semaphore:{}", kLeases));
  await_ready(*kazoo);
  kazoo->write_stdin("GO\n");
  run_ours_beside_peer(SemaphoreLayout::kazoo, "kazoo");
  await_done(*kazoo);
  expect_at_most_n_and_shared("kazoo");
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
  EXPECT_TRUE(eventually([&] { return raw.children(path + "-__lock__").empty(); }));
  raw.remove(path);  // kazoo's nodes are persistent
  raw.remove(path + "-__lock__");
}

TEST_F(KazooSemaphoreInteropTest, KazooLeasesOfKilledHoldersAreFreed) {
  pass_a_lease_through_killed_holders(SemaphoreLayout::kazoo, start_kazoo("kazoo", 1, "semaphore:1", 1, -1),
                                      "kazoo-0");
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
  raw.remove(path);
  raw.remove(path + "-__lock__");
}

TEST_F(InteropTest, LockAndCuratorInterProcessMutexExcludeEachOther) {
  auto curator = start_curator("mutex", "curator", 2);
  await_ready(*curator);
  curator->write_stdin("GO\n");
  await_first_entry("curator");
  run_ours(
      2,
      [&](Session& session, int) {
        Lock lock(session, path);
        return lock.try_acquire_for(testenv::scaled(30s));
      },
      [](int i) { return fmt::format("ours-{}", i); });
  await_done(*curator);
  auto sections = read_sections(log.file()).sections;
  auto bad = overlaps(sections, everyone_excludes);
  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
  expect_everyone_in(sections, {"curator-0", "curator-1", "ours-0", "ours-1"});
  EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
}

class KazooInteropTest : public InteropTest {
 protected:
  KazooInteropTest() { curator_needed_ = false; }
};

TEST_F(KazooInteropTest, LockAndKazooLockWithExtraPatternExcludeEachOther) {
  auto kazoo = start_kazoo("kazoo", 2);
  await_ready(*kazoo);
  kazoo->write_stdin("GO\n");
  await_first_entry("kazoo");
  run_ours(
      2,
      [&](Session& session, int) {
        Lock lock(session, path);
        return lock.try_acquire_for(testenv::scaled(30s));
      },
      [](int i) { return fmt::format("ours-{}", i); });
  await_done(*kazoo);
  auto sections = read_sections(log.file()).sections;
  auto bad = overlaps(sections, everyone_excludes);
  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
  expect_everyone_in(sections, {"kazoo-0", "kazoo-1", "ours-0", "ours-1"});
  EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
}

TEST_F(InteropTest, ElectionAndCuratorLeaderSelectorAgreeOnOneLeader) {
  auto curator = start_curator("leader", "curator", 2);
  await_ready(*curator);
  Session observer(session_options(servers));
  constexpr int kOurs = 2;
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<LeaderSelector>> selectors;
  std::array<std::atomic<int>, kOurs> terms{};
  for (int i = 0; i < kOurs; ++i) {
    sessions.push_back(std::make_unique<Session>(session_options(servers, 10000ms)));
    SelectorOptions options;
    options.participant_data = fmt::format("ours-{}", i);
    selectors.push_back(std::make_unique<LeaderSelector>(
        *sessions.back(), path,
        [&, i](const Leadership&) {
          if (terms[i] >= kIterations) return;  // done: hand on until closed
          const std::string who = fmt::format("ours-{}", i);
          log.record("ENTER", who);
          std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
          log.record("EXIT", who);
          ++terms[i];
        },
        options));
  }
  curator->write_stdin("GO\n");
  await_first_entry("curator");
  for (auto& selector : selectors) selector->start();

  // Meanwhile a non-participant watches the one queue the two libraries share.
  bool saw_both_in_queue = false;
  std::map<std::string, int> leaders_seen;
  const auto end = std::chrono::steady_clock::now() + testenv::scaled(60s);
  while (std::chrono::steady_clock::now() < end) {
    bool all_ours_done = true;
    for (int i = 0; i < kOurs; ++i) {
      if (terms[i] >= kIterations) selectors[i]->close();
      else all_ours_done = false;
    }
    auto participants = election_participants(observer, path);
    bool curator_there = false, ours_there = false;
    for (const auto& p : participants) {
      curator_there |= p.data.starts_with("curator-");
      ours_there |= p.data.starts_with("ours-");
    }
    saw_both_in_queue |= curator_there && ours_there;
    if (!participants.empty() && participants.front().leader) ++leaders_seen[participants.front().data.substr(0, 5)];
    if (all_ours_done && participants.empty()) break;
    std::this_thread::sleep_for(10ms);
  }
  await_done(*curator);
  for (auto& selector : selectors) selector->close();
  auto sections = read_sections(log.file()).sections;
  auto bad = overlaps(sections, everyone_excludes);
  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
  expect_everyone_in(sections, {"curator-0", "curator-1", "ours-0", "ours-1"});
  EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  EXPECT_TRUE(saw_both_in_queue) << "the two libraries never queued together";
  for (const auto& [who, count] : leaders_seen) RecordProperty("leader_samples_" + who, count);
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
}

TEST_F(InteropTest, ReadWriteLockAndCuratorReadWriteLockAgree) {
  // Curator: curator-w0 and curator-w2 write, curator-r1 reads; ours: ours-w0 writes, ours-r1
  // and ours-r2 read.
  auto curator = start_curator("rw", "curator", 3);
  await_ready(*curator);
  curator->write_stdin("GO\n");
  // Ours start once Curator's are in: a JVM slowed by a loaded machine could otherwise start
  // after ours finished, and nothing would have contended.
  await_first_entry("curator");
  auto name = [](int i) { return fmt::format("ours-{}{}", i == 0 ? "w" : "r", i); };
  run_ours(
      3,
      [&](Session& session, int i) {
        ReadWriteLock lock(session, path);
        return (i == 0 ? lock.write_lock() : lock.read_lock()).try_acquire_for(testenv::scaled(30s));
      },
      name);
  await_done(*curator);
  auto sections = read_sections(log.file()).sections;
  auto is_writer = [](const Section& s) { return s.who.find("-w") != std::string::npos; };
  auto bad = overlaps(sections, [&](const Section& a, const Section& b) { return is_writer(a) || is_writer(b); });
  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
  expect_everyone_in(sections, {"curator-w0", "curator-r1", "curator-w2", "ours-w0", "ours-r1", "ours-r2"});
  EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));
}

// ---- elections with Curator's LeaderLatch and kazoo's Election ----

TEST_F(InteropTest, LatchAndCuratorLeaderLatchAgreeOnOneLeaderAndHandOverBothWays) {
  auto curator = start_curator("latch", "curator", 2);
  expect_one_leader_beside(*curator, "curator", ElectionLayout::recipe_default);  // Curator LeaderLatch's
}

TEST_F(InteropTest, KilledCuratorLeaderLatchIsSucceededByOursAndASelectorIsRefused) {
  auto curator = start_curator("latch", "curator", 1, 1, 120000);  // leads until killed
  await_ready(*curator);
  curator->write_stdin("GO\n");
  await_first_entry("curator");
  expect_selector_refused("Curator LeaderLatch");
  expect_ours_succeed_killed_peer(*curator, "curator-0", ElectionLayout::curator_latch);
}

TEST_F(KazooInteropTest, KazooLayoutElectionAndKazooElectionAgreeOnOneLeaderAndHandOverBothWays) {
  auto kazoo = start_kazoo("kazoo", 2, "election");
  expect_one_leader_beside(*kazoo, "kazoo", ElectionLayout::kazoo);
}

TEST_F(KazooInteropTest, KilledKazooLeaderIsSucceededByOursAndACuratorLayoutSelectorIsRefused) {
  auto kazoo = start_kazoo("kazoo", 1, "election", 1, 120000);  // leads until killed
  await_ready(*kazoo);
  kazoo->write_stdin("GO\n");
  await_first_entry("kazoo");
  expect_selector_refused("kazoo Lock or Election");
  expect_ours_succeed_killed_peer(*kazoo, "kazoo-0", ElectionLayout::kazoo);
}

// ---- Group membership and double barriers shared with Curator and kazoo ----

// "id=data,..." of a fresh view ("(stale)" while it is not).
std::string fresh_members_of(const GroupView& view) {
  auto snapshot = view.snapshot();
  if (snapshot.stale) return "(stale)";
  std::string out;
  for (const auto& member : snapshot.members) out += (out.empty() ? "" : ",") + member.id + "=" + member.data;
  return out;
}

TEST_F(InteropTest, GroupMemberAndCuratorGroupMembersSeeEachOther) {
  Session session(session_options(servers));
  GroupMember ours(session, path, "ours", "data-ours");
  ours.join();
  GroupView view(session, path);
  auto curator = start_curator("group", "curator", 2, 3);
  await_ready(*curator);
  curator->write_stdin("GO\n");
  auto line = curator->wait_for_line("MEMBERS", testenv::scaled(60s));
  ASSERT_TRUE(line) << curator->read_all(1s);
  EXPECT_EQ(*line, "MEMBERS curator-0=data-curator-0,curator-1=data-curator-1,ours=data-ours");
  EXPECT_TRUE(eventually([&] {
    return fresh_members_of(view) == "curator-0=data-curator-0,curator-1=data-curator-1,ours=data-ours";
  })) << fresh_members_of(view);
  curator->write_stdin("LEAVE\n");
  await_done(*curator);
  EXPECT_TRUE(eventually([&] { return fresh_members_of(view) == "ours=data-ours"; })) << fresh_members_of(view);
}

TEST_F(KazooInteropTest, GroupMemberAndKazooPartiesSeeEachOther) {
  Session session(session_options(servers));
  for (auto [mode, layout] : {std::pair{"party", GroupLayout::kazoo_party},
                              std::pair{"shallow-party", GroupLayout::kazoo_shallow_party}}) {
    SCOPED_TRACE(mode);
    path = testenv::unique_path(mode);
    GroupMember ours(session, path, "ours", {}, {.layout = layout});
    ours.join();
    GroupView view(session, path, layout);
    auto kazoo = start_kazoo("kazoo", 2, mode, 3);
    await_ready(*kazoo);
    kazoo->write_stdin("GO\n");
    auto line = kazoo->wait_for_line("MEMBERS", testenv::scaled(60s));
    ASSERT_TRUE(line) << kazoo->read_all(1s);
    EXPECT_EQ(*line, "MEMBERS kazoo-0,kazoo-1,ours");
    EXPECT_TRUE(eventually([&] { return fresh_members_of(view) == "kazoo-0=kazoo-0,kazoo-1=kazoo-1,ours=ours"; }))
        << fresh_members_of(view);
    kazoo->write_stdin("LEAVE\n");
    await_done(*kazoo);
    EXPECT_TRUE(eventually([&] { return fresh_members_of(view) == "ours=ours"; })) << fresh_members_of(view);
  }
}

// Two Curator participants, one kazoo participant and ours on one double barrier of four: nobody
// is through enter() before all four have entered, nobody through leave() before all have left.
TEST_F(InteropTest, DoubleBarrierWithCuratorAndKazooParticipants) {
  constexpr int kParticipants = 4;
  auto curator = start_curator(fmt::format("double-barrier:{}", kParticipants), "curator", 2, 1, 200);
  auto kazoo = start_kazoo("kazoo", 1, fmt::format("double-barrier:{}", kParticipants), 1, 200);
  await_ready(*curator);
  await_ready(*kazoo);
  curator->write_stdin("GO\n");
  kazoo->write_stdin("GO\n");
  Session session(session_options(servers));
  DoubleBarrier ours(session, path, kParticipants);
  ASSERT_TRUE(ours.enter(testenv::scaled(60s)));
  log.record("ENTER", "ours-0");
  std::this_thread::sleep_for(200ms);
  ASSERT_TRUE(ours.leave(testenv::scaled(60s)));
  log.record("EXIT", "ours-0");
  await_done(*curator);
  await_done(*kazoo);
  auto sections = read_sections(log.file()).sections;
  EXPECT_EQ(entries_by_participant(sections),
            (std::map<std::string, int>{{"curator-0", 1}, {"curator-1", 1}, {"kazoo-0", 1}, {"ours-0", 1}}));
  std::int64_t last_enter = 0, first_exit = INT64_MAX;
  for (const auto& section : sections) {
    last_enter = std::max(last_enter, section.enter);
    first_exit = std::min(first_exit, section.exit);
  }
  EXPECT_LT(last_enter, first_exit) << "someone was through leave() before everyone had entered";
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));  // no participant, no "ready"
}

// The peers' leave protocol: the participant whose node sorts lowest (by name, "ready" aside)
// deletes it last, once it is alone; every other participant deletes its own and waits for the
// lowest. Ours sorts lowest here and leaves between a peer that left early (it deleted its node
// and waits for ours) and one that leaves late: nobody's leave() may return before the late one
// has called its own.
class DoubleBarrierLeaveInteropTest : public InteropTest {
 protected:
  static constexpr int kEarlyMs = 300, kOursMs = 1200, kLateMs = 3000;

  void expect_nobody_out_before_the_last_leaves(std::unique_ptr<testenv::Process> early,
                                                std::unique_ptr<testenv::Process> late) {
    await_ready(*early);
    await_ready(*late);
    Session session(session_options(servers));
    // A name below any other the peers could have drawn (a UUID's first 16 bits zero: 1 in 65,536).
    std::optional<DoubleBarrier> ours;
    for (int i = 0; i < 4'000'000 && (!ours || !name_of(*ours).starts_with("0000")); ++i) ours.emplace(session, path, 3);
    ASSERT_TRUE(name_of(*ours).starts_with("0000"));
    early->write_stdin("GO\n");
    late->write_stdin("GO\n");
    ASSERT_TRUE(ours->enter(testenv::scaled(60s)));
    log.record("ENTER", "ours-0");
    auto participants = raw.children(path);
    std::erase(participants, std::string("ready"));
    ASSERT_EQ(participants.size(), 3u);
    ASSERT_EQ(*std::min_element(participants.begin(), participants.end()), name_of(*ours)) << "ours is not the lowest";
    std::this_thread::sleep_for(std::chrono::milliseconds(kOursMs));
    const std::int64_t ours_leaving = monotonic_ns();
    EXPECT_TRUE(ours->leave(testenv::scaled(60s)));
    log.record("EXIT", "ours-0");
    await_done(*early);
    await_done(*late);

    auto sections = read_sections(log.file()).sections;
    EXPECT_EQ(entries_by_participant(sections),
              (std::map<std::string, int>{{"early-0", 1}, {"late-0", 1}, {"ours-0", 1}}));
    // When each called leave() (a peer: at the earliest, its ENTER line and its hold later).
    std::int64_t last_leaving = ours_leaving;
    for (const auto& section : sections) {
      if (section.who == "early-0") last_leaving = std::max<std::int64_t>(last_leaving, section.enter + kEarlyMs * 1'000'000LL);
      if (section.who == "late-0") last_leaving = std::max<std::int64_t>(last_leaving, section.enter + kLateMs * 1'000'000LL);
    }
    for (const auto& section : sections)
      EXPECT_GE(section.exit, last_leaving)
          << section.who << "'s leave() returned " << (last_leaving - section.exit) / 1'000'000
          << " ms before the last participant called its own";
    EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }));  // no participant, no "ready"
  }

  std::string name_of(const DoubleBarrier& barrier) const { return barrier.node().substr(path.size() + 1); }
};

TEST_F(DoubleBarrierLeaveInteropTest, OursSortingLowestLeavesLastBesideCurator) {
  expect_nobody_out_before_the_last_leaves(start_curator("double-barrier:3", "early", 1, 1, kEarlyMs),
                                           start_curator("double-barrier:3", "late", 1, 1, kLateMs));
}

class KazooDoubleBarrierLeaveInteropTest : public DoubleBarrierLeaveInteropTest {
 protected:
  KazooDoubleBarrierLeaveInteropTest() { curator_needed_ = false; }
};

TEST_F(KazooDoubleBarrierLeaveInteropTest, OursSortingLowestLeavesLastBesideKazoo) {
  expect_nobody_out_before_the_last_leaves(start_kazoo("early", 1, "double-barrier:3", 1, kEarlyMs),
                                           start_kazoo("late", 1, "double-barrier:3", 1, kLateMs));
}

// Curator and kazoo write a tree (one change at a time, 40 ms apart): our TreeCache ends equal to
// it, and each node's events follow the order of its writes (added "c", updated "s", removed),
// of which only a change overtaken by the next before the cache read it may be missing.
TEST_F(InteropTest, TreeCacheFollowsATreeWrittenByCuratorAndKazoo) {
  raw.create(path.substr(0, path.rfind('/')));  // the tests' common parent
  ASSERT_EQ(raw.create(path), ZOK);
  std::mutex mutex;
  std::map<std::string, std::vector<std::string>> heard;  // node -> "added c", "updated s", "removed"
  Session session(session_options(servers));
  TreeCache cache(session, path, [&](const CacheEvent& event) {
    if (event.path == path || event.path.empty()) return;
    std::lock_guard guard(mutex);
    std::string told(to_string(event.kind));
    if (event.kind != CacheEvent::Kind::removed) told += " " + event.node.data;
    heard[event.path].push_back(told);
  });
  ASSERT_TRUE(cache.wait_initialized(testenv::scaled(10s)));
  constexpr int kNodes = 4;
  auto curator = start_curator("tree", "curator", 1, kNodes, 40);
  auto kazoo = start_kazoo("kazoo", 1, "tree", kNodes, 40);
  await_ready(*curator);
  await_ready(*kazoo);
  curator->write_stdin("GO\n");
  kazoo->write_stdin("GO\n");
  await_done(*curator);
  await_done(*kazoo);
  std::map<std::string, std::string> expected{{path, ""}};
  for (const std::string who : {"curator-0", "kazoo-0"})
    for (int k = 0; k < kNodes; k += 2) expected[path + "/" + who + "-" + std::to_string(k)] = "s";
  const auto cached = [&] {
    std::map<std::string, std::string> out;
    for (const auto& [node, data] : cache.snapshot()) out[node] = data.data;
    return out;
  };
  ASSERT_TRUE(eventually([&] { return cached() == expected; })) << cache.size();
  session.close();
  std::lock_guard guard(mutex);
  int complete = 0;
  for (const std::string who : {"curator-0", "kazoo-0"})
    for (int k = 0; k < kNodes; ++k) {
      const auto& told = heard[path + "/" + who + "-" + std::to_string(k)];
      std::vector<std::string> writes{"added c", "updated s"};
      if (k % 2) writes.push_back("removed");
      // The writes in order, less those the next one overtook before the cache read the node.
      std::vector<std::vector<std::string>> allowed{writes, {"added s"}};
      if (k % 2) allowed = {writes, {"added s", "removed"}, {"added c", "removed"}, {}};
      if (told == writes) ++complete;
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), told), allowed.end())
          << who << "-" << k << " was told: " << ::testing::PrintToString(told);
    }
  RecordProperty("every_change_seen", complete);
}

}  // namespace
}  // namespace zkr::test

namespace zkr::test {
namespace {

// ---- the multi-lock beside Curator's InterProcessMultiLock and kazoo's Lock ----

// Curator's multi-locks over a, b and c, ours over the same paths (given in another order: ours
// takes them sorted, as Curator's are given), kazoo's Lock on b alone. Every section holds b, so
// none of ours may overlap another's, and the multi-locks never wait for each other in a cycle.
// Curator and kazoo do not exclude each other (Curator does not count kazoo's nodes): their
// sections may overlap, as they would without us.
TEST_F(InteropTest, MultiLockAndCuratorMultiLockAndKazooLockExcludeEachOther) {
  const std::string base = path;
  const std::string a = base + "/a", b = base + "/b", c = base + "/c";
  path = fmt::format("{},{},{}", a, b, c);  // the peers take their PATH from the fixture's
  auto curator = start_curator("multi", "curator", 2);
  path = b;
  auto kazoo = start_kazoo("kazoo", 1);
  path = base;
  await_ready(*curator);
  await_ready(*kazoo);
  curator->write_stdin("GO\n");
  kazoo->write_stdin("GO\n");
  await_first_entry("curator");
  run_ours(
      2,
      [&](Session& session, int) {
        MultiLock locks(session, {c, a, b});
        return locks.try_acquire_for(testenv::scaled(30s));
      },
      [](int i) { return fmt::format("ours-{}", i); });
  await_done(*curator);
  await_done(*kazoo);
  auto sections = read_sections(log.file()).sections;
  auto bad = overlaps(sections, [](const Section& x, const Section& y) {
    return !(x.who.starts_with("kazoo") && y.who.starts_with("curator")) &&
           !(x.who.starts_with("curator") && y.who.starts_with("kazoo"));
  });
  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps, first: " << bad.front();
  expect_everyone_in(sections, {"curator-0", "curator-1", "kazoo-0", "ours-0", "ours-1"});
  EXPECT_GE(switches_between_libraries(sections), 2) << "the libraries did not contend";
  EXPECT_TRUE(eventually([&] { return raw.children(a).empty() && raw.children(b).empty() && raw.children(c).empty(); }));
  for (const auto& p : {a, b, c}) raw.remove(p);  // kazoo's Lock makes its path persistent
}

}  // namespace
}  // namespace zkr::test
