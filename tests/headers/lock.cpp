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
