// SPDX-License-Identifier: Apache-2.0
// Timeouts, directories, the Cluster wrapper over zkenv.py, shared_server, unique_path and
// forced session expiry.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "testenv.hpp"

namespace zkr::testenv {
namespace {

std::string env_or(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : std::move(fallback);
}

std::string random_hex(int digits) {
  static std::mutex mutex;
  static std::mt19937_64 generator{std::random_device{}()};
  std::lock_guard lock(mutex);
  return fmt::format("{:0{}x}", generator() >> (64 - 4 * digits), digits);
}

}  // namespace

std::string trim_trailing_space(std::string text) {
  auto end = text.find_last_not_of(" \t\r\n");
  text.erase(end == std::string::npos ? 0 : end + 1);
  return text;
}

double timeout_scale() {
  static const double scale = [] {
    const char* text = std::getenv("ZKR_TEST_TIMEOUT_SCALE");
    if (!text || !*text) return 1.0;
    char* end = nullptr;
    double value = std::strtod(text, &end);
    if (end == text || *end != '\0' || !(value > 0)) {
      throw std::invalid_argument(fmt::format(
          "ZKR_TEST_TIMEOUT_SCALE must be a positive number, not '{}'", text));
    }
    return value;
  }();
  return scale;
}

std::chrono::milliseconds scaled(std::chrono::milliseconds timeout) {
  return std::chrono::milliseconds(
      static_cast<std::chrono::milliseconds::rep>(static_cast<double>(timeout.count()) * timeout_scale()));
}

std::filesystem::path make_temp_dir(std::string_view prefix) {
  const std::string base = env_or("TMPDIR", "/tmp");
  std::string pattern = fmt::format("{}/{}-XXXXXX", base, prefix);
  if (!::mkdtemp(pattern.data())) {
    throw std::runtime_error(fmt::format("cannot create a directory {} in {}: {}", pattern.substr(base.size() + 1), base,
                                         std::strerror(errno)));
  }
  return pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

long long last_stamp(const std::filesystem::path& file) {
  std::ifstream in(file);
  long long last = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) last = std::stoll(line);
  return last;
}

std::string source_dir() { return env_or("ZKR_SOURCE_DIR", ZKR_TESTENV_SOURCE_DIR); }
std::string build_dir() { return env_or("ZKR_BUILD_DIR", ZKR_TESTENV_BINARY_DIR); }

// ---------------------------------------------------------------------------------------------
// Cluster

Cluster::Cluster(ClusterOptions options) {
  if (options.servers < 1) {
    throw std::invalid_argument(fmt::format("Cluster: servers must be >= 1, not {}", options.servers));
  }
  directory_ = std::make_unique<ManagedDirectory>("zkr-cluster", "zkenv.py");
  try {
    std::vector<std::string> start{"start", "--servers", std::to_string(options.servers), "--tick-ms",
                                   std::to_string(options.tick_ms), "--sync-limit",
                                   std::to_string(options.sync_limit), "--timeout",
                                   fmt::format("{}", 60 * timeout_scale())};
    for (auto& argument : directory_->owner_arguments()) start.push_back(std::move(argument));
    tls_ = options.tls;
    if (options.tls) {
      start.insert(start.end(), {"--tls", "--tls-client-auth", options.tls_client_auth, "--tls-server-cert",
                                 options.tls_expired_server_cert ? "expired" : "good"});
      if (!options.tls_protocols.empty()) start.insert(start.end(), {"--tls-protocols", options.tls_protocols});
      if (!options.tls_cipher_suites.empty())
        start.insert(start.end(), {"--tls-cipher-suites", options.tls_cipher_suites});
    }
    std::string connect = zkenv(start);
    // zkenv.py prints the connect string, one 127.0.0.1:port per server in index order.
    std::stringstream addresses(connect);
    for (std::string address; std::getline(addresses, address, ',');) {
      client_ports_.push_back(std::stoi(address.substr(address.rfind(':') + 1)));
    }
    if (size() != options.servers) {
      throw std::runtime_error(fmt::format("zkenv.py start printed '{}', expected {} addresses",
                                           connect, options.servers));
    }
  } catch (...) {
    directory_->keep();  // stopped all the same; its logs say why the start failed
    throw;
  }
}

Cluster::~Cluster() = default;

std::string Cluster::zkenv(const std::vector<std::string>& arguments) const {
  return directory_->run(arguments, scaled(std::chrono::seconds(180)));
}

void check_server_index(std::string_view who, int index, int count) {
  if (index < 0 || index >= count) {
    throw std::out_of_range(fmt::format("{}: no server {} (servers are 0..{})", who, index, count - 1));
  }
}

std::vector<std::string> server_command(std::string_view who, std::string_view command, int index, int count) {
  check_server_index(who, index, count);
  std::vector<std::string> arguments{std::string(command), std::to_string(index)};
  if (command == "start-server") {
    arguments.insert(arguments.end(), {"--timeout", fmt::format("{}", 60 * timeout_scale())});
  }
  return arguments;
}

int leader_among(int count, const std::function<std::string(int)>& srvr) {
  for (int index = 0; index < count; ++index) {
    std::string reply = srvr(index);
    if (reply.find("Mode: leader") != std::string::npos || reply.find("Mode: standalone") != std::string::npos) {
      return index;
    }
  }
  return -1;
}

bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

void Cluster::check_index(int index) const { check_server_index("Cluster", index, size()); }

std::string Cluster::connect_string() const {
  std::string result;
  for (int port : client_ports_) {
    if (!result.empty()) result += ',';
    result += fmt::format("127.0.0.1:{}", port);
  }
  return result;
}

std::string Cluster::server_address(int index) const {
  check_index(index);
  return fmt::format("127.0.0.1:{}", client_ports_[static_cast<std::size_t>(index)]);
}

int Cluster::size() const { return static_cast<int>(client_ports_.size()); }

int Cluster::leader() const {
  // A TLS server has no plain port to ask; zkenv.py asks over TLS.
  if (tls_) return std::stoi(zkenv({"leader"}));
  return leader_among(size(), [this](int index) { return four_letter_word(server_address(index), "srvr"); });
}

bool Cluster::wait_for_leader(std::chrono::milliseconds timeout) const {
  return wait_until([this] { return leader() >= 0; }, timeout);
}

int Cluster::follower(std::chrono::milliseconds timeout) const {
  int found = -1;
  if (!wait_until([&] { return (found = leader()) >= 0; }, timeout))
    throw std::runtime_error(fmt::format("Cluster: no server of {} became leader within {} ms", size(), timeout.count()));
  if (size() < 2) throw std::runtime_error("Cluster: a single server has no follower");
  return found == 0 ? 1 : 0;
}

std::vector<std::string> Cluster::addresses_except(int index) const {
  check_server_index("Cluster", index, size());
  std::vector<std::string> addresses;
  for (int i = 0; i < size(); ++i)
    if (i != index) addresses.push_back(server_address(i));
  return addresses;
}

std::string Cluster::connect_string_except(int index) const {
  std::string result;
  for (const auto& address : addresses_except(index)) result += (result.empty() ? "" : ",") + address;
  return result;
}

void Cluster::kill(int index) { zkenv(server_command("Cluster", "kill", index, size())); }
void Cluster::stop(int index) { zkenv(server_command("Cluster", "stop-server", index, size())); }
void Cluster::start(int index) { zkenv(server_command("Cluster", "start-server", index, size())); }
void Cluster::freeze(int index) { zkenv(server_command("Cluster", "freeze", index, size())); }
void Cluster::thaw(int index) { zkenv(server_command("Cluster", "thaw", index, size())); }

pid_t Cluster::pid(int index) const {
  check_index(index);
  // state.json is written by zkenv.py: each server entry has exactly one "pid" (a number or null),
  // in index order, and nothing else is called that.
  std::ifstream in(state_dir() / "state.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t position = 0;
  for (int seen = 0;; ++seen) {
    position = text.find("\"pid\":", position);
    if (position == std::string::npos) return 0;
    position += 6;
    if (seen == index) {
      char* end = nullptr;
      long value = std::strtol(text.c_str() + position, &end, 10);
      return end == text.c_str() + position ? 0 : static_cast<pid_t>(value);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Four-letter words

std::string four_letter_word(const std::string& address, std::string_view command,
                             std::chrono::milliseconds timeout) {
  auto colon = address.rfind(':');
  sockaddr_in server{};
  server.sin_family = AF_INET;
  int port = 0;
  try {
    port = colon == std::string::npos ? 0 : std::stoi(address.substr(colon + 1));
  } catch (const std::exception&) {
  }
  if (port <= 0 || port > 65535 || ::inet_pton(AF_INET, address.substr(0, colon).c_str(), &server.sin_addr) != 1) {
    throw std::invalid_argument(fmt::format("four_letter_word: '{}' is not IPv4 address:port", address));
  }
  server.sin_port = htons(static_cast<std::uint16_t>(port));

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto wait_for = [&](int fd, short events) {
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd pfd{fd, events, 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      return ready > 0;
    }
  };

  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  std::string reply;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&server), sizeof server) == 0 || errno == EINPROGRESS) {
    int error = 0;
    socklen_t length = sizeof error;
    if (wait_for(fd, POLLOUT) && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 &&
        error == 0 && ::send(fd, command.data(), command.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(command.size())) {
      char chunk[4096];
      while (wait_for(fd, POLLIN)) {
        ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) break;
        reply.append(chunk, static_cast<std::size_t>(got));
      }
    }
  }
  ::close(fd);
  return reply;
}

// ---------------------------------------------------------------------------------------------
// Shared server and paths

std::string shared_server() {
  if (const char* dir = std::getenv("ZKR_TEST_ZK_DIR"); dir && *dir) {
    std::string file = std::string(dir) + "/connect_string";
    std::ifstream in(file);
    std::string connect;
    if (!in || !std::getline(in, connect) || trim_trailing_space(connect).empty()) {
      throw std::runtime_error(fmt::format(
          "ZKR_TEST_ZK_DIR is set but {} is missing or empty: did the zk_shared_start fixture run?",
          file));
    }
    return trim_trailing_space(connect);
  }
  // Run by hand: one private server for the whole process, stopped at exit.
  static std::once_flag once;
  static std::unique_ptr<Cluster> private_cluster;
  std::call_once(once, [] { private_cluster = std::make_unique<Cluster>(); });
  return private_cluster->connect_string();
}

std::string unique_path(std::string_view hint) {
  std::string name = "no-test";
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name = fmt::format("{}.{}", info->test_suite_name(), info->name());
  }
  if (!hint.empty()) name += fmt::format("-{}", hint);
  // Parameterised tests have '/' in their names; znode names must not.
  for (char& c : name) {
    if (c == '/' || c == ' ') c = '_';
  }
  return fmt::format("/zkr-test/{}-{}", name, random_hex(8));
}

// ---------------------------------------------------------------------------------------------
// Forced expiry

namespace {

struct ConnectWait {
  std::mutex mutex;
  std::condition_variable changed;
  int state = 0;
};

void record_state(zhandle_t*, int type, int state, const char*, void* context) {
  if (type != ZOO_SESSION_EVENT) return;
  auto* wait = static_cast<ConnectWait*>(context);
  std::lock_guard lock(wait->mutex);
  wait->state = state;
  wait->changed.notify_all();
}

}  // namespace

void expire_session(const std::string& servers, std::int64_t session_id, const std::string& password) {
  clientid_t client{};
  client.client_id = session_id;
  if (password.size() != sizeof client.passwd) {
    throw std::invalid_argument(fmt::format("expire_session: the password must be {} bytes, not {}",
                                            sizeof client.passwd, password.size()));
  }
  std::memcpy(client.passwd, password.data(), sizeof client.passwd);

  ConnectWait wait;
  zhandle_t* handle = zookeeper_init(servers.c_str(), record_state, 10000, &client, &wait, 0);
  if (!handle) {
    throw std::runtime_error(fmt::format("expire_session: zookeeper_init({}) failed: {}", servers,
                                         std::strerror(errno)));
  }
  int final_state;
  {
    std::unique_lock lock(wait.mutex);
    wait.changed.wait_for(lock, scaled(std::chrono::seconds(30)), [&] {
      return wait.state == ZOO_CONNECTED_STATE || wait.state == ZOO_EXPIRED_SESSION_STATE ||
             wait.state == ZOO_AUTH_FAILED_STATE;
    });
    final_state = wait.state;
  }
  // Closing the second handle is what ends the session on the server.
  zookeeper_close(handle);
  if (final_state == ZOO_EXPIRED_SESSION_STATE) return;  // already gone: the goal is reached
  if (final_state != ZOO_CONNECTED_STATE) {
    throw std::runtime_error(fmt::format(
        "expire_session: could not attach to session {:#x} on {} (state {})", session_id, servers,
        final_state));
  }
}

}  // namespace zkr::testenv
