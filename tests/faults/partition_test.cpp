// SPDX-License-Identifier: Apache-2.0
// The lock's central promise under real partitions: a holder is told "lost" before anyone else is
// granted its lock, whatever the shape of the partition. Servers and clients run in network
// namespaces of their own (testenv::NetLab) and nft rules cut the links between them, so that a
// follower cut off from the leader keeps answering its clients, as it does on a real network.
//
// In each shape a holder process (zkr_test_holder) talks to one follower only, and a waiter
// process to the other servers. The lead time is the waiter's grant minus the moment the holder
// was told; it must be positive, and at least the session's safety margin less scheduling slack.
// Skipped, with the reason, where namespaces cannot be made.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "netlab.hpp"
#include "testenv.hpp"

namespace zkr::testenv {
namespace {

using namespace std::chrono_literals;

// The time stamp that ends every timed line of zkr_test_holder ("LOST session lost <t>").
long long time_of(const std::string& line) {
  const auto space = line.rfind(' ');
  if (space == std::string::npos) throw std::runtime_error("no time stamp in: " + line);
  return std::stoll(line.substr(space + 1));
}

struct Shape {
  std::string name;
  std::function<void(NetLab&, int follower, int client)> cut;
};

struct Measured {
  long long lost_ns = 0;     // holder told (CLOCK_MONOTONIC)
  long long granted_ns = 0;  // waiter granted
  long long fault_ns = 0;    // fault applied
  int writes_after_grant = 0;
  std::string reason;
  double lead_ms() const { return (granted_ns - lost_ns) / 1e6; }
  double told_after_fault_ms() const { return (lost_ns - fault_ns) / 1e6; }
  double granted_after_fault_ms() const { return (granted_ns - fault_ns) / 1e6; }
};

long long monotonic_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec;
}

class PartitionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = NetLab::unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  }

  // Where the holder and the waiter connect: the holder to one follower, the waiter to the others.
  struct Placement {
    int follower = -1;
    std::string others;  // connect string
  };
  static Placement place(const NetLab& lab) {
    const int leader = lab.leader();
    EXPECT_GE(leader, 0) << "no leader";
    Placement placement{leader == 0 ? 1 : 0, {}};
    for (int i = 0; i < lab.servers(); ++i)
      if (i != placement.follower)
        placement.others += (placement.others.empty() ? "" : ",") + lab.server_address(i);
    return placement;
  }

  // Runs one shape: the holder on `follower` (client c0), the waiter on the other servers (c1).
  Measured run(NetLab& lab, const Shape& shape, int session_ms, std::chrono::milliseconds wait_bound) {
    const auto [follower, others] = place(lab);
    const std::string path = unique_path(shape.name);
    const std::string tick = std::to_string(lab.options().tick_ms);
    Process::Options options;
    options.pipe_stdin = true;
    auto holder = lab.spawn(0, {ZKR_TEST_HOLDER, lab.server_address(follower), path, std::to_string(session_ms), tick},
                            options);
    EXPECT_TRUE(holder->wait_for_line("ACQUIRED", scaled(60s)));
    auto waiter = lab.spawn(1, {ZKR_TEST_HOLDER, others, path, std::to_string(session_ms), tick}, options);
    EXPECT_TRUE(waiter->wait_for_line("SESSION", scaled(60s)));
    std::this_thread::sleep_for(1s);  // the waiter queues behind the holder

    Measured measured;
    measured.fault_ns = monotonic_now_ns();
    shape.cut(lab, follower, 0);
    std::optional<std::string> granted = waiter->wait_for_line("ACQUIRED", scaled(wait_bound));
    EXPECT_TRUE(granted) << shape.name << ": the waiter was never granted";
    if (granted) measured.granted_ns = time_of(*granted);
    // Everything the holder said until it was told.
    for (int i = 0; i < 100000; ++i) {
      auto line = holder->read_line(scaled(30s));
      if (!line) break;
      if (line->starts_with("WRITE") && measured.granted_ns && time_of(*line) >= measured.granted_ns)
        ++measured.writes_after_grant;
      if (line->starts_with("LOST")) {
        measured.reason = line->substr(5, line->rfind(' ') - 5);
        measured.lost_ns = time_of(*line);
        break;
      }
    }
    EXPECT_NE(measured.lost_ns, 0) << shape.name << ": the holder was never told";
    lab.heal();
    holder->close_stdin();
    waiter->close_stdin();
    holder->wait(scaled(10s));
    waiter->wait(scaled(10s));
    const std::string report = fmt::format(
        "{} ({}): fault at 0, holder told {:.0f} ms ({}), waiter granted {:.0f} ms, lead {:.0f} ms, "
        "holder writes after the grant {}",
        shape.name, lab.describe(), measured.told_after_fault_ms(), measured.reason,
        measured.granted_after_fault_ms(), measured.lead_ms(), measured.writes_after_grant);
    std::cout << report << std::endl;
    RecordProperty(shape.name, report);
    return measured;
  }

  // The lead must be positive, and at least the safety margin less scheduling slack.
  static void expect_lead(const Measured& measured, std::chrono::milliseconds margin) {
    ASSERT_NE(measured.lost_ns, 0);
    ASSERT_NE(measured.granted_ns, 0);
    EXPECT_LT(measured.lost_ns, measured.granted_ns) << "the waiter was granted before the holder was told";
    EXPECT_GE(measured.lead_ms(), margin.count() / 2.0) << "lead time below half the safety margin";
    EXPECT_EQ(measured.writes_after_grant, 0);
  }
};

