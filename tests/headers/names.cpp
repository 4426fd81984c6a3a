// SPDX-License-Identifier: Apache-2.0
#include <zkr/names.hpp>

// Paths and connect strings checked before use: the codes compared with zkr::errc.
bool header_names_uses() {
  std::error_code ec;
  auto servers = zkr::parse_servers("zk1,zk2:2182/app", ec);
  return zkr::validate_path("locks") == zkr::errc::invalid_path && servers && !ec &&
         zkr::parse_contender_name("_c_x-lock-0000000001") == std::nullopt;
}
