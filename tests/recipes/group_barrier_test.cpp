// SPDX-License-Identifier: Apache-2.0
// Group membership and barriers on real servers: members and the views of them (layouts, data,
// leaving, a deleted node, an id taken), a member's session expired under it (told, rejoined, the
// view stale then fresh), a server restart, barriers set/waited/removed, a double barrier's N
// participants, one of them expired, one killed (a child process).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/use_future.hpp>

#include <zkr/asio.hpp>
#include <zkr/barrier.hpp>
#include <zkr/error.hpp>
#include <zkr/group.hpp>
#include <zkr/lock.hpp>
#include <zkr/prometheus.hpp>

#include "internals.hpp"
#include "request_limits.hpp"
#include "session_core.hpp"

#include "recipe_test_support.hpp"
#include "../unit/python_readers.hpp"

namespace zkr::test {
namespace {

class GroupTest : public ServerTest {
 protected:
  Sessions sessions;
  void TearDown() override { sessions.close_all(); }
};
using BarrierTest = GroupTest;

// What a callback was told, in order.
template <typename Told>
class Recorder {
 public:
  std::function<void(const Told&)> callback() {
    return [this](const Told& told) {
      std::lock_guard guard(mutex_);
      told_.push_back(told);
    };
  }
  std::vector<Told> all() const {
    std::lock_guard guard(mutex_);
    return told_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Told> told_;
};

// What a member's listener was told.
class Events : public Recorder<MembershipEvent> {
 public:
  std::vector<MembershipState> states() const {
    std::vector<MembershipState> out;
    for (const auto& event : all()) out.push_back(event.state);
    return out;
  }
};

using Snapshots = Recorder<GroupSnapshot>;  // what a view's callback was told

std::vector<std::string> ids(const GroupSnapshot& snapshot) {
  std::vector<std::string> out;
  for (const auto& member : snapshot.members) out.push_back(member.id);
  return out;
}

// The view's members once fresh, as "id=data" strings.
std::vector<std::string> fresh_members(const GroupView& view) {
  auto snapshot = view.snapshot();
  std::vector<std::string> out;
  if (snapshot.stale) return {"(stale)"};
  for (const auto& member : snapshot.members) out.push_back(member.id + "=" + member.data);
  return out;
}

using Strings = std::vector<std::string>;

// The members as the server holds them (curator layout): "name=data@owner session", by name.
Strings server_members(RawClient& raw, const std::string& path) {
  Strings out;
  auto children = raw.children(path);
  std::sort(children.begin(), children.end());
  for (const auto& name : children) {
    std::string data(256, '\0');
    int length = static_cast<int>(data.size());
    Stat stat{};
    if (zoo_get(raw.handle(), (path + "/" + name).c_str(), 0, data.data(), &length, &stat) != ZOK) continue;
    data.resize(length < 0 ? 0 : static_cast<std::size_t>(length));
    out.push_back(name + "=" + data + "@" + std::to_string(stat.ephemeralOwner));
  }
  return out;
}

// The view's members once fresh, written as server_members writes them.
Strings view_members(const GroupView& view) {
  auto snapshot = view.snapshot();
  if (snapshot.stale) return {"(stale)"};
  Strings out;
  for (const auto& member : snapshot.members)
    out.push_back(member.node + "=" + member.data + "@" + std::to_string(member.session_id));
  return out;
}

std::string joined(const Strings& strings) {
  std::string out;
  for (const auto& s : strings) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// The view equals the server's truth, eventually, and follows the (new) node's next change.
void expect_view_follows_server(GroupView& view, RawClient& raw, const std::string& path, const std::string& node,
                                const std::function<void()>& change) {
  ASSERT_TRUE(eventually([&] { return view_members(view) == server_members(raw, path); }))
      << "view: " << joined(view_members(view)) << "\nserver: " << joined(server_members(raw, path));
  change();
  ASSERT_TRUE(eventually([&] {
    auto truth = server_members(raw, path);
    return view_members(view) == truth &&
           std::any_of(truth.begin(), truth.end(), [&](const auto& m) { return m.starts_with(node + "=changed@"); });
  })) << "view: " << joined(view_members(view)) << "\nserver: " << joined(server_members(raw, path));
}


TEST_F(GroupTest, MembersJoinChangeDataAndLeaveAndTheViewFollows) {
  Session& watcher = sessions.add(servers);
  Snapshots told;
  GroupView view(watcher, path, GroupLayout::curator, told.callback());
  ASSERT_TRUE(view.wait_fresh(testenv::scaled(10s)));  // no path yet: fresh and empty
  EXPECT_TRUE(view.snapshot().members.empty());

  Session& first_session = sessions.add(servers);
  Session& second_session = sessions.add(servers);
  GroupMember first(first_session, path, "first", "10.0.0.1:80");
  GroupMember second(second_session, path, "second", "10.0.0.2:80");
  first.join();
  second.join();
  EXPECT_EQ(first.state(), MembershipState::joined);
  EXPECT_EQ(first.node(), path + "/first");  // Curator's GroupMember layout: the id is the node
  EXPECT_EQ(raw.stat(path + "/first").ephemeralOwner, first_session.id());
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"first=10.0.0.1:80", "second=10.0.0.2:80"}; }));
  EXPECT_EQ(view.snapshot().members[0].session_id, first_session.id());

