// SPDX-License-Identifier: Apache-2.0
#include "fake_zookeeper.hpp"

#include <algorithm>
#include <deque>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>

namespace zkr::fake {

using detail::ConnectionEvent;
using detail::CreateMode;
using detail::NodeEvent;
using detail::NodeStat;

namespace {

// A reply to a request that only the leader answers (a sync, or a write, which followers forward):
// only those count as the monitor's proof of life. `what` is "<op> <path>".
bool went_through_leader(std::string_view what) {
  for (std::string_view op : {"sync ", "create ", "set_data ", "remove "})
    if (what.substr(0, op.size()) == op) return true;
  return false;
}

bool valid_path(const std::string& path) {
  if (path.empty() || path.front() != '/') return false;
  if (path == "/") return true;
  if (path.back() == '/') return false;
  return path.find("//") == std::string::npos && path.find('\0') == std::string::npos;
}

std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string name_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool is_ephemeral(CreateMode mode) {
  return mode == CreateMode::ephemeral || mode == CreateMode::ephemeral_sequential;
}

// Request sizes as the server reads them (jute): a string or buffer is 4 bytes of length and its
// bytes, the request header (xid, type) 8 bytes. ACLs count as an empty list: a lower bound, so
// that only a request that is surely too long is refused.
constexpr std::size_t kRequestHeaderBytes = 8;
constexpr std::size_t kMultiHeaderBytes = 9;  // type, done, err
std::size_t field_bytes(std::string_view text) { return 4 + text.size(); }
std::size_t create_body_bytes(std::string_view path, std::string_view data) {
  return field_bytes(path) + field_bytes(data) + 4 /* ACL count */ + 4 /* flags */;
}
std::size_t op_body_bytes(const detail::MultiOp& op) {
  switch (op.kind) {
    case detail::MultiOp::Kind::create: return create_body_bytes(op.path, op.data);
    case detail::MultiOp::Kind::set: return field_bytes(op.path) + field_bytes(op.data) + 4;
    case detail::MultiOp::Kind::remove:
    case detail::MultiOp::Kind::check: return field_bytes(op.path) + 4;
  }
  return field_bytes(op.path);
}
std::size_t multi_bytes(const std::vector<detail::MultiOp>& ops) {
  std::size_t bytes = kRequestHeaderBytes + kMultiHeaderBytes;  // the closing header
  for (const auto& op : ops) bytes += kMultiHeaderBytes + op_body_bytes(op);
  return bytes;
}

std::int64_t wall_clock_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string_view to_string(Op op) {
  switch (op) {
    case Op::create: return "create";
    case Op::get_children: return "get_children";
    case Op::get_data: return "get_data";
    case Op::exists: return "exists";
    case Op::set_data: return "set_data";
    case Op::remove: return "remove";
    case Op::sync: return "sync";
    case Op::multi: return "multi";
  }
  return "unknown";
}

// ---- one connection ----

struct FakeServer::Request {
  Op op = Op::create;
  std::string path;
  std::function<Applied(std::int64_t owner_override)> apply;  // under the mutex
  std::function<void(zk_errc)> fail;                              // the callback with an error, no results
  FakeClock::time_point sent;
  std::size_t bytes = 0;  // as the server reads it
};

namespace {
std::string describe(const FakeServer::Request& request) {
  return fmt::format("{} {}", to_string(request.op), request.path);
}

std::string_view to_string(NodeEvent event) {
  switch (event) {
    case NodeEvent::created: return "created";
    case NodeEvent::deleted: return "deleted";
    case NodeEvent::changed: return "changed";
    case NodeEvent::children_changed: return "children_changed";
    case NodeEvent::other: return "other";
  }
  return "unknown";
}

std::string_view to_string(ConnectionEvent event) {
  switch (event) {
    case ConnectionEvent::connecting: return "connecting";
    case ConnectionEvent::connected: return "connected";
    case ConnectionEvent::expired: return "expired";
    case ConnectionEvent::auth_failed: return "auth_failed";
    case ConnectionEvent::closed: return "closed";
  }
  return "unknown";
}
}  // namespace

struct FakeServer::Link {
  enum class State { connected, disconnected, expired, closed };
  enum class Kind { reply, node_event, session_event };
  struct Entry {
    Kind kind = Kind::reply;
    zk_errc rc = zk_errc::ok;
    std::function<void(zk_errc)> run;
    FakeClock::time_point sent{};
    std::uint64_t watch_id = 0;  // a reply that registered this watch, or an event it fired
    std::string what;            // for tests: "<op> <path>", "<event> <path>", "session <event>"
  };

  std::int64_t session = 0;
  std::string password;
  std::chrono::milliseconds timeout{};
  detail::ConnectionEventHandler on_event;
  State state = State::connected;
  std::deque<Entry> queue;             // on the wire to the client, in order
  std::vector<Entry> after_reconnect;  // events of known watches fired while disconnected
  std::vector<Request> held;           // sent while disconnected: go out on reconnection
  bool paused = false;
  std::size_t credit = 0;  // deliveries allowed while paused
  bool stopping = false;
  std::uint64_t delivered = 0;
  std::thread thread;
};

class FakeConnection final : public detail::ZooKeeperConnection {
 public:
  FakeConnection(std::shared_ptr<FakeServer> server, std::shared_ptr<FakeServer::Link> link)
      : server_(std::move(server)), link_(std::move(link)) {}
  ~FakeConnection() override { close(); }

