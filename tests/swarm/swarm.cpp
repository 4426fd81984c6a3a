// SPDX-License-Identifier: Apache-2.0
// The run: setup, one step per operation (carried out, then a quiet point, then the outcomes
// harvested and the invariants checked), the end phase (everything healed and released, every
// wait must end), and a teardown that never hangs.
#include <algorithm>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "slots.hpp"

namespace zkr::swarm {

using namespace std::chrono_literals;

std::uint64_t next_event() {
  static std::atomic<std::uint64_t> counter{0};
  return ++counter;
}

Swarm::Swarm(SwarmConfig config, World& world)
    : config_(std::move(config)), world_(world), random_(config_.seed * 0x9e3779b97f4a7c15ull + 1) {
  const char* trace = std::getenv("ZKR_SWARM_TRACE");
  tracing_ = trace && *trace && std::string_view(trace) != "0";
}

Swarm::~Swarm() = default;

namespace {
char outcome_code(std::error_code ec, bool granted) {
  if (granted) return 'g';
  if (ec == errc::timed_out) return 't';
  if (ec == errc::cancelled) return 'c';
  if (ec == errc::would_block) return 'b';
  return 'f';
}
}  // namespace

std::string to_text(const Schedule& schedule) {
  std::string out;
  for (const auto& step : schedule) {
    if (!out.empty()) out += ' ';
    out += std::to_string(step.gap_ms);
    for (std::size_t i = 0; i < step.outcomes.size(); ++i)
      out += fmt::format("{}{}{}", i == 0 ? ':' : ',', step.outcomes[i].first, step.outcomes[i].second);
  }
  return out;
}

Schedule schedule_from_text(std::string_view text) {
  Schedule out;
  std::size_t at = 0;
  auto fail = [&](std::string_view why) {
    throw std::invalid_argument(fmt::format("schedule '{}': {} at character {}", text, why, at));
  };
  auto number = [&] {
    const auto start = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    if (at == start) fail("a number expected");
    return std::stoi(std::string(text.substr(start, at - start)));
  };
  while (at < text.size()) {
    if (text[at] == ' ') {
      ++at;
      continue;
    }
    StepTiming step;
    step.gap_ms = number();
    if (at < text.size() && text[at] == ':') {
      do {
        ++at;
        const int op = number();
        if (at >= text.size() || std::string_view("gtcbf").find(text[at]) == std::string_view::npos)
          fail("an outcome (g, t, c, b or f) expected");
        step.outcomes.emplace_back(op, text[at++]);
      } while (at < text.size() && text[at] == ',');
    }
    if (at < text.size() && text[at] != ' ') fail("a space expected");
    out.push_back(std::move(step));
  }
  return out;
}

Schedule keep_steps(const Schedule& schedule, const std::vector<std::size_t>& kept) {
  std::vector<int> renumbered(schedule.size(), -1);
  for (std::size_t i = 0; i < kept.size(); ++i)
    if (kept[i] < schedule.size()) renumbered[kept[i]] = static_cast<int>(i);
  Schedule out;
  std::size_t next = 0;
  for (auto index : kept) {
    if (index >= schedule.size()) break;
    StepTiming step;
    for (; next <= index; ++next) step.gap_ms += schedule[next].gap_ms;
    for (const auto& [op, how] : schedule[index].outcomes)
      if (op >= 0 && static_cast<std::size_t>(op) < renumbered.size() && renumbered[op] >= 0)
        step.outcomes.emplace_back(renumbered[op], how);
    out.push_back(std::move(step));
  }
  return out;
}

RunResult Swarm::run(std::vector<Op> ops, bool generate, int steps, const Schedule& follow) {
  RunResult result;
  try {
    setup();
  } catch (const std::exception& e) {
    fail("setup", "", e.what());
  }
  const int total = generate ? steps : static_cast<int>(ops.size());
  Clock::time_point last_start{};
  for (step_index_ = 0; !failed() && step_index_ < total; ++step_index_) {
    if (generate) ops.push_back(next_op());
    const Op op = ops[static_cast<std::size_t>(step_index_)];
    const auto index = static_cast<std::size_t>(step_index_);
    if (index < follow.size() && index > 0)
      std::this_thread::sleep_until(last_start + std::chrono::milliseconds(follow[index].gap_ms));
    const auto now = Clock::now();
    schedule_.push_back(
        {index == 0 ? 0 : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now - last_start).count()),
         {}});
    last_start = now;
    trace("step {}: {}", step_index_, describe(op));
    bool carried_out = false;
    try {
      carried_out = step(op);
    } catch (const std::exception& e) {
      fail("exception", std::string(resource(op.resource).name), fmt::format("{} threw: {}", describe(op), e.what()));
    }
    if (!carried_out) {
      ++result.skipped;
      trace("  (nothing to act on)");
    }
    ++result.steps_run;
    world_.heal(false);
    for (int slot : world_.take_slow_reconnects()) {
      last_fault_ = LastFault{step_index_, slot, op.kind, true};
      count("faults: slow after the reconnect");
    }
    world_.settle([] { return true; }, world_.slack());
    if (tracing_)
      for (auto& slot : slots_)
        trace("  s{}: {} session {}{}", slot->slot, to_string(slot->session->state()), session_id_text(slot->session->id()),
              world_.connection_healthy(*slot->session) ? "" : " (connection not healthy)");
    harvest();
    if (!failed()) check_step();
  }
  if (!failed()) {
    step_index_ = -1;
    end_phase();
  }
  teardown();
  if (generate && failure_ && failure_->step >= 0)
    ops.resize(static_cast<std::size_t>(failure_->step) + 1);  // what came after played no part
  if (schedule_.size() > ops.size()) schedule_.resize(ops.size());
  for (std::size_t i = 0; i < std::min(follow.size(), schedule_.size()) && result.divergence.empty(); ++i)
    if (follow[i].outcomes != schedule_[i].outcomes)
      result.divergence = fmt::format("step {}: recorded '{}', ran '{}'", i, to_text(Schedule{follow[i]}),
                                      to_text(Schedule{schedule_[i]}));
  result.failure = failure_;
  result.ops = std::move(ops);
  result.schedule = std::move(schedule_);
  result.counts = counts_;
  return result;
}

