// SPDX-License-Identifier: Apache-2.0
// The one file that includes the ZooKeeper C client's header.
#include "zk_client.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include <zookeeper/zookeeper.h>

#include <fmt/format.h>

#include <zkr/names.hpp>

#include "client_log.hpp"
#include "host_port.hpp"
#include "log.hpp"
#include "tls_relay.hpp"

namespace zkr::detail {
namespace {

// The C client's result codes are the protocol's, as zk_errc spells them.
static_assert(ZOK == static_cast<int>(zk_errc::ok) && ZNONODE == static_cast<int>(zk_errc::no_node) &&
              ZCONNECTIONLOSS == static_cast<int>(zk_errc::connection_loss));
zk_errc code(int rc) { return static_cast<zk_errc>(rc); }

NodeStat to_node_stat(const Stat* stat) {
  NodeStat out;
  if (stat == nullptr) return out;
  out.czxid = stat->czxid;
  out.mzxid = stat->mzxid;
  out.ctime_ms = stat->ctime;
  out.mtime_ms = stat->mtime;
  out.version = stat->version;
  out.cversion = stat->cversion;
  out.ephemeral_owner = stat->ephemeralOwner;
  out.data_length = stat->dataLength;
  out.num_children = stat->numChildren;
  return out;
}

int to_flags(CreateMode mode) {
  switch (mode) {
    case CreateMode::persistent: return ZOO_PERSISTENT;
    case CreateMode::persistent_sequential: return ZOO_PERSISTENT_SEQUENTIAL;
    case CreateMode::ephemeral: return ZOO_EPHEMERAL;
    case CreateMode::ephemeral_sequential: return ZOO_EPHEMERAL_SEQUENTIAL;
    case CreateMode::container: return ZOO_CONTAINER;
  }
  return ZOO_PERSISTENT;
}

// "creator has everything, anyone may read" has no ready-made constant in the C client.
ACL creator_all_world_read_entries[] = {
    {ZOO_PERM_ALL, {const_cast<char*>("auth"), const_cast<char*>("")}},
    {ZOO_PERM_READ, {const_cast<char*>("world"), const_cast<char*>("anyone")}},
};
ACL_vector creator_all_world_read_acl = {2, creator_all_world_read_entries};

ACL_vector* to_acl(NodeAcl acl) {
  switch (acl) {
    case NodeAcl::open: return &ZOO_OPEN_ACL_UNSAFE;
    case NodeAcl::creator_all: return &ZOO_CREATOR_ALL_ACL;
    case NodeAcl::creator_all_world_read: return &creator_all_world_read_acl;
  }
  return &ZOO_OPEN_ACL_UNSAFE;
}

NodeEvent to_node_event(int type) {
  if (type == ZOO_CREATED_EVENT) return NodeEvent::created;
  if (type == ZOO_DELETED_EVENT) return NodeEvent::deleted;
  if (type == ZOO_CHANGED_EVENT) return NodeEvent::changed;
  if (type == ZOO_CHILD_EVENT) return NodeEvent::children_changed;
  return NodeEvent::other;
}

// Every handle's lines: a refused connection, retried by each handle every few hundred
// milliseconds, is logged once and then counted (client_log.hpp).
void forward_client_log(const char* message) {
  static auto& repeats = *new RepeatSummary(client_log_summary_interval);  // outlives the client threads
  const ClientLogLine line = parse_client_log_line(message);
  if (!log_enabled(line.level)) return;
  // A session with TLS hands the client its relay's ports: the line names the real server instead.
  const std::string named = name_real_servers(std::string(line.message));
  if (auto text = repeats.admit(line.level, named, RepeatSummary::Clock::now())) log_write(line.level, *text);
}

void configure_client_logging_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Only messages logged without a handle use the stream; route those nowhere rather than to
    // stderr. Handle messages go through forward_client_log.
    if (FILE* sink = std::fopen("/dev/null", "w")) zoo_set_log_stream(sink);
    zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);
  });
}

class CConnection;

struct HandleContext;

// A registered watch's callback, linked into its handle's list of pending watches until it fires
// or the handle closes. Linked in place rather than kept in a set: a session may hold a watch per
// held lock, tens of thousands of them, and this is one allocation each.
struct WatchContext {
  HandleContext* handle;
  NodeWatch watch;
  WatchContext* previous = nullptr;
  WatchContext* next = nullptr;
};

