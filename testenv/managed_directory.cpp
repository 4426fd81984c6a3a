// SPDX-License-Identifier: Apache-2.0
// ManagedDirectory: the owned directory and its owner record; the rest is testenv/lifecycle.py.
#include "managed_directory.hpp"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "testenv.hpp"

namespace zkr::testenv {
namespace {

bool keep_requested() { return std::getenv("ZKR_KEEP_CLUSTER_DIR") != nullptr; }

// This process's start time in clock ticks since boot (field 22 of /proc/self/stat): with the
// pid, it names this process and no later one that gets the same pid.
long long own_start_time() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto position = text.rfind(')');
  if (position == std::string::npos) throw std::runtime_error("cannot read /proc/self/stat");
  std::istringstream fields(text.substr(position + 2));
  std::string field;
  for (int index = 3; index <= 22 && fields >> field; ++index) {
  }
  return std::stoll(field);
}

}  // namespace

ManagedDirectory::ManagedDirectory(std::string_view prefix, std::string tool)
    : tool_(std::move(tool)), path_(make_temp_dir(prefix)) {
  const auto owner = path_ / "owner.json";
  std::ofstream out(owner);
  out << fmt::format("{{\"owner_pid\": {}, \"owner_start\": {}}}\n", ::getpid(), own_start_time());
  if (!out.flush()) {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
    throw std::runtime_error(fmt::format("cannot write {}", owner.string()));
  }
}

ManagedDirectory::~ManagedDirectory() {
  std::vector<std::string> release{"release", "--dir", path_.string()};
  if (keep_ || keep_requested()) release.push_back("--keep");
  try {
    run_tool("lifecycle.py", release, scaled(std::chrono::seconds(120)));
  } catch (...) {
    // Never throw from a destructor: the watchdog or the next start's reaper finishes the job.
  }
}

std::string ManagedDirectory::run(const std::vector<std::string>& arguments,
                                  std::chrono::milliseconds timeout) const {
  std::vector<std::string> with_dir = arguments;
  with_dir.push_back("--dir");
  with_dir.push_back(path_.string());
  auto [status, output] = run_tool(tool_, with_dir, timeout);
  if (status != 0) {
    throw std::runtime_error(fmt::format("{} {} failed ({}): {}", tool_, arguments.front(),
                                         status ? fmt::format("exit {}", *status) : "timed out", output));
  }
  return output;
}

std::vector<std::string> ManagedDirectory::owner_arguments() const {
  std::vector<std::string> arguments{"--owner-pid", std::to_string(::getpid())};
  if (!keep_requested()) arguments.push_back("--remove-dir");
  return arguments;
}

std::string ManagedDirectory::unavailable_reason(const std::string& tool) {
  static std::mutex mutex;
  static std::map<std::string, std::string> reasons;
  std::lock_guard lock(mutex);
  if (auto known = reasons.find(tool); known != reasons.end()) return known->second;
  std::string reason;
  try {
    auto [status, output] = run_tool(tool, {"check"}, scaled(std::chrono::seconds(60)));
    if (status != 0) reason = output.empty() ? fmt::format("{} check failed (status {})", tool, status.value_or(-1)) : output;
  } catch (const std::exception& e) {
    reason = fmt::format("cannot run {}: {}", tool, e.what());
  }
  return reasons[tool] = reason;
}

std::pair<std::optional<int>, std::string> ManagedDirectory::run_tool(std::string_view tool,
                                                                      const std::vector<std::string>& arguments,
                                                                      std::chrono::milliseconds timeout) {
  std::vector<std::string> argv{kDebianPython, fmt::format("{}/testenv/{}", source_dir(), tool)};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  Process::Options options;
  options.merge_stderr = true;
  Process process(argv, options);
  std::string output = process.read_all(timeout);
  auto status = process.wait(std::chrono::seconds(5));
  auto end = output.find_last_not_of(" \t\r\n");
  output.erase(end == std::string::npos ? 0 : end + 1);
  return {status, output};
}

}  // namespace zkr::testenv
