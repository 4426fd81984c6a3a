// SPDX-License-Identifier: Apache-2.0
// What one request to the server may carry.
#pragma once

#include <cstddef>
#include <string>

namespace zkr::detail {

// The server refuses a request larger than its jute.maxbuffer (0xfffff bytes unless configured
// otherwise) by dropping the connection; the client would resend it after every reconnect and
// the session would flap until declared lost. Everything a recipe sends is its path, a node name
// under it, its data and some framing (header, lengths, ACL): those must fit together. Every check
// against the limit (a recipe's path and owner data, an AcquisitionBatch's multi-ops) counts
// with request_bytes().
constexpr std::size_t kServerRequestLimit = 0xfffff;
// Room left, in a request or in each op of a multi-op, for a node's name under the path (about 60
// bytes), the header, length fields and the ACL.
constexpr std::size_t kRequestAllowance = 1024;

// What a request, or one op of a multi-op, with `path_bytes` of path and `data_bytes` of data
// counts against kServerRequestLimit.
constexpr std::size_t request_bytes(std::size_t path_bytes, std::size_t data_bytes) {
  return path_bytes + data_bytes + kRequestAllowance;
}

// Owner data is never empty (empty means default_owner_data()): the longest path a recipe accepts
// is the one that fits with a single byte of it.
constexpr std::size_t kShortestOwnerData = 1;
constexpr std::size_t kMaxRecipePathBytes = kServerRequestLimit - request_bytes(0, kShortestOwnerData);

// Empty if a request with `path_bytes` of path and `data_bytes` of data fits, else the problem,
// naming the limit and the longest path that fits with that much data.
std::string request_size_problem(std::size_t path_bytes, std::size_t data_bytes);

}  // namespace zkr::detail
