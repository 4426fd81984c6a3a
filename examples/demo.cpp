// SPDX-License-Identifier: Apache-2.0
// The demo: two jobs contend for one fenced lock; one of them stalls past its lease, the other is
// granted the lock with a larger fencing token, and the stalled job's late write is refused by
// the resource. Usage: zkr_demo SERVERS
#include <chrono>
#include <cstdio>
#include <latch>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/lock.hpp>

using namespace std::chrono_literals;

namespace {

// The protected resource: applies a write only if its token is not lower than any it accepted.
class FencedStore {
 public:
  void write(std::string_view job, zkr::FencingToken token, std::string_view value) {
    if (gate_.admit("report", token)) {
      fmt::print("  store: ACCEPTED {}'s write '{}' (token {})\n", job, value, token.value());
      value_ = value;
    } else {
      fmt::print("  store: REFUSED  {}'s write '{}' (token {} < highest seen {})\n", job, value, token.value(),
                 gate_.highest("report")->value());
    }
  }

 private:
  zkr::FenceGate gate_;
  std::string value_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: zkr_demo SERVERS   (e.g. 127.0.0.1:2181)\n");
    return 64;
  }
  const std::string servers = argv[1];
  const std::string path = "/zkr-demo/report-lock";
  FencedStore store;
  try {
    zkr::SessionOptions options;
    options.servers = servers;
    options.session_timeout = 4s;
    zkr::Session session_a(options), session_b(options);
    fmt::print("Two jobs, each with its own ZooKeeper session, contend for {}.\n\n", path);

    zkr::Lock lock_a(session_a, path, {.owner_data = "job A"});
    zkr::Lock lock_b(session_b, path, {.owner_data = "job B"});

    zkr::HeldLock held_a = lock_a.acquire();
    fmt::print("job A: acquired the lock, fencing token {}\n", held_a.token().value());
    store.write("job A", held_a.token(), "A's first report");

    std::latch b_waiting(1);
    std::thread job_b([&] {
      fmt::print("job B: waiting for the lock...\n");
      b_waiting.count_down();
      zkr::HeldLock held_b = lock_b.acquire();
      fmt::print("job B: acquired the lock, fencing token {} (larger than A's)\n", held_b.token().value());
      store.write("job B", held_b.token(), "B's report");
      held_b.release();
      fmt::print("job B: released the lock\n");
    });
    b_waiting.wait();
    std::this_thread::sleep_for(300ms);

    fmt::print("\njob A: stalls (think: a long GC pause). Meanwhile its session ends, as if it had expired,\n"
               "       and ZooKeeper deletes A's lock node.\n");
    held_a.on_lost([](zkr::LossReason reason) {
      fmt::print("job A: (the library signals the loss: {}; a well-behaved job stops here)\n",
                 zkr::to_string(reason));
    });
    session_a.close();
    job_b.join();

    fmt::print("\njob A: wakes up and, not checking lost(), sends the write it had prepared...\n");
    store.write("job A", held_a.token(), "A's late report");
    fmt::print("\nThe lock alone could not stop A's late write; the token check at the store did.\n");
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "zkr_demo: {}\n", e.what());
    return 1;
  }
  return 0;
}