  second.set_data("10.0.0.2:81");
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"first=10.0.0.1:80", "second=10.0.0.2:81"}; }));

  first.leave();
  EXPECT_EQ(first.state(), MembershipState::left);
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"second=10.0.0.2:81"}; }));
  EXPECT_EQ(nodes(), Strings{"second"});

  // Every call told a fresh view; the last tells the one member left (the callback runs after
  // the snapshot changed, on the callback thread).
  ASSERT_TRUE(eventually([&] {
    const auto calls = told.all();
    return !calls.empty() && ids(calls.back()) == Strings{"second"};
  }));
  for (const auto& call : told.all()) EXPECT_FALSE(call.stale);
}

// A member's node deleted and created again under the same name between two listings of a view
// (the view's connection is slow: its listing after the deletion finds the new node): the view
// reads the new node (its data and owner) and follows its changes.
TEST_F(GroupTest, ViewReadsANodeDeletedAndCreatedAgainBetweenListings) {
  testenv::Proxy proxy(servers);
  Session& viewer = sessions.add(proxy.address());
  GroupMember member(sessions.add(servers), path, "m", "old", {.rejoin = false});
  member.join();
  GroupView view(viewer, path);
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"m=old"}; }));
  proxy.set_latency(150ms);
  ASSERT_EQ(raw.remove(path + "/m"), ZOK);
  ASSERT_EQ(raw.create(path + "/m", "new", ZOO_EPHEMERAL), ZOK);  // another session's node now
  expect_view_follows_server(view, raw, path, "m", [&] {
    ASSERT_EQ(zoo_set(raw.handle(), (path + "/m").c_str(), "changed", 7, -1), ZOK);
  });
}

// The same replacement in one multi-op of another session: no listing can fall between.
TEST_F(GroupTest, ViewReadsANodeReplacedInOneMultiByAnotherSession) {
  GroupMember member(sessions.add(servers), path, "m", "old", {.rejoin = false});
  member.join();
  GroupView view(sessions.add(servers), path);
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"m=old"}; }));
  const std::string node = path + "/m", data = "new";
  zoo_op_t ops[2];
  zoo_op_result_t results[2];
  zoo_delete_op_init(&ops[0], node.c_str(), -1);
  zoo_create_op_init(&ops[1], node.c_str(), data.data(), static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                     ZOO_EPHEMERAL, nullptr, 0);
  ASSERT_EQ(zoo_multi(raw.handle(), 2, ops, results), ZOK);
  expect_view_follows_server(view, raw, path, "m", [&] {
    ASSERT_EQ(zoo_set(raw.handle(), node.c_str(), "changed", 7, -1), ZOK);
  });
}

// A member whose node was deleted joins again under its id (same session, same data): the view
// follows the rejoined node's changes, not only the first node's.
TEST_F(GroupTest, ViewFollowsAMemberThatRejoinedUnderItsId) {
  testenv::Proxy proxy(servers);
  Session& viewer = sessions.add(proxy.address());
  GroupMember member(sessions.add(servers), path, "m", "old");
  member.join();
  GroupView view(viewer, path);
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"m=old"}; }));
  const auto before = raw.stat(path + "/m").czxid;
  proxy.set_latency(150ms);
  ASSERT_EQ(raw.remove(path + "/m"), ZOK);
  ASSERT_TRUE(eventually([&] { return raw.stat(path + "/m").czxid > before; }));  // rejoined
  ASSERT_TRUE(eventually([&] { return member.state() == MembershipState::joined; }));
  expect_view_follows_server(view, raw, path, "m", [&] { member.set_data("changed"); });
}

// A member node the view may not read (an ACL of its creator only): the view cannot know the
// group, so it says so for good (stale, error no_auth) instead of leaving that member out.
TEST_F(GroupTest, AMemberTheViewCannotReadStopsTheViewWithNoAuth) {
  GroupMember member(sessions.add(servers), path, "readable", "r");
  member.join();
  Snapshots told;
  GroupView view(sessions.add(servers), path, GroupLayout::curator, told.callback());
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"readable=r"}; }));

  RawClient creator(servers);
  ASSERT_EQ(creator.add_auth("creator:secret"), ZOK);
  ASSERT_EQ(creator.create(path + "/secret", "s", ZOO_EPHEMERAL, &ZOO_CREATOR_ALL_ACL), ZOK);
  ASSERT_TRUE(eventually([&] { return view.error() == make_error_code(zk_errc::no_auth); })) << view.error().message();
  EXPECT_TRUE(view.snapshot().stale);
  EXPECT_TRUE(eventually([&] {  // told on the callback thread, after the error is set
    const auto calls = told.all();
    return !calls.empty() && calls.back().stale;
  }));

  // A view that starts with the unreadable member there is never fresh.
  GroupView late(sessions.add(servers), path);
  EXPECT_FALSE(late.wait_fresh(testenv::scaled(3s))) << joined(view_members(late));
  EXPECT_EQ(late.error(), make_error_code(zk_errc::no_auth));
}

