// SPDX-License-Identifier: Apache-2.0
// Churn mixed with Curator: our participants (in-process and in processes of their own,
// tests/recipes/recipe_peer_main.cpp) and Curator's (one JVM of several clients each, reused for
// the whole run) on one path, while the test kills our processes with SIGKILL and starts them
// again, freezes them (some past their session timeout) and the Curator JVMs (within theirs), and,
// for the election, restarts servers of a 3-server ensemble. Every section goes into the shared
// log (section_log.hpp) and is checked afterwards.
//
// The short run is part of the suite. ZKR_CHURN_LONG=1 selects the long run's scale (22 election
// contenders, 18 lock holders; 10 minutes unless ZKR_CHURN_SECONDS says otherwise); the ctest
// entries interop_churn_long_* run it when configured with -DZKR_SOAK_LONG=ON. Results:
// docs/RELIABILITY.md.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/lock.hpp>
#include <zkr/rwlock.hpp>

#include "../core/test_support.hpp"
#include "section_log.hpp"

namespace zkr::test {
namespace {

bool long_run() {
  const char* value = std::getenv("ZKR_CHURN_LONG");
  return value && std::string_view(value) == "1";
}

std::chrono::seconds churn_duration(std::chrono::seconds short_run) {
  if (const char* value = std::getenv("ZKR_CHURN_SECONDS"); value && *value) return std::chrono::seconds(std::atoi(value));
  return long_run() ? std::chrono::seconds(600) : short_run;
}

// Sleeps `hold`, or less if `stop` is requested first.
void hold_for(std::chrono::milliseconds hold, std::stop_token stop) {
  std::mutex mutex;
  std::condition_variable_any never;
  std::unique_lock lock(mutex);
  never.wait_for(lock, stop, hold, [] { return false; });
}

// One of our participants in a process of its own; `incarnation` counts its restarts.
struct PeerProcess {
  std::string role;  // select, latch, read, write
  std::string base;  // the name without the incarnation
  int incarnation = 0;
  std::unique_ptr<testenv::Process> process;
  std::string who() const { return fmt::format("{}.{}", base, incarnation); }
};

// A Curator JVM of several clients; `names` are the participants it logs as.
struct CuratorProcess {
  std::unique_ptr<testenv::Process> process;
  std::vector<std::string> names;
  int retries = 0;  // errors its clients met and went on from (RETRY lines)
};

struct FaultCounts {
  int kills = 0;
  int freezes_past_session = 0;
  int freezes_within_session = 0;
  int curator_freezes = 0;
  int server_restarts = 0;
};

class InteropChurnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ZKR_CURATOR_AVAILABLE) GTEST_SKIP() << "javac, java or the Curator jars are missing";
  }

  // Run the fault schedule, then stop everybody; participants are stopped (and, failing that,
  // killed) by the Process destructors on every path.
  SectionLog log;
  std::string path = testenv::unique_path();
  std::vector<PeerProcess> peers;
  std::vector<CuratorProcess> curators;
  FaultCounts faults;
  std::mt19937 random{20261201};

  void start_peer(PeerProcess& peer, const std::string& servers, int session_ms, int hold_ms) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    peer.process = std::make_unique<testenv::Process>(
        std::vector<std::string>{ZKR_RECIPE_PEER, peer.role, servers, path, std::to_string(session_ms), peer.who(),
                                 log.file(), std::to_string(hold_ms)},
        options);
  }

  void start_curator(const std::string& servers, const std::string& mode, const std::string& who, int clients,
                     int hold_ms) {
    testenv::Process::Options options;
    options.pipe_stdin = true;
    options.merge_stderr = true;
    CuratorProcess curator;
    // Short JIT and a small heap: two cores are shared, and JVM start is slow. setpriv makes the
    // JVM die with the test, even while frozen (a test killed by its timeout cannot thaw it).
    curator.process = std::make_unique<testenv::Process>(
        std::vector<std::string>{"setpriv", "--pdeathsig", "KILL", ZKR_JAVA, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx128m", "-cp",
                                 ZKR_CURATOR_CLASSPATH, "CuratorPeer", servers, path, mode, who, log.file(), "0",
                                 std::to_string(hold_ms), std::to_string(clients)},
        options);
    for (int i = 0; i < clients; ++i)
      curator.names.push_back(mode == "rw" ? fmt::format("{}-{}{}", who, i % 2 == 0 ? "w" : "r", i)
                                           : fmt::format("{}-{}", who, i));
    curators.push_back(std::move(curator));
  }

  void await_curators_ready() {
    for (auto& curator : curators) {
      auto line = curator.process->read_line(testenv::scaled(30s));
      while (line && *line != "READY" && !line->starts_with("ERROR")) line = curator.process->read_line(testenv::scaled(30s));
      ASSERT_TRUE(line) << "a Curator peer did not start";
      ASSERT_EQ(*line, "READY") << *line;
    }
    for (auto& curator : curators) curator.process->write_stdin("GO\n");
  }

  // Reads what the Curator JVMs printed so far (their pipes must not fill up).
  void drain_curators() {
    for (auto& curator : curators)
      while (auto line = curator.process->read_line(1ms))
        if (line->starts_with("RETRY")) ++curator.retries;
  }

  void kill_and_restart(PeerProcess& peer, const std::string& servers, int session_ms, int hold_ms) {
    EXPECT_TRUE(peer.process->running()) << peer.who() << " ended by itself";
    peer.process->signal(SIGKILL);
    ASSERT_TRUE(peer.process->wait(testenv::scaled(10s)));
    log.record("KILLED", peer.who());  // after its death: its open section ends no earlier
    ++faults.kills;
    ++peer.incarnation;
    start_peer(peer, servers, session_ms, hold_ms);
  }

  void freeze_peer(PeerProcess& peer, std::chrono::milliseconds length, bool outlives_session) {
    EXPECT_TRUE(peer.process->running()) << peer.who() << " ended by itself";
    log.record("FROZEN", peer.who(), outlives_session ? "1" : "0");
    peer.process->freeze();
    std::this_thread::sleep_for(length);
    peer.process->thaw();
    log.record("THAWED", peer.who());
    ++(outlives_session ? faults.freezes_past_session : faults.freezes_within_session);
  }

  // Within the JVM's session timeout (10 s): its clients keep their sessions.
  void freeze_curator(CuratorProcess& curator, std::chrono::milliseconds length) {
    for (const auto& name : curator.names) log.record("FROZEN", name, "0");
    curator.process->freeze();
    std::this_thread::sleep_for(length);
    curator.process->thaw();
    for (const auto& name : curator.names) log.record("THAWED", name);
    ++faults.curator_freezes;
  }

  // Stops every process: a line to the Curator JVMs, the end of stdin to ours. One that does not
  // stop is a failure and is killed.
  void stop_processes() {
    for (auto& curator : curators) curator.process->write_stdin("STOP\n");
    for (auto& peer : peers) peer.process->close_stdin();
    for (auto& peer : peers) {
      const auto status = peer.process->wait(testenv::scaled(15s));
      EXPECT_EQ(status, std::optional<int>(0)) << peer.who() << " did not stop cleanly";
      if (!status) {
        peer.process->signal(SIGKILL);
        peer.process->wait(testenv::scaled(10s));
        log.record("KILLED", peer.who());
      }
    }
    for (auto& curator : curators) {
      std::string output;
      auto line = curator.process->read_line(testenv::scaled(60s));
      while (line && *line != "DONE" && !line->starts_with("ERROR")) {
        if (line->starts_with("RETRY")) ++curator.retries;
        else output += *line + "\n";
        line = curator.process->read_line(testenv::scaled(60s));
      }
      EXPECT_TRUE(line && *line == "DONE") << "a Curator peer did not stop; it said:\n"
                                           << output << (line ? *line : std::string("(nothing)"));
      EXPECT_EQ(curator.process->wait(testenv::scaled(20s)), std::optional<int>(0));
    }
  }

  int curator_retries() const {
    int sum = 0;
    for (const auto& curator : curators) sum += curator.retries;
    return sum;
  }

  std::chrono::milliseconds between_faults() {
    return std::chrono::milliseconds(std::uniform_int_distribution<int>(1000, 2500)(random));
  }
};

