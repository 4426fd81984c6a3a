// SPDX-License-Identifier: Apache-2.0
// The swarm against a real ZooKeeper server (testenv): each session slot connects through a proxy
// of its own, so that a fault hits one session. Faults: a create's reply swallowed (the create took
// effect) and the connection reset, a reset, a cut (blackhole) for some steps, an expiry forced by
// a second handle while the session is cut off, and a restart of the server. Slower than the fake
// and without its quiet points: each step waits a little, and bounds are longer.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <testenv.hpp>
#include <zkr/error.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "config.hpp"
#include "world.hpp"
#include "zk_client.hpp"

namespace zkr::swarm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The server's tick: session timeouts of a few seconds, so that a cut of a few steps can cost a
// session and an expiry comes within the run.
constexpr int kTickMs = 200;

// The test's own eyes on the server: the library's adapter over the C client, without the
// Session's checks (its data calls refuse a path through a contender node, which is what the test
// reads). Each call waits for its reply; a call that meets a restart of the server is retried.
class Observer {
 public:
  explicit Observer(const std::string& servers) {
    std::error_code ec;
    connection_ = detail::connect_zookeeper(servers, 30s, [](detail::ConnectionEvent) {}, ec);
    if (!connection_) throw std::runtime_error("swarm observer: cannot connect to " + servers + ": " + ec.message());
  }
  ~Observer() { connection_->close(); }

  // The children of `path` with their Stat; empty if it does not exist.
  std::vector<ServerNode> children(const std::string& path) {
    std::vector<std::string> names;
    const auto rc = call<zk_errc>([&](auto done) {
      return connection_->get_children(path, [done, &names](zk_errc result, std::vector<std::string> got, detail::NodeStat) {
        names = std::move(got);
        done(result);
      });
    });
    if (rc == zk_errc::no_node) return {};
    std::sort(names.begin(), names.end());
    std::vector<ServerNode> out;
    for (const auto& name : names)
      if (auto found = stat(path + "/" + name)) out.push_back({name, found->czxid, found->ephemeral_owner, found->mzxid});
    return out;
  }

  std::optional<detail::NodeStat> stat(const std::string& path) {
    detail::NodeStat stat;
    const auto rc = call<zk_errc>([&](auto done) {
      return connection_->exists(path, [done, &stat](zk_errc result, detail::NodeStat got) {
        stat = got;
        done(result);
      });
    });
    if (rc == zk_errc::no_node) return std::nullopt;
    return stat;
  }

  void create(const std::string& path) {
    const auto rc = call<zk_errc>([&](auto done) {
      return connection_->create(path, {}, detail::CreateMode::persistent, NodeAcl::open,
                                 [done](zk_errc result, std::string, detail::NodeStat) { done(result); });
    });
    if (rc != zk_errc::ok && rc != zk_errc::node_exists)
      throw std::runtime_error(fmt::format("swarm observer: create {}: {}", path, make_error_code(rc).message()));
  }

 private:
  // Issues a request until the server answers it (ok or the server's refusal: no_node, ...).
  template <typename Result, typename Issue>
  Result call(Issue issue) {
    const auto deadline = Clock::now() + testenv::scaled(30s);
    for (;;) {
      auto reply = std::make_shared<std::promise<zk_errc>>();
      auto answered = reply->get_future();
      const zk_errc queued = issue([reply](zk_errc rc) { reply->set_value(rc); });
      zk_errc rc = queued;
      if (queued == zk_errc::ok)
        rc = answered.wait_for(testenv::scaled(10s)) == std::future_status::ready ? answered.get()
                                                                                 : zk_errc::operation_timeout;
      if (detail::server_answered(rc)) return rc;
      if (Clock::now() > deadline)
        throw std::runtime_error("swarm observer: no answer from the server: " + make_error_code(rc).message());
      std::this_thread::sleep_for(50ms);
    }
  }

  std::unique_ptr<detail::ZooKeeperConnection> connection_;
};

