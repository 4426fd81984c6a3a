// SPDX-License-Identifier: Apache-2.0
// Checks that the test environment itself does what the other tests rely on, against real servers.
#include <signal.h>
#include <zookeeper/zookeeper.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <iterator>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "postgres.hpp"
#include "testenv.hpp"

namespace zkr::testenv {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A bare C-client handle that records its session state, so these tests need nothing from the
// library under test.
class Client {
 public:
  explicit Client(const std::string& servers, int session_timeout_ms = 4000) {
    handle_ = zookeeper_init(servers.c_str(), &Client::watch, session_timeout_ms, nullptr, this, 0);
    if (!handle_) throw std::runtime_error("zookeeper_init failed");
  }
  ~Client() { zookeeper_close(handle_); }

  zhandle_t* handle() const { return handle_; }

  bool wait_state(int wanted, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, scaled(timeout), [&] { return state_ == wanted; });
  }
  // True once the handle has been in `wanted` at any time since the last clear_history().
  bool wait_seen(int wanted, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, scaled(timeout), [&] { return seen_.contains(wanted); });
  }
  void clear_history() {
    std::lock_guard lock(mutex_);
    seen_.clear();
  }

 private:
  static void watch(zhandle_t*, int type, int state, const char*, void* context) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<Client*>(context);
    std::lock_guard lock(self->mutex_);
    self->state_ = state;
    self->seen_.insert(state);
    self->changed_.notify_all();
  }

  zhandle_t* handle_ = nullptr;
  std::mutex mutex_;
  std::condition_variable changed_;
  int state_ = 0;
  std::set<int> seen_;
};

void create_parents(zhandle_t* handle, const std::string& path) {
  for (auto slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    int rc = zoo_create(handle, path.substr(0, slash).c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
                        nullptr, 0);
    ASSERT_TRUE(rc == ZOK || rc == ZNODEEXISTS) << zerror(rc);
  }
}

// Alive and not a zombie (an orphan may wait a while for its reaper).
bool alive(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text;
  if (!std::getline(stat, text)) return false;
  auto end_of_name = text.rfind(')');
  return end_of_name != std::string::npos && end_of_name + 2 < text.size() &&
         text[end_of_name + 2] != 'Z' && text[end_of_name + 2] != 'X';
}

std::string error_text(int rc) { return fmt::format("{} ({})", zerror(rc), rc); }

// ---------------------------------------------------------------------------------------------
// Cluster

TEST(Cluster, SingleServerServesClients) {
  Cluster cluster;
  ASSERT_EQ(cluster.size(), 1);
  EXPECT_EQ(cluster.leader(), 0);
  EXPECT_GT(cluster.pid(0), 0);
  EXPECT_EQ(cluster.connect_string(), cluster.server_address(0));

  Client client(cluster.connect_string());
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  EXPECT_EQ(zoo_create(client.handle(), "/selftest", nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0),
            ZOK);
}

TEST(Cluster, KillingTheLeaderOfThreeElectsAnother) {
  Cluster cluster({.servers = 3});
  ASSERT_EQ(cluster.size(), 3);
  ASSERT_TRUE(cluster.wait_for_leader(scaled(30s)));
  const int old_leader = cluster.leader();
  ASSERT_GE(old_leader, 0);

  cluster.kill(old_leader);
  EXPECT_EQ(cluster.pid(old_leader), 0);
  // A kill that finds nothing to kill is a mistake in the test, never a silent success.
  EXPECT_THROW(cluster.kill(old_leader), std::runtime_error);
  ASSERT_TRUE(cluster.wait_for_leader(scaled(30s)));
  const int new_leader = cluster.leader();
  EXPECT_GE(new_leader, 0);
  EXPECT_NE(new_leader, old_leader);

  cluster.start(old_leader);
  EXPECT_GT(cluster.pid(old_leader), 0);
}

