// SPDX-License-Identifier: Apache-2.0
// Boost.Asio completion tokens for acquiring locks and semaphore leases and for waiting for
// leadership. Optional and header-only: include it only if you use Boost.Asio (1.74 or later); the
// rest of the library does not need it.
//
// The initiating functions mirror Lock::acquire() and Lock::try_acquire_for() (for a Lock or a
// Semaphore: a Lease is a HeldLock; for a MultiLock, completing with a HeldMultiLock) and LeaderLatch::wait_for_leadership(), and complete the Asio
// way, with an exception_ptr first (as asio::co_spawn does), so that every completion token works:
//
//   // coroutine: returns the HeldLock, or throws zkr::Error like acquire()
//   zkr::HeldLock held = co_await zkr::asio::async_acquire(lock, boost::asio::use_awaitable);
//   zkr::Lease lease = co_await zkr::asio::async_acquire(semaphore, boost::asio::use_awaitable);
//
//   // future: get() returns an optional that is empty if the wait ran out or was cancelled
//   auto f = zkr::asio::async_try_acquire_for(lock, 5s, boost::asio::use_future);
//
//   // a started LeaderLatch: the term, once this participant leads
//   zkr::Leadership term = co_await zkr::asio::async_wait_for_leadership(latch, boost::asio::use_awaitable);
//
//   // a barrier down, all N through a double barrier (true), or the timeout ran out (false)
//   bool down = co_await zkr::asio::async_wait(barrier, 30s, boost::asio::use_awaitable);
//   bool entered = co_await zkr::asio::async_enter(double_barrier, 5min, boost::asio::use_awaitable);
//   bool joined = co_await zkr::asio::async_join(group_member, 10s, boost::asio::use_awaitable);
//   // a TreeCache (or NodeCache::tree()): once its initial load is complete
//   co_await zkr::asio::async_wait_initialized(cache, boost::asio::use_awaitable);
//
//   // a SharedCounter: the value, the value written, whether the compare-and-set wrote
//   std::int64_t now = co_await zkr::asio::async_add(counter, 1, boost::asio::use_awaitable);
//
//   // callback, run through its associated executor (here a strand)
//   zkr::asio::async_acquire(lock, boost::asio::bind_executor(strand,
//       [](std::exception_ptr error, zkr::HeldLock held) { ... }));
//
// Completion runs on the handler's associated executor (the coroutine's, a strand's, ...), never on
// the session's callback thread unless the handler has no executor of its own (plain lambdas,
// use_future), in which case it runs there directly and must not block (a SharedCounter form's
// handler without an executor runs on that form's own worker thread instead, where it may block).
// It never runs inside the
// initiating function: an operation complete when it starts (a loaded cache, a latch never
// started) completes as if by boost::asio::post, so that a coroutine awaiting it in a loop resumes
// from its executor each turn and its stack does not grow (a handler without an executor of its
// own may then run on Asio's system executor). The pending operation counts as outstanding work of
// that executor, so io_context::run() does not return before it.
//
// Cancellation is by std::stop_token, as in the rest of the library (Boost 1.74 has no per-operation
// cancellation slots). The Lock or Semaphore object may be destroyed while an operation is pending
// (the LeaderLatch too: the wait then ends with errc::cancelled); the Session may not.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <stop_token>
#include <system_error>
#include <thread>
#include <concepts>
#include <type_traits>
#include <utility>

#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <zkr/barrier.hpp>
#include <zkr/cache.hpp>
#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/group.hpp>
#include <zkr/lock.hpp>
#include <zkr/multi_lock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/shared_counter.hpp>

namespace zkr::asio {

namespace detail {

// Delivers a result to an Asio handler through its associated executor, keeping that executor's
// work count up until then. Lock::async_acquire wants a copyable callable; Asio handlers are
// move-only, hence the shared state.
//
// Asio's rule for an operation that completes inside its initiating function (a cache loaded
// already, a latch never started): the handler runs as if by post, never before that function
// returned. Otherwise a strand-bound handler would run inside the caller's own turn on the strand,
// and a coroutine awaiting such operations in a loop would resume on top of its own stack each
// turn until the stack overflows. Hence initiate() marks the thread that starts the operation, and
// deliver() posts what that thread completes while starting it; later completions (on the
// session's callback thread) are dispatched.
template <typename Handler, typename... Result>  // no Result: a completion with the error alone
class Delivery {
 public:
  explicit Delivery(Handler handler)
      : work_(boost::asio::prefer(boost::asio::get_associated_executor(handler),
                                  boost::asio::execution::outstanding_work.tracked)),
        handler_(std::move(handler)) {}