// ---- the checker itself, on written logs ----

SectionRecord read_lines(const std::string& lines) {
  SectionLog log;
  std::ofstream(log.file()) << lines;
  return read_sections(log.file());
}

TEST(SectionLogChecker, AnOverlapIsFencedOnlyWhenTheLowerTokensHolderWasFrozenPastItsSession) {
  // a (token 10) is frozen past its session while leading; b (token 20) leads meanwhile.
  const std::string frozen_leader = "ENTER a 50 10\nFROZEN a 60 1\nENTER b 70 20\nEXIT b 80\nTHAWED a 90\nEXIT a 95\n";
  auto fenced = classify_overlaps(read_lines(frozen_leader), everyone_excludes);
  EXPECT_EQ(fenced.fenced, 1);
  EXPECT_TRUE(fenced.unfenced.empty());
  // The same overlap with a freeze within the session, without a freeze, or with the frozen
  // holder's token the larger: two leaders.
  for (const std::string& lines : {
           std::string("ENTER a 50 10\nFROZEN a 60 0\nENTER b 70 20\nEXIT b 80\nTHAWED a 90\nEXIT a 95\n"),
           std::string("ENTER a 50 10\nENTER b 70 20\nEXIT b 80\nEXIT a 95\n"),
           std::string("ENTER a 50 30\nFROZEN a 60 1\nENTER b 70 20\nEXIT b 80\nTHAWED a 90\nEXIT a 95\n"),
           std::string("ENTER a 50\nFROZEN a 60 1\nENTER b 70\nEXIT b 80\nTHAWED a 90\nEXIT a 95\n")}) {
    auto count = classify_overlaps(read_lines(lines), everyone_excludes);
    EXPECT_EQ(count.fenced, 0) << lines;
    EXPECT_EQ(count.unfenced.size(), 1u) << lines;
  }
}

