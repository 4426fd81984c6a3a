// SPDX-License-Identifier: Apache-2.0
// The adapter over the ZooKeeper C client: the only interface the rest of the library uses to talk
// to ZooKeeper, and the seam where a fault-injecting fake can stand in for the real client.
//
// Every call is asynchronous. Completions and watches run on the client's single completion
// thread, in order; they must not block. close() blocks (for seconds when the ensemble is
// unreachable) and must never be called from a completion.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

namespace zkr::detail {

// The public types (zkr/session.hpp) are the adapter's own.
using NodeStat = zkr::NodeStat;
using CreateMode = zkr::CreateMode;
using MultiOp = zkr::DataOp;

// The outcome of one op of a multi: its own code (ok for every op of a committed multi; in a
// refused one, ok before the op that failed, its code there, runtime_inconsistency after it).
struct MultiOpOutcome {
  zk_errc rc = zk_errc::ok;
  std::string created_path;  // create
  NodeStat stat;             // set
};

enum class ConnectionEvent { connecting, connected, expired, auth_failed, closed };

using NodeEvent = zkr::NodeEvent;

struct ClientId {
  std::int64_t session_id = 0;
  std::string password;  // 16 bytes
};

// Every reply carries ZooKeeper's result code (zk_errc::ok on success); results only with ok.
using CreateCallback = std::function<void(zk_errc rc, std::string created_path, NodeStat)>;
// With the listing comes the listed node's own Stat (its data length, say), read at the same moment.
using ChildrenCallback = std::function<void(zk_errc rc, std::vector<std::string>, NodeStat parent)>;
using DataCallback = std::function<void(zk_errc rc, std::string data, NodeStat)>;
using StatCallback = std::function<void(zk_errc rc, NodeStat)>;
using ResultCallback = std::function<void(zk_errc rc)>;
// rc is the first failing op's code (ok if all were applied); outcomes come only with a server's
// answer (one per op).
using MultiCallback = std::function<void(zk_errc rc, std::vector<MultiOpOutcome>)>;
// A one-shot node watch. Session events are filtered out by the adapter; the watch fires once
// with the node event, or never (if the handle is closed first).
using NodeWatch = std::function<void(NodeEvent)>;
// Who still wants a watch: once it has expired, the watch is abandoned, and the connection may
// forget it without its firing (drop_abandoned_watches). Empty: kept until it fires.
using WatchOwner = std::weak_ptr<const void>;

// True if a result code proves that the server received and answered the request: success, or a
// server's refusal of the request itself (no_node, bad_version, ...). The client's own codes (above
// api_error: connection loss, timeout, invalid state, ...) and the session's troubles are not.
inline bool server_answered(zk_errc rc) {
  switch (rc) {
    case zk_errc::session_expired:
    case zk_errc::closing:
    case zk_errc::auth_failed:
    case zk_errc::session_moved:
      return false;
    default:
      return rc == zk_errc::ok || rc <= zk_errc::api_error;
  }
}

// Each request returns zk_errc::ok once it is queued; its callback then runs exactly once on the
// completion thread. A request that cannot be queued (handle expired or closing, bad arguments)
// returns the ZooKeeper code and its callback never runs: the caller decides where to report that.
class ZooKeeperConnection {
 public:
  virtual ~ZooKeeperConnection() = default;

  // How often the hosts are looked up again while connected (zero: at every poll). A connection
  // without a resolver (a fake) has nothing to set.
  virtual void set_host_resolution_interval(std::chrono::milliseconds interval) { (void)interval; }

  virtual zk_errc create(const std::string& path, const std::string& data, CreateMode mode, NodeAcl acl,
                         CreateCallback done) = 0;
  // With a watch, a children watch is registered only if the node exists.
  virtual zk_errc get_children(const std::string& path, ChildrenCallback done, NodeWatch watch = {},
                               WatchOwner owner = {}) = 0;
  // With a watch, it is registered only if the node exists (a data watch, never an exists watch).
  virtual zk_errc get_data(const std::string& path, DataCallback done, NodeWatch watch = {}, WatchOwner owner = {}) = 0;
  virtual zk_errc exists(const std::string& path, StatCallback done) = 0;
  // Sets the node's data if its version is `version` (-1: any version).
  virtual zk_errc set_data(const std::string& path, const std::string& data, int version, StatCallback done) = 0;
  virtual zk_errc remove(const std::string& path, int version, ResultCallback done) = 0;
  // Applies every op or none (a ZooKeeper multi). `ops` must not be empty.
  virtual zk_errc multi(const std::vector<MultiOp>& ops, MultiCallback done) = 0;
  // Has the server we are connected to catch up with the leader. Its success proves that the
  // leader answered after this was sent: unlike a read, which a follower cut off from the leader
  // keeps answering from its own copy.
  virtual zk_errc sync(const std::string& path, ResultCallback done) = 0;
  virtual zk_errc add_digest_auth(const std::string& user_password, ResultCallback done) = 0;

