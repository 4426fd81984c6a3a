// SPDX-License-Identifier: Apache-2.0
// Semaphore leases and leadership through Boost.Asio completion tokens (include/zkr/asio.hpp):
// four coroutines on one io_context share a semaphore of two leases, and two latches wait for
// leadership, one with a coroutine and one with a future. Each completion must arrive where Asio
// promises, carry what the synchronous call would, and never let more than two workers hold a
// lease at once.
//
// Usage: zkr_asio_semaphore_election SERVERS      (exits 0 when every check passed, 1 otherwise)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <zkr/asio.hpp>
#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/semaphore.hpp>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

int problems = 0;

void check(bool ok, std::string_view what) {
  fmt::print("asio: {} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++problems;
}

// Bounded waits for the futures, stretched by ZKR_TEST_TIMEOUT_SCALE on slow machines.
template <typename T>
bool ready_within(std::future<T>& result, std::chrono::milliseconds timeout) {
  const char* scale_text = std::getenv("ZKR_TEST_TIMEOUT_SCALE");
  const double scale = scale_text ? std::max(1.0, std::atof(scale_text)) : 1.0;
  return result.wait_for(timeout * scale) == std::future_status::ready;
}

constexpr int kLeases = 2;
constexpr int kWorkers = 4;
constexpr int kRounds = 3;

struct Pool {
  std::atomic<int> holding{0};
  std::atomic<int> most_holding{0};
  std::atomic<int> sections{0};
  std::atomic<bool> tokens_valid{true};
};

// One worker: takes a lease kRounds times, "works" while holding it, and gives it back.
asio::awaitable<void> worker(zkr::Semaphore& semaphore, Pool& pool) {
  auto executor = co_await asio::this_coro::executor;
  for (int round = 0; round < kRounds; ++round) {
    zkr::Lease lease = co_await zkr::asio::async_acquire(semaphore, asio::use_awaitable);
    if (!lease.token().valid()) pool.tokens_valid = false;
    const int now = ++pool.holding;
    int most = pool.most_holding.load();
    while (now > most && !pool.most_holding.compare_exchange_weak(most, now)) {
    }
    asio::steady_timer work(executor, 20ms);
    co_await work.async_wait(asio::use_awaitable);
    --pool.holding;
    ++pool.sections;
    lease.release();
  }
}

// A latch that leads at once, then a second latch whose wait is cancelled while the first leads.
asio::awaitable<void> leader(zkr::LeaderLatch& first, zkr::LeaderLatch& second, std::thread::id io_thread) {
  zkr::Leadership term = co_await zkr::asio::async_wait_for_leadership(first, asio::use_awaitable);
  check(static_cast<bool>(term) && term.token().valid(), "co_await async_wait_for_leadership returns a term with a token");
  check(std::this_thread::get_id() == io_thread, "the coroutine resumes on the io_context's thread");
  std::stop_source stop;
  asio::steady_timer timer(co_await asio::this_coro::executor, 100ms);
  timer.async_wait([&stop](boost::system::error_code) { stop.request_stop(); });
  try {
    co_await zkr::asio::async_wait_for_leadership(second, asio::use_awaitable, stop.get_token());
    check(false, "a cancelled wait for leadership throws");
  } catch (const zkr::Error& e) {
    check(e.code() == zkr::errc::cancelled, fmt::format("a cancelled wait for leadership throws: {}", e.what()));
  }
  check(first.is_leader() && !second.is_leader(), "one leader at a time");
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 2) {
    fmt::print(stderr, "usage: zkr_asio_semaphore_election SERVERS   (e.g. 127.0.0.1:2181)\n");
    return 64;
  }
  const std::string base = fmt::format("/zkr-examples/asio-recipes-{}", getpid());
  try {
    zkr::SessionOptions options;
    options.servers = argv[1];
    zkr::Session session(options);

    // 1. Four coroutines, two leases.
    {
      zkr::Semaphore semaphore(session, base + "/semaphore", kLeases);
      Pool pool;
      asio::io_context io;
      for (int i = 0; i < kWorkers; ++i)
        asio::co_spawn(io, worker(semaphore, pool), [](std::exception_ptr error) {
          if (error) std::rethrow_exception(error);
        });
      io.run();  // returns once every worker is done: the pending acquisitions count as work
      check(pool.sections == kWorkers * kRounds, fmt::format("every worker got its {} leases", kRounds));
      check(pool.most_holding == kLeases, fmt::format("at most {} held at once, and all of them were used: {}",
                                                      kLeases, pool.most_holding.load()));
      check(pool.tokens_valid, "every lease carries a token");
    }

    // 2. A wait for a lease that runs out, as a future: an empty optional, no exception.
    {
      zkr::Semaphore semaphore(session, base + "/single", 1);
      zkr::Lease held = semaphore.acquire();
      auto timed_out = zkr::asio::async_try_acquire_for(semaphore, 200ms, asio::use_future);
      check(ready_within(timed_out, 10s) && !timed_out.get().has_value(),
            "use_future: a wait for a lease that runs out yields an empty optional");
    }

    // 3. Leadership: a coroutine waits for it, then cancels a rival's wait.
    {
      zkr::LeaderLatch first(session, base + "/election"), second(session, base + "/election");
      first.start();
      asio::io_context io;
      asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        // The second joins once the first leads: it queues behind it.
        co_await leader(first, second, std::this_thread::get_id());
      }, [](std::exception_ptr error) {
        if (error) std::rethrow_exception(error);
      });
      second.start();
      io.run();

      // 4. A future: the second leads as soon as the first closes.
      auto next = zkr::asio::async_wait_for_leadership_for(second, 10s, asio::use_future);
      first.close();
      std::optional<zkr::Leadership> term;
      if (ready_within(next, 15s)) term = next.get();
      check(term && *term && second.is_leader(), "use_future: the next participant leads once the first leaves");

      // 5. Waiting on a latch that was never started is an exception.
      zkr::LeaderLatch idle(session, base + "/election");
      auto refused = zkr::asio::async_wait_for_leadership(idle, asio::use_future);
      try {
        refused.get();
        check(false, "waiting on a latch that was never started fails");
      } catch (const zkr::Error& e) {
        check(e.code() == zkr::errc::invalid_argument, fmt::format("a latch never started: {}", e.what()));
      }
    }
  } catch (const std::exception& e) {
    fmt::print("asio: FAIL unexpected exception: {}\n", e.what());
    return 1;
  }
  if (problems != 0) return 1;
  fmt::print("asio: semaphore and election behaved\n");
  return 0;
}