TEST(SectionLogChecker, AFreezeBetweenTheGrantAndTheEnterLineCounts) {
  // a was granted (token 5), frozen past its session before it could log ENTER; b led meanwhile.
  const std::string lines = "FROZEN a 10 1\nENTER b 50 9\nTHAWED a 100\nENTER a 120 5\nEXIT a 130\nEXIT b 150\n";
  auto count = classify_overlaps(read_lines(lines), everyone_excludes, std::chrono::nanoseconds(50));
  EXPECT_EQ(count.fenced, 1);
  EXPECT_TRUE(count.unfenced.empty());
  // A freeze long before the ENTER (beyond the slack) explains nothing.
  count = classify_overlaps(read_lines(lines), everyone_excludes, std::chrono::nanoseconds(10));
  EXPECT_EQ(count.fenced, 0);
  EXPECT_EQ(count.unfenced.size(), 1u);
}

TEST(SectionLogChecker, AKillEndsTheOpenSection) {
  auto record = read_lines("ENTER a 10 1\nKILLED a 20\nENTER b 30 2\nEXIT b 40\nKILLED b 50\n");
  ASSERT_EQ(record.sections.size(), 2u);
  EXPECT_TRUE(record.sections[0].killed);
  EXPECT_EQ(record.sections[0].exit, 20);
  EXPECT_FALSE(record.sections[1].killed);  // a kill after the EXIT ends nothing
  EXPECT_TRUE(overlaps(record.sections, everyone_excludes).empty());
}

// ---- election: LeaderSelectors and LeaderLatches of ours, Curator LeaderSelectors ----