// Member data, a member id that is its node's data, and participant data over the server's
// request limit are refused at the call, before anything is sent (the server would drop the
// connection, and the client would resend it after every reconnect); at the limit they are taken.
// An unrelated lock held on the same session is not lost.
TEST_F(GroupTest, DataOverTheRequestLimitIsRefusedAtTheCall) {
  Session& session = sessions.add(servers);
  Lock lock(session, path + "/lock");
  HeldLock held = lock.acquire();
  const std::string group = path + "/g", shallow = path + "/s", barrier = path + "/d";
  // The most a create of "<group>/m" and of a participant (a UUID's name, within the allowance) may carry.
  const std::size_t member_limit = detail::kServerRequestLimit - detail::request_bytes(group.size() + 2, 0);
  const std::size_t participant_limit = detail::kServerRequestLimit - detail::request_bytes(barrier.size(), 0);
  // The requests the session sent but its heartbeats, once the lock's own (after its grant) are done.
  const auto sent = [&] {
    const auto metrics = session.metrics();
    return metrics.requests_sent - metrics.heartbeats_sent;
  };
  auto sent_before = sent();
  for (int i = 0; i < 50; ++i) {
    std::this_thread::sleep_for(100ms);
    const auto now = sent();
    if (now == sent_before) break;
    sent_before = now;
  }
  const auto refused = [](const std::error_code& ec) { return ec == make_error_code(errc::invalid_argument); };

  std::error_code ec;
  for (const std::size_t bytes : {member_limit + 1, std::size_t{1} << 20}) {
    auto over_member = GroupMember::make(session, group, "m", std::string(bytes, 'd'), {}, {}, ec);
    EXPECT_TRUE(refused(ec)) << bytes << " bytes: " << ec.message();
    if (over_member) over_member->try_join_for(testenv::scaled(3s));  // (what the refusal prevents)
    ec.clear();
  }
  // kazoo's ShallowParty: the id is in the node's name and its data.
  auto over_id = GroupMember::make(session, shallow, std::string(member_limit / 2, 'i'), {},
                                   {.layout = GroupLayout::kazoo_shallow_party}, {}, ec);
  EXPECT_TRUE(refused(ec)) << ec.message();
  if (over_id) over_id->try_join_for(testenv::scaled(3s));
  ec.clear();
  for (const std::size_t bytes : {participant_limit + 1, std::size_t{1} << 20}) {
    auto over_participant = DoubleBarrier::make(session, barrier, 1, std::string(bytes, 'p'), ec);
    EXPECT_TRUE(refused(ec)) << bytes << " bytes: " << ec.message();
    if (over_participant) over_participant->enter(testenv::scaled(3s));
    ec.clear();
  }
  EXPECT_EQ(sent(), sent_before) << "a refused call sent something";
  EXPECT_EQ(raw.children(path), Strings{"lock"});  // no group, no barrier

  // At the limit: taken by the server.
  GroupMember member(session, group, "m", std::string(member_limit, 'd'));
  ASSERT_TRUE(member.try_join_for(testenv::scaled(10s)));
  EXPECT_EQ(raw.stat(group + "/m").dataLength, static_cast<int>(member_limit));
  // set_data (kept for rejoins): over the limit refused, nothing changed; at it, written.
  for (const std::size_t bytes : {member_limit + 1, std::size_t{1} << 20}) {
    try {
      member.set_data(std::string(bytes, 'e'));
      ADD_FAILURE() << "set_data of " << bytes << " bytes was accepted";
    } catch (const Error& error) {
      EXPECT_TRUE(refused(error.code())) << bytes << " bytes: " << error.what();
    }
  }
  EXPECT_EQ(raw.stat(group + "/m").version, 0);
  member.set_data(std::string(member_limit, 'e'));
  EXPECT_EQ(raw.stat(group + "/m").version, 1);
  DoubleBarrier participant(session, barrier, 1, std::string(participant_limit, 'p'));
  EXPECT_TRUE(participant.enter(testenv::scaled(10s)));
  EXPECT_TRUE(participant.leave(testenv::scaled(10s)));

  EXPECT_EQ(session.metrics().suspensions, 0u) << "the server dropped the connection";
  EXPECT_FALSE(held.lost());
  EXPECT_EQ(raw.stat(held.node_path()).ephemeralOwner, session.id());
}

