// SPDX-License-Identifier: Apache-2.0
// Waiting for a contender's outcome: the glue between the callback-driven contender and a caller
// that blocks (await_contender) or takes a callback (start_contender_async), with a stop token
// that cancels either.
#pragma once

#include <functional>
#include <memory>
#include <stop_token>
#include <system_error>
#include <utility>

#include "contender_queue.hpp"

namespace zkr::detail {

// Blocks the calling thread until the contender's outcome; a stop request cancels it
// (errc::cancelled). The stop callback lives on this thread's stack: it must never be destroyed
// under the session mutex, where a concurrent stop request (waiting for that mutex inside
// cancel()) would deadlock its destructor.
std::pair<std::error_code, std::shared_ptr<Contender>> await_contender(const std::shared_ptr<SessionCore>& core,
                                                                      ContenderRequest request,
                                                                      std::stop_token stop);

// Starts a contender whose outcome runs `done` on the session's callback thread; a stop request
// cancels it. The stop callback is dropped when the outcome arrives, on the callback thread.
void start_contender_async(const std::shared_ptr<SessionCore>& core, ContenderRequest request,
                           std::function<void(std::error_code, const std::shared_ptr<Contender>&)> done,
                           std::stop_token stop);

}  // namespace zkr::detail
