// Session: one ZooKeeper session shared by every lock, election and semaphore of a process.
//
// The session monitor turns session loss into lock loss. The C client learns that the server
// expired a session only when it reconnects; during a partition it never learns. So the monitor
// keeps its own deadline: it remembers when it *sent* the latest request that the server answered
// (the server heard from us no earlier than that), and declares the session lost at
//
//     last_acknowledged_send + negotiated_timeout - safety_margin
//
// which is no later than the earliest moment the server could expire the session. Holders are told
// "lost" at least `lead_time()` (= the safety margin) before anyone else can be granted their lock,
// less the time their own callback takes to run. While connected the monitor sends one small
// request every negotiated_timeout/6, so a healthy session never nears its deadline; that is the
// whole heartbeat traffic, however many locks the session holds.
//
// A lost session is closed and replaced by a new one (a new session id); nothing of the old one is
// ever adopted. Locks granted on the old session stay lost.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace zkr {

enum class SessionState {
  connecting,   // no session yet (first connect, or a replacement after loss)
  connected,    // session live and connected
  suspended,    // connection dropped; the session may still be alive on the server
  lost,         // expired, or declared lost by the monitor; a replacement follows
  closed,       // close() was called; terminal
  auth_failed,  // credentials refused; terminal
};
std::string_view to_string(SessionState state) noexcept;

enum class LossPolicy {
  at_deadline,    // lost when the monitor's deadline passes (default): survives short blips
  on_disconnect,  // lost as soon as the connection drops: shortest possible overlap risk
};

struct DigestCredentials {
  std::string user;
  std::string password;
  // Reads "user:password" from the first line of a file. Throws Error naming the file.
  static DigestCredentials from_file(const std::filesystem::path& file);
};

enum class LogLevel { error, warning, info, debug };
using LogSink = std::function<void(LogLevel, std::string_view message)>;
// Process-wide sink for the library's and the C client's log lines. The default discards all but
// errors... and those too: the library never writes to stderr by itself. Thread-safe.
void set_log_sink(LogSink sink, LogLevel max_level = LogLevel::warning);

struct SessionOptions {
  // "host:port[,host:port...][/chroot]".
  std::string servers = "127.0.0.1:2181";
  // Requested session timeout; the server may negotiate another (see negotiated_timeout()).
  std::chrono::milliseconds session_timeout{10'000};
  // How long the constructor waits for the first connection.
  std::chrono::milliseconds connect_timeout{15'000};
  LossPolicy loss_policy = LossPolicy::at_deadline;
  // Lead time given to holders before the earliest possible server-side expiry. Zero means the
  // default, a quarter of the negotiated timeout. Clamped to two thirds of it, so that the session
  // tolerates at least a third of its timeout of silence.
  std::chrono::milliseconds safety_margin{0};
  std::optional<DigestCredentials> credentials;
};

struct SessionMetrics {
  std::uint64_t sessions_established = 0;  // including replacements
  std::uint64_t sessions_lost = 0;
  std::uint64_t losses_by_deadline = 0;
  std::uint64_t losses_by_expiry = 0;
  std::uint64_t losses_by_disconnect = 0;
  std::uint64_t suspensions = 0;
  std::uint64_t requests_sent = 0;
  std::uint64_t heartbeats_sent = 0;
  std::uint64_t wakeups = 0;  // blocker watches that fired: each wakes one waiting contender
  std::uint64_t acquisitions = 0;
  std::uint64_t acquire_timeouts = 0;
  std::uint64_t acquire_cancellations = 0;
  std::uint64_t locks_lost = 0;
  std::chrono::nanoseconds total_wait{0};
  std::chrono::nanoseconds total_hold{0};
};

// Keeps a listener registered; unregisters on destruction.
class Subscription {
 public:
  Subscription() = default;
  explicit Subscription(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  Subscription(Subscription&& other) noexcept : cancel_(std::exchange(other.cancel_, nullptr)) {}
  Subscription& operator=(Subscription&& other) noexcept {
    reset();
    cancel_ = std::exchange(other.cancel_, nullptr);
    return *this;
  }
  ~Subscription() { reset(); }
  void reset() {
    if (cancel_) std::exchange(cancel_, nullptr)();
  }

 private:
  std::function<void()> cancel_;
};

namespace detail {
class SessionCore;
}

class Session {
 public:
  // Connects and waits for the first session. Throws Error with errc::invalid_connect_string,
  // errc::invalid_argument (timeouts), errc::connect_timeout, or errc::auth_failed.
  explicit Session(SessionOptions options);
  // Wraps an already connected core (unit tests with a fake connection).
  explicit Session(std::shared_ptr<detail::SessionCore> core) : core_(std::move(core)) {}
  ~Session();  // close()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  SessionState state() const;
  // Current session id, 0 while there is none.
  std::int64_t id() const;
  std::chrono::milliseconds negotiated_timeout() const;
  // The lead time holders get before the earliest possible server-side expiry.
  std::chrono::milliseconds lead_time() const;
  const SessionOptions& options() const;

  // Blocks until connected (true) or the timeout passes / the session is closed (false).
  bool wait_connected(std::chrono::milliseconds timeout) const;

  // Listener runs on the session's callback thread, once per state change, in order. It must not
  // block for long: other notifications (lock loss) wait behind it.
  [[nodiscard]] Subscription on_state_change(std::function<void(SessionState)> listener);

  SessionMetrics metrics() const;

  // Closes the session: held locks are reported lost (reason session_closed) and their nodes go
  // with the session. Idempotent. Blocks until the C client handle is closed.
  void close();

  // For the recipes; not part of the stable API.
  const std::shared_ptr<detail::SessionCore>& core() const { return core_; }

 private:
  std::shared_ptr<detail::SessionCore> core_;
};

}  // namespace zkr
