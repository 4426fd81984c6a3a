// SPDX-License-Identifier: Apache-2.0
// The library's own way into its public types: the passkey (zkr/session.hpp) that constructors and
// accessors meant for the recipes and the tests take. Not installed, not part of the API.
#pragma once

#include <memory>

#include <zkr/session.hpp>

namespace zkr::detail {

struct Internals {
  static Passkey key() noexcept { return {}; }
  static const std::shared_ptr<SessionCore>& core(const Session& session) { return session.core(key()); }
};

}  // namespace zkr::detail
