// SPDX-License-Identifier: Apache-2.0
// Group membership: who is in a group, as ephemeral nodes under its path.
//
// A GroupMember is one process's membership: an ephemeral node under the group's path carrying
// the member's id and data. The node lives as long as the session: when the session monitor
// declares the session lost (or the node is deleted by someone else), the member is told at once
// - before the server can have removed the node, as a lock holder is told - and, unless
// GroupMemberOptions::rejoin is off, joins again on the replacement session and is told that too.
//
// A GroupView lists the group's members and calls back on each change. It keeps one children
// watch on the path (every view wakes on every change of the group: fine for groups of tens to
// hundreds of members) and reads each new member's node once, with a data watch that follows its
// data and reads it again when it is deleted (a node replaced under the same name shows in no
// listing). A view that cannot know the group now says so: `stale` is set from the moment the
// connection drops or the session is lost until a listing on a live connection has come back; a
// member it may not read (no_auth) stops it (error()).
//
// Layouts shared with Curator and kazoo (GroupLayout; docs/recipes.md, "Group membership"):
// members and views on one path must use the same layout to see each other.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

namespace zkr {

// The node layout of a group, after the peer it shares the path with.
enum class GroupLayout {
  // Curator's GroupMember, and this library's own: "<path>/<member id>", the data the member's.
  // Ids are unique in the group: a second member with a live node of the same id cannot join.
  curator,
  // kazoo's Party: "<path>/<32 hex>__party__", the node's data the member id (kazoo's identifier).
  // A member has no data of its own (GroupMember refuses any).
  kazoo_party,
  // kazoo's ShallowParty: "<path>/<32 hex>-<member id>", the data the member id again.
  kazoo_shallow_party,
};
// The layout's name.
std::string_view to_string(GroupLayout layout) noexcept;

// How a GroupMember joins.
struct GroupMemberOptions {
  GroupLayout layout = GroupLayout::curator;  // the peer's layout
  NodeAcl acl = NodeAcl::open;  // the ACL of the member's node
  // After a loss (session lost, node deleted), join again on the session's next connection.
  bool rejoin = true;
};

// Where a GroupMember stands.
enum class MembershipState {
  left,     // not a member: before join(), after leave(), or once the Session was closed
  joining,  // asked to join; no node yet
  joined,   // the node exists on the current session
  lost,     // the node is lost (see MembershipEvent::reason); joining again if rejoin is set
};
// The state's name.
std::string_view to_string(MembershipState state) noexcept;

// A change of a GroupMember's state, told to its callback.
struct MembershipEvent {
  MembershipState state = MembershipState::left;  // the new state
  LossReason reason = LossReason::session_lost;  // for lost (and left through a closed session)
  std::string node;                              // the member's node (joined), or the lost one
  std::error_code error;                         // a rejoin that failed for good (no_auth, ...)
};
// Runs on the session's callback thread, in order; must not block for long.
using MembershipListener = std::function<void(const MembershipEvent&)>;

// A member of a group: an ephemeral node under the group's path while it is joined.
class GroupMember {
 public:
  // Does not join yet (join() does). Throws Error: errc::invalid_path naming the path,
  // errc::invalid_argument if the id cannot be part of a node name in this layout (empty,
  // contains '/', "." or ".."), data is given in a kazoo layout, or the node's path and data (the
  // id, in kazoo's layouts) together exceed the server's request limit (docs/recipes.md).
  GroupMember(Session& session, std::string path, std::string member_id, std::string data = {},
              GroupMemberOptions options = {}, MembershipListener listener = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<GroupMember> make(Session& session, std::string path, std::string member_id,
                                         std::string data, GroupMemberOptions options, MembershipListener listener,
                                         std::error_code& ec) noexcept;
  ~GroupMember();  // leave()
  GroupMember(GroupMember&&) noexcept = default;
  GroupMember& operator=(GroupMember&&) = delete;

  const std::string& path() const;
  const std::string& id() const;

  // Creates the member's node (and the group's path, as a container) and waits until it exists.
  // A node of the same id left by a session this member lost is deleted first; one of another,
  // still live session (a restarted process's former session, curator layout) is waited out for
  // one session timeout, then refused. Throws Error:
  // zk_errc::node_exists (the id is taken), errc::cancelled (stop requested: the join goes on in
  // the background), errc::session_closed, zk_errc::no_auth. Calling it while joined returns at once.
  void join(std::stop_token stop = {});
  // Waits at most `timeout`: false if it ran out or stop was requested (the join then goes on in
  // the background, as if join() had been called without waiting).
  bool try_join_for(std::chrono::nanoseconds timeout, std::stop_token stop = {});
  // Callback form: the handler runs once on the session's callback thread with no error once
  // joined, errc::timed_out (a negative timeout waits forever), errc::cancelled (stop requested,
  // or leave()), or the error join() throws. A timeout or stop leaves the join going on.
  using JoinHandler = std::function<void(std::error_code)>;
  void async_join(std::chrono::nanoseconds timeout, JoinHandler handler, std::stop_token stop = {});
  void join(std::stop_token stop, std::error_code& ec) noexcept;
  bool try_join_for(std::chrono::nanoseconds timeout, std::stop_token stop, std::error_code& ec) noexcept;

  // Deletes the node (retried across connection drops until done or the session ends) and stops
  // rejoining. Non-blocking; idempotent. A left member can join() again.
  void leave();

  // curator layout: replaces the member's data, on its node if joined (waiting for the reply) and
  // for later joins. Throws Error: errc::invalid_argument in a kazoo layout or over the request
  // limit as the constructor (nothing sent, the data unchanged), else as Session::set.
  void set_data(std::string data);

  MembershipState state() const;
  std::string node() const;  // the current node's path, empty unless joined

 private:
  struct State;  // recipes/group.cpp
  std::shared_ptr<State> state_;
};

// One member of a group, as a GroupView sees it.
struct GroupMemberInfo {
  std::string id;    // the member id (curator: the node name; kazoo: its identifier)
  std::string data;  // the node's data
  std::string node;  // the node's name under the group's path
  std::int64_t session_id = 0;  // the owner session (the node's ephemeral owner)
};

// A GroupView's view of the group.
struct GroupSnapshot {
  std::vector<GroupMemberInfo> members;  // sorted by id, then node
  // Set while the view may be out of date: before its first listing, while disconnected, after a
  // session loss, until a listing on a live connection came back.
  bool stale = true;
};

// The members of a group, kept up to date by one watch on the group's path.
class GroupView {
 public:
  // Called with each new snapshot, on the session's callback thread.
  using Callback = std::function<void(const GroupSnapshot&)>;

