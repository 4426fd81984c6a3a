// SPDX-License-Identifier: Apache-2.0
// TLS to a real ZooKeeper 3.8 with secureClientPort (Netty), through the session's relay
// (SessionOptions::tls, src/tls_relay.cpp). The shared TLS servers (fixtures zk_tls_start, TLS 1.2,
// and zk_tls13_start, TLS 1.3 only) require client certificates (ssl.clientAuth=need) and have no
// plain port; their certificates are made at start by testenv/zkenv.py --tls. What the server
// refuses is told at a different moment under each version (TLS 1.3: after the client's side of
// the handshake is done), so the tests of refusals run against both (TlsVersions).
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/fsuid.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <testenv.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "../core/test_support.hpp"

namespace zkr::test {
namespace {

using namespace std::chrono_literals;

struct TlsServer {
  std::string connect_string;
  std::filesystem::path tls_dir;
  std::filesystem::path file(std::string_view name) const { return tls_dir / name; }
};

enum class TlsVersion { tls12, tls13 };
std::string_view name_of(TlsVersion version) { return version == TlsVersion::tls13 ? "TLSv1.3" : "TLSv1.2"; }
void PrintTo(TlsVersion version, std::ostream* out) { *out << name_of(version); }

// A fixture's server ($ZKR_TEST_TLS_ZK_DIR, $ZKR_TEST_TLS13_ZK_DIR), or a private one when the
// binary is run by hand.
TlsServer fixture_server(const char* variable, const char* fixture, const testenv::ClusterOptions& options) {
  if (const char* dir = std::getenv(variable); dir && *dir) {
    std::ifstream in(std::filesystem::path(dir) / "connect_string");
    std::string connect;
    if (!std::getline(in, connect) || connect.empty())
      throw std::runtime_error(fmt::format("{}/connect_string is missing: did {} run?", dir, fixture));
    return TlsServer{connect, std::filesystem::path(dir) / "tls"};
  }
  static std::vector<std::unique_ptr<testenv::Cluster>> private_clusters;
  auto& cluster = *private_clusters.emplace_back(std::make_unique<testenv::Cluster>(options));
  return TlsServer{cluster.connect_string(), cluster.state_dir() / "tls"};
}

const TlsServer& tls_server(TlsVersion version = TlsVersion::tls12) {
  if (version == TlsVersion::tls13) {
    static const TlsServer server =
        fixture_server("ZKR_TEST_TLS13_ZK_DIR", "zk_tls13_start",
                       {.tls = true, .tls_client_auth = "need", .tls_protocols = "TLSv1.3",
                        .tls_cipher_suites = testenv::kTls13CipherSuites});
    return server;
  }
  static const TlsServer server =
      fixture_server("ZKR_TEST_TLS_ZK_DIR", "zk_tls_start", {.tls = true, .tls_client_auth = "need"});
  return server;
}

// The refusals' tests, once per version (TlsVersions/TlsEachVersion.NAME/TLSv1_2 and /TLSv1_3).
class TlsEachVersion : public ::testing::TestWithParam<TlsVersion> {
 protected:
  const TlsServer& server() const { return tls_server(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(TlsVersions, TlsEachVersion, ::testing::Values(TlsVersion::tls12, TlsVersion::tls13),
                         [](const ::testing::TestParamInfo<TlsVersion>& version) {
                           std::string name(name_of(version.param));
                           std::replace(name.begin(), name.end(), '.', '_');
                           return name;
                         });

// A refusal is named within this (the TLS exchange takes a tenth of a second; the connect timeout
// is what a refusal that goes unnamed costs).
const auto kNamedWithin = testenv::scaled(2s);

TlsOptions client_tls(const std::filesystem::path& tls_dir, bool with_certificate = true) {
  TlsOptions tls;
  tls.ca = tls_dir / "ca.pem";
  if (with_certificate) {
    tls.cert = tls_dir / "client.pem";
    tls.key = tls_dir / "client.key";
  }
  return tls;
}

SessionOptions tls_options(const std::string& servers, const TlsOptions& tls) {
  SessionOptions options = session_options(servers);
  options.tls = tls;
  return options;
}

// Connecting fails with `expected`, whose message names `server`, well before the connect timeout.
void expect_refused(SessionOptions options, errc expected, const std::string& server, std::string_view also = {}) {
  options.connect_timeout = testenv::scaled(20s);
  const auto start = std::chrono::steady_clock::now();
  try {
    Session session(options);
    ADD_FAILURE() << "connected, expected " << make_error_code(expected).message();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), make_error_code(expected)) << e.what();
    EXPECT_NE(std::string(e.what()).find(server), std::string::npos) << e.what();
    if (!also.empty()) {
      EXPECT_NE(std::string(e.what()).find(also), std::string::npos) << e.what();
    }
    EXPECT_NE(e.code(), make_error_code(errc::connect_timeout));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kNamedWithin);
}

std::string port_of(const std::string& address) { return address.substr(address.rfind(':') + 1); }

// This process's TCP sockets (IPv4) in `state` ("0A" listen, "01" established), as
// /proc/self/net/tcp writes their ends: {local, remote}.
std::set<std::pair<std::string, std::string>> own_tcp_sockets(std::string_view wanted_state) {
  std::set<std::string> own;
  if (DIR* fds = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(fds)) {
      char target[64];
      const auto length = ::readlink((std::string("/proc/self/fd/") + entry->d_name).c_str(), target, sizeof target);
      const std::string link(target, length > 0 ? static_cast<std::size_t>(length) : 0);
      if (link.starts_with("socket:[")) own.insert(link.substr(8, link.size() - 9));
    }
    ::closedir(fds);
  }
  std::set<std::pair<std::string, std::string>> sockets;
  std::ifstream table("/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state == wanted_state && own.contains(inode)) sockets.emplace(local, remote);
  }
  return sockets;
}

// The local addresses of this process's listening sockets.
std::set<std::string> own_listening_sockets() {
  std::set<std::string> listening;
  for (const auto& [local, remote] : own_tcp_sockets("0A")) listening.insert(local);
  return listening;
}

// The server of `cluster` this process has a connection to (its relay's, for the only session
// on `cluster`), or -1.
int connected_server(const testenv::Cluster& cluster) {
  const auto established = own_tcp_sockets("01");
  for (int index = 0; index < cluster.size(); ++index) {
    const std::string address = fmt::format("0100007F:{:04X}", std::stoi(port_of(cluster.server_address(index))));
    for (const auto& [local, remote] : established)
      if (remote == address) return index;
  }
  return -1;
}

// The relay's port of a session made by `make_session` (the listening socket it added).
template <typename MakeSession>
std::pair<std::unique_ptr<Session>, int> session_and_relay_port(MakeSession make_session) {
  const auto before = own_listening_sockets();
  auto session = make_session();
  std::set<std::string> relay_ports;
  for (const auto& local : own_listening_sockets())
    if (!before.contains(local)) relay_ports.insert(local);
  if (relay_ports.size() != 1) return {std::move(session), -1};
  return {std::move(session), std::stoi(relay_ports.begin()->substr(9), nullptr, 16)};
}

// A socket of this process (not the session's C client) connects to the relay's port and waits,
// sending nothing: whether the relay closed it unanswered within `within`. (A relay that carried
// it would have opened a TLS connection to the server for it and kept it open.)
bool relay_closes_a_socket_of_this_process(int port, std::chrono::milliseconds within) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool closed = false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    pollfd ready{fd, POLLIN, 0};
    if (::poll(&ready, 1, static_cast<int>(within.count())) == 1) {
      char byte;
      const ssize_t n = ::recv(fd, &byte, 1, 0);
      closed = n == 0 || (n < 0 && errno == ECONNRESET);
    }
  }
  ::close(fd);
  return closed;
}

