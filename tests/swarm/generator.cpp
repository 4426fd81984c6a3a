// SPDX-License-Identifier: Apache-2.0
// The next operation: drawn from the run's random generator and shaped by the model, so that most
// operations act on something (a hold that exists, an idle actor, the session of an open batch)
// and the crossings come often: reacquiring what a thread holds, moving holds, acquiring inside a
// batch, waiting inside it, large owner data, fenced writes from every kind of hold.
#include <algorithm>

#include "slots.hpp"

namespace zkr::swarm {

namespace {

template <typename Random>
int weighted(Random& random, std::initializer_list<int> weights) {
  int total = 0;
  for (int w : weights) total += w;
  int roll = static_cast<int>(random() % static_cast<std::uint64_t>(total));
  int index = 0;
  for (int w : weights) {
    if (roll < w) return index;
    roll -= w;
    ++index;
  }
  return index - 1;
}

}  // namespace

// A hold's rank among its owner's holds on its resource, newest first, as find_hold counts them
// (released ones too when `counts_released`): what a hold operation's arg names it by.
int Swarm::hold_rank(const Hold& hold, bool counts_released) const {
  int rank = 0;
  for (auto it = holds_.rbegin(); it != holds_.rend() && &*it != &hold; ++it)
    if (it->owner == hold.owner && it->resource == hold.resource && !it->destroyed && (counts_released || !it->released))
      ++rank;
  return rank;
}

Op Swarm::next_op() {
  Op op = [&] {
    // None of these draws from random_: the other steps stay the seed's. The moves right after a
    // fault come first, as their moment does not come again.
    if (auto more = sequel_op_for_step()) return *more;
    if (auto next = follow_up_for_step()) return *next;
    if (auto add = counter_op_for_step()) return *add;
    if (auto other = catalogue_op_for_step()) return *other;  // multi-locks, groups, barriers
    return drawn_op();
  }();
  if (info(op.kind).family == OpFamily::fault) last_fault_ = {step_index_, op.session, op.kind, false, fault_steps(op)};
  // The first operation into a pause: its sequel goes on while the pause holds (for the steps
  // after the fault's own but the last).
  if (last_fault_ && last_fault_->step == step_index_ - 1 && last_fault_->kind == OpKind::fault_pause &&
      !last_fault_->slow_reconnect && op.session == last_fault_->session) {
    const int holds_for = last_fault_->steps - 2;
    const auto window = static_cast<int>(config_.start_window.at(static_cast<std::size_t>(op.session)));
    if (op.kind == OpKind::async_acquire && unstoppable(op))
      sequel_ = Sequel{op.session, std::min(window == 0 ? 2 : window, holds_for), OpKind::async_acquire, 1 << 5};
    else if (op.kind == OpKind::group_join)
      sequel_ = Sequel{op.session, std::min(1, holds_for), OpKind::group_leave, op.arg};
  }
  return op;
}

std::optional<Op> Swarm::sequel_op_for_step() {
  if (!sequel_ || sequel_->left <= 0) return std::nullopt;
  --sequel_->left;
  std::mt19937_64 random(config_.seed * 0x94d049bb133111ebull + static_cast<std::uint64_t>(step_index_) * 0xbf58476d1ce4e5b9ull);
  Op op;
  op.kind = sequel_->kind;
  op.session = sequel_->session;
  op.arg = sequel_->arg;
  op.actor = static_cast<int>(random() % static_cast<std::uint64_t>(config_.actors));
  for (int tried = 0; tried < config_.actors; ++tried) {
    if (actors_[static_cast<std::size_t>(op.actor)]->actor.idle()) break;
    op.actor = (op.actor + 1) % config_.actors;
  }
  if (op.kind != OpKind::async_acquire) return op;
  op.resource = static_cast<int>(random() % 5);  // a lock or the read/write lock: what the window counts
  return op;
}

// Right after a fault, what a user does next on the same session, while the fault still holds
// (a lost reply or a dropped connection keeps it down until the fault's steps are over): a new
// acquisition into the fault, a release, a leave, a close, the session expired on top, or another
// session's connection dropped too (a reconnect storm). After a fault that waits for a create (a
// lost reply, a failed create), a create. Right after the world brought a connection back slow
// (World::take_slow_reconnects), a leave of the session's member, a release or a close. A uniform
// draw reaches these orders only rarely; here every fault meets every one of them. Drawn from the
// seed and the step number alone, so that the other steps stay the seed's.
std::optional<Op> Swarm::follow_up_for_step() const {
  if (!last_fault_ || last_fault_->step != step_index_ - 1) return std::nullopt;
  std::mt19937_64 random(config_.seed * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(step_index_) * 0x2545f4914f6cdd1dull);
  auto pick = [&](int n) { return static_cast<int>(random() % static_cast<std::uint64_t>(n)); };
  const bool waits_for_a_create =
      last_fault_->kind == OpKind::fault_lost_reply || last_fault_->kind == OpKind::fault_failed_create;
  if (pick(100) >= (last_fault_->slow_reconnect ? 90 : waits_for_a_create ? 80 : 60)) return std::nullopt;
  Op op;
  op.session = last_fault_->session;
  op.actor = pick(config_.actors);
  for (int tried = 0; tried < config_.actors; ++tried) {
    if (actors_[static_cast<std::size_t>(op.actor)]->actor.idle()) break;
    op.actor = (op.actor + 1) % config_.actors;
  }
  // The newest hold on the session that is still held, as the generator names holds.
  auto on_newest_hold = [&](OpKind kind) -> std::optional<Op> {
    for (auto it = holds_.rbegin(); it != holds_.rend(); ++it) {
      if (it->slot != op.session || it->released || it->destroyed) continue;
      Op hold_op = op;
      hold_op.kind = kind;
      hold_op.actor = it->owner;
      hold_op.resource = it->resource;
      hold_op.arg = (hold_rank(*it, false) & 7) | (op.actor << 3);
      return hold_op;
    }
    return std::nullopt;
  };
  // An acquisition into the fault: async ones of any resource, timed ones of the first five.
  auto acquisition = [&](OpKind kind) {
    op.kind = kind;
    op.resource = pick(kind == OpKind::async_acquire ? 8 : 5);
    op.arg = pick(4) << 2;
    return op;
  };
  auto group_join = [&] {
    op.kind = OpKind::group_join;
    op.arg = pick(16);
    op.arg |= member_data_draw(pick(100)) << 4;
    return op;
  };
  if (last_fault_->kind == OpKind::fault_pause && !last_fault_->slow_reconnect) {
    // Into the pause, with a sequel (next_op): a burst of acquisitions the start window counts,
    // which it must hold back past its limit while the first ones' creates wait for their
    // answers; or a join, whose member leaves while its create waits.
    switch (pick(4)) {
      case 0: case 1:
        op.kind = OpKind::async_acquire;
        op.resource = pick(5);
        op.arg = 1 << 5;
        return op;
      case 2: return group_join();
      default: break;
    }
  }
  if (last_fault_->slow_reconnect) {
    // The connection is back and the replies to what the client sent on it are not: the user
    // gives up now (a leave, a release, a close), before the cleanup after the lost reply is done.
    switch (pick(20)) {
      case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 10: case 11: case 12:
        if (auto which = member_to_leave(op.session)) {
          op.kind = OpKind::group_leave;
          op.arg = *which;
          return op;
        }
        return on_newest_hold(OpKind::release);
      case 13: case 14: return on_newest_hold(OpKind::release);
      case 15: return on_newest_hold(OpKind::destroy);
      case 16: case 17:
        op.kind = OpKind::session_close;
        return op;
      default:
        op.kind = OpKind::double_leave;
        op.arg = pick(16);
        return op;
    }
  }
  if (waits_for_a_create) {
    // The fault waits for the session's next create: make one, of a member or of a lock. A lost
    // reply also waits for the next read of the barrier: a wait for ever, now and then.
    switch (pick(last_fault_->kind == OpKind::fault_lost_reply ? 5 : 4)) {
      case 0: return acquisition(OpKind::async_acquire);
      case 1: return acquisition(OpKind::try_acquire_for);
      case 4:
        op.kind = OpKind::barrier_wait;
        op.arg = 0;  // for ever
        return op;
      default: return group_join();
    }
  }
  switch (pick(10)) {
    case 0: return acquisition(OpKind::async_acquire);
    case 1: return acquisition(OpKind::try_acquire_for);
    case 2: return on_newest_hold(OpKind::release);
    case 3: return on_newest_hold(OpKind::destroy);
    case 4:
      op.kind = OpKind::group_leave;
      op.arg = pick(16);
      return op;
    case 5: return group_join();
    case 6:
      op.kind = OpKind::session_close;
      return op;
    case 7:
      op.kind = OpKind::fault_expire;
      op.resource = pick(5);
      op.arg = pick(4);
      return op;
    case 8:
      op.kind = OpKind::fault_drop;
      op.session = (op.session + 1 + pick(std::max(1, config_.sessions - 1))) % config_.sessions;
      op.resource = pick(5);
      op.arg = pick(4);
      return op;
    default:
      op.kind = OpKind::double_leave;
      op.arg = pick(16);
      return op;
  }
}

Op Swarm::drawn_op() {
  auto pick = [&](int n) { return n <= 0 ? 0 : static_cast<int>(random_() % static_cast<std::uint64_t>(n)); };
  auto chance = [&](int percent) { return pick(100) < percent; };
  std::vector<int> idle;
  for (int a = 0; a < config_.actors; ++a)
    if (actors_[static_cast<std::size_t>(a)]->actor.idle()) idle.push_back(a);
  const int any_actor = pick(config_.actors);
  const int actor = idle.empty() ? any_actor : idle[static_cast<std::size_t>(pick(static_cast<int>(idle.size())))];
  auto& state = *actors_[static_cast<std::size_t>(actor)];
  const int slot = state.batch && chance(75) ? state.batch_slot : pick(config_.sessions);
  Op op;
  op.actor = actor;
  op.session = slot;

  // An actor waiting inside its open batch for what it started there.
  const bool prompt_asyncs = std::any_of(pending_.begin(), pending_.end(), [&](const auto& pending) {
    return pending->actor == actor && !pending->blocking && pending->prompt_by && !pending->held_back;
  });
  if (!idle.empty() && prompt_asyncs && chance(state.batch ? 45 : 15)) {
    op.kind = OpKind::await_async;
    return op;
  }

  switch (weighted(random_, {34, 26, 12, 7, 5, 2, 12})) {
    case 0: {  // acquisition
      // The thread asks again for a lock it holds (reentrancy, would_deadlock).
      std::vector<const Hold*> mine;
      for (const auto& hold : holds_)
        if (hold.owner == actor && hold.blocking && !hold.moved && !hold.released && !hold.destroyed) mine.push_back(&hold);
      if (!mine.empty() && chance(40)) {
        const Hold& hold = *mine[static_cast<std::size_t>(pick(static_cast<int>(mine.size())))];
        op.kind = std::array{OpKind::acquire, OpKind::try_acquire, OpKind::try_acquire_for,
                             OpKind::try_acquire_for_ec}[static_cast<std::size_t>(pick(4))];
        op.session = hold.slot;
        op.resource = chance(80) ? hold.resource : pick(5);
        op.arg = (hold.lock_object & 3) | (pick(4) << 2);
        return op;
      }
      op.resource = weighted(random_, {3, 3, 3, 2, 2, 2, 2, 2});
      op.kind = state.batch ? (chance(70) ? OpKind::async_acquire : OpKind::try_acquire_for)
                            : std::array{OpKind::acquire, OpKind::try_acquire, OpKind::try_acquire_for,
                                         OpKind::try_acquire_for_ec,
                                         OpKind::async_acquire}[static_cast<std::size_t>(weighted(random_, {18, 14, 20, 10, 38}))];
      const int size = weighted(random_, {55, 15, 18, 12});
      op.arg = size | (pick(4) << 2) | ((chance(15) ? 1 : 0) << 4);
      if (op.kind == OpKind::async_acquire && timeout_class(op) == 0 && chance(50)) op.arg |= 1 << 5;
      // Every other one of the rest through zkr::asio (no draw of its own: the seeds stay as they were).
      if (op.kind == OpKind::async_acquire && timeout_class(op) == 0 && !unstoppable(op) && step_index_ % 2 == 0)
        op.arg |= 1 << 6;
      return op;
    }
    case 1: {  // a hold
      std::vector<const Hold*> candidates;
      for (const auto& hold : holds_)
        if (!hold.destroyed) candidates.push_back(&hold);
      if (candidates.empty()) break;
      // Newer holds more often.
      const int n = static_cast<int>(candidates.size());
      const Hold& hold = *candidates[static_cast<std::size_t>(n - 1 - std::min(pick(n), pick(n)))];
      op.actor = hold.owner;
      op.session = hold.slot;
      op.resource = hold.resource;
      op.kind = std::array{OpKind::release, OpKind::release_and_confirm, OpKind::destroy, OpKind::move,
                           OpKind::release_on_loss, OpKind::fenced_commit,
                           OpKind::gate_admit}[static_cast<std::size_t>(weighted(random_, {22, 8, 8, 20, 8, 18, 16}))];
      const bool any_hold = op.kind == OpKind::fenced_commit || op.kind == OpKind::gate_admit;
      if (hold.released && !any_hold) op.kind = chance(50) ? OpKind::fenced_commit : OpKind::gate_admit;
      const bool counts_released = op.kind == OpKind::fenced_commit || op.kind == OpKind::gate_admit;
      op.arg = (hold_rank(hold, counts_released) & 7) | (pick(config_.actors) << 3) | ((chance(30) ? 1 : 0) << 6);
      return op;
    }
    case 2: {  // elections
      const int which = weighted(random_, {60, 25, 15});
      if (which == 0) {
        op.resource = 8 + pick(2);
        op.kind = std::array{OpKind::latch_start, OpKind::latch_close, OpKind::latch_resign, OpKind::latch_wait,
                             OpKind::latch_async_wait, OpKind::latch_fenced,
                             OpKind::latch_close_on_gain}[static_cast<std::size_t>(weighted(random_, {30, 8, 10, 15, 10, 17, 5}))];
      } else if (which == 1) {
        op.resource = 10;
        op.kind = std::array{OpKind::selector_start, OpKind::selector_close, OpKind::selector_yield,
                             OpKind::selector_close_inside}[static_cast<std::size_t>(weighted(random_, {40, 8, 37, 15}))];
      } else {
        op.resource = 8 + pick(3);
        op.kind = std::array{OpKind::watch_start, OpKind::watch_stop,
                             OpKind::watch_stop_inside}[static_cast<std::size_t>(weighted(random_, {60, 25, 15}))];
      }
      op.arg = pick(4) << 2;
      // A quarter of the watch starts and stops are a tree cache's (no draw of its own, so that the
      // seeds drawn before caches existed draw the same operations otherwise).
      if (op.kind == OpKind::watch_start && op.arg >> 2 == 3) op.kind = OpKind::cache_start;
      if (op.kind == OpKind::watch_stop && op.arg >> 2 == 3) op.kind = OpKind::cache_stop;
      return op;
    }
    case 3:  // batches
      op.kind = !state.batch ? OpKind::batch_open : chance(60) ? OpKind::batch_send : OpKind::batch_destroy;
      if (state.batch) op.session = state.batch_slot;
      return op;
    case 4: {  // cancel a wait
      std::vector<int> waiting;
      for (int a = 0; a < config_.actors; ++a) {
        const bool has = actors_[static_cast<std::size_t>(a)]->blocking_pending != 0 ||
                         std::any_of(pending_.begin(), pending_.end(), [&](const auto& p) { return p->actor == a; });
        if (has) waiting.push_back(a);
      }
      if (waiting.empty()) break;
      op.kind = OpKind::cancel;
      op.actor = waiting[static_cast<std::size_t>(pick(static_cast<int>(waiting.size())))];
      op.arg = pick(2);
      return op;
    }
    case 5: {  // sessions and the resource's restarts
      for (int s = 0; s < config_.sessions; ++s)
        if (!usable(s) && chance(70)) {
          op.kind = OpKind::session_reopen;
          op.session = s;
          return op;
        }
      op.kind = std::array{OpKind::gate_reopen, OpKind::session_close,
                           OpKind::session_close_on_change}[static_cast<std::size_t>(weighted(random_, {60, 25, 15}))];
      return op;
    }
    default: {  // faults
      std::vector<OpKind> kinds;
      for (auto kind : {OpKind::fault_lost_reply, OpKind::fault_failed_create, OpKind::fault_drop, OpKind::fault_expire,
                        OpKind::fault_partition, OpKind::fault_pause, OpKind::fault_break, OpKind::fault_restart,
                        OpKind::fault_freeze, OpKind::fault_move})
        if (world_.supports(kind)) kinds.push_back(kind);
      op.kind = kinds[static_cast<std::size_t>(pick(static_cast<int>(kinds.size())))];
      op.resource = pick(5);
      op.arg = pick(4);
      return op;
    }
  }
  // Nothing for the family drawn: an acquisition.
  op.kind = OpKind::async_acquire;
  op.resource = pick(8);
  op.arg = pick(4) << 2;
  return op;
}

}  // namespace zkr::swarm