// A peer: a Curator JVM or a kazoo process whose clients enter and leave one recipe on a swarm
// path again and again (their churn mode), straight to the server, never through a fault point,
// until stop(). Each appends "ENTER <who> <ns> [<token>]" and "EXIT <who> <ns>" around its sections
// to a log of its own (tests/interop/peers/), which inside() follows: the peers that believe they
// hold now.
class PeerProcess {
 public:
  PeerProcess(std::string path, std::vector<std::string> argv_before_log, std::vector<std::string> argv_after_log)
      : path_(std::move(path)), log_(std::filesystem::temp_directory_path() /
                                     fmt::format("zkr-swarm-peer-{:08x}.log", std::random_device{}())) {
    std::ofstream(log_).flush();  // the peer appends; the file must exist for inside()
    auto argv = std::move(argv_before_log);
    argv.push_back(log_.string());
    argv.insert(argv.end(), argv_after_log.begin(), argv_after_log.end());
    testenv::Process::Options options;
    options.pipe_stdin = true;
    options.merge_stderr = true;
    process_ = std::make_unique<testenv::Process>(std::move(argv), options);
  }
  ~PeerProcess() { std::filesystem::remove(log_); }

  const std::string& path() const { return path_; }
  // The paths it contends on: its path, or each of a multi-lock's (comma-separated in its path).
  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    for (std::size_t start = 0;;) {
      const auto comma = path_.find(',', start);
      out.push_back(path_.substr(start, comma - start));
      if (comma == std::string::npos) return out;
      start = comma + 1;
    }
  }

  // Waits for READY and lets the clients go. A peer that does not start is the test's failure.
  void start() {
    auto line = process_->read_line(testenv::scaled(60s));
    while (line && *line != "READY" && !line->starts_with("ERROR")) line = process_->read_line(testenv::scaled(60s));
    if (!line || *line != "READY")
      throw std::runtime_error(fmt::format("swarm peer on {} did not start: {}", path_, line.value_or("(nothing)")));
    process_->write_stdin("GO\n");
  }

  // Asks the clients to leave (a second line, then the end of stdin) and waits for them: their
  // sessions close, their nodes go. Returns what went wrong, if anything.
  std::string stop() {
    if (stopped_) return {};
    stopped_ = true;
    std::string said;
    try {
      process_->write_stdin("STOP\n");
      process_->close_stdin();
    } catch (const std::exception& e) {
      said = fmt::format("(it had ended: {}) ", e.what());
    }
    auto line = process_->read_line(testenv::scaled(60s));
    while (line && *line != "DONE" && !line->starts_with("ERROR")) {
      if (!line->starts_with("RETRY")) said += *line + "\n";
      line = process_->read_line(testenv::scaled(60s));
    }
    const auto status = process_->wait(testenv::scaled(20s));
    if (line && *line == "DONE" && status == std::optional<int>(0)) return {};
    return fmt::format("the peer on {} did not stop cleanly ({}): {}", path_, line.value_or("no DONE"), said);
  }

  // The peer's clients inside a section now, with their tokens (0 where the peer logs none) and
  // the line of their ENTER, as far as the log has been written.
  std::map<std::string, std::pair<std::int64_t, std::uint64_t>> inside() {
    std::ifstream in(log_);
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // a line still being written: read it whole next time
      offset_ += line.size() + 1;
      ++lines_;
      std::istringstream fields(line);
      std::string event, who;
      std::int64_t ns = 0, token = 0;
      fields >> event >> who >> ns >> token;
      if (event == "ENTER") inside_[who] = {token, lines_};
      else if (event == "EXIT") inside_.erase(who);
      else if (event == "ADD" || event == "LOST") {
        // A counter call: the value written (token's place), when it was called, whether unsure.
        std::int64_t called = 0;
        int unsure = 1;
        fields >> called >> unsure;
        PeerCounterCall call;
        call.who = who;
        call.called = Clock::time_point(std::chrono::nanoseconds(called));
        call.returned = Clock::time_point(std::chrono::nanoseconds(ns));
        if (event == "ADD") call.written = token;
        call.unsure = unsure != 0;
        counter_calls_.push_back(std::move(call));
      }
    }
    return inside_;
  }

  // The counter calls it logged so far (a counter peer's).
  const std::vector<PeerCounterCall>& counter_calls() {
    inside();
    return counter_calls_;
  }

  // Drains what the peer printed (its pipe must not fill up); counts the errors it went on from.
  void drain() {
    while (auto line = process_->read_line(1ms)) {
      if (line->starts_with("RETRY")) ++retries_;
      else if (std::getenv("ZKR_SWARM_TRACE")) fmt::print(stderr, "peer on {}: {}\n", path_, *line);
    }
  }

 private:
  std::string path_;
  std::filesystem::path log_;
  std::unique_ptr<testenv::Process> process_;
  std::size_t offset_ = 0;
  std::uint64_t lines_ = 0;
  std::map<std::string, std::pair<std::int64_t, std::uint64_t>> inside_;  // who -> token, ENTER line
  std::vector<PeerCounterCall> counter_calls_;
  int retries_ = 0;
  bool stopped_ = false;
};