int thread_count() {
  int threads = 0;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(tasks))
      if (entry->d_name[0] != '.') ++threads;
    ::closedir(tasks);
  }
  return threads;
}

TEST_P(TlsEachVersion, TakesALockThroughTheRelay) {
  const auto& server = this->server();
  Session session(tls_options(server.connect_string, client_tls(server.tls_dir)));
  EXPECT_EQ(session.state(), SessionState::connected);
  Lock lock(session, testenv::unique_path());
  HeldLock held = lock.acquire();
  ASSERT_TRUE(held);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session.children(lock.path()).size(), 1u);
}

TEST_P(TlsEachVersion, ThePlainTextClientIsToldTheServerSpeaksOnlyTls) {
  // The server has no plain port; plain text to its TLS port is named at once (it closes each
  // connection unanswered), not after the connect timeout, and without a flood of the C client's
  // reconnection complaints meanwhile.
  const auto& server = this->server();
  SessionOptions options = session_options(server.connect_string);
  options.connect_timeout = testenv::scaled(20s);
  std::mutex log_mutex;
  int complaints = 0;
  set_log_sink([&](LogLevel, std::string_view message) {
    std::lock_guard guard(log_mutex);
    complaints += message.find("failed while receiving a server response") != std::string_view::npos;
  });
  const auto start = std::chrono::steady_clock::now();
  try {
    Session session(options);
    ADD_FAILURE() << "connected in plain text to a TLS-only server";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), make_error_code(errc::tls_server_requires_tls)) << e.what();
    EXPECT_NE(std::string(e.what()).find(server.connect_string), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, kNamedWithin);
  set_log_sink({});
  EXPECT_LE(complaints, 2);
  EXPECT_EQ(testenv::four_letter_word(server.connect_string, "srvr"), "") << "a plain port answers";
}