  // Runs `start`, which starts the operation; it may call deliver() before returning.
  template <typename Start>
  void initiate(Start&& start) {
    initiating_on_ = std::this_thread::get_id();
    try {
      std::forward<Start>(start)();
    } catch (...) {
      initiating_on_ = std::thread::id();
      throw;
    }
    initiating_on_ = std::thread::id();
  }

  void deliver(std::exception_ptr error, Result... result) {
    auto work = std::move(work_);
    auto complete = [handler = std::move(handler_), error, ... result = std::move(result)]() mutable {
      std::move(handler)(error, std::move(result)...);
    };
    if (initiating_on_.load() == std::this_thread::get_id()) boost::asio::post(work, std::move(complete));
    else boost::asio::dispatch(work, std::move(complete));
  }

 private:
  using Executor = boost::asio::associated_executor_t<Handler>;
  // Decayed: for an executor without the property, prefer() hands back a reference to its argument.
  using TrackedExecutor = std::decay_t<typename boost::asio::prefer_result<
      Executor, boost::asio::execution::outstanding_work_t::tracked_t>::type>;
  TrackedExecutor work_;
  Handler handler_;
  std::atomic<std::thread::id> initiating_on_{};  // the thread inside initiate(), if any
};

inline std::exception_ptr to_exception(std::error_code ec, const std::string& path,
                                       const char* operation = "acquire") {
  return std::make_exception_ptr(Error(ec, operation, path));
}

// What the handler gets from the recipe's completion (error_code, value...): the value itself
// (failures as the exception), an optional of it (empty when the recipe gave up), or, for a
// completion without a value, a bool (false when it gave up).
template <typename Result>
struct Outcome {
  static constexpr bool gives_up_quietly = false;
  static Result done(Result value) { return value; }
  static Result none() { return Result{}; }
};
template <typename Value>
struct Outcome<std::optional<Value>> {
  static constexpr bool gives_up_quietly = true;
  static std::optional<Value> done(Value value) { return std::optional<Value>(std::move(value)); }
  static std::optional<Value> none() { return std::nullopt; }
};
template <>
struct Outcome<bool> {
  static constexpr bool gives_up_quietly = true;
  static bool done() { return true; }
  static bool none() { return false; }
};

// The initiation every form below shares: `start(complete)` starts the recipe's operation, which
// calls complete(ec, value...) once; the handler gets void(std::exception_ptr, Result), the
// exception a zkr::Error naming `operation` and `path`.
template <typename Result, typename CompletionToken, typename Start>
auto async_recipe(CompletionToken&& token, const std::string& path, const char* operation, Start start) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr, Result)>(
      [](auto handler, std::string target, const char* what, Start begin) {
        auto delivery = std::make_shared<Delivery<decltype(handler), Result>>(std::move(handler));
        delivery->initiate([&] {
          begin([delivery, target, what](std::error_code ec, auto... value) {
            using Results = Outcome<Result>;
            if (!ec) delivery->deliver(nullptr, Results::done(std::move(value)...));
            else if (Results::gives_up_quietly && ec == condition::gave_up) delivery->deliver(nullptr, Results::none());
            else delivery->deliver(to_exception(ec, target, what), Results::none());
          });
        });
      },
      token, path, operation, std::move(start));
}

}  // namespace detail

// What async_acquire and async_try_acquire_for take: a Lock or a Semaphore.
template <typename Recipe>
concept Acquirable = std::same_as<Recipe, Lock> || std::same_as<Recipe, Semaphore>;

