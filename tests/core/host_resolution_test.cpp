// SPDX-License-Identifier: Apache-2.0
// The C client re-resolves the connect string's hosts every time it polls its socket unless told
// otherwise: a DNS query (or, for numeric hosts, a netlink address dump) per request and reply. These
// tests count the resolver calls of the whole process by interposing getaddrinfo, which the
// ZooKeeper C client calls through the dynamic linker.
#include <dlfcn.h>
#include <netdb.h>

#include <gtest/gtest.h>

#include <atomic>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "test_support.hpp"

namespace {
std::atomic<int> resolver_calls{0};
}  // namespace

extern "C" int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                           struct addrinfo** result) {
  using Resolver = int (*)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  static const auto real = reinterpret_cast<Resolver>(dlsym(RTLD_NEXT, "getaddrinfo"));
  resolver_calls.fetch_add(1);
  return real(node, service, hints, result);
}

namespace zkr::test {
namespace {

constexpr int kRounds = 200;

int resolver_calls_over_lock_rounds(SessionOptions options) {
  Session session(std::move(options));
  Lock lock(session, testenv::unique_path("host-resolution"));
  lock.acquire().release();  // the path exists from here on
  const int before = resolver_calls.load();
  for (int round = 0; round < kRounds; ++round) lock.acquire().release();
  return resolver_calls.load() - before;
}

TEST(HostResolution, ASessionDoesNotResolveItsServersForEveryRequest) {
  // 200 rounds of 3-4 requests each, well within the default interval: at most a handful.
  EXPECT_LT(resolver_calls_over_lock_rounds(session_options(testenv::shared_server())), 10);
}

TEST(HostResolution, ZeroIntervalResolvesAtEveryPollAsTheClientDoesByDefault) {
  SessionOptions options = session_options(testenv::shared_server());
  options.host_resolution_interval = std::chrono::milliseconds::zero();
  EXPECT_GE(resolver_calls_over_lock_rounds(options), kRounds);
}

TEST(HostResolution, NegativeIntervalIsRefusedNamingTheOption) {
  SessionOptions options = session_options(testenv::shared_server());
  options.host_resolution_interval = std::chrono::milliseconds(-1);
  try {
    Session session(options);
    FAIL() << "a negative host resolution interval was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), make_error_code(errc::invalid_argument));
    EXPECT_NE(std::string(error.what()).find("host resolution interval"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace zkr::test