  zk_errc create(const std::string& path, const std::string& data, CreateMode mode, NodeAcl,
                 detail::CreateCallback done) override {
    const bool sequential = mode == CreateMode::ephemeral_sequential;
    if (!valid_path(sequential ? path + "0" : path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::CreateCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::create;
    request.path = path;
    request.bytes = kRequestHeaderBytes + create_body_bytes(path, data);
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}, {}); };
    request.apply = [server = server_.get(), path, data, mode, session = link_->session,
                     callback](std::int64_t owner_override) {
      std::string created;
      NodeStat stat;
      zk_errc rc = server->create_locked(path, data, mode, session, created, stat);
      if (rc == zk_errc::ok && owner_override != 0 && is_ephemeral(mode)) {
        server->nodes_[created].stat.ephemeral_owner = owner_override;
        stat.ephemeral_owner = owner_override;
      }
      return FakeServer::Applied{rc,
                                 [callback, created, stat](zk_errc reported) {
                                   if (reported == zk_errc::ok) (*callback)(zk_errc::ok, created, stat);
                                   else (*callback)(reported, {}, {});
                                 },
                                 rc == zk_errc::ok ? created : std::string()};
    };
    return server_->submit(*link_, std::move(request));
  }

  zk_errc get_children(const std::string& path, detail::ChildrenCallback done, detail::NodeWatch watch,
                       detail::WatchOwner owner) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::ChildrenCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::get_children;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path) + 1;
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}, {}); };
    const bool owned = watch && !owner.expired();
    request.apply = [server = server_.get(), path, session = link_->session, callback, watch, owned, owner](std::int64_t) {
      auto it = server->nodes_.find(path);
      if (it == server->nodes_.end())
        return FakeServer::Applied{zk_errc::no_node, [callback](zk_errc rc) { (*callback)(rc, {}, {}); }, {}};
      std::uint64_t watch_id = 0;
      if (watch && !(owned && owner.expired())) {  // an owner gone meanwhile: the client forgets it at once
        watch_id = server->next_watch_id_++;
        server->children_watches_.emplace(path, FakeServer::Watch{session, watch, watch_id, owned, owner});
      }
      std::vector<std::string> names(it->second.children.begin(), it->second.children.end());
      NodeStat stat = server->stat_locked(it->second);
      return FakeServer::Applied{zk_errc::ok,
                                 [callback, names, stat](zk_errc reported) {
                                   if (reported == zk_errc::ok) (*callback)(reported, names, stat);
                                   else (*callback)(reported, {}, {});
                                 },
                                 {}, watch_id};
    };
    return server_->submit(*link_, std::move(request));
  }

  zk_errc get_data(const std::string& path, detail::DataCallback done, detail::NodeWatch watch,
                   detail::WatchOwner owner) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::DataCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::get_data;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path) + 1;
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}, {}); };
    const bool owned = watch && !owner.expired();
    request.apply = [server = server_.get(), path, session = link_->session, callback, watch, owned, owner](std::int64_t) {
      auto it = server->nodes_.find(path);
      if (it == server->nodes_.end())
        return FakeServer::Applied{zk_errc::no_node, [callback](zk_errc rc) { (*callback)(rc, {}, {}); }, {}};
      std::uint64_t watch_id = 0;
      if (watch && !(owned && owner.expired())) {  // an owner gone meanwhile: the client forgets it at once
        watch_id = server->next_watch_id_++;
        server->data_watches_.emplace(path, FakeServer::Watch{session, watch, watch_id, owned, owner});
      }
      std::string data = it->second.data;
      NodeStat stat = server->stat_locked(it->second);
      return FakeServer::Applied{zk_errc::ok,
                                 [callback, data, stat](zk_errc reported) {
                                   if (reported == zk_errc::ok) (*callback)(zk_errc::ok, data, stat);
                                   else (*callback)(reported, {}, {});
                                 },
                                 {}, watch_id};
    };
    return server_->submit(*link_, std::move(request));
  }

  zk_errc exists(const std::string& path, detail::StatCallback done) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::StatCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::exists;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path) + 1;
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}); };
    request.apply = [server = server_.get(), path, callback](std::int64_t) {
      auto it = server->nodes_.find(path);
      if (it == server->nodes_.end())
        return FakeServer::Applied{zk_errc::no_node, [callback](zk_errc rc) { (*callback)(rc, {}); }, {}};
      NodeStat stat = server->stat_locked(it->second);
      return FakeServer::Applied{
          zk_errc::ok, [callback, stat](zk_errc reported) { (*callback)(reported, reported == zk_errc::ok ? stat : NodeStat{}); }, {}};
    };
    return server_->submit(*link_, std::move(request));
  }

  zk_errc set_data(const std::string& path, const std::string& data, int version, detail::StatCallback done) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::StatCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::set_data;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path) + field_bytes(data) + 4;
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}); };
    request.apply = [server = server_.get(), path, data, version, callback](std::int64_t) {
      NodeStat stat;
      zk_errc rc = server->set_data_locked(path, data, version, stat);
      return FakeServer::Applied{
          rc, [callback, stat](zk_errc reported) { (*callback)(reported, reported == zk_errc::ok ? stat : NodeStat{}); }, {}};
    };
    return server_->submit(*link_, std::move(request));
  }

  zk_errc remove(const std::string& path, int version, detail::ResultCallback done) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::ResultCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::remove;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path) + 4;
    request.fail = [callback](zk_errc rc) { (*callback)(rc); };
    request.apply = [server = server_.get(), path, version, callback](std::int64_t) {
      zk_errc rc = server->remove_locked(path, version);
      return FakeServer::Applied{rc, [callback](zk_errc reported) { (*callback)(reported); }, {}};
    };
    return server_->submit(*link_, std::move(request));
  }

  // Every op or none (FakeServer::multi_locked). The server's answer carries one outcome per op,
  // a refusal too; a lost reply carries none.
  zk_errc multi(const std::vector<detail::MultiOp>& ops, detail::MultiCallback done) override {
    if (ops.empty()) return zk_errc::bad_arguments;
    for (const auto& op : ops) {
      const bool sequential = op.kind == detail::MultiOp::Kind::create && op.mode == CreateMode::ephemeral_sequential;
      if (!valid_path(sequential ? op.path + "0" : op.path)) return zk_errc::bad_arguments;
    }
    auto callback = std::make_shared<detail::MultiCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::multi;
    request.path = ops.front().path;
    request.bytes = multi_bytes(ops);
    request.fail = [callback](zk_errc rc) { (*callback)(rc, {}); };
    request.apply = [server = server_.get(), ops, session = link_->session, callback](std::int64_t owner_override) {
      std::vector<detail::MultiOpOutcome> outcomes;
      const zk_errc rc = server->multi_locked(ops, session, owner_override, outcomes);
      std::string created;
      for (const auto& outcome : outcomes)
        if (!outcome.created_path.empty()) created = outcome.created_path;
      return FakeServer::Applied{rc,
                                 [callback, rc, outcomes](zk_errc reported) {
                                   (*callback)(reported, reported == rc ? outcomes : std::vector<detail::MultiOpOutcome>{});
                                 },
                                 rc == zk_errc::ok ? created : std::string()};
    };
    return server_->submit(*link_, std::move(request));
  }

  // One server plays the leader too: a sync is answered in order, like any request.
  zk_errc sync(const std::string& path, detail::ResultCallback done) override {
    if (!valid_path(path)) return zk_errc::bad_arguments;
    auto callback = std::make_shared<detail::ResultCallback>(std::move(done));
    FakeServer::Request request;
    request.op = Op::sync;
    request.path = path;
    request.bytes = kRequestHeaderBytes + field_bytes(path);
    request.fail = [callback](zk_errc rc) { (*callback)(rc); };
    request.apply = [callback](std::int64_t) {
      return FakeServer::Applied{zk_errc::ok, [callback](zk_errc reported) { (*callback)(reported); }, {}};
    };
    return server_->submit(*link_, std::move(request));
  }

  // Credentials are accepted as given (ACLs are not modelled).
  zk_errc add_digest_auth(const std::string&, detail::ResultCallback done) override {
    std::lock_guard lock(server_->mutex_);
    if (link_->state == FakeServer::Link::State::expired || link_->state == FakeServer::Link::State::closed)
      return zk_errc::invalid_state;
    server_->enqueue_reply_locked(*link_, zk_errc::ok, [done = std::move(done)](zk_errc rc) { done(rc); }, FakeClock::now(),
                                  "add_digest_auth");
    return zk_errc::ok;
  }

  std::int64_t session_id() const override { return link_->session; }
  detail::ClientId client_id() const override { return {link_->session, link_->password}; }
  std::chrono::milliseconds negotiated_timeout() const override { return link_->timeout; }
  std::size_t pending_watches() const override { return server_->watches_of(link_->session); }
  void drop_abandoned_watches(const std::string& prefix) override {
    server_->forget_abandoned_watches(link_->session, prefix);
  }
  void close() override { server_->close_link(*link_); }
  std::string current_server() const override { return "fake:2181"; }
  bool leave_current_server(std::chrono::milliseconds) override { return server_->move_on(link_->session); }

 private:
  std::shared_ptr<FakeServer> server_;
  std::shared_ptr<FakeServer::Link> link_;
};

