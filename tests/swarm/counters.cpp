// SPDX-License-Identifier: Apache-2.0
// The shared counter in the swarm: every few steps idle actors call the counter of the run, under
// whatever faults are injected then: one add, or a burst of up to three calls in flight at once on
// different actors and sessions (add, set, a read followed by a compare_and_set of what it read,
// read). Each call is recorded with the moments it was made and returned. At the end the counter
// is read once more, and the history must be linearizable as one register: some order of the
// calls, each placed between its call and its return, explains every value returned. A call whose
// outcome is unknown (zk_errc::connection_loss, a lost reply) may have taken effect, once, at any
// moment after it was made; every other failure must have written nothing. On real servers with
// peers, the counter is the one Curator peers increment too (World::peer_counter_path): their
// logged calls join the history, and the value before the run's first call is unknown.
#include <unistd.h>

#include <atomic>
#include <bitset>
#include <unordered_set>

#include <zkr/shared_counter.hpp>

#include "slots.hpp"

namespace zkr::swarm {

namespace {
std::atomic<int> runs_with_a_counter{0};
constexpr int kCounterEvery = 8;  // one step in this many, when an actor is idle
constexpr std::size_t kMostCalls = 512;  // calls checked (a run makes far fewer)
constexpr std::uint64_t kMostSearchSteps = 2'000'000;  // the order search gives up past this
using Clock = std::chrono::steady_clock;
}  // namespace

// One call on the counter, as its actor saw it.
struct Swarm::CounterCall {
  enum class Kind { add, set, compare_and_set, read };
  Kind kind = Kind::add;
  std::int64_t operand = 0;  // add: the delta; set: the value; compare_and_set: the desired value
  std::int64_t expected = 0;  // compare_and_set: the value it expects (what the read before it returned)
  std::string what;
  std::mutex mutex;
  bool done = false;
  Clock::time_point called, returned;
  std::error_code ec;
  std::int64_t result = 0;  // add: the value written; read: the value read
  bool swapped = false;     // compare_and_set: the value was as expected and was written
  std::string unexpected;   // an exception the API does not promise
};

// arg < 4: one add of arg + 1 (the stored regressions use these). Past that, a burst: bits 2-3 the
// calls beside the first (0-2), bits 4-5, 6-7 and 8-9 each call's kind (add, set, read then
// compare_and_set, read).
std::optional<Op> Swarm::counter_op_for_step() const {
  if (step_index_ % kCounterEvery != kCounterEvery - 1) return std::nullopt;
  for (int a = 0; a < config_.actors; ++a) {
    if (!actors_[static_cast<std::size_t>(a)]->actor.idle()) continue;
    const auto round = static_cast<std::uint32_t>(step_index_ / kCounterEvery);
    Op op;
    op.kind = OpKind::counter_add;
    op.actor = a;
    op.session = static_cast<int>(round % static_cast<std::uint32_t>(config_.sessions));
    op.arg = round % 3 == 0 ? static_cast<int>(round % 4) : static_cast<int>((round * 2654435761u >> 7) % 1020) + 4;
    return op;
  }
  return std::nullopt;
}

bool Swarm::counter_op(const Op& op) {
  if (!session(op.session) || !usable(op.session)) return false;
  if (!actors_[static_cast<std::size_t>(op.actor)]->actor.idle()) return false;
  // The peers' counter where they run (its value when the run begins is theirs), else one of the
  // run's own.
  if (counter_path_.empty()) counter_path_ = world_.peer_counter_path();
  if (counter_path_.empty()) counter_path_ = fmt::format("{}/counter-{}-{}", kRoot, ::getpid(), ++runs_with_a_counter);
  const bool burst = op.arg >= 4;
  const int calls = burst ? 1 + ((op.arg >> 2) & 3) % 3 : 1;
  std::vector<int> busy;
  for (int i = 0, actor = op.actor; i < calls; ++i) {
    // The next idle actor, from the op's own; each call on a session of its own where there are enough.
    while (actor < op.actor + config_.actors && !actors_[static_cast<std::size_t>(actor % config_.actors)]->actor.idle())
      ++actor;
    if (actor >= op.actor + config_.actors) break;
    const int slot = (op.session + i) % config_.sessions;
    Session* target = session(slot);
    if (!target || !usable(slot)) continue;
    const auto kind = burst ? static_cast<CounterCall::Kind>((op.arg >> (4 + 2 * i)) & 3) : CounterCall::Kind::add;
    const std::int64_t operand = kind == CounterCall::Kind::set ? 100 * (step_index_ + 1) + i
                                 : burst                         ? 1 + (step_index_ + i) % 4
                                                                 : 1 + (op.arg & 3);
    const auto what = fmt::format("step {} {} (call {} of {} on s{})", step_index_, describe(op), i + 1, calls, slot);
    auto make_call = [&](CounterCall::Kind call_kind, std::string_view name) {
      auto call = std::make_shared<CounterCall>();
      call->kind = call_kind;
      call->operand = operand;
      call->what = fmt::format("{}: {}", what, name);
      counter_calls_.push_back(call);
      return call;
    };
    std::shared_ptr<CounterCall> first, second;
    switch (kind) {
      case CounterCall::Kind::add: first = make_call(kind, fmt::format("add {}", operand)); break;
      case CounterCall::Kind::set: first = make_call(kind, fmt::format("set {}", operand)); break;
      case CounterCall::Kind::read: first = make_call(kind, "read"); break;
      case CounterCall::Kind::compare_and_set:
        first = make_call(CounterCall::Kind::read, "read");
        second = make_call(kind, fmt::format("compare_and_set(what it read, +{})", operand));
        break;
    }
    // Posted, not waited for: a paused connection holds the call until the fault heals.
    const int actor_index = actor % config_.actors;
    busy.push_back(actor_index);
    actors_[static_cast<std::size_t>(actor_index)]->actor.post(
        [target, first, second, path = counter_path_, bound = world_.slack()](std::stop_token stop) {
          auto run = [&](CounterCall& call, auto&& body) {
            std::error_code ec;
            std::string unexpected;
            const auto called = Clock::now();
            try {
              SharedCounter counter(*target, path, {.timeout = bound});
              body(counter, ec);
            } catch (const std::exception& e) {
              unexpected = e.what();
            }
            const auto returned = Clock::now();
            std::lock_guard lock(call.mutex);
            call.called = called;
            call.returned = returned;
            call.ec = ec;
            call.unexpected = std::move(unexpected);
            call.done = true;
            return !ec && call.unexpected.empty();
          };
          const bool first_ok = run(*first, [&](SharedCounter& counter, std::error_code& ec) {
            switch (first->kind) {
              case CounterCall::Kind::add: first->result = counter.add(first->operand, stop, ec); break;
              case CounterCall::Kind::set: counter.set(first->operand, stop, ec); break;
              case CounterCall::Kind::read: first->result = counter.read(stop, ec).value; break;
              case CounterCall::Kind::compare_and_set: break;
            }
          });
          if (!second) return;
          if (!first_ok) {
            // Not made: it writes nothing and tells nothing.
            std::lock_guard lock(second->mutex);
            second->ec = make_error_code(errc::cancelled);
            second->done = true;
            return;
          }
          second->expected = first->result;
          run(*second, [&](SharedCounter& counter, std::error_code& ec) {
            second->swapped = counter.compare_and_set(second->expected, second->expected + second->operand, stop, ec);
          });
        });
    ++actor;
  }
  if (busy.empty()) return false;
  world_.settle(
      [&] {
        return std::all_of(busy.begin(), busy.end(),
                           [&](int a) { return actors_[static_cast<std::size_t>(a)]->actor.idle(); });
      },
      world_.slack());
  return true;
}

namespace {

// A call as the linearizability search sees it.
struct RegisterCall {
  Swarm::CounterCall* call = nullptr;
  bool known = true;  // its outcome is known (it returned); else it may have taken effect, or not
  Clock::time_point called, returned;
};

// Whether some order of `calls` explains every known result (Wing and Gong's search, remembering
// the states already refuted). The deepest prefix found goes to `deepest`, for the report.
class RegisterHistory {
 public:
  // `initial`: the register's value before the first call; nullopt when it is not known (peers
  // wrote it before), so that the first call that tells a value fixes it.
  RegisterHistory(std::vector<RegisterCall> calls, std::optional<std::int64_t> initial)
      : calls_(std::move(calls)), initial_(initial) {}