void Swarm::fail(std::string invariant, std::string resource_name, std::string message) {
  if (failure_) return;  // the first failure is the one to report
  failure_ = Failure{std::move(invariant), std::move(resource_name), std::move(message), step_index_};
}

std::string describe(const Op& op) {
  const auto& what = info(op.kind);
  std::string on;
  switch (what.family) {
    case OpFamily::acquisition: {
      const auto& r = resource(op.resource);
      on = fmt::format(" {} {}{}, owner data class {}, timeout class {}{}{}", r.name, r.path,
                       r.reentrant ? " (reentrant)" : "", size_class(op), timeout_class(op),
                       variant(op) ? ", handler drops the grant" : "",
                       op.kind == OpKind::async_acquire && unstoppable(op) ? ", no stop token"
                       : through_asio(op)                                   ? ", through zkr::asio"
                                                                            : "");
      break;
    }
    case OpFamily::hold:
      on = fmt::format(" hold #{} on {}{}", rank(op), resource(op.resource).name,
                       op.kind == OpKind::move                                ? fmt::format(" to actor {}", destination(op))
                       : op.kind == OpKind::fenced_commit && hold_variant(op) ? " (released first)"
                                                                              : "");
      break;
    case OpFamily::election: on = fmt::format(" {}", resource(op.resource).name); break;
    case OpFamily::fault: on = fmt::format(" for {} steps", fault_steps(op)); break;
    default: break;
  }
  return fmt::format("[{}] actor {} on s{}: {}{}", to_text(op), op.actor, op.session, what.name, on);
}

// ---- setup ----