// ---- the server ----

FakeServer::FakeServer() {
  FakeNode root;
  root.stat.czxid = 0;
  nodes_.emplace("/", std::move(root));
}

FakeServer::~FakeServer() = default;

void FakeServer::changed_locked() {
  ++change_count_;
  changed_.notify_all();
}

NodeStat FakeServer::stat_locked(const FakeNode& node) const {
  NodeStat stat = node.stat;
  stat.num_children = static_cast<std::int32_t>(node.children.size());
  stat.data_length = static_cast<std::int32_t>(node.data.size());
  return stat;
}

FakeServer::Link* FakeServer::link_locked(std::int64_t session) const {
  auto it = links_.find(session);
  if (it == links_.end()) return nullptr;
  auto link = it->second.lock();
  return link.get();  // kept alive by its connection, which cannot finish closing while we hold the mutex
}

zk_errc FakeServer::create_locked(const std::string& path, const std::string& data, CreateMode mode,
                                  std::int64_t owner, std::string& created, NodeStat& stat) {
  const bool sequential = mode == CreateMode::ephemeral_sequential;
  if (!valid_path(sequential ? path + "0" : path) || path == "/") return zk_errc::bad_arguments;
  auto parent = nodes_.find(parent_of(path));
  if (parent == nodes_.end()) return zk_errc::no_node;
  if (parent->second.stat.ephemeral_owner != 0) return zk_errc::no_children_for_ephemerals;
  std::string actual = sequential ? fmt::format("{}{:010d}", path, parent->second.cversion) : path;
  if (nodes_.count(actual)) return zk_errc::node_exists;
  FakeNode node;
  node.data = data;
  node.mode = mode;
  node.stat.czxid = next_zxid_locked();
  node.stat.mzxid = node.stat.czxid;
  node.stat.ctime_ms = wall_clock_ms();
  node.stat.version = 0;
  node.stat.ephemeral_owner = is_ephemeral(mode) ? owner : 0;
  parent->second.children.insert(name_of(actual));
  ++parent->second.cversion;
  stat = stat_locked(node);
  nodes_.emplace(actual, std::move(node));
  created = actual;
  fire_locked(children_watches_, parent->first, NodeEvent::children_changed);
  changed_locked();
  return zk_errc::ok;
}

