// SPDX-License-Identifier: Apache-2.0
#include <zkr/semaphore.hpp>

// guide.md and recipes.md, "Semaphores": a lease, errc::limit_mismatch caught as zkr::Error.
bool header_semaphore_uses(zkr::Session& session) {
  try {
    zkr::Semaphore semaphore(session, "/capacity/encoders", 3);
    zkr::Lease lease = semaphore.acquire();
    return lease.token().valid();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::limit_mismatch;
  }
}
