// What one request to the server may carry.
#pragma once

#include <cstddef>
#include <string>

namespace zkr::detail {

// The server refuses a request larger than its jute.maxbuffer (0xfffff bytes unless configured
// otherwise) by dropping the connection; the client would resend it after every reconnect and
// the session would flap until declared lost. Everything a recipe sends is its path, a node name
// under it, its data and some framing (header, lengths, ACL): those must fit together.
constexpr std::size_t kServerRequestLimit = 0xfffff;
// Room left for a contender node's name (about 60 bytes), the request header, length fields and
// the ACL.
constexpr std::size_t kRequestAllowance = 1024;
// The longest path a recipe accepts, so that a request with a node name under it still fits.
constexpr std::size_t kMaxRecipePathBytes = kServerRequestLimit - kRequestAllowance;

// Empty if a request with `path_bytes` of path and `data_bytes` of data fits, else the problem,
// naming the limit.
std::string request_size_problem(std::size_t path_bytes, std::size_t data_bytes);

}  // namespace zkr::detail
