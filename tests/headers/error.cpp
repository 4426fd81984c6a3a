// SPDX-License-Identifier: Apache-2.0
#include <zkr/error.hpp>

// guide.md, "Errors": codes compared with the enums and the conditions, Error's what() and path().
bool header_error_uses(std::error_code ec) {
  try {
    zkr::throw_if(ec, "acquire lock", "/locks/a");
  } catch (const zkr::Error& error) {
    return error.path().empty() || error.what()[0] == '\0';
  }
  return ec == zkr::errc::timed_out || ec == zkr::condition::gave_up || ec == zkr::zk_errc::no_node ||
         zkr::zookeeper_error(-101) == zkr::zk_errc::no_node;
}
