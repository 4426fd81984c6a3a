#include "acquisition.hpp"

#include <future>
#include <new>
#include <optional>

#include <zkr/error.hpp>

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

void start_async(const std::shared_ptr<SessionCore>& core, ContenderRequest request, Acquisition::Done done,
                 std::stop_token stop) {
  start_contender_async(
      core, std::move(request),
      [done = std::move(done)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        done(ec, ec ? nullptr : contender);
      },
      std::move(stop));
}

// An acquisition the start window held back: what start() was given, kept until a slot is free.
class HeldBackStart final : public PendingStart {
 public:
  HeldBackStart(std::shared_ptr<SessionCore> core, Acquisition::MakeRequest make, std::chrono::nanoseconds timeout,
                Acquisition::Done done, AcquisitionCount counted)
      : core_(std::move(core)), make_(std::move(make)), timeout_(timeout), done_(std::move(done)), counted_(counted) {}

  void admit() override {
    ContenderRequest request;
    try {
      request = made_request(core_, make_, timeout_, nullptr, counted_, true);
    } catch (const Error& e) {
      refuse_on_callback_thread(e.code());
      return;
    } catch (const std::bad_alloc&) {
      refuse_on_callback_thread(make_error_code(std::errc::not_enough_memory));
      return;
    }
    start_async(core_, std::move(request), std::move(done_), {});
  }

  void refuse(std::error_code why) override {
    counted_.decided(why);
    done_(why, nullptr);
  }

 private:
  void refuse_on_callback_thread(std::error_code why) {
    counted_.decided(why);
    core_->post_callback([done = std::move(done_), why] { done(why, nullptr); });
  }

  std::shared_ptr<SessionCore> core_;
  Acquisition::MakeRequest make_;
  std::chrono::nanoseconds timeout_;
  Acquisition::Done done_;
  AcquisitionCount counted_;  // asked for when start() was called: the wait counts from then
};

}  // namespace

void Acquisition::start(std::chrono::nanoseconds timeout, Done done, std::stop_token stop,
                        std::shared_ptr<RefusalDetail> refusal) && {
  if (start_) {
    start_(timeout, refusal ? std::move(refusal) : std::make_shared<RefusalDetail>(), std::move(done),
           std::move(stop));
    return;
  }
  // Only an acquisition that can end in nothing but its outcome waits for a slot: a deadline or a
  // stop request must take effect at once, which a queued acquisition could not.
  if (!may_wait_to_start_ || timeout >= std::chrono::nanoseconds::zero() || stop.stop_possible()) {
    start_async(core_, made_request(core_, make_, timeout, std::move(refusal), std::nullopt, false), std::move(done),
                std::move(stop));
    return;
  }
  AcquisitionCount counted(*core_, path_);
  bool holds_slot = false;
  {
    std::lock_guard lock(core_->mutex());
    switch (core_->take_start_slot_locked()) {
      case SessionCore::StartSlot::full:
        core_->queue_start_locked(
            std::make_unique<HeldBackStart>(core_, std::move(make_), timeout, std::move(done), counted));
        return;
      case SessionCore::StartSlot::taken: holds_slot = true; break;
      case SessionCore::StartSlot::not_counted: break;
    }
  }
  ContenderRequest request;
  try {
    request = made_request(core_, make_, timeout, std::move(refusal), counted, holds_slot);
  } catch (...) {
    counted.abandoned();  // the caller hears of it from the exception
    throw;
  }
  start_async(core_, std::move(request), std::move(done), std::move(stop));
}

}  // namespace zkr::detail