const Shape kFollowerIsolated{"follower-isolated",
                              [](NetLab& lab, int follower, int) { lab.isolate_from_servers(follower); }};
const Shape kClientCut{"client-cut", [](NetLab& lab, int follower, int client) {
                         lab.cut(fmt::format("c{}", client), fmt::format("s{}", follower));
                       }};
const Shape kRepliesDropped{"replies-dropped", [](NetLab& lab, int follower, int client) {
                              lab.drop(fmt::format("s{}", follower), fmt::format("c{}", client));
                            }};
const Shape kRequestsDropped{"requests-dropped", [](NetLab& lab, int follower, int client) {
                               lab.drop(fmt::format("c{}", client), fmt::format("s{}", follower));
                             }};
const Shape kServerFrozen{"server-frozen", [](NetLab& lab, int follower, int) { lab.freeze_server(follower); }};

// Fast settings: tickTime 200 ms, syncLimit 5 (an isolated follower serves for a second).
class FastPartitionTest : public PartitionTest {
 protected:
  static constexpr int kSessionMs = 3000;
  // The default margin (a quarter) fits: tick 200 ms leaves room for it.
  static constexpr auto kMargin = std::chrono::milliseconds(kSessionMs / 4);
  static NetLabOptions options() { return {.servers = 3, .clients = 2, .tick_ms = 200, .sync_limit = 5}; }
};

TEST_F(FastPartitionTest, FollowerIsolatedFromTheEnsemble) {
  NetLab lab(options());
  expect_lead(run(lab, kFollowerIsolated, kSessionMs, 30s), kMargin);
}

TEST_F(FastPartitionTest, HolderCutFromItsServer) {
  NetLab lab(options());
  expect_lead(run(lab, kClientCut, kSessionMs, 30s), kMargin);
}

TEST_F(FastPartitionTest, RequestsToTheServerDropped) {
  NetLab lab(options());
  expect_lead(run(lab, kRequestsDropped, kSessionMs, 30s), kMargin);
}

// The server keeps hearing the holder: it never expires the session. The holder, hearing nothing,
// is told at its deadline; the waiter is granted once the lost session is closed (the holder lets
// go, or the server would have expired it by then).
TEST_F(FastPartitionTest, RepliesFromTheServerDropped) {
  NetLab lab(options());
  expect_lead(run(lab, kRepliesDropped, kSessionMs, 30s), kMargin);
}

TEST_F(FastPartitionTest, HoldersServerFrozen) {
  NetLab lab(options());
  const auto measured = run(lab, kServerFrozen, kSessionMs, 30s);
  expect_lead(measured, kMargin);
}

// Debian's zoo.cfg (tickTime 2000, syncLimit 5): an isolated follower answers for 10 s while the
// leader stopped hearing of the session at once. A 10 s session, the library's default.
TEST_F(PartitionTest, FollowerIsolatedWithDebianDefaults) {
  NetLab lab(NetLabOptions::debian_defaults());
  constexpr int kSessionMs = 10000;
  expect_lead(run(lab, kFollowerIsolated, kSessionMs, 60s), std::chrono::milliseconds(kSessionMs / 4));
}