TEST(Tls, TlsToAPlainPortIsNamed) {
  const auto& server = tls_server();
  const std::string plain = testenv::shared_server();
  expect_refused(tls_options(plain, client_tls(server.tls_dir)), errc::tls_plaintext_server, plain);
}

TEST(Tls, ATlsPortThatBreaksOffEveryHandshakeIsNotCalledPlainText) {
  // TLSv1.3 only, with ZooKeeper 3.8's default cipher suites (all TLS 1.2 ones): the server closes
  // each connection during the handshake and logs why.
  testenv::Cluster broken({.tls = true, .tls_protocols = "TLSv1.3"});
  const std::string connect = broken.connect_string();
  SessionOptions options = tls_options(connect, client_tls(broken.state_dir() / "tls"));
  expect_refused(options, errc::tls_handshake_failed, connect, "broke off the TLS handshake");
  try {
    Session session(options);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("server's log"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("plain-text"), std::string::npos) << e.what();
  }
}

TEST_P(TlsEachVersion, AServerThatDemandsAClientCertificateSaysSo) {
  const auto& server = this->server();
  expect_refused(tls_options(server.connect_string, client_tls(server.tls_dir, /*with_certificate=*/false)),
                 errc::tls_client_certificate_required, server.connect_string);
}

TEST_P(TlsEachVersion, AServerThatRefusesOurClientCertificateSaysSo) {
  // other-client.pem: our key, certified by a CA the server does not trust.
  const auto& server = this->server();
  TlsOptions tls = client_tls(server.tls_dir);
  tls.cert = server.file("other-client.pem");
  expect_refused(tls_options(server.connect_string, tls), errc::tls_handshake_failed, server.connect_string,
                 "refused our TLS client certificate");
}

TEST_P(TlsEachVersion, ACertificateFromAnotherCaIsRefused) {
  const auto& server = this->server();
  TlsOptions tls = client_tls(server.tls_dir);
  tls.ca = server.file("other-ca.pem");
  expect_refused(tls_options(server.connect_string, tls), errc::tls_untrusted_certificate, server.connect_string);
}

TEST_P(TlsEachVersion, ACertificateThatDoesNotNameTheHostIsRefusedUnlessTurnedOff) {
  // The server's certificate names IP 127.0.0.1 only: "localhost" does not match it.
  const auto& server = this->server();
  const std::string by_name = "localhost:" + port_of(server.connect_string);
  expect_refused(tls_options(by_name, client_tls(server.tls_dir)), errc::tls_hostname_mismatch, by_name, "localhost");

  TlsOptions unchecked = client_tls(server.tls_dir);
  unchecked.verify_host = false;
  Session session(tls_options(by_name, unchecked));
  EXPECT_EQ(session.state(), SessionState::connected);
}

