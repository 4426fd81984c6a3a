// SPDX-License-Identifier: Apache-2.0
// ReadWriteLock: readers share, writers exclude, on one path.
//
// Node names are the ones Curator's InterProcessReadWriteLock writes ("_c_<uuid>-__READ__<seq>",
// "_c_<uuid>-__WRIT__<seq>"); kazoo's "__rlock__"/"__lock__" nodes are recognised when reading.
// A reader waits only for the nearest earlier writer; a writer waits for its immediate predecessor.
// Queue order is kept, so a writer is never starved by readers that came after it.
#pragma once

#include <optional>
#include <string>
#include <system_error>

#include <zkr/lock.hpp>

namespace zkr {

// A read/write lock: many readers or one writer, in Curator's InterProcessReadWriteLock layout.
class ReadWriteLock {
 public:
  // Throws Error(errc::invalid_path), or Error(errc::invalid_argument) as Lock's constructor.
  ReadWriteLock(Session& session, std::string path, LockOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<ReadWriteLock> make(Session& session, std::string path, LockOptions options,
                                           std::error_code& ec) noexcept;
  Lock& read_lock() { return read_; }
  Lock& write_lock() { return write_; }
  const std::string& path() const { return read_.path(); }

 private:
  Lock read_;
  Lock write_;
};

}  // namespace zkr
