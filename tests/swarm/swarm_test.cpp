// SPDX-License-Identifier: Apache-2.0
// The swarm test: random operations from the whole public API, on several sessions, under faults,
// with the invariants checked after every step (tests/swarm/README.md).
//
//   Swarm.FixedSeeds   CI's budget: a fixed list of seeds on the fake (ZKR_SWARM_SEEDS, _STEPS)
//   Swarm.Regressions  every failing sequence found so far, replayed
//   Swarm.Replay       one seed or operation list from the environment (a failure's replay line)
//   Swarm.Explore      new seeds for ZKR_SWARM_MINUTES or ZKR_SWARM_SECONDS (scripts/swarm, scripts/mutants)
//   Swarm.RealServers  a few seeds against real servers behind proxies (ZKR_SWARM_REAL_SEEDS)
//
// Environment: ZKR_SWARM_SEED or ZKR_SWARM_SEEDS ("1-40" or "3,7,9"), ZKR_SWARM_STEPS,
// ZKR_SWARM_OPS (an operation list), ZKR_SWARM_SCHEDULE (the interleaving it ran), ZKR_SWARM_WORLD (fake|real), ZKR_SWARM_EXCLUDE (crossings
// left out), ZKR_SWARM_SHRINK_SECONDS (0: no shrinking), ZKR_SWARM_MINUTES, ZKR_SWARM_REPORT
// (a file that failures are appended to).
#include <gtest/gtest.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runner.hpp"