void Swarm::setup() {
  world_.ensure_persistent(std::string(kRoot));
  for (const auto& r : resources()) {
    world_.ensure_persistent(data_node(r));
    // An election path that exists from the start: a leader watch on it never has to poll.
    if (is_election(r.kind)) world_.ensure_persistent(r.path);
  }
  for (int i = 0; i < config_.actors; ++i) actors_.push_back(std::make_unique<ActorState>());
  for (int slot = 0; slot < config_.sessions; ++slot) {
    slots_.push_back(std::make_unique<SessionSlot>());
    slots_.back()->slot = slot;
    open_slot(slot);
  }
  gate_ = std::make_unique<GateState>();
  gate_->gate = std::make_unique<DurableFenceGate>(gate_->file());
}

void Swarm::open_slot(int slot) {
  auto& current = slots_[static_cast<std::size_t>(slot)];
  auto next = std::make_unique<SessionSlot>();
  next->slot = slot;
  next->epoch = current->epoch + 1;
  next->earlier = std::move(current->earlier);
  if (current->session) next->earlier.push_back(std::move(current));
  next->session = world_.open_session(slot, config_.session_options(slot));
  next->suspensions_watch = next->session->on_state_change([told = next->suspensions_told](SessionState state) {
    if (state == SessionState::suspended) told->fetch_add(1);
  });
  current = std::move(next);
}

Session* Swarm::session(int slot) {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return nullptr;
  return slots_[static_cast<std::size_t>(slot)]->session.get();
}

bool Swarm::usable(int slot) const {
  const auto& s = *slots_[static_cast<std::size_t>(slot)];
  return !s.closed && !*s.closed_by_listener;
}

bool Swarm::healthy(int slot) {
  auto* s = session(slot);
  return s && usable(slot) && s->state() == SessionState::connected && world_.connection_healthy(*s) &&
         !world_.faults_active();
}

// ---- one step ----

bool Swarm::step(const Op& op) {
  if (op.actor < 0 || op.actor >= config_.actors || op.session < 0 || op.session >= config_.sessions ||
      op.resource < 0 || op.resource >= static_cast<int>(resources().size()))
    return false;
  switch (info(op.kind).family) {
    case OpFamily::acquisition: return acquire(op);
    case OpFamily::hold: return hold_op(op);
    case OpFamily::election: return election_op(op);
    case OpFamily::batch: return batch_op(op);
    case OpFamily::control: return control_op(op);
    case OpFamily::session: return session_op(op);
    case OpFamily::fault: return fault_op(op);
    case OpFamily::counter: return counter_op(op);
    case OpFamily::catalogue: return catalogue_op(op);
  }
  return false;
}

void Swarm::settle_after(int actor) {
  world_.settle(
      [&] { return actor < 0 || actors_[static_cast<std::size_t>(actor)]->actor.idle(); }, world_.slack());
}

// ---- sessions and faults ----

bool Swarm::session_op(const Op& op) {
  auto& s = *slots_[static_cast<std::size_t>(op.session)];
  switch (op.kind) {
    case OpKind::gate_reopen: return gate_reopen();
    case OpKind::session_close: {
      if (!usable(op.session)) return false;
      auto& actor = actors_[static_cast<std::size_t>(op.actor)]->actor;
      if (!actor.idle()) return false;
      s.closed = true;
      Session* target = s.session.get();
      actor.post([target](std::stop_token) { target->close(); });
      // Closing blocks until the handle is closed: a bounded wait like any other.
      if (!actor.wait_idle(world_.slack() * 4))
        fail("hang", "", fmt::format("{}: Session::close() did not return", describe(op)));
      settle_after(op.actor);
      return true;
    }
    case OpKind::session_reopen:
      if (usable(op.session)) return false;
      open_slot(op.session);
      return true;
    case OpKind::session_close_on_change: {
      if (!usable(op.session)) return false;
      Session* target = s.session.get();
      auto flag = s.closed_by_listener;
      s.close_on_change = target->on_state_change([target, flag](SessionState state) {
        if (state == SessionState::closed) return;
        flag->store(true);
        target->close();  // from the callback thread: returns at once
      });
      return true;
    }
    default: return false;
  }
}