// Whether the swarm on real servers runs peers: yes unless ZKR_SWARM_PEERS=0 (scripts/swarm
// --real --no-peers).
bool peers_wanted() {
  const char* value = std::getenv("ZKR_SWARM_PEERS");
  return !value || std::string_view(value) != "0";
}

class RealWorld final : public World {
 public:
  RealWorld() : observer_(cluster_.connect_string()) {
    if (peers_wanted()) start_peers();
  }

  ~RealWorld() override {
    for (auto& proxy : proxies_)
      if (proxy) proxy->pass();
    for (auto& peer : peers_) peer->stop();
  }

  std::vector<PeerHolder> peer_holders() override {
    std::vector<PeerHolder> out;
    for (auto& peer : peers_) {
      peer->drain();
      for (const auto& [who, entered] : peer->inside())
        for (const auto& path : peer->paths()) out.push_back({path, who, entered.first, entered.second});
    }
    return out;
  }

  std::string peer_counter_path() const override { return peers_on(kPeerCounterPath) ? kPeerCounterPath : std::string(); }

  std::vector<PeerCounterCall> peer_counter_calls() override {
    std::vector<PeerCounterCall> out;
    for (auto& peer : peers_)
      if (peer->path() == kPeerCounterPath) {
        peer->drain();
        const auto& calls = peer->counter_calls();
        out.insert(out.end(), calls.begin(), calls.end());
      }
    return out;
  }

  bool peers_on(const std::string& path) const override {
    return std::any_of(peers_.begin(), peers_.end(), [&](const auto& peer) {
      const auto paths = peer->paths();
      return std::find(paths.begin(), paths.end(), path) != paths.end();
    });
  }

  std::string stop_peers() override {
    std::string problems;
    for (auto& peer : peers_) problems += peer->stop();
    return problems;
  }

  std::unique_ptr<Session> open_session(int slot, SessionOptions options) override {
    if (static_cast<int>(proxies_.size()) <= slot) proxies_.resize(static_cast<std::size_t>(slot) + 1);
    auto& proxy = proxies_[static_cast<std::size_t>(slot)];
    if (!proxy) proxy = std::make_unique<testenv::Proxy>(cluster_.server_address(0));
    options.servers = proxy->address();
    tune(options);
    return std::make_unique<Session>(options);
  }

  std::vector<ServerNode> children(const std::string& path) override { return observer_.children(path); }

  bool exists(const std::string& path) override { return observer_.stat(path).has_value(); }