TEST(Cluster, FreezeAndThawKeepTheProcess) {
  Cluster cluster;
  const pid_t pid = cluster.pid(0);
  cluster.freeze(0);
  EXPECT_EQ(cluster.leader(), -1);  // a stopped JVM answers nothing
  cluster.thaw(0);
  EXPECT_TRUE(cluster.wait_for_leader(scaled(10s)));
  EXPECT_EQ(cluster.pid(0), pid);
}

TEST(Cluster, FourLetterWordsAnswer) {
  Cluster cluster;
  EXPECT_NE(four_letter_word(cluster.server_address(0), "srvr").find("Mode: standalone"), std::string::npos);
  EXPECT_NE(four_letter_word(cluster.server_address(0), "ruok").find("imok"), std::string::npos);
  cluster.stop(0);
  EXPECT_EQ(four_letter_word(cluster.server_address(0), "srvr"), "");
  EXPECT_THROW(four_letter_word("localhost", "srvr"), std::invalid_argument);
}

TEST(Cluster, BadIndexIsRejected) {
  Cluster cluster;
  EXPECT_THROW(cluster.kill(1), std::out_of_range);
  EXPECT_THROW(cluster.freeze(-1), std::out_of_range);
}

TEST(Zkenv, RefusesToStartOverARunningCluster) {
  Cluster cluster;
  Process::Options options;
  options.merge_stderr = true;
  Process second({"/usr/bin/python3", source_dir() + "/testenv/zkenv.py", "start", "--servers", "1",
                  "--dir", cluster.state_dir().string()},
                 options);
  const std::string output = second.read_all(scaled(60s));
  EXPECT_EQ(second.wait(scaled(10s)), 1);
  EXPECT_NE(output.find("already has a running cluster"), std::string::npos) << output;
  EXPECT_EQ(cluster.leader(), 0);  // the running one is untouched
}

TEST(SharedServer, AnswersAndPathsAreUnique) {
  Client client(shared_server());
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  const std::string first = unique_path();
  const std::string second = unique_path("hint");
  EXPECT_NE(first, second);
  EXPECT_TRUE(first.starts_with("/zkr-test/SharedServer.AnswersAndPathsAreUnique-")) << first;
  EXPECT_NE(second.find("-hint-"), std::string::npos) << second;
  create_parents(client.handle(), first + "/x");
  EXPECT_EQ(zoo_exists(client.handle(), first.c_str(), 0, nullptr), ZOK);
}

// ---------------------------------------------------------------------------------------------
// Proxy

TEST(Proxy, PassForwardsBothWays) {
  Proxy proxy(shared_server());
  Client client(proxy.address());
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  EXPECT_EQ(proxy.connections(), 1);
  const std::string path = unique_path();
  create_parents(client.handle(), path);
  EXPECT_EQ(zoo_create(client.handle(), path.c_str(), "v", 1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0), ZOK);
  char value[8];
  int length = sizeof value;
  ASSERT_EQ(zoo_get(client.handle(), path.c_str(), 0, value, &length, nullptr), ZOK);
  EXPECT_EQ(std::string(value, static_cast<std::size_t>(length)), "v");
}

TEST(Proxy, BlackholeCutsTheLinkAndPassRestoresIt) {
  Proxy proxy(shared_server());
  // Long enough that the client notices the silence (after 2/3 of it) well before the server
  // would expire the session.
  Client client(proxy.address(), static_cast<int>(scaled(6000ms).count()));
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  const std::int64_t session = zoo_client_id(client.handle())->client_id;

  client.clear_history();
  proxy.blackhole();
  // No ping gets answered, so the client drops the connection and retries; the retry is accepted
  // and held.
  ASSERT_TRUE(client.wait_seen(ZOO_CONNECTING_STATE, 10s));
  EXPECT_GE(proxy.connections(), 1);

  proxy.pass();
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  EXPECT_EQ(zoo_client_id(client.handle())->client_id, session);
  EXPECT_EQ(zoo_exists(client.handle(), "/", 0, nullptr), ZOK);
}