bool Swarm::fault_op(const Op& op) {
  if (!world_.supports(op.kind) || !usable(op.session)) return false;
  Session* target = session(op.session);
  if (op.kind == OpKind::fault_break) {
    // An operator breaks the holder of the resource, from another session (zkr::break_holder).
    const auto& r = resource(op.resource);
    if (!is_lock_like(r.kind)) return false;
    const int from = (op.session + 1) % config_.sessions;
    if (!healthy(from)) return false;
    auto& actor = actors_[static_cast<std::size_t>(op.actor)]->actor;
    if (!actor.idle()) return false;
    auto broken = std::make_shared<std::string>();
    Session* operator_session = session(from);
    const std::string path = r.path;
    const bool done = actor.run(
        [operator_session, path, broken] {
          try {
            const auto rows = list_contenders(*operator_session, path);
            for (const auto& row : rows)
              if (row.holds && break_holder(*operator_session, path, row)) {
                *broken = path + "/" + row.node;
                return;
              }
          } catch (const Error&) {
            // The path is gone, or the session trouble: nothing broken.
          }
        },
        world_.slack() * 2);
    if (!done) fail("hang", std::string(r.name), fmt::format("{}: list_contenders/break_holder did not return", describe(op)));
    if (!broken->empty()) {
      broken_nodes_.insert(*broken);
      count("faults: break");
    }
    settle_after(op.actor);
    return true;
  }
  // The sessions it may cost their grants, named before it strikes (one may be replaced at once).
  if (op.kind == OpKind::fault_restart) {
    // Sessions made while the server restarts may go with it too: the window excuses them.
    restarts_.push_back({step_index_, step_index_ + fault_steps(op) + 2});
  } else {
    faults_on_[target->id()].insert(op.kind);
  }
  const auto rechecks_before = target->metrics().deadline_rechecks;
  world_.inject(op.kind, op.session, *target, fault_steps(op));
  count(fmt::format("faults: {}", info(op.kind).name.substr(6)));
  settle_after(-1);
  if (target->metrics().deadline_rechecks > rechecks_before) count("faults: freeze past the deadline (rechecked)");
  return true;
}

// ---- harvesting ----

void Swarm::harvest() {
  for (auto& slot : slots_)
    if (const auto id = slot->session->id(); id != 0) own_sessions_.insert(id);
  // An expiry by the server's clock is a cut that lasted: the causes of the losses it brings.
  for (auto session : world_.take_expired_by_time()) {
    faults_on_[session].insert(OpKind::fault_partition);
    count("faults: expired by time");
  }
  for (auto it = pending_.begin(); it != pending_.end() && !failed();) {
    bool done = false;
    {
      std::lock_guard lock((*it)->outcome->mutex);
      done = (*it)->outcome->done;
    }
    if (!done) {
      ++it;
      continue;
    }
    auto pending = std::move(*it);
    it = pending_.erase(it);
    auto& actor = *actors_[static_cast<std::size_t>(pending->actor)];
    if (actor.blocking_pending == pending->id) actor.blocking_pending = 0;
    if (auto& slot = *slots_[static_cast<std::size_t>(pending->slot)]; slot.epoch == pending->epoch && window_exempt(*pending))
      ++slot.window_exempt_ended;
    harvest_outcome(*pending);
  }
  // Losses: read from a hold of each grant still held.
  for (auto& hold : holds_) {
    if (failed()) return;
    if (hold.destroyed || hold.released) continue;
    auto& grant = grants_.at(hold.node);
    if (grant.loss) continue;
    std::optional<LossReason> reason;
    {
      std::lock_guard lock(hold.box->mutex);
      reason = hold.box->held().loss_reason();
    }
    if (!reason) continue;
    note_loss(grant, *reason);
    // Holds whose on_lost callback releases them are released by now (or in a moment).
    for (auto& other : holds_)
      if (other.node == grant.node && other.release_on_loss && !other.destroyed) let_go(other);
  }
  harvest_elections();
  harvest_catalogue();
}

