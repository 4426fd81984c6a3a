// SPDX-License-Identifier: Apache-2.0
// Checks that every NetLab fault really happens, with real kazoo clients in the client namespaces.
// Skipped, with the reason, where labs cannot be built (not root, no nft...).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "netlab.hpp"
#include "testenv.hpp"

namespace zkr::testenv {
namespace {

using namespace std::chrono_literals;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One request to a kazoo client (NetLab::kazoo_client) and its one-line reply.
std::string ask(Process& client, const std::string& request, std::chrono::milliseconds timeout = 10s) {
  client.write_stdin(request + "\n");
  return client.read_line(scaled(timeout)).value_or("(no reply from the client process)");
}

// Asks until the reply is `wanted`, at most `timeout`; returns the last reply.
std::string ask_until(Process& client, const std::string& request, const std::string& wanted,
                      std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + scaled(timeout);
  std::string reply;
  do {
    reply = ask(client, request);
    if (reply == wanted) break;
    std::this_thread::sleep_for(200ms);
  } while (Clock::now() < deadline);
  return reply;
}

bool lab_namespaces_exist(const std::string& lab) {
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ignored)) {
    if (entry.path().filename().string().starts_with(lab + "-")) return true;
  }
  return false;
}

class NetLabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = NetLab::unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  }

  std::unique_ptr<NetLab> make_lab(NetLabOptions options) {
    auto lab = std::make_unique<NetLab>(options);
    std::cout << lab->describe() << std::endl;
    return lab;
  }
};

using NetLabDebianDefaults = NetLabTest;

// (a) and (d): a cut link stops exactly that client's requests, and heal brings them back.
TEST_F(NetLabTest, CutStopsOneClientAloneAndHealRestoresIt) {
  auto lab = make_lab({});
  const int server = 0;
  const std::string target = fmt::format("s{}", server);
  auto c0 = lab->kazoo_client(0, lab->server_address(server));
  auto c1 = lab->kazoo_client(1, lab->server_address(server));
  ASSERT_EQ(ask(*c0, "create /netlab-cut before"), "ok /netlab-cut");
  ASSERT_EQ(ask(*c1, "get /netlab-cut"), "ok before");

  lab->cut("c0", target);
  EXPECT_THAT(ask(*c0, "get /netlab-cut"), StartsWith("error ")) << "c0's request crossed a cut link";
  EXPECT_EQ(ask(*c1, "get /netlab-cut"), "ok before") << "c1 should not be affected";
  {
    // A new connection from c0 cannot even be opened.
    Process::Options options;
    options.merge_stderr = true;
    auto fresh = lab->spawn(0, {"/usr/bin/python3", source_dir() + "/testenv/netlab_client.py",
                                lab->server_address(server), "--connect-timeout", "3"},
                            options);
    EXPECT_EQ(fresh->read_line(scaled(30s)).value_or(""), "error start timeout");
  }

  lab->heal();
  EXPECT_EQ(ask_until(*c0, "get /netlab-cut", "ok before", 20s), "ok before")
      << "c0 did not get its service back after heal";
}

// (b) drop() is one way: with replies dropped a create still happens; with requests dropped it
// does not.
TEST_F(NetLabTest, DropIsOneWay) {
  auto lab = make_lab({});
  const int server = 1;
  const std::string target = fmt::format("s{}", server);
  auto observer = lab->kazoo_client(1, lab->server_address(server));
  {
    auto c0 = lab->kazoo_client(0, lab->server_address(server));
    lab->drop(target, "c0");  // replies lost
    EXPECT_THAT(ask(*c0, "create /netlab-reply-lost"), StartsWith("error "));
    EXPECT_EQ(ask_until(*observer, "exists /netlab-reply-lost", "ok yes", 10s), "ok yes")
        << "the request should have reached the server";
    lab->heal();
  }
  {
    auto c0 = lab->kazoo_client(0, lab->server_address(server));
    lab->drop("c0", target);  // requests lost
    EXPECT_THAT(ask(*c0, "create /netlab-request-lost"), StartsWith("error "));
    // The create had its whole timeout to arrive; look twice more to be sure it did not.
    for (int look = 0; look < 3; ++look) {
      EXPECT_EQ(ask(*observer, "exists /netlab-request-lost"), "ok no")
          << "a request crossed a link dropped from c0 to " << target;
      std::this_thread::sleep_for(500ms);
    }
    // Killing c0 before heal keeps its retransmitted create from arriving afterwards.
    c0.reset();
    lab->heal();
  }
}

