// SPDX-License-Identifier: Apache-2.0
// The test environment: real ZooKeeper servers (through zkenv.py), a fault-injecting TCP proxy,
// child processes with piped output, and forced session expiry. Used by tests and benchmarks only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "managed_directory.hpp"

namespace zkr::testenv {

// Every test timeout is multiplied by this (env ZKR_TEST_TIMEOUT_SCALE, default 1.0), so that slow
// machines and sanitizer builds can stretch them without editing tests.
double timeout_scale();
std::chrono::milliseconds scaled(std::chrono::milliseconds timeout);

// Debian's interpreter, the one that sees python3-kazoo and runs testenv's tools.
inline constexpr const char* kDebianPython = "/usr/bin/python3";
// `text` without its trailing white space.
std::string trim_trailing_space(std::string text);
std::string source_dir();  // env ZKR_SOURCE_DIR or the compiled-in CMake source dir
std::string build_dir();   // env ZKR_BUILD_DIR or the compiled-in CMake binary dir

// The tickTime of every server testenv starts unless told otherwise (the shared server's too):
// sessions in tests pass it as SessionOptions::ensemble_tick_time.
inline constexpr std::chrono::milliseconds kTestTickTime{100};

// The cipher suites of TLS 1.3, by their Java names (ClusterOptions::tls_cipher_suites).
inline constexpr const char* kTls13CipherSuites = "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384";

struct ClusterOptions {
  int servers = 1;
  int tick_ms = static_cast<int>(kTestTickTime.count());
  int sync_limit = 10;
  // Clients on a TLS port only (zkenv.py --tls; Netty, no plain port); certificates in
  // Cluster::tls_file(). tls_client_auth is the server's ssl.clientAuth: "none", "want", "need".
  bool tls = false;
  std::string tls_client_auth = "none";
  bool tls_expired_server_cert = false;  // the server presents an expired certificate
  // The server's ssl.enabledProtocols ("TLSv1.3") and ssl.ciphersuites (Java names, comma-separated);
  // empty: ZooKeeper's defaults. ZooKeeper 3.8's default suites are TLS 1.2 ones: TLSv1.3 alone
  // without kTls13CipherSuites makes a port that aborts every handshake.
  std::string tls_protocols{};
  std::string tls_cipher_suites{};
};

// ZooKeeper servers started through testenv/zkenv.py in a fresh ManagedDirectory "zkr-cluster-*".
// Server indices run from 0 to size()-1. Every call that changes a server throws
// std::runtime_error carrying zkenv.py's message when it fails.
class Cluster {
 public:
  explicit Cluster(ClusterOptions options = {});
  ~Cluster();  // stops every server it started and removes the directory; never throws
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  std::string connect_string() const;
  std::string server_address(int index) const;  // "127.0.0.1:port"
  int size() const;
  // Index of the server that reports itself leader (0 for a single server), -1 if none does.
  int leader() const;
  bool wait_for_leader(std::chrono::milliseconds timeout) const;
  // A follower, once the ensemble has a leader (waits up to `timeout`; throws std::runtime_error
  // without one): the server a test stops or cuts off when the leader's election, which can
  // outlast a session's lead time (docs/operations.md), is not what it tests.
  int follower(std::chrono::milliseconds timeout) const;
  // Every server's "127.0.0.1:port" but server `index`'s, in index order, as a list and as a
  // connect string.
  std::vector<std::string> addresses_except(int index) const;
  std::string connect_string_except(int index) const;

  void kill(int index);   // SIGKILL
  void stop(int index);   // SIGTERM, then SIGKILL after a grace period
  void start(int index);  // restart a killed or stopped server on its old ports; waits until it serves
  void freeze(int index); // SIGSTOP
  void thaw(int index);   // SIGCONT
  pid_t pid(int index) const;  // 0 if the server is not running

  const std::filesystem::path& state_dir() const { return directory_->path(); }
  // A file of a tls cluster's certificates (zkenv.py's TLS_FILES): "ca.pem", "server.pem",
  // "client.pem", "client.key", "other-ca.pem" (a CA that signed nothing here),
  // "server-expired.pem". Its server.pem names IP 127.0.0.1 only: "localhost" does not match it.
  std::filesystem::path tls_file(std::string_view name) const { return state_dir() / "tls" / name; }

 private:
  std::string zkenv(const std::vector<std::string>& arguments) const;
  void check_index(int index) const;