TEST_F(GroupTest, KazooLayoutsNameNodesAsKazooAndViewsReadTheirIds) {
  Session& session = sessions.add(servers);
  const std::string party = path + "/party", shallow = path + "/shallow";
  GroupMember a(session, party, "worker a", {}, {.layout = GroupLayout::kazoo_party});
  GroupMember b(session, shallow, "worker-b", {}, {.layout = GroupLayout::kazoo_shallow_party});
  a.join();
  b.join();
  auto party_nodes = raw.children(party), shallow_nodes = raw.children(shallow);
  ASSERT_EQ(party_nodes.size(), 1u);
  EXPECT_EQ(party_nodes[0].size(), 32u + 9u);
  EXPECT_TRUE(party_nodes[0].ends_with("__party__")) << party_nodes[0];
  ASSERT_EQ(shallow_nodes.size(), 1u);
  EXPECT_EQ(shallow_nodes[0].substr(32), "-worker-b");
  // A node kazoo's Party does not count is not a member.
  ASSERT_EQ(raw.create(party + "/not-a-member"), ZOK);

  GroupView party_view(session, party, GroupLayout::kazoo_party);
  GroupView shallow_view(session, shallow, GroupLayout::kazoo_shallow_party);
  ASSERT_TRUE(eventually([&] { return fresh_members(party_view) == Strings{"worker a=worker a"}; }));
  ASSERT_TRUE(eventually([&] { return fresh_members(shallow_view) == Strings{"worker-b=worker-b"}; }));

  // Data of its own is refused where the node carries the id.
  EXPECT_THROW(GroupMember(session, party, "x", "data", {.layout = GroupLayout::kazoo_party}), Error);
  EXPECT_THROW(GroupMember(session, path, "a/b"), Error);
  std::error_code ec;
  EXPECT_FALSE(GroupMember::make(session, "no-slash", "x", {}, {}, {}, ec));
  EXPECT_EQ(ec, errc::invalid_path);
}

TEST_F(GroupTest, DeletedNodeIsToldAndMadeAgain) {
  Session& session = sessions.add(servers);
  Events events;
  GroupMember member(session, path, "m", "data", {}, events.callback());
  member.join();
  const auto before = raw.stat(path + "/m").czxid;
  ASSERT_EQ(raw.remove(path + "/m"), ZOK);
  ASSERT_TRUE(eventually([&] { return raw.stat(path + "/m").czxid > before; }));
  ASSERT_TRUE(eventually([&] { return events.states().size() == 4; }));
  EXPECT_EQ(events.states(), (std::vector{MembershipState::joining, MembershipState::joined, MembershipState::lost,
                                           MembershipState::joined}));
  EXPECT_EQ(events.all()[2].reason, LossReason::node_deleted);
}

// The metrics an operator scrapes: a join, a loss (the node deleted by hand) and the rejoin; a
// view that went stale when the connection dropped. Read by python3-prometheus-client's parser.
TEST_F(GroupTest, MetricsCountJoinsLossesRejoinsAndStaleViews) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  Events events;
  GroupMember member(session, path, "m", "data", {}, events.callback());
  member.join();
  GroupView view(session, path);
  ASSERT_TRUE(view.wait_fresh(testenv::scaled(10s)));
  ASSERT_EQ(raw.remove(path + "/m"), ZOK);
  ASSERT_TRUE(eventually([&] { return events.states().size() == 4; }));  // joining, joined, lost, joined
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return session.metrics().group_views_stale == 1; }));
  ASSERT_TRUE(view.wait_fresh(testenv::scaled(10s)));

  const auto samples = read_exposition(prometheus_text(session));
  EXPECT_EQ(sample_value(samples, "zkr_group_membership_changes_total", {{"change", "joined"}}), 1);
  EXPECT_EQ(sample_value(samples, "zkr_group_membership_changes_total", {{"change", "lost"}}), 1);
  EXPECT_EQ(sample_value(samples, "zkr_group_membership_changes_total", {{"change", "rejoined"}}), 1);
  EXPECT_EQ(sample_value(samples, "zkr_group_views_stale_total", {}), 1);
}

TEST_F(GroupTest, AnIdHeldByAnotherLiveSessionIsRefusedAfterASessionTimeout) {
  Session& holder = sessions.add(servers);
  Session& second = sessions.add(servers, 1000ms);
  GroupMember first(holder, path, "same");
  first.join();
  GroupMember taken(second, path, "same");
  try {
    taken.join();
    FAIL() << "joined with an id another session holds";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), zk_errc::node_exists) << error.what();
  }
  EXPECT_EQ(taken.state(), MembershipState::left);
  EXPECT_EQ(raw.stat(path + "/same").ephemeralOwner, holder.id());
}

