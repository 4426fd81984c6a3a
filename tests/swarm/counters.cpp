// SPDX-License-Identifier: Apache-2.0
// The shared counter in the swarm: every few steps an idle actor adds 1 to 4 to one counter on its
// session, under whatever faults are injected then; at the end the counter must hold the sum of
// the acknowledged adds plus some of those whose outcome was reported unknown (a lost reply,
// zk_errc::connection_loss), and every other failure must have written nothing.
#include <unistd.h>

#include <atomic>
#include <bitset>

#include <zkr/shared_counter.hpp>

#include "slots.hpp"

namespace zkr::swarm {

namespace {
std::atomic<int> runs_with_a_counter{0};
constexpr int kCounterEvery = 8;  // one step in this many, when an actor is idle
constexpr std::size_t kMostUnknown = 4096;  // the sums of unknown outcomes tracked
}  // namespace

struct Swarm::CounterAdd {
  int delta = 0;
  std::string what;
  std::mutex mutex;
  bool done = false;
  std::error_code ec;
  std::string unexpected;  // an exception the API does not promise
};

std::optional<Op> Swarm::counter_op_for_step() const {
  if (step_index_ % kCounterEvery != kCounterEvery - 1) return std::nullopt;
  for (int a = 0; a < config_.actors; ++a) {
    if (!actors_[static_cast<std::size_t>(a)]->actor.idle()) continue;
    Op op;
    op.kind = OpKind::counter_add;
    op.actor = a;
    op.session = (step_index_ / kCounterEvery) % config_.sessions;
    op.arg = (step_index_ / kCounterEvery) % 4;
    return op;
  }
  return std::nullopt;
}

bool Swarm::counter_op(const Op& op) {
  Session* target = session(op.session);
  if (!target || !usable(op.session)) return false;
  auto& actor = actors_[static_cast<std::size_t>(op.actor)]->actor;
  if (!actor.idle()) return false;
  auto add = std::make_shared<CounterAdd>();
  add->delta = 1 + (op.arg & 3);
  add->what = fmt::format("step {} {} (+{})", step_index_, describe(op), add->delta);
  counter_adds_.push_back(add);
  if (counter_path_.empty()) counter_path_ = fmt::format("{}/counter-{}-{}", kRoot, ::getpid(), ++runs_with_a_counter);
  // Posted, not waited for: a paused connection holds the add until the fault heals.
  actor.post([target, add, path = counter_path_, bound = world_.slack()](std::stop_token stop) {
    std::error_code ec;
    std::string unexpected;
    try {
      SharedCounter counter(*target, path, {.timeout = bound});
      counter.add(add->delta, std::move(stop), ec);
    } catch (const std::exception& e) {
      unexpected = e.what();
    }
    std::lock_guard lock(add->mutex);
    add->ec = ec;
    add->unexpected = std::move(unexpected);
    add->done = true;
  });
  settle_after(op.actor);
  return true;
}

void Swarm::check_counter() {
  if (counter_adds_.empty()) return;
  auto all_done = [&] {
    return std::all_of(counter_adds_.begin(), counter_adds_.end(), [](const auto& add) {
      std::lock_guard lock(add->mutex);
      return add->done;
    });
  };
  world_.settle(all_done, world_.slack() * 4);
  std::int64_t acknowledged = 0;
  std::bitset<kMostUnknown> unknown_sums;  // what the adds of unknown outcome may have added
  unknown_sums.set(0);
  int unknown = 0;
  for (const auto& add : counter_adds_) {
    std::lock_guard lock(add->mutex);
    if (!add->done) return fail("hang", "counter", add->what + ": did not end once everything was healed");
    if (!add->unexpected.empty()) return fail("exception", "counter", add->what + ": threw " + add->unexpected);
    if (!add->ec) {
      acknowledged += add->delta;
    } else if (add->ec == zk_errc::connection_loss) {
      unknown_sums |= unknown_sums << static_cast<std::size_t>(add->delta);
      ++unknown;
    } else if (add->ec == condition::bad_input || add->ec == errc::internal_error) {
      return fail("exception", "counter", fmt::format("{}: {}", add->what, add->ec.message()));
    }
    // Anything else (timed out, cancelled, the session closed or lost) wrote nothing.
  }
  count("counter adds acknowledged", static_cast<int>(acknowledged));
  count("counter adds of unknown outcome", unknown);
  // Read on the first slot whose session is connected, from an idle actor.
  for (int slot = 0; slot < config_.sessions; ++slot) {
    Session* reader = session(slot);
    if (!reader || !usable(slot) || reader->state() != SessionState::connected) continue;
    for (auto& actor : actors_) {
      if (!actor->actor.idle()) continue;
      std::error_code ec;
      std::int64_t value = 0;
      if (!actor->actor.run([&] { value = SharedCounter(*reader, counter_path_).read({}, ec).value; }, world_.slack() * 2))
        return fail("hang", "counter", "end phase: reading the counter did not return");
      if (ec) return fail("counter", "counter", fmt::format("end phase: reading the counter failed: {}", ec.message()));
      const std::int64_t extra = value - acknowledged;
      if (extra < 0 || extra >= static_cast<std::int64_t>(kMostUnknown) || !unknown_sums.test(static_cast<std::size_t>(extra)))
        fail("counter", "counter",
             fmt::format("the counter holds {}; the acknowledged adds sum to {}, and the {} add(s) of unknown outcome "
                         "cannot make up the difference",
                         value, acknowledged, unknown));
      return;
    }
  }
  count("counter unchecked (no connected session at the end)");
}

}  // namespace zkr::swarm
