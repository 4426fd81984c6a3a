// SPDX-License-Identifier: Apache-2.0
// A program outside the project that uses the installed zkrecipes: it must compile with only the
// installed headers and link with only what the package config or pkg-config file says. It needs
// no server: it exercises calls that validate input before any connection is made.
#include <iostream>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/lock.hpp>
#include <zkr/names.hpp>
#include <zkr/session.hpp>

int main() {
  int failures = 0;
  auto expect = [&failures](bool ok, const char* what) {
    if (!ok) {
      std::cout << "consumer: FAILED: " << what << "\n";
      ++failures;
    }
  };

  expect(!zkr::validate_path("/jobs/nightly-report"), "an absolute path is valid");
  expect(zkr::validate_path("jobs/nightly-report") == zkr::errc::invalid_path, "a relative path is refused");
  std::cout << "consumer: 'jobs/nightly-report' " << zkr::path_problem("jobs/nightly-report") << "\n";

  zkr::FenceGate gate;
  expect(gate.admit("ledger", zkr::FencingToken(7)), "the first token is admitted");
  expect(!gate.admit("ledger", zkr::FencingToken(6)), "a lower token is refused");

  // Pulls in the session and with it the ZooKeeper C client and fmt: a static link that lacks
  // them fails here. The port is invalid, so no connection is attempted.
  zkr::SessionOptions options;
  options.servers = "127.0.0.1:99999";
  try {
    zkr::Session session(options);
    expect(false, "a session with an invalid port is refused");
  } catch (const zkr::Error& e) {
    expect(e.code() == zkr::errc::invalid_connect_string, "the error is invalid_connect_string");
    std::cout << "consumer: " << e.what() << "\n";
  }

  if (failures == 0) std::cout << "consumer: all checks passed\n";
  return failures == 0 ? 0 : 1;
}
