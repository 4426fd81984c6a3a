// SPDX-License-Identifier: Apache-2.0
// The swarm on the fake ZooKeeper (tests/unit/fake_zookeeper.hpp): faults are exact (the reply
// of the next create lost after it took effect, an expiry the client hears only on reconnecting),
// and the fake tells when nothing is on the wire any more, so each step ends at a quiet point.
//
// Time passes on the fake's server in steps: each step is a quarter of the session timeout
// (kStepTime), so a session the server hears nothing of for four steps (a drop that lasts, a handle
// closed while cut off) is expired, its nodes with it, as on a real server; its client learns it
// when it reconnects. The session monitor keeps real time, in which a run lasts a few seconds of
// a 120 s timeout: a client hears of an expiry only from the server, as after fault_partition.
#include <algorithm>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <testenv.hpp>

#include "fake_zookeeper.hpp"
#include "internals.hpp"
#include "session_core.hpp"
#include "world.hpp"

namespace zkr::swarm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class FakeWorld final : public World {
 public:
  std::unique_ptr<Session> open_session(int, SessionOptions options) override {
    options.servers = "fake:2181";
    tune(options);
    auto core = std::make_shared<detail::SessionCore>(options, fake::fake_factory(server_));
    core->connect_or_throw();
    return std::make_unique<Session>(detail::Internals::key(), core);
  }

  std::vector<ServerNode> children(const std::string& path) override {
    std::vector<ServerNode> out;
    for (const auto& name : server_->children(path)) {
      const auto node = server_->node(path + "/" + name);
      if (!node) continue;  // deleted meanwhile
      out.push_back({name, node->stat.czxid, node->stat.ephemeral_owner, node->stat.mzxid});
    }
    return out;
  }

  bool exists(const std::string& path) override { return server_->node(path).has_value(); }

  void ensure_persistent(const std::string& path) override {
    for (std::size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
      server_->create(path.substr(0, slash), {}, detail::CreateMode::persistent);
      if (slash == std::string::npos) return;
    }
  }

  bool session_alive(std::int64_t session_id) override { return server_->session_alive(session_id); }

  std::optional<std::size_t> watches(const std::string& path, std::int64_t session_id) override {
    return server_->data_watches(path, session_id) + server_->children_watches(path, session_id);
  }

  std::optional<std::size_t> unanswered_creates(std::int64_t session_id,
                                                const std::vector<std::string>& parents) override {
    std::size_t n = 0;
    for (const auto& entry : server_->queued_entries(session_id)) {
      if (!entry.starts_with("create ")) continue;
      const std::string_view path = std::string_view(entry).substr(7);
      n += std::any_of(parents.begin(), parents.end(), [&](const std::string& parent) {
        return path.size() > parent.size() && path.starts_with(parent) && path[parent.size()] == '/';
      });
    }
    return n;
  }

  // Its sessions' deadlines are far away in real time: a freeze would cross none.
  bool supports(OpKind fault) const override {
    return fault != OpKind::fault_restart && fault != OpKind::fault_freeze && fault != OpKind::fault_move;
  }

  // The same fault for the next write of the shared counter (counters.cpp), whose adds are
  // set_data requests: no other recipe writes under that prefix.
  static fake::Fault counter_write(fake::Fault fault) {
    fault.op = fake::Op::set_data;
    fault.path_prefix = std::string(kRoot) + "/counter-";
    return fault;
  }

  // The same fault for the next read of the barrier's node (a Barrier wait's, with its watch): the
  // server forgets a watch whose reply was lost with the connection, so the wait must read again
  // when the connection comes back.
  static fake::Fault barrier_read(fake::Fault fault) {
    fault.op = fake::Op::get_data;
    fault.path_prefix = std::string(kRoot) + "/barrier";
    return fault;
  }

  void inject(OpKind fault, int slot, Session& session, int steps) override {
    const auto id = session.id();
    if (id == 0) return;  // between sessions: nothing to break
    fake::Fault armed;
    armed.op = fake::Op::create;
    armed.path_prefix = std::string(kRoot);
    armed.session = id;
    armed.rc = zk_errc::connection_loss;
    armed.drop_connection = true;
    switch (fault) {
      case OpKind::fault_lost_reply:
        armed.after_apply = true;
        server_->inject(counter_write(armed));
        server_->inject(barrier_read(armed));
        server_->inject(std::move(armed));
        break;
      case OpKind::fault_failed_create:
        server_->inject(counter_write(armed));
        server_->inject(std::move(armed));
        break;
      case OpKind::fault_drop:
        server_->drop_connection(id);
        break;
      case OpKind::fault_expire:
        server_->expire_session(id, true);
        break;
      case OpKind::fault_partition:
        server_->drop_connection(id);
        server_->expire_session(id, false);
        break;
      case OpKind::fault_pause:
        server_->pause(id);
        break;
      default:
        return;
    }
    // A lost reply ends on a slow server: the window between a reconnection and the answers to
    // what the client sends on it, where a leave, a release or a close must still clean up after
    // the lost reply. The client hears 1-3 rounds of answers first (the reconnection; the retried
    // create's; its owner check's), so each stage of the recovery meets the next step.
    const int slow_rounds = fault == OpKind::fault_lost_reply ? 1 + steps % 3 : 0;
    active_.push_back({id, steps, slot, slow_rounds});
  }

