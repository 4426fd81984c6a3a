// SPDX-License-Identifier: Apache-2.0
// The rest of the recipe catalogue in the swarm: multi-locks over the swarm's lock paths, group
// membership, a barrier and a double barrier. Like counter_add, their operations are posted every
// few steps, drawn from the seed and the step number only, so that the other steps stay the seed's.
//
// Invariants (tests/swarm/README.md):
//   - multi-lock: its paths' holders join the lock holders of check_exclusion (no two holders
//     whose nodes stand on any path, with plain locks and other multi-locks alike); its tokens grow
//     per path; a lost multi-lock says so (lost(), loss_reason(), lost_path() one of its paths, its
//     on_lost callback run), and one whose node is gone on a healthy session is lost.
//   - group: once quiet, a GroupView on a healthy session lists exactly the GroupMembers that are
//     joined and whose sessions live, and the peers' members that the server has, each with the
//     owner session its node has on the server (a member that rejoined has a new node) and its
//     data, and is not stale; a view whose session is not connected says it is stale.
//   - barrier: no wait passes a barrier that was up when it began and was not taken down since;
//     once it is down (and stays down), every wait on a healthy session passes.
//   - double barrier: an enter() passes only once N participants were in at once; a leave()
//     passes only once every participant that was in (entered, not leaving) when it began has
//     left too, or lost its node.
#include <algorithm>
#include <iterator>
#include <optional>
#include <random>

#include <fmt/format.h>

#include <zkr/barrier.hpp>
#include <zkr/error.hpp>
#include <zkr/group.hpp>
#include <zkr/multi_lock.hpp>

#include "slots.hpp"

namespace zkr::swarm {

using namespace std::chrono_literals;

namespace {

constexpr int kCatalogueEvery = 4;      // one step in this many (offset 1: never the counter's)
constexpr int kDoubleParticipants = 2;  // the double barrier's N
const std::string kBarrierPath = std::string(kRoot) + "/barrier";
const std::string kDoublePath = std::string(kRoot) + "/double";

// The multi-locks' path sets: two or three of lock0, lock1, lock2 (arg & 3).
std::vector<std::string> catalogue_multi_paths(int subset) {
  static const int kMasks[] = {0b011, 0b101, 0b110, 0b111};
  std::vector<std::string> paths;
  for (int bit = 0; bit < 3; ++bit)
    if (kMasks[subset & 3] & (1 << bit)) paths.push_back(resource(bit).path);
  return paths;
}

// Faults injected so far (each counted as "faults: <kind>").
int catalogue_faults_so_far(const std::map<std::string, int>& counts) {
  int n = 0;
  for (const auto& [what, times] : counts)
    if (what.rfind("faults: ", 0) == 0) n += times;
  return n;
}

// What a callback reports back (an async acquisition, join or wait).
struct CatalogueRecord {
  std::mutex mutex;
  bool done = false;
  std::error_code ec;
  std::string unexpected;
  void finish(std::error_code code) {
    std::lock_guard lock(mutex);
    ec = code;
    done = true;
  }
  bool finished() {
    std::lock_guard lock(mutex);
    return done;
  }
  // The outcome, once finished.
  std::optional<std::error_code> outcome() {
    std::lock_guard lock(mutex);
    return done ? std::optional(ec) : std::nullopt;
  }
};

struct MultiBox {
  std::mutex mutex;
  HeldMultiLock held;
  std::atomic<bool> told{false};  // its on_lost callback ran
};

}  // namespace

struct Swarm::Catalogue {
  // ---- multi-locks ----
  struct MultiPending {
    int step = 0, actor = 0, slot = 0, epoch = 0;
    std::vector<std::string> paths;
    std::optional<Clock::time_point> prompt_by;
    std::uint64_t started_event = 0;
    std::stop_source stop;
    std::shared_ptr<CatalogueRecord> record = std::make_shared<CatalogueRecord>();
    std::shared_ptr<MultiBox> box = std::make_shared<MultiBox>();
    std::string what;
  };
  struct MultiHold {
    int step = 0, actor = 0, slot = 0, epoch = 0;
    std::vector<std::string> paths, nodes;
    std::vector<FencingToken> tokens;
    std::uint64_t observed_event = 0;
    std::shared_ptr<MultiBox> box;
    bool released = false;
    std::string what;
  };
  std::map<std::tuple<int, int, int>, std::unique_ptr<MultiLock>> multi_locks;  // (slot, epoch, subset)
  std::set<std::tuple<int, int, std::string>> multi_paths_used;                   // (slot, epoch, path)
  std::vector<std::unique_ptr<MultiPending>> multi_pending;
  std::vector<MultiHold> multi_holds;

  // ---- group membership ----
  struct Member {
    Session* session = nullptr;
    int slot = 0, epoch = 0;
    std::unique_ptr<GroupMember> member;
    std::string data;  // what it joined with
    std::shared_ptr<CatalogueRecord> join;
  };
  std::map<std::tuple<int, int, int>, Member> members;  // (slot, epoch, which)
  std::map<std::pair<int, int>, std::unique_ptr<GroupView>> views;  // (slot, epoch)

