// SPDX-License-Identifier: Apache-2.0
#include "guid.hpp"

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

namespace zkr::detail {

std::string new_guid() {
  thread_local boost::uuids::random_generator generator;
  return boost::uuids::to_string(generator());
}

}  // namespace zkr::detail
