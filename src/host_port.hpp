// SPDX-License-Identifier: Apache-2.0
// One server of a connect string, as parse_servers gives it ("host:port" or "[v6 address]:port"),
// split for the resolver.
#pragma once

#include <string>

namespace zkr::detail {

struct HostPort {
  std::string host;  // without IPv6 brackets
  std::string port;  // empty if none was given
};

inline HostPort split_host_port(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, colon == std::string::npos ? std::string() : host_port.substr(colon + 1)};
}

}  // namespace zkr::detail
