// SPDX-License-Identifier: Apache-2.0
// The fencing token: the czxid of the znode that won a grant.
//
// ZooKeeper zxids only grow (epoch in the high 32 bits, counter in the low 32), across leader
// changes and parent re-creation, so a later grant on the same path always carries a larger
// token than an earlier one. Sequence numbers do not have that property and are never tokens.
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace zkr {

// A fencing token: the czxid of a lock node, which grows with every grant on a path.
class FencingToken {
 public:
  constexpr FencingToken() = default;
  // A token of the given zxid.
  constexpr explicit FencingToken(std::int64_t zxid) : zxid_(zxid) {}

  // The zxid; valid() if positive; the leader epoch it was created in (the high 32 bits).
  constexpr std::int64_t value() const noexcept { return zxid_; }
  constexpr bool valid() const noexcept { return zxid_ > 0; }
  constexpr std::uint32_t epoch() const noexcept { return static_cast<std::uint32_t>(zxid_ >> 32); }
  // The zxid in decimal.
  std::string to_string() const { return std::to_string(zxid_); }

  // Tokens compare as their zxids.
  constexpr auto operator<=>(const FencingToken&) const = default;

 private:
  std::int64_t zxid_ = 0;
};

}  // namespace zkr
