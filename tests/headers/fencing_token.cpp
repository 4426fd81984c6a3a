// SPDX-License-Identifier: Apache-2.0
#include <zkr/fencing_token.hpp>

// The token: compared, printed, its epoch.
bool header_fencing_token_uses(zkr::FencingToken a, zkr::FencingToken b) {
  return a < b && a.valid() && a.epoch() <= b.epoch() && !a.to_string().empty();
}