zk_errc FakeServer::remove_locked(const std::string& path, int version) {
  if (!valid_path(path) || path == "/") return zk_errc::bad_arguments;
  auto it = nodes_.find(path);
  if (it == nodes_.end()) return zk_errc::no_node;
  if (version != -1 && it->second.stat.version != version) return zk_errc::bad_version;
  if (!it->second.children.empty()) return zk_errc::not_empty;
  nodes_.erase(it);
  next_zxid_locked();
  const std::string parent_path = parent_of(path);
  auto parent = nodes_.find(parent_path);
  parent->second.children.erase(name_of(path));
  ++parent->second.cversion;
  fire_locked(data_watches_, path, NodeEvent::deleted);
  fire_locked(children_watches_, path, NodeEvent::deleted);
  fire_locked(children_watches_, parent_path, NodeEvent::children_changed);
  changed_locked();
  return zk_errc::ok;
}

zk_errc FakeServer::set_data_locked(const std::string& path, const std::string& data, int version, NodeStat& stat) {
  auto it = nodes_.find(path);
  if (it == nodes_.end()) return zk_errc::no_node;
  if (version != -1 && it->second.stat.version != version) return zk_errc::bad_version;
  it->second.data = data;
  ++it->second.stat.version;
  it->second.stat.mzxid = next_zxid_locked();
  stat = stat_locked(it->second);
  fire_locked(data_watches_, path, NodeEvent::changed);
  changed_locked();
  return zk_errc::ok;
}

std::int64_t FakeServer::next_zxid_locked() {
  if (multi_zxid_) return zxid_ = *multi_zxid_;
  return ++zxid_;
}

// All ops or none. Applied one after the other on the tree, which is restored if one fails; the
// watches fire only once all of them took effect.
zk_errc FakeServer::multi_locked(const std::vector<detail::MultiOp>& ops, std::int64_t session,
                                 std::int64_t owner_override, std::vector<detail::MultiOpOutcome>& outcomes) {
  const auto saved_nodes = nodes_;
  const auto saved_zxid = zxid_;
  std::vector<DeferredFire> fires;
  deferred_fires_ = &fires;
  multi_zxid_ = zxid_ + 1;
  outcomes.assign(ops.size(), {});
  std::optional<std::size_t> failed;
  for (std::size_t i = 0; i < ops.size() && !failed; ++i) {
    const auto& op = ops[i];
    auto& outcome = outcomes[i];
    switch (op.kind) {
      case detail::MultiOp::Kind::create: {
        std::string created;
        NodeStat stat;
        outcome.rc = create_locked(op.path, op.data, op.mode, session, created, stat);
        if (outcome.rc == zk_errc::ok) {
          outcome.created_path = created;
          if (owner_override != 0 && is_ephemeral(op.mode)) nodes_[created].stat.ephemeral_owner = owner_override;
        }
        break;
      }
      case detail::MultiOp::Kind::set:
        outcome.rc = set_data_locked(op.path, op.data, op.version, outcome.stat);
        break;
      case detail::MultiOp::Kind::remove:
        outcome.rc = remove_locked(op.path, op.version);
        break;
      case detail::MultiOp::Kind::check: {
        auto it = nodes_.find(op.path);
        outcome.rc = it == nodes_.end()                                             ? zk_errc::no_node
                     : op.version != -1 && it->second.stat.version != op.version ? zk_errc::bad_version
                                                                                   : zk_errc::ok;
        break;
      }
    }
    if (outcome.rc != zk_errc::ok) failed = i;
  }
  deferred_fires_ = nullptr;
  multi_zxid_.reset();
  if (failed) {
    nodes_ = saved_nodes;
    zxid_ = saved_zxid;
    for (std::size_t i = 0; i < outcomes.size(); ++i) {
      if (i != *failed) outcomes[i] = {i < *failed ? zk_errc::ok : zk_errc::runtime_inconsistency, {}, {}};
      else outcomes[i].created_path.clear();
    }
    changed_locked();
    return outcomes[*failed].rc;
  }
  for (auto& fire : fires) fire_locked(*fire.watches, fire.path, fire.event);
  return zk_errc::ok;
}

