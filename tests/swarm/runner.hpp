// SPDX-License-Identifier: Apache-2.0
// Running swarms: a generated run from a seed, a replay of an operation list, shrinking a failing
// list to the shortest that still fails the same way (delta debugging, each candidate replayed on
// a fresh world), and the report a failure prints.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "config.hpp"
#include "ops.hpp"
#include "swarm.hpp"

namespace zkr::swarm {

// A fresh world (fake or real, as the config says) and a run on it.
RunResult run_generated(const SwarmConfig& config, int steps);
// With `schedule` (as a failing run recorded it), the replay follows its timing (see StepTiming).
RunResult replay(const SwarmConfig& config, const std::vector<Op>& ops, const Schedule& schedule = {});

struct Shrunk {
  std::vector<Op> ops;
  Schedule schedule;  // the interleaving of the last replay that failed
  Failure failure;
  int replays = 0;
  bool budget_ran_out = false;
  int reproduced = 0;  // of the confirmation replays of the result (each following the schedule)
  int confirmations = 0;
  int followed = 0;  // confirmation replays whose outcomes were those of the schedule
};

// Shrinks `failing` (a run that failed) while the failure keeps its invariant and resource.
Shrunk shrink(const SwarmConfig& config, const RunResult& failing, std::chrono::seconds budget);

// What a failing seed prints: the failure, the configuration, the shrunk list, how to replay it.
std::string report(const SwarmConfig& config, const RunResult& failing, const std::optional<Shrunk>& shrunk);

}  // namespace zkr::swarm
