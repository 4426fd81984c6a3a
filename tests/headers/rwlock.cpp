// SPDX-License-Identifier: Apache-2.0
#include <zkr/rwlock.hpp>

// guide.md, "Read/write locks": the read side, the write side, errors as zkr::Error.
bool header_rwlock_uses(zkr::Session& session) {
  try {
    zkr::ReadWriteLock lock(session, "/locks/table");
    zkr::HeldLock reading = lock.read_lock().acquire();
    return reading.token().valid();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::would_deadlock;
  }
}