// Waits until the lock (or a lease) is granted. Completion signature:
// void(std::exception_ptr, HeldLock). The exception is a zkr::Error, as acquire() throws:
// errc::cancelled when stop is requested, errc::session_closed, zk_errc::no_auth,
// errc::limit_mismatch (a semaphore), other ZooKeeper errors (see zkr::condition).
template <Acquirable Recipe, typename CompletionToken>
auto async_acquire(Recipe& lock, CompletionToken&& token, std::stop_token stop = {}) {
  return detail::async_recipe<HeldLock>(std::forward<CompletionToken>(token), lock.path(), "acquire",
                                        [&lock, stop](AcquireHandler done) {
                                          lock.async_acquire(std::chrono::nanoseconds(-1), std::move(done), stop);
                                        });
}

// Waits at most `timeout` (zero: does not wait). Completion signature:
// void(std::exception_ptr, std::optional<HeldLock>). Empty if the wait ran out, stop was requested,
// or (zero timeout) the lock was held (every lease taken); other failures as async_acquire().
template <Acquirable Recipe, typename CompletionToken>
auto async_try_acquire_for(Recipe& lock, std::chrono::nanoseconds timeout, CompletionToken&& token,
                           std::stop_token stop = {}) {
  return detail::async_recipe<std::optional<HeldLock>>(
      std::forward<CompletionToken>(token), lock.path(), "acquire", [&lock, timeout, stop](AcquireHandler done) {
        lock.async_acquire(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(done), stop);
      });
}

// Waits until the started latch leads. Completion signature: void(std::exception_ptr, Leadership).
// The exception is a zkr::Error: errc::cancelled when stop is requested or the latch is closed,
// errc::invalid_argument if it was never started, or the error that ended participation
// (errc::session_closed, zk_errc::no_auth, ...).
template <typename CompletionToken>
auto async_wait_for_leadership(LeaderLatch& latch, CompletionToken&& token, std::stop_token stop = {}) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr, Leadership)>(
      [](auto handler, LeaderLatch& target, std::stop_token stop_token) {
        using Handler = decltype(handler);
        auto delivery = std::make_shared<detail::Delivery<Handler, Leadership>>(std::move(handler));
        auto complete = [delivery, path = target.path()](std::error_code ec, Leadership term) {
          if (ec) delivery->deliver(detail::to_exception(ec, path, "wait for leadership"), Leadership{});
          else delivery->deliver(nullptr, std::move(term));
        };
        delivery->initiate([&] {
          try {
            target.async_wait_for_leadership(std::chrono::nanoseconds(-1), complete, std::move(stop_token));
          } catch (const Error&) {
            delivery->deliver(std::current_exception(), Leadership{});
          }
        });
      },
      token, std::ref(latch), std::move(stop));
}

// Waits at most `timeout` (zero: does not wait) for the started latch to lead. Completion
// signature: void(std::exception_ptr, std::optional<Leadership>). Empty if the wait ran out, stop
// was requested or the latch was closed; other failures as async_wait_for_leadership().
template <typename CompletionToken>
auto async_wait_for_leadership_for(LeaderLatch& latch, std::chrono::nanoseconds timeout, CompletionToken&& token,
                                   std::stop_token stop = {}) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr, std::optional<Leadership>)>(
      [](auto handler, LeaderLatch& target, std::chrono::nanoseconds wait, std::stop_token stop_token) {
        using Handler = decltype(handler);
        auto delivery = std::make_shared<detail::Delivery<Handler, std::optional<Leadership>>>(std::move(handler));
        auto complete = [delivery, path = target.path()](std::error_code ec, Leadership term) {
          if (!ec) delivery->deliver(nullptr, std::optional<Leadership>(std::move(term)));
          else if (ec == condition::gave_up) delivery->deliver(nullptr, std::nullopt);
          else delivery->deliver(detail::to_exception(ec, path, "wait for leadership"), std::nullopt);
        };
        delivery->initiate([&] {
          try {
            target.async_wait_for_leadership(std::max(wait, std::chrono::nanoseconds::zero()), complete,
                                             std::move(stop_token));
          } catch (const Error&) {
            delivery->deliver(std::current_exception(), std::nullopt);
          }
        });
      },
      token, std::ref(latch), timeout, std::move(stop));
}

