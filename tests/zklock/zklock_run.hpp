// SPDX-License-Identifier: Apache-2.0
// Running the zklock binary from a test: its path, the scripts beside the tests, a process run to
// its end with stdout and stderr together, and bounded polling. Shared by the process tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "testenv.hpp"

namespace zklock_test {

using namespace std::chrono_literals;

inline const std::string zklock_binary = ZKLOCK_BINARY;
// Every zklock these tests start talks to testenv's servers, whose tickTime this is.
inline const bool tick_time_set =
    ::setenv("ZKLOCK_TICK_TIME", fmt::format("{:g}", zkr::testenv::kTestTickTime.count() / 1000.0).c_str(), 1) == 0;
inline const std::string scripts_dir = ZKLOCK_TEST_SCRIPTS;
inline constexpr auto python = "/usr/bin/python3";

inline zkr::testenv::Process::Options merged_output() {
  zkr::testenv::Process::Options options;
  options.merge_stderr = true;
  options.new_process_group = true;
  return options;
}

struct Outcome {
  std::optional<int> exit_code;
  std::string output;  // stdout and stderr
};

inline Outcome run_to_end(std::vector<std::string> argv, zkr::testenv::Process::Options options = merged_output()) {
  zkr::testenv::Process process(std::move(argv), std::move(options));
  Outcome outcome;
  outcome.output = process.read_all(zkr::testenv::scaled(60s));
  outcome.exit_code = process.wait(zkr::testenv::scaled(30s));
  return outcome;
}

// The contenders in the output of "zklock --list PATH --json", or -1 if it failed.
inline int contenders_listed(const Outcome& listing) {
  if (listing.exit_code != 0) return -1;
  int count = 0;
  for (std::size_t at = 0; (at = listing.output.find("\"node\":", at)) != std::string::npos; ++at) ++count;
  return count;
}

// Polls until `condition` holds or the timeout passes.
template <typename Condition>
bool eventually(Condition condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + zkr::testenv::scaled(timeout);
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

inline std::string read_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace zklock_test
