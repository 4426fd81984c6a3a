// SPDX-License-Identifier: Apache-2.0
#include <zkr/lock.hpp>

// README.md's tour and guide.md, "Locks": acquire, the token, the loss signal, errors as zkr::Error.
std::int64_t header_lock_uses(zkr::Session& session) {
  try {
    zkr::Lock lock(session, "/locks/nightly-report");
    zkr::HeldLock held = lock.acquire();
    held.on_lost([](zkr::LossReason) {});
    std::stop_token lost = held.lost_token();
    return lost.stop_requested() ? 0 : held.token().value();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::would_deadlock ? -1 : -2;
  }
}

bool header_lock_uses_without_exceptions(zkr::Session& session) {
  std::error_code ec;
  auto lock = zkr::Lock::make(session, "/locks/a", {}, ec);
  if (!lock) return ec == zkr::errc::invalid_path;
  auto held = lock->try_acquire_for(std::chrono::seconds(5), {}, ec);
  return held || ec == zkr::condition::gave_up;
}