// ---- Barriers (zkr/barrier.hpp) and group membership (zkr/group.hpp) ----
// Completion signature: void(std::exception_ptr, bool). True once the barrier is down (async_wait),
// all N have entered (async_enter) or left (async_leave); false when `timeout` (negative: none)
// ran out or stop was requested; the exception is a zkr::Error as the blocking forms throw
// (errc::session_closed, zk_errc::no_auth, ...).
template <typename CompletionToken>
auto async_wait(Barrier& barrier, std::chrono::nanoseconds timeout, CompletionToken&& token, std::stop_token stop = {}) {
  return detail::async_recipe<bool>(std::forward<CompletionToken>(token), barrier.path(), "wait on barrier",
                                    [&barrier, timeout, stop](BarrierHandler done) {
                                      barrier.async_wait(timeout, std::move(done), stop);
                                    });
}

// Enters a DoubleBarrier (signature as async_wait's).
template <typename CompletionToken>
auto async_enter(DoubleBarrier& barrier, std::chrono::nanoseconds timeout, CompletionToken&& token,
                 std::stop_token stop = {}) {
  return detail::async_recipe<bool>(std::forward<CompletionToken>(token), barrier.path(), "enter double barrier",
                                    [&barrier, timeout, stop](BarrierHandler done) {
                                      barrier.async_enter(timeout, std::move(done), stop);
                                    });
}

// Leaves a DoubleBarrier (signature as async_wait's).
template <typename CompletionToken>
auto async_leave(DoubleBarrier& barrier, std::chrono::nanoseconds timeout, CompletionToken&& token,
                 std::stop_token stop = {}) {
  return detail::async_recipe<bool>(std::forward<CompletionToken>(token), barrier.path(), "leave double barrier",
                                    [&barrier, timeout, stop](BarrierHandler done) {
                                      barrier.async_leave(timeout, std::move(done), stop);
                                    });
}

// Waits until the member has joined (true), or `timeout` (negative: none) ran out or stop was
// requested (false; the join goes on). Completion signature: void(std::exception_ptr, bool); the
// exception is a zkr::Error as GroupMember::join() throws (zk_errc::node_exists, ...).
template <typename CompletionToken>
auto async_join(GroupMember& member, std::chrono::nanoseconds timeout, CompletionToken&& token,
                std::stop_token stop = {}) {
  return detail::async_recipe<bool>(std::forward<CompletionToken>(token), member.path(), "join group",
                                    [&member, timeout, stop](GroupMember::JoinHandler done) {
                                      member.async_join(timeout, std::move(done), stop);
                                    });
}

// Waits until the cache's initial load is complete. Completion signature: void(std::exception_ptr).
// The exception is a zkr::Error: errc::cancelled if the cache was stopped first, or the error that
// stopped it (errc::cache_limit, zk_errc::no_auth, errc::session_closed). The cache must outlive
// the wait unless it is stopped (which completes it).
template <typename CompletionToken>
auto async_wait_initialized(TreeCache& cache, CompletionToken&& token) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr)>(
      [](auto handler, TreeCache& target) {
        using Handler = decltype(handler);
        auto delivery = std::make_shared<detail::Delivery<Handler>>(std::move(handler));
        delivery->initiate([&] {
          target.async_wait_initialized([delivery, root = target.root()](std::error_code ec) {
            delivery->deliver(ec ? detail::to_exception(ec, root, "wait for the cache of") : nullptr);
          });
        });
      },
      token, std::ref(cache));
}

// A MultiLock: every path, or none. Completion signature: void(std::exception_ptr, HeldMultiLock);
// the exception is the zkr::Error MultiLock::acquire() throws, naming the MultiLock's first path.
template <typename CompletionToken>
auto async_acquire(MultiLock& locks, CompletionToken&& token, std::stop_token stop = {}) {
  return detail::async_recipe<HeldMultiLock>(std::forward<CompletionToken>(token), locks.paths().front(), "acquire",
                                             [&locks, stop](MultiAcquireHandler done) {
                                               locks.async_acquire(std::chrono::nanoseconds(-1), std::move(done), stop);
                                             });
}

