// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: connect strings (zkr::parse_servers, zkr::describe_servers_problem).
// Both must agree; an accepted list has at least one "host:port" with a port in 1..65535, a valid
// or empty chroot, and parses again to itself.
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view servers(reinterpret_cast<const char*>(data), size);
  std::error_code ec;
  const auto list = zkr::parse_servers(servers, ec);
  const std::string problem = zkr::describe_servers_problem(servers);
  FUZZ_CHECK(list.has_value() == !ec);
  FUZZ_CHECK(list.has_value() == problem.empty());
  if (!list) {
    FUZZ_CHECK(ec == zkr::errc::invalid_connect_string);
    return 0;
  }
  FUZZ_CHECK(!list->hosts.empty());
  std::string again;
  for (const auto& host : list->hosts) {
    const auto colon = host.rfind(':');
    FUZZ_CHECK(colon != std::string::npos && colon > 0);
    unsigned port = 0;
    const char* end = host.data() + host.size();
    auto [stop, error] = std::from_chars(host.data() + colon + 1, end, port);
    FUZZ_CHECK(error == std::errc{} && stop == end && port >= 1 && port <= 65535);
    again += (again.empty() ? "" : ",") + host;
  }
  FUZZ_CHECK(list->chroot.empty() || !zkr::validate_path(list->chroot));
  again += list->chroot;
  std::error_code again_ec;
  const auto reparsed = zkr::parse_servers(again, again_ec);
  FUZZ_CHECK(reparsed && reparsed->hosts == list->hosts && reparsed->chroot == list->chroot);
  return 0;
}