TEST(Proxy, ResetDropsConnectionsButKeepsTheSession) {
  Proxy proxy(shared_server());
  Client client(proxy.address());
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  const std::int64_t session = zoo_client_id(client.handle())->client_id;

  client.clear_history();
  proxy.reset();
  ASSERT_TRUE(client.wait_seen(ZOO_CONNECTING_STATE, 10s));
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  EXPECT_EQ(zoo_client_id(client.handle())->client_id, session);
  EXPECT_EQ(proxy.connections(), 1);
}

TEST(Proxy, LatencyDelaysEachRoundTrip) {
  Proxy proxy(shared_server());
  Client client(proxy.address(), 10000);
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  proxy.set_latency(150ms);
  // A round trip crosses the proxy twice, so it cannot take less than twice the delay.
  const auto started = Clock::now();
  ASSERT_EQ(zoo_exists(client.handle(), "/", 0, nullptr), ZOK);
  EXPECT_GE(Clock::now() - started, 300ms);

  proxy.set_latency(0ms);
  EXPECT_EQ(zoo_exists(client.handle(), "/", 0, nullptr), ZOK);
}

struct CreateResult {
  std::mutex mutex;
  std::condition_variable done;
  std::optional<int> rc;
};

TEST(Proxy, DropNextReplyLosesTheReplyOfACreateThatHappened) {
  Proxy proxy(shared_server());
  Client client(proxy.address());
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  const std::string path = unique_path();
  create_parents(client.handle(), path);

  proxy.drop_next_reply();
  CreateResult result;
  int rc = zoo_acreate2(
      client.handle(), path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
      [](int completion_rc, const char*, const Stat*, const void* data) {
        auto* outcome = static_cast<CreateResult*>(const_cast<void*>(data));
        std::lock_guard lock(outcome->mutex);
        outcome->rc = completion_rc;
        outcome->done.notify_all();
      },
      &result);
  ASSERT_EQ(rc, ZOK) << error_text(rc);
  {
    std::unique_lock lock(result.mutex);
    ASSERT_TRUE(result.done.wait_for(lock, scaled(20s), [&] { return result.rc.has_value(); }));
    EXPECT_EQ(*result.rc, ZCONNECTIONLOSS) << error_text(*result.rc);
  }
  EXPECT_EQ(proxy.dropped_replies(), 1);

  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  EXPECT_EQ(zoo_exists(client.handle(), path.c_str(), 0, nullptr), ZOK);
  // Only the next matching request is affected.
  const std::string second = path + "-second";
  EXPECT_EQ(zoo_create(client.handle(), second.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0),
            ZOK);
  EXPECT_EQ(proxy.dropped_replies(), 1);
}

