// SPDX-License-Identifier: Apache-2.0
// One front end for every recipe's acquisitions. The four ways to acquire (wait until granted, try
// with a timeout, the same without exceptions, asynchronously) are written here once; a recipe
// only says how to make its request. What comes back is the granted contender, which the recipe
// wraps in its own grant type.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <zkr/lock.hpp>

#include "contender_wait.hpp"

namespace zkr::detail {

// Why an acquisition was refused, in words: a parent check writes it (under the session mutex),
// the front end puts it into the Error once the outcome is known.
class RefusalDetail {
 public:
  void set(std::string text) {
    std::lock_guard lock(mutex_);
    text_ = std::move(text);
  }
  std::string get() const {
    std::lock_guard lock(mutex_);
    return text_;
  }

 private:
  mutable std::mutex mutex_;
  std::string text_;
};

// The owner data and ACL of a one-holder recipe (lock, read/write lock, election) on `path`:
// owner data defaulted to default_owner_data() and checked against the server's request limit, a
// creator-only ACL only with credentials. Throws Error(errc::invalid_argument) naming `recipe`.
LockOptions checked_lock_options(const SessionCore& core, const std::string& path, LockOptions options,
                                 std::string_view recipe);
// The request of a one-holder recipe: it refuses a semaphore's path (errc::incompatible_peer).
ContenderRequest one_holder_request(const std::string& path, const LockOptions& options, ContenderRole role,
                                    std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal);

class Acquisition {
 public:
  // `timeout`: negative waits for ever, zero does not wait.
  using MakeRequest =
      std::function<ContenderRequest(std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal)>;
  using Done = std::function<void(std::error_code, const std::shared_ptr<Contender>&)>;
  // For an acquisition that is more than one contender (a peer's semaphore: its internal lock,
  // then a lease): starts it and runs `done` once, on the session's callback thread, with the
  // granted contender; a stop request cancels it.
  using Start = std::function<void(std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal,
                                   Done done, std::stop_token stop)>;

  // `operation` names the acquisition in errors ("acquire lock"). Made for one call by a recipe
  // that outlives it (`path` is the recipe's): a MakeRequest that captures only the recipe's
  // `this` allocates nothing, so the noexcept form stays so.
  Acquisition(const std::shared_ptr<SessionCore>& core, std::string_view operation, std::string_view path,
              MakeRequest make)
      : core_(core), operation_(operation), path_(path), make_(std::move(make)) {}
  Acquisition(const std::shared_ptr<SessionCore>& core, std::string_view operation, std::string_view path,
              Start start)
      : core_(core), operation_(operation), path_(path), start_(std::move(start)) {}
  // Until granted. Throws Error (errc::cancelled when stopped).
  std::shared_ptr<Contender> wait(std::stop_token stop) const;
  // At most `timeout` (0: not at all); null when it gave up (condition::gave_up). Throws Error.
  std::shared_ptr<Contender> try_for(std::chrono::nanoseconds timeout, std::stop_token stop) const;
  // The same without exceptions: null, and `ec` says why, when there is no grant.
  std::shared_ptr<Contender> try_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                     std::error_code& ec) const noexcept;
  // The outcome runs `done` on the session's callback thread (with null when there is no grant);
  // `refusal`, if given, holds the words of a refusal by then.
  void start(std::chrono::nanoseconds timeout, Done done, std::stop_token stop,
             std::shared_ptr<RefusalDetail> refusal = nullptr) &&;

 private:
  std::pair<std::error_code, std::shared_ptr<Contender>> run(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                             const std::shared_ptr<RefusalDetail>& refusal) const;

  const std::shared_ptr<SessionCore>& core_;
  std::string_view operation_;
  std::string_view path_;
  MakeRequest make_;
  Start start_;  // instead of make_
};

// What a lock's (or a read/write lock's) acquisition is made of: one_holder_request's arguments.
struct OneHolderSpec {
  const std::string& path;
  const LockOptions& options;
  ContenderRole role;
};

// Lock::async_acquire: `handler` runs once, on the session's callback thread. One that waits for
// ever without a stop token may be held back by the session's start window (SessionCore::StartSlot)
// until a slot is free: it then waits in a record of its own that owns a copy of `lock` (the Lock
// may be gone when it starts). A deadline or a stop request must take effect at once, which a
// held-back acquisition could not: those start at once. Throws Error if the request cannot be made.
void start_lock_async(const std::shared_ptr<SessionCore>& core, const OneHolderSpec& lock,
                      std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop);

}  // namespace zkr::detail
