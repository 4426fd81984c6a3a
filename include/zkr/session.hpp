// SPDX-License-Identifier: Apache-2.0
// Session: one ZooKeeper session shared by every lock, election and semaphore of a process.
//
// The session monitor turns session loss into lock loss. The C client learns that the server
// expired a session only when it reconnects; during a partition it never learns. So the monitor
// keeps its own deadline.
//
// Only the leader expires sessions, and it hears of ours late: a follower answers reads (and the
// client's pings) from its own copy, even while cut off from the leader, and forwards the sessions
// it heard from to the leader only when the leader pings it (every half tick). So the monitor
// counts as proof of life only a reply that went through the leader: a `sync` (its heartbeat) or
// a write. Each such reply credits the session with a moment by which the leader had surely heard
// of it, `credit`, and the monitor declares the session lost at
//
//     credit + negotiated_timeout - safety_margin
//
// which is at least the safety margin before the earliest moment the leader could expire the
// session. Holders are told "lost" at least `lead_time()` (= the safety margin) before anyone else
// can be granted their lock, less the time their own callback takes to run. With `sent` the send
// time of the request answered:
//   - If an earlier request on the same connection was answered at least a tick before `sent`, a
//     leader ping reached our follower between that request and ours, and the follower's answer
//     to it, which names our session, went to the leader ahead of our request on the same stream:
//     credit = that earlier request's send time.
//   - Otherwise credit = sent - (tick / 2 + heartbeat_interval): the follower answered a ping
//     within half a tick before forwarding ours, and the session's previous request (a heartbeat,
//     or the reconnect the leader itself validated) was at most an interval before. Never later
//     than that previous request's own send: after a gap (a frozen process) it was longer ago.
// While connected the monitor sends one `sync` every heartbeat_interval; that is the whole
// heartbeat traffic, however many locks the session holds:
//   - min(negotiated_timeout / 4, (negotiated_timeout - safety_margin) / 3) where that is at
//     least a tick and 100 ms: each heartbeat is then credited with the one before (forward_lag
//     = heartbeat_interval), and the session tolerates at least two intervals of silence. At 10 s
//     and Debian's 2 s tick: one sync every 2.5 s, 24 a minute (a Curator session pings 18
//     times); at 30 s every 7.5 s, 8 a minute (Curator: 6); at 20 s with a 6 s lead time
//     (zklock's) every 4.667 s.
//   - otherwise min(negotiated_timeout / 6, tick / 2), with forward_lag = tick / 2 +
//     heartbeat_interval (a 4 s session: one every 667 ms).
// Time is measured on CLOCK_BOOTTIME, which keeps counting while the machine is suspended, as the
// servers' clocks do.
//
// A deadline the monitor slept through is not a loss by itself. The monitor declares the session
// lost at the deadline when it is there to see it pass. When it finds the deadline passed on a
// look half a second or more after its previous one (the process was frozen or starved, the
// machine suspended, the session's worker thread kept busy), the holders were not told in time
// anyway, and the session may well be alive: a frozen process is not a lost one. The monitor
// then asks: a heartbeat at once, another a tick after the first answer, which is credited with
// a moment since the wake. That proof ends the doubt (as does an earlier one that leaves the
// deadline far enough ahead for it). A sync answered
// means the leader had not expired the session when it answered, so it never had, and nothing
// held on it was given away meanwhile. Until the proof, nothing is granted; without one by half
// the lead time after the later of the deadline and the wake, the session is declared lost as it
// would have been. So a holder frozen for half the timeout keeps its lock wherever the tick
// leaves room: the fresh proof comes a tick and 0.1 s plus two round trips after the wake, and
// until then the first answer credits the session with the last heartbeat sent before the freeze
// (a 20 s session with a 6 s lead time, or the default lead time at 30 s: always; the library's
// 10 s with Debian's 2 s tick: when the freeze began in the first two thirds of a heartbeat
// interval).
//
// One silent server (its host lost power, a cable cut: packets vanish, nothing is refused) must not
// cost the session while the rest of the ensemble serves. The C client leaves a server only after
// 2/3 of the timeout without a reply, later than the silence tolerated, so the monitor moves the
// connection to the next server of the list itself (the client's own connection-loss path) when
// nothing came back through the leader for
//
//     move_after = (silence_tolerance + heartbeat_interval) / 2
//
// since the latest proof or (re)connect, and when a connect attempt on one server goes unanswered
// for (silence_tolerance - heartbeat_interval) / 4, or, before the first session, for
// connect_timeout / the number of servers. A server that still answers but not through the leader
// (a follower cut off from it serves reads and pings from its own copy for syncLimit ticks) is
// left the same way when no session of the process heard through the leader on it for
// move_after / 2; a connection still hearing from its server is ended only then, so that a
// session of the process that works on that server keeps its connection. A move proves nothing
// and moves no deadline: the formula above still runs from the latest proof through the leader,
// wherever the session is connected, so the lead time holds unchanged.
//
// A lost session is replaced by a new one (a new session id); nothing of the old one is ever
// adopted. Locks granted on the old session stay lost. The old handle is closed (which deletes its
// nodes on the server at once) only after every holder on it has let go of its lock (released or
// destroyed its HeldLock), or once the server would have expired it anyway: closing earlier would
// hand the lock to the next waiter while the old holder is still stopping.
#pragma once

