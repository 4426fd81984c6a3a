// SPDX-License-Identifier: Apache-2.0
// The zklock binary against a real ZooKeeper server: real processes, real signals, real loss.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <zkr/barrier.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/group.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>
#include <zkr/shared_counter.hpp>

#include "../unit/python_readers.hpp"
#include "process_tree.hpp"
#include "testenv.hpp"
#include "zklock_run.hpp"

namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::Not;
using zkr::testenv::Cluster;
using zkr::testenv::Process;
using zkr::testenv::TempDir;
using zkr::testenv::last_stamp;
using zkr::testenv::scaled;

using namespace zklock_test;

// Seconds as zklock's options take them, stretched by the timeout scale.
std::string scaled_seconds(std::chrono::milliseconds duration) {
  return fmt::format("{:g}", static_cast<double>(scaled(duration).count()) / 1000.0);
}

bool process_exists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Gone, or a zombie: its parent died and whoever inherited it may never reap it.
bool process_ended(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string fields;
  if (!std::getline(stat, fields)) return true;
  const std::size_t after_name = fields.rfind(')');
  return after_name == std::string::npos || fields.substr(after_name + 2, 1) == "Z";
}

// Kills a process the test learned about (a job's child) if a failed test left it running.
struct KillAtEnd {
  pid_t pid = 0;
  bool group = false;
  ~KillAtEnd() {
    if (pid > 0) ::kill(group ? -pid : pid, SIGKILL);
  }
};

// The number after `prefix` in `line` ("held 123 456" with prefix "held " gives 123).
long long number_after(const std::string& line, std::string_view prefix) {
  std::istringstream in(line.substr(line.find(prefix) + prefix.size()));
  long long value = 0;
  in >> value;
  return value;
}

// An HTTP GET on 127.0.0.1:port: the whole response (status line, headers, body), or "" if the
// connection failed.
std::string http_get(int port, const std::string& target) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  timeval patience{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &patience, sizeof patience);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return {};
  }
  const std::string request = fmt::format("GET {} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", target);
  (void)::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response;
  char buffer[4096];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return response;
}

int unused_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

class ZklockTest : public ::testing::Test {
 protected:
  // zklock with this test's server, a short session and a short grace, then `rest`.
  std::vector<std::string> zklock(std::vector<std::string> rest, std::string servers = {}) const {
    std::vector<std::string> argv = {zklock_binary,  "--zk", servers.empty() ? servers_ : servers,
                                     "--session-timeout", scaled_seconds(2s), "--kill-after",
                                     scaled_seconds(300ms)};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }

  // Starts a zklock whose job prints "held <token> <job pgid>" and then sleeps; waits for the line.
  std::unique_ptr<Process> start_holder(std::vector<std::string> options = {}, std::string* held_line = nullptr,
                                        std::string servers = {}) {
    std::vector<std::string> argv = std::move(options);
    argv.insert(argv.end(), {path_, "sh", "-c", "echo \"held $ZKLOCK_FENCING_TOKEN $$\"; exec sleep 600"});
    auto holder = std::make_unique<Process>(zklock(argv, servers), merged_output());
    auto line = holder->wait_for_line("held ", scaled(30s));
    EXPECT_TRUE(line) << "the holder never got the lock";
    if (line && held_line) *held_line = *line;
    return holder;
  }

  Outcome list_of(const std::string& path) const { return run_to_end(zklock({"--list", path, "--json"})); }

  Outcome list(std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {"--list", path_};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_to_end(zklock(argv));
  }

  // Contenders --list reports (-1 if it fails).
  int contender_count() const { return contender_count(path_); }
  int contender_count(const std::string& path) const {
    return contenders_listed(run_to_end(zklock({"--list", path, "--json"})));
  }

  std::string servers_ = zkr::testenv::shared_server();
  std::string path_ = zkr::testenv::unique_path();
};

// ---------------------------------------------------------------------------------------------
// Exit codes and what the job gets

TEST_F(ZklockTest, ExitsWithTheCommandsCode) {
  EXPECT_EQ(run_to_end(zklock({path_, "sh", "-c", "exit 7"})).exit_code, 7);
  EXPECT_EQ(run_to_end(zklock({path_, "-c", "exit 3"})).exit_code, 3);
  EXPECT_EQ(run_to_end(zklock({path_, "true"})).exit_code, 0);
}

// A job that runs zklock on its parent's lock would queue behind its own parent. It is refused at
// once (64, naming the path); a zklock in the job on another path reaches the same ensemble
// through $ZKLOCK_SERVERS and runs.
TEST_F(ZklockTest, NestedZklockOnTheParentsLockIsRefusedAtOnce) {
  const Outcome nested = run_to_end(zklock({path_, zklock_binary, "-w", "3", path_, "true"}));
  EXPECT_EQ(nested.exit_code, 64) << nested.output;
  EXPECT_THAT(nested.output, HasSubstr(path_ + " is held by the zklock that runs this command"));
  EXPECT_LE(contender_count(), 0);  // nobody queued (-1: the path's container is already gone)

  const Outcome other = run_to_end(zklock({path_, zklock_binary, "-w", "3", path_ + "-inner", "-c", "echo inner ran"}));
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_THAT(other.output, HasSubstr("inner ran"));
}

// An ensemble that cannot be reached: exit 69 within the connect timeout, naming the cause; -w
// bounds the connect as well.
TEST_F(ZklockTest, AnUnreachableEnsembleIsNamedWithinTheConnectTimeout) {
  const int port = unused_port();  // nothing listens there
  const std::string nowhere = fmt::format("127.0.0.1:{}", port);
  for (const auto& [extra, bound, says] :
       std::vector<std::tuple<std::vector<std::string>, std::chrono::milliseconds, std::string>>{
           {{"--connect-timeout", "2"}, 2000ms, "within 2s ("},
           {{"--connect-timeout", "30", "-w", "1"}, 1000ms, "within 1s (--wait) ("}}) {
    std::vector<std::string> argv = extra;
    argv.insert(argv.end(), {path_, "true"});
    const auto started = std::chrono::steady_clock::now();
    const Outcome outcome = run_to_end(zklock(argv, nowhere));
    const auto elapsed = std::chrono::steady_clock::now() - started;
    EXPECT_EQ(outcome.exit_code, 69) << outcome.output;
    EXPECT_THAT(outcome.output, HasSubstr("cannot reach ZooKeeper at " + nowhere + " " + says)) << outcome.output;
    EXPECT_THAT(outcome.output, HasSubstr(nowhere + " refuses connections")) << outcome.output;
    EXPECT_LT(elapsed, scaled(bound + bound / 10 + 200ms)) << outcome.output;  // 200 ms: zklock's own start and exit
  }
}

// The same ensemble written another way is the same ensemble: the parent's node is what is found.
// And only a wait for the parent is refused: a reader in a reader, a slot in a semaphore with
// slots to spare, run.
TEST_F(ZklockTest, NestedZklockIsRefusedOnlyWhenItWouldWaitForItsParent) {
  ASSERT_TRUE(servers_.starts_with("127.0.0.1:")) << servers_;
  const std::string as_localhost = "localhost" + servers_.substr(servers_.find(':'));
  const Outcome respelled =
      run_to_end(zklock({path_, zklock_binary, "--zk", as_localhost, "-w", "3", path_, "true"}));
  EXPECT_EQ(respelled.exit_code, 64) << respelled.output;
  EXPECT_THAT(respelled.output, HasSubstr(path_ + " is held by the zklock that runs this command"));

  const Outcome readers = run_to_end(zklock({"-s", path_, zklock_binary, "-s", "-w", "3", path_, "-c", "echo reader ran"}));
  EXPECT_EQ(readers.exit_code, 0) << readers.output;
  EXPECT_THAT(readers.output, HasSubstr("reader ran"));
  const Outcome slots = run_to_end(zklock({"-N", "3", path_ + "-slots", zklock_binary, "-N", "3", "-w", "3",
                                           path_ + "-slots", "-c", "echo slot ran"}));
  EXPECT_EQ(slots.exit_code, 0) << slots.output;
  EXPECT_THAT(slots.output, HasSubstr("slot ran"));

  // A writer queued behind the parent reader: a nested reader would queue behind that writer.
  const TempDir dir("zklock-nested");
  const auto go = dir.file("go");
  Process parent(zklock({"-s", path_, "-c",
                         fmt::format("echo parent holds; while [ ! -e '{}' ]; do sleep 0.05; done; "
                                     "exec '{}' -s -w 3 '{}' -c 'echo nested reader ran'",
                                     go.string(), zklock_binary, path_)}),
                 merged_output());
  ASSERT_TRUE(parent.wait_for_line("parent holds", scaled(30s)));
  Process writer(zklock({"-x", path_, "true"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  std::ofstream(go.string()) << "go\n";
  EXPECT_EQ(parent.wait(scaled(30s)), 64);
  EXPECT_THAT(parent.read_all(scaled(5s)), HasSubstr("a writer waits behind it"));
  EXPECT_EQ(writer.wait(scaled(30s)), 0);
}

TEST_F(ZklockTest, CommandKilledBySignalGives128PlusN) {
  EXPECT_EQ(run_to_end(zklock({path_, "-c", "kill -KILL $$"})).exit_code, 128 + SIGKILL);
}

TEST_F(ZklockTest, JobEnvironment) {
  Process::Options options = merged_output();
  options.env["ZKLOCK_TEST_PASSTHROUGH"] = "kept";
  const Outcome outcome = run_to_end(
      zklock({path_, "-c",
              "echo \"token=$ZKLOCK_FENCING_TOKEN\"; echo \"node=$ZKLOCK_NODE\"; echo \"path=$ZKLOCK_PATH\"; "
              "echo \"session=$ZKLOCK_SESSION_ID\"; echo \"other=$ZKLOCK_TEST_PASSTHROUGH\""}),
      options);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, ::testing::ContainsRegex("token=[1-9][0-9]*\n"));
  EXPECT_THAT(outcome.output, HasSubstr("node=" + path_ + "/_c_"));
  EXPECT_THAT(outcome.output, ::testing::ContainsRegex("node=.*-lock-[0-9]{10}\n"));
  EXPECT_THAT(outcome.output, HasSubstr("path=" + path_ + "\n"));
  EXPECT_THAT(outcome.output, ::testing::ContainsRegex("session=0x[0-9a-f]+\n"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("session=0\n")));
  EXPECT_THAT(outcome.output, HasSubstr("other=kept\n"));
}

TEST_F(ZklockTest, TokensGrowFromGrantToGrant) {
  const std::vector<std::string> job = {path_, "-c", "echo \"token $ZKLOCK_FENCING_TOKEN\""};
  const Outcome first = run_to_end(zklock(job));
  const Outcome second = run_to_end(zklock(job));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_LT(number_after(first.output, "token "), number_after(second.output, "token "));
}

TEST_F(ZklockTest, StdinIsPassedThrough) {
  Process::Options options = merged_output();
  options.pipe_stdin = true;
  Process process(zklock({path_, "cat"}), options);
  process.write_stdin("line one\nline two\n");
  process.close_stdin();
  EXPECT_EQ(process.read_all(scaled(30s)), "line one\nline two\n");
  EXPECT_EQ(process.wait(scaled(30s)), 0);
}

TEST_F(ZklockTest, CommandNotFoundOrNotExecutable) {
  const Outcome missing = run_to_end(zklock({path_, "zklock-test-no-such-command"}));
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_THAT(missing.output, HasSubstr("zklock-test-no-such-command: command not found"));

  TempDir dir;
  const auto script = dir.file("not-executable");
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  ::chmod(script.c_str(), 0644);
  const Outcome not_executable = run_to_end(zklock({path_, script.string()}));
  EXPECT_EQ(not_executable.exit_code, 126);
  EXPECT_THAT(not_executable.output, HasSubstr("cannot execute"));

  // The lock was released after the failed start.
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "true"})).exit_code, 0);
}

// ---------------------------------------------------------------------------------------------
// Conflicts, waiting, release

// The refusal names who holds: the session (as --list and $ZKLOCK_SESSION_ID write it), the
// owner data, since when.
TEST_F(ZklockTest, ConflictWithNonblockAndTimeout) {
  std::string held_line;
  auto holder = start_holder({"--owner", "nightly on host-a"}, &held_line);
  const Outcome nonblock = run_to_end(zklock({"-n", path_, "echo", "ran"}));
  EXPECT_EQ(nonblock.exit_code, 1);
  EXPECT_THAT(nonblock.output, Not(HasSubstr("ran")));
  EXPECT_THAT(nonblock.output, ::testing::ContainsRegex(" is held by session 0x[0-9a-f]+ \\(owner \"nightly on "
                                                        "host-a\", since 20[0-9-]+T[0-9:.]+Z\\)"));

  EXPECT_EQ(run_to_end(zklock({"-n", "-E", "9", path_, "true"})).exit_code, 9);
  EXPECT_EQ(run_to_end(zklock({"-w", "0", path_, "true"})).exit_code, 1);
  const Outcome quiet = run_to_end(zklock({"-n", "-q", path_, "true"}));
  EXPECT_EQ(quiet.exit_code, 1);
  EXPECT_EQ(quiet.output, "");

  const Outcome timed_out = run_to_end(zklock({"-w", scaled_seconds(500ms), "-E", "3", path_, "echo", "ran"}));
  EXPECT_EQ(timed_out.exit_code, 3);
  EXPECT_THAT(timed_out.output, HasSubstr("timed out"));
  EXPECT_THAT(timed_out.output, HasSubstr("held by session 0x"));
  EXPECT_THAT(timed_out.output, Not(HasSubstr("ran")));

  // The waiters left no node behind: only the holder is listed.
  EXPECT_EQ(contender_count(), 1);

  holder->signal(SIGTERM);
  EXPECT_EQ(holder->wait(scaled(30s)), 128 + SIGTERM);
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "true"})).exit_code, 0);
}