  void heal(bool all) override {
    if (!all) pass_time(kStepTime);  // the step's time, passed while its faults still held
    bool any_left = false;
    for (auto& fault : active_) {
      if (all || --fault.steps_left <= 0) {
        if (!all && fault.slow_rounds > 0) {
          // Back, but slow for one step: the client hears of the reconnection and the replies
          // queued with it, then the replies to what it sent on hearing them, slow_rounds rounds
          // in all; the rest waits until the next heal.
          fault.steps_left = 1;
          server_->pause(fault.session);
          server_->reconnect(fault.session);
          for (; fault.slow_rounds > 0; --fault.slow_rounds) server_->step(fault.session, server_->queued(fault.session));
          slow_reconnects_.push_back(fault.slot);
          any_left = true;
          continue;
        }
        server_->resume(fault.session);
        fault.steps_left = 0;
      } else {
        any_left = true;
      }
    }
    std::erase_if(active_, [](const ActiveFault& fault) { return fault.steps_left <= 0; });
    if (!any_left) server_->clear_faults();  // armed ones that never met their request
    // Every other connection down comes back, as a client reconnects by itself (one the server
    // dropped for an oversized request, one dropped by a fault that has ended).
    for (auto session : server_->disconnected_sessions())
      if (std::none_of(active_.begin(), active_.end(), [&](const ActiveFault& f) { return f.session == session; }))
        server_->reconnect(session);
    // Healing everything lets a whole timeout pass after the faults ended: what is left unheard
    // then is a session whose client closed its handle while cut off.
    if (all) pass_time(kSessionTimeout);
  }

  std::vector<std::int64_t> take_expired_by_time() override { return std::exchange(expired_by_time_, {}); }
  std::vector<int> take_slow_reconnects() override { return std::exchange(slow_reconnects_, {}); }

  bool faults_active() override { return !active_.empty() || server_->pending_faults() != 0; }

  bool connection_healthy(const Session& session) override {
    const auto id = session.id();
    return id != 0 && server_->connected(id) && !server_->paused(id) && server_->pending_faults() == 0;
  }

  // Quiet: nothing queued to a client (but on a held connection) and no change for a while. A
  // finished operation's quiet point is short; one still running is declared waiting after a
  // longer quiet spell.
  void settle(const std::function<bool()>& done, std::chrono::milliseconds bound) override {
    const auto scale = testenv::timeout_scale();
    const auto short_quiet = std::chrono::duration_cast<Clock::duration>(3ms * scale);
    const auto long_quiet = std::chrono::duration_cast<Clock::duration>(15ms * scale);
    const auto start = Clock::now();
    auto seen = server_->changes();
    auto since = start;
    for (;;) {
      std::this_thread::sleep_for(500us);
      const auto now = Clock::now();
      if (now - start >= bound) return;
      const auto changes = server_->changes();
      if (changes != seen) {
        seen = changes;
        since = now;
        continue;
      }
      if (!drained()) continue;
      if (now - since >= (done() ? short_quiet : long_quiet)) return;
    }
  }

  std::vector<std::string> take_oversized_requests() override {
    const auto records = server_->requests();
    std::vector<std::string> out;
    for (std::size_t i = records_seen_; i < records.size(); ++i)
      if (records[i].oversized)
        out.push_back(fmt::format("{} {} ({} bytes, over the server's {})", fake::to_string(records[i].op),
                                  records[i].path, records[i].bytes, fake::kServerRequestLimit));
    records_seen_ = records.size();
    return out;
  }

  std::chrono::milliseconds slack() const override { return testenv::scaled(1500ms); }

  void tune(SessionOptions& options) const override {
    options.session_timeout = kSessionTimeout;
    options.connect_timeout = testenv::scaled(10s);
    options.ensemble_tick_time = 2s;  // a heartbeat every 10 s (see zkr/session.hpp): rare beside the steps
  }

 private:
  static constexpr std::chrono::milliseconds kSessionTimeout = 120s;
  static constexpr std::chrono::milliseconds kStepTime = kSessionTimeout / 4;

  void pass_time(std::chrono::milliseconds elapsed) {
    for (auto session : server_->pass_time(elapsed)) expired_by_time_.push_back(session);
  }

  bool drained() const {
    for (auto session : server_->live_sessions())
      if (server_->queued(session) != 0 && !server_->paused(session)) return false;
    return true;
  }

  struct ActiveFault {
    std::int64_t session;
    int steps_left;
    int slot;
    int slow_rounds;  // > 0: once its steps are over, the connection comes back slow for a step
  };
  std::vector<int> slow_reconnects_;
  std::shared_ptr<fake::FakeServer> server_ = std::make_shared<fake::FakeServer>();
  std::vector<ActiveFault> active_;
  std::size_t records_seen_ = 0;
  std::vector<std::int64_t> expired_by_time_;
};

}  // namespace

std::unique_ptr<World> make_fake_world() { return std::make_unique<FakeWorld>(); }

}  // namespace zkr::swarm