  std::unique_ptr<ManagedDirectory> directory_;
  std::vector<int> client_ports_;
  bool tls_ = false;
};

// What Cluster and NetLab share over their servers. server_command(): the arguments of a per-server
// command of zkenv.py and netlab.py (kill, stop-server, start-server, freeze, thaw) for server
// `index` of `count`; check_server_index() throws std::out_of_range naming `who` for a bad index.
void check_server_index(std::string_view who, int index, int count);
std::vector<std::string> server_command(std::string_view who, std::string_view command, int index, int count);
// The first of `count` servers whose srvr reply (from `srvr(index)`) says leader or standalone, or -1.
int leader_among(int count, const std::function<std::string(int)>& srvr);
// Polls `done` until it holds (true) or `timeout` passes (false).
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

// The server shared by the tests of one ctest run: reads $ZKR_TEST_ZK_DIR/connect_string. Without
// that variable (a test binary run by hand) it starts a private single-server Cluster once per
// process and returns its connect string.
std::string shared_server();

// Sends a four-letter command (srvr, mntr, cons, wchs, ...) to one server "host:port" and returns
// its reply; empty if the server does not answer in time (stopped, frozen, not serving).
std::string four_letter_word(const std::string& address, std::string_view command,
                             std::chrono::milliseconds timeout = std::chrono::seconds(1));

// A fresh znode path for the running test: "/zkr-test/<suite>.<test>[-<hint>]-<random hex>".
std::string unique_path(std::string_view hint = {});

// A new, empty directory "$TMPDIR/<prefix>-XXXXXX" (/tmp without TMPDIR). Throws
// std::runtime_error naming the place and the reason.
std::filesystem::path make_temp_dir(std::string_view prefix);

// A make_temp_dir() removed with everything in it when it goes out of scope.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix = "zkr-test") : path_(make_temp_dir(prefix)) {}
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path file(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The number on the last non-empty line of `file` (0 if none): the latest of the time stamps a
// job appends (`date +%s%N`, nanoseconds of the Unix epoch).
long long last_stamp(const std::filesystem::path& file);

// A TCP proxy between clients and one ZooKeeper server, running on its own thread (Boost.Asio).
// All methods are thread-safe.
class Proxy {
 public:
  explicit Proxy(std::string upstream);  // "host:port"; listens on 127.0.0.1:<ephemeral port>
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  std::string address() const;  // "127.0.0.1:port"

  void pass();       // forward both ways (the default); resumes what blackhole() held
  // Keep every socket open but forward nothing either way; new connections are accepted and held.
  // Bytes already sent stay in kernel buffers (as on a cut link) and flow again after pass().
  void blackhole();
  // RST every current connection (SO_LINGER 0), keep listening, and go back to pass().
  void reset();
  // RST every current connection and hold every new one, forwarding nothing (blackhole()): the
  // client knows at once that it lost its connection and cannot get another until pass().
  void sever();
  // Delay added to each direction, order kept. Applies to bytes read from now on.
  void set_latency(std::chrono::microseconds one_way);

  // "The create took effect but its reply was lost": the next client request whose opcode is in
  // `opcodes` (create=1, create2=15 by default) is forwarded, its reply is swallowed, and then that
  // client's connection is reset, so the client sees a connection loss for a create that happened.
  void drop_next_reply(std::vector<int> opcodes = {1, 15});
  int dropped_replies() const;  // replies swallowed so far
  int connections() const;      // currently open client connections

  // What the clients sent through the proxy and what the server pushed back, counted frame by frame
  // since the proxy started: for the benchmarks that weigh what a client costs the server.
  struct Traffic {
    std::map<std::int32_t, std::uint64_t> requests;  // by opcode (ping 11, closeSession -11, ...)
    std::uint64_t sessions_created = 0;  // connect requests naming no session (a write: createSession)
    std::uint64_t sessions_resumed = 0;  // connect requests naming a session (reconnects)
    std::uint64_t watches_set = 0;       // exists, getData, getChildren(2) with the watch flag; addWatch
    std::uint64_t notifications = 0;     // watch events the server sent (xid -1)
  };
  Traffic traffic() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// A child process whose stdout is piped to us. stderr is inherited unless merge_stderr asks for it
// to go into the same pipe.
class Process {
 public:
  struct Options {
    std::map<std::string, std::string> env;  // added to (or overriding) our environment
    bool new_process_group = false;          // the child leads its own process group
    bool pipe_stdin = false;                 // else stdin is inherited
    bool merge_stderr = false;               // send stderr into the stdout pipe too
  };

  // argv[0] is looked up in PATH unless it holds a '/'. Throws std::runtime_error if the program
  // cannot be started.
  Process(std::vector<std::string> argv, Options options);
  explicit Process(std::vector<std::string> argv) : Process(std::move(argv), Options{}) {}
  ~Process();  // SIGKILL (its whole group if it has one) and reap if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // One stdout line without its newline; nullopt on timeout or at end of output. A last line
  // without a newline is returned at end of output.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Reads lines until one starts with `prefix` and returns it (earlier lines are discarded).
  std::optional<std::string> wait_for_line(std::string_view prefix, std::chrono::milliseconds timeout);
  // Everything left on stdout until the child closes it (or the timeout passes).
  std::string read_all(std::chrono::milliseconds timeout);
  bool at_end_of_output() const { return stdout_closed_ && buffer_.empty(); }

  void write_stdin(std::string_view data);
  void close_stdin();

  void signal(int sig);  // to the whole group if it has its own
  void freeze();         // SIGSTOP
  void thaw();           // SIGCONT

  // The exit status as a shell reports it ($?: the exit code, or 128+signal); nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  bool running();

 private:
  bool fill_buffer(std::chrono::steady_clock::time_point deadline);
  bool reap(bool block);

  pid_t pid_ = -1;
  bool own_group_ = false;
  int stdout_fd_ = -1;
  int stdin_fd_ = -1;
  bool stdout_closed_ = false;
  std::string buffer_;
  std::optional<int> status_;
};

// For tests that kill a test mid-run: runs one test of this very binary (a DISABLED_ one too) in a
// child process, which prints "held KEY VALUE" lines for what it holds, then "held ready" (see
// print_held). Returns the child and those facts, KEY -> VALUES in order; throws
// std::runtime_error with the child's output if it ends or stays silent first.
struct HeldByChild {
  std::unique_ptr<Process> process;
  std::multimap<std::string, std::string> facts;
  std::vector<std::string> all(const std::string& key) const;
};
HeldByChild hold_in_child(const std::string& test_name, std::chrono::milliseconds timeout);
// In the child: one "held KEY VALUE" line, flushed.
void print_held(std::string_view key, std::string_view value);

// Forces a real server-side expiry of a session: opens a second handle with the session's id and
// 16-byte password, waits until it is connected, and closes it. Returns once the close completed.
// Cut the original handle off first (Proxy::blackhole), or it may reconnect in between.
// Throws std::runtime_error if the second handle cannot connect in time.
void expire_session(const std::string& servers, std::int64_t session_id, const std::string& password);

}  // namespace zkr::testenv