  void ensure_persistent(const std::string& path) override {
    for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
      observer_.create(path.substr(0, slash));
      if (slash == std::string::npos) return;
    }
  }

  // A session's ephemeral nodes go with it: a node that stands has a live owner.
  bool session_alive(std::int64_t) override { return true; }

  std::optional<std::size_t> watches(const std::string&, std::int64_t) override { return std::nullopt; }

  bool supports(OpKind fault) const override { return fault != OpKind::fault_failed_create; }

  void inject(OpKind fault, int slot, Session& session, int steps) override {
    auto& proxy = *proxies_.at(static_cast<std::size_t>(slot));
    switch (fault) {
      case OpKind::fault_lost_reply:
        proxy.drop_next_reply();
        armed_.push_back({slot, proxy.dropped_replies()});
        return;
      case OpKind::fault_drop:
        proxy.reset();
        return;
      case OpKind::fault_expire:
      case OpKind::fault_partition: {
        const auto id = detail::Internals::core(session)->client_id();
        if (id.session_id == 0) return;
        proxy.blackhole();
        try {
          testenv::expire_session(cluster_.connect_string(), id.session_id, id.password);
        } catch (const std::exception&) {
          // The session had gone already.
        }
        if (fault == OpKind::fault_expire) {
          proxy.reset();  // it hears of the expiry on reconnecting
          return;
        }
        cut_.push_back({slot, steps});
        return;
      }
      case OpKind::fault_pause:
        proxy.blackhole();
        cut_.push_back({slot, steps});
        return;
      case OpKind::fault_restart:
        cluster_.stop(0);
        cluster_.start(0);
        return;
      case OpKind::fault_freeze:
        freeze_worker(session);
        return;
      case OpKind::fault_move: {
        // Between the proxy and the server's own port: the faults of the proxy miss the session
        // while it is on the server's port, until the next move brings it back.
        const std::string direct = cluster_.server_address(0);
        std::error_code ec;
        session.set_servers(session.servers() == direct ? proxy.address() : direct, ec);
        return;
      }
      default:
        return;
    }
  }

  // The server keeps its own time; a session it expires is one a fault held cut off.
  std::vector<std::int64_t> take_expired_by_time() override { return {}; }

  void heal(bool all) override {
    for (auto& cut : cut_)
      if (all || --cut.steps_left <= 0) {
        proxies_[static_cast<std::size_t>(cut.slot)]->pass();
        cut.steps_left = 0;
      }
    std::erase_if(cut_, [](const Cut& cut) { return cut.steps_left <= 0; });
    std::erase_if(armed_, [&](const Armed& armed) {
      return all || proxies_[static_cast<std::size_t>(armed.slot)]->dropped_replies() > armed.dropped_before;
    });
  }

  bool faults_active() override { return !cut_.empty() || !armed_.empty(); }

  bool connection_healthy(const Session& session) override {
    return session.state() == SessionState::connected && cut_.empty() && armed_.empty();
  }

  // No quiet point to wait for: a finished step gets a moment for its callbacks and watches, a
  // step still running a while to finish.
  void settle(const std::function<bool()>& done, std::chrono::milliseconds bound) override {
    const auto deadline = Clock::now() + std::min(bound, testenv::scaled(300ms));
    while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
    std::this_thread::sleep_for(testenv::scaled(30ms));
  }

  std::vector<std::string> take_oversized_requests() override { return {}; }

  std::chrono::milliseconds slack() const override { return testenv::scaled(4000ms); }

  void tune(SessionOptions& options) const override {
    options.session_timeout = 4000ms;
    options.connect_timeout = testenv::scaled(15s);
    options.ensemble_tick_time = std::chrono::milliseconds(kTickMs);
  }

 private:
  // The session's worker thread (its monitor, heartbeats and timers) is kept busy for 3/8 of the
  // timeout, 1.5 s: the deadline of its latest proof passes meanwhile in about half the cases, and
  // the monitor, waking past it, must prove the session alive rather than declare it lost.
  static void freeze_worker(Session& session) {
    auto running = std::make_shared<std::promise<void>>();
    auto release = std::make_shared<std::promise<void>>();
    auto running_now = running->get_future();
    boost::asio::post(detail::Internals::core(session)->worker(),
                      [running, released = release->get_future().share()] {
                        running->set_value();
                        released.wait();
                      });
    if (running_now.wait_for(testenv::scaled(5s)) == std::future_status::ready) std::this_thread::sleep_for(1500ms);
    release->set_value();
  }

  // The peers on the swarm's shared paths: a kazoo Lock on the plain lock, a Curator
  // InterProcessMutex on a reentrant one, a Curator InterProcessMultiLock over both reentrant
  // ones, each semaphore's and each election's own kind on the one
  // in its layout (a kazoo Election, a Curator LeaderLatch, a Curator LeaderSelector), Curator
  // GroupMembers in the group and Curator DistributedAtomicLongs on the counter. Two clients each,
  // holding a few milliseconds, idle up to that long between sections (the members and the
  // counter's: seconds).
  void start_peers() {
#if defined(ZKR_KAZOO_PEER) && defined(ZKR_CURATOR_CLASSPATH)
    const auto servers = cluster_.connect_string();
    const std::string hold_ms = "30";
    auto path_of = [](std::string_view name) {
      return std::find_if(resources().begin(), resources().end(), [&](const Resource& r) { return r.name == name; })->path;
    };
    auto kazoo = [&](std::string_view resource, const std::string& mode, const std::string& who) {
      const auto path = path_of(resource);
      peers_.push_back(std::make_unique<PeerProcess>(
          path, std::vector<std::string>{"/usr/bin/python3", ZKR_KAZOO_PEER, servers, path, who},
          std::vector<std::string>{"0", hold_ms, "2", mode}));
    };
    auto curator_on = [&](const std::string& path, const std::string& mode, const std::string& who,
                          const std::string& hold) {
      if (!ZKR_CURATOR_AVAILABLE) return;
      // Short JIT and a small heap: two cores are shared, and JVM start is slow. setpriv makes the
      // JVM die with the test.
      peers_.push_back(std::make_unique<PeerProcess>(
          path,
          std::vector<std::string>{"setpriv", "--pdeathsig", "KILL", ZKR_JAVA, "-XX:TieredStopAtLevel=1",
                                   "-XX:+UseSerialGC", "-Xmx128m", "-cp", ZKR_CURATOR_CLASSPATH, "CuratorPeer", servers,
                                   path, mode, who},
          std::vector<std::string>{"0", hold, "2"}));
    };
    auto curator = [&](std::string_view resource, const std::string& mode, const std::string& who) {
      curator_on(path_of(resource), mode, who, hold_ms);
    };
    kazoo("lock2", "lock", "kazoo-lock");
    curator("lock1", "mutex", "curator-lock");  // not beside kazoo's: Curator does not see kazoo's lock nodes
    // A Curator InterProcessMultiLock over lock0 and lock1, beside the test's multi-locks there.
    curator_on(path_of("lock0") + "," + path_of("lock1"), "multi", "curator-multi", hold_ms);
    kazoo("sem-kazoo", "semaphore:2", "kazoo-sem");
    curator("sem-curator", "semaphore:2", "curator-sem");
    kazoo("latch-kazoo", "election", "kazoo-election");
    curator("latch", "latch", "curator-latch");
    curator("selector", "leader", "curator-selector");
    // Group members that join and leave every few seconds: a view must list them between changes.
    curator_on(kGroupPath, "group", "curator-member", "3000");
    // Increments of the swarm's counter (its default layout, Curator's DistributedAtomicLong).
    curator_on(kPeerCounterPath, "atomiclong", "curator-counter", "1500");
    for (auto& peer : peers_) peer->start();
#else
    throw std::runtime_error("the swarm's real world wants its peers, but this swarm_test was built without the "
                             "interop peers (ZKR_SWARM_PEERS=0 runs it without them)");
#endif
  }

  struct Cut {
    int slot;
    int steps_left;
  };
  struct Armed {
    int slot;
    int dropped_before;
  };
  testenv::Cluster cluster_{{.servers = 1, .tick_ms = kTickMs}};
  Observer observer_;
  std::vector<std::unique_ptr<testenv::Proxy>> proxies_;
  std::vector<Cut> cut_;
  std::vector<Armed> armed_;
  std::vector<std::unique_ptr<PeerProcess>> peers_;  // last: stopped before the cluster goes
};

}  // namespace

std::unique_ptr<World> make_real_world() { return std::make_unique<RealWorld>(); }

}  // namespace zkr::swarm