  // true, false, or nullopt when the search ran out of steps.
  std::optional<bool> linearizable() {
    const bool found = search(std::bitset<kMostCalls>(), initial_);
    if (!found && steps_ > kMostSearchSteps) return std::nullopt;
    return found;
  }
  const std::vector<std::size_t>& deepest() const { return deepest_; }

 private:
  using Kind = Swarm::CounterCall::Kind;

  using Value = std::optional<std::int64_t>;  // nullopt: not known yet

  bool search(const std::bitset<kMostCalls>& placed, Value value) {
    if (++steps_ > kMostSearchSteps) return false;
    if (path_.size() > deepest_.size()) deepest_ = path_;
    // Done once every call that returned is placed; the unknown ones may never have taken effect.
    Clock::time_point first_return = Clock::time_point::max();
    bool all_known_placed = true;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      if (placed[i] || !calls_[i].known) continue;
      all_known_placed = false;
      first_return = std::min(first_return, calls_[i].returned);
    }
    if (all_known_placed) return true;
    if (!refuted_.insert(key(placed, value)).second) return false;
    for (std::size_t i = 0; i < calls_.size(); ++i) {
      // Only a call made before every unplaced call returned can come next.
      if (placed[i] || calls_[i].called > first_return) continue;
      const auto next = apply(calls_[i], value);
      if (!next) continue;
      auto with = placed;
      with.set(i);
      path_.push_back(i);
      if (search(with, *next)) return true;
      path_.pop_back();
    }
    return false;
  }