// A fired watch travels to its session's client like a reply: in order, on the completion thread.
void FakeServer::fire_locked(std::multimap<std::string, Watch>& watches, const std::string& path, NodeEvent event) {
  if (deferred_fires_) {
    deferred_fires_->push_back({&watches, path, event});
    return;
  }
  auto [first, last] = watches.equal_range(path);
  std::vector<Watch> fired;
  for (auto it = first; it != last; ++it) fired.push_back(std::move(it->second));
  watches.erase(first, last);
  for (auto& watch : fired) {
    Link* link = link_locked(watch.session);
    if (!link) continue;
    Link::Entry entry{Link::Kind::node_event, zk_errc::ok, [fire = std::move(watch.fire), event](zk_errc) { fire(event); }, {},
                      watch.id, fmt::format("{} {}", to_string(event), path)};
    if (link->state == Link::State::connected) link->queue.push_back(std::move(entry));
    else if (link->state == Link::State::disconnected) link->after_reconnect.push_back(std::move(entry));
  }
}

void FakeServer::enqueue_reply_locked(Link& link, zk_errc rc, std::function<void(zk_errc)> deliver, FakeClock::time_point sent,
                                      std::string what, std::uint64_t watch_id) {
  link.queue.push_back({Link::Kind::reply, rc, std::move(deliver), sent, watch_id, std::move(what)});
  changed_locked();
}

void FakeServer::enqueue_session_event_locked(Link& link, ConnectionEvent event) {
  link.queue.push_back({Link::Kind::session_event, zk_errc::ok, [handler = link.on_event, event](zk_errc) { handler(event); }, {},
                        0, fmt::format("session {}", to_string(event))});
  changed_locked();
}

const Fault* FakeServer::take_fault_locked(Op op, const std::string& path, std::int64_t session, Fault& storage) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->op != op || (it->session != 0 && it->session != session) || path.rfind(it->path_prefix, 0) != 0)
      continue;
    if (it->skip > 0) {
      --it->skip;
      return nullptr;
    }
    storage = std::move(*it);
    faults_.erase(it);
    return &storage;
  }
  return nullptr;
}

zk_errc FakeServer::submit(Link& link, Request request) {
  std::lock_guard lock(mutex_);
  request.sent = FakeClock::now();
  switch (link.state) {
    case Link::State::expired:
    case Link::State::closed:
      return zk_errc::invalid_state;
    case Link::State::disconnected:
      link.held.push_back(std::move(request));  // sent once the connection is back
      changed_locked();
      return zk_errc::ok;
    case Link::State::connected:
      run_request_locked(link, std::move(request));
      return zk_errc::ok;
  }
  return zk_errc::ok;
}

void FakeServer::run_request_locked(Link& link, Request request) {
  Fault storage;
  const Fault* fault = take_fault_locked(request.op, request.path, link.session, storage);
  if (fault && fault->before) fault->before();
  if (link.state == Link::State::disconnected) {  // the hook cut the connection
    link.held.push_back(std::move(request));
    return;
  }
  if (link.state != Link::State::connected) {
    enqueue_reply_locked(link, link.state == Link::State::expired ? zk_errc::session_expired : zk_errc::closing, request.fail,
                         request.sent, describe(request));
    return;
  }
  RequestRecord record{link.session, request.op, request.path, {}, zk_errc::ok, false, request.sent, request.bytes};
  if (request_limit_ != 0 && request.bytes > request_limit_) {
    // The server reads the length, finds it over jute.maxbuffer and closes the connection.
    record.oversized = true;
    record.reported_rc = zk_errc::connection_loss;
    enqueue_reply_locked(link, zk_errc::connection_loss, request.fail, request.sent, describe(request));
    records_.push_back(std::move(record));
    drop_locked(link);
    changed_locked();
    return;
  }
  if (fault && fault->rc != zk_errc::ok && !fault->after_apply) {
    record.reported_rc = fault->rc;
    enqueue_reply_locked(link, fault->rc, request.fail, request.sent, describe(request));
  } else {
    Applied applied = request.apply(fault ? fault->owner_override : 0);
    record.applied = applied.rc == zk_errc::ok;
    record.created = applied.created;
    record.reported_rc = fault && fault->rc != zk_errc::ok ? fault->rc : applied.rc;
    enqueue_reply_locked(link, record.reported_rc, std::move(applied.deliver), request.sent, describe(request),
                         applied.watch_id);
  }
  records_.push_back(std::move(record));
  if (fault && fault->drop_connection) drop_locked(link);
  changed_locked();
}

// Replies still on the wire are lost (the requests took effect or not, the client cannot know).
// The server forgets the connection's watches; the client re-registers on reconnection those it
// knows of, so only they survive (and their events pending on the wire come after reconnection).
void FakeServer::drop_locked(Link& link) {
  if (link.state != Link::State::connected) return;
  link.state = Link::State::disconnected;
  const auto session = link.session;
  for (auto* watches : {&data_watches_, &children_watches_})
    std::erase_if(*watches, [&](const auto& entry) {
      return entry.second.session == session && !known_watches_.count(entry.second.id);
    });
  std::deque<Link::Entry> kept;
  for (auto& entry : link.queue) {
    if (entry.kind == Link::Kind::node_event) {
      if (known_watches_.count(entry.watch_id)) link.after_reconnect.push_back(std::move(entry));
      continue;
    }
    if (entry.kind == Link::Kind::reply) entry.rc = zk_errc::connection_loss;
    kept.push_back(std::move(entry));
  }
  link.queue = std::move(kept);
  enqueue_session_event_locked(link, ConnectionEvent::connecting);
}