  virtual std::int64_t session_id() const = 0;
  virtual ClientId client_id() const = 0;
  virtual std::chrono::milliseconds negotiated_timeout() const = 0;
  // The node watches this connection registered that have not fired yet (the client keeps each
  // watching request's own; the server keeps one per path, kind and session).
  virtual std::size_t pending_watches() const = 0;
  // Forgets, without their firing, the registered watches on paths starting with `prefix` whose
  // owner has expired: a waiter that gave up leaves none behind, however long the node it watched
  // stands (one more per attempt otherwise). The server keeps its one watch per path and session.
  virtual void drop_abandoned_watches(const std::string& prefix) = 0;
  // The server the client is connected to or trying ("10.0.0.1:2181", "[::1]:2181"); "" if unknown.
  virtual std::string current_server() const { return {}; }
  // Makes the client leave current_server() for the next server of its list, through its own
  // connection-loss path (requests in flight fail with connection_loss, the session event
  // "connecting" follows, the session is resumed elsewhere): what the client does by itself only
  // after 2/3 of the session timeout without a reply. Only a connection that has received nothing
  // for `quiet_for` is ended (see zk_client.cpp); with zero, any connection to that server. False
  // if there was none to end.
  virtual bool leave_current_server(std::chrono::milliseconds quiet_for) {
    (void)quiet_for;
    return false;
  }
  // Replaces the client's list of servers with those of `servers` (a connect string; its chroot is
  // ignored). The client may end its connection at once (see SessionCore::apply_servers_if_quiet_locked):
  // call it only with no request in flight.
  virtual zk_errc set_servers(const std::string& servers) {
    (void)servers;
    return zk_errc::ok;
  }
  // Blocks until the handle is closed; never call it from a callback. Unfired watches are dropped.
  virtual void close() = 0;
};

using ConnectionEventHandler = std::function<void(ConnectionEvent)>;

// Starts connecting (never blocks). Events arrive on the completion thread, possibly before this
// returns. Fails (null + ec) only on arguments the client refuses.
std::unique_ptr<ZooKeeperConnection> connect_zookeeper(const std::string& servers,
                                                       std::chrono::milliseconds session_timeout,
                                                       ConnectionEventHandler on_event,
                                                       std::error_code& ec);

// The connect string as the C client reads it. It requires a port on every host (it adds no
// default) and splits a host from its port at the last ':', handing the rest to the resolver as it
// is: so every host gets its port (2181 where none was given), as a plain decimal number (the
// client reads "02181" as octal), and an IPv6 address loses its brackets ("[::1]:2181" becomes
// "::1:2181"). The chroot follows unchanged.
std::string client_connect_string(const std::string& servers);
// The same without the chroot: the host list zoo_set_servers takes.
std::string client_host_list(const std::string& servers);

// Why the hosts of a connect string cannot be resolved ("zk1.example: Name or service not known"),
// or "" if at least one resolves: zookeeper_init fails on a name it cannot resolve, without saying
// which or why.
std::string describe_unresolvable_hosts(const std::string& servers);

// Why no session came from `servers`, host by host, found by a TCP connection attempt to each
// address (all at once, for at most `budget`): "zk1:2181 refuses connections (nothing listens
// there); zk2:2181 does not answer within 300 ms (...)". For a first connect that timed out.
std::string describe_unreachable_servers(const std::string& servers, std::chrono::milliseconds budget);

// How a session opens its connections: connect_zookeeper, or a fake in unit tests.
using ConnectionFactory = std::function<std::unique_ptr<ZooKeeperConnection>(
    const std::string& servers, std::chrono::milliseconds session_timeout, ConnectionEventHandler on_event,
    std::error_code& ec)>;

}  // namespace zkr::detail