TEST(Tls, BadTlsFilesAreNamed) {
  const auto& server = tls_server();
  TlsOptions tls = client_tls(server.tls_dir);
  tls.ca = server.file("no-such-ca.pem");
  try {
    Session session(tls_options(server.connect_string, tls));
    ADD_FAILURE() << "connected without a CA file";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument)) << e.what();
    EXPECT_NE(std::string(e.what()).find("no-such-ca.pem"), std::string::npos) << e.what();
  }
  tls = client_tls(server.tls_dir);
  tls.key.clear();
  std::error_code ec;
  auto session = Session::connect(tls_options(server.connect_string, tls), ec);
  EXPECT_FALSE(session);
  EXPECT_EQ(ec, make_error_code(errc::invalid_argument));
}

// Runs `body` unable to read files that only their owner (root) may read: as root, with this
// thread's file system user id set to nobody's (the relay reads its files on the caller's thread).
template <typename Body>
void without_root_file_access(Body body) {
  struct AsNobody {
    bool root = ::geteuid() == 0;
    AsNobody() {
      if (root) ::setfsuid(65534);
    }
    ~AsNobody() {
      if (root) ::setfsuid(0);
    }
  } as_nobody;
  body();
}

TEST(Tls, ATlsFileThatCannotBeReadIsNamedWithTheCause) {
  const auto& server = tls_server();
  testenv::TempDir dir("zkr-tls-files");
  const auto unreadable = dir.path() / "unreadable-ca.pem";
  std::filesystem::copy_file(server.file("ca.pem"), unreadable);
  std::filesystem::permissions(unreadable, std::filesystem::perms::owner_read);
  std::filesystem::permissions(dir.path(), std::filesystem::perms::all);
  TlsOptions tls = client_tls(server.tls_dir);
  tls.ca = unreadable;
  without_root_file_access([&] {
    try {
      Session session(tls_options(server.connect_string, tls));
      ADD_FAILURE() << "connected with an unreadable CA file";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), make_error_code(errc::invalid_argument)) << e.what();
      EXPECT_NE(std::string(e.what()).find(unreadable.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find("asio.ssl"), std::string::npos) << e.what();
    }
  });
  // The same for the key (a file of the client certificate's pair).
  tls = client_tls(server.tls_dir);
  const auto key = dir.path() / "unreadable.key";
  std::filesystem::copy_file(server.file("client.key"), key);
  std::filesystem::permissions(key, std::filesystem::perms::owner_read);
  tls.key = key;
  without_root_file_access([&] {
    std::error_code ec;
    auto session = Session::connect(tls_options(server.connect_string, tls), ec);
    EXPECT_FALSE(session);
    EXPECT_EQ(ec, make_error_code(errc::invalid_argument));
  });
  try {
    without_root_file_access([&] { Session session(tls_options(server.connect_string, tls)); });
    ADD_FAILURE() << "connected with an unreadable key";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(key.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
}

TEST(Tls, OnlyThisProcessMayUseTheRelay) {
  const auto& server = tls_server();
  const auto before = own_listening_sockets();
  Session session(tls_options(server.connect_string, client_tls(server.tls_dir)));
  std::set<std::string> relay_ports;
  for (const auto& local : own_listening_sockets())
    if (!before.contains(local)) relay_ports.insert(local);
  ASSERT_EQ(relay_ports.size(), 1u);
  EXPECT_TRUE(relay_ports.begin()->starts_with("0100007F:")) << "listens beyond 127.0.0.1";
  const int port = std::stoi(relay_ports.begin()->substr(9), nullptr, 16);
  // Another process connects and sends a srvr: the relay closes it unanswered (an end of stream,
  // or a reset for the unread request), where the server would have answered.
  testenv::Process other({"/usr/bin/python3", "-c",
                          fmt::format("import socket\n"
                                      "s = socket.create_connection(('127.0.0.1', {}))\n"
                                      "s.settimeout(5)\n"
                                      "s.sendall(b'srvr')\n"
                                      "try:\n"
                                      "    print('closed' if not s.recv(4096) else 'answered', flush=True)\n"
                                      "except ConnectionResetError:\n"
                                      "    print('closed', flush=True)\n",
                                      port)});
  EXPECT_EQ(other.read_line(testenv::scaled(10s)), "closed");
  EXPECT_EQ(session.state(), SessionState::connected);
}

TEST(Tls, TheRelayServesOnlyTheSessionsOwnClientNotAnotherSocketOfTheProcess) {
  const auto& server = tls_server();
  auto [session, port] = session_and_relay_port(
      [&] { return std::make_unique<Session>(tls_options(server.connect_string, client_tls(server.tls_dir))); });
  ASSERT_GT(port, 0);
  EXPECT_TRUE(relay_closes_a_socket_of_this_process(port, testenv::scaled(3s)))
      << "the relay carried a second connection while its client's one lives";
  // The client's own connection goes on meanwhile.
  EXPECT_EQ(session->state(), SessionState::connected);
  const std::string path = testenv::unique_path();
  Lock lock(*session, path);
  HeldLock held = lock.acquire();
  EXPECT_EQ(session->children(path).size(), 1u);
}

TEST(Tls, NoRelayThreadOrPortIsLeftAfterClose) {
  const auto& server = tls_server();
  { Session warm_up(tls_options(server.connect_string, client_tls(server.tls_dir))); }  // one-time C client threads
  const int threads = thread_count();
  const auto listening = own_listening_sockets();
  {
    Session session(tls_options(server.connect_string, client_tls(server.tls_dir)));
    EXPECT_GT(own_listening_sockets().size(), listening.size());
  }
  EXPECT_EQ(own_listening_sockets(), listening);
  EXPECT_TRUE(eventually([&] { return thread_count() == threads; }, testenv::scaled(5s)))
      << thread_count() << " threads, " << threads << " before";
}

TEST(Tls, AnExpiredServerCertificateIsRefused) {
  testenv::Cluster expired({.tls = true, .tls_expired_server_cert = true});
  expect_refused(tls_options(expired.connect_string(), client_tls(expired.state_dir() / "tls")),
                 errc::tls_untrusted_certificate, expired.connect_string(), "expired");
}

TEST(Tls, ASessionSurvivesItsServerRestartingThroughTheRelay) {
  testenv::Cluster cluster({.tls = true, .tls_client_auth = "need"});
  // Long enough for a JVM restart on a loaded machine; only the reconnect is waited for.
  SessionOptions options = tls_options(cluster.connect_string(), client_tls(cluster.state_dir() / "tls"));
  options.session_timeout = testenv::scaled(10s);
  auto [made, port] = session_and_relay_port([&] { return std::make_unique<Session>(options); });
  ASSERT_GT(port, 0);
  Session& session = *made;
  const auto id = session.id();
  Lock lock(session, testenv::unique_path());
  HeldLock held = lock.acquire();
  // The C client's complaints while the server is away name the real server, not a relay port.
  std::mutex log_mutex;
  std::vector<std::string> log_lines;
  set_log_sink([&](LogLevel, std::string_view message) {
    std::lock_guard guard(log_mutex);
    log_lines.emplace_back(message);
  });
  cluster.stop(0);
  cluster.start(0);
  ASSERT_TRUE(eventually([&] { return session.state() == SessionState::connected; }, testenv::scaled(15s)))
      << to_string(session.state());
  set_log_sink({});
  EXPECT_EQ(session.id(), id);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session.children(lock.path()).size(), 1u);
  // The reconnection is the client's own: another socket of the process is still refused.
  EXPECT_TRUE(relay_closes_a_socket_of_this_process(port, testenv::scaled(3s)));
  EXPECT_EQ(session.children(lock.path()).size(), 1u);
  std::lock_guard lock_of_lines(log_mutex);
  ASSERT_FALSE(log_lines.empty());
  bool named = false;
  for (const auto& line : log_lines) {
    named = named || line.find(cluster.connect_string() + " (through the TLS relay)") != std::string::npos;
    for (auto at = line.find("127.0.0.1:"); at != std::string::npos; at = line.find("127.0.0.1:", at + 1))
      EXPECT_EQ(line.compare(at, cluster.connect_string().size(), cluster.connect_string()), 0) << line;
  }
  EXPECT_TRUE(named) << log_lines.front();
}