// A MultiLock, waiting at most `timeout` (zero: does not wait). Completion signature:
// void(std::exception_ptr, std::optional<HeldMultiLock>): empty if it gave up, as MultiLock's
// try_acquire_for().
template <typename CompletionToken>
auto async_try_acquire_for(MultiLock& locks, std::chrono::nanoseconds timeout, CompletionToken&& token,
                           std::stop_token stop = {}) {
  return detail::async_recipe<std::optional<HeldMultiLock>>(
      std::forward<CompletionToken>(token), locks.paths().front(), "acquire",
      [&locks, timeout, stop](MultiAcquireHandler done) {
        locks.async_acquire(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(done), stop);
      });
}

// ---- Shared counter (zkr/shared_counter.hpp) ----
// Completion signature: void(std::exception_ptr, R): R the value read (async_get), the value
// written (async_add), or whether the counter held `expected` and `desired` was written
// (async_compare_and_set); the exception is a zkr::Error as the blocking forms throw
// (errc::cancelled when stop is requested, errc::timed_out past CounterOptions::timeout,
// zk_errc::connection_loss for an unknown outcome, errc::undecodable_data, ...).
// A counter's operation is a read and conditional writes retried until one applies: each Asio form
// runs the blocking one on a thread of its own (never the session's), with a copy of the counter,
// so the SharedCounter may be destroyed while it is pending (the Session may not). That copy is
// dropped before the handler is called, so once the handler ran the Session may go and nothing of
// it is left. A handler without an executor of its own runs on that thread (not on the session's
// callback thread), where it may block without holding up the session.
namespace detail {
template <typename Result, typename CompletionToken, typename Operation>
auto async_counter_operation(CompletionToken&& token, const SharedCounter& counter, std::stop_token stop,
                             Operation operation) {
  return boost::asio::async_initiate<CompletionToken, void(std::exception_ptr, Result)>(
      [](auto handler, SharedCounter target, std::stop_token stop_token, Operation run) {
        using Handler = decltype(handler);
        auto delivery = std::make_shared<Delivery<Handler, Result>>(std::move(handler));
        delivery->initiate([&] {
          std::thread([delivery, target = std::optional<SharedCounter>(std::move(target)),
                       stop_token = std::move(stop_token), run = std::move(run)]() mutable {
            Result result{};
            std::exception_ptr error;
            try {
              result = run(*target, stop_token);
            } catch (...) {
              error = std::current_exception();
            }
            target.reset();  // the session's reference, before the handler may let the Session go
            delivery->deliver(error, error ? Result{} : result);
          }).detach();
        });
      },
      token, counter, std::move(stop), std::move(operation));
}
}  // namespace detail

// SharedCounter::get(). Completion signature: void(std::exception_ptr, std::int64_t).
template <typename CompletionToken>
auto async_get(const SharedCounter& counter, CompletionToken&& token, std::stop_token stop = {}) {
  return detail::async_counter_operation<std::int64_t>(
      std::forward<CompletionToken>(token), counter, std::move(stop),
      [](SharedCounter& target, std::stop_token stop_token) { return target.get(std::move(stop_token)); });
}

// SharedCounter::add(); the value written. Completion signature: void(std::exception_ptr, std::int64_t).
template <typename CompletionToken>
auto async_add(SharedCounter& counter, std::int64_t delta, CompletionToken&& token, std::stop_token stop = {}) {
  return detail::async_counter_operation<std::int64_t>(
      std::forward<CompletionToken>(token), counter, std::move(stop),
      [delta](SharedCounter& target, std::stop_token stop_token) { return target.add(delta, std::move(stop_token)); });
}

// SharedCounter::compare_and_set(); whether it wrote. Completion signature:
// void(std::exception_ptr, bool).
template <typename CompletionToken>
auto async_compare_and_set(SharedCounter& counter, std::int64_t expected, std::int64_t desired, CompletionToken&& token,
                           std::stop_token stop = {}) {
  return detail::async_counter_operation<bool>(
      std::forward<CompletionToken>(token), counter, std::move(stop),
      [expected, desired](SharedCounter& target, std::stop_token stop_token) {
        return target.compare_and_set(expected, desired, std::move(stop_token));
      });
}

}  // namespace zkr::asio
