// SPDX-License-Identifier: Apache-2.0
// The TLS relay's place in a build of the library without OpenSSL: zklock's own, which must not
// pay for loading OpenSSL at every start (tools/zklock/CMakeLists.txt). That zklock runs its
// TLS build, zklock-tls, for any TLS option, so nothing here is reached in a zklock run; should
// another program link this build, a session with TLS options is refused by name. Never part of
// the installed library.
#include <zkr/error.hpp>

#include "tls_relay.hpp"

namespace zkr::detail {

struct TlsRelay::Impl {};

TlsRelay::TlsRelay(const std::string& servers, const TlsOptions&, std::chrono::milliseconds, FailureHandler) {
  throw Error(make_error_code(errc::invalid_argument), "connect to", servers,
              "this build of zkrecipes has no TLS support (it links no OpenSSL): SessionOptions::tls cannot be used");
}

TlsRelay::~TlsRelay() = default;

std::shared_ptr<void> TlsRelay::admit_client_handle() { return nullptr; }

std::string TlsRelay::client_connect_string() const { return {}; }

std::string TlsRelay::set_servers(const std::string&) { return {}; }

std::string TlsRelay::real_server(std::string_view relay_address) const { return std::string(relay_address); }

std::string name_real_servers(std::string text) { return text; }

}  // namespace zkr::detail