// LockFaultTest.BlackholedHolderIsToldLostBeforeAnyoneElseIsGranted, through TLS: the holder's
// connections pass a proxy (between its relay and the server) that then forwards nothing.
TEST(Tls, ABlackholedHolderIsToldLostBeforeAnyoneElseIsGranted) {
  const auto& server = tls_server();
  testenv::Proxy proxy(server.connect_string);
  // The certificate names 127.0.0.1, which is the proxy's address too.
  SessionOptions holder_options = tls_options(proxy.address(), client_tls(server.tls_dir));
  holder_options.session_timeout = 3000ms;
  Session holder(holder_options);
  Session waiter(tls_options(server.connect_string, client_tls(server.tls_dir)));
  expect_blackholed_holder_told_lost_first(holder, waiter, proxy, testenv::unique_path());
}

// A lock through TLS on a 3-server ensemble; the server the session is on is killed (the leader
// or not): the C client moves to another server through the relay's port for it. The lock is kept
// (same session, node still there), or lost and the holder told, as without TLS.
TEST(Tls, OnAnEnsembleTheSessionMovesToAnotherServerThroughTheRelay) {
  // Tick 200 ms: sessions up to 4 s (20 ticks), room for an election when the leader is killed.
  testenv::Cluster cluster({.servers = 3, .tick_ms = 200, .tls = true, .tls_client_auth = "need"});
  SessionOptions options = tls_options(cluster.connect_string(), client_tls(cluster.state_dir() / "tls"));
  options.session_timeout = 4000ms;
  options.ensemble_tick_time = 200ms;
  Session session(options);
  const auto id = session.id();
  const std::string path = testenv::unique_path();
  Lock lock(session, path);
  HeldLock held = lock.acquire();
  const FencingToken first = held.token();
  const int on = connected_server(cluster);
  ASSERT_GE(on, 0) << "no connection of the relay to a server of the ensemble";

  cluster.kill(on);
  ASSERT_TRUE(eventually([&] {
    const int now_on = connected_server(cluster);
    return session.state() == SessionState::connected && now_on >= 0 && now_on != on;
  }, testenv::scaled(20s))) << to_string(session.state()) << ", on server " << connected_server(cluster);
  RecordProperty("lock", held.lost() ? "lost and told" : "kept");
  if (!held.lost()) {
    EXPECT_EQ(session.id(), id);
    const auto children = session.children(path);
    ASSERT_EQ(children.size(), 1u);
    EXPECT_EQ(path + "/" + children.front(), held.node_path());
  } else {
    EXPECT_EQ(held.loss_reason(), LossReason::session_lost);
  }
  held.release();
  // The lock works on the server the session moved to.
  HeldLock again = lock.acquire();
  EXPECT_GT(again.token(), first);
}

