// SPDX-License-Identifier: Apache-2.0
// Watching who leads without taking part (include/zkr/leader_watch.hpp): a dashboard's view of an
// election. Two participants ("db-a:5432", "db-b:5432") take turns; the watch prints one line per
// change of leader, and the scenario checks that it saw every change, in order, ending with nobody.
//
// Usage: zkr_leader_watch SERVERS      (exits 0 when the watch told every change, 1 otherwise)
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <zkr/election.hpp>
#include <zkr/leader_watch.hpp>
#include <zkr/session.hpp>

using namespace std::chrono_literals;

namespace {

// The leaders told so far ("" for nobody), and a way to wait for the next one.
class Leaders {
 public:
  void told(const std::optional<zkr::Participant>& leader) {
    if (leader)
      fmt::print("leader: {} (token {}, session 0x{:x})\n", leader->data, leader->token.value(), leader->session_id);
    else
      fmt::print("leader: nobody\n");
    std::fflush(stdout);
    std::lock_guard guard(mutex_);
    seen_.push_back(leader ? leader->data : "");
    changed_.notify_all();
  }
  bool wait_for(const std::string& data) {
    std::unique_lock guard(mutex_);
    return changed_.wait_for(guard, 20s, [&] { return !seen_.empty() && seen_.back() == data; });
  }
  std::vector<std::string> seen() {
    std::lock_guard guard(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> seen_;
};

// Waits (at most 20 s) until `count` participants are queued in the latch's election.
bool queued(const zkr::LeaderLatch& latch, std::size_t count) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (latch.participants().size() < count) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SERVERS\n", argv[0]);
    return 2;
  }
  zkr::SessionOptions options;
  options.servers = argv[1];
  const std::string path = fmt::format("/zkr-examples/leader-watch-{}", getpid());

  Leaders leaders;
  zkr::Session dashboard(options);
  zkr::LeaderWatch watch(dashboard, path, [&](const std::optional<zkr::Participant>& leader) { leaders.told(leader); });

  zkr::Session session_a(options), session_b(options);
  zkr::LeaderLatch a(session_a, path, {.participant_data = "db-a:5432"});
  zkr::LeaderLatch b(session_b, path, {.participant_data = "db-b:5432"});
  bool ok = leaders.wait_for("");  // nobody yet
  a.start();
  ok = ok && leaders.wait_for("db-a:5432");
  b.start();
  // start() only sends db-b's node on its way: resigning before it is queued would let db-a's new
  // node go first and db-a lead again.
  ok = ok && queued(a, 2);
  ok = ok && a.wait_for_leadership(0ns) && a.resign();  // db-b takes over; db-a queues again
  ok = ok && leaders.wait_for("db-b:5432");
  b.close();
  ok = ok && leaders.wait_for("db-a:5432");
  a.close();
  ok = ok && leaders.wait_for("");
  watch.stop();

  const std::vector<std::string> expected = {"", "db-a:5432", "db-b:5432", "db-a:5432", ""};
  ok = ok && leaders.seen() == expected;
  fmt::print("leader watch: {}\n", ok ? "every change told, in order" : "FAILED");
  return ok ? 0 : 1;
}