void FakeServer::reconnect_locked(Link& link) {
  if (link.state != Link::State::disconnected) return;
  if (!live_sessions_.count(link.session)) {
    link.state = Link::State::expired;
    for (auto& request : link.held)
      enqueue_reply_locked(link, zk_errc::session_expired, request.fail, request.sent, describe(request));
    link.held.clear();
    link.after_reconnect.clear();
    enqueue_session_event_locked(link, ConnectionEvent::expired);
    return;
  }
  link.state = Link::State::connected;
  session_clocks_[link.session].unheard = {};  // heard again: its silence starts anew
  enqueue_session_event_locked(link, ConnectionEvent::connected);
  for (auto& entry : link.after_reconnect) link.queue.push_back(std::move(entry));
  link.after_reconnect.clear();
  auto held = std::move(link.held);
  link.held.clear();
  for (auto& request : held) {
    if (link.state == Link::State::connected) run_request_locked(link, std::move(request));
    else link.held.push_back(std::move(request));  // a fault cut the connection again
  }
  changed_locked();
}

// The server ends a session (expiry or close): its watches go, then its ephemeral nodes, which
// fires the watches of everybody else.
void FakeServer::end_session_locked(std::int64_t session) {
  if (!live_sessions_.erase(session)) return;
  session_clocks_.erase(session);
  for (auto* watches : {&data_watches_, &children_watches_})
    std::erase_if(*watches, [session](const auto& entry) { return entry.second.session == session; });
  std::vector<std::string> ephemerals;
  for (const auto& [path, node] : nodes_)
    if (node.stat.ephemeral_owner == session) ephemerals.push_back(path);
  for (const auto& path : ephemerals) remove_locked(path, -1);
  changed_locked();
}

std::shared_ptr<FakeServer::Link> FakeServer::open_link(std::chrono::milliseconds timeout,
                                                        detail::ConnectionEventHandler on_event) {
  std::lock_guard lock(mutex_);
  auto link = std::make_shared<Link>();
  link->session = next_session_++;
  link->password = fmt::format("{:016x}", static_cast<std::uint64_t>(link->session) * 2654435761u).substr(0, 16);
  link->timeout = timeout;
  link->on_event = std::move(on_event);
  live_sessions_.insert(link->session);
  session_clocks_[link->session] = {timeout, {}};
  links_[link->session] = link;
  enqueue_session_event_locked(*link, ConnectionEvent::connected);
  link->thread = std::thread([this, raw = link.get()] { deliver_loop(*raw); });
  return link;
}

void FakeServer::deliver_loop(Link& link) {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] {
      if (link.queue.empty()) return link.stopping;
      return link.stopping || !link.paused || link.credit > 0;
    });
    if (link.queue.empty()) return;  // stopping, and nothing left to deliver
    Link::Entry entry = std::move(link.queue.front());
    link.queue.pop_front();
    if (link.paused && !link.stopping && link.credit > 0) --link.credit;
    // The client registers a watch when the reply that set it arrives.
    if (entry.kind == Link::Kind::reply && entry.rc == zk_errc::ok && entry.watch_id != 0)
      known_watches_.insert(entry.watch_id);
    lock.unlock();
    entry.run(entry.rc);
    lock.lock();
    // Replies drained by close() reach a client that no longer listens: they acknowledge nothing.
    if (entry.kind == Link::Kind::reply && detail::server_answered(entry.rc) && went_through_leader(entry.what) &&
        !link.stopping) {
      auto& last = last_answered_send_[link.session];
      last = std::max(last, entry.sent);
    }
    ++link.delivered;
    changed_locked();
  }
}

// A connected session is closed on the server (its ephemerals go at once); a disconnected one
// lingers there until expired. Unfired watches are dropped; requests held while disconnected fail
// with ZCLOSING; replies already on their way are delivered.
void FakeServer::close_link(Link& link) {
  {
    std::lock_guard lock(mutex_);
    if (link.state != Link::State::closed) {
      if (link.state == Link::State::connected) {
        end_session_locked(link.session);
      } else {
        const auto session = link.session;
        for (auto* watches : {&data_watches_, &children_watches_})
          std::erase_if(*watches, [session](const auto& entry) { return entry.second.session == session; });
      }
      std::deque<Link::Entry> replies;
      for (auto& entry : link.queue)
        if (entry.kind == Link::Kind::reply) replies.push_back(std::move(entry));
      link.queue = std::move(replies);
      for (auto& request : link.held)
        enqueue_reply_locked(link, zk_errc::closing, request.fail, request.sent, describe(request));
      link.held.clear();
      link.after_reconnect.clear();
      link.state = Link::State::closed;
    }
    link.stopping = true;
    changed_locked();
  }
  if (!link.thread.joinable()) return;
  if (link.thread.get_id() == std::this_thread::get_id()) link.thread.detach();  // against the contract; do not hang
  else link.thread.join();
}

// ---- the public API ----

zk_errc FakeServer::create(const std::string& path, const std::string& data, CreateMode mode,
                           std::int64_t ephemeral_owner, std::string* created) {
  std::lock_guard lock(mutex_);
  std::string actual;
  NodeStat stat;
  zk_errc rc = create_locked(path, data, mode, ephemeral_owner, actual, stat);
  if (created) *created = actual;
  return rc;
}