  // The value after `c` runs on `value`, or nullopt if what it returned says it did not run there.
  // On a value not known yet, a call that tells one fixes it; the others leave it unknown.
  static std::optional<Value> apply(const RegisterCall& c, Value value) {
    const auto& call = *c.call;
    switch (call.kind) {
      case Kind::add:
        if (!value) return c.known ? Value(call.result) : Value();
        if (c.known && call.result != *value + call.operand) return std::nullopt;
        return *value + call.operand;
      case Kind::set: return Value(call.operand);
      case Kind::read:
        if (value && call.result != *value) return std::nullopt;
        return Value(call.result);
      case Kind::compare_and_set:
        if (!value) return c.known && call.swapped ? Value(call.expected + call.operand) : Value();
        if (c.known && call.swapped != (*value == call.expected)) return std::nullopt;
        return *value == call.expected ? call.expected + call.operand : *value;
    }
    return std::nullopt;
  }

  struct State {
    std::bitset<kMostCalls> placed;
    Value value;
    bool operator==(const State&) const = default;
  };
  struct StateHash {
    std::size_t operator()(const State& s) const {
      return std::hash<std::bitset<kMostCalls>>()(s.placed) ^ std::hash<Value>()(s.value) * 0x9e3779b97f4a7c15ULL;
    }
  };
  static State key(const std::bitset<kMostCalls>& placed, Value value) { return {placed, value}; }

  std::vector<RegisterCall> calls_;
  Value initial_;
  std::unordered_set<State, StateHash> refuted_;
  std::vector<std::size_t> path_, deepest_;
  std::uint64_t steps_ = 0;
};

}  // namespace

