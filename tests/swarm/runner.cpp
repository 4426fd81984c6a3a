// SPDX-License-Identifier: Apache-2.0
#include "runner.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <testenv.hpp>

#include "world.hpp"

namespace zkr::swarm {

namespace {

std::unique_ptr<World> make_world(const SwarmConfig& config) {
  return config.world == WorldKind::real ? make_real_world() : make_fake_world();
}

RunResult run_once(const SwarmConfig& config, std::vector<Op> ops, bool generate, int steps,
                   const Schedule& schedule = {}) {
  auto world = make_world(config);
  RunResult result;
  {
    Swarm swarm(config, *world);
    result = swarm.run(std::move(ops), generate, steps, schedule);
  }
  return result;
}

bool same_failure(const Failure& a, const Failure& b) { return a.invariant == b.invariant && a.resource == b.resource; }

}  // namespace

RunResult run_generated(const SwarmConfig& config, int steps) { return run_once(config, {}, true, steps); }

RunResult replay(const SwarmConfig& config, const std::vector<Op>& ops, const Schedule& schedule) {
  return run_once(config, ops, false, 0, schedule);
}

// Delta debugging (ddmin): remove ever smaller chunks while the failure stays the same; a
// candidate that fails is cut after its failing step. Then single operations, once more. Each
// candidate follows the interleaving of the best failing run so far, without the removed steps
// (keep_steps): a failure that depends on timing keeps the timing that showed it.
Shrunk shrink(const SwarmConfig& config, const RunResult& failing, std::chrono::seconds budget) {
  Shrunk out;
  out.ops = failing.ops;
  out.schedule = failing.schedule;
  out.failure = *failing.failure;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  // The steps at `kept` (indices into out.ops, in order).
  auto still_fails = [&](const std::vector<std::size_t>& kept) {
    if (std::chrono::steady_clock::now() > deadline) {
      out.budget_ran_out = true;
      return false;
    }
    ++out.replays;
    std::vector<Op> candidate;
    for (auto index : kept) candidate.push_back(out.ops[index]);
    auto result = replay(config, candidate, keep_steps(out.schedule, kept));
    if (!result.failure || !same_failure(*result.failure, out.failure)) return false;
    out.ops = std::move(candidate);
    out.schedule = std::move(result.schedule);
    if (result.failure->step >= 0 && result.failure->step + 1 < static_cast<int>(out.ops.size()))
      out.ops.resize(static_cast<std::size_t>(result.failure->step) + 1);
    if (out.schedule.size() > out.ops.size()) out.schedule.resize(out.ops.size());
    out.failure = *result.failure;
    return true;
  };
  auto all_but = [](std::size_t size, std::size_t from, std::size_t to) {
    std::vector<std::size_t> kept;
    for (std::size_t i = 0; i < size; ++i)
      if (i < from || i >= to) kept.push_back(i);
    return kept;
  };
  std::size_t chunks = 2;
  while (out.ops.size() >= 2 && !out.budget_ran_out) {
    const std::size_t size = out.ops.size();
    const std::size_t chunk = (size + chunks - 1) / chunks;
    bool reduced = false;
    for (std::size_t start = 0; start < size && !reduced; start += chunk) {
      const auto kept = all_but(size, start, std::min(size, start + chunk));
      if (!kept.empty() && still_fails(kept)) {
        reduced = true;
        chunks = std::max<std::size_t>(chunks - 1, 2);
      }
    }
    if (!reduced) {
      if (chunks >= size) break;
      chunks = std::min(size, chunks * 2);
    }
  }
  // 1-minimal: no single operation can go.
  for (std::size_t i = out.ops.size(); i-- > 0 && out.ops.size() > 1 && !out.budget_ran_out;) {
    if (i >= out.ops.size()) continue;
    still_fails(all_but(out.ops.size(), i, i + 1));
  }
  // How reliably the result fails, following its interleaving.
  out.confirmations = 3;
  for (int i = 0; i < out.confirmations; ++i) {
    auto result = replay(config, out.ops, out.schedule);
    if (result.failure && same_failure(*result.failure, out.failure)) ++out.reproduced;
    if (result.divergence.empty()) ++out.followed;
  }
  return out;
}

std::string report(const SwarmConfig& config, const RunResult& failing, const std::optional<Shrunk>& shrunk) {
  const auto& failure = shrunk ? shrunk->failure : *failing.failure;
  const auto& ops = shrunk ? shrunk->ops : failing.ops;
  std::string out = fmt::format("swarm failure: {}{}\n  {}\n  {}\n", failure.invariant,
                                failure.resource.empty() ? "" : " on " + failure.resource, failure.message,
                                config.describe());
  out += fmt::format("  found after {} operations", failing.ops.size());
  if (shrunk)
    out += fmt::format("; shrunk to {} in {} replays{} (fails again in {} of {} replays that follow its "
                       "interleaving; {} of them ran it as recorded)",
                       ops.size(), shrunk->replays, shrunk->budget_ran_out ? ", shrinking budget spent" : "",
                       shrunk->reproduced, shrunk->confirmations, shrunk->followed);
  out += ":\n";
  for (std::size_t i = 0; i < ops.size(); ++i) out += fmt::format("    {:3}. {}\n", i, describe(ops[i]));
  std::string excluded;
  for (auto exclusion : config.exclusions) excluded += (excluded.empty() ? "" : ",") + std::string(to_string(exclusion));
  const auto& schedule = shrunk ? shrunk->schedule : failing.schedule;
  if (!failing.divergence.empty()) out += fmt::format("  its outcomes differ from the schedule it followed: {}\n", failing.divergence);
  out += fmt::format("  interleaving (gap in ms before each step: acquisitions ended by then, g granted, t timed out, "
                     "c cancelled, b busy, f failed): {}\n",
                     to_text(schedule));
  out += fmt::format("  replay: ZKR_SWARM_WORLD={} ZKR_SWARM_SEED={}{} ZKR_SWARM_OPS='{}' ZKR_SWARM_SCHEDULE='{}' "
                     "{}/tests/swarm/swarm_test --gtest_filter=Swarm.Replay\n",
                     config.world == WorldKind::real ? "real" : "fake", config.seed,
                     excluded.empty() ? "" : " ZKR_SWARM_EXCLUDE=" + excluded, to_text(ops), to_text(schedule),
                     testenv::build_dir());
  return out;
}

}  // namespace zkr::swarm
