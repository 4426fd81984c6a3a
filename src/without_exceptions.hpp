// SPDX-License-Identifier: Apache-2.0
// The non-throwing forms of the public API (the overloads taking `std::error_code& ec`), written
// once: each runs its throwing form through without_exceptions(), which turns the exception into
// the code the throwing form would have carried, so the two forms cannot drift apart.
#pragma once

#include <new>
#include <system_error>
#include <type_traits>
#include <utility>

#include <zkr/error.hpp>

namespace zkr::detail {

// Runs `call` and returns what it returns, with ec cleared; if it throws, sets ec to the
// exception's code (a zkr::Error's, any std::system_error's; std::errc::not_enough_memory for
// bad_alloc; errc::internal_error for anything else, a bug) and returns a value-initialised result
// (an empty optional, an empty HeldLock, ...). `call` may set ec itself after this cleared it.
template <typename Call>
auto without_exceptions(std::error_code& ec, Call&& call) noexcept -> std::invoke_result_t<Call> {
  using Result = std::invoke_result_t<Call>;
  ec.clear();
  try {
    return std::forward<Call>(call)();
  } catch (const std::system_error& error) {
    ec = error.code();
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    ec = make_error_code(errc::internal_error);
  }
  if constexpr (!std::is_void_v<Result>) return Result{};
}

}  // namespace zkr::detail