void Swarm::note_loss(Grant& grant, LossReason reason) {
  grant.loss = reason;
  trace("  grant {} lost ({})", grant.node, to_string(reason));
  if (grant.ended_event == 0) grant.ended_event = grant.told->load() ? grant.told->load() : next_event();
  count(fmt::format("losses: {}", to_string(reason)));
  if (is_acquirable(resource(grant.resource).kind))
    ++series_[{grant.slot, grant.epoch, resource(grant.resource).path}].losses[static_cast<std::size_t>(reason)];
  check_loss_explained(grant);
}

// A hold was released (by the test, a handler or a callback). A loss before the release still
// counts; none comes after it.
void Swarm::let_go(Hold& hold, std::optional<LossReason> lost_before) {
  if (hold.released) return;
  hold.released = true;
  auto& grant = grants_.at(hold.node);
  if (!grant.loss && !hold.destroyed) {
    std::lock_guard lock(hold.box->mutex);
    lost_before = hold.box->held().loss_reason();
  }
  if (!grant.loss && lost_before) note_loss(grant, *lost_before);
  if (--grant.holds == 0 && grant.ended_event == 0) grant.ended_event = next_event();
}

void Swarm::harvest_outcome(Pending& pending) {
  std::shared_ptr<HoldBox> box;
  std::error_code ec;
  std::string unexpected;
  {
    std::lock_guard lock(pending.outcome->mutex);
    box = pending.outcome->box;
    ec = pending.outcome->ec;
    unexpected = pending.outcome->unexpected;
  }
  const auto& r = resource(pending.resource);
  trace("  outcome of step {} ({}): {}{}", pending.step, info(pending.kind).name, ec ? ec.message() : "ok",
        box ? " (granted)" : "");
  if (step_index_ >= 0 && !schedule_.empty()) {
    bool held = false;
    if (box) {
      std::lock_guard lock(box->mutex);
      held = static_cast<bool>(box->held());
    }
    schedule_.back().outcomes.emplace_back(pending.step, outcome_code(ec, held));
  }
  if (!unexpected.empty()) {
    fail("exception", std::string(r.name), fmt::format("{}: {}", pending.what, unexpected));
    return;
  }
  if (ec == errc::internal_error) {
    fail("exception", std::string(r.name), fmt::format("{}: internal error: {}", pending.what, ec.message()));
    return;
  }
  bool granted = false;
  {
    std::lock_guard lock(box ? box->mutex : pending.outcome->mutex);
    granted = box && box->held();
  }
  if (granted) {
    note_grant(pending, box);
    return;
  }
  if (pending.release_in_handler && !ec) {
    // The handler dropped its grant at once: a grant, released.
    note_grant(pending, box);
    return;
  }
  // No grant.
  count(fmt::format("ended without a grant: {}", ec ? ec.message() : "empty"));
  if (pending.expect_refusal) {
    if (ec != errc::would_deadlock)
      fail("reentrancy", std::string(r.name),
           fmt::format("{}: expected errc::would_deadlock ({}), got {}", pending.what, pending.expectation,
                       ec ? ec.message() : "no error and no grant"));
    return;
  }
  if (ec == errc::would_deadlock) {
    // Refused before any contender was started: nothing for the metrics.
    if (!pending.thread_may_hold)
      fail("reentrancy", std::string(r.name),
           fmt::format("{}: refused with would_deadlock though this thread holds no lock on {}", pending.what, r.path));
    return;
  }
  if (pending.expect_grant && !pending.stop_requested)
    fail("hang", std::string(r.name),
         fmt::format("{}: ended without a grant ({}) though {}", pending.what, ec ? ec.message() : "empty",
                     pending.expectation));
  // The series counts what the library decided for a contender it started.
  auto& series = series_[{pending.slot, pending.epoch, r.path}];
  ++series.asked;
  if (!ec) ++series.gave_up;  // an empty optional: timed out or cancelled
  else if (ec == errc::timed_out) ++series.timeouts;
  else if (ec == errc::cancelled) ++series.cancellations;
  else if (ec == errc::would_block) ++series.busy;
  else ++series.failures;
}

// ---- the end phase ----

