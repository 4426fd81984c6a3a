// SPDX-License-Identifier: Apache-2.0
// A tiny service built with -fno-exceptions: it uses only the non-throwing forms of the API.
// Usage: zkr_test_no_exceptions_service SERVERS PATH. Exit 0 when every step went as expected.
#include <cstdio>
#include <string>
#include <thread>

#include <zkr/lock.hpp>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s SERVERS PATH\n", argv[0]);
    return 64;
  }
  std::error_code ec;

  // An ensemble that does not answer: refused through ec, not by a throw.
  zkr::SessionOptions nobody;
  nobody.servers = "127.0.0.1:1";
  nobody.connect_timeout = std::chrono::milliseconds(300);
  auto unreachable = zkr::Session::connect(nobody, ec);
  if (unreachable || ec != zkr::errc::connect_timeout) return 1;
  std::printf("unreachable: %s\n", ec.message().c_str());

  zkr::SessionOptions options;
  options.servers = argv[1];
  auto session = zkr::Session::connect(options, ec);
  if (!session) {
    std::printf("connect: %s\n", ec.message().c_str());
    return 1;
  }

  auto bad = zkr::Lock::make(*session, "no-leading-slash", {}, ec);
  if (bad || ec != zkr::errc::invalid_path) return 1;
  std::printf("bad path refused: %s\n", ec.message().c_str());

  auto lock = zkr::Lock::make(*session, argv[2], {}, ec);
  if (!lock) return 1;
  zkr::HeldLock held = lock->acquire({}, ec);
  if (!held) {
    std::printf("acquire: %s\n", ec.message().c_str());
    return 1;
  }
  std::printf("acquired token %lld\n", static_cast<long long>(held.token().value()));
  held.release();
  std::printf("released\n");

  // The node is gone once the release is through: the listing is empty.
  for (int attempt = 0; attempt < 100; ++attempt) {
    if (lock->contenders(ec).empty() && !ec) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("still listed: %s\n", ec ? ec.message().c_str() : "a node");
  return 1;
}
