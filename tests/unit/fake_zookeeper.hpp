// SPDX-License-Identifier: Apache-2.0
// An in-memory ZooKeeper behind the adapter interface (src/zk_client.hpp), with fault injection
// driven by the test, for unit tests of interleavings that real servers produce only rarely.
//
// FakeServer holds a tree of znodes (data, czxid from one global zxid counter, ephemeral owner,
// per-parent sequence counter, container/persistent/ephemeral modes, one-shot data and children
// watches; ACLs are ignored) and the sessions of the connections made by fake_factory().
//
// A FakeConnection keeps the adapter's contract: a request returns ok once queued and its callback
// runs exactly once, later, on the connection's single completion thread, in order with the watch
// events and session events of that connection. A request is applied to the tree at once, when it
// is sent; its reply then travels through the connection's queue. Holding that queue (pause) is
// therefore "the reply is on the wire": the server has acted, the client does not know yet.
//
//   - drop_connection(): every reply still queued is lost (it becomes connection_loss, although
//     the request took effect), then ConnectionEvent::connecting. Requests sent while disconnected
//     are held and sent on reconnect(), as the C client does. The session lives on in the server
//     until expired. Watches follow the real client and server: the server keeps watches per
//     connection and the client re-registers, on reconnection, only the watches whose setting
//     reply it received. So a watch whose reply was lost is gone after a drop (and an event it
//     fired before the drop is lost too), while a watch the client knows survives, and an event
//     it fires meanwhile is delivered after the reconnection.
//   - expire_session(): the server deletes the session's ephemeral nodes (firing the watches of
//     everybody else) and forgets its watches; the client learns it on reconnection (at once, or
//     when the test calls reconnect()): held requests fail with session_expired, then
//     ConnectionEvent::expired, and every later request returns invalid_state.
//   - inject(Fault): the next matching request fails with a code before it takes effect, or after
//     (the lost reply), optionally dropping the connection and rewriting the created node's owner;
//     or a hook runs just before the request is applied (to change the tree at that exact point).
//   - pause()/resume()/step()/step_through(): hold the connection's deliveries, or let exactly n
//     (or up to a named entry, see queued_entries()) through.
//   - ZooKeeperConnection::close() of a connected session ends it on the server at once (its
//     ephemerals go); a session whose connection is down lingers until the test expires it
//     (expire_abandoned_sessions() does so for every session whose client has closed its handle).
//   - multi(): every op or none, under one zxid (the czxid of its creates, the mzxid of its sets),
//     with the watches of what it changed fired only once it committed.
//   - A request larger than the server's jute.maxbuffer (set_request_limit; 0xfffff bytes by
//     default, as the server's) is refused as the server refuses it: it does not take effect and
//     the connection drops. Its record says `oversized`.
//
// Locking: one (recursive) mutex guards the whole fake. Library callbacks never run under it.
// Fault hooks run under it, on the thread that sends the request (which holds the session mutex):
// they may change the tree through the FakeServer API but must never call into the library.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "zk_client.hpp"

namespace zkr {
// GoogleTest prints a result code by name and number, not as raw bytes.
inline void PrintTo(zk_errc rc, std::ostream* out) {
  *out << make_error_code(rc).message() << " (" << static_cast<int>(rc) << ")";
}
}  // namespace zkr

