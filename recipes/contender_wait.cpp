// SPDX-License-Identifier: Apache-2.0
#include "contender_wait.hpp"

#include <future>
#include <mutex>

#include <zkr/error.hpp>

namespace zkr::detail {

namespace {
using CancelOnStop = std::stop_callback<std::function<void()>>;

std::function<void()> canceller(const std::shared_ptr<Contender>& contender) {
  return [weak = std::weak_ptr<Contender>(contender)] {
    if (auto c = weak.lock()) c->cancel(make_error_code(errc::cancelled));
  };
}
}  // namespace

std::pair<std::error_code, std::shared_ptr<Contender>> await_contender(const std::shared_ptr<SessionCore>& core,
                                                                      ContenderRequest request,
                                                                      std::stop_token stop) {
  auto outcome = std::make_shared<std::promise<std::error_code>>();
  auto future = outcome->get_future();
  request.on_done_inline = true;  // only sets the promise
  request.on_done = [outcome](std::error_code result, const std::shared_ptr<Contender>&) {
    outcome->set_value(result);
  };
  auto contender = Contender::start(core, std::move(request));
  std::error_code result;
  {
    CancelOnStop cancel_on_stop(stop, canceller(contender));
    result = future.get();
  }
  return {result, std::move(contender)};
}

void start_contender_async(const std::shared_ptr<SessionCore>& core, ContenderRequest request,
                           std::function<void(std::error_code, const std::shared_ptr<Contender>&)> done,
                           std::stop_token stop) {
  // The outcome may arrive before the stop callback is even registered.
  struct StopRegistration {
    std::mutex mutex;
    bool finished = false;
    std::unique_ptr<CancelOnStop> callback;
  };
  auto registration = std::make_shared<StopRegistration>();
  request.on_done_inline = false;
  request.on_done = [done = std::move(done), registration](std::error_code ec,
                                                           const std::shared_ptr<Contender>& contender) {
    std::unique_ptr<CancelOnStop> callback;
    {
      std::lock_guard lock(registration->mutex);
      registration->finished = true;
      callback = std::move(registration->callback);
    }
    callback.reset();
    done(ec, contender);
  };
  auto contender = Contender::start(core, std::move(request));
  if (!stop.stop_possible()) return;
  auto callback = std::make_unique<CancelOnStop>(stop, canceller(contender));
  std::lock_guard lock(registration->mutex);
  if (!registration->finished) registration->callback = std::move(callback);
}

}  // namespace zkr::detail