// zklock on a partitioned holder: told of the loss, it stops its job, which winds down for two
// seconds (a TERM trap that keeps writing). The link heals meanwhile, so a close of the lost session
// would reach the server and hand the lock over at once. The next zklock's job must start only after
// the first job's last write.
#ifdef ZKLOCK_BINARY
TEST_F(FastPartitionTest, ZklocksJobStopsBeforeTheNextJobStartsEvenIfTheLinkHealsMeanwhile) {
  NetLab lab(options());
  const auto [follower, others] = place(lab);
  ASSERT_FALSE(HasFailure()) << "no leader";
  const std::string path = unique_path("zklock-heal");
  const auto work = std::filesystem::temp_directory_path() / path.substr(path.rfind('/') + 1);
  std::filesystem::create_directories(work);
  const std::string first_log = (work / "first.log").string(), second_log = (work / "second.log").string();
  const std::string tick = fmt::format("{:g}", lab.options().tick_ms / 1000.0);
  Process::Options options;
  options.merge_stderr = true;
  options.new_process_group = true;
  auto first = lab.spawn(
      0,
      {ZKLOCK_BINARY, "--zk", lab.server_address(follower), "--tick-time", tick, "--session-timeout", "6",
       "--kill-after", "2.5", path, "bash", "-c",
       fmt::format("trap 'end=$(($(date +%s)+2)); while [ $(date +%s) -lt $end ]; do date +%s%N >> {0}; sleep 0.05; "
                   "done; exit 0' TERM; echo started; while :; do date +%s%N >> {0}; sleep 0.05; done",
                   first_log)},
      options);
  ASSERT_TRUE(first->wait_for_line("started", scaled(60s)));
  auto second = lab.spawn(1,
                          {ZKLOCK_BINARY, "--zk", others, "--tick-time", tick, "--session-timeout", "6",
                           "--kill-after", "1", path, "bash", "-c", fmt::format("date +%s%N > {}", second_log)},
                          options);
  std::this_thread::sleep_for(1s);  // the second zklock queues

  lab.cut("c0", fmt::format("s{}", follower));
  ASSERT_TRUE(first->wait_for_line("zklock: lost the lock", scaled(30s)));
  std::this_thread::sleep_for(500ms);
  lab.heal();  // the job is still winding down
  const auto first_status = first->wait(scaled(30s));
  ASSERT_TRUE(first_status);
  EXPECT_EQ(*first_status, 75);
  const auto second_status = second->wait(scaled(30s));
  ASSERT_TRUE(second_status);
  EXPECT_EQ(*second_status, 0);

  const long long last_write = last_stamp(first_log), second_start = last_stamp(second_log);
  std::filesystem::remove_all(work);
  ASSERT_NE(last_write, 0);
  ASSERT_NE(second_start, 0);
  const double lead_ms = (second_start - last_write) / 1e6;
  std::cout << fmt::format("zklock, link healed while its job stopped: next job started {:.0f} ms after the "
                           "first job's last write",
                           lead_ms)
            << std::endl;
  EXPECT_GT(second_start, last_write) << "the next job started while the first one still wrote";
}

