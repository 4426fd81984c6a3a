// SPDX-License-Identifier: Apache-2.0
#include "acquisition.hpp"

#include <future>
#include <new>
#include <optional>

#include <zkr/error.hpp>

#include "internals.hpp"
#include "without_exceptions.hpp"

namespace zkr::detail {

std::pair<std::error_code, std::shared_ptr<Contender>> Acquisition::run(
    std::chrono::nanoseconds timeout, std::stop_token stop, const std::shared_ptr<RefusalDetail>& refusal) const {
  if (start_) {
    using Outcome = std::pair<std::error_code, std::shared_ptr<Contender>>;
    auto outcome = std::make_shared<std::promise<Outcome>>();
    auto future = outcome->get_future();
    start_(
        timeout, refusal,
        [outcome](std::error_code ec, const std::shared_ptr<Contender>& granted) {
          outcome->set_value({ec, ec ? nullptr : granted});
        },
        std::move(stop));
    return future.get();
  }
  auto [result, contender] = await_contender(core_, make_(timeout, refusal), std::move(stop));
  if (result) contender.reset();
  return {result, std::move(contender)};
}

std::shared_ptr<Contender> Acquisition::wait(std::stop_token stop) const {
  auto refusal = std::make_shared<RefusalDetail>();
  auto [result, contender] = run(std::chrono::nanoseconds(-1), std::move(stop), refusal);
  if (result) throw Error(result, operation_, path_, refusal->get());
  return contender;
}

std::shared_ptr<Contender> Acquisition::try_for(std::chrono::nanoseconds timeout, std::stop_token stop) const {
  auto refusal = std::make_shared<RefusalDetail>();
  auto [result, contender] = run(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(stop), refusal);
  if (result && result != condition::gave_up) throw Error(result, operation_, path_, refusal->get());
  return contender;
}

std::shared_ptr<Contender> Acquisition::try_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] {
    auto [result, contender] = run(std::max(timeout, std::chrono::nanoseconds::zero()), std::move(stop),
                                   std::make_shared<RefusalDetail>());
    ec = result;
    return contender;
  });
}

namespace {

// Makes the request. `holds_slot`: a slot of the start window was taken for it, which its
// contender gives back (or this, if the request cannot be made).
ContenderRequest made_request(const std::shared_ptr<SessionCore>& core, const Acquisition::MakeRequest& make,
                              std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal,
                              const std::optional<AcquisitionCount>& counted, bool holds_slot) {
  ContenderRequest request;
  try {
    request = make(timeout, refusal ? std::move(refusal) : std::make_shared<RefusalDetail>());
  } catch (...) {
    if (holds_slot) {
      std::lock_guard lock(core->mutex());
      core->release_start_slot_locked();
    }
    throw;
  }
  if (counted) request.counted = *counted;
  request.holds_start_slot = holds_slot;
  return request;
}

// A lock's handler as an acquisition's: the granted contender comes as a HeldLock.
Acquisition::Done granting(AcquireHandler handler) {
  return [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
    handler(ec, contender ? HeldLock(Internals::key(), contender) : HeldLock{});
  };
}

void start_async(const std::shared_ptr<SessionCore>& core, ContenderRequest request, Acquisition::Done done,
                 std::stop_token stop) {
  start_contender_async(
      core, std::move(request),
      [done = std::move(done)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        done(ec, ec ? nullptr : contender);
      },
      std::move(stop));
}

// A lock's acquisition held back by the start window, in the session's record memory: the Lock's
// path and owner data follow the record in the same allocation, so that a burst of held-back
// acquisitions costs one allocation each, and only in that memory (see start_record_memory_locked).
class HeldBackLockStart final : public PendingStart {
 public:
  static PendingStartPtr make_locked(const std::shared_ptr<SessionCore>& core, const OneHolderSpec& lock,
                                     const AcquisitionCount& counted, AcquireHandler& handler) {
    const std::string& owner_data = lock.options.owner_data;
    const std::size_t bytes = sizeof(HeldBackLockStart) + lock.path.size() + owner_data.size();
    void* memory = core->start_record_memory_locked(bytes);
    auto* text = static_cast<char*>(memory) + sizeof(HeldBackLockStart);
    lock.path.copy(text, lock.path.size());
    owner_data.copy(text + lock.path.size(), owner_data.size());
    // Nothing below throws: moving a std::function does not.
    return PendingStartPtr(new (memory) HeldBackLockStart(core, bytes, lock, counted, std::move(handler)));
  }

