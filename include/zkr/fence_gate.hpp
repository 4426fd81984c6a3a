// SPDX-License-Identifier: Apache-2.0
// FenceGate: the resource side of fencing.
//
// A lock cannot stop a paused holder from writing after its lease is gone; only the resource can.
// A resource that embeds FenceGate calls admit(key, token) before applying each write and applies
// it only if admit returns true. The gate remembers the highest token it admitted per key and
// refuses any lower one, so a holder that lost its lock (and was succeeded by a grant with a larger
// token) cannot overwrite its successor's work. Equal tokens are admitted: one grant may write many
// times.
//
// FenceGate lives in memory: a resource that restarts with an empty one admits any token again.
// DurableFenceGate keeps the same rule in a file and makes each new highest token durable before
// admit() returns true, so the caller applies a write only once its token survives a crash, and a
// restarted resource never admits a token lower than one it admitted before. (A store with a
// transactional database can instead keep the highest token with its data, in the same
// transaction: docs/fencing.md.) A resource that cannot check tokens at all (a plain file system,
// a third-party API) cannot be fenced; there the lock is an efficiency lock, and correctness must
// come from something else (for example conditional writes keyed on a version).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>

#include <zkr/error.hpp>
#include <zkr/fencing_token.hpp>

namespace zkr {

// The resource side of fencing, in memory: admits a write only if its token is not lower than the
// highest admitted for its key.
class FenceGate {
 public:
  // True if token >= the highest admitted for key (which then becomes token). False otherwise:
  // the write must be refused. Invalid (zero) tokens are always refused.
  bool admit(std::string_view key, FencingToken token);

  // The highest token admitted for key so far.
  std::optional<FencingToken> highest(std::string_view key) const;

  // Counters, for tests and metrics.
  std::uint64_t admitted() const;
  std::uint64_t refused() const;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::string, FencingToken> highest_;
  std::uint64_t admitted_ = 0;
  std::uint64_t refused_ = 0;
};

// A FenceGate whose highest tokens survive a restart, kept in one file.
//
// Each admit() that raises a key's highest token rewrites the file before it returns true: a
// temporary file beside it is written and fsynced, renamed over the file, and the directory is
// fsynced. A crash at any point leaves either the old file or the new one, never a mix, and the
// caller was told "admitted" only after the new one was durable, so a write it applied is always
// covered by the token on disk. Admitting a token equal to the highest writes nothing (one grant
// may write many times at the cost of one file write). The file ends in a CRC-32 of its contents;
// a damaged file is refused, never replaced by an empty gate, which would admit lower tokens again.
// One gate at a time may use a file: it holds an flock(2) on `<file>.lock` while open.
//
// A gate is a file, not a name. A name that is a symbolic link (to a persistent volume, say) is
// followed to the real file, and the lock file, the temporary file and the rename are beside that
// file: the link stays a link, and every name of the file (links, a linked directory) meets the
// same lock. A file with more than one hard link is refused, since replacing it would leave the
// other names with the old tokens.
class DurableFenceGate {
 public:
  // Opens the gate kept in `file`, creating it (empty) if it does not exist; its directory must
  // exist (if `file` is a symbolic link, the directory of the file it points to). Throws Error
  // naming the file: errc::corrupt_state if it is damaged (truncated, checksum mismatch, not a
  // gate file), errc::invalid_argument if it has more than one hard link, the system's error (no
  // such directory, permission denied, too many levels of symbolic links, ...) if it cannot be
  // read or written, std::errc::device_or_resource_busy if another gate has it open (through any
  // of its names).
  explicit DurableFenceGate(std::filesystem::path file);
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set to one of those
  // codes, on failure. `auto gate = zkr::DurableFenceGate::open(file, ec);`: a gate does not move.
  static std::optional<DurableFenceGate> open(std::filesystem::path file, std::error_code& ec) noexcept;
  ~DurableFenceGate();
  DurableFenceGate(const DurableFenceGate&) = delete;
  DurableFenceGate& operator=(const DurableFenceGate&) = delete;

  // As FenceGate::admit, and a new highest token is durable before this returns true. Throws Error
  // (the write is then not admitted) if the file cannot be written; since the state of the file is
  // then unknown, every later admit() throws too, until the gate is opened again.
  bool admit(std::string_view key, FencingToken token);
  // The same without exceptions: false, and ec set, where the form above throws.
  bool admit(std::string_view key, FencingToken token, std::error_code& ec) noexcept;

  std::optional<FencingToken> highest(std::string_view key) const;
  std::uint64_t admitted() const;
  std::uint64_t refused() const;
  const std::filesystem::path& file() const noexcept { return file_; }  // as given to the constructor
  // The file the gate keeps its tokens in: `file()` with its symbolic links followed, absolute.
  const std::filesystem::path& real_file() const noexcept { return real_file_; }

 private:
  void persist(const std::map<std::string, FencingToken, std::less<>>& state);

  std::filesystem::path file_;
  std::filesystem::path real_file_;
  std::filesystem::path name_;            // of the real file, in directory_fd_
  std::filesystem::path temporary_name_;  // in directory_fd_
  int directory_fd_ = -1;
  int lock_fd_ = -1;
  mutable std::mutex mutex_;
  std::map<std::string, FencingToken, std::less<>> highest_;
  std::uint64_t admitted_ = 0;
  std::uint64_t refused_ = 0;
  bool write_failed_ = false;
};

}  // namespace zkr
