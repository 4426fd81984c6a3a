// SPDX-License-Identifier: Apache-2.0
// Barriers: hold processes until a node is removed, or until N of them have arrived.
//
// Barrier: the barrier is up while its node exists (Curator's DistributedBarrier and kazoo's
// Barrier, on the same path). set() creates the node, remove() deletes it, wait() returns once it
// is gone. The node is persistent: it stays up when its creator dies (remove it by hand then).
//
// DoubleBarrier: N participants enter, and none proceeds until all N have; they leave, and none
// proceeds until all have (Curator's DistributedDoubleBarrier and kazoo's DoubleBarrier, on the
// same path: an ephemeral node per participant named by a UUID, and a node "ready" that the
// participant which counts N children creates). A participant's node is ephemeral: when its
// session ends (the process killed or frozen), its node goes and it no longer counts, so the
// others are held at most until the server expires that session, never for ever. Waits are
// re-armed across connection drops and session losses (a participant in enter() whose session was
// lost enters again on the new one).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <system_error>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

namespace zkr {

// What an asynchronous wait ends with: no error (removed, entered, left), errc::timed_out,
// errc::cancelled (stop requested), errc::session_closed, or a ZooKeeper error (zk_errc::no_auth).
// Runs once on the session's callback thread; must not block for long.
using BarrierHandler = std::function<void(std::error_code)>;

// A barrier: a node whose existence holds everyone back; wait() returns once it is removed.
class Barrier {
 public:
  // Throws Error(errc::invalid_path) naming the path.
  Barrier(Session& session, std::string path, NodeAcl acl = NodeAcl::open);
  static std::optional<Barrier> make(Session& session, std::string path, NodeAcl acl, std::error_code& ec) noexcept;

  const std::string& path() const { return path_; }

  // Puts the barrier up (creates its node and missing parents, as containers). Idempotent.
  // Throws Error as Session::create.
  void set();
  // Takes it down: true if it was up. Throws Error as Session::remove (zk_errc::not_empty if
  // something was created under it).
  bool remove();
  bool is_set() const;

  // Waits until the barrier is down: true; false when `timeout` (negative: none; zero: look once)
  // ran out or stop was requested. Throws Error: errc::session_closed, zk_errc::no_auth.
  bool wait(std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1), std::stop_token stop = {});
  void async_wait(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop = {});

  void set(std::error_code& ec) noexcept;
  bool remove(std::error_code& ec) noexcept;
  bool wait(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept;

 private:
  Session* session_;
  std::string path_;
  NodeAcl acl_;
};

// A double barrier: enter() waits until `size` participants have entered, leave() until all left.
class DoubleBarrier {
 public:
  // `data` is stored in the participant's node (empty: default_owner_data(), "host:pid").
  // Throws Error: errc::invalid_path naming the path, errc::invalid_argument if participants < 1
  // or if the path and data together exceed the server's request limit (docs/recipes.md).
  DoubleBarrier(Session& session, std::string path, int participants, std::string data = {});
  static std::optional<DoubleBarrier> make(Session& session, std::string path, int participants, std::string data,
                                           std::error_code& ec) noexcept;
  ~DoubleBarrier();  // a participant that has not left deletes its node (in the background)
  DoubleBarrier(DoubleBarrier&&) noexcept = default;
  DoubleBarrier& operator=(DoubleBarrier&&) = delete;

  const std::string& path() const;
  int participants() const;
  std::string node() const;  // this participant's node path

  // Enters: creates this participant's node and waits until N participants have (true). False
  // when `timeout` (negative: none; zero: the shortest) ran out or stop was requested: its node is
  // deleted then.
  // Throws Error: errc::session_closed, zk_errc::no_auth.
  bool enter(std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1), std::stop_token stop = {});
  // Leaves, as Curator's and kazoo's participants do: the participant whose node sorts lowest by
  // name deletes it last, once it is alone; every other one deletes its node at once. Waits until
  // every participant's node is gone (true), then removes "ready". False when `timeout` ran out or
  // stop was requested: its node is deleted then, so that it holds no one.
  bool leave(std::chrono::nanoseconds timeout = std::chrono::nanoseconds(-1), std::stop_token stop = {});
  void async_enter(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop = {});
  void async_leave(std::chrono::nanoseconds timeout, BarrierHandler handler, std::stop_token stop = {});

  bool enter(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept;
  bool leave(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept;

 private:
  struct State;  // recipes/barrier.cpp
  std::shared_ptr<State> state_;
};

}  // namespace zkr
