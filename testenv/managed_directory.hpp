// SPDX-License-Identifier: Apache-2.0
// A state directory owned by this test process, in which a tool of testenv/ (zkenv.py, pgenv.py,
// netlab.py) runs its servers. Cluster, PostgresServer and NetLab each hold one; the lifecycle
// itself (start, readiness, ports, stop, watchdog, reaper) is testenv/lifecycle.py's alone.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zkr::testenv {

class ManagedDirectory {
 public:
  // Creates "$TMPDIR/<prefix>-XXXXXX" (prefix starts with "zkr-") and writes its owner.json naming
  // this process (pid and start time) before anything runs there: if this process is killed from
  // here on, the watchdog, or failing that the reaper of the next start, cleans the directory up.
  ManagedDirectory(std::string_view prefix, std::string tool);
  // `lifecycle.py release`: stops what runs there, ends the watchdog and removes the directory
  // (kept, released, after keep() or with ZKR_KEEP_CLUSTER_DIR=1). Never throws.
  ~ManagedDirectory();
  ManagedDirectory(const ManagedDirectory&) = delete;
  ManagedDirectory& operator=(const ManagedDirectory&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Runs the tool with `arguments` and `--dir PATH`; returns its output (stdout and stderr).
  // Throws std::runtime_error carrying that output if it fails or outlives `timeout` (the tools
  // bound their own waits; this only guards against a hang).
  std::string run(const std::vector<std::string>& arguments, std::chrono::milliseconds timeout) const;

  // `--owner-pid PID --remove-dir` (without --remove-dir when the directory is kept): the start
  // arguments that hand this process's ownership to the tool's watchdog.
  std::vector<std::string> owner_arguments() const;

  // Keep the directory, for its logs (a failed start calls this before throwing).
  void keep() { keep_ = true; }

  // `TOOL check`, run once per tool and process: why the tool cannot run here, empty if it can.
  static std::string unavailable_reason(const std::string& tool);

  // Runs testenv/TOOL with `arguments`: its exit status (nullopt if it outlived `timeout`) and
  // output (stdout and stderr, trailing white space trimmed).
  static std::pair<std::optional<int>, std::string> run_tool(std::string_view tool,
                                                             const std::vector<std::string>& arguments,
                                                             std::chrono::milliseconds timeout);

 private:
  std::string tool_;
  std::filesystem::path path_;
  bool keep_ = false;
};

}  // namespace zkr::testenv