namespace zkr::swarm {
namespace {

using namespace std::chrono_literals;

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  return std::string(value);
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const auto text = env(name);
  if (!text) return fallback;
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
  if (ec != std::errc() || end != text->data() + text->size())
    throw std::invalid_argument(fmt::format("{}='{}' is not a number", name, *text));
  return value;
}

// "1-40", "3,7,9", "5".
std::vector<std::uint64_t> seed_list(const std::string& text) {
  std::vector<std::uint64_t> seeds;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) {
      const auto dash = item.find('-');
      const auto first = std::stoull(item.substr(0, dash));
      const auto last = dash == std::string::npos ? first : std::stoull(item.substr(dash + 1));
      for (auto seed = first; seed <= last; ++seed) seeds.push_back(seed);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return seeds;
}

WorldKind world_kind(WorldKind fallback) {
  const auto text = env("ZKR_SWARM_WORLD");
  if (!text) return fallback;
  if (*text == "real") return WorldKind::real;
  if (*text == "fake") return WorldKind::fake;
  throw std::invalid_argument(fmt::format("ZKR_SWARM_WORLD='{}': expected fake or real", *text));
}

std::set<Exclusion> exclusions() { return exclusions_from_text(env("ZKR_SWARM_EXCLUDE").value_or("")); }

// Reports a failing run (shrunk within the budget) and fails the test.
void report_failure(const SwarmConfig& config, const RunResult& result) {
  const auto budget = std::chrono::seconds(env_number("ZKR_SWARM_SHRINK_SECONDS", 90));
  std::optional<Shrunk> shrunk;
  if (budget.count() > 0) shrunk = shrink(config, result, budget);
  const auto text = report(config, result, shrunk);
  if (const auto file = env("ZKR_SWARM_REPORT")) std::ofstream(*file, std::ios::app) << text << "\n";
  ADD_FAILURE() << text;
}

struct Totals {
  int seeds = 0;
  int ops = 0;
  int skipped = 0;
  std::map<std::string, int> counts;
  void add(const RunResult& result) {
    ++seeds;
    ops += result.steps_run;
    skipped += result.skipped;
    for (const auto& [what, n] : result.counts) counts[what] += n;
  }
  std::string text() const {
    std::string out = fmt::format("swarm: {} seed(s), {} operations ({} found nothing to act on)", seeds, ops, skipped);
    for (const auto& [what, n] : counts) out += fmt::format("\n  {}: {}", what, n);
    return out;
  }
};

// Runs the seeds. Each failure is reported (shrunk) and the run goes on with the next seed, so
// that one failing seed does not hide the others; ZKR_SWARM_STOP_AT_FIRST=1 stops at the first
// (scripts/mutants: a first failure is all it needs). The seeds that failed close the output.
void run_seeds(const std::vector<std::uint64_t>& seeds, WorldKind world, int steps,
               std::chrono::steady_clock::time_point until = std::chrono::steady_clock::time_point::max()) {
  const bool stop_at_first = env_number("ZKR_SWARM_STOP_AT_FIRST", 0) != 0;
  Totals totals;
  std::vector<std::string> failed;
  for (auto seed : seeds) {
    if (std::chrono::steady_clock::now() > until) break;
    const auto config = config_for_seed(seed, world, exclusions());
    const auto result = run_generated(config, steps);
    totals.add(result);
    if (result.failure) {
      failed.push_back(fmt::format("{} ({})", seed, result.failure->invariant));
      report_failure(config, result);
      if (stop_at_first) break;
    }
  }
  std::cout << totals.text() << std::endl;
  if (!failed.empty()) std::cout << fmt::format("swarm: {} seed(s) failed: {}", failed.size(), fmt::join(failed, ", ")) << std::endl;
}

TEST(Swarm, FixedSeeds) {
  const auto seeds = seed_list(env("ZKR_SWARM_SEEDS").value_or("1-24"));
  run_seeds(seeds, world_kind(WorldKind::fake), static_cast<int>(env_number("ZKR_SWARM_STEPS", 120)));
}

// Failing sequences the swarm found, kept so that each is replayed on every run. Each was
// shrunk from the seed named; see tests/swarm/README.md for what each one found.
struct Regression {
  std::string_view name;
  std::uint64_t seed;
  std::string_view ops;
};
const std::vector<Regression> kRegressions = {
#include "regressions.inc"
};

TEST(Swarm, Regressions) {
  for (const auto& regression : kRegressions) {
    SCOPED_TRACE(std::string(regression.name));
    const auto config = config_for_seed(regression.seed, WorldKind::fake, {});
    const auto result = replay(config, ops_from_text(regression.ops));
    if (result.failure)
      ADD_FAILURE() << "regression " << regression.name << " fails again:\n" << report(config, result, std::nullopt);
  }
}

TEST(Swarm, Replay) {
  const auto seed = env("ZKR_SWARM_SEED");
  if (!seed) GTEST_SKIP() << "set ZKR_SWARM_SEED (and ZKR_SWARM_OPS) to replay a run";
  const auto config = config_for_seed(env_number("ZKR_SWARM_SEED", 1), world_kind(WorldKind::fake), exclusions());
  const auto ops = env("ZKR_SWARM_OPS");
  const auto schedule = schedule_from_text(env("ZKR_SWARM_SCHEDULE").value_or(""));
  if (!schedule.empty() && !ops) GTEST_SKIP() << "ZKR_SWARM_SCHEDULE goes with the ZKR_SWARM_OPS it was recorded with";
  const auto result = ops ? replay(config, ops_from_text(*ops), schedule)
                          : run_generated(config, static_cast<int>(env_number("ZKR_SWARM_STEPS", 120)));
  Totals totals;
  totals.add(result);
  std::cout << totals.text() << std::endl;
  if (!schedule.empty())
    std::cout << (result.divergence.empty() ? "the recorded interleaving was followed"
                                            : "the interleaving differed from the recorded one at " + result.divergence)
              << std::endl;
  if (result.failure) report_failure(config, result);
}

// The interleaving a run ran is what replays a failure that depends on timing: lock0 held on s0,
// an async acquisition of it on s1 with a 400 ms deadline, then the release. Run freely, the
// release comes within milliseconds and the wait is granted; following a schedule that recorded
// the release 700 ms after the wait began, the wait times out, as in the run that recorded it.
TEST(Swarm, ScheduleReplaysTheTimingItRecorded) {
  const auto config = config_for_seed(1, WorldKind::fake, {});
  const auto ops = ops_from_text("acquire:0.0.0.0 async_acquire:1.1.0.12 release:0.0.0.0");
  auto outcome_of_the_wait = [](const RunResult& result) {
    for (const auto& step : result.schedule)
      for (const auto& [op, how] : step.outcomes)
        if (op == 1) return how;
    return '?';
  };
  const auto free_run = replay(config, ops);
  ASSERT_FALSE(free_run.failure) << report(config, free_run, std::nullopt);
  ASSERT_EQ(free_run.schedule.size(), ops.size());
  EXPECT_EQ(outcome_of_the_wait(free_run), 'g') << to_text(free_run.schedule);

  const auto recorded = schedule_from_text("0:0g 0 700:1t");
  EXPECT_EQ(to_text(recorded), "0:0g 0 700:1t");
  const auto followed = replay(config, ops, recorded);
  ASSERT_FALSE(followed.failure) << report(config, followed, std::nullopt);
  EXPECT_EQ(outcome_of_the_wait(followed), 't') << to_text(followed.schedule);
  EXPECT_GE(followed.schedule.at(2).gap_ms, 700);
  EXPECT_EQ(followed.divergence, "");
  // A failure's report gives the schedule in its replay line.
  RunResult failing = followed;
  failing.failure = Failure{"hang", "lock0", "as if", 2};
  EXPECT_NE(report(config, failing, std::nullopt).find("ZKR_SWARM_SCHEDULE='" + to_text(followed.schedule) + "'"),
            std::string::npos)
      << report(config, failing, std::nullopt);
  // Told a grant that this timing cannot give, the replay says where it ran otherwise.
  EXPECT_NE(replay(config, ops, schedule_from_text("0:0g 0 700:1g")).divergence, "");

  // Shrinking keeps the timing of what it keeps: the gaps of removed steps go to the next one.
  const auto kept = keep_steps(schedule_from_text("0 5 400:1t 30:0g,2c"), {0, 2, 3});
  EXPECT_EQ(to_text(kept), "0 405 30:0g,1c");
  EXPECT_THROW(schedule_from_text("0 12:3x"), std::invalid_argument);
}

TEST(Swarm, Explore) {
  // ZKR_SWARM_SECONDS, when set, is the budget instead of ZKR_SWARM_MINUTES (scripts/mutants).
  const auto seconds = env_number("ZKR_SWARM_SECONDS", env_number("ZKR_SWARM_MINUTES", 0) * 60);
  if (seconds == 0) GTEST_SKIP() << "set ZKR_SWARM_MINUTES to explore new seeds (scripts/swarm)";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  // Seeds from the clock unless given: each run explores new ones.
  const auto first = env_number("ZKR_SWARM_FIRST_SEED", std::random_device{}() % 1'000'000'000 + 1000);
  std::vector<std::uint64_t> seeds;
  for (std::uint64_t i = 0; i < 1'000'000; ++i) seeds.push_back(first + i);
  run_seeds(seeds, world_kind(WorldKind::fake), static_cast<int>(env_number("ZKR_SWARM_STEPS", 200)), until);
}

TEST(Swarm, RealServers) {
  const auto seeds = seed_list(env("ZKR_SWARM_REAL_SEEDS").value_or("1"));
  run_seeds(seeds, WorldKind::real, static_cast<int>(env_number("ZKR_SWARM_REAL_STEPS", 60)));
}

}  // namespace
}  // namespace zkr::swarm