// -N 2: two jobs run at once, each with its own token; a third waits for a slot (or, with -n,
// names the holders); the path records 2, so another N or a plain lock is refused; --list reads
// the slots from the path; the library's Semaphore shares the slots.
TEST_F(ZklockTest, SlotsRunUpToNJobsAtOnce) {
  std::string first_line, second_line;
  auto first = start_holder({"-N", "2", "--owner", "slot-one"}, &first_line);
  auto second = start_holder({"-N", "2", "--owner", "slot-two"}, &second_line);
  EXPECT_NE(number_after(first_line, "held "), number_after(second_line, "held "));

  const Outcome full = run_to_end(zklock({"-N", "2", "-n", path_, "echo", "job-ran"}));
  EXPECT_EQ(full.exit_code, 1) << full.output;
  EXPECT_THAT(full.output, HasSubstr("all 2 slots of " + path_ + " are taken, held by session 0x"));
  EXPECT_THAT(full.output, HasSubstr("\"slot-one\""));
  EXPECT_THAT(full.output, HasSubstr("\"slot-two\""));
  EXPECT_THAT(full.output, Not(HasSubstr("job-ran")));

  const Outcome other_n = run_to_end(zklock({"-N", "3", "-n", path_, "echo", "job-ran"}));
  EXPECT_EQ(other_n.exit_code, 64) << other_n.output;
  EXPECT_THAT(other_n.output, HasSubstr("the path is a semaphore of 2 slots, not 3: every participant must give --slots 2"));
  const Outcome plain = run_to_end(zklock({"-n", path_, "echo", "job-ran"}));
  EXPECT_EQ(plain.exit_code, 64) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("the path is a semaphore of 2 slots: take one with --slots 2"));

  EXPECT_THAT(list().output, HasSubstr(path_ + ": 2 holders, 0 waiters (a semaphore of 2 slots)"));
  EXPECT_THAT(list({"--json"}).output, HasSubstr(R"("exists":true,"slots":2,"contenders":)"));
  {
    zkr::SessionOptions options;
    options.servers = servers_;
    zkr::Session session(options);
    zkr::Semaphore library(session, path_, 2);
    EXPECT_FALSE(library.try_acquire()) << "the library saw a free slot beside two zklock jobs";
  }

  Process waiter(zklock({"-N", "2", "-w", scaled_seconds(30s), path_, "-c", "echo \"waiter $ZKLOCK_FENCING_TOKEN\""}),
                 merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 3; }, 30s));
  first->signal(SIGTERM);
  EXPECT_EQ(first->wait(scaled(30s)), 128 + SIGTERM);
  auto waited = waiter.wait_for_line("waiter ", scaled(30s));
  ASSERT_TRUE(waited) << "the waiter never got the free slot";
  EXPECT_GT(number_after(*waited, "waiter "), number_after(second_line, "held "));
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  second->signal(SIGTERM);
  EXPECT_EQ(second->wait(scaled(30s)), 128 + SIGTERM);
  EXPECT_LE(contender_count(), 0);
}

// An operator breaks a stuck lock: asked first (no terminal, no --force: refused), then the
// holder's node goes, its zklock stops the job and exits 75; nothing left to break afterwards.
// With several holders (a semaphore), --node says which.
TEST_F(ZklockTest, BreakDeletesTheHoldersNodeAndItsJobStops) {
  auto holder = start_holder({"--owner", "stuck-job"});
  const Outcome unconfirmed = run_to_end(zklock({"--break", path_}));
  EXPECT_EQ(unconfirmed.exit_code, 64) << unconfirmed.output;
  EXPECT_THAT(unconfirmed.output, HasSubstr("standard input is not a terminal: add --force"));
  EXPECT_EQ(contender_count(), 1);

  const Outcome broken = run_to_end(zklock({"--break", path_, "--force"}));
  EXPECT_EQ(broken.exit_code, 0) << broken.output;
  EXPECT_THAT(broken.output, HasSubstr("broke " + path_ + ": deleted the node _c_"));
  EXPECT_THAT(broken.output, HasSubstr("(owner \"stuck-job\""));
  EXPECT_EQ(holder->wait(scaled(30s)), 75);
  EXPECT_THAT(holder->read_all(scaled(5s)), HasSubstr("lost the lock on " + path_ + " (lock node deleted)"));
  const Outcome nothing = run_to_end(zklock({"--break", path_, "--force"}));
  EXPECT_EQ(nothing.exit_code, 1) << nothing.output;
  EXPECT_THAT(nothing.output, HasSubstr("no holder, nothing to break"));

  const std::string semaphore_path = path_ + "-slots";
  Process first(zklock({"-N", "2", semaphore_path, "-c", "echo held; exec sleep 600"}), merged_output());
  Process second(zklock({"-N", "2", semaphore_path, "-c", "echo held; exec sleep 600"}), merged_output());
  ASSERT_TRUE(first.wait_for_line("held", scaled(30s)));
  ASSERT_TRUE(second.wait_for_line("held", scaled(30s)));
  const Outcome which = run_to_end(zklock({"--break", semaphore_path, "--force"}));
  EXPECT_EQ(which.exit_code, 64) << which.output;
  EXPECT_THAT(which.output, HasSubstr("has 2 holders: give --node NAME to break one of them"));
  const Outcome listing = list_of(semaphore_path);
  const auto at = listing.output.find("\"node\":\"");
  ASSERT_NE(at, std::string::npos) << listing.output;
  const std::string node = listing.output.substr(at + 8, listing.output.find('"', at + 8) - (at + 8));
  // Each holder on a line of its own, named as --node takes it.
  EXPECT_THAT(which.output, Not(HasSubstr("\\x0a"))) << which.output;
  EXPECT_THAT(which.output, HasSubstr("\nzklock:   " + node + " (")) << which.output;
  const Outcome one = run_to_end(zklock({"--break", semaphore_path, "--node", node, "--force"}));
  EXPECT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(contender_count(semaphore_path), 1);
  EXPECT_TRUE(first.wait(scaled(30s)) == 75 || second.wait(scaled(30s)) == 75);
  first.signal(SIGTERM);
  second.signal(SIGTERM);
  first.wait(scaled(30s));
  second.wait(scaled(30s));
}

// --break of a path that does not exist says so and exits 66, as --list does: a typo or a missing
// chroot is not "no holder".
TEST_F(ZklockTest, BreakOfAPathThatDoesNotExistSaysSoAndExits66) {
  const Outcome missing = run_to_end(zklock({"--break", path_, "--force"}));
  EXPECT_EQ(missing.exit_code, 66) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr(path_ + ": does not exist"));
  EXPECT_THAT(missing.output, Not(HasSubstr("no holder")));
  const Outcome chrooted = run_to_end(zklock({"--break", "/jobs", "--force"}, servers_ + path_ + "-chroot"));
  EXPECT_EQ(chrooted.exit_code, 66) << chrooted.output;
  EXPECT_THAT(chrooted.output, HasSubstr("does not exist (under the chroot " + path_ + "-chroot"));
  EXPECT_EQ(run_to_end(zklock({"--list", path_})).exit_code, 66) << "--break created the path";

  // An existing path without a holder: 1, "no holder".
  ASSERT_EQ(run_to_end(zklock({path_, "true"})).exit_code, 0);
  const Outcome free = run_to_end(zklock({"--break", path_, "--force"}));
  EXPECT_EQ(free.exit_code, 1) << free.output;
  EXPECT_THAT(free.output, HasSubstr("no holder, nothing to break"));
}

// A session lost while zklock waits in the queue is no error (the man page's EXIT STATUS): the
// waiter queues again on a new session and runs its command once granted.
TEST_F(ZklockTest, SessionLostWhileWaitingQueuesAgainAndRuns) {
  Cluster cluster;
  const std::string servers = cluster.connect_string();
  auto holder = start_holder({}, nullptr, servers);
  Process waiter(zklock({path_, "-c", "echo waiter ran"}, servers), merged_output());
  KillAtEnd stop_waiter{waiter.pid(), true};
  ASSERT_TRUE(eventually(
      [&] {
        const std::string listing = run_to_end(zklock({"--list", path_, "--json"}, servers)).output;
        return listing.find("\"holds\":false") != std::string::npos;  // the waiter queued behind the holder
      },
      30s));
  cluster.freeze(0);
  std::this_thread::sleep_for(scaled(4s));  // twice the 2 s session: both sessions lost
  cluster.thaw(0);
  EXPECT_EQ(holder->wait(scaled(30s)), 75);  // the holder's job was stopped
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  EXPECT_THAT(waiter.read_all(scaled(5s)), HasSubstr("waiter ran"));
}

// On a terminal, --break asks; only "y" breaks.
TEST_F(ZklockTest, BreakAsksOnATerminal) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "needs script(1) for a pseudo-terminal";
  auto holder = start_holder();
  for (const std::string answer : {"n", "y"}) {
    std::string inner;
    for (const std::string& arg : zklock({"--break", path_})) inner += "'" + arg + "' ";
    Process::Options options = merged_output();
    options.pipe_stdin = true;
    Process terminal({"/usr/bin/script", "-qec", inner, "/dev/null"}, options);
    terminal.write_stdin(answer + "\n");  // typed ahead: the terminal keeps it until zklock asks
    EXPECT_THAT(terminal.read_all(scaled(30s)), ::testing::ContainsRegex("delete the node _c_.* of session 0x.*, token [0-9]+\\? \\[y/N\\]"));
    EXPECT_EQ(terminal.wait(scaled(30s)), answer == "y" ? 0 : 1);
    EXPECT_EQ(contender_count(), answer == "y" ? 0 : 1);
  }
  EXPECT_EQ(holder->wait(scaled(30s)), 75);
}

TEST_F(ZklockTest, LockIsFreedWhenTheJobEnds) {
  ASSERT_EQ(run_to_end(zklock({path_, "true"})).exit_code, 0);
  EXPECT_EQ(contender_count(), 0);
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "true"})).exit_code, 0);
}

TEST_F(ZklockTest, WaiterRunsAfterTheHolderEnds) {
  Process holder(zklock({path_, "-c", "echo held; sleep 1"}), merged_output());
  ASSERT_TRUE(holder.wait_for_line("held", scaled(30s)));
  const Outcome waiter = run_to_end(zklock({"-w", scaled_seconds(30s), path_, "echo", "waiter ran"}));
  EXPECT_EQ(waiter.exit_code, 0);
  EXPECT_THAT(waiter.output, HasSubstr("waiter ran"));
  EXPECT_EQ(holder.wait(scaled(30s)), 0);
}