void FakeServer::ensure_path(const std::string& path, CreateMode mode) {
  std::lock_guard lock(mutex_);
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    std::string created;
    NodeStat stat;
    create_locked(path.substr(0, slash), {}, CreateMode::container, 0, created, stat);
  }
  std::string created;
  NodeStat stat;
  create_locked(path, {}, mode, 0, created, stat);
}

zk_errc FakeServer::remove(const std::string& path, int version) {
  std::lock_guard lock(mutex_);
  return remove_locked(path, version);
}

zk_errc FakeServer::set_data(const std::string& path, const std::string& data, int version) {
  std::lock_guard lock(mutex_);
  NodeStat stat;
  return set_data_locked(path, data, version, stat);
}

std::optional<FakeNode> FakeServer::node(const std::string& path) const {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(path);
  if (it == nodes_.end()) return std::nullopt;
  FakeNode copy = it->second;
  copy.stat = stat_locked(it->second);
  return copy;
}

std::vector<std::string> FakeServer::children(const std::string& path) const {
  std::lock_guard lock(mutex_);
  auto it = nodes_.find(path);
  if (it == nodes_.end()) return {};
  return {it->second.children.begin(), it->second.children.end()};
}

std::size_t FakeServer::data_watches(const std::string& path) const {
  std::lock_guard lock(mutex_);
  return data_watches_.count(path);
}

std::size_t FakeServer::children_watches(const std::string& path) const {
  std::lock_guard lock(mutex_);
  return children_watches_.count(path);
}

// A session's watches on a path: one per watching request, as the client keeps them.
std::size_t FakeServer::count_watches_locked(const std::multimap<std::string, Watch>& watches,
                                             const std::string& path, std::int64_t session) const {
  const auto [first, last] = watches.equal_range(path);
  return static_cast<std::size_t>(
      std::count_if(first, last, [session](const auto& entry) { return entry.second.session == session; }));
}

std::size_t FakeServer::data_watches(const std::string& path, std::int64_t session) const {
  std::lock_guard lock(mutex_);
  return count_watches_locked(data_watches_, path, session);
}

std::size_t FakeServer::children_watches(const std::string& path, std::int64_t session) const {
  std::lock_guard lock(mutex_);
  return count_watches_locked(children_watches_, path, session);
}

void FakeServer::forget_abandoned_watches(std::int64_t session, const std::string& prefix) {
  std::lock_guard lock(mutex_);
  for (auto* watches : {&data_watches_, &children_watches_})
    std::erase_if(*watches, [&](const auto& entry) {
      const Watch& watch = entry.second;
      return watch.session == session && watch.owned && watch.owner.expired() && entry.first.starts_with(prefix);
    });
}

std::size_t FakeServer::watches_of(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  const auto of_session = [session](const auto& entry) { return entry.second.session == session; };
  return static_cast<std::size_t>(std::count_if(data_watches_.begin(), data_watches_.end(), of_session) +
                                  std::count_if(children_watches_.begin(), children_watches_.end(), of_session));
}

std::int64_t FakeServer::last_zxid() const {
  std::lock_guard lock(mutex_);
  return zxid_;
}

std::uint64_t FakeServer::changes() const {
  std::lock_guard lock(mutex_);
  return change_count_;
}

int FakeServer::reap_empty_containers() {
  std::lock_guard lock(mutex_);
  int reaped = 0;
  bool again = true;
  while (again) {
    again = false;
    for (const auto& [path, node] : nodes_) {
      if (node.mode == CreateMode::container && node.children.empty() && path != "/") {
        remove_locked(std::string(path), -1);
        ++reaped;
        again = true;
        break;
      }
    }
  }
  return reaped;
}

void FakeServer::inject(Fault fault) {
  std::lock_guard lock(mutex_);
  faults_.push_back(std::move(fault));
}

std::size_t FakeServer::pending_faults() const {
  std::lock_guard lock(mutex_);
  return faults_.size();
}

void FakeServer::clear_faults() {
  std::lock_guard lock(mutex_);
  faults_.clear();
}

void FakeServer::set_request_limit(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  request_limit_ = bytes;
}

bool FakeServer::session_alive(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  return live_sessions_.count(session) != 0;
}

std::vector<std::int64_t> FakeServer::live_sessions() const {
  std::lock_guard lock(mutex_);
  return {live_sessions_.begin(), live_sessions_.end()};
}

bool FakeServer::connected(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  Link* link = link_locked(session);
  return link && link->state == Link::State::connected;
}

bool FakeServer::paused(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  Link* link = link_locked(session);
  return link && link->paused;
}

std::vector<std::int64_t> FakeServer::disconnected_sessions() const {
  std::lock_guard lock(mutex_);
  std::vector<std::int64_t> out;
  for (const auto& [session, weak] : links_)
    if (Link* link = link_locked(session); link && link->state == Link::State::disconnected) out.push_back(session);
  return out;
}

int FakeServer::expire_abandoned_sessions() {
  std::lock_guard lock(mutex_);
  std::vector<std::int64_t> abandoned;
  for (auto session : live_sessions_) {
    Link* link = link_locked(session);
    if (!link || link->state == Link::State::closed) abandoned.push_back(session);
  }
  for (auto session : abandoned) end_session_locked(session);
  return static_cast<int>(abandoned.size());
}