// A watch with an owner (a waiter's): registered with owned_node_watcher, kept in a list of its
// own, and forgotten once its owner has expired and its path is swept (see
// drop_abandoned_watches). Only waiters' watches carry this; a holder's keeps the small form.
struct OwnedWatchContext : WatchContext {
  WatchOwner owner;
  std::string path;  // as the client registered it, to remove it by (watcher, context)
  bool children = false;
  bool registered = false;  // its request succeeded, so the client keeps it; under watches_mutex
};

// Owned by the connection; freed only after zookeeper_close returns, so a late watcher call
// never sees freed memory.
struct HandleContext {
  ConnectionEventHandler on_event;
  zhandle_t* handle = nullptr;  // set before any request is sent
  std::mutex watches_mutex;
  // Guarded by watches_mutex: the plain watches and the owned ones, each in a list of its own.
  WatchContext* pending_watches = nullptr;
  WatchContext* owned_watches = nullptr;
  std::size_t pending_watch_count = 0;

  static void link(WatchContext*& head, WatchContext* watch) {
    watch->next = head;
    if (head) head->previous = watch;
    head = watch;
  }
  static void unlink(WatchContext*& head, WatchContext* watch) {
    if (watch->previous) watch->previous->next = watch->next;
    else head = watch->next;
    if (watch->next) watch->next->previous = watch->previous;
    watch->previous = watch->next = nullptr;
  }
  void link_locked(WatchContext* watch) {
    link(pending_watches, watch);
    ++pending_watch_count;
  }
  void unlink_locked(WatchContext* watch) {
    unlink(pending_watches, watch);
    --pending_watch_count;
  }
  void link_owned_locked(OwnedWatchContext* watch) {
    link(owned_watches, watch);
    ++pending_watch_count;
  }
  void unlink_owned_locked(OwnedWatchContext* watch) {
    unlink(owned_watches, watch);
    --pending_watch_count;
  }
};

void session_watcher(zhandle_t*, int type, int state, const char*, void* context) {
  if (type != ZOO_SESSION_EVENT) return;
  auto* handle = static_cast<HandleContext*>(context);
  ConnectionEvent event;
  if (state == ZOO_CONNECTED_STATE || state == ZOO_READONLY_STATE) event = ConnectionEvent::connected;
  else if (state == ZOO_EXPIRED_SESSION_STATE) event = ConnectionEvent::expired;
  else if (state == ZOO_AUTH_FAILED_STATE) event = ConnectionEvent::auth_failed;
  else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) event = ConnectionEvent::connecting;
  else if (state == ZOO_NOTCONNECTED_STATE) event = ConnectionEvent::closed;
  else return;
  handle->on_event(event);
}

// A fired watch leaves its handle's list, is freed, and then runs (outside the lock).
template <typename Context>
void fire(int type, Context* watch, void (HandleContext::*unlink_locked)(Context*)) {
  {
    std::lock_guard lock(watch->handle->watches_mutex);
    (watch->handle->*unlink_locked)(watch);
  }
  NodeWatch callback = std::move(watch->watch);
  delete watch;
  callback(to_node_event(type));
}

// Session events reach every registered path watcher as well, an owned one possibly after it was
// forgotten: only node events count, and a session event never touches the context.
void node_watcher(zhandle_t*, int type, int, const char*, void* context) {
  if (type != ZOO_SESSION_EVENT) fire(type, static_cast<WatchContext*>(context), &HandleContext::unlink_locked);
}

void owned_node_watcher(zhandle_t*, int type, int, const char*, void* context) {
  if (type != ZOO_SESSION_EVENT)
    fire(type, static_cast<OwnedWatchContext*>(context), &HandleContext::unlink_owned_locked);
}

// Removes an owned watch from the client without its firing, if the client still has it. The
// client checks and removes under its watcher lock, which is also where it collects the watches an
// event fires: either it is removed here (ZOK: nothing will call it, we free it) or it has been
// collected for delivery (ZNOWATCHER: owned_node_watcher frees it). Local only: the server keeps
// its one watch per path and session, which other watches of this session may share.
bool forget_owned_watch_locked(HandleContext& handle, OwnedWatchContext* watch) {
  const int rc = zoo_remove_watches(handle.handle, watch->path.c_str(), watch->children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA,
                                    owned_node_watcher, watch, 1);
  if (rc != ZOK) return false;
  handle.unlink_owned_locked(watch);
  delete watch;
  return true;
}

