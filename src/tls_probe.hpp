// SPDX-License-Identifier: Apache-2.0
// Whether a server speaks TLS, asked without OpenSSL: a session without TLS options (and zklock,
// which then loads no TLS library) still names a TLS-only port it was given in plain text.
#pragma once

#include <chrono>
#include <string>

namespace zkr::detail {

// Whether the server at `host_port` ("host:port", IPv6 hosts in brackets) answers a TLS
// ClientHello with a TLS record (a ServerHello, or an alert: it wants a client certificate, say),
// within `budget`. Nothing is verified: a plain-text client that got no session there is talking
// to a TLS port.
bool speaks_tls(const std::string& host_port, std::chrono::milliseconds budget);

}  // namespace zkr::detail