// The campaign's one overlap: zklock itself stopped (SIGSTOP) while its keeper and its job run on.
// zklock's monitor cannot act; the keeper's own deadline, renewed by zklock with each proof of the
// session, passes, and the keeper stops the job at the monitor's deadline: the job is gone before
// the server expires the session, so the next zklock's job starts after the first job's last write.
TEST_F(FastPartitionTest, PausedZklockAloneItsKeeperStopsTheJobBeforeTheNextJobStarts) {
  NetLab lab(options());
  const auto [follower, others] = place(lab);
  ASSERT_FALSE(HasFailure()) << "no leader";
  const std::string path = unique_path("zklock-paused");
  TempDir work;
  const auto first_log = work.file("first.log"), second_log = work.file("second.log");
  const std::string tick = fmt::format("{:g}", lab.options().tick_ms / 1000.0);
  Process::Options options;
  options.merge_stderr = true;
  options.new_process_group = true;  // zklock's own group: the keeper and the job have groups of their own
  auto first = lab.spawn(0,
                         {ZKLOCK_BINARY, "-v", "--zk", lab.server_address(follower), "--tick-time", tick,
                          "--session-timeout", "3", "--kill-after", "0.5", path, "bash", "-c",
                          fmt::format("echo started; while :; do date +%s%N >> {}; sleep 0.02; done", first_log.string())},
                         options);
  const auto connected = first->wait_for_line("zklock: connected", scaled(60s));
  ASSERT_TRUE(connected);
  ASSERT_TRUE(first->wait_for_line("started", scaled(60s)));
  auto second = lab.spawn(1,
                          {ZKLOCK_BINARY, "--zk", others, "--tick-time", tick, "--session-timeout", "3",
                           "--kill-after", "0.5", "-w", "60", path, "bash", "-c",
                           fmt::format("date +%s%N > {}", second_log.string())},
                          options);
  std::this_thread::sleep_for(1s);  // the second zklock queues

  const long long paused_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count();
  first->freeze();
  const auto second_status = second->wait(scaled(60s));
  ASSERT_TRUE(second_status);
  EXPECT_EQ(*second_status, 0);
  const long long last_write = last_stamp(first_log), second_start = last_stamp(second_log);
  first->thaw();
  const auto first_status = first->wait(scaled(30s));
  const std::string first_output = first->read_all(scaled(5s));
  ASSERT_NE(last_write, 0);
  ASSERT_NE(second_start, 0);
  std::cout << fmt::format("zklock paused alone ({}): its job's last write {:.0f} ms into the pause, the next "
                           "job started {:.0f} ms after that",
                           connected->substr(connected->find("negotiated")), (last_write - paused_ns) / 1e6,
                           (second_start - last_write) / 1e6)
            << std::endl;
  EXPECT_GT(second_start, last_write) << "the next job started while the paused zklock's job still wrote";
  // The keeper acts at the monitor's deadline, at most T - lead time (3 s - 1.5 s) into the pause,
  // and the job dies of the kill signal at once.
  EXPECT_LT(last_write - paused_ns, 2'000'000'000LL) << "the job ran on past the monitor's deadline";
  ASSERT_TRUE(first_status);
  EXPECT_EQ(*first_status, 75) << first_output;
  EXPECT_NE(first_output.find("its keeper stopped the job"), std::string::npos) << first_output;
}
#endif

// One server of a healthy ensemble goes silent for its clients (its host lost power, a cable is
// cut: packets vanish, nothing is refused) while the other two serve on, with Debian's timings and
// the defaults of zklock (20 s session) and of the library (10 s). The C client would leave the silent
// server only after 2/3 of the session timeout, later than the monitor tolerates silence: each
// session must move to a healthy server in time, so that no holder is told "lost" and no job is
// stopped, whether its server is the leader or a follower; waiters cut off the same way are granted
// once the lock is released. A fresh session must not wait for the silent server longer than its
// share of the connect timeout.
class SilentServerTest : public PartitionTest {
 protected:
  // The server that client `client`'s one ZooKeeper connection is on (from the servers' `cons`).
  static int server_of(const NetLab& lab, int client) {
    const std::string needle = "/" + lab.host_address(fmt::format("c{}", client)) + ":";
    for (int attempt = 0; attempt < 20; ++attempt) {
      for (int i = 0; i < lab.servers(); ++i)
        if (lab.four_letter(i, "cons").find(needle) != std::string::npos) return i;
      std::this_thread::sleep_for(100ms);
    }
    return -1;
  }
};

#ifdef ZKLOCK_BINARY
TEST_F(SilentServerTest, OneSilentServerStopsNoJobAndLosesNoLock) {
  NetLab lab(NetLabOptions::debian_defaults(3, 5));
  const int leader = lab.leader();
  ASSERT_GE(leader, 0) << "no leader";
  TempDir work;
  const auto done_file = work.file("done");
  const std::string servers = lab.connect_string();
  const std::string zklock_path = unique_path("silent-zklock"), library_path = unique_path("silent-library");

  // c0: zklock with its defaults, its job running until the test says so.
  Process::Options zklock_options;
  zklock_options.merge_stderr = true;
  zklock_options.new_process_group = true;
  auto zklock = lab.spawn(0,
                          {ZKLOCK_BINARY, "-v", "--zk", servers, zklock_path, "bash", "-c",
                           fmt::format("echo started; for i in $(seq 1200); do [ -e {} ] && exit 0; sleep 0.1; done; "
                                       "exit 3",
                                       done_file.string())},
                          zklock_options);
  ASSERT_TRUE(zklock->wait_for_line("started", scaled(60s)));
  const int zklock_server = server_of(lab, 0);
  ASSERT_GE(zklock_server, 0);

  // c1: a library holder with the library's defaults (10 s session), on the other kind of server
  // (leader or follower) than zklock: a new holder until it lands there.
  Process::Options holder_options;
  holder_options.pipe_stdin = true;
  std::unique_ptr<Process> holder;
  int holder_server = -1;
  for (int attempt = 0; attempt < 30; ++attempt) {
    holder = lab.spawn(1, {ZKR_TEST_HOLDER, servers, library_path, "10000", "2000"}, holder_options);
    ASSERT_TRUE(holder->wait_for_line("ACQUIRED", scaled(60s)));
    holder_server = server_of(lab, 1);
    if ((holder_server == leader) != (zklock_server == leader)) break;
    holder->close_stdin();
    holder->wait(scaled(10s));
    holder.reset();
    holder_server = -1;
  }
  ASSERT_GE(holder_server, 0) << "no holder landed on the other kind of server than zklock's";

  // c2, c3: a waiter behind each (library defaults).
  auto zklock_waiter = lab.spawn(2, {ZKR_TEST_HOLDER, servers, zklock_path, "10000", "2000"}, holder_options);
  auto library_waiter = lab.spawn(3, {ZKR_TEST_HOLDER, servers, library_path, "10000", "2000"}, holder_options);
  ASSERT_TRUE(zklock_waiter->wait_for_line("SESSION", scaled(60s)));
  ASSERT_TRUE(library_waiter->wait_for_line("SESSION", scaled(60s)));
  const int zklock_waiter_server = server_of(lab, 2), library_waiter_server = server_of(lab, 3);
  ASSERT_GE(zklock_waiter_server, 0);
  ASSERT_GE(library_waiter_server, 0);
  std::cout << fmt::format("leader s{}; zklock on s{}, library holder on s{}, waiters on s{} and s{} ({})", leader,
                           zklock_server, holder_server, zklock_waiter_server, library_waiter_server, lab.describe())
            << std::endl;

  // Each client's own server goes silent for it (each cut takes the lab a moment: zklock's first).
  const auto cut_at = std::chrono::steady_clock::now();
  lab.cut("c0", fmt::format("s{}", zklock_server));
  lab.cut("c1", fmt::format("s{}", holder_server));
  lab.cut("c2", fmt::format("s{}", zklock_waiter_server));
  lab.cut("c3", fmt::format("s{}", library_waiter_server));

  // Past zklock's tolerated silence (12 s) and the C client's own move (13.3 s), with room.
  const auto early_exit = zklock->wait(std::chrono::duration_cast<std::chrono::milliseconds>(
      cut_at + 17s - std::chrono::steady_clock::now()));
  EXPECT_FALSE(early_exit) << "zklock stopped its job " << std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count()
                           << " s after the cut (exit " << early_exit.value_or(-1) << "): " << zklock->read_all(1s);
  // Everything the holder said until now.
  const long long checked_ns = monotonic_now_ns();
  for (int i = 0; i < 100000; ++i) {
    const auto line = holder->read_line(scaled(5s));
    ASSERT_TRUE(line) << "the library holder went quiet";
    EXPECT_FALSE(line->starts_with("LOST")) << "the library holder was told: " << *line;
    if (line->starts_with("LOST") || (line->starts_with("WRITE") && time_of(*line) >= checked_ns)) break;
  }

  // Fresh sessions from c0, which still cannot reach zklock's server: the C client tries servers in
  // a random order, so most likely some try the silent one first. None waits for it longer than its
  // share of the connect timeout (15 s over 3 servers), where the C client would give it 2/3 of the
  // session timeout (13.3 s of zklock's 20 s).
  Process::Options session_options;
  session_options.pipe_stdin = true;
  std::vector<std::unique_ptr<Process>> fresh;
  const auto fresh_started = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i)
    fresh.push_back(lab.spawn(0, {ZKR_TEST_SESSION, servers, "20000", "2000", "15000"}, session_options));
  std::string connect_times;
  for (auto& session : fresh) {
    const auto line = session->read_line(scaled(20s));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - fresh_started).count();
    ASSERT_TRUE(line);
    EXPECT_TRUE(line->starts_with("STATE connected")) << *line;
    EXPECT_LT(seconds, 9.0) << "a fresh session waited for the silent server: " << *line;
    connect_times += fmt::format("{}{:.1f} s", connect_times.empty() ? "" : ", ", seconds);
  }
  std::cout << "fresh sessions beside the silent server connected after " << connect_times << std::endl;

  // The locks are still held, and pass on to the waiters when released.
  std::ofstream(done_file) << "done\n";
  const auto zklock_status = zklock->wait(scaled(30s));
  ASSERT_TRUE(zklock_status);
  EXPECT_EQ(*zklock_status, 0) << zklock->read_all(1s);
  EXPECT_TRUE(zklock_waiter->wait_for_line("ACQUIRED", scaled(30s))) << "zklock's waiter was never granted";
  holder->close_stdin();
  EXPECT_TRUE(library_waiter->wait_for_line("ACQUIRED", scaled(30s))) << "the library holder's waiter was never granted";
  lab.heal();
  for (auto* process : {holder.get(), zklock_waiter.get(), library_waiter.get()}) process->close_stdin();
  for (auto& session : fresh) session->close_stdin();
}
#endif

