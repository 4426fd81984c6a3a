// SPDX-License-Identifier: Apache-2.0
// Acquiring a lock with Boost.Asio completion tokens (include/zkr/asio.hpp): a coroutine, a
// future and a callback bound to a strand. Each completion must arrive where Asio promises (the
// coroutine and the strand resume on the io_context's thread), carry a lock or an error as the
// synchronous calls would, and keep io_context::run() from returning while it is pending.
//
// Usage: zkr_asio_acquire SERVERS      (exits 0 when every check passed, 1 otherwise)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <zkr/asio.hpp>
#include <zkr/error.hpp>
#include <zkr/lock.hpp>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

int problems = 0;

// Bounded waits for the futures, stretched by ZKR_TEST_TIMEOUT_SCALE on slow machines.
template <typename T>
bool ready_within(std::future<T>& result, std::chrono::milliseconds timeout) {
  const char* scale_text = std::getenv("ZKR_TEST_TIMEOUT_SCALE");
  const double scale = scale_text ? std::max(1.0, std::atof(scale_text)) : 1.0;
  return result.wait_for(timeout * scale) == std::future_status::ready;
}

void check(bool ok, std::string_view what) {
  fmt::print("asio: {} {}\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++problems;
}

// Coroutines: acquire (and see the lock held), then a wait that is cancelled, which throws
// zkr::Error(errc::cancelled) as Lock::acquire() would.
asio::awaitable<void> coroutine_client(zkr::Lock& lock, zkr::Lock& rival, std::thread::id io_thread) {
  zkr::HeldLock held = co_await zkr::asio::async_acquire(lock, asio::use_awaitable);
  check(static_cast<bool>(held) && held.token().valid(), "co_await async_acquire returns a held lock with a token");
  check(std::this_thread::get_id() == io_thread, "the coroutine resumes on the io_context's thread");
  check(!rival.try_acquire().has_value(), "while it is held, another contender cannot take it");

  std::stop_source stop;
  asio::steady_timer timer(co_await asio::this_coro::executor, 100ms);
  timer.async_wait([&stop](boost::system::error_code) { stop.request_stop(); });
  try {
    // A second contender of our own queues behind `held` until stop is requested.
    co_await zkr::asio::async_acquire(rival, asio::use_awaitable, stop.get_token());
    check(false, "a cancelled co_await throws");
  } catch (const zkr::Error& e) {
    check(e.code() == zkr::errc::cancelled, fmt::format("a cancelled co_await throws zkr::Error: {}", e.what()));
  }
  held.release();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc != 2) {
    fmt::print(stderr, "usage: zkr_asio_acquire SERVERS   (e.g. 127.0.0.1:2181)\n");
    return 64;
  }
  const std::string path = fmt::format("/zkr-examples/asio-{}", getpid());
  try {
    zkr::SessionOptions options;
    options.servers = argv[1];
    zkr::Session session(options);
    zkr::Lock lock(session, path), rival(session, path);

    // 1. A coroutine on an io_context run by this thread.
    {
      asio::io_context io;
      asio::co_spawn(io, coroutine_client(lock, rival, std::this_thread::get_id()),
                     [](std::exception_ptr error) {
                       if (error) std::rethrow_exception(error);
                     });
      io.run();  // returns only once the coroutine is done: the pending waits count as work
    }

    // 2. Futures: a wait that runs out while the rival holds the lock (an empty optional, no
    //    exception), then one that gets it.
    {
      zkr::HeldLock rival_held = rival.acquire();
      auto timed_out = zkr::asio::async_try_acquire_for(lock, 200ms, asio::use_future);
      check(!timed_out.get().has_value(), "use_future: a wait that runs out yields an empty optional");
      auto no_wait = zkr::asio::async_try_acquire_for(lock, 0ms, asio::use_future);
      check(!no_wait.get().has_value(), "use_future: a zero timeout on a held lock yields an empty optional");
      rival_held.release();
      auto granted = zkr::asio::async_try_acquire_for(lock, 10s, asio::use_future);
      std::optional<zkr::HeldLock> held = granted.get();
      check(held.has_value() && held->token().valid(), "use_future: the freed lock is granted");
    }

    // 3. A callback bound to a strand of an io_context run by another thread.
    {
      asio::io_context io;
      auto strand = asio::make_strand(io);
      std::promise<bool> on_strand;
      std::promise<zkr::FencingToken> token;
      zkr::asio::async_acquire(lock, asio::bind_executor(strand, [&](std::exception_ptr error, zkr::HeldLock held) {
                                 on_strand.set_value(strand.running_in_this_thread());
                                 token.set_value(error ? zkr::FencingToken{} : held.token());
                               }));
      std::thread runner([&io] { io.run(); });  // run() waits for the pending acquisition
      runner.join();
      check(on_strand.get_future().get(), "a callback bound to a strand runs on that strand");
      check(token.get_future().get().valid(), "the callback gets the held lock");
    }

    // 4. Failures other than a timeout are exceptions: the session closes while the wait is pending.
    {
      zkr::Session closing(options);
      zkr::Lock doomed(closing, path);
      zkr::HeldLock rival_held = rival.acquire();
      auto failed = zkr::asio::async_try_acquire_for(doomed, 30s, asio::use_future);
      closing.close();
      try {
        if (!ready_within(failed, 10s)) throw std::runtime_error("the wait did not end when its session closed");
        failed.get();
        check(false, "a wait whose session closes fails");
      } catch (const zkr::Error& e) {
        check(e.code() == zkr::errc::session_closed, fmt::format("a closed session is an exception: {}", e.what()));
      }
    }

    // 5. A wait started on a session that is already closed fails the same way, at once.
    {
      zkr::Session closed(options);
      zkr::Lock doomed(closed, path);
      closed.close();
      auto failed = zkr::asio::async_acquire(doomed, asio::use_future);
      try {
        if (!ready_within(failed, 10s)) throw std::runtime_error("a wait on a closed session never completed");
        failed.get();
        check(false, "acquiring on a closed session fails");
      } catch (const zkr::Error& e) {
        check(e.code() == zkr::errc::session_closed,
              fmt::format("a wait on a closed session is an exception: {}", e.what()));
      }
    }
  } catch (const std::exception& e) {
    fmt::print("asio: FAIL unexpected exception: {}\n", e.what());
    return 1;
  }
  if (problems != 0) return 1;
  fmt::print("asio: all completion tokens behaved\n");
  return 0;
}