namespace zkr::fake {

using FakeClock = std::chrono::steady_clock;

enum class Op { create, get_children, get_data, exists, set_data, remove, sync, multi };
std::string_view to_string(Op op);

// One injected fault: it applies once, to the first request that matches it (after `skip`).
struct Fault {
  Op op = Op::create;
  std::string path_prefix;    // requests whose path starts with this ("" matches any)
  std::int64_t session = 0;   // requests of this session (0 matches any)
  int skip = 0;               // let this many matching requests pass untouched first
  // Runs just before the request is applied (under the fake's mutex): may change the tree.
  std::function<void()> before;
  zk_errc rc = zk_errc::ok;         // otherwise: report this code instead of the real result
  bool after_apply = false;         // with rc: the request takes effect first (its reply is lost)
  bool drop_connection = false;     // then drop the connection (see FakeServer::drop_connection)
  std::int64_t owner_override = 0;  // a create applied under this fault gets this ephemeral owner
};

struct FakeNode {
  std::string data;
  detail::NodeStat stat;  // num_children and data_length filled in when read
  detail::CreateMode mode = detail::CreateMode::persistent;
  std::int32_t cversion = 0;  // the sequence number the next sequential child gets
  std::set<std::string> children;
};

struct RequestRecord {
  std::int64_t session = 0;
  Op op = Op::create;
  std::string path;     // as sent (a sequential create's prefix)
  std::string created;  // the created node, for a create that took effect
  zk_errc reported_rc = zk_errc::ok;  // what the client is told (before any later connection loss)
  bool applied = false; // took effect on the tree
  FakeClock::time_point sent;
  std::size_t bytes = 0;    // the request's size as the server reads it (a lower bound)
  bool oversized = false;   // larger than the request limit: refused, connection dropped
};

// The server's default jute.maxbuffer: a request whose length exceeds it drops the connection.
inline constexpr std::size_t kServerRequestLimit = 0xfffff;

class FakeServer : public std::enable_shared_from_this<FakeServer> {
 public:
  FakeServer();
  ~FakeServer();
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  // ---- the tree, as an outside client (an operator) sees and changes it ----
  // Returns the ZooKeeper code; `created` receives the created path.
  zk_errc create(const std::string& path, const std::string& data = {},
                 detail::CreateMode mode = detail::CreateMode::persistent, std::int64_t ephemeral_owner = 0,
             std::string* created = nullptr);
  // Creates every missing node of `path` (ancestors as containers, the last with `mode`).
  void ensure_path(const std::string& path, detail::CreateMode mode = detail::CreateMode::container);
  zk_errc remove(const std::string& path, int version = -1);
  zk_errc set_data(const std::string& path, const std::string& data, int version = -1);
  std::optional<FakeNode> node(const std::string& path) const;
  std::vector<std::string> children(const std::string& path) const;  // sorted; empty if no node
  std::size_t data_watches(const std::string& path) const;
  std::size_t data_watches(const std::string& path, std::int64_t session) const;  // `session`'s own
  std::size_t children_watches(const std::string& path) const;
  std::size_t children_watches(const std::string& path, std::int64_t session) const;  // `session`'s own
  std::size_t watches_of(std::int64_t session) const;  // `session`'s own, data and children, on every path
  std::int64_t last_zxid() const;
  // Bumps on every change of the fake (a request, a delivery, a fault, a session event): a test
  // that sees it stand still while nothing is queued knows the fake is quiet.
  std::uint64_t changes() const;
  // Deletes every container without children, as the server's container reaper does.
  int reap_empty_containers();

  // ---- faults ----
  void inject(Fault fault);
  std::size_t pending_faults() const;
  // Forgets every fault not yet triggered.
  void clear_faults();
  // Requests longer than this many bytes are refused by dropping the connection (0: no limit).
  void set_request_limit(std::size_t bytes);

  // ---- sessions and their connections (by session id) ----
  bool session_alive(std::int64_t session) const;
  std::vector<std::int64_t> live_sessions() const;
  bool connected(std::int64_t session) const;  // its connection is up
  bool paused(std::int64_t session) const;
  // Sessions whose connection is down and whose client may still reconnect it (not closed): an
  // expired one among them learns of its expiry on reconnect().
  std::vector<std::int64_t> disconnected_sessions() const;
  // Expires every live session whose client has closed its handle while disconnected, as the
  // server does once the session timeout has passed. Returns how many.
  int expire_abandoned_sessions();
  // The server's session clock: lets `elapsed` pass for every live session. A session whose
  // connection is up (paused too: its requests still arrive) is heard all along; one whose
  // connection is down, or whose client closed its handle while it was down, hears nothing, and
  // once it has heard nothing for its timeout it is expired, its nodes with it. Its client learns
  // that on reconnect(). Returns the sessions expired. Without calls to it no time passes.
  std::vector<std::int64_t> pass_time(std::chrono::milliseconds elapsed);
  void drop_connection(std::int64_t session);
  // Reconnects a dropped connection: ConnectionEvent::connected on the same session, or expired if
  // the server expired it meanwhile.
  void reconnect(std::int64_t session);
  // Expires the session on the server; with tell_client_now the client learns it at once (as after
  // a prompt reconnection), otherwise on the next reconnect().
  void expire_session(std::int64_t session, bool tell_client_now = true);
  void pause(std::int64_t session);
  void resume(std::int64_t session);
  // The client's connection reports the server "fake:2181"; when the session monitor leaves it
  // (ZooKeeperConnection::leave_current_server) the connection drops and is counted here. The next
  // server answers (the connection is resumed at once, unpaused) unless set_next_server_silent.
  int server_moves(std::int64_t session) const;
  void set_next_server_silent(bool silent);
  // While paused: delivers the next min(n, queued) entries and waits until their callbacks have
  // run. Returns how many were delivered.
  std::size_t step(std::int64_t session, std::size_t n = 1);
  // While paused: delivers entries up to and including the first one described as `what` (see
  // queued_entries); false if there is none.
  bool step_through(std::int64_t session, const std::string& what);
  std::size_t queued(std::int64_t session) const;  // replies and events not delivered yet
  // What is on the wire to the client, in order: "<op> <path>" for a reply (a sequential create's
  // path as sent), "<event> <path>" for a watch event (deleted, changed, children_changed),
  // "session <event>" for a session event.
  std::vector<std::string> queued_entries(std::int64_t session) const;
  // The latest send time of a request that went through the leader (a sync or a write) whose
  // successful reply was delivered: the session monitor's proof of life, as the fake measures it.
  FakeClock::time_point last_answered_send(std::int64_t session) const;