  void admit() override {
    const std::string path(text(), path_size_);
    const LockOptions options{std::string(text() + path_size_, owner_data_size_), acl_, reentrant_};
    auto make = [&](std::chrono::nanoseconds timeout, std::shared_ptr<RefusalDetail> refusal) {
      return one_holder_request(path, options, role_, timeout, std::move(refusal));
    };
    ContenderRequest request;
    try {
      request = made_request(core(), make, std::chrono::nanoseconds(-1), nullptr, counted_, true);
    } catch (const Error& e) {
      refuse_on_callback_thread(e.code());
      return;
    } catch (const std::bad_alloc&) {
      refuse_on_callback_thread(make_error_code(std::errc::not_enough_memory));
      return;
    }
    start_async(core(), std::move(request), granting(std::move(handler_)), {});
  }

  void refuse(std::error_code why) override {
    counted_.decide(why);
    handler_(why, HeldLock{});
  }

 private:
  HeldBackLockStart(const std::shared_ptr<SessionCore>& core, std::size_t footprint, const OneHolderSpec& lock,
                    const AcquisitionCount& counted, AcquireHandler handler)
      : PendingStart(core, footprint),
        path_size_(lock.path.size()),
        owner_data_size_(lock.options.owner_data.size()),
        acl_(lock.options.acl),
        reentrant_(lock.options.reentrant),
        role_(lock.role),
        handler_(std::move(handler)),
        counted_(counted) {}

  const char* text() const { return reinterpret_cast<const char*>(this) + sizeof(HeldBackLockStart); }

  void refuse_on_callback_thread(std::error_code why) {
    counted_.decide(why);
    core()->post_callback([handler = std::move(handler_), why] { handler(why, HeldLock{}); });
  }

  std::size_t path_size_;
  std::size_t owner_data_size_;
  NodeAcl acl_;
  bool reentrant_;
  ContenderRole role_;
  AcquireHandler handler_;
  AcquisitionCount counted_;  // asked for when the acquisition was called for: the wait counts from then
};

}  // namespace

void Acquisition::start(std::chrono::nanoseconds timeout, Done done, std::stop_token stop,
                        std::shared_ptr<RefusalDetail> refusal) && {
  if (start_) {
    start_(timeout, refusal ? std::move(refusal) : std::make_shared<RefusalDetail>(), std::move(done),
           std::move(stop));
    return;
  }
  start_async(core_, made_request(core_, make_, timeout, std::move(refusal), std::nullopt, false), std::move(done),
              std::move(stop));
}

void start_lock_async(const std::shared_ptr<SessionCore>& core, const OneHolderSpec& lock,
                      std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  // Captures a reference only: stored inside the std::function, no allocation.
  auto make = [&lock](std::chrono::nanoseconds wait, std::shared_ptr<RefusalDetail> refusal) {
    return one_holder_request(lock.path, lock.options, lock.role, wait, std::move(refusal));
  };
  if (timeout >= std::chrono::nanoseconds::zero() || stop.stop_possible()) {
    start_async(core, made_request(core, make, timeout, nullptr, std::nullopt, false), granting(std::move(handler)),
                std::move(stop));
    return;
  }
  AcquisitionCount counted(*core, lock.path);
  bool holds_slot = false;
  PendingStartPtr not_queued;  // destroyed, if queueing failed, without the mutex
  try {
    std::lock_guard guard(core->mutex());
    switch (core->take_start_slot_locked()) {
      case SessionCore::StartSlot::full:
        not_queued = HeldBackLockStart::make_locked(core, lock, counted, handler);
        core->queue_start_locked(not_queued);
        return;
      case SessionCore::StartSlot::taken: holds_slot = true; break;
      case SessionCore::StartSlot::not_counted: break;
    }
  } catch (...) {
    counted.abandoned();  // the caller hears of it from the exception
    throw;
  }
  ContenderRequest request;
  try {
    request = made_request(core, make, timeout, nullptr, counted, holds_slot);
  } catch (...) {
    counted.abandoned();
    throw;
  }
  start_async(core, std::move(request), granting(std::move(handler)), {});
}

}  // namespace zkr::detail
