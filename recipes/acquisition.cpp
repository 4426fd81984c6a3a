#include "acquisition.hpp"

#include <future>
#include <new>

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

void Acquisition::start(std::chrono::nanoseconds timeout, Done done, std::stop_token stop,
                        std::shared_ptr<RefusalDetail> refusal) const {
  if (!refusal) refusal = std::make_shared<RefusalDetail>();
  if (start_) {
    start_(timeout, std::move(refusal), std::move(done), std::move(stop));
    return;
  }
  start_contender_async(
      core_, make_(timeout, std::move(refusal)),
      [done = std::move(done)](std::error_code ec, const std::shared_ptr<Contender>& contender) {
        done(ec, ec ? nullptr : contender);
      },
      std::move(stop));
}

}  // namespace zkr::detail