// The member's session expires on the server while it is cut off: it is told, joins again on the
// new session; a view on that same session says stale, then fresh with the new node.
TEST_F(GroupTest, ExpiredMemberIsToldAndRejoinsAndItsViewIsStaleUntilFresh) {
  testenv::Proxy proxy(servers);
  Session& expiring = sessions.add(proxy.address(), 4000ms);
  Session& other = sessions.add(servers);
  Events rejoining, staying_out;
  Snapshots told;
  GroupMember member(expiring, path, "rejoins", "r", {}, rejoining.callback());
  GroupMember once(expiring, path, "once", "o", {.rejoin = false}, staying_out.callback());
  GroupView view(expiring, path, GroupLayout::curator, told.callback());
  GroupView outside(other, path);
  member.join();
  once.join();
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"once=o", "rejoins=r"}; }));
  const auto old_session = expiring.id();

  auto id = detail::Internals::core(expiring)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return view.snapshot().stale; }, testenv::scaled(10s)));
  ASSERT_TRUE(eventually([&] { return fresh_members(outside).empty(); }));  // both nodes went with the session
  proxy.reset();
  proxy.pass();

  ASSERT_TRUE(eventually([&] { return member.state() == MembershipState::joined && expiring.id() != old_session; },
                         testenv::scaled(15s)));
  EXPECT_EQ(raw.stat(path + "/rejoins").ephemeralOwner, expiring.id());
  ASSERT_TRUE(eventually([&] { return rejoining.states().size() >= 4; }));
  auto events = rejoining.all();
  EXPECT_EQ(events[2].state, MembershipState::lost);
  EXPECT_EQ(events[2].reason, LossReason::session_lost);
  EXPECT_EQ(events[3].state, MembershipState::joined);
  // Without rejoin: told, and out for good.
  ASSERT_TRUE(eventually([&] { return once.state() == MembershipState::lost; }));
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"rejoins=r"}; }));
  ASSERT_TRUE(eventually([&] { return fresh_members(outside) == Strings{"rejoins=r"}; }));
  // The view went stale, and fresh again (told on the callback thread, after the snapshot).
  ASSERT_TRUE(eventually([&] {
    const auto calls = told.all();
    return !calls.empty() && !calls.back().stale;
  }));
  auto calls = told.all();
  auto stale = std::find_if(calls.begin(), calls.end(), [](const auto& c) { return c.stale; });
  ASSERT_NE(stale, calls.end());
  EXPECT_EQ(ids(*stale), (Strings{"once", "rejoins"}));  // the last known members, marked stale
  EXPECT_FALSE(calls.back().stale);
}

// The create took effect but its reply was lost: the node found on retry is the member's own
// (same session), so it joins with it; a double barrier's participant likewise counts once.
TEST_F(GroupTest, LostCreateRepliesAreRecognisedAsOwnNodes) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  // The parents exist: the create whose reply goes is the member's own node's.
  raw.create(path.substr(0, path.rfind('/')));  // "/zkr-test", if no test made it yet
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(path + "/g"), ZOK);
  ASSERT_EQ(raw.create(path + "/d"), ZOK);
  Events events;
  GroupMember member(session, path + "/g", "m", "d", {}, events.callback());
  proxy.drop_next_reply();
  ASSERT_TRUE(member.try_join_for(testenv::scaled(10s)));
  EXPECT_EQ(proxy.dropped_replies(), 1);
  EXPECT_EQ(raw.stat(path + "/g/m").ephemeralOwner, session.id());
  // (The listener runs on the callback thread, maybe after try_join_for returned.)
  EXPECT_TRUE(eventually([&] { return events.states().size() >= 2; }));
  EXPECT_EQ(events.states(), (std::vector{MembershipState::joining, MembershipState::joined}));

  DoubleBarrier first(session, path + "/d", 2), second(sessions.add(servers), path + "/d", 2);
  proxy.drop_next_reply();
  auto first_in = std::async(std::launch::async, [&] { return first.enter(testenv::scaled(10s)); });
  ASSERT_TRUE(eventually([&] { return proxy.dropped_replies() == 2; }));
  EXPECT_TRUE(second.enter(testenv::scaled(10s)));
  EXPECT_TRUE(first_in.get());
  EXPECT_EQ(raw.children(path + "/d").size(), 3u);  // two participants and "ready"
  auto first_out = std::async(std::launch::async, [&] { return first.leave(testenv::scaled(10s)); });
  EXPECT_TRUE(second.leave(testenv::scaled(10s)));
  EXPECT_TRUE(first_out.get());
  member.leave();
  for (const auto* node : {"/g", "/d", ""}) raw.remove(path + node);  // ours, made by hand
}

// A member that leaves while its create's outcome is unknown (the create took effect, its reply
// was lost with the connection) leaves no node behind once the connection is back: the session
// lives on, and would keep the node until it ends.
TEST_F(GroupTest, ALeaveWhileTheCreatesOutcomeIsUnknownLeavesNoNode) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  raw.create(path.substr(0, path.rfind('/')));
  ASSERT_EQ(raw.create(path), ZOK);
  ASSERT_EQ(raw.create(path + "/g"), ZOK);
  GroupMember member(session, path + "/g", "m", "d");
  // Slow enough that the reconnection (two round trips) comes well after the leave below.
  proxy.set_latency(200ms);
  proxy.drop_next_reply();
  std::promise<std::error_code> joined;
  member.async_join(-1ns, [&](std::error_code ec) { joined.set_value(ec); });
  ASSERT_TRUE(eventually([&] { return proxy.dropped_replies() == 1; }));
  member.leave();
  EXPECT_EQ(joined.get_future().get(), make_error_code(errc::cancelled));
  ASSERT_TRUE(eventually([&] { return session.state() == SessionState::connected; }));
  EXPECT_TRUE(eventually([&] { return raw.children(path + "/g").empty(); }))
      << "left behind: " << raw.children(path + "/g").size() << " node(s), owner "
      << raw.stat(path + "/g/m").ephemeralOwner << ", our session " << session.id();
  EXPECT_EQ(member.state(), MembershipState::left);
  raw.remove(path + "/g");
}