// A follower cut off from the rest of the ensemble while its clients still reach it answers reads
// (and pings) from its own copy for syncLimit ticks (10 s with Debian's timings) before it drops
// them, but nothing it forwards reaches the leader. A holder that keeps reading hears its server
// all along, yet nothing through the leader: its connection is never quiet. The library's
// defaults (a 10 s session tolerates 5 s of silence): the session moves to a server of the rest in
// time and keeps its lock, and the waiter is granted once the holder releases.
TEST_F(SilentServerTest, AReadingHolderMovesOffAFollowerCutOffFromTheLeader) {
  NetLab lab(NetLabOptions::debian_defaults(3, 2));
  const int leader = lab.leader();
  ASSERT_GE(leader, 0) << "no leader";
  const std::string servers = lab.connect_string();
  const std::string path = unique_path("reading-holder");
  Process::Options holder_options;
  holder_options.pipe_stdin = true;
  holder_options.env = {{"ZKR_TEST_HOLDER_READS", "1"}};
  std::unique_ptr<Process> holder;
  int holder_server = -1;
  for (int attempt = 0; attempt < 30 && holder_server < 0; ++attempt) {
    holder = lab.spawn(0, {ZKR_TEST_HOLDER, servers, path, "10000", "2000"}, holder_options);
    ASSERT_TRUE(holder->wait_for_line("ACQUIRED", scaled(60s)));
    if (const int server = server_of(lab, 0); server >= 0 && server != leader) {
      holder_server = server;
      break;
    }
    holder->close_stdin();
    holder->wait(scaled(10s));
    holder.reset();
  }
  ASSERT_GE(holder_server, 0) << "the holder never landed on a follower";
  auto waiter = lab.spawn(1, {ZKR_TEST_HOLDER, servers, path, "10000", "2000"}, holder_options);
  ASSERT_TRUE(waiter->wait_for_line("SESSION", scaled(60s)));
  std::cout << fmt::format("leader s{}; the holder on s{}, the waiter on s{} ({})", leader, holder_server,
                           server_of(lab, 1), lab.describe())
            << std::endl;

  const auto cut_at = std::chrono::steady_clock::now();
  lab.isolate_from_servers(holder_server);
  // Past the tolerated silence (5 s) and the follower's own drop of its clients (10 s), with room.
  const auto until = cut_at + 16s;
  for (int i = 0; i < 100000 && std::chrono::steady_clock::now() < until; ++i) {
    const auto line = holder->read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(until - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms))));
    if (!line) break;
    ASSERT_FALSE(line->starts_with("LOST"))
        << "the holder was told " << *line << " "
        << std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count() << " s after the cut";
  }
  holder->close_stdin();
  EXPECT_TRUE(waiter->wait_for_line("ACQUIRED", scaled(30s))) << "the waiter was never granted";
  lab.heal();
  waiter->close_stdin();
  holder->wait(scaled(10s));
  waiter->wait(scaled(10s));
}