  // Starts watching at once (non-blocking). The callback (optional) runs on the session's
  // callback thread, in order: once with the first fresh listing, then on each change of the
  // members (a join, a leave, a member's new data) and each change of `stale`. Changes faster
  // than a listing may be merged into one call. While the path does not exist the view is fresh
  // and empty, and looks again every half second.
  // Throws Error: errc::invalid_path naming the path.
  GroupView(Session& session, std::string path, GroupLayout layout = GroupLayout::curator, Callback callback = {});
  static std::optional<GroupView> make(Session& session, std::string path, GroupLayout layout, Callback callback,
                                       std::error_code& ec) noexcept;
  ~GroupView();  // stop()
  GroupView(GroupView&&) noexcept = default;
  GroupView& operator=(GroupView&&) = delete;

  const std::string& path() const;
  // The members as last read, and whether that may be out of date.
  GroupSnapshot snapshot() const;
  // Waits until the view is fresh (true), or the timeout passes (false).
  bool wait_fresh(std::chrono::milliseconds timeout) const;
  // Why the view stopped by itself (zk_errc::no_auth: the path or a member's node may not be
  // read; errc::session_closed), or no error. A view that stopped by itself stays stale.
  std::error_code error() const;
  // No callback starts after it returns, and one running on another thread has returned.
  void stop();

 private:
  struct State;  // recipes/group.cpp
  std::shared_ptr<State> state_;
};

}  // namespace zkr