// A connection drop on a session that survives: stale, then fresh again on the same session.
TEST_F(GroupTest, DroppedConnectionMakesTheViewStaleUntilItIsBack) {
  testenv::Proxy proxy(servers);
  Session& session = sessions.add(proxy.address(), 4000ms);
  Snapshots told;
  GroupMember member(session, path, "m", "d");
  member.join();
  GroupView view(session, path, GroupLayout::curator, told.callback());
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"m=d"}; }));
  const auto id = session.id();
  proxy.reset();
  ASSERT_TRUE(eventually([&] { return told.all().size() >= 3; }));
  auto calls = told.all();
  EXPECT_FALSE(calls[0].stale);
  EXPECT_TRUE(calls[1].stale);
  EXPECT_EQ(ids(calls[1]), Strings{"m"});
  EXPECT_FALSE(calls[2].stale);
  EXPECT_EQ(ids(calls[2]), Strings{"m"});
  EXPECT_EQ(session.id(), id);
  EXPECT_EQ(member.state(), MembershipState::joined);
}

TEST_F(GroupTest, ServerRestartLeavesTheMemberInAndTheViewFreshAgain) {
  testenv::Cluster cluster;
  Session& session = sessions.add(cluster.connect_string(), 6000ms);
  GroupMember member(session, path, "m", "d");
  GroupView view(session, path);
  member.join();
  ASSERT_TRUE(eventually([&] { return fresh_members(view) == Strings{"m=d"}; }));
  cluster.kill(0);
  ASSERT_TRUE(eventually([&] { return view.snapshot().stale; }));
  cluster.start(0);
  RawClient on_cluster(cluster.connect_string());
  // Either on its session (the restart was quick) or on a new one, joined again: its node of the
  // lost session, which the restarted server keeps for a fresh timeout, is its own and goes.
  ASSERT_TRUE(eventually(
      [&] {
        return member.state() == MembershipState::joined &&
               on_cluster.stat(path + "/m").ephemeralOwner == session.id() &&
               fresh_members(view) == Strings{"m=d"};
      },
      testenv::scaled(20s)));
  sessions.close_all();  // before the cluster goes
}

TEST_F(BarrierTest, WaitReturnsOnceRemovedAndGivesUpOnTimeoutAndStop) {
  Session& session = sessions.add(servers);
  Session& waiter_session = sessions.add(servers);
  Barrier barrier(session, path + "/b");
  Barrier waiting(waiter_session, path + "/b");
  EXPECT_TRUE(waiting.wait(0ns));  // not set: nothing to wait for
  barrier.set();
  barrier.set();  // idempotent
  EXPECT_TRUE(waiting.is_set());
  EXPECT_FALSE(waiting.wait(100ms));
  std::stop_source stop;
  auto stopped = std::async(std::launch::async, [&] { return waiting.wait(-1ns, stop.get_token()); });
  std::this_thread::sleep_for(50ms);
  stop.request_stop();
  EXPECT_FALSE(stopped.get());

  auto released = std::async(std::launch::async, [&] { return waiting.wait(testenv::scaled(10s)); });
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(barrier.remove());
  EXPECT_TRUE(released.get());
  EXPECT_FALSE(barrier.remove());
}

// Each wait ends once and is counted by how: passed, timeout, cancelled.
TEST_F(BarrierTest, MetricsCountWaitsByOutcome) {
  Session& session = sessions.add(servers);
  Barrier barrier(session, path + "/b");
  EXPECT_TRUE(barrier.wait(0ns));  // not set: passes
  barrier.set();
  EXPECT_FALSE(barrier.wait(50ms));
  std::stop_source stop;
  stop.request_stop();
  EXPECT_FALSE(barrier.wait(-1ns, stop.get_token()));
  DoubleBarrier alone(session, path + "/d", 1);
  EXPECT_TRUE(alone.enter(testenv::scaled(10s)));
  EXPECT_TRUE(alone.leave(testenv::scaled(10s)));

  const auto samples = read_exposition(prometheus_text(session));
  EXPECT_EQ(sample_value(samples, "zkr_barrier_waits_total", {{"outcome", "passed"}}), 3);
  EXPECT_EQ(sample_value(samples, "zkr_barrier_waits_total", {{"outcome", "timeout"}}), 1);
  EXPECT_EQ(sample_value(samples, "zkr_barrier_waits_total", {{"outcome", "cancelled"}}), 1);
  EXPECT_EQ(sample_value(samples, "zkr_barrier_waits_total", {{"outcome", "error"}}), 0);
  EXPECT_TRUE(barrier.remove());
}