template <typename Callback>
std::unique_ptr<Callback> take(const void* data) {
  return std::unique_ptr<Callback>(static_cast<Callback*>(const_cast<void*>(data)));
}

void on_create(int rc, const char* created, const Stat* stat, const void* data) {
  auto done = take<CreateCallback>(data);
  (*done)(code(rc), rc == ZOK && created ? std::string(created) : std::string(), to_node_stat(rc == ZOK ? stat : nullptr));
}


void on_stat(int rc, const Stat* stat, const void* data) {
  auto done = take<StatCallback>(data);
  (*done)(code(rc), to_node_stat(rc == ZOK ? stat : nullptr));
}

void on_void(int rc, const void* data) {
  auto done = take<ResultCallback>(data);
  (*done)(code(rc));
}

void on_string(int rc, const char*, const void* data) {
  auto done = take<ResultCallback>(data);
  (*done)(code(rc));
}

// The client registers a data or children watch only on success: nothing will ever fire the
// watch of a failed request. An owned watch whose owner went while its request was out is
// forgotten as soon as the client has it.
void settle_watch(WatchContext* watch, bool owned, int rc) {
  if (!watch) return;
  std::lock_guard lock(watch->handle->watches_mutex);
  if (!owned) {
    if (rc == ZOK) return;
    watch->handle->unlink_locked(watch);
    delete watch;
    return;
  }
  auto* owned_watch = static_cast<OwnedWatchContext*>(watch);
  if (rc != ZOK) {
    watch->handle->unlink_owned_locked(owned_watch);
    delete owned_watch;
    return;
  }
  owned_watch->registered = true;
  if (owned_watch->owner.expired()) forget_owned_watch_locked(*watch->handle, owned_watch);
}

struct DataRequest {
  DataCallback done;
  WatchContext* watch = nullptr;  // owned by the handle once registered
  bool owned = false;             // an OwnedWatchContext
};

void on_data(int rc, const char* value, int length, const Stat* stat, const void* data) {
  auto request = take<DataRequest>(data);
  settle_watch(request->watch, request->owned, rc);
  std::string content;
  if (rc == ZOK && value && length > 0) content.assign(value, static_cast<std::size_t>(length));
  request->done(code(rc), std::move(content), to_node_stat(rc == ZOK ? stat : nullptr));
}

struct ChildrenRequest {
  ChildrenCallback done;
  WatchContext* watch = nullptr;  // owned by the handle once registered
  bool owned = false;             // an OwnedWatchContext
};

void on_children(int rc, const String_vector* children, const Stat* parent, const void* data) {
  auto request = take<ChildrenRequest>(data);
  settle_watch(request->watch, request->owned, rc);
  std::vector<std::string> names;
  if (rc == ZOK && children) {
    names.reserve(children->count);
    for (int i = 0; i < children->count; ++i) names.emplace_back(children->data[i]);
  }
  request->done(code(rc), std::move(names), to_node_stat(rc == ZOK ? parent : nullptr));
}

// Everything zoo_amulti reads and writes until its completion runs: the ops point into `ops`,
// the results into `created_paths` and `stats`.
struct MultiRequest {
  MultiCallback done;
  std::vector<MultiOp> ops;
  std::vector<zoo_op_t> c_ops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::string> created_paths;  // buffers for the created paths
  std::vector<Stat> stats;
};

// Room for the longest path the server accepts plus a sequence suffix.
constexpr std::size_t kCreatedPathCapacity = 4096;

void on_multi(int rc, const void* data) {
  auto request = take<MultiRequest>(data);
  std::vector<MultiOpOutcome> outcomes;
  // The client fills the results only when the server answered the multi.
  if (server_answered(code(rc))) {
    outcomes.resize(request->ops.size());
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      outcomes[i].rc = code(request->results[i].err);
      if (outcomes[i].rc != zk_errc::ok) continue;
      if (request->ops[i].kind == MultiOp::Kind::create)
        outcomes[i].created_path = request->created_paths[i].c_str();
      if (request->ops[i].kind == MultiOp::Kind::set) outcomes[i].stat = to_node_stat(&request->stats[i]);
    }
  }
  request->done(code(rc), std::move(outcomes));
}

