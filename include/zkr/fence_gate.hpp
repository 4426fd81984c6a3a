// FenceGate: the resource side of fencing.
//
// A lock cannot stop a paused holder from writing after its lease is gone; only the resource can.
// A resource that embeds FenceGate calls admit(key, token) before applying each write and applies
// it only if admit returns true. The gate remembers the highest token it admitted per key and
// refuses any lower one, so a holder that lost its lock (and was succeeded by a grant with a larger
// token) cannot overwrite its successor's work. Equal tokens are admitted: one grant may write many
// times.
//
// The gate is only as durable as the resource: a store that restarts must persist the highest
// token per key together with the data it guards (same transaction), or it must refuse writes
// until it has seen a fresh token. A resource that cannot check tokens at all (a plain file system,
// a third-party API) cannot be fenced; there the lock is an efficiency lock, and correctness must
// come from something else (for example conditional writes keyed on a version).
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <zkr/fencing_token.hpp>

namespace zkr {

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

}  // namespace zkr
