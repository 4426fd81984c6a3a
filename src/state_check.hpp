// SPDX-License-Identifier: Apache-2.0
// Checks of the library's state machines (the session's states, a contender's phases), compiled in
// where ZKR_STATE_CHECKS is defined: the sanitizer builds CI runs, and Debug builds. A failed check
// is a bug in the library: it names the transition and aborts, so that the test that reached it
// fails where it happened rather than somewhere downstream.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace zkr::detail {

#ifdef ZKR_STATE_CHECKS
inline constexpr bool kStateChecks = true;
#else
inline constexpr bool kStateChecks = false;
#endif

[[noreturn]] inline void state_check_failed(std::string_view machine, std::string_view from, std::string_view to) {
  std::fprintf(stderr, "zkrecipes: bad %.*s transition %.*s -> %.*s\n", static_cast<int>(machine.size()),
               machine.data(), static_cast<int>(from.size()), from.data(), static_cast<int>(to.size()), to.data());
  std::abort();
}

}  // namespace zkr::detail