// The benchmarks weigh each client by these counts (bench/compare): a known sequence must come out
// exactly, by opcode, with the watches it set and the events they fired.
TEST(Proxy, TrafficCountsRequestsByTypeWatchesAndEvents) {
  Proxy proxy(shared_server());
  const std::string path = unique_path();
  {
    Client setup(shared_server());
    ASSERT_TRUE(setup.wait_state(ZOO_CONNECTED_STATE, 20s));
    create_parents(setup.handle(), path + "/node");
  }
  Client client(proxy.address(), 10000);
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  zhandle_t* handle = client.handle();
  const std::string node = path + "/node";
  ASSERT_EQ(zoo_create(handle, node.c_str(), "v", 1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0), ZOK);  // 1
  ASSERT_EQ(zoo_exists(handle, node.c_str(), 1, nullptr), ZOK);                                    // 3, watch
  char value[8];
  int length = sizeof value;
  ASSERT_EQ(zoo_get(handle, node.c_str(), 0, value, &length, nullptr), ZOK);                       // 4
  String_vector children{};
  ASSERT_EQ(zoo_get_children(handle, path.c_str(), 1, &children), ZOK);                            // 8, watch
  deallocate_String_vector(&children);
  Stat children_stat{};
  ASSERT_EQ(zoo_get_children2(handle, path.c_str(), 0, &children, &children_stat), ZOK);           // 12
  deallocate_String_vector(&children);
  std::promise<int> synced;
  ASSERT_EQ(zoo_async(handle, path.c_str(),
                      [](int rc, const char*, const void* data) {
                        static_cast<std::promise<int>*>(const_cast<void*>(data))->set_value(rc);
                      },
                      &synced),
            ZOK);                                                                                  // 9
  ASSERT_EQ(synced.get_future().get(), ZOK);
  zoo_op_t op;
  zoo_op_result_t result;
  Stat set_stat{};
  zoo_set_op_init(&op, node.c_str(), "w", 1, -1, &set_stat);
  ASSERT_EQ(zoo_multi(handle, 1, &op, &result), ZOK);                                              // 14
  ASSERT_EQ(zoo_delete(handle, node.c_str(), -1), ZOK);  // 2: fires the data watch and the child watch

  Proxy::Traffic traffic;
  for (int polls = 0; polls < 200; ++polls) {  // the events are pushed after the delete's reply
    traffic = proxy.traffic();
    if (traffic.notifications >= 2) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(traffic.sessions_created, 1u);
  EXPECT_EQ(traffic.sessions_resumed, 0u);
  EXPECT_EQ(traffic.watches_set, 2u);
  EXPECT_EQ(traffic.notifications, 2u);
  traffic.requests.erase(11);  // pings: however many the client's timer sent meanwhile
  const std::map<std::int32_t, std::uint64_t> expected{{1, 1}, {2, 1}, {3, 1}, {4, 1}, {8, 1},
                                                       {9, 1}, {12, 1}, {14, 1}};
  EXPECT_EQ(traffic.requests, expected);
  Client(shared_server()).wait_state(ZOO_CONNECTED_STATE, 20s);  // not through the proxy: not counted
  EXPECT_EQ(proxy.traffic().sessions_created, 1u);
}

TEST(Proxy, RejectsAnUpstreamThatIsNotAnAddress) {
  EXPECT_THROW(Proxy("no-port-here"), std::invalid_argument);
}

// ---------------------------------------------------------------------------------------------
// Process

TEST(Process, ReadsLinesAndExitCode) {
  Process process({"/bin/sh", "-c", "echo one; echo two; printf three; exit 3"});
  EXPECT_EQ(process.read_line(scaled(10s)), "one");
  EXPECT_EQ(process.read_line(scaled(10s)), "two");
  EXPECT_EQ(process.read_line(scaled(10s)), "three");
  EXPECT_EQ(process.read_line(scaled(10s)), std::nullopt);
  EXPECT_TRUE(process.at_end_of_output());
  EXPECT_EQ(process.wait(scaled(10s)), 3);
  EXPECT_FALSE(process.running());
}

TEST(Process, SignalDeathReadsAsShellStatus) {
  Process process({"sleep", "30"});
  EXPECT_TRUE(process.running());
  EXPECT_EQ(process.wait(50ms), std::nullopt);
  process.signal(SIGTERM);
  EXPECT_EQ(process.wait(scaled(10s)), 128 + SIGTERM);
}

TEST(Process, EnvironmentAndStdin) {
  Process::Options options;
  options.env["ZKR_SELFTEST_VALUE"] = "forty-two";
  options.pipe_stdin = true;
  Process process({"/bin/sh", "-c", "echo \"$ZKR_SELFTEST_VALUE\"; while read line; do echo \"got $line\"; done"},
                  options);
  EXPECT_EQ(process.read_line(scaled(10s)), "forty-two");
  process.write_stdin("hello\n");
  EXPECT_EQ(process.wait_for_line("got ", scaled(10s)), "got hello");
  process.close_stdin();
  EXPECT_EQ(process.wait(scaled(10s)), 0);
}

TEST(Process, FreezeStopsOutputUntilThaw) {
  Process::Options options;
  options.new_process_group = true;
  Process process({"/bin/sh", "-c", "i=0; while true; do i=$((i+1)); echo $i; sleep 0.05; done"}, options);
  ASSERT_TRUE(process.read_line(scaled(10s)));
  process.freeze();
  // Drain what was written before the stop took effect; then nothing more comes.
  while (process.read_line(300ms)) {
  }
  EXPECT_EQ(process.read_line(500ms), std::nullopt);
  EXPECT_TRUE(process.running());
  process.thaw();
  EXPECT_TRUE(process.read_line(scaled(10s)));
}

TEST(Process, MissingProgramThrows) {
  EXPECT_THROW(Process({"/nonexistent/zkr-no-such-program"}), std::runtime_error);
  EXPECT_THROW(Process({"zkr-no-such-program-in-path"}), std::runtime_error);
}

TEST(Process, DestructorKillsTheWholeGroup) {
  pid_t grandchild = 0;
  {
    Process::Options options;
    options.new_process_group = true;
    Process process({"/bin/sh", "-c", "sleep 60 & echo $!; wait"}, options);
    auto line = process.read_line(scaled(10s));
    ASSERT_TRUE(line);
    grandchild = std::stoi(*line);
    ASSERT_TRUE(alive(grandchild));
  }
  const auto deadline = Clock::now() + scaled(10s);
  while (alive(grandchild) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(alive(grandchild));
}

// ---------------------------------------------------------------------------------------------
// A recycled pid, and a test killed with SIGKILL: nothing of testenv's may be signalled by
// mistake or left behind.

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs a testenv script (or any python) to the end; its output, and a failure if it did not exit 0.
std::string run_python(std::vector<std::string> arguments) {
  arguments.insert(arguments.begin(), "/usr/bin/python3");
  Process::Options options;
  options.merge_stderr = true;
  Process process(arguments, options);
  std::string output = process.read_all(scaled(120s));
  EXPECT_EQ(process.wait(scaled(10s)), 0) << output;
  return output;
}

// True once `done()` holds, polled for at most `timeout`.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + scaled(timeout);
  while (!done()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(100ms);
  }
  return true;
}

// The watchdog owner.json names, checked by its command line.
pid_t recorded_watchdog(const std::filesystem::path& dir) {
  const std::string owner = read_text(dir / "owner.json");
  auto key = owner.find("\"watchdog_pid\": ");
  if (key == std::string::npos) {
    ADD_FAILURE() << "no watchdog recorded in " << (dir / "owner.json") << ": '" << owner << "'";
    return 0;
  }
  const pid_t watchdog = static_cast<pid_t>(std::stol(owner.substr(key + 16)));
  const std::string cmdline = read_text(fmt::format("/proc/{}/cmdline", watchdog));
  EXPECT_NE(cmdline.find("watchdog"), std::string::npos) << cmdline;
  return watchdog;
}

// The child entries: each holds something of testenv, says what, and waits to be killed.
TEST(KilledChild, DISABLED_HoldsACluster) {
  Cluster cluster;
  print_held("dir", cluster.state_dir().string());
  print_held("pid", std::to_string(cluster.pid(0)));
  print_held("ready", "");
  std::this_thread::sleep_for(120s);
}

TEST(KilledChild, DISABLED_HoldsAPostgresServer) {
  PostgresServer server;
  print_held("dir", server.state_dir().string());
  print_held("pid", std::to_string(server.pid()));
  print_held("ready", "");
  std::this_thread::sleep_for(120s);
}

// Kills the child that holds `test`'s environment; true once its processes and directory are gone.
void expect_nothing_left_behind(const HeldByChild& held) {
  held.process->signal(SIGKILL);
  held.process->wait(scaled(10s));
  for (const auto& dir : held.all("dir")) {
    EXPECT_TRUE(eventually([&] { return !std::filesystem::exists(dir); }, 30s)) << dir << " was left behind";
  }
  for (const auto& pid : held.all("pid")) {
    EXPECT_TRUE(eventually([&] { return !alive(std::stoi(pid)); }, 30s)) << "pid " << pid << " was left behind";
  }
}

TEST(KilledTest, ClusterLeavesNothingBehind) {
  expect_nothing_left_behind(hold_in_child("KilledChild.DISABLED_HoldsACluster", scaled(120s)));
}

TEST(KilledTest, PostgresLeavesNothingBehind) {
  if (auto reason = PostgresServer::unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  expect_nothing_left_behind(hold_in_child("KilledChild.DISABLED_HoldsAPostgresServer", scaled(120s)));
}

// Owner and watchdog both killed: the servers and the directory stay until the next start reaps them.
TEST(KilledTest, NextStartReapsADirectoryWhoseOwnerAndWatchdogAreGone) {
  auto held = hold_in_child("KilledChild.DISABLED_HoldsACluster", scaled(120s));
  const std::filesystem::path dir = held.all("dir").at(0);
  const pid_t server = std::stoi(held.all("pid").at(0));
  const pid_t watchdog = recorded_watchdog(dir);
  ASSERT_GT(watchdog, 0);
  ASSERT_EQ(::kill(watchdog, SIGKILL), 0);
  held.process->signal(SIGKILL);
  held.process->wait(scaled(10s));
  // Nothing of its own is left to remove it: only a reaper does, that of the next start here or
  // that of a test starting a server beside this one (ctest -j), which is the same code.
  Cluster next;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the next start left " << dir << " behind";
  EXPECT_TRUE(eventually([&] { return !alive(server); }, 30s)) << "server pid " << server << " was left behind";
}

// A pid recorded for a server that died may be reused by another process, even one whose command
// line looks the same: stop must leave that process alone.
TEST(Zkenv, StopSignalsOnlyTheProcessItStarted) {
  Cluster cluster;
  const pid_t server = cluster.pid(0);
  ASSERT_EQ(::kill(server, SIGKILL), 0);
  ASSERT_TRUE(eventually([&] { return !alive(server); }, 10s));
  const std::string cfg = (cluster.state_dir() / "server-0" / "zoo.cfg").string();
  Process lookalike({"/usr/bin/python3", "-c", "import time; time.sleep(60)", "zookeeper", cfg});
  // The record keeps whatever else it said of the dead server; only the pid is now another's.
  run_python({"-c",
              "import json, sys\n"
              "path = sys.argv[1] + '/state.json'\n"
              "state = json.load(open(path))\n"
              "state['servers'][0]['pid'] = int(sys.argv[2])\n"
              "json.dump(state, open(path, 'w'))\n",
              cluster.state_dir().string(), std::to_string(lookalike.pid())});
  run_python({source_dir() + "/testenv/zkenv.py", "stop", "--dir", cluster.state_dir().string()});
  EXPECT_TRUE(lookalike.running()) << "zkenv.py stop signalled a process it did not start";
}

// ---------------------------------------------------------------------------------------------
// Forced expiry

TEST(ExpireSession, OriginalHandleSeesExpiryWhenItReconnects) {
  Proxy proxy(shared_server());
  Client client(proxy.address(), 4000);
  ASSERT_TRUE(client.wait_state(ZOO_CONNECTED_STATE, 20s));
  const clientid_t id = *zoo_client_id(client.handle());

  proxy.blackhole();
  expire_session(shared_server(), id.client_id, std::string(id.passwd, sizeof id.passwd));
  proxy.pass();
  EXPECT_TRUE(client.wait_state(ZOO_EXPIRED_SESSION_STATE, 20s));
}

}  // namespace
}  // namespace zkr::testenv