// isolate(host) cuts it from everyone; the rest of the ensemble keeps serving.
TEST_F(NetLabTest, IsolatedClientReachesNoServer) {
  auto lab = make_lab({});
  lab->isolate("c0");
  {
    // uncut() reopens exactly one link: c0 reaches s2 and nothing else.
    lab->uncut("c0", "s2");
    auto through_s2 = lab->kazoo_client(0, lab->server_address(2));
    EXPECT_EQ(ask(*through_s2, "exists /"), "ok yes");
    lab->cut("c0", "s2");
    EXPECT_THAT(ask(*through_s2, "exists /"), StartsWith("error "));
  }
  Process::Options options;
  options.merge_stderr = true;
  auto fresh = lab->spawn(0, {"/usr/bin/python3", source_dir() + "/testenv/netlab_client.py",
                              lab->connect_string(), "--connect-timeout", "4"},
                          options);
  EXPECT_EQ(fresh->read_line(scaled(30s)).value_or(""), "error start timeout");
  auto c1 = lab->kazoo_client(1, lab->connect_string());
  EXPECT_EQ(ask(*c1, "create /netlab-isolated-c0"), "ok /netlab-isolated-c0");
  lab->heal();
  auto c0 = lab->kazoo_client(0, lab->connect_string());
  EXPECT_EQ(ask(*c0, "exists /netlab-isolated-c0"), "ok yes");
}

// Fast settings (tickTime 200, syncLimit 2): the isolated follower gives up within a second or
// so, the others carry on, and heal brings it back.
TEST_F(NetLabTest, IsolatedFollowerStopsServingAndRejoinsAfterHeal) {
  auto lab = make_lab({});
  const int leader = lab->leader();
  ASSERT_GE(leader, 0);
  const int follower = (leader + 2) % lab->servers();
  ASSERT_EQ(lab->mode(follower), "follower");
  auto c0 = lab->kazoo_client(0, lab->server_address(follower), 10, 1);
  auto c1 = lab->kazoo_client(1, lab->server_address(leader), 10, 2);
  ASSERT_EQ(ask(*c1, "create /netlab-fast"), "ok /netlab-fast");

  lab->isolate_from_servers(follower);
  const auto isolated = Clock::now();
  const auto deadline = isolated + scaled(15s);
  while (lab->mode(follower) == "follower" && Clock::now() < deadline) std::this_thread::sleep_for(100ms);
  EXPECT_NE(lab->mode(follower), "follower") << "the isolated follower still follows";
  const double stopped_s = seconds_since(isolated);
  EXPECT_NE(ask(*c0, "exists /netlab-fast"), "ok yes") << "the isolated follower still serves reads";
  EXPECT_EQ(ask(*c1, "create /netlab-fast/during"), "ok /netlab-fast/during");

  lab->heal();
  const auto healed = Clock::now();
  EXPECT_EQ(ask_until(*c0, "exists /netlab-fast/during", "ok yes", 60s), "ok yes");
  std::cout << fmt::format("follower s{} stopped following {:.1f} s after isolation, served again {:.1f} s "
                           "after heal",
                           follower, stopped_s, seconds_since(healed))
            << std::endl;
  EXPECT_EQ(lab->mode(follower), "follower");
}