// Name resolution inside a lab host: `ip netns exec` shows /etc/netns/<namespace>/hosts and
// resolv.conf as /etc/hosts and /etc/resolv.conf, and the resolver reads them on every lookup.
// The resolv.conf points at a name server that is not there (in the host's own namespace), so a
// name missing from hosts fails at once and no query ever leaves the lab.
class LabResolver {
 public:
  LabResolver(const NetLab& lab, const std::string& host)
      : directory_(std::filesystem::path("/etc/netns") / lab.namespace_of(host)) {
    std::filesystem::create_directories(directory_);
    std::ofstream(directory_ / "resolv.conf") << "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n";
    set_hosts({});
  }
  ~LabResolver() {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
  }
  // Rewrites the hosts file in place (the bind mount keeps its inode).
  void set_hosts(const std::vector<std::pair<std::string, std::string>>& names) {
    std::ofstream hosts(directory_ / "hosts", std::ios::trunc);
    hosts << "127.0.0.1 localhost\n";
    for (const auto& [name, address] : names) hosts << address << " " << name << "\n";
  }

 private:
  std::filesystem::path directory_;
};

std::string address_only(const std::string& host_port) { return host_port.substr(0, host_port.rfind(':')); }

class NameResolutionTest : public PartitionTest {};

// A connect string whose name does not resolve fails at once, with the resolver's reason, instead
// of waiting out the connect timeout.
TEST_F(NameResolutionTest, AnUnresolvableNameFailsTheFirstConnectAtOnceWithTheReason) {
  NetLab lab({.servers = 1, .clients = 1, .tick_ms = 200, .sync_limit = 5});
  LabResolver resolver(lab, "c0");
  Process::Options options;
  options.pipe_stdin = true;
  auto session = lab.spawn(0, {ZKR_TEST_SESSION, "no-such-zk-host:2181", "2000", "200", "30000"}, options);
  const auto line = session->read_line(scaled(10s));
  ASSERT_TRUE(line) << "no answer within 10 s (the connect timeout is 30 s)";
  EXPECT_TRUE(line->starts_with(fmt::format("ERROR {} ", static_cast<int>(zkr::errc::unknown_host))))
      << *line;
  EXPECT_NE(line->find("no-such-zk-host"), std::string::npos) << *line;
  EXPECT_NE(line->find("cannot resolve"), std::string::npos) << *line;
}