// N participants on N sessions: none returns from enter() before the last has entered, none from
// leave() before the last has left; "ready" is gone after.
TEST_F(BarrierTest, DoubleBarrierHoldsEnterAndLeaveUntilAllAreThere) {
  constexpr int kParticipants = 3;
  std::vector<std::unique_ptr<DoubleBarrier>> barriers;
  for (int i = 0; i < kParticipants; ++i)
    barriers.push_back(std::make_unique<DoubleBarrier>(sessions.add(servers), path, kParticipants));
  std::vector<std::future<bool>> entered;
  for (int i = 0; i < kParticipants - 1; ++i)
    entered.push_back(std::async(std::launch::async, [&, i] { return barriers[i]->enter(testenv::scaled(10s)); }));
  ASSERT_TRUE(eventually([&] { return nodes().size() == kParticipants - 1; }));
  EXPECT_EQ(entered[0].wait_for(200ms), std::future_status::timeout);
  EXPECT_TRUE(barriers.back()->enter(testenv::scaled(10s)));
  for (auto& f : entered) EXPECT_TRUE(f.get());

  std::vector<std::future<bool>> left;
  for (int i = 0; i < kParticipants - 1; ++i)
    left.push_back(std::async(std::launch::async, [&, i] { return barriers[i]->leave(testenv::scaled(10s)); }));
  EXPECT_EQ(left[0].wait_for(200ms), std::future_status::timeout);
  EXPECT_TRUE(barriers.back()->leave(testenv::scaled(10s)));
  for (auto& f : left) EXPECT_TRUE(f.get());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));  // no participant, no "ready"
}

// The leave protocol Curator's and kazoo's participants follow: the participant whose node sorts
// lowest deletes it last, once alone (the peers wait for the lowest node only); the others delete
// theirs at once. A leave that gives up deletes its node all the same.
TEST_F(BarrierTest, DoubleBarrierLowestParticipantDeletesItsNodeLast) {
  constexpr int kParticipants = 3;
  std::vector<std::unique_ptr<DoubleBarrier>> barriers;
  for (int i = 0; i < kParticipants; ++i)
    barriers.push_back(std::make_unique<DoubleBarrier>(sessions.add(servers), path, kParticipants));
  std::sort(barriers.begin(), barriers.end(), [](const auto& a, const auto& b) { return a->node() < b->node(); });
  const auto name = [&](int i) { return barriers[i]->node().substr(path.size() + 1); };
  std::vector<std::future<bool>> entered;
  for (auto& barrier : barriers)
    entered.push_back(std::async(std::launch::async, [&] { return barrier->enter(testenv::scaled(10s)); }));
  for (auto& f : entered) ASSERT_TRUE(f.get());

  auto lowest_left = std::async(std::launch::async, [&] { return barriers[0]->leave(testenv::scaled(10s)); });
  EXPECT_EQ(lowest_left.wait_for(300ms), std::future_status::timeout);
  auto children = nodes();
  EXPECT_NE(std::find(children.begin(), children.end(), name(0)), children.end()) << "the lowest deleted its node first";
  auto middle_left = std::async(std::launch::async, [&] { return barriers[1]->leave(testenv::scaled(10s)); });
  EXPECT_TRUE(eventually([&] {
    auto now = nodes();
    return std::find(now.begin(), now.end(), name(1)) == now.end();
  })) << "a participant that is not the lowest keeps its node";
  EXPECT_EQ(middle_left.wait_for(200ms), std::future_status::timeout);
  EXPECT_TRUE(barriers[2]->leave(testenv::scaled(10s)));
  EXPECT_TRUE(lowest_left.get());
  EXPECT_TRUE(middle_left.get());
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));

  // Once more; the lowest gives up: its node goes, and the others are not held by it.
  entered.clear();
  for (auto& barrier : barriers)
    entered.push_back(std::async(std::launch::async, [&] { return barrier->enter(testenv::scaled(10s)); }));
  for (auto& f : entered) ASSERT_TRUE(f.get());
  EXPECT_FALSE(barriers[0]->leave(200ms));
  EXPECT_TRUE(eventually([&] {
    auto now = nodes();
    return std::find(now.begin(), now.end(), name(0)) == now.end();
  })) << "a leave that gave up kept its node";
  auto last_left = std::async(std::launch::async, [&] { return barriers[2]->leave(testenv::scaled(10s)); });
  EXPECT_TRUE(barriers[1]->leave(testenv::scaled(10s)));
  EXPECT_TRUE(last_left.get());
}

TEST_F(BarrierTest, DoubleBarrierEnterTimesOutWithoutLeavingItsNode) {
  DoubleBarrier alone(sessions.add(servers), path, 2);
  EXPECT_FALSE(alone.enter(200ms));
  EXPECT_TRUE(eventually([&] { return nodes().empty(); }));
  // It can enter again, and this time a second participant comes.
  DoubleBarrier second(sessions.add(servers), path, 2);
  auto second_in = std::async(std::launch::async, [&] { return second.enter(testenv::scaled(10s)); });
  EXPECT_TRUE(alone.enter(testenv::scaled(10s)));
  EXPECT_TRUE(second_in.get());
  EXPECT_THROW(DoubleBarrier(sessions[0], path, 0), Error);
}