// (c) Debian's timing: a follower cut off from the other servers keeps answering its own clients'
// reads for about syncLimit x tickTime (10 s), while the leader's side carries on without it.
TEST_F(NetLabDebianDefaults, IsolatedFollowerServesReadsUntilSyncLimit) {
  auto lab = make_lab(NetLabOptions::debian_defaults());
  const int leader = lab->leader();
  ASSERT_GE(leader, 0);
  const int follower = (leader + 1) % lab->servers();
  ASSERT_EQ(lab->mode(follower), "follower");
  const double sync_window_s = lab->options().sync_limit * lab->options().tick_ms / 1000.0;

  // c0 knows only the follower; c1 only the leader. Sessions long enough to outlive the window.
  auto c0 = lab->kazoo_client(0, lab->server_address(follower), 30, 1.5);
  auto c1 = lab->kazoo_client(1, lab->server_address(leader), 30, 2);
  ASSERT_EQ(ask(*c1, "create /netlab-follower before"), "ok /netlab-follower");
  ASSERT_EQ(ask_until(*c0, "get /netlab-follower", "ok before", 10s), "ok before");

  lab->isolate_from_servers(follower);
  const auto isolated = Clock::now();

  // The leader's side still has a quorum: writes go through.
  EXPECT_EQ(ask(*c1, "create /netlab-follower/after"), "ok /netlab-follower/after");
  EXPECT_EQ(ask(*c1, "sync /netlab-follower"), "ok");

  // Read through the follower until it stops answering (bounded: three windows and some). Two
  // failed rounds in a row count as stopped, so that one slow reply on a busy machine does not.
  double last_answer_s = -1;
  std::optional<double> stopped_s;
  std::optional<double> first_failure_s;
  std::string failure;
  const auto give_up = isolated + scaled(std::chrono::milliseconds(
                                      static_cast<long>(3 * sync_window_s * 1000) + 15000));
  while (Clock::now() < give_up) {
    const double asked_s = seconds_since(isolated);
    std::string exists = ask(*c0, "exists /netlab-follower");
    std::string get = ask(*c0, "get /netlab-follower");
    if (exists == "ok yes" && get == "ok before") {
      last_answer_s = seconds_since(isolated);
      first_failure_s.reset();
      // Answered from the follower's own, now stale, copy: the write made since is not there.
      std::string stale = ask(*c0, "exists /netlab-follower/after");
      if (stale.starts_with("ok")) {
        EXPECT_EQ(stale, "ok no") << "the isolated follower saw a write made after its isolation";
      }
    } else if (!first_failure_s) {
      first_failure_s = asked_s;
    } else {
      stopped_s = first_failure_s;
      failure = exists + " / " + get;
      break;
    }
    std::this_thread::sleep_for(250ms);
  }
  std::cout << fmt::format("follower s{} answered reads until {:.1f} s after isolation, refused from {} "
                           "(syncLimit x tickTime = {:.1f} s; last replies: {})",
                           follower, last_answer_s, stopped_s ? fmt::format("{:.1f} s", *stopped_s) : "never",
                           sync_window_s, failure)
            << std::endl;
  // It kept serving for a good part of the window: 4 s is well below Debian's 10 s.
  EXPECT_GE(last_answer_s, 4.0) << "the isolated follower stopped serving reads too early";
  ASSERT_TRUE(stopped_s.has_value()) << "the isolated follower never stopped serving";
  EXPECT_GE(*stopped_s, 0.5 * sync_window_s);
  // The follower's own view agrees: it no longer reports itself a follower.
  const auto mode_deadline = Clock::now() + scaled(10s);
  while (lab->mode(follower) == "follower" && Clock::now() < mode_deadline) std::this_thread::sleep_for(200ms);
  EXPECT_NE(lab->mode(follower), "follower");
  // The leader kept its role throughout.
  EXPECT_EQ(lab->mode(leader), "leader");

  // (d) heal: the follower rejoins and serves its client again, the new node included.
  lab->heal();
  EXPECT_EQ(ask_until(*c0, "exists /netlab-follower/after", "ok yes", 90s), "ok yes")
      << "the follower did not serve again after heal";
}

// What the root namespace shows of its network: links, addresses, routes, nft rules.
std::string root_network_snapshot() {
  Process::Options options;
  options.merge_stderr = true;
  Process show({"/bin/sh", "-c",
                "ip -o link show | sed 's/^[0-9]*: //' | cut -d' ' -f1 | sort; ip -o addr show | "
                "awk '{print $2, $4}' | sort; ip route show table all | sort; nft list ruleset"},
               options);
  std::string text = show.read_all(scaled(30s));
  show.wait(5s);
  return text;
}

// A lab and its faults live in their own namespaces only: the root namespace never changes.
TEST_F(NetLabTest, RootNamespaceStaysUntouched) {
  const std::string before = root_network_snapshot();
  {
    auto lab = make_lab({.servers = 1, .clients = 2});
    lab->isolate("c0");
    lab->drop("c1", "s0");
    EXPECT_EQ(root_network_snapshot(), before) << "building the lab or a fault changed the root namespace";
    EXPECT_EQ(before.find(lab->host_address("s0")), std::string::npos);
  }
  EXPECT_EQ(root_network_snapshot(), before);
}