  // ---- what happened ----
  std::vector<RequestRecord> requests() const;
  std::size_t count_requests(const std::function<bool(const RequestRecord&)>& predicate) const;

  // Waits (bounded) until predicate() holds, re-checking on every change of the fake and at least
  // every few milliseconds. The predicate runs without the fake's mutex, so it may ask the
  // library too.
  bool wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) const;

  struct Link;     // one connection's state (fake_zookeeper.cpp)
  struct Request;  // a request as sent (fake_zookeeper.cpp)

 private:
  friend class FakeConnection;
  friend detail::ConnectionFactory fake_factory(std::shared_ptr<FakeServer> server);

  struct Watch {
    std::int64_t session;
    detail::NodeWatch fire;
    std::uint64_t id;
    bool owned = false;           // registered with an owner (detail::WatchOwner)
    detail::WatchOwner owner;
  };
  // The client's drop_abandoned_watches: `session`'s owned watches under `prefix` whose owner expired.
  void forget_abandoned_watches(std::int64_t session, const std::string& prefix);
  struct Applied {
    zk_errc rc;
    std::function<void(zk_errc)> deliver;  // runs the callback with a code (results only with ok)
    std::string created;
    std::uint64_t watch_id = 0;  // the watch this request registered, if any
  };

  std::shared_ptr<Link> open_link(std::chrono::milliseconds timeout, detail::ConnectionEventHandler on_event);
  void close_link(Link& link);
  void deliver_loop(Link& link);
  zk_errc submit(Link& link, Request request);
  void run_request_locked(Link& link, Request request);
  const Fault* take_fault_locked(Op op, const std::string& path, std::int64_t session, Fault& storage);
  void enqueue_reply_locked(Link& link, zk_errc rc, std::function<void(zk_errc)> deliver, FakeClock::time_point sent,
                            std::string what, std::uint64_t watch_id = 0);
  void enqueue_session_event_locked(Link& link, detail::ConnectionEvent event);
  void drop_locked(Link& link);
  void reconnect_locked(Link& link);
  void end_session_locked(std::int64_t session);
  void fire_locked(std::multimap<std::string, Watch>& watches, const std::string& path, detail::NodeEvent event);
  Link* link_locked(std::int64_t session) const;
  void changed_locked();

  zk_errc create_locked(const std::string& path, const std::string& data, detail::CreateMode mode,
                        std::int64_t owner, std::string& created, detail::NodeStat& stat);
  zk_errc remove_locked(const std::string& path, int version);
  zk_errc set_data_locked(const std::string& path, const std::string& data, int version, detail::NodeStat& stat);
  zk_errc multi_locked(const std::vector<detail::MultiOp>& ops, std::int64_t session, std::int64_t owner_override,
                       std::vector<detail::MultiOpOutcome>& outcomes);
  std::int64_t next_zxid_locked();
  detail::NodeStat stat_locked(const FakeNode& node) const;

  mutable std::recursive_mutex mutex_;
  mutable std::condition_variable_any changed_;
  std::uint64_t change_count_ = 0;

  std::map<std::string, FakeNode> nodes_;
  std::int64_t zxid_ = std::int64_t{1} << 32;  // epoch 1
  // While a multi is applied: its one zxid, and the watch events it fires once it commits.
  std::optional<std::int64_t> multi_zxid_;
  struct DeferredFire {
    std::multimap<std::string, Watch>* watches;
    std::string path;
    detail::NodeEvent event;
  };
  std::vector<DeferredFire>* deferred_fires_ = nullptr;
  std::size_t request_limit_ = kServerRequestLimit;
  std::int64_t next_session_ = 0x1000000000000001;
  std::set<std::int64_t> live_sessions_;
  // Per live session: its timeout, and how long it has heard nothing (pass_time).
  struct SessionClock {
    std::chrono::milliseconds timeout{};
    std::chrono::milliseconds unheard{};
  };
  std::map<std::int64_t, SessionClock> session_clocks_;
  std::map<std::int64_t, std::weak_ptr<Link>> links_;
  std::multimap<std::string, Watch> data_watches_;
  std::multimap<std::string, Watch> children_watches_;
  std::size_t count_watches_locked(const std::multimap<std::string, Watch>& watches, const std::string& path,
                                   std::int64_t session) const;
  std::uint64_t next_watch_id_ = 1;
  std::set<std::uint64_t> known_watches_;  // watches whose setting reply reached the client
  std::vector<Fault> faults_;
  std::vector<RequestRecord> records_;
  bool move_on(std::int64_t session);  // FakeConnection::leave_current_server
  std::map<std::int64_t, int> server_moves_;
  bool next_server_silent_ = false;
  std::map<std::int64_t, FakeClock::time_point> last_answered_send_;  // by session, outlives connections
};

// A connection factory bound to `server`: every connection it opens gets a new session there and
// reports ConnectionEvent::connected (negotiated timeout = requested timeout).
detail::ConnectionFactory fake_factory(std::shared_ptr<FakeServer> server);

}  // namespace zkr::fake