#include <time.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <zkr/error.hpp>
namespace zkr {

// CLOCK_BOOTTIME as a std::chrono clock: like steady_clock, but it keeps counting while the machine
// is suspended, as the servers' clocks do. The session monitor keeps its deadline on it.
struct BootClock {
  // The std::chrono clock interface (Clock requirements).
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<BootClock>;
  static constexpr bool is_steady = true;
  static constexpr clockid_t clock_id = CLOCK_BOOTTIME;
  static time_point now() noexcept;
};

// The session monitor's deadline for one session: the moment it declares the session lost unless
// a reply through the leader comes first (see the formula above).
struct SessionDeadline {
  std::int64_t session_id = 0;  // the session it is for
  BootClock::time_point at;  // when the monitor declares it lost
};

// A session's state, as Session::on_state_change tells it.
enum class SessionState {
  connecting,   // no session yet (first connect, or a replacement after loss)
  connected,    // session live and connected
  suspended,    // connection dropped; the session may still be alive on the server
  lost,         // expired, or declared lost by the monitor; a replacement follows
  closed,       // close() was called; terminal
  auth_failed,  // credentials refused; terminal
};
// The state's name.
std::string_view to_string(SessionState state) noexcept;

// Why a grant made on a session (a lock, a lease, a leadership term) was lost.
enum class LossReason {
  session_lost,      // expired, or declared lost by the session monitor
  connection_lost,   // LossPolicy::on_disconnect and the connection dropped
  node_deleted,      // our node was deleted by someone else (an operator)
  session_closed,    // Session::close() or the Session was destroyed
};
std::string_view to_string(LossReason reason) noexcept;

// What decided that a session was lost (for messages: LossReason::session_lost covers the first
// two, LossReason::connection_lost the third).
enum class SessionLossCause {
  server_expiry,   // the ensemble expired it (heard on reconnecting)
  local_deadline,  // the session monitor's deadline passed with no acknowledgement through the leader
  disconnect,      // LossPolicy::on_disconnect and the connection dropped
};
// A phrase for messages: "the ensemble expired it", ...
std::string_view to_string(SessionLossCause cause) noexcept;

// A session id as the library, zklock and ZooKeeper's own tools write it: "0x" and lower-case hex.
std::string session_id_text(std::int64_t session_id);

// Who may do what with the nodes a session creates for a recipe.
enum class NodeAcl {
  open,                    // world:anyone has all rights
  creator_all,             // only the creating identity (digest auth needed)
  creator_all_world_read,  // creator has all rights, everyone may read (for --list)
};

// ---- ZooKeeper data on the session (Session::get, create, commit, ...) ----

// A node's metadata, as the server keeps it.
struct NodeStat {
  std::int64_t czxid = 0;  // the transaction that created it
  std::int64_t mzxid = 0;  // the last one that changed its data
  std::int64_t ctime_ms = 0;  // when it was created, ms since the epoch
  std::int64_t mtime_ms = 0;  // when its data last changed
  std::int32_t version = 0;   // data version: what set/remove/check compare with
  std::int32_t cversion = 0;  // children version
  std::int64_t ephemeral_owner = 0;  // session id of an ephemeral node's owner, else 0
  std::int32_t data_length = 0;  // bytes of data
  std::int32_t num_children = 0;  // children it has
};

enum class CreateMode { persistent, persistent_sequential, ephemeral, ephemeral_sequential, container };

// What a watch on a node heard (Session::get and children with a watch).
enum class NodeEvent { created, deleted, changed, children_changed, other };
// A one-shot watch: runs once on the session's callback thread with the node's next change, or
// never (the node did not exist when it was set, or the session was lost or closed first: a new
// session does not carry the old one's watches). It must not block for long.
using DataWatch = std::function<void(NodeEvent)>;

// A node's data and its stat, read together.
struct NodeData {
  std::string data;  // the node's bytes
  NodeStat stat;  // its stat when they were read
};

// One operation of a transaction (a ZooKeeper multi).
struct DataOp {
  // The operations of a multi.
  enum class Kind { create, set, remove, check };
  Kind kind = Kind::check;  // which operation this is
  std::string path;  // the node it acts on
  std::string data;       // create, set
  CreateMode mode = CreateMode::persistent;  // create
  NodeAcl acl = NodeAcl::open;               // create
  int version = -1;       // set, remove, check: the expected data version (-1: any)
};
// "create /a/b", "check /x (version 3)": for messages.
std::string describe(const DataOp& op);

// What one committed operation produced.
struct DataOpResult {
  std::string created_path;  // create: the path as created (with the sequence suffix, if any)
  NodeStat stat;             // set: the node's new stat
};

// Operations committed together or not at all (Session::commit). Each path is checked when the
// operation is added: a bad one throws Error(errc::invalid_path) naming it and why (code built
// without exceptions checks its paths with validate_path() first, zkr/names.hpp).
class Transaction {
 public:
  // Add an operation: create, set (version -1: any) or remove (version -1: any).
  Transaction& create(std::string path, std::string data = {}, CreateMode mode = CreateMode::persistent,
                      NodeAcl acl = NodeAcl::open);
  Transaction& set(std::string path, std::string data, int version = -1);
  Transaction& remove(std::string path, int version = -1);
  // Refuses the whole transaction unless the node exists (with data version `version`, unless -1).
  Transaction& check(std::string path, int version = -1);
  const std::vector<DataOp>& ops() const { return ops_; }
  bool empty() const { return ops_.empty(); }

