// SPDX-License-Identifier: Apache-2.0
// zkr_soak_client: one participant of the soak. It takes the lock over and over; under each grant
// its job reads a counter from the fenced store and writes it back incremented, with the grant's
// token, a few times, pausing in between (the pauses are where a freeze lands: a holder checks that
// it still holds, sleeps, and then acts, exactly the race fencing exists for). Everything it
// believes and does goes to its log (see soak_log.hpp). It stops when its stdin closes.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>

#include <boost/program_options.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>

#include "internals.hpp"
#include "session_core.hpp"  // client_id(), so that the driver can force a server-side expiry
#include "soak_log.hpp"

namespace {

using namespace std::chrono_literals;
namespace po = boost::program_options;

struct ClientOptions {
  int id = 0;
  std::string servers;
  std::string lock_path;
  std::string store_socket;
  std::string log_file;
  std::string session_file;
  int session_timeout_ms = 3000;
  int tick_ms = 2000;  // the ensemble's tickTime
  int acquire_timeout_ms = 12000;
  int hold_max_ms = 20;
  std::uint64_t seed = 1;
};

class EventLog {
 public:
  EventLog(const std::string& file, int client) : client_(client) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(fmt::format("cannot open log {}: {}", file, std::strerror(errno)));
  }
  ~EventLog() { ::close(fd_); }

  template <typename... Args>
  void event(std::string_view kind, fmt::format_string<Args...> format, Args&&... args) {
    std::string line = fmt::format("{} {} {} ", zkr::soak::monotonic_ns(), client_, kind);
    line += fmt::format(format, std::forward<Args>(args)...);
    line += '\n';
    // One write per line: a SIGKILL never leaves half a record.
    [[maybe_unused]] auto written = ::write(fd_, line.data(), line.size());
  }

 private:
  int fd_ = -1;
  int client_;
};

// A line-based connection to the store; reconnects once when the connection broke.
class StoreConnection {
 public:
  explicit StoreConnection(std::string socket_path) : socket_path_(std::move(socket_path)) {}
  ~StoreConnection() { disconnect(); }

  // The reply line, or nullopt if the store cannot be reached.
  std::optional<std::string> request(const std::string& line) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (fd_ < 0 && !connect()) continue;
      if (auto reply = exchange(line)) return reply;
      disconnect();
    }
    return std::nullopt;
  }

 private:
  bool connect() {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, socket_path_.c_str(), sizeof address.sun_path - 1);
    if (fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) return true;
    disconnect();
    return false;
  }
  void disconnect() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    buffer_.clear();
  }
  std::optional<std::string> exchange(const std::string& line) {
    std::string out = line + "\n";
    for (std::size_t sent = 0; sent < out.size();) {
      auto n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      sent += static_cast<std::size_t>(n);
    }
    while (true) {
      auto newline = buffer_.find('\n');
      if (newline != std::string::npos) {
        std::string reply = buffer_.substr(0, newline);
        buffer_.erase(0, newline + 1);
        return reply;
      }
      char chunk[512];
      auto n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<std::size_t>(n));
    }
  }

  std::string socket_path_;
  int fd_ = -1;
  std::string buffer_;
};

// Written on every (re)connect so that the driver can attach to the session and expire it.
void write_session_file(const std::string& file, const zkr::detail::ClientId& id) {
  std::string password_hex;
  for (unsigned char byte : id.password) password_hex += fmt::format("{:02x}", byte);
  const std::string temporary = file + ".tmp";
  {
    int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return;
    std::string text = fmt::format("{:x} {}\n", id.session_id, password_hex);
    [[maybe_unused]] auto written = ::write(fd, text.data(), text.size());
    ::close(fd);
  }
  std::error_code ignored;
  std::filesystem::rename(temporary, file, ignored);
}

class SoakClient {
 public:
  SoakClient(ClientOptions options, std::stop_token stop)
      : options_(std::move(options)),
        stop_(std::move(stop)),
        log_(options_.log_file, options_.id),
        store_(options_.store_socket),
        random_(options_.seed ^ (static_cast<std::uint64_t>(::getpid()) << 20)) {}

  void run() {
    log_.event("START", "pid={}", ::getpid());
    while (!stop_.stop_requested()) {
      try {
        run_session();
      } catch (const std::exception& e) {
        log_.event("FAIL", "a={} error={}", attempt_, one_word(e.what()));
        std::this_thread::sleep_for(500ms);
      }
    }
    log_.event("STOP", "");
  }

 private:
  static std::string one_word(std::string_view text) {
    std::string out(text);
    for (char& c : out)
      if (c == ' ' || c == '\n') c = '_';
    return out;
  }