  // ---- the barrier ----
  std::optional<bool> barrier_up = false;  // nullopt: a set or remove of unknown outcome
  int barrier_sets = 0, barrier_removals = 0, barrier_unknown = 0;
  struct BarrierWait {
    int step = 0, slot = 0, epoch = 0;
    bool forever = false;
    std::optional<bool> up_at_start;
    int sets_at_start = 0, removals_at_start = 0, unknown_at_start = 0, faults_at_start = 0;
    bool healthy_at_start = false;
    std::optional<Clock::time_point> prompt_by;
    std::stop_source stop;
    std::shared_ptr<CatalogueRecord> record = std::make_shared<CatalogueRecord>();
    std::string what;
  };
  std::vector<std::unique_ptr<BarrierWait>> barrier_waits;
  struct BarrierChange {
    bool setting = false;
    int sequence = 0;
    bool was_up = false;  // remove: the node was there
    CatalogueRecord record;
    std::string what;
  };
  int barrier_changes = 0;
  std::vector<std::shared_ptr<BarrierChange>> barrier_pending;

  // ---- the double barrier ----
  enum class Phase { idle, entering, entered, leaving };
  struct Participant {
    std::unique_ptr<DoubleBarrier> barrier;
    Phase phase = Phase::idle;
    int most_present = 0;  // while entering: the most participants in at once
    int entered_serial = 0;  // which enter (of the run's) made it `entered`
    // While leaving: the others that were entered when the leave began, and by which enter.
    std::vector<std::pair<std::tuple<int, int, int>, int>> in_at_leave;
    std::stop_source stop;
    std::shared_ptr<CatalogueRecord> record;
    std::string what;
  };
  std::map<std::tuple<int, int, int>, Participant> participants;  // (slot, epoch, actor)
  bool double_ready_left = false;  // an earlier run left "ready": an enter may pass alone
  int double_enters = 0;           // enters that passed, for Participant::entered_serial
  // The participants the barrier counts: those entering, entered or leaving, and those whose enter
  // or leave ended with their node still on the server (a session closed while its connection was
  // down keeps the node until the server expires it, and every participant's recipe, a peer's too,
  // counts it until then).
  template <typename NodeExists>
  int present(NodeExists node_exists) const {
    return static_cast<int>(std::count_if(participants.begin(), participants.end(), [&](const auto& each) {
      const Participant& p = each.second;
      if (p.phase != Phase::idle) return true;
      if (!p.barrier) return false;
      const std::string node = p.barrier->node();
      return !node.empty() && node_exists(node);
    }));
  }
};

// ---- generation ----

std::optional<Op> Swarm::catalogue_op_for_step() const {
  if (step_index_ % kCatalogueEvery != 1) return std::nullopt;
  std::mt19937_64 random(config_.seed * 0x2545f4914f6cdd1dull + static_cast<std::uint64_t>(step_index_));
  auto pick = [&](int n) { return static_cast<int>(random() % static_cast<std::uint64_t>(n)); };
  static constexpr std::pair<OpKind, int> kWeights[] = {
      {OpKind::multi_acquire, 24}, {OpKind::multi_release, 12}, {OpKind::group_join, 10},
      {OpKind::group_leave, 5},    {OpKind::view_start, 6},     {OpKind::view_stop, 2},
      {OpKind::barrier_set, 6},    {OpKind::barrier_remove, 6}, {OpKind::barrier_wait, 10},
      {OpKind::double_enter, 12},  {OpKind::double_leave, 8},
  };
  int total = 0;
  for (const auto& [kind, weight] : kWeights) total += weight;
  int roll = pick(total);
  Op op;
  for (const auto& [kind, weight] : kWeights) {
    if (roll < weight) {
      op.kind = kind;
      break;
    }
    roll -= weight;
  }
  op.session = pick(config_.sessions);
  op.arg = pick(16);
  op.actor = pick(config_.actors);
  if (op.kind == OpKind::multi_release && catalogue_) {
    // The actor of a hold that is still held, where there is one.
    for (auto it = catalogue_->multi_holds.rbegin(); it != catalogue_->multi_holds.rend(); ++it)
      if (!it->released) {
        op.actor = it->actor;
        break;
      }
    op.arg = 0;
  }
  if (op.kind == OpKind::group_join) op.arg |= member_data_draw(pick(100)) << 4;
  // An idle actor runs it, where there is one.
  for (int tried = 0; tried < config_.actors && op.kind != OpKind::multi_release; ++tried) {
    if (actors_[static_cast<std::size_t>(op.actor)]->actor.idle()) break;
    op.actor = (op.actor + 1) % config_.actors;
  }
  return op;
}

// ---- operations ----

bool Swarm::catalogue_op(const Op& op) {
  if (!catalogue_) {
    // A real server may keep what an earlier run left (that run failed): start from what is there.
    catalogue_ = std::make_shared<Catalogue>();
    catalogue_->barrier_up = world_.exists(kBarrierPath);
    catalogue_->double_ready_left = world_.exists(kDoublePath + "/ready");
  }
  auto& c = *catalogue_;
  auto& slot = *slots_[static_cast<std::size_t>(op.session)];
  Session* s = slot.session.get();
  auto& actor = actors_[static_cast<std::size_t>(op.actor)]->actor;
  const std::string what = fmt::format("step {} {}", step_index_, describe(op));
  const auto slack = world_.slack();
  // Runs `call` on the idle actor, bounded; an exception the API does not promise fails the run.
  auto on_actor = [&](std::string_view name, std::function<void()> call, std::chrono::milliseconds bound) {
    auto problem = std::make_shared<std::string>();
    const bool returned = actor.run(
        [call, problem] {
          try {
            call();
          } catch (const Error& e) {
            if (e.code() == errc::internal_error || e.code() == condition::bad_input) *problem = e.what();
          } catch (const std::exception& e) {
            *problem = fmt::format("threw {}", e.what());
          }
        },
        bound);
    if (!returned) fail("hang", std::string(name), fmt::format("{}: did not return within {} ms", what, bound.count()));
    else if (!problem->empty()) fail("exception", std::string(name), fmt::format("{}: {}", what, *problem));
    settle_after(op.actor);
    return true;
  };
  if (op.kind != OpKind::multi_release && (!usable(op.session) || !actor.idle())) return false;

  switch (op.kind) {
    case OpKind::multi_acquire: {
      const int subset = op.arg & 3;
      auto& multi = c.multi_locks[{op.session, slot.epoch, subset}];
      if (!multi) multi = std::make_unique<MultiLock>(*s, catalogue_multi_paths(subset));
      auto pending = std::make_unique<Catalogue::MultiPending>();
      pending->step = step_index_;
      pending->actor = op.actor;
      pending->slot = op.session;
      pending->epoch = slot.epoch;
      pending->paths = multi->paths();
      pending->started_event = next_event();
      const auto timeout = async_timeout(op);
      if (timeout >= 0ms) pending->prompt_by = Clock::now() + timeout + slack;
      pending->what = what;
      for (const auto& path : pending->paths) c.multi_paths_used.insert({op.session, slot.epoch, path});
      MultiLock* raw = multi.get();
      auto record = pending->record;
      auto box = pending->box;
      auto token = pending->stop.get_token();
      c.multi_pending.push_back(std::move(pending));
      return on_actor(
          "multi-lock",
          [raw, timeout, record, box, token] {
            raw->async_acquire(
                timeout,
                [record, box](std::error_code ec, HeldMultiLock held) {
                  {
                    std::lock_guard lock(box->mutex);
                    box->held = std::move(held);
                  }
                  record->finish(ec);
                },
                token);
          },
          slack);
    }
    case OpKind::multi_release: {
      for (auto it = c.multi_holds.rbegin(); it != c.multi_holds.rend(); ++it) {
        if (it->released || it->actor != op.actor) continue;
        it->released = true;
        std::lock_guard lock(it->box->mutex);
        it->box->held.release();
        return true;
      }
      return false;
    }
    case OpKind::group_join:
    case OpKind::group_leave: {
      auto& made = c.members[{op.session, slot.epoch, op.arg % 3}];
      if (op.kind == OpKind::group_leave) {
        if (!made.member) return false;
        if (made.join && !made.join->finished()) count("group leaves: join in flight");
        GroupMember* member = made.member.get();
        return on_actor("group", [member] { member->leave(); }, slack);
      }
      if (made.member && made.member->state() != MembershipState::left) return false;
      if (!made.member) {
        made.session = s;
        made.slot = op.session;
        made.epoch = slot.epoch;
        auto created = std::make_shared<std::unique_ptr<GroupMember>>();
        const std::string id = fmt::format("s{}e{}-m{}", op.session, slot.epoch, op.arg % 3);
        const auto data_size = member_data_class(op.arg);
        std::string data = data_size == MemberData::small ? "data" : std::string(member_data_bytes(data_size, id), 'm');
        if (data_size == MemberData::over_the_limit) {
          // Refused where it is made, with what was wrong: nothing reaches the server.
          c.members.erase({op.session, slot.epoch, op.arg % 3});
          auto refusal = std::make_shared<std::string>();
          on_actor("group", [s, id, data, refusal] {
            try {
              GroupMember member(*s, kGroupPath, id, data);
              *refusal = "it was accepted";
            } catch (const Error& e) {
              if (e.code() != errc::invalid_argument || std::string_view(e.what()).find("limit") == std::string_view::npos)
                *refusal = fmt::format("it was refused with {}", e.what());
            }
          }, slack);
          if (!failed() && !refusal->empty())
            fail("member data", "group",
                 fmt::format("{}: {} bytes of member data, one byte more than a create may carry: {}, where it "
                             "must be refused as invalid_argument naming the limit",
                             what, data.size(), *refusal));
          count("group members refused: data over the limit");
          return true;
        }
        on_actor("group", [s, id, data, created] { *created = std::make_unique<GroupMember>(*s, kGroupPath, id, data); },
                 slack);
        made.member = std::move(*created);
        made.data = std::move(data);
        if (!made.member) return true;
      }
      made.join = std::make_shared<CatalogueRecord>();
      GroupMember* member = made.member.get();
      auto record = made.join;
      return on_actor(
          "group",
          [member, record] { member->async_join(-1ns, [record](std::error_code ec) { record->finish(ec); }); }, slack);
    }
    case OpKind::view_start:
    case OpKind::view_stop: {
      auto& view = c.views[{op.session, slot.epoch}];
      if (op.kind == OpKind::view_stop) {
        if (!view) return false;
        GroupView* raw = view.get();
        on_actor("group", [raw] { raw->stop(); }, slack);
        view.reset();
        return true;
      }
      if (view) return false;
      auto created = std::make_shared<std::unique_ptr<GroupView>>();
      on_actor("group", [s, created] { *created = std::make_unique<GroupView>(*s, kGroupPath); }, slack);
      view = std::move(*created);
      return true;
    }
    case OpKind::barrier_set:
    case OpKind::barrier_remove: {
      // Posted, not waited for: a call on a suspended session waits for the connection. Until it
      // ends the model does not know whether the barrier is up.
      auto change = std::make_shared<Catalogue::BarrierChange>();
      change->setting = op.kind == OpKind::barrier_set;
      change->sequence = ++c.barrier_changes;
      change->what = what;
      c.barrier_up.reset();
      ++c.barrier_unknown;
      c.barrier_pending.push_back(change);
      actor.post([s, change](std::stop_token) {
        std::error_code ec;
        bool was_up = false;
        std::string unexpected;
        try {
          Barrier barrier(*s, kBarrierPath);
          if (change->setting) barrier.set(ec);
          else was_up = barrier.remove(ec);
        } catch (const std::exception& e) {
          unexpected = e.what();
        }
        std::lock_guard lock(change->record.mutex);
        change->was_up = was_up;
        change->record.unexpected = std::move(unexpected);
        change->record.ec = ec;
        change->record.done = true;
      });
      settle_after(op.actor);
      return true;
    }
    case OpKind::barrier_wait: {
      auto wait = std::make_unique<Catalogue::BarrierWait>();
      wait->step = step_index_;
      wait->slot = op.session;
      wait->epoch = slot.epoch;
      const auto timeout = async_timeout(op);
      wait->forever = timeout < 0ms;
      if (!wait->forever) wait->prompt_by = Clock::now() + timeout + slack;
      wait->up_at_start = c.barrier_up;
      wait->sets_at_start = c.barrier_sets;
      wait->removals_at_start = c.barrier_removals;
      wait->unknown_at_start = c.barrier_unknown;
      wait->faults_at_start = catalogue_faults_so_far(counts_);
      wait->healthy_at_start = healthy(op.session);
      wait->what = what;
      auto record = wait->record;
      auto token = wait->stop.get_token();
      c.barrier_waits.push_back(std::move(wait));
      return on_actor(
          "barrier",
          [s, timeout, record, token] {
            Barrier(*s, kBarrierPath).async_wait(timeout, [record](std::error_code ec) { record->finish(ec); }, token);
          },
          slack);
    }
    case OpKind::double_enter:
    case OpKind::double_leave: {
      auto& p = c.participants[{op.session, slot.epoch, op.actor}];
      const bool entering = op.kind == OpKind::double_enter;
      if (entering ? p.phase != Catalogue::Phase::idle : p.phase != Catalogue::Phase::entered) return false;
      if (!p.barrier) {
        auto created = std::make_shared<std::unique_ptr<DoubleBarrier>>();
        on_actor("double-barrier",
                 [s, created] { *created = std::make_unique<DoubleBarrier>(*s, kDoublePath, kDoubleParticipants); },
                 slack);
        p.barrier = std::move(*created);
        if (!p.barrier) return true;
      }
      p.phase = entering ? Catalogue::Phase::entering : Catalogue::Phase::leaving;
      p.most_present = c.present([&](const std::string& node) { return world_.exists(node); });
      p.in_at_leave.clear();
      if (!entering)
        for (const auto& [key, other] : c.participants)
          if (&other != &p && other.phase == Catalogue::Phase::entered) p.in_at_leave.emplace_back(key, other.entered_serial);
      p.stop = std::stop_source();
      p.record = std::make_shared<CatalogueRecord>();
      p.what = what;
      DoubleBarrier* raw = p.barrier.get();
      auto record = p.record;
      auto token = p.stop.get_token();
      return on_actor(
          "double-barrier",
          [raw, entering, record, token] {
            auto done = [record](std::error_code ec) { record->finish(ec); };
            if (entering) raw->async_enter(-1ns, done, token);
            else raw->async_leave(-1ns, done, token);
          },
          slack);
    }
    default: return false;
  }
}

// ---- harvesting ----

void Swarm::harvest_catalogue() {
  if (!catalogue_) return;
  auto& c = *catalogue_;
  auto unexpected = [&](std::string_view name, const std::string& what, const std::error_code& ec) {
    if (ec == errc::internal_error || ec == condition::bad_input)
      fail("exception", std::string(name), fmt::format("{}: {}", what, ec.message()));
  };
  // A join or an enter makes the parents its node needs (a container the server reaped meanwhile
  // included): it never ends for want of one.
  auto parents_made = [&](std::string_view name, const std::string& what, const std::error_code& ec) {
    if (ec == zk_errc::no_node)
      fail("missing parent", std::string(name), fmt::format("{} ended with {}", what, ec.message()));
  };
  // Multi-lock acquisitions that ended.
  for (auto it = c.multi_pending.begin(); it != c.multi_pending.end() && !failed();) {
    auto& pending = **it;
    const auto outcome = pending.record->outcome();
    if (!outcome) {
      ++it;
      continue;
    }
    const std::error_code ec = *outcome;
    trace("  outcome of step {} (multi_acquire): {}", pending.step, ec ? ec.message() : "granted");
    unexpected("multi-lock", pending.what, ec);
    std::unique_lock lock(pending.box->mutex);  // let go before the erase below may free the box
    auto& held = pending.box->held;
    if (ec) {
      count(fmt::format("multi-locks ended without a grant: {}", ec.message()));
      if (held) fail("multi-lock", "multi-lock", fmt::format("{}: failed ({}) yet holds its paths", pending.what, ec.message()));
    } else if (held.locks().size() != pending.paths.size()) {
      fail("multi-lock", "multi-lock",
           fmt::format("{}: granted with {} lock(s) for {} path(s)", pending.what, held.locks().size(), pending.paths.size()));
    } else {
      Catalogue::MultiHold hold;
      hold.step = step_index_;
      hold.actor = pending.actor;
      hold.slot = pending.slot;
      hold.epoch = pending.epoch;
      hold.paths = pending.paths;
      hold.observed_event = next_event();
      hold.box = pending.box;
      hold.what = pending.what;
      for (std::size_t i = 0; i < held.locks().size(); ++i) {
        hold.nodes.push_back(held.locks()[i].node_path());
        hold.tokens.push_back(held.locks()[i].token());
        if (hold.nodes.back().rfind(pending.paths[i] + "/", 0) != 0)
          fail("multi-lock", "multi-lock",
               fmt::format("{}: lock {} is {}, not on its path {}", pending.what, i, hold.nodes.back(), pending.paths[i]));
      }
      // Tokens grow per path: above every grant on the path seen before this acquisition began.
      for (std::size_t i = 0; i < hold.paths.size() && !failed(); ++i) {
        auto below = [&](const std::string& node, FencingToken token, std::uint64_t seen) {
          if (seen < pending.started_event && token >= hold.tokens[i])
            fail("token order", "multi-lock",
                 fmt::format("{}: its token {} on {} is not above token {} of {}, seen before it began", pending.what,
                             hold.tokens[i].to_string(), hold.paths[i], token.to_string(), node));
        };
        for (const auto& [node, grant] : grants_)
          if (resource(grant.resource).path == hold.paths[i]) below(node, grant.token, grant.observed_event);
        for (const auto& other : c.multi_holds)
          for (std::size_t j = 0; j < other.paths.size(); ++j)
            if (other.paths[j] == hold.paths[i]) below(other.nodes[j], other.tokens[j], other.observed_event);
      }
      // Weakly: the callback is kept by the hold, which the box owns.
      held.on_lost([box = std::weak_ptr<MultiBox>(pending.box)](LossReason) {
        if (auto alive = box.lock()) alive->told = true;
      });
      count("multi-lock grants");
      c.multi_holds.push_back(std::move(hold));
    }
    lock.unlock();
    if (auto& slot = *slots_[static_cast<std::size_t>(pending.slot)]; slot.epoch == pending.epoch)
      slot.window_exempt_ended += pending.paths.size();
    it = c.multi_pending.erase(it);
  }
  // Joins that failed (a join that succeeded shows in the member's state).
  for (auto& [key, made] : c.members)
    if (made.join && made.join->finished()) {
      std::error_code ec;
      {
        std::lock_guard lock(made.join->mutex);  // let go before the reset below frees it
        ec = made.join->ec;
      }
      unexpected("group", "a GroupMember's join", ec);
      parents_made("group", "a GroupMember's join", ec);
      count(fmt::format("group joins: {}", ec ? ec.message() : "joined"));
      made.join.reset();
    }
  // Sets and removes that ended: the latest one that succeeded tells the model again.
  for (auto it = c.barrier_pending.begin(); it != c.barrier_pending.end() && !failed();) {
    auto& change = **it;
    if (!change.record.finished()) {
      ++it;
      continue;
    }
    // Read under the record's mutex, and let go of it before the erase below frees the record.
    std::error_code ec;
    std::string thrown;
    {
      std::lock_guard lock(change.record.mutex);
      ec = change.record.ec;
      thrown = change.record.unexpected;
    }
    trace("  outcome of {}: {}", change.what, ec ? ec.message() : "ok");
    if (!thrown.empty()) fail("exception", "barrier", fmt::format("{}: threw {}", change.what, thrown));
    unexpected("barrier", change.what, ec);
    count(fmt::format("barrier {}: {}", change.setting ? "sets" : "removes", ec ? ec.message() : "ok"));
    if (!ec) {
      if (change.setting) ++c.barrier_sets;
      else if (change.was_up) ++c.barrier_removals;
      if (change.sequence == c.barrier_changes) c.barrier_up = change.setting;
    }
    it = c.barrier_pending.erase(it);
  }
  // Barrier waits that ended.
  const int faults_now = catalogue_faults_so_far(counts_);
  for (auto it = c.barrier_waits.begin(); it != c.barrier_waits.end() && !failed();) {
    auto& wait = **it;
    const auto outcome = wait.record->outcome();
    if (!outcome) {
      ++it;
      continue;
    }
    const std::error_code ec = *outcome;
    trace("  outcome of step {} (barrier_wait): {}", wait.step, ec ? ec.message() : "passed");
    unexpected("barrier", wait.what, ec);
    count(fmt::format("barrier waits: {}", ec ? ec.message() : "passed"));
    const bool unchanged = c.barrier_unknown == wait.unknown_at_start;
    if (!ec && wait.up_at_start == true && unchanged && c.barrier_removals == wait.removals_at_start)
      fail("barrier", "barrier",
           fmt::format("{}: passed the barrier, which was up when it began and was not removed since", wait.what));
    if (ec == errc::timed_out && !wait.forever && wait.up_at_start == false && unchanged &&
        c.barrier_sets == wait.sets_at_start && wait.healthy_at_start && faults_now == wait.faults_at_start &&
        !world_.faults_active())
      fail("barrier", "barrier",
           fmt::format("{}: timed out on a healthy session though the barrier was down all along", wait.what));
    it = c.barrier_waits.erase(it);
  }
  // Double barrier participants whose enter or leave ended.
  const int present = c.present([&](const std::string& node) { return world_.exists(node); });
  for (auto& [key, p] : c.participants) {
    if (failed()) return;
    if (p.phase == Catalogue::Phase::entering) p.most_present = std::max(p.most_present, present);
    const auto outcome = p.record ? p.record->outcome() : std::nullopt;
    if (!outcome) continue;
    const std::error_code ec = *outcome;
    p.record.reset();
    unexpected("double-barrier", p.what, ec);
    trace("  outcome of {}: {}", p.what, ec ? ec.message() : "passed");
    if (p.phase == Catalogue::Phase::entering) {
      parents_made("double-barrier", p.what, ec);
      count(fmt::format("double barrier enters: {}", ec ? ec.message() : "passed"));
      if (!ec && p.most_present < kDoubleParticipants && !c.double_ready_left)
        fail("double barrier", "double-barrier",
             fmt::format("{}: entered with at most {} participant(s) in at once, of {}", p.what, p.most_present,
                         kDoubleParticipants));
      p.phase = ec ? Catalogue::Phase::idle : Catalogue::Phase::entered;
      if (!ec) p.entered_serial = ++c.double_enters;
    } else {
      count(fmt::format("double barrier leaves: {}", ec ? ec.message() : "left"));
      p.phase = Catalogue::Phase::idle;
      // Still entered by the same enter, and its node still there: it was in all along (an entered
      // participant makes no node again), so this leave passed while it was in.
      for (const auto& [other_key, serial] : p.in_at_leave) {
        const auto& other = c.participants[other_key];
        if (!ec && other.phase == Catalogue::Phase::entered && other.entered_serial == serial && other.barrier &&
            world_.exists(other.barrier->node()))
          return fail("double barrier", "double-barrier",
                      fmt::format("{}: left while the participant of s{} (actor {}) was still in", p.what,
                                  std::get<0>(other_key), std::get<2>(other_key)));
      }
      p.in_at_leave.clear();
    }
  }
}

// ---- invariants ----

void Swarm::multi_lock_holders(const std::function<void(const std::string& path, const std::string& node,
                                                        FencingToken token)>& add) {
  if (!catalogue_) return;
  for (auto& hold : catalogue_->multi_holds) {
    if (hold.released) continue;
    {
      std::lock_guard lock(hold.box->mutex);
      if (hold.box->held.lost()) continue;
    }
    for (std::size_t i = 0; i < hold.paths.size(); ++i) add(hold.paths[i], hold.nodes[i], hold.tokens[i]);
  }
}

// A member of the session in `slot` that has not left (one whose join has not ended first): what
// the generator's group_leave arg names it by, if there is one.
std::optional<int> Swarm::member_to_leave(int slot) const {
  if (!catalogue_) return std::nullopt;
  const int epoch = slots_[static_cast<std::size_t>(slot)]->epoch;
  std::optional<int> found;
  for (const auto& [key, made] : catalogue_->members) {
    const auto& [member_slot, member_epoch, which] = key;
    if (member_slot != slot || member_epoch != epoch || !made.member) continue;
    if (made.member->state() == MembershipState::left) continue;
    if (made.join && !made.join->finished()) return which;
    found = which;
  }
  return found;
}

bool Swarm::multi_lock_used(int slot, int epoch, const std::string& path) const {
  return catalogue_ && catalogue_->multi_paths_used.contains({slot, epoch, path});
}

std::size_t Swarm::multi_lock_contenders(int slot, const std::string& path) const {
  if (!catalogue_) return 0;
  std::size_t n = 0;
  for (const auto& pending : catalogue_->multi_pending)
    n += pending->slot == slot && std::count(pending->paths.begin(), pending->paths.end(), path);
  for (const auto& hold : catalogue_->multi_holds)
    n += !hold.released && hold.slot == slot && std::count(hold.paths.begin(), hold.paths.end(), path);
  return n;
}

std::size_t Swarm::multi_lock_pending_paths(int slot, int epoch) const {
  if (!catalogue_) return 0;
  std::size_t n = 0;
  for (const auto& pending : catalogue_->multi_pending)
    if (pending->slot == slot && pending->epoch == epoch) n += pending->paths.size();
  return n;
}

void Swarm::check_catalogue_step() {
  if (!catalogue_) return;
  auto& c = *catalogue_;
  const auto now = Clock::now();
  for (const auto& pending : c.multi_pending)
    if (pending->prompt_by && now > *pending->prompt_by && !pending->record->finished())
      return fail("hang", "multi-lock", fmt::format("{} did not end within its timeout", pending->what));
  for (const auto& wait : c.barrier_waits)
    if (wait->prompt_by && now > *wait->prompt_by && !wait->record->finished())
      return fail("hang", "barrier", fmt::format("{} did not end within its timeout", wait->what));
  // A lost multi-lock says so; one whose node is gone on a healthy session is lost.
  eventually("multi-lock loss", world_.slack() / 2, [&]() -> std::string {
    for (auto& hold : c.multi_holds) {
      if (hold.released) continue;
      std::lock_guard lock(hold.box->mutex);
      const auto& held = hold.box->held;
      if (held.lost()) {
        const auto path = held.lost_path();
        if (!held.loss_reason() || std::find(hold.paths.begin(), hold.paths.end(), path) == hold.paths.end() ||
            !held.lost_token().stop_requested() || !hold.box->told)
          return fmt::format("{}: lost, but loss_reason {}, lost_path '{}', lost_token {}, on_lost {}", hold.what,
                             held.loss_reason() ? to_string(*held.loss_reason()) : "none", path,
                             held.lost_token().stop_requested() ? "stopped" : "not stopped",
                             hold.box->told ? "ran" : "not run");
        continue;
      }
      const auto& slot = *slots_[static_cast<std::size_t>(hold.slot)];
      if (slot.epoch != hold.epoch || !healthy(hold.slot)) continue;
      for (const auto& node : hold.nodes)
        if (!world_.exists(node))
          return fmt::format("after step {}: {}: its node {} is gone while its session is healthy, and it is not lost",
                             step_index_, hold.what, node);
    }
    return {};
  });
  if (failed()) return;
  // A view whose session is not connected says it may be stale.
  eventually("group", world_.slack() / 2, [&]() -> std::string {
    for (auto& [key, view] : c.views) {
      const auto& [slot_index, epoch] = key;
      auto& slot = *slots_[static_cast<std::size_t>(slot_index)];
      if (!view || slot.epoch != epoch || !usable(slot_index)) continue;
      const auto state = slot.session->state();
      if (state == SessionState::connected || state == SessionState::closed) continue;
      if (!view->snapshot().stale)
        return fmt::format("after step {}: the GroupView of session s{} is not stale while the session is {}",
                           step_index_, slot_index, to_string(state));
    }
    return {};
  });
}

// Once quiet (no fault active): the views list the live members. While steps run, a member's node
// may also stand on a session its Session replaced (a join whose reply was lost, say): the library
// keeps that session open while a hold granted on it is kept, up to the moment its server would
// expire it, and the member joins again once the node goes. At the end (`at_end`), every hold
// released, no such node may be left.
std::string Swarm::group_problem(bool at_end) {
  if (!catalogue_) return {};
  auto& c = *catalogue_;
  std::map<std::string, std::int64_t> owners;  // node name -> its owner session, on the server
  for (const auto& node : world_.children(kGroupPath)) owners[node.name] = node.ephemeral_owner;
  std::set<std::int64_t> current_sessions;
  for (const auto& slot : slots_)
    if (slot->session) current_sessions.insert(slot->session->id());
  std::set<std::string> expected;
  std::map<std::string, const std::string*> expected_data;  // the data of each member expected
  // The peers' members (Curator GroupMembers on real servers): the nodes of sessions not the
  // test's. A view lists them as the server has them, each with the data its peer gives it.
  std::map<std::string, std::string> peer_data;
  for (const auto& [name, owner] : owners)
    if (owner != 0 && !own_sessions_.contains(owner)) {
      expected.insert(name);
      peer_data[name] = "data-" + name;
      expected_data[name] = &peer_data[name];
    }
  // A member of a Session closed while its connection was down may still be listed: no closeSession
  // could go out, so its node stays until the server expires the session (which a real world cannot
  // see; the fake says).
  std::set<std::string> may_linger;
  for (auto& [key, made] : c.members) {
    if (!made.member) continue;
    const bool alive = world_.session_alive(made.session->id());
    const auto node = owners.find(made.member->id());
    const bool on_a_replaced_session = node != owners.end() && node->second != 0 &&
                                       !current_sessions.contains(node->second) && world_.session_alive(node->second);
    if (made.member->state() == MembershipState::joined && alive) {
      expected.insert(made.member->id());
      expected_data[made.member->id()] = &made.data;
    }
    else if (alive && made.session->state() == SessionState::closed) may_linger.insert(made.member->id());
    else if (on_a_replaced_session && !at_end) may_linger.insert(made.member->id());
  }
  // The server's own truth, views or not: on a healthy session, a node stands only for a member
  // joined (or joining) through it; one that left, or never knew its create took effect, has none.
  for (const auto& [name, owner] : owners) {
    const auto slot = std::find_if(slots_.begin(), slots_.end(),
                                   [&](const auto& each) { return each->session && each->session->id() == owner; });
    if (slot == slots_.end() || !healthy((*slot)->slot) || expected.contains(name) || may_linger.contains(name))
      continue;
    const bool wanted = std::any_of(c.members.begin(), c.members.end(), [&](const auto& entry) {
      const auto& made = entry.second;
      return made.member && made.member->id() == name && made.session == (*slot)->session.get() &&
             made.member->state() != MembershipState::left;
    });
    if (!wanted)
      return fmt::format("after step {}: member node {} stands on session s{}'s session {:#x}, healthy, though no "
                         "member there is joined or joining as {}",
                         step_index_, name, (*slot)->slot, owner, name);
  }
  int views_with_peers = 0;
  for (auto& [key, view] : c.views) {
    const auto& [slot_index, epoch] = key;
    auto& slot = *slots_[static_cast<std::size_t>(slot_index)];
    if (!view || slot.epoch != epoch || !healthy(slot_index)) continue;
    const auto snapshot = view->snapshot();
    for (const auto& member : snapshot.members)
      if (auto it = owners.find(member.node); !snapshot.stale && it != owners.end() && it->second != member.session_id)
        return fmt::format("after step {}: the GroupView of session s{} lists {} of session {:#x}; its node is "
                           "session {:#x}'s",
                           step_index_, slot_index, member.id, member.session_id, it->second);
    std::set<std::string> listed;
    for (const auto& member : snapshot.members) listed.insert(member.id);
    views_with_peers += !peer_data.empty();
    for (const auto& member : snapshot.members)
      if (auto it = expected_data.find(member.id); !snapshot.stale && it != expected_data.end() && member.data != *it->second)
        return fmt::format("after step {}: the GroupView of session s{} lists {} with {} bytes of data; it joined "
                           "with {} bytes{}",
                           step_index_, slot_index, member.id, member.data.size(), it->second->size(),
                           member.data.size() == it->second->size() ? " (other bytes)" : "");
    std::set<std::string> listed_besides_lingering;
    std::set_difference(listed.begin(), listed.end(), may_linger.begin(), may_linger.end(),
                        std::inserter(listed_besides_lingering, listed_besides_lingering.end()));
    if (snapshot.stale || listed_besides_lingering != expected) {
      std::string got, want;
      for (const auto& id : listed) got += " " + id;
      for (const auto& id : expected) want += " " + id;
      return fmt::format("after step {}: the GroupView of session s{} lists{} ({}); the members joined on live "
                         "sessions are{}",
                         step_index_, slot_index, got.empty() ? " nobody" : got, snapshot.stale ? "stale" : "fresh",
                         want.empty() ? " nobody" : want);
    }
  }
  if (views_with_peers > 0) count("group views checked with peers' members", views_with_peers);
  return {};
}

// Once quiet: every wait on a healthy session has passed a barrier that is down and stayed down.
std::string Swarm::barrier_problem() {
  if (!catalogue_) return {};
  auto& c = *catalogue_;
  if (c.barrier_up == false)
    for (const auto& wait : c.barrier_waits)
      if (wait->forever && healthy(wait->slot) && slots_[static_cast<std::size_t>(wait->slot)]->epoch == wait->epoch &&
          !wait->record->finished() && c.barrier_sets == wait->sets_at_start &&
          (wait->up_at_start == false || c.barrier_removals > wait->removals_at_start))
        return fmt::format("after step {}: {} still waits though the barrier is down", step_index_, wait->what);
  return {};
}

// ---- the end phase ----

// Releases every multi-lock, takes the barrier down, cancels enters and leaves who entered.
// True while something is still to end.
bool Swarm::end_catalogue() {
  if (!catalogue_) return false;
  auto& c = *catalogue_;
  for (auto& hold : c.multi_holds)
    if (!hold.released) {
      hold.released = true;
      std::lock_guard lock(hold.box->mutex);
      hold.box->held.release();
    }
  if (c.barrier_up != false && c.barrier_pending.empty()) {
    for (int slot = 0; slot < config_.sessions; ++slot) {
      if (!healthy(slot)) continue;
      std::error_code ec;
      Barrier(*session(slot), kBarrierPath).remove(ec);
      if (!ec) {
        c.barrier_up = false;
        ++c.barrier_removals;
      }
      break;
    }
  }
  for (auto& [key, p] : c.participants) {
    if (p.phase == Catalogue::Phase::entering) p.stop.request_stop();
    if (p.phase == Catalogue::Phase::entered) {
      p.phase = Catalogue::Phase::leaving;
      p.record = std::make_shared<CatalogueRecord>();
      p.what = fmt::format("end phase: leave of {}", p.barrier->node());
      auto record = p.record;
      p.barrier->async_leave(-1ns, [record](std::error_code ec) { record->finish(ec); });
    }
  }
  return !c.multi_pending.empty() || !c.barrier_waits.empty() || !c.barrier_pending.empty() ||
         std::any_of(c.participants.begin(), c.participants.end(),
                     [](const auto& each) { return each.second.phase != Catalogue::Phase::idle; });
}

std::string Swarm::catalogue_waits() {
  if (!catalogue_) return {};
  std::string out;
  for (const auto& pending : catalogue_->multi_pending) {
    out += "\n    " + pending->what + "; on the server:";
    for (int index = 0; index < 3; ++index)
      if (std::count(pending->paths.begin(), pending->paths.end(), resource(index).path))
        for (const auto& node : world_.children(resource(index).path))
          out += fmt::format(" {}/{} (session {}{})", resource(index).path, node.name,
                             session_id_text(node.ephemeral_owner),
                             world_.session_alive(node.ephemeral_owner) ? "" : ", gone");
  }
  for (const auto& wait : catalogue_->barrier_waits) out += "\n    " + wait->what;
  for (const auto& change : catalogue_->barrier_pending) out += "\n    " + change->what;
  for (const auto& [key, p] : catalogue_->participants)
    if (p.phase != Catalogue::Phase::idle) out += "\n    " + p.what;
  return out;
}

void Swarm::stop_catalogue() {
  if (!catalogue_) return;
  for (auto& pending : catalogue_->multi_pending) pending->stop.request_stop();
  for (auto& wait : catalogue_->barrier_waits) wait->stop.request_stop();
  for (auto& [key, p] : catalogue_->participants) p.stop.request_stop();
  for (auto& [key, view] : catalogue_->views)
    if (view) view->stop();
}

}  // namespace zkr::swarm