// A single-server lab, process faults and four-letter words; nothing is left behind.
TEST_F(NetLabTest, SingleServerLabAndServerFaultsLeaveNothingBehind) {
  std::string lab_name;
  {
    auto lab = make_lab({.servers = 1, .clients = 1});
    lab_name = lab->name();
    EXPECT_EQ(lab->namespace_of("s0"), lab_name + "-s0");
    EXPECT_TRUE(lab_namespaces_exist(lab_name));
    EXPECT_EQ(lab->leader(), 0);
    EXPECT_EQ(lab->mode(0), "standalone");
    EXPECT_NE(lab->four_letter(0, "ruok").find("imok"), std::string::npos);

    lab->freeze_server(0);
    EXPECT_EQ(lab->four_letter(0, "srvr", 500ms), "") << "a frozen server answered";
    lab->thaw_server(0);
    EXPECT_EQ(lab->mode(0), "standalone");

    lab->kill_server(0);
    EXPECT_EQ(lab->mode(0), "");
    lab->start_server(0);
    EXPECT_EQ(lab->mode(0), "standalone");
    auto c0 = lab->kazoo_client(0, lab->connect_string());
    EXPECT_EQ(ask(*c0, "create /netlab-single"), "ok /netlab-single");
    EXPECT_EQ(ask(*c0, "create /netlab-single/b"), "ok /netlab-single/b");
    EXPECT_EQ(ask(*c0, "create /netlab-single/a"), "ok /netlab-single/a");
    EXPECT_EQ(ask(*c0, "set /netlab-single/a new"), "ok");
    EXPECT_EQ(ask(*c0, "get /netlab-single/a"), "ok new");
    EXPECT_EQ(ask(*c0, "children /netlab-single"), "ok a,b");
    EXPECT_EQ(ask(*c0, "delete /netlab-single/b"), "ok");
    EXPECT_EQ(ask(*c0, "get /netlab-single/b"), "error NoNodeError");
    EXPECT_THAT(ask(*c0, "session"), StartsWith("ok 0x"));

    EXPECT_THROW(lab->cut("c0", "s1"), std::invalid_argument);
    EXPECT_THROW(lab->drop("c0", "c0"), std::runtime_error);
    EXPECT_THROW(lab->kill_server(1), std::out_of_range);
  }
  EXPECT_FALSE(lab_namespaces_exist(lab_name)) << "namespaces of " << lab_name << " survived the lab";
  EXPECT_FALSE(std::filesystem::exists("/run/zkr-netlab/" + lab_name + ".json"));
}

// Starts a one-server lab owned by `owner_pid` through netlab.py directly; returns its name.
std::string start_owned_lab(pid_t owner_pid, const std::string& dir) {
  Process::Options options;
  options.merge_stderr = true;
  Process start({"/usr/bin/python3", source_dir() + "/testenv/netlab.py", "start", "--servers", "1", "--clients",
                 "0", "--owner-pid", std::to_string(owner_pid), "--dir", dir},
                options);
  std::string summary = start.read_all(scaled(120s));
  if (start.wait(5s) != 0 || !summary.starts_with("lab ")) {
    throw std::runtime_error("netlab.py start failed: " + summary);
  }
  return summary.substr(4, summary.find('\n') - 4);
}