// ---- Leaving a silent server ----
//
// The C client (3.8.0) has no call that ends its connection: zoo_cycle_next_server only picks the
// server of the next attempt, and zoo_set_servers without the current server closes the socket but
// leaves the requests sent on it queued, unanswered, until a reply on the next connection fails to
// match them (a second drop, and "runtime inconsistency" for every request then in flight). So the
// connection's socket is shut down instead: the client's I/O thread sees it end (end of file, or
// ECONNRESET for a connect still in progress) and takes its ordinary connection-loss path to the
// next server of its list, exactly as after its own timeout.

// A TCP end point as /proc/net/tcp{,6} write it: each 32-bit word of the address as it lies in
// memory, and the port as a number.
struct TcpEndpoint {
  bool v6 = false;
  std::array<std::uint32_t, 4> words{};
  unsigned port = 0;
  bool operator==(const TcpEndpoint&) const = default;
};

// "10.0.0.1:2181" or "[::1]:2181", as zoo_get_current_server writes them.
std::optional<TcpEndpoint> parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  TcpEndpoint endpoint;
  const char* port_begin = text.data() + colon + 1;
  const char* port_end = text.data() + text.size();
  if (auto [end, ec] = std::from_chars(port_begin, port_end, endpoint.port); ec != std::errc() || end != port_end)
    return std::nullopt;
  std::string host = text.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    in6_addr address{};
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &address) != 1) return std::nullopt;
    endpoint.v6 = true;
    std::memcpy(endpoint.words.data(), &address, sizeof address);
  } else {
    in_addr address{};
    if (inet_pton(AF_INET, host.c_str(), &address) != 1) return std::nullopt;
    endpoint.words[0] = address.s_addr;
  }
  return endpoint;
}

// "0100007F:0885" (or 32 hex digits for IPv6) from a line of /proc/net/tcp{,6}.
std::optional<TcpEndpoint> parse_proc_endpoint(const std::string& text, bool v6) {
  const auto colon = text.find(':');
  const std::size_t words = v6 ? 4 : 1;
  if (colon != words * 8) return std::nullopt;
  TcpEndpoint endpoint;
  endpoint.v6 = v6;
  for (std::size_t i = 0; i < words; ++i) {
    const char* begin = text.data() + i * 8;
    if (std::from_chars(begin, begin + 8, endpoint.words[i], 16).ec != std::errc()) return std::nullopt;
  }
  const char* port_begin = text.data() + colon + 1;
  if (std::from_chars(port_begin, text.data() + text.size(), endpoint.port, 16).ec != std::errc()) return std::nullopt;
  return endpoint;
}

// The socket inodes of this process's network namespace whose remote end is `server`: connects in
// progress included, which getpeername does not show.
std::set<unsigned long> socket_inodes_to(const TcpEndpoint& server) {
  std::set<unsigned long> inodes;
  std::ifstream table(server.v6 ? "/proc/self/net/tcp6" : "/proc/self/net/tcp");
  std::string line;
  std::getline(table, line);  // the header
  for (int lines = 0; lines < 1'000'000 && std::getline(table, line); ++lines) {
    std::istringstream fields(line);
    std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout;
    unsigned long inode = 0;
    if (!(fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode))
      continue;
    if (parse_proc_endpoint(remote, server.v6) == server && inode != 0) inodes.insert(inode);
  }
  return inodes;
}

// Whether a server of the connect string `servers` resolves to `endpoint` (address and port).
bool lists_endpoint(const std::string& servers, const TcpEndpoint& endpoint) {
  std::error_code ec;
  const auto list = parse_servers(servers, ec);
  if (!list) return false;
  for (const std::string& host_port : list->hosts) {
    const HostPort target = split_host_port(host_port);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &found) != 0) continue;
    bool match = false;
    for (addrinfo* address = found; address && !match; address = address->ai_next) {
      TcpEndpoint candidate;
      if (address->ai_family == AF_INET) {
        const auto* in = reinterpret_cast<const sockaddr_in*>(address->ai_addr);
        candidate.words[0] = in->sin_addr.s_addr;
        candidate.port = ntohs(in->sin_port);
      } else if (address->ai_family == AF_INET6) {
        const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address->ai_addr);
        candidate.v6 = true;
        std::memcpy(candidate.words.data(), &in6->sin6_addr, sizeof in6->sin6_addr);
        candidate.port = ntohs(in6->sin6_port);
      }
      match = candidate == endpoint;
    }
    ::freeaddrinfo(found);
    if (match) return true;
  }
  return false;
}