// Session::set_servers through the relay: it opens ports for the servers it did not relay, the
// session moves off the server no longer listed, and keeps its lock once that server stops. A
// name that does not resolve is refused before anything changes.
TEST(Tls, ASessionGivenOtherServersMovesThroughTheRelayAndKeepsItsLock) {
  testenv::Cluster cluster({.servers = 3, .tls = true, .tls_client_auth = "need"});
  // The server left is a follower: the leader's stop would cost the grant whenever the election
  // outlasts the lead time (docs/operations.md), which is not this test's.
  const int left = cluster.follower(testenv::scaled(30s));
  const std::string others = cluster.connect_string_except(left);
  SessionOptions options = tls_options(cluster.server_address(left), client_tls(cluster.state_dir() / "tls"));
  // 6 s, longer under the sanitizers: a reconnection slowed by a loaded machine is not this test's.
  options.session_timeout = std::min(testenv::scaled(6000ms), std::chrono::milliseconds(15000));
  Session session(options);
  const auto id = session.id();
  Lock lock(session, testenv::unique_path());
  HeldLock held = lock.acquire();

  std::error_code ec;
  EXPECT_FALSE(session.set_servers("nosuchhost.invalid:2181", ec));
  EXPECT_EQ(ec, errc::unknown_host);
  ASSERT_TRUE(session.set_servers(others));
  EXPECT_EQ(session.servers(), others);
  std::this_thread::sleep_for(1s);
  cluster.stop(left);
  // Past the session timeout: a session left with the stopped server alone would be lost by then.
  std::this_thread::sleep_for(options.session_timeout + 2s);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session.id(), id);
  EXPECT_EQ(session.state(), SessionState::connected);
  EXPECT_EQ(session.children(lock.path()).size(), 1u);
}