// The session is lost during an outage in which its server's name does not resolve either. The
// replacement handle cannot be made then; it is tried again until the name is back.
TEST_F(NameResolutionTest, ALostSessionIsReplacedOnceItsNameResolvesAgain) {
  NetLab lab({.servers = 1, .clients = 1, .tick_ms = 200, .sync_limit = 5});
  LabResolver resolver(lab, "c0");
  const std::vector<std::pair<std::string, std::string>> names{{"zk-lab", address_only(lab.server_address(0))}};
  resolver.set_hosts(names);
  Process::Options options;
  options.pipe_stdin = true;
  auto session = lab.spawn(0, {ZKR_TEST_SESSION, "zk-lab:2181", "2000", "200", "30000"}, options);
  const auto first = session->wait_for_line("STATE connected", scaled(30s));
  ASSERT_TRUE(first) << "no first session";
  lab.isolate("c0");
  resolver.set_hosts({});  // the resolver goes down with the network
  ASSERT_TRUE(session->wait_for_line("STATE lost", scaled(15s)));
  lab.heal();
  std::this_thread::sleep_for(3s);  // replacement attempts fail: the name does not resolve
  resolver.set_hosts(names);
  const auto replaced = session->wait_for_line("STATE connected", scaled(20s));
  ASSERT_TRUE(replaced) << "the lost session was never replaced";
  EXPECT_NE(*replaced, *first);
}