void Swarm::check_counter() {
  if (counter_calls_.empty()) return;
  auto all_done = [&] {
    return std::all_of(counter_calls_.begin(), counter_calls_.end(), [](const auto& call) {
      std::lock_guard lock(call->mutex);
      return call->done;
    });
  };
  world_.settle(all_done, world_.slack() * 4);
  int acknowledged = 0, unknown = 0;
  for (const auto& call : counter_calls_) {
    std::lock_guard lock(call->mutex);
    if (!call->done) return fail("hang", "counter", call->what + ": did not end once everything was healed");
    if (!call->unexpected.empty()) return fail("exception", "counter", call->what + ": threw " + call->unexpected);
    if (call->ec == condition::bad_input || call->ec == errc::internal_error)
      return fail("exception", "counter", fmt::format("{}: {}", call->what, call->ec.message()));
    acknowledged += !call->ec;
    unknown += call->ec == zk_errc::connection_loss;
  }
  count("counter calls acknowledged", acknowledged);
  count("counter calls of unknown outcome", unknown);
  // Read on the first slot whose session is connected, from an idle actor: the last call.
  auto last = std::make_shared<CounterCall>();
  last->kind = CounterCall::Kind::read;
  last->what = "end phase: read";
  bool read = false;
  for (int slot = 0; slot < config_.sessions && !read; ++slot) {
    Session* reader = session(slot);
    if (!reader || !usable(slot) || reader->state() != SessionState::connected) continue;
    for (auto& actor : actors_) {
      if (!actor->actor.idle()) continue;
      std::error_code ec;
      last->called = Clock::now();
      if (!actor->actor.run([&] { last->result = SharedCounter(*reader, counter_path_).read({}, ec).value; },
                            world_.slack() * 2))
        return fail("hang", "counter", "end phase: reading the counter did not return");
      last->returned = Clock::now();
      if (ec) return fail("counter", "counter", fmt::format("end phase: reading the counter failed: {}", ec.message()));
      read = true;
      break;
    }
  }
  if (!read) count("counter: no final read (no connected session at the end)");

  std::vector<RegisterCall> history;
  for (const auto& call : counter_calls_) {
    const bool known = !call->ec;
    if (!known && (call->ec != zk_errc::connection_loss || call->kind == CounterCall::Kind::read)) continue;
    history.push_back({call.get(), known, call->called, known ? call->returned : Clock::time_point::max()});
  }
  if (read) history.push_back({last.get(), true, last->called, last->returned});
  // The peers' calls on it, from the moment the run's first call was made to the end: each a known
  // add of 1 (with a possible unseen one beside it when unsure), or one of unknown outcome. What
  // they wrote before is the register's initial value, not known to the test.
  const bool with_peers = counter_path_ == world_.peer_counter_path();
  std::vector<std::shared_ptr<CounterCall>> peer_calls;
  if (with_peers) {
    const auto from = counter_calls_.front()->called;
    const auto until = read ? last->returned : Clock::now();
    auto add_of_one = [&](const PeerCounterCall& peer, bool known) {
      auto call = std::make_shared<CounterCall>();
      call->kind = CounterCall::Kind::add;
      call->operand = 1;
      call->result = peer.written.value_or(0);
      call->what = known ? fmt::format("peer {}: add 1, wrote {}", peer.who, call->result)
                         : fmt::format("peer {}: add 1, outcome unknown", peer.who);
      peer_calls.push_back(call);
      history.push_back({call.get(), known, peer.called, known ? peer.returned : Clock::time_point::max()});
    };
    for (const auto& peer : world_.peer_counter_calls()) {
      if (peer.returned < from || peer.called > until) continue;
      if (peer.written) add_of_one(peer, true);
      if (!peer.written || peer.unsure) add_of_one(peer, false);
    }
    count("counter calls of peers checked", static_cast<int>(peer_calls.size()));
  }
  if (history.size() > kMostCalls) return count("counter history unchecked (too long)");
  RegisterHistory check(history, with_peers ? std::nullopt : std::optional<std::int64_t>(0));
  const auto linearizable = check.linearizable();
  if (!linearizable) return count("counter history undecided (the search ran out of steps)");
  if (*linearizable) return;
  // What the deepest order could not go on with, for the report.
  std::string order;
  for (const auto index : check.deepest()) order += "\n      " + history[index].call->what;
  std::string rest;
  std::vector<bool> in_order(history.size());
  for (const auto index : check.deepest()) in_order[index] = true;
  const auto start = history.front().called;
  for (std::size_t i = 0; i < history.size(); ++i) {
    if (in_order[i]) continue;
    const auto& call = *history[i].call;
    const auto at = [&](Clock::time_point t) {
      return t == Clock::time_point::max()
                 ? std::string("never")
                 : fmt::format("{} ms", std::chrono::duration_cast<std::chrono::milliseconds>(t - start).count());
    };
    rest += fmt::format("\n      {} (called at {}, returned {}; {})", call.what, at(history[i].called),
                        at(history[i].returned),
                        !history[i].known                                  ? "outcome unknown"
                        : call.kind == CounterCall::Kind::compare_and_set ? (call.swapped ? "swapped" : "not swapped")
                        : call.kind == CounterCall::Kind::set             ? "done"
                                                                          : fmt::format("returned {}", call.result));
  }
  fail("counter", "counter",
       fmt::format("no order of the {} counter calls explains what they returned (a register: each call between "
                   "its call and its return). The longest order found:{}\n    and the calls it could not place:{}",
                   history.size(), order.empty() ? " none" : order, rest));
}

}  // namespace zkr::swarm
