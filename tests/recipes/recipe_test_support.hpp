// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the recipe tests: the core tests' helpers, peer processes, and wake-up counts.
#pragma once

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <zkr/session.hpp>

#include "../core/test_support.hpp"

namespace zkr::test {

// Curator's leader latch node prefix as Curator writes it (the server appends the sequence).
inline constexpr const char* kCuratorLatchPrefix = "_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-latch-";

// A participant or lease holder in its own process (tests/recipes/recipe_peer_main.cpp).
inline std::unique_ptr<testenv::Process> start_peer(const std::string& mode, const std::string& servers,
                                                    const std::string& path, int session_ms,
                                                    const std::string& last_argument) {
  testenv::Process::Options options;
  options.pipe_stdin = true;
  return std::make_unique<testenv::Process>(
      std::vector<std::string>{ZKR_RECIPE_PEER, mode, servers, path, std::to_string(session_ms), last_argument},
      options);
}

// The number after the first space of a peer's line ("LEADER 4294967311").
inline std::int64_t number_of(const std::string& line) { return std::stoll(line.substr(line.find(' ') + 1)); }

// Sessions of one test, with the sum of their wake-up counters.
class Sessions {
 public:
  Session& add(const std::string& servers, std::chrono::milliseconds timeout = std::chrono::milliseconds(4000)) {
    sessions_.push_back(std::make_unique<Session>(session_options(servers, timeout)));
    return *sessions_.back();
  }
  Session& operator[](std::size_t i) { return *sessions_[i]; }
  std::size_t size() const { return sessions_.size(); }
  std::uint64_t wakeups() const {
    return std::accumulate(sessions_.begin(), sessions_.end(), std::uint64_t{0},
                           [](std::uint64_t sum, const auto& s) { return sum + s->metrics().wakeups; });
  }
  // Closes every session (before the state their callbacks use goes away).
  void close_all() {
    for (auto& s : sessions_) s->close();
  }
  // Closes every session when it goes out of scope: declare it after the locals that callbacks
  // use, so that an early return (a failed ASSERT) cannot leave a callback with dangling state.
  [[nodiscard]] auto closer() {
    struct Closer {
      Sessions* sessions;
      ~Closer() { sessions->close_all(); }
    };
    return Closer{this};
  }

 private:
  std::vector<std::unique_ptr<Session>> sessions_;
};

}  // namespace zkr::test