// Connect strings as users write them: a host without a port means port 2181, as the docs and
// every `-z zk1,zk2,zk3/...` example say. The lab's servers listen on 2181 of their own address,
// so a port-less host is tested for real without clashing with anything on the machine.
class ConnectStringTest : public PartitionTest {};

// A session (zkr_test_session) in the lab must connect with `servers`.
void expect_connects(const NetLab& lab, const std::string& host, const std::string& servers) {
  Process::Options options;
  options.pipe_stdin = true;
  auto session = lab.spawn_on(host, {ZKR_TEST_SESSION, servers, "4000", "200", "20000"}, options);
  const auto line = session->read_line(scaled(25s));
  ASSERT_TRUE(line) << "no answer from a session to '" << servers << "'";
  EXPECT_TRUE(line->starts_with("STATE connected")) << "servers '" << servers << "': " << *line;
}

TEST_F(ConnectStringTest, AHostWithoutAPortConnectsOnPort2181) {
  NetLab lab({.servers = 1, .clients = 1, .tick_ms = 200, .sync_limit = 5});
  LabResolver resolver(lab, "c0");
  const std::string address = address_only(lab.server_address(0));
  resolver.set_hosts({{"zk-lab", address}});
  expect_connects(lab, "c0", address);
  expect_connects(lab, "c0", "zk-lab");
  expect_connects(lab, "c0", address + "/chroot-a");
  // A port-less entry beside one with a port: neither may spoil the other.
  expect_connects(lab, "c0", address + "," + lab.server_address(0));
  expect_connects(lab, "c0", lab.server_address(0) + ",zk-lab/chroot-b");
  // On the server's own host, as an operator's first try there: the loopback names.
  expect_connects(lab, "s0", "127.0.0.1");
  expect_connects(lab, "s0", "localhost");
  expect_connects(lab, "s0", "[::1]");
  expect_connects(lab, "s0", "[::1]:2181/");
}

// A server whose packets vanish on the way (no refusal, no answer) is named as such when the
// connect times out, and the timeout is kept.
TEST_F(ConnectStringTest, ASilentServerIsNamedWhenTheConnectTimesOut) {
  NetLab lab({.servers = 1, .clients = 1, .tick_ms = 200, .sync_limit = 5});
  lab.drop("c0", "s0");
  Process::Options options;
  options.pipe_stdin = true;
  const auto started = std::chrono::steady_clock::now();
  auto session = lab.spawn(0, {ZKR_TEST_SESSION, lab.server_address(0), "4000", "200", "2000"}, options);
  const auto line = session->read_line(scaled(10s));
  const auto elapsed = std::chrono::steady_clock::now() - started;
  ASSERT_TRUE(line);
  EXPECT_NE(line->find(lab.server_address(0) + " does not answer within 200 ms"), std::string::npos) << *line;
  EXPECT_LT(elapsed, scaled(2500ms));  // 2 s and the process's start in the lab
}

#ifdef ZKLOCK_BINARY
// The README's first zklock line, literally: `zklock -z HOST LOCKPATH COMMAND`.
TEST_F(ConnectStringTest, ZklockWithAPortlessHostRunsItsJob) {
  NetLab lab({.servers = 1, .clients = 1, .tick_ms = 200, .sync_limit = 5});
  const std::string address = address_only(lab.server_address(0));
  for (const std::string& servers : {address, address + "," + lab.server_address(0), std::string("localhost")}) {
    Process::Options options;
    options.merge_stderr = true;
    auto zklock = lab.spawn_on(servers == "localhost" ? "s0" : "c0",
                               {ZKLOCK_BINARY, "-z", servers, "--connect-timeout", "15", "--tick-time", "0.2",
                                "--session-timeout", "4", "--kill-after", "0.5", unique_path("portless"),
                                "echo", "ran under the lock"},
                               options);
    const auto line = zklock->read_line(scaled(20s));
    const auto status = zklock->wait(scaled(20s));
    ASSERT_TRUE(status) << servers;
    EXPECT_EQ(*status, 0) << "-z " << servers << ": " << line.value_or("(no output)");
    EXPECT_EQ(line.value_or(""), "ran under the lock") << "-z " << servers;
  }
}
#endif

}  // namespace
}  // namespace zkr::testenv