  void run_session() {
    zkr::SessionOptions options;
    options.servers = options_.servers;
    options.session_timeout = std::chrono::milliseconds(options_.session_timeout_ms);
    options.ensemble_tick_time = std::chrono::milliseconds(options_.tick_ms);
    options.connect_timeout = 30s;
    zkr::Session session(options);
    note_session(session);
    // A job told of the loss stops gracefully, taking up to half the lead time it was given: the
    // next grant must still come after it stopped.
    graceful_stop_max_ms_ = static_cast<int>(session.lead_time().count() / 2);
    // Runs on the session's callback thread, at the latest inside ~Session: captures nothing that
    // dies before the session does.
    auto subscription = session.on_state_change([this, &session](zkr::SessionState state) {
      if (state == zkr::SessionState::connected) note_session(session);
    });
    zkr::Lock lock(session, options_.lock_path);
    while (!stop_.stop_requested()) {
      ++attempt_;
      log_.event("ATTEMPT", "a={}", attempt_);
      std::error_code ec;
      auto held = lock.try_acquire_for(std::chrono::milliseconds(options_.acquire_timeout_ms), stop_, ec);
      if (!held) {
        if (ec == zkr::errc::timed_out) log_.event("TIMEOUT", "a={}", attempt_);
        else if (ec == zkr::errc::cancelled) break;
        else log_.event("FAIL", "a={} error={}", attempt_, one_word(ec.message()));
        if (ec && ec != zkr::errc::timed_out) std::this_thread::sleep_for(100ms);
        continue;
      }
      log_.event("GRANT", "a={} token={} node={} session={:x}", attempt_, held->token().value(),
                 held->node_path().substr(held->node_path().rfind('/') + 1), held->session_id());
      const std::string how = job(*held);
      const auto reason = held->loss_reason();
      log_.event("END", "a={} token={} how={} reason={}", attempt_, held->token().value(), how,
                 reason ? one_word(zkr::to_string(*reason)) : "-");
      held->release();
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(0, 5)));
    }
  }

  void note_session(zkr::Session& session) {
    write_session_file(options_.session_file, zkr::detail::Internals::core(session)->client_id());
    log_.event("SESSION", "id={:x} timeout_ms={}", session.id(), session.negotiated_timeout().count());
  }

  // Read-increment-write the counter a few times under the grant. Returns how the belief ended.
  std::string job(const zkr::HeldLock& held) {
    const std::int64_t token = held.token().value();
    const int steps = uniform(1, 3);
    for (int step = 0; step < steps; ++step) {
      if (stop_.stop_requested()) return "stopped";
      if (held.lost()) return stop_gracefully();
      // Check, then pause, then act: a freeze here is a holder that wakes up after losing.
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(0, options_.hold_max_ms)));
      auto value = store_op(token, "READ", fmt::format("READ counter {} {} {}", token, options_.id, next_op_id()));
      if (!value) return "fenced";
      std::this_thread::sleep_for(std::chrono::milliseconds(uniform(0, 3)));
      const std::int64_t next = *value + 1;
      if (!store_op(token, "WRITE",
                    fmt::format("WRITE counter {} {} {} {}", token, next, options_.id, next_op_id()), next))
        return "fenced";
    }
    return held.lost() ? stop_gracefully() : "released";
  }

  // Still believing, the job winds down (flushes, cleans up) before it lets go of the lock.
  std::string stop_gracefully() {
    const int ms = uniform(0, graceful_stop_max_ms_);
    log_.event("STOPPING", "a={} ms={}", attempt_, ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return "lost";
  }

  // Sends one request and logs it with its answer. The counter's value (READ) or the value written
  // (WRITE) when accepted; nullopt when refused or unreachable.
  std::optional<std::int64_t> store_op(std::int64_t token, std::string_view op, const std::string& request,
                                       std::int64_t written = 0) {
    const std::string op_id = split_op_id(request);
    auto reply = store_.request(request);
    std::string result = "ERR";
    std::optional<std::int64_t> value;
    if (reply && reply->starts_with("OK")) {
      result = "OK";
      value = op == "READ" ? std::stoll(reply->substr(3)) : written;
    } else if (reply && reply->starts_with("STALE")) {
      result = "STALE";
    }
    log_.event("OP", "a={} token={} op={} id={} value={} result={}", attempt_, token, op, op_id,
               value.value_or(-1), result);
    return value;
  }

  static std::string split_op_id(const std::string& request) { return request.substr(request.rfind(' ') + 1); }

  std::string next_op_id() { return fmt::format("{}-{}-{}", options_.id, ::getpid(), ++ops_); }

  int uniform(int low, int high) { return std::uniform_int_distribution<int>(low, high)(random_); }

  ClientOptions options_;
  std::stop_token stop_;
  EventLog log_;
  StoreConnection store_;
  std::mt19937_64 random_;
  std::uint64_t attempt_ = 0;
  int graceful_stop_max_ms_ = 0;
  std::uint64_t ops_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  ClientOptions options;
  po::options_description description("zkr_soak_client options");
  description.add_options()
      ("id", po::value(&options.id)->required(), "client number")
      ("servers", po::value(&options.servers)->required(), "connect string")
      ("path", po::value(&options.lock_path)->required(), "lock path")
      ("store", po::value(&options.store_socket)->required(), "fenced store's Unix socket")
      ("log", po::value(&options.log_file)->required(), "event log (appended)")
      ("session-file", po::value(&options.session_file)->required(), "where the current session id goes")
      ("session-timeout-ms", po::value(&options.session_timeout_ms), "requested session timeout")
      ("tick-ms", po::value(&options.tick_ms), "the servers' tickTime")
      ("acquire-timeout-ms", po::value(&options.acquire_timeout_ms), "give up an attempt after this")
      ("hold-max-ms", po::value(&options.hold_max_ms), "longest pause before each store request")
      ("seed", po::value(&options.seed), "random seed");
  try {
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, description), values);
    po::notify(values);
  } catch (const std::exception& e) {
    std::ostringstream usage;
    usage << description;
    fmt::print(stderr, "zkr_soak_client: {}\n{}", e.what(), usage.str());
    return 64;
  }
  ::signal(SIGPIPE, SIG_IGN);

  // The driver closes our stdin to stop us (and so does its death).
  std::stop_source stop;
  std::thread stdin_watch([&stop] {
    char byte;
    while (::read(STDIN_FILENO, &byte, 1) > 0) {
    }
    stop.request_stop();
  });
  stdin_watch.detach();
  try {
    SoakClient(options, stop.get_token()).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "zkr_soak_client {}: {}\n", options.id, e.what());
    return 1;
  }
  return 0;
}