void Swarm::end_phase() {
  // Peers leave first (their sessions close, their nodes go), so that every wait of ours can end.
  if (auto problem = world_.stop_peers(); !problem.empty()) return fail("peer", "", std::move(problem));
  world_.heal(true);
  // Batches go out (from the driver when their actor is stuck in a wait).
  for (auto& actor : actors_) {
    if (!actor->batch) continue;
    auto batch = std::move(actor->batch);
    if (actor->actor.idle()) actor->actor.run([&batch] { batch.reset(); }, world_.slack());
    else batch.reset();
    actor->batch_slot = -1;
  }
  world_.settle([] { return true; }, world_.slack());
  close_elections();
  // Release everything, again and again as the waits that were queued are granted, until no
  // acquisition is pending.
  const auto deadline = Clock::now() + world_.slack() * 2;
  for (;;) {
    harvest();
    if (failed()) return;
    for (auto& hold : holds_)
      if (!hold.released && !hold.destroyed) release_hold(hold, false);
    world_.heal(true);
    world_.settle([] { return true; }, world_.slack());
    harvest();
    if (failed()) return;
    const bool holds_left =
        std::any_of(holds_.begin(), holds_.end(), [](const Hold& h) { return !h.released && !h.destroyed; });
    const bool catalogue_left = end_catalogue();
    if (pending_.empty() && !holds_left && !catalogue_left) break;
    if (Clock::now() > deadline) {
      std::string waits;
      for (const auto& pending : pending_) {
        std::string nodes;
        for (const auto& node : contender_nodes(pending->resource)) nodes += " " + node;
        waits += fmt::format("\n    {} (started at step {}, {}); on the server:{}", pending->what, pending->step,
                             pending->held_back ? "held back by a batch" : "sent", nodes.empty() ? " nothing" : nodes);
      }
      const auto catalogue = catalogue_waits();
      fail("hang", pending_.empty() ? "" : std::string(resource(pending_.front()->resource).name),
           fmt::format("after everything was released and healed, {} acquisition(s) never ended:{}{}", pending_.size(),
                       waits, catalogue.empty() ? "" : "\n  and of the catalogue's:" + catalogue));
      return;
    }
    std::this_thread::sleep_for(10ms);
  }
  check_end();
}

// Stops every wait, closes every session and lets every thread go, bounded: an actor that cannot
// be stopped is abandoned (reported as a hang) rather than waited for.
void Swarm::teardown() {
  for (auto& actor : actors_) actor->actor.cancel();
  for (auto& pending : pending_) pending->stop.request_stop();
  stop_catalogue();
  for (auto& actor : actors_) {
    if (!actor->batch) continue;
    actor->batch->send();  // from the driver: its actor may be the one stuck
  }
  try {
    close_elections();
  } catch (...) {
  }
  for (auto& slot : slots_)
    if (slot->session) slot->session->close();
  bool abandoned = false;
  for (std::size_t i = 0; i < actors_.size(); ++i) {
    auto& actor = actors_[i]->actor;
    if (!actor.wait_idle(world_.slack() * 4)) {
      fail("hang", "", fmt::format("teardown: actor {} did not return from its operation after cancel and close", i));
      actor.abandon();
      abandoned = true;
    }
  }
  if (abandoned) {
    // A thread still inside the library uses the actors, sessions and recipes: leave them to it
    // (the run has failed anyway).
    for (auto& slot : slots_) keep_for_process(std::move(slot));
    for (auto& actor : actors_) keep_for_process(std::move(actor));
    for (auto& hold : holds_) keep_for_process(std::move(hold.box));
    for (auto& pending : pending_) keep_for_process(std::move(pending));
    keep_for_process(std::move(catalogue_));
    keep_for_process(std::move(asio_));
    slots_.clear();
    actors_.clear();
  }
  for (auto& actor : actors_) actor->batch.reset();
  holds_.clear();
  catalogue_.reset();
  grants_.clear();
  pending_.clear();
  for (auto& slot : slots_) {
    slot->cache.reset();
    slot->watches.clear();
    slot->selector.reset();
    slot->latches.clear();
    slot->earlier.clear();
  }
  slots_.clear();
  actors_.clear();
  gate_.reset();
}

}  // namespace zkr::swarm