// The watchdog removes a lab whose owner died without cleaning up.
TEST_F(NetLabTest, WatchdogRemovesTheLabOfADeadOwner) {
  Process owner({"/bin/sleep", "120"});
  // Not named zkr-*: the reaper of another test's start must not race this test's watchdog.
  const std::string dir = fmt::format("/tmp/netlab-watchdog-test-{}", ::getpid());
  const std::string lab_name = start_owned_lab(owner.pid(), dir);
  ASSERT_TRUE(lab_namespaces_exist(lab_name));

  owner.signal(SIGKILL);
  owner.wait(5s);
  // The watchdog removes the namespaces, then the lab's registry entry: wait for both.
  const std::string registry_entry = "/run/zkr-netlab/" + lab_name + ".json";
  const auto deadline = Clock::now() + scaled(30s);
  while ((lab_namespaces_exist(lab_name) || std::filesystem::exists(registry_entry)) && Clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(lab_namespaces_exist(lab_name)) << "the watchdog left " << lab_name << " behind";
  EXPECT_FALSE(std::filesystem::exists(registry_entry));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// With its watchdog gone too, a dead owner's lab is removed by `netlab.py gc`, and only then.
TEST_F(NetLabTest, GcRemovesALabWhoseOwnerAndWatchdogAreGone) {
  Process owner({"/bin/sleep", "120"});
  // Not named zkr-*: the reaper of another test's start would remove the lab before gc does.
  const std::string dir = fmt::format("/tmp/netlab-gc-test-{}", ::getpid());
  const std::string lab_name = start_owned_lab(owner.pid(), dir);

  // The watchdog is the one owner.json names; make sure of its command line before killing it.
  std::ifstream state_file(dir + "/owner.json");
  std::string state((std::istreambuf_iterator<char>(state_file)), std::istreambuf_iterator<char>());
  auto key = state.find("\"watchdog_pid\": ");
  ASSERT_NE(key, std::string::npos) << state;
  const pid_t watchdog = static_cast<pid_t>(std::stol(state.substr(key + 16)));
  std::ifstream cmdline_file(fmt::format("/proc/{}/cmdline", watchdog));
  std::string cmdline((std::istreambuf_iterator<char>(cmdline_file)), std::istreambuf_iterator<char>());
  ASSERT_NE(cmdline.find("watchdog"), std::string::npos) << cmdline;
  ASSERT_NE(cmdline.find(dir), std::string::npos) << cmdline;
  ASSERT_EQ(::kill(watchdog, SIGKILL), 0);

  // gc leaves the lab alone while its owner lives.
  auto gc = [] {
    Process::Options options;
    options.merge_stderr = true;
    Process run({"/usr/bin/python3", source_dir() + "/testenv/netlab.py", "gc"}, options);
    std::string output = run.read_all(scaled(60s));
    EXPECT_EQ(run.wait(5s), 0) << output;
    return output;
  };
  gc();
  EXPECT_TRUE(lab_namespaces_exist(lab_name)) << "gc removed a lab whose owner lives";

  owner.signal(SIGKILL);
  owner.wait(5s);
  std::this_thread::sleep_for(1s);
  ASSERT_TRUE(lab_namespaces_exist(lab_name)) << "something other than gc removed the lab";
  EXPECT_NE(gc().find(lab_name), std::string::npos);
  EXPECT_FALSE(lab_namespaces_exist(lab_name)) << "gc left " << lab_name << " behind";
  EXPECT_FALSE(std::filesystem::exists("/run/zkr-netlab/" + lab_name + ".json"));
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
}

// The child entry of the next test: holds a lab, says what, and waits to be killed.
TEST(NetLabKilledChild, DISABLED_HoldsALab) {
  NetLab lab({.servers = 1, .clients = 0});
  print_held("lab", lab.describe().substr(7, 7));  // "netlab zkrNNNN (...": the lab's name
  print_held("ready", "");
  std::this_thread::sleep_for(120s);
}

// A test killed with SIGKILL mid-run leaves no namespace, no registry entry and no directory.
TEST_F(NetLabTest, KilledTestLeavesNothingBehind) {
  auto held = hold_in_child("NetLabKilledChild.DISABLED_HoldsALab", scaled(120s));
  const std::string lab_name = held.all("lab").at(0);
  ASSERT_TRUE(lab_namespaces_exist(lab_name));
  std::string dir;
  for (const auto& entry : std::filesystem::directory_iterator("/run/zkr-netlab")) {
    if (entry.path().filename() == lab_name + ".json") {
      std::ifstream in(entry.path());
      std::string record((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      auto key = record.find("\"state_dir\": \"");
      ASSERT_NE(key, std::string::npos) << record;
      dir = record.substr(key + 14, record.find('"', key + 14) - key - 14);
    }
  }
  ASSERT_TRUE(std::filesystem::exists(dir)) << "no state directory '" << dir << "' for " << lab_name;

  held.process->signal(SIGKILL);
  held.process->wait(5s);
  const auto deadline = Clock::now() + scaled(30s);
  while ((lab_namespaces_exist(lab_name) || std::filesystem::exists(dir) ||
          std::filesystem::exists("/run/zkr-netlab/" + lab_name + ".json")) &&
         Clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  EXPECT_FALSE(lab_namespaces_exist(lab_name)) << "the namespaces of " << lab_name << " were left behind";
  EXPECT_FALSE(std::filesystem::exists("/run/zkr-netlab/" + lab_name + ".json"));
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir << " was left behind";
}

}  // namespace
}  // namespace zkr::testenv