// One silent server through TLS: the server the session is on is frozen (SIGSTOP: it takes packets
// and answers nothing) while the other two serve. The C client alone would leave it after 2/3 of the
// session timeout (2.67 s of 4 s), later than the 1.667 s of silence this session tolerates (lead
// time 1.5 s, a heartbeat every 0.833 s); the session monitor moves the session through the relay
// in time (1.25 s after its latest answer), and the lock is kept.
TEST(Tls, OneSilentServerLosesNoLockThroughTheRelay) {
  // Tick 200 ms: sessions up to 4 s (20 ticks).
  testenv::Cluster cluster({.servers = 3, .tick_ms = 200, .tls = true, .tls_client_auth = "need"});
  SessionOptions options = tls_options(cluster.connect_string(), client_tls(cluster.state_dir() / "tls"));
  options.session_timeout = 4000ms;
  options.ensemble_tick_time = 200ms;
  options.safety_margin = 1500ms;
  // A follower goes silent, so that the ensemble keeps its leader: a new session until one is on one.
  std::unique_ptr<Session> session;
  int on = -1;
  for (int attempt = 0; attempt < 30; ++attempt) {
    session = std::make_unique<Session>(options);
    on = connected_server(cluster);
    if (on >= 0 && on != cluster.leader()) break;
    session.reset();
    on = -1;
  }
  ASSERT_GE(on, 0) << "no session landed on a follower";
  ASSERT_EQ(session->silence_tolerance(), 1667ms);
  const auto id = session->id();
  const std::string path = testenv::unique_path();
  Lock lock(*session, path);
  HeldLock held = lock.acquire();

  cluster.freeze(on);
  std::this_thread::sleep_for(3500ms);  // past the tolerated silence and the C client's own move
  const int now_on = connected_server(cluster);
  cluster.thaw(on);
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(session->id(), id);
  EXPECT_EQ(session->state(), SessionState::connected);
  EXPECT_NE(now_on, on);
  EXPECT_EQ(session->children(path).size(), 1u);
}

struct ZklockRun {
  int exit_code = -1;
  std::string output;
};

ZklockRun run_zklock(std::vector<std::string> arguments, std::map<std::string, std::string> env = {}) {
  arguments.insert(arguments.begin(), testenv::build_dir() + "/tools/zklock/zklock");
  testenv::Process zklock(arguments, {.env = std::move(env), .merge_stderr = true});
  ZklockRun run;
  run.output = zklock.read_all(testenv::scaled(30s));
  run.exit_code = zklock.wait(testenv::scaled(30s)).value_or(-1);
  return run;
}

TEST(Tls, ZklockTakesALockThroughTls) {
  // The command line of docs/operations.md's TLS section, with the test's files and server.
  const auto& server = tls_server();
  const ZklockRun run = run_zklock({"--tls-ca", server.file("ca.pem").string(), "--tls-cert",
                                    server.file("client.pem").string(), "--tls-key", server.file("client.key").string(),
                                    "-z", server.connect_string, testenv::unique_path(), "-c",
                                    "echo ran; echo \"ca=$ZKLOCK_TLS_CA\""});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("ran\n"), std::string::npos) << run.output;
  // A zklock in the job reaches the ensemble the same way.
  EXPECT_NE(run.output.find("ca=" + server.file("ca.pem").string()), std::string::npos) << run.output;

  const ZklockRun from_environment = run_zklock(
      {"-z", server.connect_string, testenv::unique_path(), "echo", "ran"},
      {{"ZKLOCK_TLS_CA", server.file("ca.pem").string()}, {"ZKLOCK_TLS_CERT", server.file("client.pem").string()},
       {"ZKLOCK_TLS_KEY", server.file("client.key").string()}});
  EXPECT_EQ(from_environment.exit_code, 0) << from_environment.output;
}

