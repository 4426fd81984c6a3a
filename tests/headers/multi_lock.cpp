// SPDX-License-Identifier: Apache-2.0
#include <zkr/multi_lock.hpp>

// docs/recipes.md, "Multi-lock": every path or none, a token per path, errors as zkr::Error.
bool header_multi_lock_uses(zkr::Session& session) {
  try {
    zkr::MultiLock accounts(session, {"/locks/account-17", "/locks/account-4"});
    zkr::HeldMultiLock held = accounts.acquire();
    std::stop_token lost = held.lost_token();
    return held.token("/locks/account-4").valid() && held.tokens().size() == 2 && !lost.stop_requested();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::would_deadlock;
  }
}
