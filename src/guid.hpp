// SPDX-License-Identifier: Apache-2.0
// Random names for the nodes the library creates, so that no earlier attempt's node and no node of
// anyone else's can be taken for the one being made.
#pragma once

#include <string>

namespace zkr::detail {

// A random (version 4) UUID in the lowercase 8-4-4-4-12 form, as Curator writes it.
std::string new_guid();

}  // namespace zkr::detail
