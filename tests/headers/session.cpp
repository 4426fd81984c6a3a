// SPDX-License-Identifier: Apache-2.0
#include <zkr/session.hpp>

// guide.md, "Sessions": a Session from its options, its failures caught as zkr::Error and compared
// with the codes; the data calls.
bool header_session_uses() {
  try {
    zkr::SessionOptions options;
    options.servers = "zk1:2181,zk2:2181/app";
    options.session_timeout = std::chrono::seconds(10);
    zkr::Session session(options);
    zkr::Transaction transaction;
    transaction.create("/a", "x").set("/b", "y");
    session.commit(transaction);
    return session.state() == zkr::SessionState::connected;
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::connect_timeout || error.code() == zkr::condition::connection_trouble;
  }
}

bool header_session_connect_without_exceptions() {
  std::error_code ec;
  zkr::SessionOptions options;
  options.servers = "zk1:2181";
  auto session = zkr::Session::connect(options, ec);
  if (!session) return ec == zkr::errc::connect_timeout;
  return session->exists("/a", ec).has_value();
}
