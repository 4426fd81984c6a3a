// SPDX-License-Identifier: Apache-2.0
// The invariants, checked after every step (check_step) and once everything is released
// (check_end). Each names what broke and what showed it; docs in tests/swarm/README.md.
//
// Some facts reach the test a moment after the library acts (a callback on its own thread, a
// watch on a node): those checks are "eventually" ones, retried for a short bound before they fail.
#include <algorithm>
#include <limits>
#include <map>
#include <thread>

#include <fmt/format.h>

#include <zkr/names.hpp>

#include "slots.hpp"

namespace zkr::swarm {

using namespace std::chrono_literals;

namespace {

std::string node_list(const std::vector<std::string>& nodes) {
  std::string out;
  for (const auto& node : nodes) out += (out.empty() ? "" : ", ") + node;
  return out;
}

std::string queue_text(const std::vector<ContenderName>& queue) {
  std::vector<std::string> names;
  for (const auto& each : queue) names.push_back(each.name);
  return node_list(names);
}

bool lost_now(const Hold& hold) {
  std::lock_guard lock(hold.box->mutex);
  return hold.box->held().lost();
}

}  // namespace

// ---- after every step ----

void Swarm::check_step() {
  for (const auto& refused : world_.take_oversized_requests()) {
    fail("oversized request", "",
         fmt::format("step {}: the server refused a request for its size and dropped the connection: {}",
                     step_index_, refused));
    return;
  }
  const auto now = Clock::now();
  for (const auto& pending : pending_) {
    if (!pending->prompt_by || now <= *pending->prompt_by) continue;
    std::lock_guard lock(pending->outcome->mutex);
    if (pending->outcome->done) continue;
    fail("hang", std::string(resource(pending->resource).name),
         fmt::format("{} did not end within its bound ({})", pending->what, pending->expectation));
    return;
  }
  check_exclusion();
  if (failed()) return;
  check_watch_count();
  if (failed()) return;
  check_losses_told();
  if (failed()) return;
  check_loss_policies();
  if (failed()) return;
  check_catalogue_step();
  if (failed()) return;
  check_asio();
  if (failed()) return;
  if (auto problem = start_window_problem(); !problem.empty()) {
    fail("start window", "", std::move(problem));
    return;
  }
  if (world_.faults_active()) return;
  eventually("metrics", world_.slack() / 2, [&] { return metrics_problem(false); });
  eventually("leader watch", world_.slack() / 2, [&] { return watch_problem(); });
  eventually("tree cache", world_.slack() / 2, [&] { return cache_problem(); });
  eventually("latch out of the election", world_.slack() / 2, [&] { return latch_problem(); });
  eventually("group", world_.slack() / 2, [&] { return group_problem(false); });
  eventually("barrier", world_.slack() / 2, [&] { return barrier_problem(); });
  eventually("waiter watches", world_.slack() / 2, [&] { return waiter_watch_problem(); });
}

// For what reaches the test a moment after the library acts: `problem` is asked again, once the
// world settled and the outcomes are harvested, until it finds nothing or `bound` passes.
void Swarm::eventually(std::string_view invariant, std::chrono::milliseconds bound,
                       const std::function<std::string()>& problem) {
  const auto deadline = Clock::now() + bound;
  for (;;) {
    auto found = problem();
    if (found.empty() || failed()) return;
    if (Clock::now() > deadline) return fail(std::string(invariant), "", std::move(found));
    std::this_thread::sleep_for(10ms);
    if (step_index_ < 0) world_.heal(true);  // the end phase: sessions left behind expire
    world_.settle([] { return true; }, world_.slack());
    harvest();
  }
}

// Never more believed holders whose node stands than the recipe allows. A believed holder whose
// node is gone (its session expired on the server while it was cut off) is an overlap the fence
// refuses: its node fails a FencedTransaction's check and its token is below the new holder's.
void Swarm::check_exclusion() {
  // Peers inside a section before the look at our holders and still inside, by the same ENTER,
  // after it: they held all the while (one that entered meanwhile may have been granted because
  // a holder of ours was lost meanwhile, which the harvest has not seen yet).
  auto peers_before = world_.peer_holders();
  struct Holder {
    std::string node;
    FencingToken token;
    bool alive = false;
    bool writer = false;
  };
  std::map<std::string, std::vector<Holder>> by_path;
  for (const auto& [node, grant] : grants_) {
    const auto& r = resource(grant.resource);
    if (grant.holds <= 0 || is_election(r.kind)) continue;
    const auto held = std::find_if(holds_.begin(), holds_.end(),
                                   [&](const Hold& h) { return h.node == node && !h.released && !h.destroyed; });
    if (held == holds_.end() || lost_now(*held)) continue;
    by_path[r.path].push_back({node, grant.token, world_.exists(node), r.kind == ResourceKind::write_lock});
  }
  for (auto& slot : slots_) {
    for (auto& [index, made] : slot->latches) {
      if (!made->latch->is_leader()) continue;
      const auto term = made->latch->leadership();
      if (term) by_path[resource(index).path].push_back({term.node_path(), term.token(), world_.exists(term.node_path())});
    }
    if (slot->selector) {
      std::optional<Leadership> running;
      {
        std::lock_guard lock(slot->selector->shared->mutex);
        running = slot->selector->shared->running;
      }
      if (running && !running->ended()) {
        const auto& r = *std::find_if(resources().begin(), resources().end(),
                                      [](const Resource& each) { return each.kind == ResourceKind::selector; });
        by_path[r.path].push_back({running->node_path(), running->token(), world_.exists(running->node_path())});
      }
    }
  }
  multi_lock_holders([&](const std::string& path, const std::string& node, FencingToken token) {
    by_path[path].push_back({node, token, world_.exists(node)});
  });
  for (const auto& peer : world_.peer_holders())
    if (std::find(peers_before.begin(), peers_before.end(), peer) != peers_before.end()) {
      by_path[peer.path].push_back({fmt::format("{} (a peer's client, by its log)", peer.who), {}, true});
      count("peer holders at a check");
    }
  for (const auto& [path, holders] : by_path) {
    const auto& r = *std::find_if(resources().begin(), resources().end(), [&](const Resource& each) { return each.path == path; });
    std::vector<std::string> alive;
    int alive_writers = 0;
    for (const auto& holder : holders)
      if (holder.alive) {
        alive.push_back(fmt::format("{} (token {})", holder.node, holder.token.to_string()));
        alive_writers += holder.writer ? 1 : 0;
      }
    const bool too_many = r.kind == ResourceKind::read_lock || r.kind == ResourceKind::write_lock
                              ? alive_writers > 0 && alive.size() > 1
                              : static_cast<int>(alive.size()) > r.max_leases;
    if (too_many)
      return fail(is_election(r.kind) ? "two leaders" : "two holders", std::string(r.name),
                  fmt::format("after step {}: {} believed holders of {} whose nodes stand (at most {}): {}", step_index_,
                              alive.size(), path, r.max_leases, node_list(alive)));
    if (holders.size() > alive.size() && holders.size() > 1) count("overlaps a fence refuses");
  }
}

// Watches do not pile up: however often a session reconnected, re-listed or gave up waiting, its
// client keeps a few watches per path (a listing's, a leader watch's, each waiter's on the node
// before it and the one before that, a holder's on its own node), not one more per round.
void Swarm::check_watch_count() {
  constexpr std::size_t kBase = 8;
  constexpr std::size_t kBasePerNode = 2;
  for (auto& slot : slots_) {
    const auto id = slot->session->id();
    if (id == 0) continue;
    for (std::size_t index = 0; index < resources().size(); ++index) {
      const auto& r = resources()[index];
      // Two per contender of this session on the path, on top of the base.
      std::size_t contenders = 0;
      for (const auto& pending : pending_)
        contenders += pending->slot == slot->slot && resource(pending->resource).path == r.path;
      for (const auto& hold : holds_)
        contenders += hold.slot == slot->slot && !hold.released && resource(hold.resource).path == r.path;
      contenders += multi_lock_contenders(slot->slot, r.path);
      // (path, whether it is a contender's node of a lock or semaphore)
      std::vector<std::pair<std::string, bool>> paths{{r.path, false}};
      for (const auto& node : world_.children(r.path))
        paths.emplace_back(r.path + "/" + node.name, node.ephemeral_owner != 0 && !is_election(r.kind));
      for (const auto& [path, contender_node] : paths) {
        const auto count = world_.watches(path, id);
        if (!count) return;  // the world cannot count them
        // On a contender's node, only the session's contenders' watches. The lock path, a layout's
        // folder (a Curator semaphore's leases/ and locks/, listed and watched) and an election's
        // nodes (whose participants are not counted as contenders here) get the base.
        const std::size_t most = (contender_node ? kBasePerNode : kBase) + 2 * contenders;
        if (*count > most)
          return fail("watch pile-up", std::string(r.name),
                      fmt::format("after step {}: session {} (s{}) keeps {} watches on {} (at most {} expected)",
                                  step_index_, session_id_text(id), slot->slot, *count, path, most));
      }
    }
  }
}

// No herd: in a lock's queue, once quiet, each waiter on a healthy session watches the node just
// ahead of it and, when that one waits too, the node that one waits for. Then a release wakes the
// next holder and the waiter after it, and nobody else: a waiter that watched the holder, or a
// node further ahead, would wake with every release before its turn, or miss the departure of the
// waiter ahead of it.
std::string Swarm::waiter_watch_problem() {
  for (const auto& r : resources()) {
    if (r.kind != ResourceKind::lock) continue;
    std::map<std::string, std::int64_t> owner;
    std::vector<ContenderName> queue;
    for (const auto& node : world_.children(r.path)) {
      if (auto name = parse_contender_name(node.name)) {
        owner[node.name] = node.ephemeral_owner;
        queue.push_back(*name);
      }
    }
    sort_by_sequence(queue);
    for (std::size_t index = 1; index < queue.size(); ++index) {
      const auto waiter_session = owner[queue[index].name];
      const auto slot = std::find_if(slots_.begin(), slots_.end(), [&](const auto& each) {
        return each->session && each->session->id() == waiter_session;
      });
      if (slot == slots_.end() || !healthy((*slot)->slot)) continue;
      for (std::size_t ahead = 1; ahead <= std::min<std::size_t>(index, 2); ++ahead) {
        const auto& watched = queue[index - ahead].name;
        const auto count = world_.watches(r.path + "/" + watched, waiter_session);
        if (!count) return {};  // the world cannot count them
        if (*count == 0)
          return fmt::format("after step {}: waiter {} (s{}) on {} does not watch {}, the node {} ahead of it "
                             "(queue: {})",
                             step_index_, queue[index].name, (*slot)->slot, r.path, watched,
                             ahead == 1 ? "just" : "two places", queue_text(queue));
      }
    }
  }
  return {};
}

// A loss is told: a believed holder whose node is gone, on a session that is connected and
// healthy, hears of it; a grant whose session was replaced is lost; a grant that is lost() had its
// on_lost callbacks run.
void Swarm::check_loss_policies() {
  for (const auto& slot : slots_) {
    if (!slot->session || config_.loss_policy[static_cast<std::size_t>(slot->slot)] != LossPolicy::on_disconnect)
      continue;
    if (const int told = slot->suspensions_told->load(); told > 0)
      return fail("loss policy", "",
                  fmt::format("after step {}: session s{} (LossPolicy::on_disconnect) said it was suspended {} "
                              "time(s): a dropped connection must lose its grants, not suspend them",
                              step_index_, slot->slot, told));
  }
}

void Swarm::check_losses_told() {
  eventually("loss not told", world_.slack() / 2, [&]() -> std::string {
    for (const auto& late : late_loss_callbacks_)
      if (!late.ran->load())
        return fmt::format("the on_lost callback registered at step {} ({}) on a grant already lost never ran",
                           late.step, late.what);
    std::erase_if(late_loss_callbacks_, [](const LateLossCallback& late) { return late.ran->load(); });
    // A term of leadership whose node is gone, on a healthy connected session, ends: the latch
    // stops being leader, the selector's leadership function is told to stop.
    for (auto& slot : slots_) {
      if (!healthy(slot->slot)) continue;
      for (auto& [index, made] : slot->latches) {
        if (!made->latch->is_leader()) continue;
        const auto term = made->latch->leadership();
        if (term && !term.ended() && !world_.exists(term.node_path()))
          return fmt::format("after step {}: the LeaderLatch of session s{} on {} is still leader, its node {} "
                             "gone from the server",
                             step_index_, slot->slot, resource(index).path, term.node_path());
      }
      if (!slot->selector) continue;
      std::optional<Leadership> running;
      {
        std::lock_guard lock(slot->selector->shared->mutex);
        running = slot->selector->shared->running;
      }
      if (running && !running->ended_token().stop_requested() && !world_.exists(running->node_path()))
        return fmt::format("after step {}: the LeaderSelector of session s{} runs its leadership function for a "
                           "term whose node {} is gone from the server, and the term has not ended",
                           step_index_, slot->slot, running->node_path());
    }
    for (auto& [node, grant] : grants_) {
      const auto& r = resource(grant.resource);
      if (is_election(r.kind)) continue;
      if (grant.loss) {
        if (grant.loss_watched && grant.told->load() == 0)
          return fmt::format("grant {} on {} is lost ({}) but its on_lost callback never ran", node, r.path,
                             to_string(*grant.loss));
        continue;
      }
      if (grant.holds <= 0) continue;
      auto* s = session(grant.slot);
      const auto& slot = *slots_[static_cast<std::size_t>(grant.slot)];
      if (!s || slot.epoch != grant.epoch || !usable(grant.slot)) continue;
      if (s->id() != grant.session_id && s->state() == SessionState::connected)
        return fmt::format("after step {}: grant {} on {} was made on session {} which has been replaced by {}, "
                           "and it is not lost",
                           step_index_, node, r.path, session_id_text(grant.session_id), session_id_text(s->id()));
      if (healthy(grant.slot) && !world_.exists(node))
        return fmt::format("after step {}: grant {} on {} is gone from the server while its session {} is "
                           "connected, and it is not lost",
                           step_index_, node, r.path, session_id_text(grant.session_id));
    }
    return {};
  });
}

// ---- grants ----

void Swarm::check_new_grant(const Grant& grant, const Pending& pending) {
  const auto& r = resource(grant.resource);
  for (const auto& [node, other] : grants_) {
    if (node == grant.node) continue;
    const auto& o = resource(other.resource);
    // Tokens grow per path: a node created after another was seen has a larger czxid; a term
    // begun after another ended comes later in the queue.
    if (o.path == r.path) {
      if (other.token == grant.token)
        return fail("token order", std::string(r.name),
                    fmt::format("{}: grant {} has token {}, as grant {} (step {}) has", pending.what, grant.node,
                                grant.token.to_string(), node, other.step));
      const bool before = is_election(r.kind) ? other.ended_event != 0 && other.ended_event < pending.started_event
                                               : other.observed_event < pending.started_event;
      if (before && grant.token <= other.token)
        return fail("token order", std::string(r.name),
                    fmt::format("{}: grant {} has token {}, not above token {} of grant {} (step {}), seen before "
                                "this acquisition began",
                                pending.what, grant.node, grant.token.to_string(), other.token.to_string(), node,
                                other.step));
    }
    // A Session's next session is used only once every grant of the one before is lost.
    if (other.slot == grant.slot && other.epoch == grant.epoch && other.session_id < grant.session_id &&
        other.holds > 0 && !is_election(o.kind)) {
      const auto held = std::find_if(holds_.begin(), holds_.end(),
                                     [&](const Hold& h) { return h.node == node && !h.released && !h.destroyed; });
      if (held != holds_.end() && !lost_now(*held))
        return fail("loss order", std::string(r.name),
                    fmt::format("{}: granted {} on session {} while grant {} of the same Session's earlier session "
                                "{} is not lost",
                                pending.what, grant.node, session_id_text(grant.session_id), node,
                                session_id_text(other.session_id)));
    }
  }
}

// Every loss has a cause the run injected on that session (or the session was closed).
void Swarm::check_loss_explained(Grant& grant) {
  const auto& r = resource(grant.resource);
  const auto& faults = faults_on_[grant.session_id];
  const int now = step_index_ >= 0 ? step_index_ : std::numeric_limits<int>::max();
  const bool restarted = std::any_of(restarts_.begin(), restarts_.end(), [&](const auto& window) {
    return window.first <= now && grant.step <= window.second;
  });
  auto any_of = [&](std::initializer_list<OpKind> kinds) {
    return restarted || std::any_of(kinds.begin(), kinds.end(), [&](OpKind kind) { return faults.count(kind) != 0; });
  };
  const auto& slot = *slots_[static_cast<std::size_t>(grant.slot)];
  bool explained = false;
  std::string_view expected;
  switch (*grant.loss) {
    case LossReason::session_closed:
      explained = slot.epoch != grant.epoch || !usable(grant.slot);
      expected = "close of its Session";
      break;
    case LossReason::node_deleted:
      explained = broken_nodes_.count(grant.node) || any_of({OpKind::fault_expire, OpKind::fault_partition});
      expected = "break_holder or expiry";
      break;
    case LossReason::connection_lost:
      if (config_.loss_policy[static_cast<std::size_t>(grant.slot)] != LossPolicy::on_disconnect)
        return fail("loss policy", std::string(r.name),
                    fmt::format("after step {}: grant {} on {} (session {}, LossPolicy::at_deadline) was lost "
                                "with connection_lost, the reason only on_disconnect gives",
                                step_index_, grant.node, r.path, session_id_text(grant.session_id)));
      // A freeze may outlast the C client's patience with a silent connection (2/3 of the timeout
      // since its latest answer): it drops and reconnects.
      explained = any_of({OpKind::fault_drop, OpKind::fault_lost_reply, OpKind::fault_failed_create,
                          OpKind::fault_expire, OpKind::fault_partition, OpKind::fault_pause, OpKind::fault_freeze,
                          OpKind::fault_move});
      expected = "fault that dropped its connection";
      break;
    case LossReason::session_lost:
      explained = any_of({OpKind::fault_expire, OpKind::fault_partition, OpKind::fault_pause, OpKind::fault_drop,
                          OpKind::fault_lost_reply, OpKind::fault_failed_create});
      expected = "expiry or cut";
      break;
  }
  if (!explained)
    fail("unexplained loss", std::string(r.name),
         fmt::format("after step {}: grant {} on {} (session {}, granted at step {}) was lost ({}) though the run "
                     "injected no {} on that session",
                     step_index_, grant.node, r.path, session_id_text(grant.session_id), grant.step,
                     to_string(*grant.loss), expected));
}

void Swarm::check_gate(const Hold& hold, bool admitted, FencingToken highest_before) {
  const auto& r = resource(hold.resource);
  const bool expected = hold.token.valid() && hold.token >= highest_before;
  count(admitted ? "gate writes admitted" : "gate writes refused");
  if (admitted != expected)
    return fail("fence gate", std::string(r.name),
                fmt::format("step {}: DurableFenceGate::admit({}, {}) returned {}, the highest admitted being {}",
                            step_index_, r.path, hold.token.to_string(), admitted, highest_before.to_string()));
  if (admitted) gate_->highest[r.path] = std::max(highest_before, hold.token);
}

// ---- metrics ----

// The per-lock series agree with what the test did on each session: acquisitions asked, grants,
// holds now, losses by reason, and the ways acquisitions ended without a grant; no series for a
// path nobody acquired; with every path labelled, nothing under "".
std::string Swarm::metrics_problem(bool final) {
  for (auto& slot_ptr : slots_) {
    auto& slot = *slot_ptr;
    if (slot.used_peer_semaphore && config_.excluded(Exclusion::peer_semaphore_metrics)) continue;
    const auto labels = config_.metrics_labels[static_cast<std::size_t>(slot.slot)];
    const SessionMetrics metrics = slot.session->metrics();
    std::map<std::string, SeriesCount> expected;
    std::map<std::string, std::int64_t> held, waiting;
    std::uint64_t grants_total = 0;
    for (const auto& [key, counted] : series_) {
      const auto& [slot_index, epoch, path] = key;
      if (slot_index != slot.slot || epoch != slot.epoch) continue;
      expected[path] = counted;
      grants_total += counted.grants;
    }
    for (const auto& [node, grant] : grants_) {
      const auto& r = resource(grant.resource);
      if (grant.slot != slot.slot || grant.epoch != slot.epoch || !is_acquirable(r.kind)) continue;
      if (grant.holds > 0 && !grant.loss) ++held[r.path];
    }
    for (const auto& pending : pending_)
      if (pending->slot == slot.slot && pending->epoch == slot.epoch && is_acquirable(resource(pending->resource).kind))
        ++waiting[resource(pending->resource).path];
    const auto where = fmt::format("session s{} (metrics labels {})", slot.slot, to_string(labels));
    const bool used_multi_lock = std::any_of(resources().begin(), resources().end(), [&](const Resource& r) {
      return multi_lock_used(slot.slot, slot.epoch, r.path);
    });
    if (!slot.used_elections && !used_multi_lock) {
      // The session's totals, whatever its labels: grants, and the acquisitions that timed out or
      // were cancelled (an empty optional of the throwing forms may be either).
      SeriesCount want;
      for (const auto& [path, counted] : expected) {
        want.timeouts += counted.timeouts;
        want.cancellations += counted.cancellations;
        want.gave_up += counted.gave_up;
      }
      if (labels == MetricsLabels::off && metrics.acquisitions != grants_total)
        return fmt::format("{}: SessionMetrics::acquisitions is {}, the test saw {} grants", where,
                           metrics.acquisitions, grants_total);
      if (metrics.acquire_timeouts + metrics.acquire_cancellations != want.timeouts + want.cancellations + want.gave_up ||
          metrics.acquire_timeouts < want.timeouts || metrics.acquire_cancellations < want.cancellations)
        return fmt::format("{}: SessionMetrics counts {} acquisitions timed out and {} cancelled; the test saw {} timed "
                           "out, {} cancelled and {} either{}",
                           where, metrics.acquire_timeouts, metrics.acquire_cancellations, want.timeouts,
                           want.cancellations, want.gave_up, final ? " (at the end)" : "");
    }
    if (labels == MetricsLabels::off) continue;
    std::set<std::string> recipe_paths;
    for (const auto& r : resources())
      if (is_acquirable(r.kind) || (labels == MetricsLabels::prefix && is_election(r.kind))) recipe_paths.insert(r.path);
    for (const auto& series : metrics.locks) {
      if (series.path.empty()) {
        const bool all_labelled = labels == MetricsLabels::prefix;
        if (all_labelled && (series.wait.count != 0 || series.held != 0 || series.waiting != 0)) {
          return fmt::format("{}: the unlabelled series (path \"\") counts {} grant(s), {} held, {} waiting, though "
                             "every recipe path has a label",
                             where, series.wait.count, series.held, series.waiting);
        }
        continue;
      }
      if (!recipe_paths.count(series.path)) {
        return fmt::format("{}: a series for {} ({} grant(s), {} held), a path no recipe of the test acquires",
                           where, series.path, series.wait.count, series.held);
      }
    }
    for (const auto& r : resources()) {
      if (!is_acquirable(r.kind) || r.kind == ResourceKind::write_lock) continue;  // rw: one path, one series
      if (multi_lock_used(slot.slot, slot.epoch, r.path)) continue;  // not modelled (catalogue.cpp)
      const auto& want = expected[r.path];
      LockMetrics got;
      for (const auto& series : metrics.locks)
        if (series.path == r.path) got = series;
      const auto gave_up_got = got.timeouts + got.cancellations;
      const auto gave_up_want = want.timeouts + want.cancellations + want.gave_up;
      const bool categories_agree = gave_up_got == gave_up_want && got.timeouts >= want.timeouts &&
                                    got.cancellations >= want.cancellations && got.busy == want.busy &&
                                    got.failures == want.failures;
      if (got.wait.count != want.grants || got.held != held[r.path] || got.waiting != waiting[r.path] ||
          got.losses != want.losses || !categories_agree) {
        return fmt::format(
            "{}: the series of {} says {} grant(s), {} held, {} waiting, losses {}/{}/{}/{}, ended without a grant "
            "{} timed out/{} cancelled/{} busy/{} failed; the test saw {} grant(s), {} held, {} waiting, losses "
            "{}/{}/{}/{}, {} timed out/{} cancelled/{} either/{} busy/{} failed{}",
            where, r.path, got.wait.count, got.held, got.waiting, got.losses[0], got.losses[1], got.losses[2],
            got.losses[3], got.timeouts, got.cancellations, got.busy, got.failures, want.grants, held[r.path],
            waiting[r.path], want.losses[0], want.losses[1], want.losses[2], want.losses[3], want.timeouts,
            want.cancellations, want.gave_up, want.busy, want.failures, final ? " (at the end)" : "");
      }
    }
  }
  return {};
}

// ---- leader watches ----

// A watch tells the leader as of its latest listing: once quiet, the first contender on the path.
std::string Swarm::watch_problem() {
  for (auto& slot : slots_) {
    if (!healthy(slot->slot)) continue;
    for (auto& [index, made] : slot->watches) {
      if (!made || made->stopped) continue;
      {
        std::lock_guard lock(made->shared->mutex);
        if (made->shared->stopped_inside || made->shared->calls == 0) continue;
      }
      const auto& r = resource(index);
      if (world_.peers_on(r.path)) continue;  // a peer's term comes and goes between any two looks
      std::vector<ContenderName> contenders;
      for (const auto& node : world_.children(r.path))
        if (auto name = parse_contender_name(node.name)) contenders.push_back(*name);
      sort_by_sequence(contenders);
      const std::string expected = contenders.empty() ? "nobody" : contenders.front().name;
      const auto told = made->watch->leader();
      const std::string actual = told ? told->node : "nobody";
      if (expected != actual)
        return fmt::format("after step {}: the LeaderWatch of session s{} on {} tells {} as leader; the first "
                           "contender on the server is {}",
                           step_index_, slot->slot, r.path, actual, expected);
    }
  }
  return {};
}

// ---- latches ----

// A LeaderLatch started and not closed takes part, on a healthy session, once the world is quiet:
// its session has a node in the election (after a lost term it joins again by itself,
// zkr/election.hpp). A start inside an open AcquisitionBatch joins when the batch is sent.
std::string Swarm::latch_problem() {
  for (auto& slot : slots_) {
    if (!healthy(slot->slot)) continue;
    const std::int64_t id = slot->session->id();
    for (auto& [index, made] : slot->latches) {
      if (!made->started || made->closed) continue;
      if (made->held_back_by >= 0) {
        const auto& actor = *actors_[static_cast<std::size_t>(made->held_back_by)];
        if (actor.batch && actor.batch_slot == slot->slot) continue;  // the batch is not sent yet
        made->held_back_by = -1;
      }
      {
        std::lock_guard lock(made->shared->mutex);
        if (made->shared->closed_by_listener) continue;
      }
      const auto& path = resource(index).path;
      const auto nodes = world_.children(path);
      if (std::none_of(nodes.begin(), nodes.end(), [&](const ServerNode& node) { return node.ephemeral_owner == id; }))
        return fmt::format("after step {}: the LeaderLatch of session s{} on {} was started and never closed, but its "
                           "session has no node in the election",
                           step_index_, slot->slot, path);
    }
  }
  return {};
}

// ---- tree caches ----

// A tree cache on a healthy session, once the world is quiet, has loaded, is not stale, and mirrors
// the server's tree: the same nodes, each with the same owner session and the same last change of
// its data (mzxid; the root's is not compared: the world reads it no stat).
std::string Swarm::cache_problem() {
  for (auto& slot : slots_) {
    if (!slot->cache || slot->cache->error() || !healthy(slot->slot)) continue;
    if (!slot->cache->initialized())
      return fmt::format("after step {}: the TreeCache of session s{} has not finished loading", step_index_,
                         slot->slot);
    if (slot->cache->stale())
      return fmt::format("after step {}: the TreeCache of session s{} stays stale on a healthy connection",
                         step_index_, slot->slot);
    // Peers' nodes come and go all the time: the mirror is compared on the others.
    const bool peers = std::any_of(resources().begin(), resources().end(),
                                   [&](const Resource& r) { return world_.peers_on(r.path); });
    auto peer_owned = [&](std::int64_t owner) { return peers && owner != 0 && !own_sessions_.count(owner); };
    // As compared: the root's mzxid left out (the world reads it no stat), and that of the counter
    // the peers write every second or so (its changes come between any two looks).
    const auto peer_counter = world_.peer_counter_path();
    auto mirrored = [&](const std::string& path, CachedNode node) {
      if (path == kRoot || (!peer_counter.empty() && path == peer_counter)) node.second = 0;
      return node;
    };
    std::map<std::string, CachedNode> server;
    if (world_.exists(std::string(kRoot))) server[std::string(kRoot)] = {0, 0};
    for (std::vector<std::string> todo{std::string(kRoot)}; !todo.empty();) {
      const std::string parent = todo.back();
      todo.pop_back();
      for (const auto& node : world_.children(parent)) {
        if (peer_owned(node.ephemeral_owner)) continue;
        const auto path = parent + "/" + node.name;
        server[path] = mirrored(path, {node.ephemeral_owner, node.mzxid});
        todo.push_back(path);
      }
    }
    std::map<std::string, CachedNode> cached;
    for (const auto& [path, node] : slot->cache->snapshot())
      if (!peer_owned(node.stat.ephemeral_owner))
        cached[path] = mirrored(path, {node.stat.ephemeral_owner, node.stat.mzxid});
    if (cached == server && slot->cache_told) {
      // What the callback was told adds up to the mirror once it caught up.
      if (const auto pending = slot->cache->metrics().events_pending; pending > 0)
        return fmt::format("after step {}: the TreeCache of session s{} still has {} events waiting for its callback",
                           step_index_, slot->slot, pending);
      std::lock_guard lock(slot->cache_told->mutex);
      std::map<std::string, CachedNode> told;
      for (const auto& [path, node] : slot->cache_told->nodes)
        if (!peer_owned(node.first)) told[path] = mirrored(path, node);
      if (told != cached)
        return fmt::format("after step {}: what the TreeCache of session s{} told its callback differs from its "
                           "mirror",
                           step_index_, slot->slot);
    }
    if (cached == server) continue;
    std::vector<std::string> differences;
    for (const auto& [path, node] : server)
      if (auto found = cached.find(path); found == cached.end())
        differences.push_back(path + " (server only)");
      else if (found->second.first != node.first)
        differences.push_back(path + " (other owner)");
      else if (found->second.second != node.second)
        differences.push_back(fmt::format("{} (data of change {}, the server's {})", path, found->second.second,
                                          node.second));
    for (const auto& [path, node] : cached)
      if (!server.contains(path)) differences.push_back(path + " (cache only)");
    return fmt::format("after step {}: the TreeCache of session s{} differs from the server: {}", step_index_,
                       slot->slot, node_list(differences));
  }
  return {};
}

// ---- once everything is released ----

void Swarm::check_orphans() {
  std::vector<std::string> parents;
  for (const auto& r : resources()) {
    parents.push_back(r.path);
    if (r.semaphore_layout == SemaphoreLayout::curator_v2 && r.kind == ResourceKind::semaphore) {
      parents.push_back(r.path + "/leases");
      parents.push_back(r.path + "/locks");
    }
    if (r.semaphore_layout == SemaphoreLayout::kazoo && r.kind == ResourceKind::semaphore)
      parents.push_back(r.path + "-__lock__");
  }
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  eventually("orphan node", world_.slack(), [&]() -> std::string {
    std::vector<std::string> found;
    for (const auto& parent : parents)
      for (const auto& node : world_.children(parent))
        if (node.ephemeral_owner != 0 && world_.session_alive(node.ephemeral_owner))
          found.push_back(fmt::format("{}/{} (session {})", parent, node.name, session_id_text(node.ephemeral_owner)));
    if (found.empty()) return {};
    return fmt::format("once everything was released and healed, {} node(s) remain: {}", found.size(),
                       node_list(found));
  });
}

void Swarm::check_end() {
  for (const auto& refused : world_.take_oversized_requests())
    return fail("oversized request", "",
                fmt::format("end phase: the server refused a request for its size and dropped the connection: {}",
                            refused));
  check_orphans();
  eventually("group", world_.slack(), [&] { return group_problem(true); });
  eventually("metrics", world_.slack(), [&] { return metrics_problem(true); });
  check_counter();
}

// ---- the start window ----

bool Swarm::window_exempt(const Pending& pending) const {
  if (!is_lock_like(resource(pending.resource).kind)) return false;  // creates elsewhere
  // One that began on an earlier session id starts again on the new one without a slot.
  return !pending.window_counted || pending.started_session == 0 ||
         pending.started_session != slots_[static_cast<std::size_t>(pending.slot)]->session->id();
}

// SessionOptions::max_starting_acquisitions: no more acquisitions the window counts start at once
// than it allows. Where the world can tell (a paused connection on the fake keeps creates
// unanswered at a quiet point), the session's unanswered creates of lock nodes are at most the
// window plus one for each acquisition it does not count that may still have one out: those
// begun since nothing was unanswered (all that are pending, after a new session), those that ended
// since, and a multi-lock's paths (Contender keeps the slot through the create, its recovery and
// its first listing: recipes/contender_queue.cpp).
std::string Swarm::start_window_problem() {
  std::vector<std::string> parents;
  for (std::size_t r = 0; r < resources().size(); ++r)
    if (is_lock_like(resources()[r].kind)) parents.push_back(resources()[r].path);
  for (auto& slot_ptr : slots_) {
    auto& slot = *slot_ptr;
    const auto window = config_.start_window.at(static_cast<std::size_t>(slot.slot));
    const auto id = slot.session->id();
    if (window == 0 || id == 0) continue;
    const auto unanswered = world_.unanswered_creates(id, parents);
    if (!unanswered) return {};
    if (*unanswered == 0) {
      // Drained only on a connection that is up: one down holds the creates its contenders will send.
      if (world_.connection_healthy(*slot.session)) {
        slot.window_exempt_ended = 0;
        slot.drained_session = id;
        slot.drained_before_id = next_id_;
      }
      continue;
    }
    std::size_t exempt = slot.window_exempt_ended + multi_lock_pending_paths(slot.slot, slot.epoch);
    std::size_t counted = 0;
    for (const auto& pending : pending_) {
      if (pending->slot != slot.slot || pending->epoch != slot.epoch) continue;
      const bool may_create = id != slot.drained_session || pending->id >= slot.drained_before_id;
      if (window_exempt(*pending)) exempt += may_create;
      else if (pending->window_counted) ++counted;
    }
    if (*unanswered > window + exempt)
      return fmt::format("step {}: s{} has {} creates of lock nodes unanswered, more than its start window of {} "
                         "allows beside the {} acquisition(s) it does not count ({} pending that it counts)",
                         step_index_, slot.slot, *unanswered, window, exempt, counted);
  }
  return {};
}

}  // namespace zkr::swarm