TEST_F(ZklockTest, SignalWhileWaitingWithdrawsFromTheQueue) {
  auto holder = start_holder();
  Process waiter(zklock({path_, "echo", "ran"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  waiter.signal(SIGINT);
  EXPECT_EQ(waiter.wait(scaled(30s)), 128 + SIGINT);
  EXPECT_THAT(waiter.read_all(scaled(5s)), Not(HasSubstr("ran")));
  EXPECT_EQ(contender_count(), 1);
}

TEST_F(ZklockTest, SharedHoldersCoexistAndExcludeAWriter) {
  auto reader = start_holder({"-s"});
  const Outcome second_reader = run_to_end(zklock({"-s", "-n", path_, "echo", "second reader"}));
  EXPECT_EQ(second_reader.exit_code, 0) << second_reader.output;
  EXPECT_THAT(second_reader.output, HasSubstr("second reader"));
  EXPECT_EQ(run_to_end(zklock({"-x", "-n", path_, "true"})).exit_code, 1);
  reader->signal(SIGTERM);
  reader->wait(scaled(30s));
  EXPECT_EQ(run_to_end(zklock({"-x", "-n", path_, "true"})).exit_code, 0);

  // The plain lock excludes both sides.
  auto plain = start_holder();
  EXPECT_EQ(run_to_end(zklock({"-s", "-n", path_, "true"})).exit_code, 1);
  EXPECT_EQ(run_to_end(zklock({"-x", "-n", path_, "true"})).exit_code, 1);
}

// ---------------------------------------------------------------------------------------------
// Signals and process groups

TEST_F(ZklockTest, SignalsAreForwardedAndTheJobsStatusReturned) {
  Process process(zklock({path_, "-c",
                          "trap 'echo got-usr1' USR1; trap 'echo got-hup' HUP; trap 'exit 42' TERM; "
                          "echo ready; while :; do sleep 0.05; done"}),
                  merged_output());
  ASSERT_TRUE(process.wait_for_line("ready", scaled(30s)));
  process.signal(SIGUSR1);
  EXPECT_TRUE(process.wait_for_line("got-usr1", scaled(10s)));
  process.signal(SIGHUP);
  EXPECT_TRUE(process.wait_for_line("got-hup", scaled(10s)));
  process.signal(SIGTERM);
  EXPECT_EQ(process.wait(scaled(30s)), 42);
  EXPECT_EQ(contender_count(), 0);
}

TEST_F(ZklockTest, SecondTermEscalatesToKill) {
  Process process(zklock({path_, "-c", "trap '' TERM INT; echo ready; while :; do sleep 0.05; done"}),
                  merged_output());
  ASSERT_TRUE(process.wait_for_line("ready", scaled(30s)));
  process.signal(SIGTERM);
  EXPECT_FALSE(process.wait(scaled(500ms))) << "the job ignores TERM: it must still run";
  process.signal(SIGINT);
  EXPECT_EQ(process.wait(scaled(30s)), 128 + SIGKILL);
}

TEST_F(ZklockTest, SignalReachesTheJobsChildren) {
  Process process(zklock({path_, "-c", "sleep 600 & echo \"child $!\"; wait"}), merged_output());
  auto line = process.wait_for_line("child ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd child{static_cast<pid_t>(number_after(*line, "child "))};
  ASSERT_TRUE(process_exists(child.pid));
  process.signal(SIGTERM);
  EXPECT_EQ(process.wait(scaled(30s)), 128 + SIGTERM);
  EXPECT_TRUE(eventually([&] { return !process_exists(child.pid); }, 10s));
}

TEST_F(ZklockTest, ChildrenLeftBehindAreStoppedBeforeRelease) {
  TempDir dir;
  const auto log = dir.file("log");
  // The command exits at once, leaving a child in its group that would keep working under the lock.
  Process process(zklock({path_, "-c",
                          fmt::format("(trap 'echo child-stopped >> {0}; exit 0' TERM; touch {0}.armed; "
                                      "while :; do sleep 0.05; done) & "
                                      "i=0; while [ ! -e {0}.armed ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; "
                                      "echo \"child $!\"",
                                      log.string())}),
                  merged_output());
  auto line = process.wait_for_line("child ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd child{static_cast<pid_t>(number_after(*line, "child "))};
  EXPECT_EQ(process.wait(scaled(30s)), 0);
  EXPECT_FALSE(process_exists(child.pid));
  EXPECT_EQ(read_file(log), "child-stopped\n");
}

TEST_F(ZklockTest, JobDiesWithZklock) {
  Process process(zklock({path_, "-c", "echo \"job $$\"; exec sleep 600"}), merged_output());
  auto line = process.wait_for_line("job ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd job{static_cast<pid_t>(number_after(*line, "job "))};
  process.signal(SIGKILL);
  EXPECT_EQ(process.wait(scaled(30s)), 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return !process_exists(job.pid); }, 10s));
}

// The keeper is forked when zklock starts and waits for its job. zklock killed while it waits
// for the lock: the keeper exits having started nothing, and nothing is left running.
TEST_F(ZklockTest, ZklockKilledWhileWaitingStartsNoJobAndLeavesNoKeeper) {
  auto holder = start_holder();
  TempDir dir;
  const auto ran = dir.file("ran");
  Process waiter(zklock({path_, "touch", ran.string()}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  const std::vector<pid_t> keepers = zklock::children_of(waiter.pid());
  ASSERT_EQ(keepers.size(), 1u) << "the waiting zklock has its keeper, and nothing else, as a child";
  EXPECT_EQ(read_file(fmt::format("/proc/{}/comm", keepers[0])), "zklock-keeper\n");
  KillAtEnd keeper{keepers[0]};
  ::kill(waiter.pid(), SIGKILL);
  EXPECT_EQ(waiter.wait(scaled(30s)), 128 + SIGKILL);
  EXPECT_TRUE(eventually([&] { return process_ended(keeper.pid); }, 10s)) << "the keeper outlived zklock";
  EXPECT_TRUE(eventually([&] { return contender_count() == 1; }, 30s));
  EXPECT_FALSE(std::filesystem::exists(ran)) << "the job ran after zklock died";
}

// ---------------------------------------------------------------------------------------------
// Lock loss

// The whole holder - zklock, its keeper and its job - frozen past the session (a frozen machine):
// another client gets the lock with a larger token; on thaw the job is stopped and zklock exits
// with the lost code; the job's late write, carrying the old token, is refused by the fenced store.
TEST_F(ZklockTest, FrozenPastTheSessionTheJobIsStoppedAndItsLateWritesRefused) {
  zkr::FenceGate store;
  Process first(zklock({path_, "-c",
                        "echo \"pgid $$\"; while :; do echo \"write $ZKLOCK_FENCING_TOKEN\"; sleep 0.1; done"}),
                merged_output());
  auto pgid_line = first.wait_for_line("pgid ", scaled(30s));
  ASSERT_TRUE(pgid_line);
  KillAtEnd job{static_cast<pid_t>(number_after(*pgid_line, "pgid ")), true};
  auto write = first.wait_for_line("write ", scaled(10s));
  ASSERT_TRUE(write);
  const zkr::FencingToken first_token(number_after(*write, "write "));
  EXPECT_TRUE(store.admit("key", first_token));

  const std::vector<pid_t> keepers = zklock::children_of(first.pid());
  ASSERT_EQ(keepers.size(), 1u);
  first.freeze();
  ::kill(keepers[0], SIGSTOP);
  ::kill(-job.pid, SIGSTOP);
  // Writes sent before the freeze were timely.
  while (auto line = first.read_line(scaled(300ms))) {
    if (line->starts_with("write ")) {
      EXPECT_TRUE(store.admit("key", zkr::FencingToken(number_after(*line, "write "))));
    }
  }

  const Outcome second = run_to_end(zklock({"-w", scaled_seconds(30s), path_, "-c", "echo \"write $ZKLOCK_FENCING_TOKEN\""}));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const zkr::FencingToken second_token(number_after(second.output, "write "));
  EXPECT_GT(second_token, first_token);
  EXPECT_TRUE(store.admit("key", second_token));

  // The job wakes first and writes with its stale token: refused.
  ::kill(-job.pid, SIGCONT);
  auto late = first.wait_for_line("write ", scaled(10s));
  ASSERT_TRUE(late);
  EXPECT_FALSE(store.admit("key", zkr::FencingToken(number_after(*late, "write "))));
  EXPECT_GE(store.refused(), 1u);

  first.thaw();
  ::kill(keepers[0], SIGCONT);
  EXPECT_EQ(first.wait(scaled(30s)), 75);
  EXPECT_THAT(first.read_all(scaled(5s)), HasSubstr("lost the lock"));
  EXPECT_TRUE(eventually([&] { return ::kill(-job.pid, 0) != 0; }, 10s));
}

// The holder's link is cut: it must stop its job before the server can expire its session and so
// before the waiter is granted.
TEST_F(ZklockTest, BlackholedHolderStopsItsJobBeforeAnotherIsGranted) {
  TempDir dir;
  const auto log = dir.file("log");
  zkr::testenv::Proxy proxy(servers_);
  std::vector<std::string> holder_argv = {
      zklock_binary, "--zk", proxy.address(), "--session-timeout", scaled_seconds(4s), "--kill-after",
      scaled_seconds(200ms), path_, "-c",
      fmt::format("trap 'echo holder-stopped >> {0}; exit 0' TERM; echo ready; while :; do sleep 0.05; done",
                  log.string())};
  Process holder(holder_argv, merged_output());
  ASSERT_TRUE(holder.wait_for_line("ready", scaled(30s)));

  Process waiter(zklock({"-w", scaled_seconds(60s), path_, "-c",
                         fmt::format("echo waiter-granted >> {0}; echo granted", log.string())}),
                 merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));

  proxy.blackhole();
  EXPECT_TRUE(waiter.wait_for_line("granted", scaled(60s)));
  EXPECT_EQ(read_file(log), "holder-stopped\nwaiter-granted\n");
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  proxy.pass();
  EXPECT_EQ(holder.wait(scaled(60s)), 75);
  // The message says what decided the loss: the local deadline, the server was never heard.
  EXPECT_THAT(holder.read_all(scaled(5s)),
              HasSubstr("lost the lock on " + path_ +
                        " (session lost: no acknowledgement through the leader before the session monitor's deadline)"));
}

// The session timeout asked for leaves the lead time that --kill-after needs; when the ensemble
// cannot grant it (its maxSessionTimeout, 60 s here), zklock refuses before queueing instead of
// running a job that could outlive its lock.
TEST_F(ZklockTest, KillAfterGetsTheSessionTimeoutItNeedsOrIsRefused) {
  const Outcome fitted = run_to_end({zklock_binary, "--zk", servers_, "-v", "--tick-time", "2", "--session-timeout",
                                     "2", "-k", "0.3", path_, "-c", "echo job-ran"});
  EXPECT_EQ(fitted.exit_code, 0) << fitted.output;
  EXPECT_THAT(fitted.output, HasSubstr("asking for a session timeout of 4.595s"));
  EXPECT_THAT(fitted.output, HasSubstr("negotiated timeout 4.595s, lead time 1.3s, tolerated silence 1.53s"));
  EXPECT_THAT(fitted.output, HasSubstr("job-ran"));

  const Outcome refused =
      run_to_end({zklock_binary, "--zk", servers_, "--tick-time", "2", "-k", "70", path_, "-c", "echo job-ran"});
  EXPECT_EQ(refused.exit_code, 64) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("--kill-after 70s needs a lead time of 71s, so a session timeout of at least "
                                        "75s (with --tick-time 2s); the ensemble granted 60s"));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
  EXPECT_LE(contender_count(), 0);
}

// The defaults (a 20 s session, --kill-after 5, a 2 s tick as Debian ships; the test servers'
// tick is shorter, so it is given) send a heartbeat every (20 - 6) / 3 = 4.667 s and tolerate
// 9.334 s of ensemble silence,
// more than a rolling restart or a leader election takes (docs/operations.md, "Timeouts"); -v
// says so.
TEST_F(ZklockTest, VerboseSaysTheSilenceTheDefaultsTolerate) {
  const Outcome outcome = run_to_end({zklock_binary, "--zk", servers_, "-v", "--tick-time", "2", path_, "-c", "echo job-ran"});
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("negotiated timeout 20s, lead time 6s, tolerated silence 9.334s"));
}

TEST_F(ZklockTest, LostExitCodeAndKillSignalAreConfigurable) {
  zkr::testenv::Proxy proxy(servers_);
  std::vector<std::string> argv = {
      zklock_binary, "--zk", proxy.address(), "--session-timeout", scaled_seconds(2s), "-k",
      scaled_seconds(200ms), "-L", "99", "--kill-signal", "USR1", path_, "-c",
      "sleep 600 & echo \"child $!\"; trap 'echo got-usr1; exit 0' USR1; while :; do sleep 0.05; done"};
  Process holder(argv, merged_output());
  auto line = holder.wait_for_line("child ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd child{static_cast<pid_t>(number_after(*line, "child "))};
  proxy.blackhole();
  EXPECT_TRUE(holder.wait_for_line("got-usr1", scaled(30s)));
  // The whole group got the signal: the background child too.
  EXPECT_TRUE(eventually([&] { return !process_exists(child.pid); }, 10s));
  proxy.pass();
  EXPECT_EQ(holder.wait(scaled(60s)), 99);
}

// An operator deletes the lock node. The job ignores the kill signal, so it takes SIGKILL after the
// grace period.
TEST_F(ZklockTest, DeletedLockNodeStopsTheJobWithKillAfterTheGrace) {
  Process holder(zklock({path_, "-c",
                         "trap '' TERM; echo \"pgid $$\"; echo \"node $ZKLOCK_NODE\"; while :; do sleep 0.05; done"}),
                 merged_output());
  auto pgid_line = holder.wait_for_line("pgid ", scaled(30s));
  ASSERT_TRUE(pgid_line);
  KillAtEnd job{static_cast<pid_t>(number_after(*pgid_line, "pgid ")), true};
  auto line = holder.wait_for_line("node ", scaled(30s));
  ASSERT_TRUE(line);
  const std::string node = line->substr(5);
  const Outcome deleted = run_to_end({python, scripts_dir + "/kazoo_lock.py", servers_, node, "delete"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_EQ(holder.wait(scaled(30s)), 75);
  EXPECT_THAT(holder.read_all(scaled(5s)), HasSubstr("lock node deleted"));
  EXPECT_NE(::kill(-job.pid, 0), 0) << "the job's group outlived zklock";
}

// ---------------------------------------------------------------------------------------------
// The job's whole tree: descendants that left the job's group or session

// A job whose descendants escape its process group: one under coreutils timeout (which moves to a
// group of its own), one under setsid (a session of its own), one started by a shell with job
// control (`set -m`: a group of its own). All append to `file` until stopped. Prints "job <pid>",
// "timed <pid>", "detached <pid>", "monitored <pid>" and "node <lock node>".
// `then` runs after starting them.
std::string escaping_job(const std::filesystem::path& file, const std::string& then = "wait") {
  return fmt::format(
      "echo \"job $$\"; "
      "timeout 60 sh -c 'echo \"timed $$\"; while :; do date +%s%N >> {0}; sleep 0.05; done' & "
      "setsid sh -c 'echo \"detached $$\"; while :; do date +%s%N >> {0}; sleep 0.05; done' & "
      "bash -c 'set -m; (while :; do date +%s%N >> {0}; sleep 0.05; done) & echo \"monitored $!\"; wait' & "
      "echo \"node $ZKLOCK_NODE\"; {1}",
      file.string(), then);
}

// Reads lines until one starting with each prefix was seen; the first such line of each.
std::map<std::string, std::string> lines_starting_with(Process& process, const std::vector<std::string>& prefixes,
                                                       std::chrono::milliseconds timeout) {
  std::map<std::string, std::string> found;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (found.size() < prefixes.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left <= 0ms) break;
    const auto line = process.read_line(left);
    if (!line) break;
    for (const std::string& prefix : prefixes) {
      if (line->starts_with(prefix) && !found.contains(prefix)) found[prefix] = *line;
    }
  }
  return found;
}

// The escaping job's processes, killed at the end of the test whatever happened.
struct EscapedProcesses {
  std::vector<pid_t> pids;
  EscapedProcesses() = default;
  EscapedProcesses(const EscapedProcesses&) = delete;
  EscapedProcesses& operator=(const EscapedProcesses&) = delete;
  ~EscapedProcesses() {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
  }
  std::vector<pid_t> alive() const {
    std::vector<pid_t> out;
    for (pid_t pid : pids) {
      if (process_exists(pid)) out.push_back(pid);
    }
    return out;
  }
};

// Starts the escaping job under `holder`, waits until every part of it runs and writes; returns
// the lock node.
std::string start_escaping_job(Process& holder, const std::filesystem::path& file, EscapedProcesses& escaped) {
  const auto lines = lines_starting_with(holder, {"job ", "timed ", "detached ", "monitored ", "node "}, scaled(30s));
  for (const char* prefix : {"job ", "timed ", "detached ", "monitored "}) {
    if (lines.contains(prefix)) {
      escaped.pids.push_back(static_cast<pid_t>(number_after(lines.at(prefix), prefix)));
    }
  }
  EXPECT_EQ(lines.size(), 5u) << "the job did not start all its parts";
  EXPECT_TRUE(eventually([&] { return std::filesystem::exists(file) && std::filesystem::file_size(file) > 0; }, 10s));
  return lines.contains("node ") ? lines.at("node ").substr(5) : std::string();
}

bool stops_growing(const std::filesystem::path& file) {
  const auto before = std::filesystem::file_size(file);
  std::this_thread::sleep_for(scaled(300ms));
  return std::filesystem::file_size(file) == before;
}

TEST_F(ZklockTest, DescendantsThatLeftTheGroupAreStoppedOnLoss) {
  TempDir dir;
  const auto file = dir.file("writes");
  Process holder(zklock({path_, "-c", escaping_job(file)}), merged_output());
  EscapedProcesses escaped;
  const std::string node = start_escaping_job(holder, file, escaped);
  ASSERT_FALSE(node.empty());
  ASSERT_EQ(escaped.alive().size(), 4u);

  const Outcome deleted = run_to_end({python, scripts_dir + "/kazoo_lock.py", servers_, node, "delete"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_EQ(holder.wait(scaled(30s)), 75);
  // Stopped before zklock exited, not afterwards.
  EXPECT_THAT(escaped.alive(), ::testing::IsEmpty()) << "descendants outlived zklock";
  EXPECT_TRUE(stops_growing(file));
}

TEST_F(ZklockTest, DescendantsThatLeftTheGroupAreStoppedWhenTheCommandExits) {
  TempDir dir;
  const auto file = dir.file("writes");
  // The command itself exits once its escaped children run; they must not keep the lock's work going.
  Process holder(zklock({path_, "-c",
                         escaping_job(file, fmt::format("while [ ! -s {} ]; do sleep 0.01; done; sleep 0.2; exit 5",
                                                         file.string()))}),
                 merged_output());
  EscapedProcesses escaped;
  start_escaping_job(holder, file, escaped);
  EXPECT_EQ(holder.wait(scaled(30s)), 5);
  EXPECT_THAT(escaped.alive(), ::testing::IsEmpty()) << "descendants outlived zklock";
  EXPECT_TRUE(stops_growing(file));
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "true"})).exit_code, 0);
}

// SIGKILL cannot be caught: something that outlives zklock must stop the whole tree. Killing
// zklock's whole process group (as a supervisor might) must not take that something with it.
TEST_F(ZklockTest, ZklockKilledTakesTheJobsWholeTreeWithIt) {
  for (const bool whole_group : {false, true}) {
    SCOPED_TRACE(whole_group ? "kill -9 -PGID" : "kill -9 PID");
    TempDir dir;
    const auto file = dir.file("writes");
    Process holder(zklock({zkr::testenv::unique_path(), "-c", escaping_job(file)}), merged_output());
    EscapedProcesses escaped;
    start_escaping_job(holder, file, escaped);
    ASSERT_EQ(escaped.alive().size(), 4u);

    if (whole_group) {
      holder.signal(SIGKILL);
    } else {
      ::kill(holder.pid(), SIGKILL);
    }
    EXPECT_EQ(holder.wait(scaled(30s)), 128 + SIGKILL);
    EXPECT_TRUE(eventually([&] { return escaped.alive().empty(); }, 10s))
        << "still alive: " << ::testing::PrintToString(escaped.alive());
    EXPECT_TRUE(stops_growing(file));
  }
}

// The keeper killed under a running job while zklock cannot act (stopped): the job goes with the
// keeper all the same, by the parent-death signal set in the process the keeper starts it in. Once
// zklock runs again, its job gone, it ends and lets the lock go.
TEST_F(ZklockTest, KeeperKilledTakesTheJobWithIt) {
  Process holder(zklock({path_, "-c", "echo job $$; exec sleep 600"}), merged_output());
  const auto line = holder.wait_for_line("job ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd job{static_cast<pid_t>(number_after(*line, "job "))};
  const std::vector<pid_t> keepers = zklock::children_of(holder.pid());
  ASSERT_EQ(keepers.size(), 1u) << "zklock has its keeper, and nothing else, as a child";
  ASSERT_EQ(read_file(fmt::format("/proc/{}/comm", keepers[0])), "zklock-keeper\n");
  ::kill(holder.pid(), SIGSTOP);  // zklock itself, not its group: the job must not be stopped
  ::kill(keepers[0], SIGKILL);
  EXPECT_TRUE(eventually([&] { return process_ended(job.pid); }, 10s)) << "the job outlived its keeper";
  ::kill(holder.pid(), SIGCONT);
  EXPECT_TRUE(holder.wait(scaled(30s))) << "zklock kept running without its job";
  EXPECT_TRUE(eventually([&] { return contender_count() == 0; }, 30s));
}

// A duration as zklock's messages write it ("2s", "1.3s", "600ms"), after `prefix` in `line`.
std::chrono::milliseconds duration_after(const std::string& line, std::string_view prefix) {
  std::istringstream in(line.substr(line.find(prefix) + prefix.size()));
  double value = 0;
  std::string unit;
  in >> value >> unit;
  const double ms = unit.starts_with("ms") ? value : value * 1000;
  return std::chrono::milliseconds(static_cast<long long>(ms));
}

long long system_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// zklock alone is paused (a stop signal, a debugger, swap) while its keeper and its job run on.
// The session monitor cannot act, but the keeper's own deadline, renewed by zklock with each proof
// of the session, passes: the keeper stops the job then, at the monitor's deadline, so the job is
// gone before the server can expire the session, and the waiting zklock's job starts only after
// the first job's last write. Thawed, zklock exits with the lost code.
TEST_F(ZklockTest, PausedZklockAloneItsKeeperStopsTheJobBeforeTheNextJobStarts) {
  TempDir dir;
  const auto first_log = dir.file("first"), second_log = dir.file("second");
  Process holder(zklock({"-v", path_, "-c",
                         fmt::format("echo \"job $$\"; while :; do date +%s%N >> {}; sleep 0.02; done", first_log.string())}),
                 merged_output());
  const auto connected = holder.wait_for_line("zklock: connected", scaled(30s));
  ASSERT_TRUE(connected);
  const auto negotiated = duration_after(*connected, "negotiated timeout ");
  const auto lead_time = duration_after(*connected, "lead time ");
  const auto line = holder.wait_for_line("job ", scaled(30s));
  ASSERT_TRUE(line);
  KillAtEnd job{static_cast<pid_t>(number_after(*line, "job ")), true};
  Process waiter(zklock({"-w", scaled_seconds(60s), path_, "-c", fmt::format("date +%s%N > {}", second_log.string())}),
                 merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  ASSERT_TRUE(eventually([&] { return last_stamp(first_log) != 0; }, 10s));

  const long long paused_ns = system_now_ns();
  holder.freeze();  // zklock's own group: zklock alone (the keeper and the job have groups of their own)
  const auto waited = waiter.wait(scaled(60s));
  EXPECT_EQ(waited, 0) << waiter.read_all(scaled(5s));
  const long long last_write = last_stamp(first_log), second_start = last_stamp(second_log);
  ASSERT_NE(second_start, 0);
  EXPECT_LT(last_write, second_start) << "the next job started while the paused zklock's job still wrote ("
                                      << (last_write - second_start) / 1'000'000 << " ms after)";
  // Stopped at the monitor's deadline (at most the silence it tolerates, T - lead time, after the
  // pause) within the grace: before the server could expire the session, a second ahead of it.
  const auto bound = negotiated - lead_time + scaled(300ms) + scaled(200ms);
  EXPECT_LE(last_write - paused_ns, std::chrono::nanoseconds(bound).count())
      << "the job wrote " << (last_write - paused_ns) / 1'000'000 << " ms into zklock's pause";
  EXPECT_TRUE(eventually([&] { return ::kill(-job.pid, 0) != 0; }, 1s)) << "the job outlived the lock";

  holder.thaw();
  EXPECT_EQ(holder.wait(scaled(30s)), 75);
  const std::string said = holder.read_all(scaled(5s));
  EXPECT_THAT(said, HasSubstr("its keeper stopped the job with SIGTERM at the session monitor's deadline"));
  EXPECT_THAT(said, HasSubstr("zklock itself ran again only"));
}

// The keeper's deadline moves on with every proof of the session: a job that runs for many times
// the silence the session tolerates, zklock running beside it, is never stopped by it.
TEST_F(ZklockTest, KeepersDeadlineNeverStopsAJobWhileZklockRuns) {
  const Outcome outcome = run_to_end(zklock({"-v", path_, "-c", fmt::format("sleep {}; echo job-done", scaled_seconds(4s))}));
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_THAT(outcome.output, HasSubstr("job-done"));
  EXPECT_THAT(outcome.output, Not(HasSubstr("lost")));
}

// Signals zklock neither forwards nor expects must not end it (and so orphan the job's lock).
TEST_F(ZklockTest, OtherFatalSignalsDoNotEndZklock) {
  Process holder(zklock({path_, "-c", "echo ready; while :; do sleep 0.05; done"}), merged_output());
  ASSERT_TRUE(holder.wait_for_line("ready", scaled(30s)));
  for (int signal : {SIGALRM, SIGVTALRM, SIGPROF, SIGPOLL, SIGPWR, SIGXFSZ, SIGSTKFLT, SIGRTMIN + 3}) {
    ::kill(holder.pid(), signal);
  }
  EXPECT_FALSE(holder.wait(scaled(500ms))) << "zklock died of a signal it does not handle";
  holder.signal(SIGTERM);
  EXPECT_EQ(holder.wait(scaled(30s)), 128 + SIGTERM);
  EXPECT_EQ(contender_count(), 0);
}

// zklock (with its keeper) frozen past the session while the job runs to its end: at thaw the
// job's exit and the loss are both pending. The lock was lost while the job ran: exit 75, not the
// job's 0.
TEST_F(ZklockTest, JobEndAndLossPendingTogetherGiveTheLostCode) {
  Process holder(zklock({path_, "-c", fmt::format("echo ready; sleep {}", scaled_seconds(1s))}), merged_output());
  ASSERT_TRUE(holder.wait_for_line("ready", scaled(30s)));
  holder.freeze();  // zklock's group; the job runs on in its own and ends
  const Outcome waiter = run_to_end(zklock({"-w", scaled_seconds(60s), path_, "echo", "waiter ran"}));
  EXPECT_EQ(waiter.exit_code, 0) << waiter.output;
  holder.thaw();
  EXPECT_EQ(holder.wait(scaled(30s)), 75);
  EXPECT_THAT(holder.read_all(scaled(5s)), HasSubstr("lost the lock"));
}

// stderr broken (reader gone: EPIPE) or closed: messages fail, but the job is still stopped
// before the session can expire and the waiter be granted, and zklock exits with the lost code.
TEST_F(ZklockTest, BrokenStderrDoesNotSkipStoppingTheJob) {
  int broken[2];
  ASSERT_EQ(::pipe(broken), 0);
  ::close(broken[0]);
  const std::string to_broken_pipe = fmt::format("2>&{}", broken[1]);
  // By default the first message (and failed write) comes with the loss, while the job runs;
  // verbose (the library's log too), from the start. (-E1 only fills the argument's place.)
  for (const auto& [redirect, verbose] : {std::pair{to_broken_pipe, false}, std::pair{to_broken_pipe, true},
                                          std::pair{std::string("2>&-"), true}}) {
    SCOPED_TRACE(redirect + (verbose ? " -v" : ""));
    const std::string path = zkr::testenv::unique_path();
    TempDir dir;
    const auto log = dir.file("log");
    zkr::testenv::Proxy proxy(servers_);
    Process holder({"/bin/sh", "-c", "exec \"$@\" " + redirect, "sh", zklock_binary, verbose ? "-v" : "-E1", "--zk", proxy.address(),
                    "--session-timeout", scaled_seconds(4s), "--kill-after", scaled_seconds(200ms), path, "-c",
                    // The job's own stderr works: a shell writing to a broken one dies of SIGPIPE.
                    fmt::format("exec 2>/dev/null; trap 'echo holder-stopped >> {0}; exit 0' TERM; echo ready; "
                                "while :; do sleep 0.05; done",
                                log.string())},
                   merged_output());
    ASSERT_TRUE(holder.wait_for_line("ready", scaled(30s)));
    Process waiter(zklock({"-w", scaled_seconds(60s), path, "-c",
                           fmt::format("echo waiter-granted >> {0}; echo granted", log.string())}),
                   merged_output());
    ASSERT_TRUE(eventually([&] { return contender_count(path) == 2; }, 30s));
    proxy.blackhole();
    EXPECT_TRUE(waiter.wait_for_line("granted", scaled(60s)));
    EXPECT_EQ(read_file(log), "holder-stopped\nwaiter-granted\n");
    EXPECT_EQ(waiter.wait(scaled(30s)), 0);
    proxy.pass();
    EXPECT_EQ(holder.wait(scaled(60s)), 75);
  }
  ::close(broken[1]);
}

// The job gets the descriptors zklock was given, and none that zklock (or its ZooKeeper client)
// opened for itself: with zklock's server socket a job could write into zklock's session.
TEST_F(ZklockTest, JobInheritsOnlyTheDescriptorsZklockWasGiven) {
  int given[2];
  ASSERT_EQ(::pipe(given), 0);  // without close-on-exec: passed down like any inherited descriptor
  // The shell lists what it has, which is what zklock, exec'd in its place, is given.
  std::vector<std::string> argv = {"/bin/sh", "-c", "ls -l /proc/$$/fd; echo job; exec \"$@\"", "sh"};
  for (const std::string& arg : zklock({path_, "-c", "ls -l /proc/$$/fd"})) argv.push_back(arg);
  const Outcome outcome = run_to_end(argv);
  ::close(given[0]);
  ::close(given[1]);
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;

  // "N -> target" of each listing.
  std::set<std::string> zklock_was_given, job_has;
  std::istringstream lines(outcome.output);
  bool in_job = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "job") in_job = true;
    const auto arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    const std::string descriptor = line.substr(line.rfind(' ', arrow - 1) + 1);
    (in_job ? job_has : zklock_was_given).insert(descriptor);
  }
  ASSERT_FALSE(zklock_was_given.empty()) << outcome.output;
  ASSERT_FALSE(job_has.empty()) << outcome.output;
  bool has_given_pipe = false;
  for (const std::string& descriptor : job_has) {
    has_given_pipe |= descriptor.starts_with(fmt::format("{} -> pipe:", given[1]));
    EXPECT_TRUE(zklock_was_given.contains(descriptor)) << "the job got " << descriptor << ", zklock's own";
  }
  EXPECT_TRUE(has_given_pipe) << outcome.output;
}

// ---------------------------------------------------------------------------------------------
// Errors before the job

TEST_F(ZklockTest, UnreachableEnsembleExits69) {
  const std::string nowhere = fmt::format("127.0.0.1:{}", unused_port());
  const Outcome outcome = run_to_end(
      {zklock_binary, "--zk", nowhere, "--connect-timeout", scaled_seconds(1s), path_, "echo", "ran"});
  EXPECT_EQ(outcome.exit_code, 69);
  EXPECT_THAT(outcome.output, HasSubstr(nowhere));
  EXPECT_THAT(outcome.output, Not(HasSubstr("ran")));
}

// A stopped job would act on the kill signal only after the grace, as SIGKILL: zklock continues it.
TEST_F(ZklockTest, StoppedJobIsContinuedToTakeTheKillSignal) {
  Process holder({zklock_binary, "-q", "--zk", servers_, "--kill-after", scaled_seconds(5s), path_, "-c",
                  "trap 'echo got-term; exit 0' TERM; echo \"pgid $$\"; echo \"node $ZKLOCK_NODE\"; "
                  "while :; do sleep 0.05; done"},
                 merged_output());
  auto pgid_line = holder.wait_for_line("pgid ", scaled(30s));
  ASSERT_TRUE(pgid_line);
  KillAtEnd job{static_cast<pid_t>(number_after(*pgid_line, "pgid ")), true};
  auto line = holder.wait_for_line("node ", scaled(30s));
  ASSERT_TRUE(line);
  ::kill(-job.pid, SIGSTOP);
  const Outcome deleted = run_to_end({python, scripts_dir + "/kazoo_lock.py", servers_, line->substr(5), "delete"});
  ASSERT_EQ(deleted.exit_code, 0) << deleted.output;
  EXPECT_TRUE(holder.wait_for_line("got-term", scaled(4s)));
  EXPECT_EQ(holder.wait(scaled(30s)), 75);
}

TEST_F(ZklockTest, SignalWhileConnectingExits128PlusN) {
  zkr::testenv::Proxy proxy(servers_);
  proxy.blackhole();
  Process process({zklock_binary, "--zk", proxy.address(), "--connect-timeout", "600", path_, "echo", "ran"},
                  merged_output());
  ASSERT_TRUE(eventually([&] { return proxy.connections() > 0; }, 30s));
  process.signal(SIGTERM);
  EXPECT_EQ(process.wait(scaled(30s)), 128 + SIGTERM);
  EXPECT_THAT(process.read_all(scaled(5s)), HasSubstr("interrupted by SIGTERM while connecting"));
}

TEST_F(ZklockTest, BadLockPathsExit64NamingThePath) {
  for (const std::string bad : {"relative/path", "/trailing/", "/double//slash", "/zookeeper/quota", "/a/./b"}) {
    const Outcome outcome = run_to_end(zklock({bad, "echo", "ran"}));
    EXPECT_EQ(outcome.exit_code, 64) << bad;
    EXPECT_THAT(outcome.output, HasSubstr("'" + bad + "'"));
    EXPECT_THAT(outcome.output, Not(HasSubstr("ran")));
  }
  EXPECT_EQ(run_to_end(zklock({"--list", "no-slash"})).exit_code, 64);
}

TEST_F(ZklockTest, BadOptionValuesExit64NamingTheOption) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kill-after", "soon"}, "--kill-after"},
      {{"-w", "-2"}, "--wait"},
      {{"-E", "300"}, "--conflict-exit-code"},
      {{"--kill-signal", "NOSUCH"}, "--kill-signal"},
      {{"--no-such-option"}, "no-such-option"},
      {{"--zk", "127.0.0.1:notaport"}, "--zk"},
      {{"--auth-file", "/nonexistent/zklock-auth"}, "/nonexistent/zklock-auth"},
      // Control characters in the input are shown escaped: no forged second line, no escapes.
      {{"--bogus\nzklock: acquired\x1b[2J"}, "--bogus\\x0azklock: acquired\\x1b[2J"},
      // An option name that would send the option parser into a loop is refused by name.
      {{"--x%canonical_option%"}, "--x%canonical_option%"},
      {{"-%canonical_option%"}, "-%canonical_option%"},
  };
  for (const auto& [options, named] : cases) {
    std::vector<std::string> argv = {zklock_binary};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(), {path_, "echo", "ran"});
    const Outcome outcome = run_to_end(argv);
    EXPECT_EQ(outcome.exit_code, 64) << named;
    EXPECT_THAT(outcome.output, HasSubstr(named));
    EXPECT_THAT(outcome.output, Not(HasSubstr("ran")));
    EXPECT_EQ(std::count(outcome.output.begin(), outcome.output.end(), '\n'), 1) << outcome.output;
  }
  EXPECT_EQ(run_to_end({zklock_binary}).exit_code, 64);
}

