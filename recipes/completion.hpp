// SPDX-License-Identifier: Apache-2.0
// The preamble of a recipe's completions (replies, watches, timers): they run on the client's or
// the worker's thread, after the recipe's state may have gone, and touch that state only under the
// session mutex.
#pragma once

#include <memory>
#include <mutex>
#include <utility>

namespace zkr::detail {

// A completion that runs `call(owner, args...)` under the session mutex (the owner's
// `core->mutex()`), unless the owner is gone by then; `owner` is its shared_ptr, held for the
// call. Whether the completion is stale (an earlier attempt's, another session's) is the call's to
// decide: the owner's state says so only under the mutex.
template <typename Owner, typename Call>
auto when_alive_locked(std::weak_ptr<Owner> weak, Call run) {
  return [owner = std::move(weak), call = std::move(run)](auto... args) {
    auto self = owner.lock();
    if (!self) return;
    std::lock_guard lock(self->core->mutex());
    call(self, std::move(args)...);
  };
}

}  // namespace zkr::detail
