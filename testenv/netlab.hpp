// SPDX-License-Identifier: Apache-2.0
// A ZooKeeper lab of network namespaces (testenv/netlab.py): every server and every client is a
// host of its own, joined through a bridge, so that tests can cut real links between them with nft
// rules, e.g. isolate a follower from the leader while its clients still reach it.
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "testenv.hpp"

namespace zkr::testenv {

struct NetLabOptions {
  int servers = 3;
  int clients = 2;
  int tick_ms = 200;
  int sync_limit = 2;
  int init_limit = 10;

  // Debian's zoo.cfg: tickTime=2000, syncLimit=5, initLimit=10.
  static NetLabOptions debian_defaults(int servers = 3, int clients = 2) {
    return {servers, clients, 2000, 5, 10};
  }
};

// Hosts are named "s0".."sN-1" (servers) and "c0".."cM-1" (clients). Every server listens on
// <its address>:2181 inside its own namespace. The test process itself (root namespace) cannot
// reach any of them: talk to the lab through spawn() and four_letter().
// Every call that changes the lab throws std::runtime_error carrying netlab.py's message. Calls
// that change the lab (faults, servers) must come from one thread at a time; the queries may run
// from any thread.
class NetLab {
 public:
  // "" if this process can build labs (root, ip netns, nft, veth and bridges in a namespace);
  // otherwise why not. Tests GTEST_SKIP() with it. Checked once per process.
  static std::string unavailable_reason();

  explicit NetLab(NetLabOptions options = {});  // waits until every server serves and a leader exists
  ~NetLab();  // stops every server and process left in the lab, deletes its namespaces; never throws
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  const std::string& name() const { return lab_; }  // "zkrNNNN", the prefix of its namespaces
  int servers() const { return static_cast<int>(server_addresses_.size()); }
  int clients() const { return static_cast<int>(client_addresses_.size()); }
  const NetLabOptions& options() const { return options_; }

  std::string connect_string() const;            // every server, "10.213.R.10:2181,..."
  std::string server_address(int server) const;  // "10.213.R.(10+i):2181"
  std::string host_address(const std::string& host) const;  // IP of "sI" or "cJ"
  std::string namespace_of(const std::string& host) const;  // e.g. "zkr1a2b-c0"

  // Index of the server reporting itself leader (or standalone), -1 if none does. Asked in each
  // server's own namespace, so partitions do not hide the answer.
  int leader() const;
  bool wait_for_leader(std::chrono::milliseconds timeout) const;
  // srvr's "Mode:" of one server ("leader", "follower", "standalone"), "" if it does not serve.
  std::string mode(int server) const;

  // argv run inside client `client`'s namespace (ip netns exec, which execs in place: pid() is
  // the program's). Killed by its Process destructor, and by ~NetLab at the latest.
  std::unique_ptr<Process> spawn(int client, std::vector<std::string> argv,
                                 Process::Options options = {}) const;
  std::unique_ptr<Process> spawn_on(const std::string& host, std::vector<std::string> argv,
                                    Process::Options options = {}) const;
  // A kazoo client (testenv/netlab_client.py) in client `client`'s namespace connected to
  // `hosts`; one request a line on its stdin ("exists /p", "get /p", "create /p data", "set /p data",
  // "delete /p", "children /p", "sync /p", "session"), one reply line ("ok ..." or "error ...";
  // the protocol is in netlab_client.py). Waits for its "connected" (throws if it fails).
  // A request unanswered for op_timeout_s (times ZKR_TEST_TIMEOUT_SCALE) answers "error timeout".
  std::unique_ptr<Process> kazoo_client(int client, const std::string& hosts,
                                        double session_timeout_s = 10, double op_timeout_s = 2) const;

  // Faults: nft rules in the receiving host's namespace; dropped packets vanish silently.
  void drop(const std::string& from, const std::string& to);  // packets from -> to dropped
  void cut(const std::string& a, const std::string& b);       // both ways
  void isolate_from_servers(int server);  // cut server i from every other server; clients still reach it
  void isolate(const std::string& host);  // cut host from every other host
  void undrop(const std::string& from, const std::string& to);  // undo drop(from, to) alone
  void uncut(const std::string& a, const std::string& b);       // both ways, whatever made them
  void heal();                            // remove every rule

  void freeze_server(int server);  // SIGSTOP
  void thaw_server(int server);    // SIGCONT
  void kill_server(int server);    // SIGKILL
  void stop_server(int server);    // SIGTERM, then SIGKILL after a grace period
  void start_server(int server);   // restart; waits until it answers srvr (needs a quorum)

  // A four-letter word (srvr, mntr, cons...) sent to one server from inside its own namespace;
  // "" if it does not answer in time.
  std::string four_letter(int server, std::string_view command,
                          std::chrono::milliseconds timeout = std::chrono::seconds(1)) const;

  // One line for test logs: lab name, subnet, servers, clients, tickTime, syncLimit, start time.
  std::string describe() const;
  double start_seconds() const { return start_seconds_; }
  const std::filesystem::path& state_dir() const { return directory_->path(); }

 private:
  std::string netlab(const std::vector<std::string>& arguments) const;
  void link_command(std::string_view command, const std::string& a, const std::string& b);
  void check_server(int server) const;

  NetLabOptions options_;
  std::unique_ptr<ManagedDirectory> directory_;
  std::string lab_;
  std::string subnet_;
  double start_seconds_ = 0;
  std::vector<std::string> server_addresses_;  // "ip:2181"
  std::vector<std::string> server_namespaces_;
  std::vector<std::string> client_addresses_;  // "ip"
  std::vector<std::string> client_namespaces_;
};

}  // namespace zkr::testenv