// No two terms overlap unless the fencing token orders them (the lower token's holder was frozen
// past its session: the server rightly ended its term while it could not know). Terms are counted.
TEST_F(InteropChurnTest, ElectionMixedWithCuratorUnderKillsFreezesAndServerRestartsHasOneLeader) {
  const bool at_scale = long_run();
  const auto duration = churn_duration(40s);
  const int in_process_selectors = 2, in_process_latches = at_scale ? 2 : 1;
  const int peer_pairs = at_scale ? 6 : 2;  // each one LeaderSelector and one LeaderLatch process
  const int curator_jvms = at_scale ? 2 : 1, curator_clients = 3;
  constexpr int kHoldMs = 30;
  // A brief freeze stays clear of the session timeout even after the longest quiet spell before
  // it (a third of the timeout between pings); a long one outlives it.
  constexpr int kPeerSessionMs = 3000;
  constexpr auto kBriefFreeze = 1000ms, kLongFreeze = 4500ms, kCuratorFreeze = 2000ms;
  const auto server_restart_every = at_scale ? 30s : 15s;

  testenv::Cluster cluster({.servers = 3, .tick_ms = 100, .sync_limit = 5});
  const std::string servers = cluster.connect_string();
  for (int j = 0; j < curator_jvms; ++j)
    start_curator(servers, "leader", j == 0 ? "curator" : fmt::format("curator{}", j), curator_clients, kHoldMs);
  for (int p = 0; p < peer_pairs; ++p) {
    peers.push_back({"select", fmt::format("ours-ps{}", 2 * p), 0, nullptr});
    peers.push_back({"latch", fmt::format("ours-pl{}", 2 * p + 1), 0, nullptr});
  }
  for (auto& peer : peers) start_peer(peer, servers, kPeerSessionMs, kHoldMs);
  await_curators_ready();
  if (HasFatalFailure()) return;

  // In-process participants, each with a session of its own.
  std::vector<std::unique_ptr<Session>> sessions;
  std::vector<std::unique_ptr<LeaderSelector>> selectors;
  for (int i = 0; i < in_process_selectors; ++i) {
    sessions.push_back(std::make_unique<Session>(session_options(servers, 4000ms)));
    const std::string who = fmt::format("ours-s{}", i);
    SelectorOptions options;
    options.participant_data = who;
    selectors.push_back(std::make_unique<LeaderSelector>(
        *sessions.back(), path,
        [this, who, hold = std::chrono::milliseconds(kHoldMs)](const Leadership& term) {
          log.record("ENTER", who, std::to_string(term.token().value()));
          hold_for(hold, term.ended_token());
          log.record("EXIT", who);
        },
        options));
    selectors.back()->start();
  }
  std::atomic<int> latch_errors{0};
  std::vector<std::jthread> latches;
  for (int i = 0; i < in_process_latches; ++i) {
    sessions.push_back(std::make_unique<Session>(session_options(servers, 4000ms)));
    latches.emplace_back([&, session = sessions.back().get(), who = fmt::format("ours-l{}", i)](std::stop_token stop) {
      try {
        // Beside the selectors: the latch writes their node names.
        LeaderLatch latch(*session, path, {.participant_data = who, .layout = ElectionLayout::curator_lock});
        latch.start();
        while (!stop.stop_requested()) {
          auto term = latch.wait_for_leadership(100ms, stop);
          if (!term) continue;
          log.record("ENTER", who, std::to_string(term->token().value()));
          hold_for(std::chrono::milliseconds(kHoldMs), term->ended_token());
          log.record("EXIT", who);
          latch.resign();
        }
      } catch (const std::exception& e) {
        ++latch_errors;
        std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
      }
    });
  }
  auto stop_in_process = [&] {
    for (auto& latch : latches) latch.request_stop();
    latches.clear();  // joins
    for (auto& selector : selectors) selector->close();
    for (auto& session : sessions) session->close();
  };

  // The fault schedule. The current leader is a favoured target: an observer session looks.
  Session observer(session_options(servers, 4000ms));
  auto leader_peer = [&]() -> PeerProcess* {
    try {
      auto leader = election_leader(observer, path);
      if (!leader) return nullptr;
      for (auto& peer : peers)
        if (peer.who() == leader->data) return &peer;
    } catch (const std::exception&) {
      // a server restarting under the observer: pick at random
    }
    return nullptr;
  };
  const auto started = std::chrono::steady_clock::now();
  const auto end = started + duration;
  auto next_server_restart = started + server_restart_every;
  int next_server = 0;
  int fault = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(between_faults());
    drain_curators();
    if (std::chrono::steady_clock::now() >= next_server_restart) {
      cluster.kill(next_server);
      std::this_thread::sleep_for(1s);
      cluster.start(next_server);  // waits until it serves
      next_server = (next_server + 1) % cluster.size();
      ++faults.server_restarts;
      next_server_restart = std::chrono::steady_clock::now() + server_restart_every;
      continue;
    }
    PeerProcess* target = std::uniform_int_distribution<int>(0, 1)(random) ? leader_peer() : nullptr;
    if (!target) target = &peers[std::uniform_int_distribution<std::size_t>(0, peers.size() - 1)(random)];
    switch (fault++ % 4) {
      case 0: kill_and_restart(*target, servers, kPeerSessionMs, kHoldMs); break;
      case 1: freeze_peer(*target, kBriefFreeze, false); break;
      case 2: freeze_peer(*target, kLongFreeze, true); break;
      case 3: freeze_curator(curators[std::uniform_int_distribution<std::size_t>(0, curators.size() - 1)(random)],
                             kCuratorFreeze); break;
    }
    if (HasFatalFailure()) break;
  }
  const auto churned = std::chrono::steady_clock::now() - started;
  stop_in_process();
  stop_processes();
  EXPECT_EQ(latch_errors.load(), 0);

  const SectionRecord record = read_sections(log.file());
  const OverlapCount overlapping = classify_overlaps(record, everyone_excludes);
  int ours = 0, theirs = 0, killed = 0;
  for (const auto& term : record.sections) {
    ++(term.who.starts_with("ours") ? ours : theirs);
    killed += term.killed ? 1 : 0;
  }
  const int contenders = in_process_selectors + in_process_latches + 2 * peer_pairs + curator_jvms * curator_clients;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(churned).count();
  RecordProperty("contenders", contenders);
  RecordProperty("terms", static_cast<int>(record.sections.size()));
  RecordProperty("terms_ours", ours);
  RecordProperty("terms_curator", theirs);
  RecordProperty("double_leaders", static_cast<int>(overlapping.unfenced.size()));
  RecordProperty("fenced_overlaps", overlapping.fenced);
  RecordProperty("kills", faults.kills);
  RecordProperty("terms_ended_by_a_kill", killed);
  RecordProperty("freezes_past_session", faults.freezes_past_session);
  RecordProperty("freezes_within_session", faults.freezes_within_session);
  RecordProperty("curator_freezes", faults.curator_freezes);
  RecordProperty("server_restarts", faults.server_restarts);
  RecordProperty("seconds", static_cast<int>(seconds));
  std::printf("election churn: %d contenders, %zu terms (%d ours, %d Curator's), %zu double leaders, "
              "%d overlaps ordered by token (holder frozen past its session), %d kills (%d terms ended by a kill), "
              "%d freezes past the session, %d within, %d Curator JVM freezes, %d server restarts, "
              "%d Curator client errors retried, %lld s\n",
              contenders, record.sections.size(), ours, theirs, overlapping.unfenced.size(), overlapping.fenced,
              faults.kills, killed, faults.freezes_past_session, faults.freezes_within_session,
              faults.curator_freezes, faults.server_restarts, curator_retries(), static_cast<long long>(seconds));

  EXPECT_TRUE(overlapping.unfenced.empty())
      << overlapping.unfenced.size() << " double leaders, first: " << overlapping.unfenced.front();
  EXPECT_GT(ours, 0);
  EXPECT_GT(theirs, 0) << "Curator never led";
  EXPECT_GE(record.sections.size(), 100u) << "the churn barely moved";
  EXPECT_GE(faults.server_restarts, 1);
  RawClient raw(servers);
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }, testenv::scaled(20s))) << "nodes left behind";
}

