// SPDX-License-Identifier: Apache-2.0
// Who leads an election, told as it changes, without taking part.
//
// A LeaderWatch reads the election on a path (any layout, ours or a peer's: the first contender
// leads, as election_leader() says) and calls back with the leader each time the leader changes.
// It creates nothing and keeps one children watch on the path, however often the connection drops
// (the client sends it again on reconnection): a change in the queue wakes it once, and it reads
// the leader's node only when the first node changed.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <system_error>

#include <zkr/election.hpp>
#include <zkr/session.hpp>

namespace zkr {

// Follows who leads an election without taking part in it.
class LeaderWatch {
 public:
  // The leader (its node, participant data, fencing token and session; leader = true), or nullopt
  // when nobody leads (no participant, or no path).
  using Callback = std::function<void(const std::optional<Participant>& leader)>;

  // Starts watching at once (non-blocking). The first call tells the leader as first read, even
  // if nobody leads; then one call per change: another node leads, or nobody does, or somebody
  // does again. Changes faster than a listing may be merged into one call, but the last call
  // always tells the leader as of the latest listing: the final state is never missed.
  //
  // Calls run on the session's callback thread, one at a time and in order, and must not block
  // for long. Across a connection loss the watch reads again on reconnect; across a lost session,
  // on the replacement session: a change that happened meanwhile is told then. While the path
  // does not exist the watch looks again every half second (an absent node takes no children
  // watch).
  //
  // Throws Error: errc::invalid_path naming the path, errc::invalid_argument if the callback is
  // empty.
  LeaderWatch(Session& session, std::string path, Callback callback);
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<LeaderWatch> make(Session& session, std::string path, Callback callback,
                                         std::error_code& ec) noexcept;
  ~LeaderWatch();  // stop()
  LeaderWatch(const LeaderWatch&) = delete;
  LeaderWatch& operator=(const LeaderWatch&) = delete;

  const std::string& path() const;

  // The leader as last told to the callback (nullopt before the first call).
  std::optional<Participant> leader() const;
  // Why the watch stopped by itself (zk_errc::no_auth on the path, errc::session_closed), or no
  // error. A stopped watch calls back no more.
  std::error_code error() const;

  // Stops: no call starts after it returns, and a call running on another thread has returned.
  // From the callback itself it returns at once (that call finishes normally). Idempotent.
  void stop();

 private:
  struct State;  // recipes/leader_watch.cpp
  std::shared_ptr<State> state_;
};

}  // namespace zkr