// A participant waiting in enter() whose session expires enters again on its new session.
TEST_F(BarrierTest, DoubleBarrierParticipantWhoseSessionExpiredEntersAgain) {
  testenv::Proxy proxy(servers);
  Session& expiring = sessions.add(proxy.address(), 4000ms);
  DoubleBarrier first(expiring, path, 2);
  auto entered = std::async(std::launch::async, [&] { return first.enter(testenv::scaled(20s)); });
  ASSERT_TRUE(eventually([&] { return nodes().size() == 1; }));
  auto id = detail::Internals::core(expiring)->client_id();
  proxy.blackhole();
  testenv::expire_session(servers, id.session_id, id.password);
  ASSERT_TRUE(eventually([&] { return nodes().empty(); }));
  proxy.reset();
  proxy.pass();
  ASSERT_TRUE(eventually([&] { return nodes().size() == 1; }, testenv::scaled(15s)));  // its node, made again
  DoubleBarrier second(sessions.add(servers), path, 2);
  EXPECT_TRUE(second.enter(testenv::scaled(10s)));
  EXPECT_TRUE(entered.get());
}

TEST_F(BarrierTest, AsioFormsCompleteWithTheOutcome) {
  Session& session = sessions.add(servers);
  Barrier barrier(session, path + "/b");
  barrier.set();
  auto timed_out = zkr::asio::async_wait(barrier, 50ms, boost::asio::use_future);
  EXPECT_FALSE(timed_out.get());
  auto down = zkr::asio::async_wait(barrier, testenv::scaled(10s), boost::asio::use_future);
  barrier.remove();
  EXPECT_TRUE(down.get());

  DoubleBarrier a(session, path + "/d", 2), b(sessions.add(servers), path + "/d", 2);
  auto a_in = zkr::asio::async_enter(a, testenv::scaled(10s), boost::asio::use_future);
  auto b_in = zkr::asio::async_enter(b, testenv::scaled(10s), boost::asio::use_future);
  EXPECT_TRUE(a_in.get());
  EXPECT_TRUE(b_in.get());
  auto a_out = zkr::asio::async_leave(a, testenv::scaled(10s), boost::asio::use_future);
  EXPECT_TRUE(b.leave(testenv::scaled(10s)));
  EXPECT_TRUE(a_out.get());
  GroupMember member(session, path + "/g", "m");
  auto joined = zkr::asio::async_join(member, testenv::scaled(10s), boost::asio::use_future);
  EXPECT_TRUE(joined.get());
  GroupMember taken(sessions.add(servers, 1000ms), path + "/g", "m");
  auto refused = zkr::asio::async_join(taken, testenv::scaled(10s), boost::asio::use_future);
  EXPECT_THROW(refused.get(), Error);  // zk_errc::node_exists, after the joiner's session timeout
  auto gave_up = zkr::asio::async_join(taken, 1ms, boost::asio::use_future);
  EXPECT_FALSE(gave_up.get());

  sessions.close_all();
  auto closed = zkr::asio::async_wait(barrier, testenv::scaled(10s), boost::asio::use_future);
  EXPECT_THROW(closed.get(), Error);
}

// In the child of the next test: enters a double barrier of three and stays until killed.
TEST(DoubleBarrierChild, DISABLED_EntersAndWaits) {
  const char* path = std::getenv("ZKR_TEST_BARRIER_PATH");
  ASSERT_NE(path, nullptr);
  Session session(session_options(testenv::shared_server(), 1000ms));
  DoubleBarrier barrier(session, path, 3);
  barrier.async_enter(-1ns, [](std::error_code) {});
  ASSERT_TRUE(eventually([&] { return session.exists(barrier.node()).has_value(); }));
  testenv::print_held("node", barrier.node());
  testenv::print_held("ready", "");
  std::this_thread::sleep_for(testenv::scaled(60s));
}

// A participant killed (or frozen) between enter and leave holds the others only until its
// session ends.
void leave_past_a_dead_participant(const std::string& servers, const std::string& path, Sessions& sessions,
                                   bool freeze) {
  ::setenv("ZKR_TEST_BARRIER_PATH", path.c_str(), 1);
  auto child = testenv::hold_in_child("DoubleBarrierChild.DISABLED_EntersAndWaits", testenv::scaled(30s));
  DoubleBarrier a(sessions.add(servers), path, 3), b(sessions.add(servers), path, 3);
  auto a_entered = std::async(std::launch::async, [&] { return a.enter(testenv::scaled(10s)); });
  EXPECT_TRUE(b.enter(testenv::scaled(10s)));
  EXPECT_TRUE(a_entered.get());
  if (freeze) {
    child.process->freeze();
  } else {
    child.process->signal(SIGKILL);
    child.process->wait(testenv::scaled(10s));
  }
  auto a_left = std::async(std::launch::async, [&] { return a.leave(testenv::scaled(15s)); });
  EXPECT_TRUE(b.leave(testenv::scaled(15s)));  // once the dead one's 1 s session expired
  EXPECT_TRUE(a_left.get());
  if (freeze) child.process->signal(SIGKILL);  // the destructor reaps it
}

TEST_F(BarrierTest, DoubleBarrierKilledParticipantDoesNotHoldTheOthersForEver) {
  leave_past_a_dead_participant(servers, path, sessions, false);
}

TEST_F(BarrierTest, DoubleBarrierFrozenParticipantDoesNotHoldTheOthersForEver) {
  leave_past_a_dead_participant(servers, path, sessions, true);
}

}  // namespace
}  // namespace zkr::test