 private:
  std::vector<DataOp> ops_;
};

enum class LossPolicy {
  at_deadline,    // lost when the monitor's deadline passes (default): survives short blips
  on_disconnect,  // lost as soon as the connection drops: shortest possible overlap risk
};

// A user name and password for ZooKeeper's digest scheme.
struct DigestCredentials {
  std::string user;  // the digest user
  std::string password;  // and its password
  // Reads "user:password" from the first line of a file. Throws Error naming the file.
  static DigestCredentials from_file(const std::filesystem::path& file);
  // The same without exceptions: nullopt, and ec set, if the file cannot be read or is malformed.
  static std::optional<DigestCredentials> from_file(const std::filesystem::path& file, std::error_code& ec) noexcept;
};

enum class LogLevel { error, warning, info, debug };
std::string_view to_string(LogLevel level) noexcept;  // "error", "warning", "info", "debug"
using LogSink = std::function<void(LogLevel, std::string_view message)>;
// Process-wide sink for the library's and the C client's log lines. The default discards all but
// errors... and those too: the library never writes to stderr by itself. Thread-safe. Replaces a
// record sink set with set_log_record_sink (there is one sink per process).
void set_log_sink(LogSink sink, LogLevel max_level = LogLevel::warning);

// One log line with what the library knows of its context. The views are valid only during the
// sink's call. `message` is the same text a plain LogSink gets.
struct LogRecord {
  std::chrono::system_clock::time_point time;  // when it was logged
  LogLevel level = LogLevel::info;  // its level
  std::string_view message;  // the text, valid during the call
  std::int64_t session_id = 0;  // the session the line concerns, 0 if none or unknown
  std::string_view path;        // the recipe's path (a lock's), empty if none
  std::string_view node;        // the contender's node, empty if none
};
using LogRecordSink = std::function<void(const LogRecord&)>;
// Like set_log_sink, with the context as fields; replaces a plain sink (one sink per process).
void set_log_record_sink(LogRecordSink sink, LogLevel max_level = LogLevel::warning);
// A record sink that writes one JSON object per line to `out`, flushed after each line:
//   {"time":"2026-01-31T23:59:59.123456Z","level":"warning","message":"...",
//    "session":"0x1000a2b3c","path":"/locks/a","node":"/locks/a/_c_...-lock-0000000007"}
// session, path and node are left out when unknown. Strings are JSON-escaped (control characters
// as \u00XX); bytes that are not valid UTF-8 become U+FFFD. Lines from several threads never
// interleave. `out` must outlive the sink; it is not closed.
LogRecordSink json_lines_log_sink(std::FILE* out);

// Per-lock metrics (SessionMetrics::locks) get a series of their own only for the paths named
// here, so that the number of series stays bounded: every other path adds to the one series whose
// path is "". An entry ending in '/' names every recipe path under it ("/locks/"; "/" for all), any
// other entry that exact path; an entry must be absolute (the Session constructor throws
// errc::invalid_argument naming it). Once `max_paths` paths have series, further opted-in paths
// count under "" too, and in SessionMetrics::unlabelled_overflow. A series costs about 300 bytes
// for the session's life; an acquisition on a labelled path costs one lookup in a small map.
struct LockPathLabels {
  std::vector<std::string> paths;  // empty: none (the default)
  std::size_t max_paths = 64;  // the most paths kept; later ones are counted under ""
};

// TLS to the ensemble's secure client port (secureClientPort). Debian's C client has no TLS: the
// session relays each of its connections through a port of its own on 127.0.0.1, which accepts only
// this process's own client, and carries it to the real server over TLS 1.2 or later. Failures are
// named (errc::tls_*, each message naming the server) rather than reported as a timeout.
struct TlsOptions {
  // CA certificates (PEM) that the servers' certificates must chain to: a file, or a directory
  // prepared with `openssl rehash`. Required.
  std::filesystem::path ca;
  // A client certificate chain and its private key (PEM), for servers with ssl.clientAuth=need.
  // Both or neither.
  std::filesystem::path cert;
  std::filesystem::path key;
  // The server's certificate must name the host (DNS name or IP address) as the connect string
  // gives it. Turn off only for certificates that name no usable host.
  bool verify_host = true;
};

// How a Session connects and when it declares itself lost.
struct SessionOptions {
  // "host:port[,host:port...][/chroot]".
  std::string servers = "127.0.0.1:2181";
  // Requested session timeout; the server may negotiate another (see negotiated_timeout()).
  std::chrono::milliseconds session_timeout{10'000};
  // How long the constructor waits for the first connection. A server that does not answer a first
  // connect is left for the next after its share of it (connect_timeout / the number of servers).
  std::chrono::milliseconds connect_timeout{15'000};
  LossPolicy loss_policy = LossPolicy::at_deadline;
  // Lead time given to holders before the earliest possible server-side expiry. Zero means the
  // default, a quarter of the negotiated timeout. Clamped so that the session tolerates at least
  // two heartbeat intervals of silence (see the top of this file): to the larger of
  // negotiated_timeout - tick / 2 - 3 * min(negotiated_timeout / 6, tick / 2) and, where a quarter
  // of negotiated_timeout is at least a tick and 100 ms, negotiated_timeout - 3 * (tick + 100 ms).
  std::chrono::milliseconds safety_margin{0};
  // The ensemble's tickTime (zoo.cfg; 2000 ms is ZooKeeper's and Debian's default). The leader
  // hears of this session up to half a tick late through a follower; the monitor allows for that.
  // A value larger than the real tick is safe (the session is declared lost a little earlier); a
  // smaller one eats into the lead time.
  std::chrono::milliseconds ensemble_tick_time{2'000};
  // How often the connect string's host names are looked up again while connected, to follow DNS
  // changes (they are always looked up again after a connection loss). Zero looks them up each
  // time the client polls its socket - the C client's own default, a resolver call per request and
  // reply, which costs about a sixth of an uncontended acquisition on loopback.
  std::chrono::milliseconds host_resolution_interval{10'000};
  std::optional<DigestCredentials> credentials;
  // Which lock paths get series of their own in the per-lock metrics (see LockPathLabels).
  LockPathLabels metrics_path_labels;
  // TLS to every server of `servers` (see TlsOptions); empty: plain text.
  std::optional<TlsOptions> tls;
  // How many asynchronous acquisitions of locks and read/write locks the session starts at once:
  // those whose node's create, or first listing, is still unanswered. Past it, an async_acquire that
  // waits without a deadline or stop token waits in the session's memory, in order and without a
  // request to the server, until one of those is answered; a burst of thousands then costs the
  // memory of this many in flight, not of all (docs/SCALING.md). Acquisitions with a deadline or a
  // stop token, blocking ones, and those of an AcquisitionBatch are never held back (and may start
  // ahead of held-back ones). Zero: no limit.
  std::size_t max_starting_acquisitions = 128;
};

// The shortest session timeout that can give `lead_time` (as SessionOptions::safety_margin) on an
// ensemble of tickTime `ensemble_tick_time`: for a holder that needs a given time to stop its work
// (zklock's --kill-after). The ensemble may still negotiate it down to its maxSessionTimeout:
// compare Session::lead_time() once connected.
std::chrono::milliseconds shortest_session_timeout(std::chrono::milliseconds lead_time,
                                                   std::chrono::milliseconds ensemble_tick_time);

// A histogram of durations in fixed buckets, as Prometheus keeps them: cumulative_counts[i] counts
// the observations <= kDurationBuckets[i] seconds; the last element (+Inf) equals count.
inline constexpr double kDurationBuckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                              2.5,   5,     10,   30,    60,   300, 900, 3600};
inline constexpr std::size_t kDurationBucketCount = std::size(kDurationBuckets) + 1;  // with +Inf
// One histogram.
struct DurationHistogram {
  std::array<std::uint64_t, kDurationBucketCount> cumulative_counts{};  // observations <= each bucket's bound
  std::uint64_t count = 0;  // all observations
  std::chrono::nanoseconds sum{0};  // their sum
};

// The metrics of the contenders (locks, read/write locks, semaphore leases, leadership) of one
// recipe path, or of all paths without series of their own (path ""): see LockPathLabels. A
// semaphore in a peer's layout counts each lease as one acquisition under its own path; its
// internal lock, a step of that acquisition, is counted nowhere.
struct LockMetrics {
  std::string path;  // "" for every path not labelled
  std::int64_t held = 0;     // grants held now (a read/write lock's readers each count)
  std::int64_t waiting = 0;  // acquisitions asked for and not yet decided (election followers too)
  DurationHistogram wait;    // from asking to the grant, per grant (count = grants)
  DurationHistogram hold;    // from the grant to its release or loss, per hold that ended
  std::uint64_t timeouts = 0;       // acquisitions that ended without a grant: timed out,
  std::uint64_t cancellations = 0;  //   cancelled (stop token, release of a waiter),
  std::uint64_t busy = 0;           //   refused at once (try_acquire: would_block),
  std::uint64_t failures = 0;       //   or failed (session closed, no auth, ...)
  // Grants lost, indexed by LossReason (session_lost, connection_lost, node_deleted, session_closed).
  std::array<std::uint64_t, 4> losses{};
};

// Session counters and per-lock metrics, from Session::metrics().
struct SessionMetrics {
  std::uint64_t sessions_established = 0;  // including replacements
  std::uint64_t sessions_lost = 0;  // sessions declared lost
  std::uint64_t losses_by_deadline = 0;  // of them: by the monitor's deadline
  std::uint64_t losses_by_expiry = 0;  // told expired by the server
  std::uint64_t losses_by_disconnect = 0;  // on a disconnection (LossPolicy::on_disconnect)
  std::uint64_t suspensions = 0;  // connections lost and the session suspended
  std::uint64_t deadline_rechecks = 0;  // deadlines the monitor slept through and asked about
  std::uint64_t requests_sent = 0;  // requests sent to the ensemble
  std::uint64_t heartbeats_sent = 0;  // of them the monitor's heartbeats (syncs)
  std::uint64_t wakeups = 0;  // blocker and second-blocker watches that fired (see lock.hpp)
  std::uint64_t acquisitions = 0;  // grants
  std::uint64_t acquire_timeouts = 0;  // acquisitions that timed out
  std::uint64_t acquire_cancellations = 0;  // acquisitions cancelled
  std::uint64_t locks_lost = 0;  // grants lost
  std::chrono::nanoseconds total_wait{0};  // time waited by all acquisitions
  std::chrono::nanoseconds total_hold{0};  // time held by all grants released or lost
  // Per path (see LockPathLabels): the "" series first, then the labelled paths sorted by path.
  std::vector<LockMetrics> locks;
  std::uint64_t unlabelled_overflow = 0;  // acquisitions on opted-in paths past max_paths
  // Shared counters (zkr/shared_counter.hpp): writes applied, writes that lost the race to
  // another writer (bad version) and were retried, operations whose outcome is unknown (lost reply).
  std::uint64_t counter_writes = 0;
  std::uint64_t counter_conflicts = 0;
  std::uint64_t counter_unknown_outcomes = 0;
  // Group membership (zkr/group.hpp): members that joined (first join after join()), joined again
  // on a new session after a loss (rejoin), lost their node; views that went from fresh to stale.
  std::uint64_t group_joins = 0;
  std::uint64_t group_rejoins = 0;
  std::uint64_t group_losses = 0;
  std::uint64_t group_views_stale = 0;
  // Barrier waits (zkr/barrier.hpp: Barrier::wait, DoubleBarrier::enter and leave, and their async
  // forms), by how they ended: passed, timed out, cancelled (stop requested), failed (an error).
  std::uint64_t barrier_passes = 0;
  std::uint64_t barrier_timeouts = 0;
  std::uint64_t barrier_cancellations = 0;
  std::uint64_t barrier_failures = 0;
  // The session at the time of the snapshot.
  SessionState state = SessionState::connecting;
  std::chrono::milliseconds negotiated_timeout{0};
  std::chrono::milliseconds lead_time{0};
};

// Keeps a listener registered; unregisters on destruction.
class Subscription {
 public:
  Subscription() = default;
  // A subscription that runs `cancel` when reset or destroyed; movable, not copyable.
  explicit Subscription(std::function<void()> cancel) : cancel_(std::move(cancel)) {}
  Subscription(Subscription&& other) noexcept : cancel_(std::exchange(other.cancel_, nullptr)) {}
  Subscription& operator=(Subscription&& other) noexcept {
    reset();
    cancel_ = std::exchange(other.cancel_, nullptr);
    return *this;
  }
  ~Subscription() { reset(); }
  // Cancels now (once).
  void reset() {
    if (cancel_) std::exchange(cancel_, nullptr)();
  }

 private:
  std::function<void()> cancel_;
};

namespace detail {
class SessionCore;
struct Internals;  // the library's own way in (src/internals.hpp): not part of the API
// A key only the library can cut: constructors and accessors that take one are the library's own,
// for its recipes and tests, not the API's.
class Passkey {
  Passkey() = default;
  friend struct Internals;
};
}  // namespace detail

// Every call of the API that can throw on a normal path has a form that takes `std::error_code& ec`
// last and never throws (zkr/error.hpp): it sets ec to the code the throwing form would have
// thrown, clears it on success, and returns an empty result on failure (nullopt, an empty HeldLock
// or vector, a default NodeData). A constructor that validates its arguments has a factory instead
// (Session::connect, Lock::make, ...). Code built with -fno-exceptions uses only these.
class Session {
 public:
  // Connects and waits for the first session. Throws Error with errc::invalid_connect_string,
  // errc::invalid_argument (timeouts, path labels, TLS files), errc::unknown_host,
  // errc::connect_timeout, errc::auth_failed, or an errc::tls_* code once every server refused the
  // TLS connection (or errc::tls_server_requires_tls: plain text to a TLS-only port).
  explicit Session(SessionOptions options);
  // The constructor without exceptions: the connected Session, or nullopt with ec set to one of
  // the codes above. `auto session = zkr::Session::connect(options, ec);` (a Session does not move:
  // keep the optional where it was made).
  static std::optional<Session> connect(SessionOptions options, std::error_code& ec) noexcept;
  // The library's: wraps an already connected core (unit tests with a fake connection).
  Session(detail::Passkey, std::shared_ptr<detail::SessionCore> core) : core_(std::move(core)) {}
  ~Session();  // close()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  SessionState state() const;
  // Current session id, 0 while there is none.
  std::int64_t id() const;
  // What decided the latest loss of a session of this Session; empty if none was lost.
  std::optional<SessionLossCause> last_loss_cause() const;
  std::chrono::milliseconds negotiated_timeout() const;
  // The lead time holders get before the earliest possible server-side expiry.
  std::chrono::milliseconds lead_time() const;
  // How long the session tolerates hearing nothing through the leader before it is declared lost:
  // negotiated_timeout - lead_time - forward_lag (see the top of this file), counted from the send
  // of the latest heartbeat answered while heartbeats are answered in time.
  std::chrono::milliseconds silence_tolerance() const;
  const SessionOptions& options() const;

  // The servers the session connects to: options().servers until set_servers changes them.
  std::string servers() const;
  // Gives the session another list of servers, in the form of SessionOptions::servers with the same
  // chroot, without ending the session: for servers replaced, added or removed while the service
  // runs. Returns false, changing nothing, when the list names the same servers as now (in any
  // order). Off a server no longer listed the connection moves at once. Otherwise it stays, except
  // that when servers were added it may move to one of them, with the probability that spreads the
  // clients evenly (the C client's rebalancing, which tells servers apart by address only: servers
  // sharing a host count as one). A move is a reconnection that keeps the session and its grants,
  // as after a dropped connection (under LossPolicy::on_disconnect the grants are lost; requests
  // sent meanwhile may fail with zk_errc::connection_loss). The client takes the list once no
  // request is in flight (normally within a round trip); a session lost later is replaced on the
  // new list. Host names are looked up as the client takes the list, holding up the session's other
  // work meanwhile: a slow resolver delays it. Over TLS, the relay opens a port for each server it
  // did not relay yet (a name that does not resolve is refused, as at the start).
  // Throws Error: errc::invalid_connect_string (naming the problem), errc::invalid_argument (another
  // chroot), errc::unknown_host (TLS only), errc::session_closed.
  bool set_servers(const std::string& servers);
  bool set_servers(const std::string& servers, std::error_code& ec) noexcept;

  // Blocks until connected (true) or the timeout passes / the session is closed (false).
  bool wait_connected(std::chrono::milliseconds timeout) const;

  // Listener runs on the session's callback thread, once per state change, in order. It must not
  // block for long: other notifications (lock loss) wait behind it.
  [[nodiscard]] Subscription on_state_change(std::function<void(SessionState)> listener);

  // Listener runs on the session's callback thread with the current session's deadline: first at
  // once (once a session is established), then each time the deadline moves (each heartbeat or
  // write the leader answers, a reconnection). For a watchdog that must act even when this process
  // cannot (zklock's keeper, which stops the job if the process stops renewing the deadline it
  // relays): its deadline is never later than the moment the monitor declares the session lost,
  // as long as it only ever takes the latest deadline heard. A listener that falls behind delays
  // only the deadlines it hears, and so errs early.
  [[nodiscard]] Subscription on_deadline(std::function<void(SessionDeadline)> listener);

  SessionMetrics metrics() const;

  // ---- ZooKeeper data, on this session (no second client, no second heartbeat) ----
  // Synchronous; each waits for a connection (as long as the connect timeout) and then for the
  // reply. Paths must pass validate_path (zkr/names.hpp): a bad one throws Error(errc::invalid_path)
  // naming it and why. Other failures throw Error with the server's code (zk_errc::no_node,
  // node_exists, bad_version, not_empty, no_auth...) naming the path, errc::session_closed,
  // errc::connect_timeout, or errc::timed_out (no reply within the session timeout, outcome
  // unknown). A write that fails with zk_errc::connection_loss may or may not have been applied.
  // Must not be called from the session's own threads (a state listener or a loss callback).
  // With a watch: it hears the node's next data change or deletion (set only if the node exists).
  NodeData get(std::string_view path, DataWatch watch = {}) const;
  std::optional<NodeStat> exists(std::string_view path) const;  // empty if there is no node
  // With a watch: it hears the next change of the node's children or its deletion.
  std::vector<std::string> children(std::string_view path, DataWatch watch = {}) const;
  // Returns the created path (with the sequence suffix for sequential modes).
  std::string create(std::string_view path, std::string_view data = {}, CreateMode mode = CreateMode::persistent,
                     NodeAcl acl = NodeAcl::open);
  NodeStat set(std::string_view path, std::string_view data, int version = -1);
  void remove(std::string_view path, int version = -1);
  // Commits every operation or none (a ZooKeeper multi). A refusal throws Error with the code of
  // the first operation that failed, naming its path, which op it was ("op 2 of 3: create /a"),
  // and that none was applied. One result per op, in order.
  std::vector<DataOpResult> commit(const Transaction& transaction);

  // The data calls without exceptions: ec set to what the forms above throw, and an empty result
  // (a default NodeData or NodeStat, nullopt, an empty vector or string) on failure. exists()
  // answers nullopt with ec clear when there is no node.
  NodeData get(std::string_view path, std::error_code& ec) const noexcept;
  NodeData get(std::string_view path, DataWatch watch, std::error_code& ec) const noexcept;
  std::optional<NodeStat> exists(std::string_view path, std::error_code& ec) const noexcept;
  std::vector<std::string> children(std::string_view path, std::error_code& ec) const noexcept;
  std::vector<std::string> children(std::string_view path, DataWatch watch, std::error_code& ec) const noexcept;
  std::string create(std::string_view path, std::string_view data, std::error_code& ec) noexcept;
  std::string create(std::string_view path, std::string_view data, CreateMode mode, NodeAcl acl,
                     std::error_code& ec) noexcept;
  NodeStat set(std::string_view path, std::string_view data, std::error_code& ec) noexcept;
  NodeStat set(std::string_view path, std::string_view data, int version, std::error_code& ec) noexcept;
  void remove(std::string_view path, std::error_code& ec) noexcept;
  void remove(std::string_view path, int version, std::error_code& ec) noexcept;
  std::vector<DataOpResult> commit(const Transaction& transaction, std::error_code& ec) noexcept;

  // Closes the session: held locks are reported lost (reason session_closed) and their nodes go
  // with the session. Idempotent. Blocks until the C client handle is closed.
  void close();

  // The library's (see detail::Passkey).
  const std::shared_ptr<detail::SessionCore>& core(detail::Passkey) const { return core_; }

 private:
  std::shared_ptr<detail::SessionCore> core_;
};

}  // namespace zkr