TEST_F(ZklockTest, AclRefusalExits77AndCredentialsFromAFileWork) {
  TempDir dir;
  ASSERT_EQ(run_to_end({python, scripts_dir + "/acl_node.py", servers_, path_, "owner", "secret"}).exit_code, 0);

  const Outcome refused = run_to_end(zklock({path_, "echo", "ran"}));
  EXPECT_EQ(refused.exit_code, 77) << refused.output;
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));

  const auto credentials = dir.file("credentials");
  std::ofstream(credentials) << "owner:secret\n";
  const Outcome allowed = run_to_end(zklock({"--auth-file", credentials.string(), path_, "echo", "ran"}));
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_THAT(allowed.output, HasSubstr("ran"));
  EXPECT_THAT(allowed.output, Not(HasSubstr("secret")));
}

TEST_F(ZklockTest, VerboseReportsTokenAndSession) {
  const Outcome outcome = run_to_end(zklock({"-v", path_, "-c", "echo \"token=$ZKLOCK_FENCING_TOKEN\""}));
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const long long token = number_after(outcome.output, "token=");
  EXPECT_THAT(outcome.output, HasSubstr(fmt::format("token {}, node {}/", token, path_)));
  EXPECT_THAT(outcome.output, ::testing::ContainsRegex("connected to .*session 0x[0-9a-f]+"));
  EXPECT_THAT(outcome.output, HasSubstr("released " + path_));
}

