// SPDX-License-Identifier: Apache-2.0
#include <zkr/fenced.hpp>

// The header's own example and fencing.md: a fenced write refused with errc::lock_lost.
bool header_fenced_uses(const zkr::HeldLock& held) {
  try {
    zkr::FencedTransaction txn(held);
    txn.create("/app/jobs/42", "queued").set("/app/state", "v2").remove("/app/tmp");
    return !txn.commit().empty();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::lock_lost;
  }
}