TEST_P(TlsEachVersion, ZklockNamesWhatTheTlsServerRefused) {
  const auto& server = this->server();
  const auto start = std::chrono::steady_clock::now();
  const ZklockRun no_certificate = run_zklock(
      {"--tls-ca", server.file("ca.pem").string(), "-z", server.connect_string, testenv::unique_path(), "echo", "ran"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, kNamedWithin + testenv::scaled(1s)) << "(a process start more)";
  EXPECT_EQ(no_certificate.exit_code, 69) << no_certificate.output;
  EXPECT_NE(no_certificate.output.find("client certificate"), std::string::npos) << no_certificate.output;
  EXPECT_NE(no_certificate.output.find(server.connect_string), std::string::npos) << no_certificate.output;
  EXPECT_EQ(no_certificate.output.find("ran\n"), std::string::npos) << no_certificate.output;

  const auto refused_start = std::chrono::steady_clock::now();
  const ZklockRun refused = run_zklock({"--tls-ca", server.file("ca.pem").string(), "--tls-cert",
                                        server.file("other-client.pem").string(), "--tls-key",
                                        server.file("client.key").string(), "-z", server.connect_string,
                                        testenv::unique_path(), "echo", "ran"});
  EXPECT_LT(std::chrono::steady_clock::now() - refused_start, kNamedWithin + testenv::scaled(1s));
  EXPECT_EQ(refused.exit_code, 69) << refused.output;
  EXPECT_NE(refused.output.find("refused our TLS client certificate"), std::string::npos) << refused.output;

  const ZklockRun half = run_zklock({"--tls-ca", server.file("ca.pem").string(), "--tls-cert",
                                     server.file("client.pem").string(), "-z", server.connect_string, "/x", "true"});
  EXPECT_EQ(half.exit_code, 64) << half.output;
  EXPECT_NE(half.output.find("--tls-key"), std::string::npos) << half.output;
}

// zklock starts once per job: without a TLS option it maps no OpenSSL library (loading libssl and
// libcrypto costs more of a start than the rest of zklock); given one, it runs its TLS build,
// zklock-tls. The job's parent is zklock's keeper, a fork of the zklock that took the lock.
TEST(Tls, ZklockMapsOpenSslOnlyWhenGivenATlsOption) {
#ifndef ZKR_ZKLOCK_STATIC_RUNTIME
  GTEST_SKIP() << "zklock is linked dynamically in this build: one binary, TLS included";
#endif
  const std::string report = "echo \"openssl mapped: $(grep -c -e libssl -e libcrypto /proc/$PPID/maps)\"";
  const ZklockRun plain = run_zklock({"-z", testenv::shared_server(), testenv::unique_path(), "-c", report});
  EXPECT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_NE(plain.output.find("openssl mapped: 0\n"), std::string::npos) << plain.output;

  const auto& server = tls_server();
  const ZklockRun tls = run_zklock({"--tls-ca", server.file("ca.pem").string(), "--tls-cert",
                                    server.file("client.pem").string(), "--tls-key", server.file("client.key").string(),
                                    "-z", server.connect_string, testenv::unique_path(), "-c", report});
  EXPECT_EQ(tls.exit_code, 0) << tls.output;
  EXPECT_NE(tls.output.find("openssl mapped: "), std::string::npos) << tls.output;
  EXPECT_EQ(tls.output.find("openssl mapped: 0\n"), std::string::npos) << tls.output;
}

// Plain text to a TLS-only port: zklock (which has no OpenSSL) still names it as the library does.
TEST_P(TlsEachVersion, ZklockInPlainTextToATlsPortSaysItIsOne) {
  const auto& server = this->server();
  const ZklockRun run = run_zklock({"--connect-timeout", "20", "-z", server.connect_string, testenv::unique_path(), "echo", "ran"});
  EXPECT_EQ(run.exit_code, 69) << run.output;
  EXPECT_NE(run.output.find("it is a TLS port"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("ran\n"), std::string::npos) << run.output;
}

TEST(Tls, AZklockInTheJobReachesTheEnsembleTheSameWayWithoutHostVerification) {
  // "localhost" is not in the server's certificate: only --tls-no-verify-host lets either zklock in.
  const auto& server = tls_server();
  const std::string by_name = "localhost:" + port_of(server.connect_string);
  const std::string zklock = testenv::build_dir() + "/tools/zklock/zklock";
  const ZklockRun run = run_zklock({"--tls-ca", server.file("ca.pem").string(), "--tls-cert",
                                    server.file("client.pem").string(), "--tls-key", server.file("client.key").string(),
                                    "--tls-no-verify-host", "-z", by_name, testenv::unique_path(), "-c",
                                    fmt::format("'{}' -z \"$ZKLOCK_SERVERS\" '{}' echo inner ran", zklock,
                                                testenv::unique_path())});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("inner ran\n"), std::string::npos) << run.output;
}

}  // namespace
}  // namespace zkr::test