// A loopback address that is not `endpoint`'s (port 1, where nothing listens): for the client,
// which tells servers apart by address only, a server other than the one it is connected to.
std::string address_other_than(const TcpEndpoint& endpoint) {
  in_addr second{};
  inet_pton(AF_INET, "127.0.0.2", &second);
  return !endpoint.v6 && endpoint.words[0] == second.s_addr ? "127.0.0.3:1" : "127.0.0.2:1";
}

// Shuts down every TCP socket of this process to `server` that has received nothing for
// `quiet_for` (or is still connecting; with zero, every one). The socket is found through the
// process's file descriptors, so another handle of the process on the same server, just as
// silent, is ended too (which only moves it on as well); a connection that hears from its server
// is left alone unless the caller knows the server is cut off (SessionCore::watch_server).
int shut_down_quiet_sockets_to(const std::string& server, std::chrono::milliseconds quiet_for) {
  const auto endpoint = parse_endpoint(server);
  if (!endpoint) return 0;
  const auto inodes = socket_inodes_to(*endpoint);
  if (inodes.empty()) return 0;
  DIR* directory = ::opendir("/proc/self/fd");
  if (directory == nullptr) return 0;
  int ended = 0;
  for (int entries = 0; entries < 1'000'000; ++entries) {
    const dirent* entry = ::readdir(directory);
    if (entry == nullptr) break;
    int fd = -1;
    const char* name_end = entry->d_name + std::strlen(entry->d_name);
    if (std::from_chars(entry->d_name, name_end, fd).ec != std::errc() || fd == ::dirfd(directory)) continue;
    char target[64] = {};
    const auto length = ::readlinkat(::dirfd(directory), entry->d_name, target, sizeof target - 1);
    unsigned long inode = 0;
    if (length <= 0 || std::sscanf(target, "socket:[%lu]", &inode) != 1 || !inodes.contains(inode)) continue;
    tcp_info info{};
    socklen_t size = sizeof info;
    if (::getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) != 0) continue;
    const bool connecting = info.tcpi_state == TCP_SYN_SENT;
    if (!connecting && info.tcpi_last_data_recv < static_cast<std::uint32_t>(quiet_for.count())) continue;
    if (::shutdown(fd, SHUT_RDWR) == 0) ++ended;
  }
  ::closedir(directory);
  return ended;
}

class CConnection final : public ZooKeeperConnection {
 public:
  CConnection(std::unique_ptr<HandleContext> context, zhandle_t* handle)
      : context_(std::move(context)), handle_(handle) {}
  ~CConnection() override { close(); }