std::vector<std::int64_t> FakeServer::pass_time(std::chrono::milliseconds elapsed) {
  std::lock_guard lock(mutex_);
  std::vector<std::int64_t> expired;
  for (auto& [session, clock] : session_clocks_) {
    Link* link = link_locked(session);
    if (link && link->state == Link::State::connected) {
      clock.unheard = {};
      continue;
    }
    clock.unheard += elapsed;
    if (clock.unheard >= clock.timeout) expired.push_back(session);
  }
  for (auto session : expired) end_session_locked(session);
  return expired;
}

void FakeServer::drop_connection(std::int64_t session) {
  std::lock_guard lock(mutex_);
  if (Link* link = link_locked(session)) drop_locked(*link);
}

void FakeServer::reconnect(std::int64_t session) {
  std::lock_guard lock(mutex_);
  if (Link* link = link_locked(session)) reconnect_locked(*link);
}

void FakeServer::expire_session(std::int64_t session, bool tell_client_now) {
  std::lock_guard lock(mutex_);
  end_session_locked(session);
  Link* link = link_locked(session);
  if (!link) return;
  drop_locked(*link);  // the server closes the session's socket
  if (tell_client_now) reconnect_locked(*link);
}

bool FakeServer::move_on(std::int64_t session) {
  std::lock_guard lock(mutex_);
  Link* link = link_locked(session);
  if (!link || link->state != Link::State::connected) return false;
  ++server_moves_[session];
  drop_locked(*link);
  if (!next_server_silent_) {
    link->paused = false;
    link->credit = 0;
    reconnect_locked(*link);
  }
  changed_locked();
  return true;
}

int FakeServer::server_moves(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  auto it = server_moves_.find(session);
  return it == server_moves_.end() ? 0 : it->second;
}

void FakeServer::set_next_server_silent(bool silent) {
  std::lock_guard lock(mutex_);
  next_server_silent_ = silent;
}

void FakeServer::pause(std::int64_t session) {
  std::lock_guard lock(mutex_);
  if (Link* link = link_locked(session)) {
    link->paused = true;
    link->credit = 0;
  }
}

void FakeServer::resume(std::int64_t session) {
  std::lock_guard lock(mutex_);
  if (Link* link = link_locked(session)) {
    link->paused = false;
    link->credit = 0;
    changed_locked();
  }
}

std::size_t FakeServer::step(std::int64_t session, std::size_t n) {
  std::unique_lock lock(mutex_);
  auto it = links_.find(session);
  std::shared_ptr<Link> link = it == links_.end() ? nullptr : it->second.lock();
  if (!link) return 0;
  const std::size_t count = std::min(n, link->queue.size());
  const std::uint64_t target = link->delivered + count;
  link->credit += count;
  changed_locked();
  changed_.wait_for(lock, std::chrono::seconds(30), [&] { return link->delivered >= target; });
  return count;
}

bool FakeServer::step_through(std::int64_t session, const std::string& what) {
  std::size_t position = 0;
  {
    std::lock_guard lock(mutex_);
    Link* link = link_locked(session);
    if (!link) return false;
    auto it = std::find_if(link->queue.begin(), link->queue.end(), [&](const Link::Entry& e) { return e.what == what; });
    if (it == link->queue.end()) return false;
    position = static_cast<std::size_t>(it - link->queue.begin()) + 1;
  }
  return step(session, position) == position;
}

std::vector<std::string> FakeServer::queued_entries(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  Link* link = link_locked(session);
  std::vector<std::string> out;
  if (link)
    for (const auto& entry : link->queue) out.push_back(entry.what);
  return out;
}

std::size_t FakeServer::queued(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  Link* link = link_locked(session);
  return link ? link->queue.size() : 0;
}

FakeClock::time_point FakeServer::last_answered_send(std::int64_t session) const {
  std::lock_guard lock(mutex_);
  auto it = last_answered_send_.find(session);
  return it == last_answered_send_.end() ? FakeClock::time_point{} : it->second;
}

std::vector<RequestRecord> FakeServer::requests() const {
  std::lock_guard lock(mutex_);
  return records_;
}

std::size_t FakeServer::count_requests(const std::function<bool(const RequestRecord&)>& predicate) const {
  std::lock_guard lock(mutex_);
  return static_cast<std::size_t>(std::count_if(records_.begin(), records_.end(), predicate));
}

bool FakeServer::wait_until(const std::function<bool()>& predicate, std::chrono::milliseconds timeout) const {
  const auto deadline = FakeClock::now() + timeout;
  for (;;) {
    if (predicate()) return true;
    const auto now = FakeClock::now();
    if (now >= deadline) return false;
    std::unique_lock lock(mutex_);
    const auto seen = change_count_;
    changed_.wait_for(lock, std::min<FakeClock::duration>(std::chrono::milliseconds(5), deadline - now),
                      [&] { return change_count_ != seen; });
  }
}

detail::ConnectionFactory fake_factory(std::shared_ptr<FakeServer> server) {
  return [server](const std::string& servers, std::chrono::milliseconds session_timeout,
                  detail::ConnectionEventHandler on_event,
                  std::error_code& ec) -> std::unique_ptr<detail::ZooKeeperConnection> {
    if (servers.empty() || session_timeout <= std::chrono::milliseconds::zero()) {
      ec = std::make_error_code(std::errc::invalid_argument);
      return nullptr;
    }
    ec.clear();
    auto link = server->open_link(session_timeout, std::move(on_event));
    return std::make_unique<FakeConnection>(server, std::move(link));
  };
}

}  // namespace zkr::fake
