// SPDX-License-Identifier: Apache-2.0
// The TLS relay of a session (SessionOptions::tls). Debian's C client speaks plain text only: for
// each server of the connect string the relay listens on a port of its own on 127.0.0.1, the C
// client is handed those ports (chroot kept), and each connection it opens is carried to the real
// server over TLS. Nothing else changes for the client: reconnection and server rotation work as
// without TLS, and a TLS failure looks to it like a server that closed the connection.
//
// Only the session's own C client is served: a connection whose other end is not a socket open in
// this process is closed at once (another local user cannot borrow our certificate), and so is one
// beyond the one connection each of the session's C client handles may have (see
// TlsRelay::Impl::admit). No OpenSSL or Boost type leaves this file pair.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include <zkr/session.hpp>

namespace zkr::detail {

// A connection the relay could not carry over TLS, for the session's errors and logs.
struct TlsFailure {
  std::error_code code;  // an errc::tls_* code
  std::string server;    // the real server, "host:port"
  std::string message;   // what happened, naming the server
  bool every_server_failed = false;  // the latest attempt to each server failed (none got through)
};

class TlsRelay {
 public:
  using FailureHandler = std::function<void(const TlsFailure&)>;

  // Checks the TLS files and starts listening, one port per server of `servers` (a connect string
  // that parse_servers accepts). Throws Error(errc::invalid_argument) naming a file that cannot be
  // used. `handshake_timeout` bounds each TCP connect and TLS handshake to a real server.
  // `on_failure` runs on the relay's thread: it must not block, nor destroy the relay.
  TlsRelay(const std::string& servers, const TlsOptions& options, std::chrono::milliseconds handshake_timeout,
           FailureHandler on_failure);
  ~TlsRelay();  // closes every port and connection and joins the relay's thread
  TlsRelay(const TlsRelay&) = delete;
  TlsRelay& operator=(const TlsRelay&) = delete;

  // Lets one more C client handle connect through the relay, for as long as the result lives:
  // take it before the handle is made (zookeeper_init connects at once), drop it once the handle
  // is closed. The relay serves one connection at a time per handle admitted.
  std::shared_ptr<void> admit_client_handle();

  // The connect string for the C client: "127.0.0.1:port,...[/chroot]", one port for each server
  // of the latest list.
  std::string client_connect_string() const;
  // Relays the servers of `servers` from now on (a connect string that parse_servers accepts; its
  // chroot kept), opening a port for each one not relayed yet, and returns the new
  // client_connect_string(). The ports of servers no longer listed stay open, for connections
  // still on them, and are no longer counted by TlsFailure::every_server_failed.
  std::string set_servers(const std::string& servers);
  // "127.0.0.1:port" -> the real server it relays to; the address itself when it is not ours.
  std::string real_server(std::string_view relay_address) const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// The C client's log lines name the servers it connects to, which are relay ports: this puts the
// real server in their place ("127.0.0.1:40123" -> "zk1:2281 (through the TLS relay)"), for every
// relay of the process. Text without a relay's address comes back unchanged.
std::string name_real_servers(std::string text);

}  // namespace zkr::detail
