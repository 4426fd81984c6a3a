// SPDX-License-Identifier: Apache-2.0
// Where a swarm run happens: the fake ZooKeeper (fast, exact faults, a quiet point after every
// step) or real servers (slower; faults through a proxy per session and server restarts). The
// runner sees only this interface.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <zkr/session.hpp>

#include "config.hpp"
#include "ops.hpp"

namespace zkr::swarm {

// A node as the server has it.
struct ServerNode {
  std::string name;  // child name
  std::int64_t czxid = 0;
  std::int64_t ephemeral_owner = 0;
  std::int64_t mzxid = 0;  // its data's last change
};

// A client of another library (Curator, kazoo) inside its section of a swarm path: it believes
// it holds, by its own log.
struct PeerHolder {
  std::string path;
  std::string who;
  std::int64_t token = 0;  // its node's czxid where the peer logs it, else 0
  std::uint64_t entered = 0;  // which of its log's lines the ENTER was
  bool operator==(const PeerHolder&) const = default;
};

// A call a peer made on the swarm's counter (a Curator DistributedAtomicLong increment of 1), from
// its log.
struct PeerCounterCall {
  std::string who;
  std::chrono::steady_clock::time_point called, returned;  // returned: when it logged the outcome
  std::optional<std::int64_t> written;  // the value it wrote; nullopt: it failed, written or not
  bool unsure = false;  // its connection changed meanwhile: a retry may have added once more, unseen
};

class World {
 public:
  virtual ~World() = default;

  // A connected session for `slot`, with the config's options, through the slot's fault point.
  virtual std::unique_ptr<Session> open_session(int slot, SessionOptions options) = 0;

  // ---- the server's view (a read that bypasses the library's sessions) ----
  // Children of `path`, sorted by name; empty if it does not exist.
  virtual std::vector<ServerNode> children(const std::string& path) = 0;
  virtual bool exists(const std::string& path) = 0;
  // Creates `path` and its ancestors as persistent nodes if missing.
  virtual void ensure_persistent(const std::string& path) = 0;
  // True if the server still has the session (its ephemeral nodes stand).
  virtual bool session_alive(std::int64_t session_id) = 0;
  // The watches the session's client keeps on `path` (data and children), where the world can
  // count them (the fake); nullopt otherwise.
  virtual std::optional<std::size_t> watches(const std::string& path, std::int64_t session_id) = 0;
  // How many creates of children of `parents` the session sent that its client has not heard
  // answered yet (they wait on a paused connection), where the world can tell (the fake); nullopt
  // otherwise.
  virtual std::optional<std::size_t> unanswered_creates(std::int64_t /*session_id*/,
                                                        const std::vector<std::string>& /*parents*/) {
    return std::nullopt;
  }

  // ---- faults ----
  virtual bool supports(OpKind fault) const = 0;
  // Injects `fault` on the connection of `session` (in `slot`); it lasts `steps` steps.
  virtual void inject(OpKind fault, int slot, Session& session, int steps) = 0;
  // One step passed: ends the faults whose time is up. `all` ends every fault.
  virtual void heal(bool all) = 0;
  // Sessions the server expired since the last call because it heard nothing of them for their
  // timeout (the fake's clock, see fake_world.cpp), not by an injected fault.
  virtual std::vector<std::int64_t> take_expired_by_time() = 0;
  // The slots whose connection the last heal brought back to a server slow to answer: what the
  // client sent on the reconnection has run, the replies wait for the next heal. The generator's
  // next step acts on such a session (Swarm::follow_up_for_step).
  virtual std::vector<int> take_slow_reconnects() { return {}; }
  // True while a fault is injected and not yet healed, or armed and not yet triggered.
  virtual bool faults_active() = 0;
  // True if the connection of `session` is up, not held, and no fault is armed on it.
  virtual bool connection_healthy(const Session& session) = 0;

  // Waits until the world is quiet (nothing on the wire, nothing changing) or `done` holds and the
  // world is quiet, at most `bound`.
  virtual void settle(const std::function<bool()>& done, std::chrono::milliseconds bound) = 0;
  // Requests the server refused for their size since the last call ("create /a (1200000 bytes)").
  virtual std::vector<std::string> take_oversized_requests() = 0;

  // ---- peers: other libraries' clients on the shared paths (the real world, on request) ----
  virtual std::vector<PeerHolder> peer_holders() { return {}; }
  virtual bool peers_on(const std::string& /*path*/) const { return false; }
  // Lets the peers leave and waits for them; returns what went wrong ("" if nothing).
  virtual std::string stop_peers() { return {}; }
  // The path where peers add to a counter ("" if none): the swarm's counter then lives there.
  virtual std::string peer_counter_path() const { return {}; }
  // Every call the peers made on that counter so far.
  virtual std::vector<PeerCounterCall> peer_counter_calls() { return {}; }

  // How long an operation that must not wait may take, and the grace after a bounded wait.
  virtual std::chrono::milliseconds slack() const = 0;
  // The session timeout sessions are given (the world decides: huge on the fake, short on real).
  virtual void tune(SessionOptions& options) const = 0;
};

std::unique_ptr<World> make_fake_world();
std::unique_ptr<World> make_real_world();

}  // namespace zkr::swarm