TEST_F(ZklockTest, JobCanUseTheTerminal) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "needs script(1) for a pseudo-terminal";
  // Under a pseudo-terminal the job's group becomes the foreground group: it can read the terminal
  // (a background group reading it would be stopped by SIGTTIN).
  std::string inner;
  for (const std::string& arg : zklock({path_, "sh", "-c", "read line; echo \"got:$line\""})) inner += "'" + arg + "' ";
  Process::Options options = merged_output();
  options.pipe_stdin = true;
  Process terminal({"/usr/bin/script", "-qec", inner, "/dev/null"}, options);
  terminal.write_stdin("typed\n");
  EXPECT_TRUE(terminal.wait_for_line("got:typed", scaled(30s)));
  EXPECT_EQ(terminal.wait(scaled(30s)), 0);
}

TEST_F(ZklockTest, HelpAndVersion) {
  const Outcome help = run_to_end({zklock_binary, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--kill-after"));
  const Outcome version = run_to_end({zklock_binary, "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.output, HasSubstr("zklock"));
}

// ---------------------------------------------------------------------------------------------
// --list

TEST_F(ZklockTest, ListShowsHolderAndWaitersAsTextAndJson) {
  std::string held;
  auto holder = start_holder({"--owner", "holder-of-test"}, &held);
  const long long token = number_after(held, "held ");
  Process waiter(zklock({"--owner", "waiter-of-test", path_, "true"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));

  const Outcome text = list();
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_THAT(text.output, HasSubstr(path_ + ": 1 holder, 1 waiter"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("holder .*" + std::to_string(token) + " .*holder-of-test"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("waiter .*waiter-of-test"));

  const Outcome json = list({"--json"});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_THAT(json.output, HasSubstr(fmt::format("\"token\":{},", token)));
  EXPECT_THAT(json.output, ::testing::ContainsRegex(R"("owner":"holder-of-test","since":"[^"]+Z","holds":true)"));
  EXPECT_THAT(json.output, ::testing::ContainsRegex(R"("owner":"waiter-of-test","since":"[^"]+Z","holds":false)"));
  EXPECT_LT(json.output.find("holder-of-test"), json.output.find("waiter-of-test"));

  holder->signal(SIGTERM);
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  EXPECT_THAT(list().output, HasSubstr(path_ + ": free"));
}

// -z @FILE end to end: the servers come from the file, and the job's ZKLOCK_SERVERS is the list read.
TEST_F(ZklockTest, ServersFromAFileReachTheEnsembleAndTheJob) {
  const std::string file = testing::TempDir() + "zklock-servers-" + std::to_string(::getpid());
  std::ofstream(file) << "# the test's ensemble\n" << servers_ << "\n";
  const Outcome run = run_to_end({zklock_binary, "-z", "@" + file, "--session-timeout", scaled_seconds(2s), path_, "sh",
                                  "-c", "echo \"servers=$ZKLOCK_SERVERS\""});
  std::remove(file.c_str());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("servers=" + servers_));
}

// -z @FILE is read again while the job runs: the file rewritten to the two other servers, the
// server zklock started on stops, and the job runs on (a zklock that kept the list it started
// with would lose its session and stop the job, exit 75). A rewrite naming another chroot is
// reported and changes nothing.
TEST_F(ZklockTest, AServersFileRewrittenWhileTheJobRunsMovesItsSessionAndKeepsTheJob) {
  Cluster cluster({.servers = 3});
  // zklock starts on a follower, the one stopped below: the leader's stop would stop the job
  // whenever the election outlasts the lead time (docs/operations.md), which is not this test's.
  const int first = cluster.follower(scaled(30s));
  const auto others = cluster.addresses_except(first);
  const std::string file = testing::TempDir() + "zklock-servers-follow-" + std::to_string(::getpid());
  // Rewritten as configuration management does: a new file renamed over the old one.
  auto write_servers = [&](const std::string& text) {
    std::ofstream(file + ".new") << text;
    ASSERT_EQ(std::rename((file + ".new").c_str(), file.c_str()), 0);
  };
  write_servers(cluster.server_address(first) + "\n");
  // A 10 s session: a shorter one can be lost to a loaded machine's pauses before the file changes.
  Process holder({zklock_binary, "-z", "@" + file, "--session-timeout", "10", path_, "sh", "-c",
                  "echo \"held $ZKLOCK_FENCING_TOKEN\"; exec sleep 600"},
                 merged_output());
  KillAtEnd stop_holder{holder.pid(), true};
  std::string said;  // every line zklock and the job printed, for a failure's message
  auto wait_for = [&](std::string_view prefix, std::chrono::milliseconds bound) -> std::optional<std::string> {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    while (std::chrono::steady_clock::now() < deadline) {
      auto line = holder.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now()));
      if (!line) break;
      said += *line + "\n";
      if (line->starts_with(prefix)) return line;
    }
    return std::nullopt;
  };
  ASSERT_TRUE(wait_for("held ", scaled(30s))) << said;

  write_servers("# the first server retired\n" + others[0] + "\n" + others[1] + "\n");
  const auto moved = wait_for("zklock: servers now", scaled(20s));
  if (!moved) {
    said += holder.read_all(1s);
    const auto ended = holder.wait(0ms);
    FAIL() << "zklock never took the rewritten file; it said:\n"
           << said << (ended ? fmt::format("(it ended with status {})", *ended) : "(it still runs)");
  }
  EXPECT_THAT(*moved, HasSubstr(cluster.connect_string_except(first) + " (read from " + file + ")"));
  cluster.stop(first);
  std::this_thread::sleep_for(12s);  // past the 10 s session: lost by now if it were still on the first server
  EXPECT_FALSE(holder.wait(0ms)) << "the job ended: " << holder.read_all(1s);

  write_servers(others[0] + "/elsewhere\n");
  const auto refused = wait_for("zklock: keeping the servers", scaled(20s));
  ASSERT_TRUE(refused) << said;
  EXPECT_THAT(*refused, HasSubstr("the chroot cannot change"));
  const std::string live = cluster.connect_string_except(first);
  EXPECT_EQ(contenders_listed(run_to_end(zklock({"--list", path_, "--json"}, live))), 1) << "the lock is not held";

  holder.signal(SIGTERM);
  EXPECT_EQ(holder.wait(scaled(10s)), 128 + SIGTERM);
  std::remove(file.c_str());
}

TEST_F(ZklockTest, DefaultOwnerNamesHostPidAndCommand) {
  auto holder = start_holder();
  const Outcome json = list({"--json"});
  EXPECT_THAT(json.output, ::testing::ContainsRegex(R"("owner":"[^":]+:[0-9]+:sh -c echo )"));
}

// --list on the other recipes' paths: what is there is recognised and shown, never taken for a
// free lock; what no recipe writes is named as such.

class ZklockRecipeListTest : public ZklockTest {
 protected:
  void SetUp() override {
    zkr::SessionOptions options;
    options.servers = servers_;
    options.session_timeout = scaled(4s);
    session_ = std::make_unique<zkr::Session>(options);
  }
  std::unique_ptr<zkr::Session> session_;
};

// --list PREFIX --recursive: every lock and recipe under the prefix, in path order, one block (or
// one JSON object) each; plain nodes on the way and free lock paths are passed over.
TEST_F(ZklockRecipeListTest, ListRecursiveShowsEveryLockAndRecipeUnderThePrefix) {
  const std::string lock_path = path_ + "/jobs/nightly";
  auto holder = std::make_unique<Process>(
      zklock({"--owner", "nightly-holder", lock_path, "sh", "-c", "echo held; exec sleep 600"}), merged_output());
  ASSERT_TRUE(holder->wait_for_line("held", scaled(30s)));
  Process waiter(zklock({"--owner", "nightly-waiter", lock_path, "true"}), merged_output());
  zkr::Lock other(*session_, path_ + "/jobs/other");
  other.acquire().release();  // a free lock path
  session_->create(path_ + "/plain", "no recipe");
  zkr::GroupMember member(*session_, path_ + "/services/web", "web-1", "10.0.0.1");
  member.join();
  ASSERT_TRUE(eventually([&] { return session_->children(lock_path).size() == 2; }, 30s));

  const Outcome text = run_to_end(zklock({"--list", path_, "--recursive"}));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(lock_path + ": 1 holder, 1 waiter"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("holder .*nightly-holder"));
  EXPECT_THAT(text.output, HasSubstr(path_ + "/services/web: a group (curator layout), 1 member"));
  EXPECT_LT(text.output.find(lock_path), text.output.find(path_ + "/services/web"));
  EXPECT_THAT(text.output, Not(HasSubstr(path_ + "/plain")));
  EXPECT_THAT(text.output, Not(HasSubstr(path_ + "/jobs/other")));
  EXPECT_THAT(text.output, Not(HasSubstr(path_ + ": ")));  // the prefix itself holds nothing

  const Outcome json = run_to_end(zklock({"--list", path_, "--recursive", "--json"}));
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, ::testing::StartsWith(fmt::format(R"({{"observed":")")));
  EXPECT_THAT(json.output, HasSubstr(fmt::format(R"("prefix":"{}","complete":true,"paths":[{{"path":"{}","exists":true,)", path_,
                                                 lock_path)));
  EXPECT_THAT(json.output, ::testing::ContainsRegex(R"("owner":"nightly-waiter","since":"[^"]+Z","holds":false)"));
  EXPECT_THAT(json.output, HasSubstr(R"("kind":"group","layout":"curator","members":[{"id":"web-1","data":"10.0.0.1")"));
  EXPECT_EQ(std::count(json.output.begin(), json.output.end(), '\n'), 1) << "one line";

  const Outcome missing = run_to_end(zklock({"--list", path_ + "/nowhere", "--recursive"}));
  EXPECT_EQ(missing.exit_code, 66);
  EXPECT_THAT(missing.output, HasSubstr(path_ + "/nowhere: does not exist"));
  const Outcome none = run_to_end(zklock({"--list", path_ + "/plain", "--recursive"}));
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_THAT(none.output, HasSubstr(path_ + "/plain: no lock or recipe under it"));
  holder->signal(SIGTERM);
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
}

// --prometheus prints the listing as metrics; --listen serves them, with at most --max-locks paths'
// series, answered from the last walk while the exporter's watches saw no change under the prefix,
// and read again after one.
TEST_F(ZklockRecipeListTest, ListenServesTheLocksAsPrometheusMetricsReadingAgainOnlyAfterAChange) {
  const std::string busy = path_ + "/jobs/busy";
  auto holder = std::make_unique<Process>(zklock({"--owner", "busy-holder", busy, "sh", "-c", "echo held; exec sleep 600"}),
                                          merged_output());
  ASSERT_TRUE(holder->wait_for_line("held", scaled(30s)));
  Process waiter(zklock({busy, "true"}), merged_output());
  zkr::GroupMember member(*session_, path_ + "/services/web", "web-1", "10.0.0.1");
  member.join();
  ASSERT_TRUE(eventually([&] { return session_->children(busy).size() == 2; }, 30s));
  const std::string labels = fmt::format(R"(lock="{}",kind="lock")", busy);

  const Outcome once = run_to_end(zklock({"--list", path_, "-r", "--prometheus"}));
  EXPECT_EQ(once.exit_code, 0) << once.output;
  EXPECT_THAT(once.output, HasSubstr("# TYPE zklock_lock_holders gauge\nzklock_lock_holders{" + labels + "} 1\n"));
  EXPECT_THAT(once.output, HasSubstr("zklock_lock_waiters{" + labels + "} 1\n"));
  EXPECT_THAT(once.output, ::testing::ContainsRegex("zklock_lock_oldest_wait_seconds\\{lock=\"[^\"]+/jobs/busy\",kind=\"lock\"\\} [0-9.e+-]+\n"));
  EXPECT_THAT(once.output, HasSubstr(fmt::format(R"(zklock_group_members{{lock="{}/services/web",kind="group"}} 1)", path_)));
  EXPECT_THAT(once.output, HasSubstr("zklock_listing_up 1\n"));

  Process exporter(zklock({"--list", path_, "--recursive", "--listen", "127.0.0.1:0", "--max-locks", "1"}), merged_output());
  const auto serving = exporter.wait_for_line("serving the locks under", scaled(30s));
  ASSERT_TRUE(serving) << "the exporter never said where it listens";
  const auto colon = serving->rfind(':');
  const int port = std::stoi(serving->substr(colon + 1));
  const std::string scrape = http_get(port, "/metrics");
  EXPECT_THAT(scrape, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(scrape, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(scrape, HasSubstr("zklock_lock_holders{" + labels + "} 1\n"));
  EXPECT_THAT(scrape, Not(HasSubstr("zklock_group_members{")));  // past --max-locks 1
  EXPECT_THAT(scrape, HasSubstr("zklock_listing_paths_dropped 1\n"));
  EXPECT_THAT(once.output, Not(HasSubstr("zklock_listing_walks_total")));  // the exporter's alone

  // Once its watches are set (the first scrapes may read again while they load), nothing changes
  // under the prefix and each scrape is answered from the last walk, measured to now.
  auto samples_of = [](const std::string& response) {
    return zkr::test::read_exposition(response.substr(response.find("\r\n\r\n") + 4));
  };
  auto scraped = [&](std::string_view series) {
    return zkr::test::sample_value(samples_of(http_get(port, "/metrics")), series, {});
  };
  std::optional<double> before, after;
  ASSERT_TRUE(eventually(
      [&] {
        before = scraped("zklock_listing_walks_total");
        std::this_thread::sleep_for(50ms);
        after = scraped("zklock_listing_walks_total");
        return before && before == after;
      },
      30s))
      << "every scrape walked the prefix again: " << before.value_or(-1) << ", then " << after.value_or(-1);
  const double walks = *after;
  const auto first_timestamp = scraped("zklock_listing_timestamp_seconds");
  ASSERT_TRUE(first_timestamp);
  for (int scrape_again = 0; scrape_again < 3; ++scrape_again) {
    std::this_thread::sleep_for(50ms);
    const std::string again = http_get(port, "/metrics");
    const auto samples = samples_of(again);
    EXPECT_EQ(zkr::test::sample_value(samples, "zklock_listing_walks_total", {}), walks) << again;
    EXPECT_GT(zkr::test::sample_value(samples, "zklock_listing_timestamp_seconds", {}).value_or(0), *first_timestamp);
    EXPECT_THAT(again, HasSubstr("zklock_lock_holders{" + labels + "} 1\n"));
  }

  holder->signal(SIGTERM);  // the waiter takes the lock and ends: the watches see it, the next scrape reads it
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  ASSERT_TRUE(eventually([&] { return http_get(port, "/metrics").find("zklock_lock_holders{") == std::string::npos; }, 30s))
      << "the freed lock is still listed";
  EXPECT_GT(scraped("zklock_listing_walks_total").value_or(0), walks);
  EXPECT_THAT(http_get(port, "/other"), ::testing::StartsWith("HTTP/1.1 404 "));

  const Outcome taken = run_to_end(zklock({"--list", path_, "-r", "--listen", fmt::format("127.0.0.1:{}", port)}));
  EXPECT_EQ(taken.exit_code, 64);
  EXPECT_THAT(taken.output, HasSubstr(fmt::format("cannot listen on 127.0.0.1:{}", port)));
  exporter.signal(SIGTERM);
  EXPECT_EQ(exporter.wait(scaled(10s)), 0);
}

// A real Prometheus (Debian's) scrapes the exporter and evaluates the shipped rule for a lock held
// too long, its threshold and wait lowered to nothing; promtool finds the scraped text valid.
TEST_F(ZklockRecipeListTest, ARealPrometheusScrapesTheExporterAndFiresTheHeldTooLongRule) {
  ASSERT_TRUE(std::filesystem::exists("/usr/bin/prometheus") && std::filesystem::exists("/usr/bin/promtool"))
      << "Debian's prometheus package is missing (scripts/install-deps installs it)";
  const std::string stuck = path_ + "/jobs/stuck";
  auto holder = std::make_unique<Process>(zklock({stuck, "sh", "-c", "echo held; exec sleep 600"}), merged_output());
  ASSERT_TRUE(holder->wait_for_line("held", scaled(30s)));
  Process exporter(zklock({"--list", path_, "--recursive", "--listen", "127.0.0.1:0"}), merged_output());
  const auto serving = exporter.wait_for_line("serving the locks under", scaled(30s));
  ASSERT_TRUE(serving);
  const int port = std::stoi(serving->substr(serving->rfind(':') + 1));

  const std::string scrape = http_get(port, "/metrics");
  const std::string dir = testing::TempDir() + fmt::format("zklock-prometheus-{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/scrape.prom") << scrape.substr(scrape.find("\r\n\r\n") + 4);
  const Outcome checked = run_to_end({"sh", "-c", "promtool check metrics < " + dir + "/scrape.prom"});
  EXPECT_EQ(checked.exit_code, 0) << checked.output;

  std::ifstream shipped(ZKLOCK_ALERT_RULES);
  std::string rules((std::istreambuf_iterator<char>(shipped)), std::istreambuf_iterator<char>());
  const std::string threshold = "zklock_lock_held_seconds > 6 * 3600\n        for: 5m";
  ASSERT_NE(rules.find(threshold), std::string::npos) << "the shipped rule changed: update this test";
  rules.replace(rules.find(threshold), threshold.size(), "zklock_lock_held_seconds > 0\n        for: 0s");
  std::ofstream(dir + "/rules.yml") << rules;
  std::ofstream(dir + "/prometheus.yml") << fmt::format(
      "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\n"
      "rule_files: [{}/rules.yml]\n"
      "scrape_configs:\n  - job_name: zklock\n    static_configs: [{{targets: ['127.0.0.1:{}']}}]\n",
      dir, port);
  const int web = unused_port();
  Process prometheus({"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                      fmt::format("--web.listen-address=127.0.0.1:{}", web)},
                     merged_output());
  std::string alerts, log;
  // Prometheus's start (its storage, the rule files) is slow on a loaded machine: bounded generously.
  const bool fired = eventually(
      [&] {
        log += prometheus.read_all(1ms);  // its log must not fill the pipe
        alerts = http_get(web, "/api/v1/alerts");
        return alerts.find(R"("alertname":"ZklockLockHeldTooLong")") != std::string::npos &&
               alerts.find(R"("state":"firing")") != std::string::npos &&
               alerts.find(fmt::format(R"("lock":"{}")", stuck)) != std::string::npos;
      },
      scaled(150s));
  EXPECT_TRUE(fired) << "Prometheus never fired the rule; its alerts:\n"
                     << alerts << "\nits scrape targets:\n" << http_get(web, "/api/v1/targets")
                     << "\nthe end of its log:\n" << log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  exporter.signal(SIGTERM);
  EXPECT_EQ(exporter.wait(scaled(10s)), 0);
  std::filesystem::remove_all(dir);
}

TEST_F(ZklockRecipeListTest, ListShowsGroupMembersInEachLayout) {
  zkr::GroupMember a(*session_, path_ + "/curator", "member-a", "data of a");
  zkr::GroupMember b(*session_, path_ + "/curator", "member-b", "data of b");
  zkr::GroupMember party(*session_, path_ + "/party", "kazoo-party-id", {}, {.layout = zkr::GroupLayout::kazoo_party});
  zkr::GroupMember shallow(*session_, path_ + "/shallow", "shallow-id", {},
                           {.layout = zkr::GroupLayout::kazoo_shallow_party});
  for (auto* member : {&a, &b, &party, &shallow}) member->join();
  const std::string session = zkr::session_id_text(session_->id());

  const Outcome text = run_to_end(zklock({"--list", path_ + "/curator"}));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(path_ + "/curator: a group (curator layout), 2 members"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("member-a +" + session + " .*data of a +member-a"));
  EXPECT_THAT(text.output, Not(HasSubstr("not a contender")));
  EXPECT_THAT(text.output, Not(HasSubstr("free")));
  const Outcome json = run_to_end(zklock({"--list", path_ + "/curator", "--json"}));
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr(R"("not_contenders":[],"recipe":{"kind":"group","layout":"curator","members":[)"
                                     R"({"id":"member-a","data":"data of a","node":"member-a",)"));
  EXPECT_THAT(json.output, HasSubstr(fmt::format(R"("session":"{}")", session)));

  const Outcome kazoo = run_to_end(zklock({"--list", path_ + "/party", "--json"}));
  EXPECT_THAT(kazoo.output, ::testing::ContainsRegex(
                                R"("kind":"group","layout":"kazoo_party","members":\[\{"id":"kazoo-party-id","data":"kazoo-party-id","node":"[0-9a-f]{32}__party__")"));
  const Outcome shallow_text = run_to_end(zklock({"--list", path_ + "/shallow"}));
  EXPECT_THAT(shallow_text.output, HasSubstr(path_ + "/shallow: a group (kazoo_shallow_party layout), 1 member"));
  EXPECT_THAT(shallow_text.output, ::testing::ContainsRegex("shallow-id +" + session));

  a.leave();
  b.leave();
  ASSERT_TRUE(eventually([&] { return run_to_end(zklock({"--list", path_ + "/curator"})).output.find("free") !=
                                      std::string::npos; }, 10s))
      << "an empty group's container is a free path like any other";
}

TEST_F(ZklockRecipeListTest, ListShowsACountersValueAndLayout) {
  const std::pair<zkr::CounterLayout, std::string> layouts[] = {
      {zkr::CounterLayout::curator_atomic_long, "curator_atomic_long"},
      {zkr::CounterLayout::curator_shared_count, "curator_shared_count"},
      {zkr::CounterLayout::kazoo, "kazoo"}};
  for (const auto& [layout, name] : layouts) {
    const std::string path = path_ + "/" + name;
    zkr::SharedCounter counter(*session_, path, {.layout = layout});
    counter.add(-42);
    const Outcome text = run_to_end(zklock({"--list", path}));
    EXPECT_EQ(text.exit_code, 0) << text.output;
    EXPECT_THAT(text.output, HasSubstr(fmt::format("{}: a counter, -42 ({} layout)", path, name)));
    EXPECT_THAT(text.output, HasSubstr("data version 0"));
    const Outcome json = run_to_end(zklock({"--list", path, "--json"}));
    EXPECT_THAT(json.output, HasSubstr(fmt::format(R"("recipe":{{"kind":"counter","data_version":0,"bytes":{},"values":[{{"layout":"{}","value":-42}}]}})",
                                                   name == "kazoo" ? 3 : name == "curator_shared_count" ? 4 : 8, name)));
  }
  // Four digits are a kazoo counter's text, and would be a SharedCount's four bytes too: the Curator
  // layouts refuse data that reads as a number in text, so only kazoo's reading is named.
  const std::string digits = path_ + "/digits";
  zkr::SharedCounter(*session_, digits, {.layout = zkr::CounterLayout::kazoo}).set(1234);
  EXPECT_THAT(run_to_end(zklock({"--list", digits})).output, HasSubstr("a counter, 1234 (kazoo layout); data"));
  // Data no counter layout reads is named, not guessed.
  const std::string other = path_ + "/other";
  session_->create(other, "2.5");
  const Outcome unknown = run_to_end(zklock({"--list", other}));
  EXPECT_EQ(unknown.exit_code, 0) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr(other + ": no contender, no children; data \"2.5\" (3 bytes), which no counter layout reads"));
  EXPECT_THAT(run_to_end(zklock({"--list", other, "--json"})).output,
              HasSubstr(R"("recipe":{"kind":"unrecognised","data_version":0,"bytes":3})"));
}

TEST_F(ZklockRecipeListTest, ListShowsBarriersAndDoubleBarrierParticipants) {
  zkr::Barrier barrier(*session_, path_ + "/barrier");
  barrier.set();
  // Its node looks like a free lock path's (ZooKeeper shows a client no difference between a
  // container and a persistent node): both readings are said.
  EXPECT_THAT(run_to_end(zklock({"--list", path_ + "/barrier"})).output,
              HasSubstr(path_ + "/barrier: free (no holder, no waiters); read as a barrier: up"));
  EXPECT_THAT(run_to_end(zklock({"--list", path_ + "/barrier", "--json"})).output,
              HasSubstr(R"("recipe":{"kind":"empty","barrier":"up"})"));
  barrier.remove();
  const Outcome down = run_to_end(zklock({"--list", path_ + "/barrier"}));
  EXPECT_EQ(down.exit_code, 66) << "a barrier that is down has no node";
  EXPECT_THAT(down.output, HasSubstr(path_ + "/barrier: does not exist; read as a barrier: down"));
  EXPECT_THAT(run_to_end(zklock({"--list", path_ + "/barrier", "--json"})).output,
              HasSubstr(R"("exists":false,"contenders":[],"not_contenders":[],"recipe":{"kind":"missing","barrier":"down"})"));

  const std::string doubled = path_ + "/double";
  zkr::DoubleBarrier first(*session_, doubled, 2, "first-participant");
  std::promise<std::error_code> entered;
  first.async_enter(scaled(30s), [&](std::error_code ec) { entered.set_value(ec); });
  ASSERT_TRUE(eventually([&] { return run_to_end(zklock({"--list", doubled})).output.find("1 participant") != std::string::npos; }, 10s));
  const Outcome waiting = run_to_end(zklock({"--list", doubled}));
  EXPECT_THAT(waiting.output, HasSubstr(doubled + ": a double barrier, 1 participant, not ready"));
  EXPECT_THAT(waiting.output, HasSubstr("first-participant"));

  zkr::DoubleBarrier second(*session_, doubled, 2, "second-participant");
  ASSERT_TRUE(second.enter(scaled(30s)));
  ASSERT_EQ(entered.get_future().get(), std::error_code());
  EXPECT_THAT(run_to_end(zklock({"--list", doubled})).output, HasSubstr(doubled + ": a double barrier, 2 participants, ready"));
  const Outcome json = run_to_end(zklock({"--list", doubled, "--json"}));
  EXPECT_THAT(json.output, HasSubstr(R"("recipe":{"kind":"double_barrier","ready":true,"participants":[{"data":)"));
  EXPECT_THAT(json.output, HasSubstr(R"("not_contenders":[])"));
}

// ---------------------------------------------------------------------------------------------
// Interop: kazoo on the same path

TEST_F(ZklockTest, SharesTheLockWithKazoo) {
  Process::Options with_stdin = merged_output();
  with_stdin.pipe_stdin = true;
  Process kazoo({python, scripts_dir + "/kazoo_lock.py", servers_, path_, "hold"}, with_stdin);
  ASSERT_TRUE(kazoo.wait_for_line("held", scaled(30s)));
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "echo", "ran"})).exit_code, 1);
  kazoo.close_stdin();
  EXPECT_TRUE(kazoo.wait_for_line("released", scaled(30s)));
  EXPECT_EQ(kazoo.wait(scaled(30s)), 0);
  EXPECT_EQ(run_to_end(zklock({"-n", path_, "true"})).exit_code, 0);

  // And the other way round: kazoo sees zklock's node as a contender. The holder's session is
  // twice the others': with 2 s, a loaded machine once cost it the lock before kazoo looked (its
  // job stopped, its node gone, kazoo rightly acquired).
  Process holder({zklock_binary, "--zk", servers_, "--session-timeout", scaled_seconds(4s), "--kill-after",
                  scaled_seconds(300ms), path_, "sh", "-c", "echo held; exec sleep 600"},
                 merged_output());
  KillAtEnd stop_holder{holder.pid(), true};
  ASSERT_TRUE(holder.wait_for_line("held", scaled(30s)));
  const Outcome kazoo_try = run_to_end({python, scripts_dir + "/kazoo_lock.py", servers_, path_, "try"});
  EXPECT_EQ(kazoo_try.exit_code, 0) << kazoo_try.output;
  const auto ended = holder.wait(0ms);
  EXPECT_THAT(kazoo_try.output, HasSubstr("busy"))
      << "the holder " << (ended ? "had ended: " + holder.read_all(1s) : std::string("still ran"));
}

// ---------------------------------------------------------------------------------------------
// Input: names under a lock path, paths the server refuses, --list of what does not exist

// "zklock /q/report-lock-0000000000 true" leaves a container under /q whose name ends like a
// contender's: it is reported, never taken for a holder of /q.
TEST_F(ZklockTest, ChildNamedAlmostLikeAContenderIsNoHolder) {
  const std::string stray = path_ + "/report-lock-0000000000";
  EXPECT_EQ(run_to_end(zklock({stray, "true"})).exit_code, 0);
  const Outcome nonblocking = run_to_end(zklock({"-n", path_, "echo", "ran"}));
  EXPECT_EQ(nonblocking.exit_code, 0) << nonblocking.output;
  EXPECT_THAT(nonblocking.output, HasSubstr("ran"));

  const Outcome text = list();
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(path_ + ": free"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("not a contender.*report-lock-0000000000"));
  const Outcome json = list({"--json"});
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr(R"("contenders":[])"));
  EXPECT_THAT(json.output, HasSubstr(R"("not_contenders":["report-lock-0000000000"])"));
  // The library's log says so too (zklock shows it with -v), once per listing.
  const Outcome verbose = list({"-v"});
  EXPECT_EQ(verbose.exit_code, 0) << verbose.output;
  const std::string warning = "1 child is not named like a contender node, never a holder: 'report-lock-0000000000'";
  EXPECT_THAT(verbose.output, HasSubstr(warning));
  EXPECT_EQ(verbose.output.find(warning), verbose.output.rfind(warning));

  // A path whose component would be read as a contender of its parent is refused outright.
  const Outcome refused = run_to_end(zklock({path_ + "/lock-0000000000", "echo", "ran"}));
  EXPECT_EQ(refused.exit_code, 64) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("contender"));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
}

// The server refuses these paths (ZBADARGUMENTS); zklock refuses them first, as usage errors
// naming the character, and never writes a raw C1 control or a stray byte to the terminal.
TEST_F(ZklockTest, PathsTheServerRefusesExit64NamingTheCharacter) {
  const std::pair<std::string, std::string> cases[] = {
      {path_ + "/a\xc2\x9b" "31m", "U+009B"},  // C1 CSI: an escape sequence on many terminals
      {path_ + "/a\xc2\x85", "U+0085"},
      {path_ + "/a\xff", "0xFF"},
      {path_ + "/a\xed\xa0\x80", "U+D800"},
      {path_ + "/a\xef\xbf\xbe", "U+FFFE"},
  };
  for (const auto& [bad, character] : cases) {
    for (const bool listing : {false, true}) {
      const Outcome outcome =
          run_to_end(listing ? zklock({"--list", bad}) : zklock({bad, "echo", "ran"}));
      EXPECT_EQ(outcome.exit_code, 64) << outcome.output;
      EXPECT_THAT(outcome.output, HasSubstr(character));
      EXPECT_THAT(outcome.output, Not(HasSubstr("ran")));
      EXPECT_THAT(outcome.output, Not(HasSubstr("\xc2\x9b")));
      EXPECT_THAT(outcome.output, Not(HasSubstr("\xc2\x85")));
      EXPECT_THAT(outcome.output, Not(HasSubstr("\xff")));
      EXPECT_THAT(outcome.output, Not(HasSubstr("\xed\xa0\x80")));
    }
  }
  const Outcome escaped = run_to_end(zklock({path_ + "/a\xc2\x9b" "31m", "true"}));
  EXPECT_THAT(escaped.output, HasSubstr("/a\\xc2\\x9b31m"));
}

// Monitoring built on "--list --json" must not read a missing path (or chroot) as "free".
TEST_F(ZklockTest, ListOfAPathOrChrootThatDoesNotExistSaysSo) {
  const Outcome text = list();
  EXPECT_EQ(text.exit_code, 66) << text.output;
  EXPECT_THAT(text.output, HasSubstr(path_ + ": does not exist"));
  EXPECT_THAT(text.output, Not(HasSubstr("free")));
  const Outcome json = list({"--json"});
  EXPECT_EQ(json.exit_code, 66) << json.output;
  EXPECT_THAT(json.output, HasSubstr(R"("exists":false)"));

  const std::string missing_chroot = servers_ + path_ + "-chroot";
  const Outcome chrooted = run_to_end(zklock({"--list", "/jobs"}, missing_chroot));
  EXPECT_EQ(chrooted.exit_code, 66) << chrooted.output;
  EXPECT_THAT(chrooted.output, HasSubstr("does not exist"));
  EXPECT_THAT(chrooted.output, HasSubstr(path_ + "-chroot"));

  // Locking under it is a configuration error (64) that names what to create; it creates nothing.
  const Outcome locked = run_to_end(zklock({"/jobs", "true"}, missing_chroot));
  EXPECT_EQ(locked.exit_code, 64) << locked.output;
  EXPECT_THAT(locked.output, HasSubstr("chroot node does not exist (create it first)"));
  EXPECT_EQ(run_to_end(zklock({"--list", path_ + "-chroot"})).exit_code, 66);

  // Once it exists, even with nobody in it: free, exit 0.
  EXPECT_EQ(run_to_end(zklock({path_, "true"})).exit_code, 0);
  const Outcome free = list({"--json"});
  EXPECT_EQ(free.exit_code, 0) << free.output;
  EXPECT_THAT(free.output, HasSubstr(R"("exists":true)"));
  EXPECT_THAT(list().output, HasSubstr(path_ + ": free"));
}

// --list --watch runs until INT, TERM or HUP: a server frozen past the session timeout (the
// session lost, then replaced) is waited through, and the watch is set again on the new session.
TEST_F(ZklockTest, ListWatchOutlivesALostSession) {
  Cluster cluster;
  const std::string servers = cluster.connect_string();
  // A connect timeout shorter than the outage: each read during it gives up.
  Process watcher(zklock({"--connect-timeout", "1", "--list", path_, "--json", "--watch"}, servers), merged_output());
  KillAtEnd stop_watcher{watcher.pid(), true};
  const auto missing = watcher.read_line(scaled(30s));
  ASSERT_TRUE(missing);
  EXPECT_THAT(*missing, HasSubstr(R"("exists":false)"));

  cluster.freeze(0);
  std::this_thread::sleep_for(scaled(6s));  // more than the 2 s session: lost on the client's side
  cluster.thaw(0);
  std::this_thread::sleep_for(scaled(3s));
  ASSERT_FALSE(watcher.wait(0ms)) << "--list --watch ended on a lost session: " << watcher.read_all(scaled(5s));

  // Still watching: a holder on the new session's watch shows up.
  auto holder = start_holder({"--owner", "after-the-outage"}, nullptr, servers);
  bool seen = false;
  std::string output;
  for (int line = 0; line < 20 && !seen; ++line) {
    const auto next = watcher.read_line(scaled(30s));
    if (!next) break;
    output += *next + "\n";
    seen = next->find("after-the-outage") != std::string::npos;
  }
  EXPECT_TRUE(seen) << "no line for a holder after the outage:\n" << output;
  holder->signal(SIGTERM);
  holder->wait(scaled(30s));
  watcher.signal(SIGTERM);
  EXPECT_EQ(watcher.wait(scaled(30s)), 0);
}

// --list --watch: one JSON line now, and one each time the holders change (not when a waiter
// queues), until TERM.
TEST_F(ZklockTest, ListWatchStreamsALineEachTimeTheHoldersChange) {
  Process watcher(zklock({"--list", path_, "--json", "--watch"}), merged_output());
  KillAtEnd stop_watcher{watcher.pid(), true};
  const auto missing = watcher.read_line(scaled(30s));
  ASSERT_TRUE(missing);
  EXPECT_THAT(*missing, HasSubstr(R"("exists":false)"));

  std::string first_line;
  auto first = start_holder({"--owner", "first-holder"}, &first_line);
  const auto first_seen = watcher.read_line(scaled(30s));
  ASSERT_TRUE(first_seen) << "no line for the first holder";
  EXPECT_THAT(*first_seen, HasSubstr(fmt::format("\"token\":{},", number_after(first_line, "held "))));
  EXPECT_THAT(*first_seen, HasSubstr(R"("owner":"first-holder","since":)"));

  const TempDir dir("zklock-watch");
  const auto release = dir.file("release");
  Process second(zklock({"--owner", "second-holder", path_, "-c",
                         fmt::format("echo \"held $ZKLOCK_FENCING_TOKEN\"; while [ ! -e '{}' ]; do sleep 0.05; done",
                                     release.string())}),
                 merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  first->signal(SIGTERM);
  EXPECT_EQ(first->wait(scaled(30s)), 128 + SIGTERM);
  const auto second_held = second.wait_for_line("held ", scaled(30s));
  ASSERT_TRUE(second_held);
  const auto second_seen = watcher.read_line(scaled(30s));
  ASSERT_TRUE(second_seen) << "no line for the second holder";
  EXPECT_THAT(*second_seen, HasSubstr(fmt::format("\"token\":{},", number_after(*second_held, "held "))));
  EXPECT_THAT(*second_seen, Not(HasSubstr("first-holder")));

  std::ofstream(release.string()) << "go\n";
  EXPECT_EQ(second.wait(scaled(30s)), 0);
  const auto free = watcher.read_line(scaled(30s));
  ASSERT_TRUE(free) << "no line once the lock was free";
  EXPECT_THAT(*free, HasSubstr(R"("exists":true,"contenders":[])"));

  watcher.signal(SIGTERM);
  EXPECT_EQ(watcher.wait(scaled(30s)), 0);
  // The waiter queueing behind the first holder printed nothing: exactly the four lines above.
  EXPECT_EQ(watcher.read_all(scaled(5s)), "");
}

// ---------------------------------------------------------------------------------------------
// --once-per: at most one run per window of the leader's clock, across hosts

// The window a local time falls in. The test server runs on this machine, so its leader's clock
// is this clock: a test that straddled a window boundary cannot judge the outcome, and says so.
std::int64_t local_window(std::chrono::milliseconds period) {
  const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch());
  return now.count() / period.count();
}

// This machine's ISO week (UTC), for --once-per 1w.
std::int64_t local_week() {
  constexpr std::int64_t monday_shift = 3 * 86'400'000LL;
  return (local_window(std::chrono::milliseconds(1)) + monday_shift) / std::chrono::milliseconds(std::chrono::weeks(1)).count();
}

std::size_t line_count(const std::filesystem::path& file) {
  const std::string text = read_file(file);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST_F(ZklockTest, OncePerRunsTheCommandOnceAcrossConcurrentHosts) {
  const TempDir dir("zklock-once");
  const auto runs = dir.path() / "runs";
  const auto window = local_window(std::chrono::days(1));
  const std::string job = fmt::format("echo ran >> '{}'; sleep 1", runs.string());
  std::vector<std::unique_ptr<Process>> hosts;
  for (int i = 0; i < 4; ++i)
    hosts.push_back(std::make_unique<Process>(zklock({"--once-per", "1d", path_, "-c", job}), merged_output()));
  std::string outputs;
  for (auto& host : hosts) {
    outputs += host->read_all(scaled(60s));
    EXPECT_EQ(host->wait(scaled(30s)), 0) << outputs;
  }
  if (local_window(std::chrono::days(1)) != window) GTEST_SKIP() << "the run straddled a UTC midnight";
  EXPECT_EQ(line_count(runs), 1u) << outputs;
  EXPECT_THAT(outputs, HasSubstr("this window's run"));
  EXPECT_THAT(outputs, HasSubstr("is claimed already"));

  // A later host is told when and by whom this window's run was made, and how it ended.
  const Outcome later = run_to_end(zklock({"--once-per", "1d", path_, "-c", job}));
  EXPECT_EQ(later.exit_code, 0) << later.output;
  EXPECT_THAT(later.output, ::testing::ContainsRegex("claimed already: started [^ ]+Z by \"[^\"]+\" \\(token [0-9]+, "
                                                     "session 0x[0-9a-f]+\\), exited 0 at [^ ]+Z; not running the command"));
  EXPECT_EQ(line_count(runs), 1u);
  // -q: silent.
  const Outcome quiet = run_to_end(zklock({"-q", "--once-per", "1d", path_, "-c", job}));
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.output, "");
}

TEST_F(ZklockTest, OncePerRunsAgainInTheNextWindow) {
  const TempDir dir("zklock-once");
  const auto runs = dir.path() / "runs";
  const std::chrono::milliseconds period = 2s;
  const std::string job = fmt::format("echo ran >> '{}'", runs.string());
  const auto run_once = [&] { return run_to_end(zklock({"--once-per", "2s", path_, "-c", job})); };

  // Twice in one window: one run. Tried again if a window boundary fell between the two.
  bool judged = false;
  for (int attempt = 0; attempt < 5 && !judged; ++attempt) {
    const std::size_t before = std::filesystem::exists(runs) ? line_count(runs) : 0;
    const auto window = local_window(period);
    EXPECT_EQ(run_once().exit_code, 0);
    const Outcome second = run_once();
    EXPECT_EQ(second.exit_code, 0);
    if (local_window(period) != window) continue;
    judged = true;
    EXPECT_LE(line_count(runs) - before, 1u) << second.output;
    EXPECT_THAT(second.output, HasSubstr("claimed already")) << "a second run in one window";
  }
  ASSERT_TRUE(judged) << "every attempt straddled a window boundary";

  // The next window runs again.
  const std::size_t before = line_count(runs);
  const auto window = local_window(period);
  ASSERT_TRUE(eventually([&] { return local_window(period) > window; }, 5s));
  const Outcome next = run_once();
  EXPECT_EQ(next.exit_code, 0) << next.output;
  EXPECT_EQ(line_count(runs), before + 1) << next.output;
}

TEST_F(ZklockTest, OncePerHostArrivingDuringTheRunLeavesWithoutQueueing) {
  const TempDir dir("zklock-once");
  const auto release = dir.path() / "release";
  auto first = std::make_unique<Process>(
      zklock({"--once-per", "1w", path_, "-c",
              fmt::format("echo started; while [ ! -e '{}' ]; do sleep 0.05; done", release.string())}),
      merged_output());
  ASSERT_TRUE(first->wait_for_line("started", scaled(30s)));
  // -n would exit 1 on the held lock if it queued: it sees the claimed window first.
  const Outcome second = run_to_end(zklock({"-n", "--once-per", "1w", path_, "echo", "second-ran"}));
  std::ofstream(release.string()) << "go\n";
  EXPECT_EQ(first->wait(scaled(30s)), 0);
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_THAT(second.output, HasSubstr("not (yet) finished"));
  EXPECT_THAT(second.output, Not(HasSubstr("second-ran")));
}

TEST_F(ZklockTest, OncePerRecordsTheExitCodeAndListShowsTheLastRun) {
  const Outcome failed = run_to_end(zklock({"--once-per", "1w", "--owner", "nightly", path_, "-c", "exit 3"}));
  EXPECT_EQ(failed.exit_code, 3) << failed.output;

  const Outcome text = list();
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(path_ + ": free"));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("last --once-per run \\(1w UTC\\): started [^ ]+Z by \"nightly\" "
                                                    "\\(token [0-9]+, session 0x[0-9a-f]+\\), exited 3 at [^ ]+Z"));
  EXPECT_THAT(text.output, Not(HasSubstr("not a contender")));
  const Outcome json = list({"--json"});
  EXPECT_THAT(json.output,
              HasSubstr(R"("contenders":[],"not_contenders":[],"last_run":{"schedule":"1w UTC","started":")"));
  EXPECT_THAT(json.output,
              ::testing::ContainsRegex(R"("owner":"nightly","token":[0-9]+,"session_id":[0-9]+,"session":"0x[0-9a-f]+",)"
                                       R"("exit_code":3,"finished":"[^"]+Z"\},"last_runs":\[\{"schedule":"1w UTC",)"
                                       R"("started":"[^"]+Z","owner":"nightly","token":[0-9]+,"session_id":[0-9]+,)"));
  // Neither the clock probe nor anything else is left beside the record.
  zkr::SessionOptions options;
  options.servers = servers_;
  zkr::Session session(options);
  EXPECT_EQ(session.children(path_), std::vector<std::string>{"zklock.last-run"});
}

TEST_F(ZklockTest, OncePerRefusesARecordItDidNotWrite) {
  zkr::SessionOptions options;
  options.servers = servers_;
  zkr::Session session(options);
  session.create(path_);
  session.create(path_ + "/zklock.last-run", "last-run=yesterday");
  const Outcome refused = run_to_end(zklock({"--once-per", "1d", path_, "echo", "job-ran"}));
  EXPECT_EQ(refused.exit_code, 65) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(path_ + "/zklock.last-run is not a run record zklock wrote (it does not "
                                        "start with 'zklock run record 2')"));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
  EXPECT_EQ(session.get(path_ + "/zklock.last-run").data, "last-run=yesterday");
  // --list shows it as what it is: a child that is not a contender.
  EXPECT_THAT(list().output, HasSubstr("not a contender: zklock.last-run"));
  session.remove(path_ + "/zklock.last-run");
}

// A run that failed leaves its window open: the next zklock in the window runs the command again,
// until one exits 0. (Week windows: a test straddling Monday 00:00 UTC cannot judge, and says so.)
TEST_F(ZklockTest, OncePerRunsAgainAfterAFailedRunInTheSameWindow) {
  const TempDir dir("zklock-once");
  const auto runs = dir.path() / "runs";
  const auto window = local_week();
  const auto run = [&](std::string_view exit_code) {
    return run_to_end(zklock({"--once-per", "1w", path_, "-c", fmt::format("echo ran >> '{}'; exit {}",
                                                                             runs.string(), exit_code)}));
  };
  const Outcome failed = run("3");
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  const Outcome again = run("4");
  EXPECT_EQ(again.exit_code, 4) << again.output;
  EXPECT_THAT(again.output, ::testing::ContainsRegex("this window's run \\([^)]+\\) started [^ ]+Z by .*, exited 3 "
                                                     "at [^ ]+Z: running it again"));
  const Outcome succeeded = run("0");
  EXPECT_EQ(succeeded.exit_code, 0) << succeeded.output;
  const Outcome skipped = run("0");
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_THAT(skipped.output, HasSubstr("is claimed already"));
  if (local_week() != window) GTEST_SKIP() << "the test straddled a Monday 00:00 UTC";
  EXPECT_EQ(line_count(runs), 3u);
}

// Records of other versions: version 1 (one run, no schedule) counts for every schedule and is
// replaced at the next claim; a newer version is refused, asking for an upgrade. A run of this
// window that never recorded its end, and whose runner holds nothing, is run again.
TEST_F(ZklockTest, OncePerReadsOlderRecordsAndRefusesNewerOnes) {
  zkr::SessionOptions options;
  options.servers = servers_;
  zkr::Session session(options);
  const std::string record = path_ + "/zklock.last-run";
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  const auto window = local_week();
  session.create(path_);
  session.create(record, fmt::format("zklock run record 1\nstarted_ms={}\nowner=old\ntoken=1\nsession=0x1\n"
                                     "exit_code=0\n", now_ms));
  const Outcome skipped = run_to_end(zklock({"--once-per", "1w", path_, "echo", "job-ran"}));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_THAT(skipped.output, HasSubstr("claimed already: started"));
  EXPECT_THAT(skipped.output, Not(HasSubstr("job-ran")));

  session.set(record, fmt::format("zklock run record 2\nrun 1w UTC\nstarted_ms={}\nowner=gone\ntoken=1\n"
                                  "session=0x1\n", now_ms));
  const Outcome again = run_to_end(zklock({"--once-per", "1w", path_, "echo", "job-ran"}));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("by \"gone\" (token 1, session 0x1), not (yet) finished: running it again"));
  if (local_week() == window) {
    EXPECT_THAT(again.output, HasSubstr("job-ran"));
  }

  session.set(record, "zklock run record 3\nrun 1w UTC\nstarted_ms=1\n");
  const Outcome refused = run_to_end(zklock({"--once-per", "1w", path_, "echo", "job-ran"}));
  EXPECT_EQ(refused.exit_code, 65) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("it is a version 3 run record, and this zklock reads versions 1 and 2: "
                                        "upgrade zklock"));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
  session.remove(record);
}

// --count-failed: the old rule, any started run uses up its window.
TEST_F(ZklockTest, OncePerCountFailedLetsAFailedRunUseUpItsWindow) {
  const TempDir dir("zklock-once");
  const auto runs = dir.path() / "runs";
  const auto window = local_week();
  const std::string job = fmt::format("echo ran >> '{}'; exit 3", runs.string());
  const Outcome failed = run_to_end(zklock({"--once-per", "1w", "--count-failed", path_, "-c", job}));
  EXPECT_EQ(failed.exit_code, 3) << failed.output;
  const Outcome skipped = run_to_end(zklock({"--once-per", "1w", "--count-failed", path_, "-c", job}));
  EXPECT_EQ(skipped.exit_code, 0) << skipped.output;
  EXPECT_THAT(skipped.output, ::testing::ContainsRegex("claimed already: .*exited 3 at"));
  if (local_week() != window) GTEST_SKIP() << "the test straddled a Monday 00:00 UTC";
  EXPECT_EQ(line_count(runs), 1u);
}

// One entry per schedule: an hourly run is not claimed by this week's run, nor the reverse, and
// --list shows both.
TEST_F(ZklockTest, OncePerKeepsARecordPerPeriodAndZone) {
  const TempDir dir("zklock-once");
  const auto runs = dir.path() / "runs";
  const auto window = local_week();
  const auto run = [&](std::vector<std::string> schedule) {
    schedule.insert(schedule.begin(), "--once-per");
    for (std::string argument : {path_, std::string("-c"), fmt::format("echo ran >> '{}'", runs.string())})
      schedule.push_back(argument);
    return run_to_end(zklock(schedule));
  };
  EXPECT_EQ(run({"1w"}).exit_code, 0);
  const Outcome hourly = run({"1h"});
  EXPECT_EQ(hourly.exit_code, 0) << hourly.output;
  EXPECT_THAT(hourly.output, Not(HasSubstr("claimed already")));
  const Outcome berlin = run({"1w", "--tz", "Europe/Berlin"});
  EXPECT_THAT(berlin.output, Not(HasSubstr("claimed already")));
  EXPECT_THAT(run({"1w"}).output, HasSubstr("claimed already"));
  EXPECT_THAT(run({"1w", "--tz", "Europe/Berlin"}).output, HasSubstr("(Europe/Berlin)"));

  const Outcome text = list();
  EXPECT_THAT(text.output, HasSubstr("last --once-per run (1w UTC): started"));
  EXPECT_THAT(text.output, HasSubstr("last --once-per run (1h UTC): started"));
  EXPECT_THAT(text.output, HasSubstr("last --once-per run (1w Europe/Berlin): started"));
  if (local_week() != window) GTEST_SKIP() << "the test straddled a week's start";
  EXPECT_EQ(line_count(runs), 3u);
}

}  // namespace