// ---- read/write lock: our read and write locks, Curator's InterProcessReadWriteLock ----

// No writer's section overlaps any other holder's. Every freeze here is within the holder's
// session, so no overlap is excused. Sections are counted.
TEST_F(InteropChurnTest, ReadWriteLockMixedWithCuratorUnderKillsAndFreezesExcludesWriters) {
  const bool at_scale = long_run();
  const auto duration = churn_duration(35s);
  const int in_process_writers = at_scale ? 2 : 1, in_process_readers = 2;
  const int peer_pairs = at_scale ? 4 : 2;  // each one writer and one reader process
  const int curator_clients = at_scale ? 6 : 4;  // alternately writing and reading
  constexpr int kHoldMs = 20;
  // Freezes stay clear of the session timeouts even after the longest quiet spell before them (a
  // third of the timeout between pings): no session expires, so no overlap is excused.
  constexpr int kPeerSessionMs = 4000;
  constexpr auto kPeerFreeze = 1500ms, kCuratorFreeze = 2000ms;

  const std::string servers = testenv::shared_server();
  start_curator(servers, "rw", "curator", curator_clients, kHoldMs);
  for (int p = 0; p < peer_pairs; ++p) {
    peers.push_back({"write", fmt::format("ours-wp{}", 2 * p), 0, nullptr});
    peers.push_back({"read", fmt::format("ours-rp{}", 2 * p + 1), 0, nullptr});
  }
  for (auto& peer : peers) start_peer(peer, servers, kPeerSessionMs, kHoldMs);
  await_curators_ready();
  if (HasFatalFailure()) return;

  std::vector<std::unique_ptr<Session>> sessions;
  std::atomic<int> timeouts{0};
  std::vector<std::jthread> holders;
  for (int i = 0; i < in_process_writers + in_process_readers; ++i) {
    const bool writer = i < in_process_writers;
    sessions.push_back(std::make_unique<Session>(session_options(servers, 4000ms)));
    holders.emplace_back([&, writer, session = sessions.back().get(),
                          who = fmt::format("ours-{}{}", writer ? "w" : "r", i)](std::stop_token stop) {
      ReadWriteLock lock(*session, path);
      Lock& side = writer ? lock.write_lock() : lock.read_lock();
      while (!stop.stop_requested()) {
        std::error_code ec;
        auto held = side.try_acquire_for(testenv::scaled(30s), stop, ec);
        if (!held) {
          if (!stop.stop_requested()) ++timeouts;
          continue;
        }
        log.record("ENTER", who, std::to_string(held->token().value()));
        hold_for(std::chrono::milliseconds(kHoldMs), held->lost_token());
        log.record("EXIT", who);
        held->release();
      }
    });
  }

  const auto started = std::chrono::steady_clock::now();
  const auto end = started + duration;
  int fault = 0;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(between_faults());
    drain_curators();
    PeerProcess& target = peers[std::uniform_int_distribution<std::size_t>(0, peers.size() - 1)(random)];
    switch (fault++ % 3) {
      case 0: kill_and_restart(target, servers, kPeerSessionMs, kHoldMs); break;
      case 1: freeze_peer(target, kPeerFreeze, false); break;
      case 2: freeze_curator(curators.front(), kCuratorFreeze); break;
    }
    if (HasFatalFailure()) break;
  }
  const auto churned = std::chrono::steady_clock::now() - started;
  for (auto& holder : holders) holder.request_stop();
  holders.clear();
  for (auto& session : sessions) session->close();
  stop_processes();
  EXPECT_EQ(timeouts.load(), 0) << "an in-process holder waited 30 s";

  const SectionRecord record = read_sections(log.file());
  auto is_writer = [](const Section& s) { return s.who.find("-w") != std::string::npos; };
  auto bad = overlaps(record.sections, [&](const Section& a, const Section& b) { return is_writer(a) || is_writer(b); });
  const auto shared = overlapping_pairs(record.sections, [&](const Section& a, const Section& b) {
    return !is_writer(a) && !is_writer(b) && a.who.starts_with("ours") != b.who.starts_with("ours");
  });
  int writes = 0, reads = 0, ours = 0, theirs = 0, ours_writes = 0, theirs_writes = 0, killed = 0;
  for (const auto& section : record.sections) {
    const bool mine = section.who.starts_with("ours");
    ++(mine ? ours : theirs);
    if (is_writer(section)) {
      ++writes;
      ++(mine ? ours_writes : theirs_writes);
    } else {
      ++reads;
    }
    killed += section.killed ? 1 : 0;
  }
  const int holders_count = in_process_writers + in_process_readers + 2 * peer_pairs + curator_clients;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(churned).count();
  RecordProperty("holders", holders_count);
  RecordProperty("sections", static_cast<int>(record.sections.size()));
  RecordProperty("write_sections", writes);
  RecordProperty("read_sections", reads);
  RecordProperty("sections_ours", ours);
  RecordProperty("sections_curator", theirs);
  RecordProperty("overlaps", static_cast<int>(bad.size()));
  RecordProperty("read_pairs_shared_across_libraries", static_cast<int>(shared.size()));
  RecordProperty("kills", faults.kills);
  RecordProperty("sections_ended_by_a_kill", killed);
  RecordProperty("freezes", faults.freezes_within_session);
  RecordProperty("curator_freezes", faults.curator_freezes);
  RecordProperty("seconds", static_cast<int>(seconds));
  std::printf("rwlock churn: %d holders, %zu sections (%d writes, %d reads; %d ours, %d Curator's), %zu overlaps "
              "with a writer, %zu pairs of read sections shared across the libraries, %d kills (%d sections ended by a kill), "
              "%d freezes, %d Curator JVM freezes, %d Curator client errors retried, %lld s\n",
              holders_count, record.sections.size(), writes, reads, ours, theirs, bad.size(), shared.size(),
              faults.kills, killed, faults.freezes_within_session, faults.curator_freezes, curator_retries(),
              static_cast<long long>(seconds));

  EXPECT_TRUE(bad.empty()) << bad.size() << " overlaps with a writer, first: " << bad.front();
  EXPECT_GT(ours_writes, 0);
  EXPECT_GT(theirs_writes, 0) << "Curator never wrote";
  EXPECT_GT(ours - ours_writes, 0);
  EXPECT_GT(theirs - theirs_writes, 0) << "Curator never read";
  EXPECT_GE(record.sections.size(), 100u) << "the churn barely moved";
  RawClient raw(servers);
  EXPECT_TRUE(eventually([&] { return raw.children(path).empty(); }, testenv::scaled(20s))) << "nodes left behind";
}

}  // namespace
}  // namespace zkr::test