  zk_errc create(const std::string& path, const std::string& data, CreateMode mode, NodeAcl acl,
             CreateCallback done) override {
    auto callback = std::make_unique<CreateCallback>(std::move(done));
    int rc = zoo_acreate2(handle_, path.c_str(), data.data(), static_cast<int>(data.size()), to_acl(acl),
                          to_flags(mode), on_create, callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  zk_errc get_children(const std::string& path, ChildrenCallback done, NodeWatch watch, WatchOwner owner) override {
    auto request = std::make_unique<ChildrenRequest>();
    request->done = std::move(done);
    request->owned = watch && !owner.expired();
    request->watch = request->owned ? track_owned(path, true, std::move(watch), std::move(owner)) : track(std::move(watch));
    int rc = zoo_awget_children2(handle_, path.c_str(), watcher_for(*request), request->watch, on_children,
                                 request.get());
    if (rc != ZOK) untrack(request->watch, request->owned);
    else request.release();
    return code(rc);
  }

  zk_errc get_data(const std::string& path, DataCallback done, NodeWatch watch, WatchOwner owner) override {
    auto request = std::make_unique<DataRequest>();
    request->done = std::move(done);
    request->owned = watch && !owner.expired();
    request->watch = request->owned ? track_owned(path, false, std::move(watch), std::move(owner)) : track(std::move(watch));
    int rc = zoo_awget(handle_, path.c_str(), watcher_for(*request), request->watch, on_data, request.get());
    if (rc != ZOK) untrack(request->watch, request->owned);
    else request.release();
    return code(rc);
  }

  void drop_abandoned_watches(const std::string& prefix) override {
    std::lock_guard closing(close_mutex_);
    if (!handle_) return;
    std::lock_guard lock(context_->watches_mutex);
    for (WatchContext* each = context_->owned_watches; each;) {
      auto* watch = static_cast<OwnedWatchContext*>(each);
      each = each->next;  // before the watch may be freed
      if (watch->registered && watch->owner.expired() && watch->path.starts_with(prefix))
        forget_owned_watch_locked(*context_, watch);
    }
  }

  zk_errc set_data(const std::string& path, const std::string& data, int version, StatCallback done) override {
    auto callback = std::make_unique<StatCallback>(std::move(done));
    int rc = zoo_aset(handle_, path.c_str(), data.data(), static_cast<int>(data.size()), version, on_stat,
                      callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  zk_errc exists(const std::string& path, StatCallback done) override {
    auto callback = std::make_unique<StatCallback>(std::move(done));
    int rc = zoo_aexists(handle_, path.c_str(), 0, on_stat, callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  zk_errc remove(const std::string& path, int version, ResultCallback done) override {
    auto callback = std::make_unique<ResultCallback>(std::move(done));
    int rc = zoo_adelete(handle_, path.c_str(), version, on_void, callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  zk_errc multi(const std::vector<MultiOp>& ops, MultiCallback done) override {
    if (ops.empty()) return zk_errc::bad_arguments;
    auto request = std::make_unique<MultiRequest>();
    request->done = std::move(done);
    request->ops = ops;
    const std::size_t count = ops.size();
    request->c_ops.resize(count);
    request->results.resize(count);
    request->created_paths.resize(count);
    request->stats.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      const MultiOp& op = request->ops[i];
      zoo_op_t* c_op = &request->c_ops[i];
      switch (op.kind) {
        case MultiOp::Kind::create:
          request->created_paths[i].assign(kCreatedPathCapacity, '\0');
          zoo_create_op_init(c_op, op.path.c_str(), op.data.data(), static_cast<int>(op.data.size()), to_acl(op.acl),
                             to_flags(op.mode), request->created_paths[i].data(),
                             static_cast<int>(kCreatedPathCapacity));
          break;
        case MultiOp::Kind::set:
          zoo_set_op_init(c_op, op.path.c_str(), op.data.data(), static_cast<int>(op.data.size()), op.version,
                          &request->stats[i]);
          break;
        case MultiOp::Kind::remove: zoo_delete_op_init(c_op, op.path.c_str(), op.version); break;
        case MultiOp::Kind::check: zoo_check_op_init(c_op, op.path.c_str(), op.version); break;
      }
    }
    int rc = zoo_amulti(handle_, static_cast<int>(count), request->c_ops.data(), request->results.data(), on_multi,
                        request.get());
    if (rc == ZOK) request.release();
    return code(rc);
  }

  void set_host_resolution_interval(std::chrono::milliseconds interval) override {
    // The client takes an int of milliseconds, -1 meaning "only after a connection loss".
    const auto clamped = std::min<std::chrono::milliseconds::rep>(interval.count(), INT_MAX);
    zoo_set_servers_resolution_delay(handle_, static_cast<int>(clamped));
  }

  zk_errc sync(const std::string& path, ResultCallback done) override {
    auto callback = std::make_unique<ResultCallback>(std::move(done));
    int rc = zoo_async(handle_, path.c_str(), on_string, callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  zk_errc add_digest_auth(const std::string& user_password, ResultCallback done) override {
    auto callback = std::make_unique<ResultCallback>(std::move(done));
    int rc = zoo_add_auth(handle_, "digest", user_password.data(), static_cast<int>(user_password.size()),
                          on_void, callback.get());
    if (rc == ZOK) callback.release();
    return code(rc);
  }

  std::int64_t session_id() const override {
    const clientid_t* id = handle_ ? zoo_client_id(handle_) : nullptr;
    return id ? id->client_id : 0;
  }

  ClientId client_id() const override {
    ClientId out;
    if (const clientid_t* id = handle_ ? zoo_client_id(handle_) : nullptr) {
      out.session_id = id->client_id;
      out.password.assign(id->passwd, sizeof id->passwd);
    }
    return out;
  }

  std::chrono::milliseconds negotiated_timeout() const override {
    return std::chrono::milliseconds(handle_ ? zoo_recv_timeout(handle_) : 0);
  }

  std::string current_server() const override {
    std::unique_lock lock(close_mutex_, std::try_to_lock);
    if (!lock || !handle_) return {};
    // The client formats it into a buffer of its own: copy it at once.
    const char* server = zoo_get_current_server(handle_);
    return server ? std::string(server) : std::string();
  }

  zk_errc set_servers(const std::string& servers) override {
    const std::string hosts = client_host_list(servers);
    std::lock_guard lock(close_mutex_);
    if (!handle_) return zk_errc::invalid_state;
    const char* server = zoo_get_current_server(handle_);
    const auto current = parse_endpoint(server ? server : "");
    // The client (3.8.0) compares addresses without their ports (addrvec_contains): servers that
    // share a host are one server to it. It keeps a connection whose server's address is still
    // listed, and ignores a list it finds equal to its own. So a list goes in two steps, the real
    // one second: first, when the connection's server is no longer listed, one address that is
    // not the connection's, which makes the client end that connection (with nothing in flight:
    // see SessionCore::apply_servers_if_quiet_locked) and nothing else; otherwise the list with one
    // entry more, which the client never finds equal to its own.
    const std::string first = current && !lists_endpoint(servers, *current)
                                  ? address_other_than(*current)
                                  : hosts + "," + hosts.substr(0, hosts.find(','));
    int rc = zoo_set_servers(handle_, first.c_str());
    if (rc == ZOK) rc = zoo_set_servers(handle_, hosts.c_str());
    return code(rc);
  }

  bool leave_current_server(std::chrono::milliseconds quiet_for) override {
    const std::string server = current_server();
    if (server.empty()) return false;
    return shut_down_quiet_sockets_to(server, quiet_for) > 0;
  }

  void close() override {
    std::lock_guard lock(close_mutex_);
    if (!handle_) return;
    zookeeper_close(handle_);
    handle_ = nullptr;
    // The completion thread has been joined: nothing can fire any more.
    while (WatchContext* watch = context_->pending_watches) {
      context_->pending_watches = watch->next;
      delete watch;
    }
    while (WatchContext* watch = context_->owned_watches) {
      context_->owned_watches = watch->next;
      delete static_cast<OwnedWatchContext*>(watch);
    }
    context_->pending_watch_count = 0;
  }

 private:
  std::size_t pending_watches() const override {
    std::lock_guard lock(context_->watches_mutex);
    return context_->pending_watch_count;
  }

  // A watch context lives in pending_watches until it fires or the handle closes.
  WatchContext* track(NodeWatch watch) {
    if (!watch) return nullptr;
    auto* context = new WatchContext{context_.get(), std::move(watch)};
    std::lock_guard lock(context_->watches_mutex);
    context_->link_locked(context);
    return context;
  }
  WatchContext* track_owned(const std::string& path, bool children, NodeWatch watch, WatchOwner owner) {
    auto* context = new OwnedWatchContext{{context_.get(), std::move(watch)}, std::move(owner), path, children};
    std::lock_guard lock(context_->watches_mutex);
    context_->link_owned_locked(context);
    return context;
  }
  void untrack(WatchContext* watch, bool owned) {
    if (!watch) return;
    std::lock_guard lock(context_->watches_mutex);
    if (owned) {
      context_->unlink_owned_locked(static_cast<OwnedWatchContext*>(watch));
      delete static_cast<OwnedWatchContext*>(watch);
    } else {
      context_->unlink_locked(watch);
      delete watch;
    }
  }
  template <typename Request>
  static watcher_fn watcher_for(const Request& request) {
    if (!request.watch) return nullptr;
    return request.owned ? owned_node_watcher : node_watcher;
  }

  std::unique_ptr<HandleContext> context_;
  mutable std::mutex close_mutex_;
  zhandle_t* handle_;
};

}  // namespace

std::string describe_unresolvable_hosts(const std::string& servers) {
  std::error_code ec;
  const auto list = parse_servers(servers, ec);
  if (!list) return {};
  std::string problems;
  for (const std::string& host_port : list->hosts) {
    const std::string host = split_host_port(host_port).host;
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (rc == 0) {
      ::freeaddrinfo(found);
      continue;
    }
    problems += (problems.empty() ? "" : "; ") + host + ": " + ::gai_strerror(rc);
  }
  return problems;
}

namespace {

// One TCP connection attempt of describe_unreachable_servers.
struct ConnectProbe {
  std::size_t host = 0;  // index into the server list
  int fd = -1;
  int error = EINPROGRESS;  // 0 once connected
};

// What became of a host's attempts, best first: one accepted, one refused, one failed otherwise.
std::string host_outcome(const std::string& host_port, const std::vector<ConnectProbe>& probes, std::size_t host,
                         std::chrono::milliseconds budget) {
  int worst = EINPROGRESS;
  bool tried = false;
  for (const ConnectProbe& probe : probes) {
    if (probe.host != host) continue;
    tried = true;
    if (probe.error == 0) return fmt::format("{} accepts connections but gave no ZooKeeper session", host_port);
    if (probe.error == ECONNREFUSED || worst == EINPROGRESS) worst = probe.error;
  }
  if (!tried) return fmt::format("{} cannot be resolved", host_port);
  if (worst == ECONNREFUSED) return fmt::format("{} refuses connections (nothing listens there)", host_port);
  if (worst == EINPROGRESS) return fmt::format("{} does not answer within {} ms (down, or dropped on the way)", host_port, budget.count());
  return fmt::format("{}: {}", host_port, std::strerror(worst));
}

}  // namespace

std::string describe_unreachable_servers(const std::string& servers, std::chrono::milliseconds budget) {
  std::error_code ec;
  const auto list = parse_servers(servers, ec);
  if (!list) return {};
  constexpr std::size_t kMostProbes = 32;
  std::vector<ConnectProbe> probes;
  for (std::size_t host = 0; host < list->hosts.size(); ++host) {
    const std::string& host_port = list->hosts[host];
    const HostPort target = split_host_port(host_port);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &found) != 0) continue;
    for (addrinfo* address = found; address && probes.size() < kMostProbes; address = address->ai_next) {
      ConnectProbe probe{host};
      probe.fd = ::socket(address->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (probe.fd < 0) continue;
      if (::connect(probe.fd, address->ai_addr, address->ai_addrlen) == 0) probe.error = 0;
      else if (errno != EINPROGRESS) probe.error = errno;
      probes.push_back(probe);
    }
    ::freeaddrinfo(found);
  }
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (true) {
    std::vector<pollfd> waiting;
    for (const ConnectProbe& probe : probes)
      if (probe.error == EINPROGRESS) waiting.push_back({probe.fd, POLLOUT, 0});
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (waiting.empty() || left <= std::chrono::milliseconds::zero()) break;
    if (::poll(waiting.data(), waiting.size(), static_cast<int>(left.count())) <= 0) continue;
    for (const pollfd& ready : waiting) {
      if (ready.revents == 0) continue;
      for (ConnectProbe& probe : probes) {
        if (probe.fd != ready.fd) continue;
        int error = 0;
        socklen_t length = sizeof error;
        ::getsockopt(probe.fd, SOL_SOCKET, SO_ERROR, &error, &length);
        probe.error = error;
      }
    }
  }
  std::string outcome;
  for (std::size_t host = 0; host < list->hosts.size(); ++host)
    outcome += (outcome.empty() ? "" : "; ") + host_outcome(list->hosts[host], probes, host, budget);
  for (const ConnectProbe& probe : probes) ::close(probe.fd);
  return outcome;
}

std::string client_connect_string(const std::string& servers) {
  std::error_code ec;
  const auto list = parse_servers(servers, ec);
  if (!list) return servers;  // refused before a session is made; let the client say what it says
  return client_host_list(servers) + list->chroot;
}

std::string client_host_list(const std::string& servers) {
  std::error_code ec;
  const auto list = parse_servers(servers, ec);
  if (!list) return servers;
  std::string hosts;
  for (const std::string& host_port : list->hosts) {
    if (!hosts.empty()) hosts += ',';
    if (host_port.starts_with('[')) {
      const auto close = host_port.find(']');
      hosts += host_port.substr(1, close - 1) + host_port.substr(close + 1);
    } else {
      hosts += host_port;
    }
  }
  return hosts;
}

std::unique_ptr<ZooKeeperConnection> connect_zookeeper(const std::string& servers,
                                                       std::chrono::milliseconds session_timeout,
                                                       ConnectionEventHandler on_event,
                                                       std::error_code& ec) {
  configure_client_logging_once();
  auto context = std::make_unique<HandleContext>();
  context->on_event = std::move(on_event);
  const std::string client_servers = client_connect_string(servers);
  // The session watcher may run before zookeeper_init2 returns: the context is complete already.
  zhandle_t* handle = zookeeper_init2(client_servers.c_str(), session_watcher, static_cast<int>(session_timeout.count()),
                                      nullptr, context.get(), 0, forward_client_log);
  if (handle == nullptr) {
    ec = std::error_code(errno ? errno : EINVAL, std::generic_category());
    return nullptr;
  }
  ec.clear();
  context->handle = handle;
  return std::make_unique<CConnection>(std::move(context), handle);
}

}  // namespace zkr::detail
