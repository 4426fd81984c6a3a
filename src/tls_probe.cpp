// SPDX-License-Identifier: Apache-2.0
#include "tls_probe.hpp"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "host_port.hpp"

namespace zkr::detail {
namespace {

using Bytes = std::vector<std::uint8_t>;

void append_length(Bytes& out, std::size_t length, int width) {
  for (int shift = 8 * (width - 1); shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(length >> shift));
}

// A ClientHello that TLS 1.2 and 1.3 servers answer. It offers no key share, so a TLS 1.3 server
// answers with a HelloRetryRequest (a handshake record) or an alert; either starts with a TLS
// record header (content type 21 or 22, version 3.x), which a ZooKeeper plain-text port never sends:
// it reads the first four bytes as the length of a request far over its limit and closes.
Bytes client_hello() {
  const Bytes suites = {0x13, 0x01, 0x13, 0x02, 0x13, 0x03, 0xc0, 0x2b, 0xc0, 0x2f, 0xc0, 0x2c,
                        0xc0, 0x30, 0xcc, 0xa9, 0xcc, 0xa8, 0x00, 0x9e, 0x00, 0x9f, 0x00, 0x9c};
  const Bytes extensions = {
      0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03,                    // versions: 1.3, 1.2
      0x00, 0x0a, 0x00, 0x06, 0x00, 0x04, 0x00, 0x1d, 0x00, 0x17,              // groups: x25519, P-256
      0x00, 0x0d, 0x00, 0x0a, 0x00, 0x08, 0x04, 0x03, 0x08, 0x04, 0x04, 0x01,  // signature schemes
      0x05, 0x01,                                                              //
      0x00, 0x0b, 0x00, 0x02, 0x01, 0x00,                                      // point formats
      0x00, 0x33, 0x00, 0x02, 0x00, 0x00,                                      // key shares: none
  };
  Bytes body = {0x03, 0x03};
  body.insert(body.end(), 32, 0x5a);  // random
  body.push_back(0);                  // no session id
  append_length(body, suites.size(), 2);
  body.insert(body.end(), suites.begin(), suites.end());
  body.insert(body.end(), {0x01, 0x00});  // compression: none
  append_length(body, extensions.size(), 2);
  body.insert(body.end(), extensions.begin(), extensions.end());
  Bytes handshake = {0x01};  // ClientHello
  append_length(handshake, body.size(), 3);
  handshake.insert(handshake.end(), body.begin(), body.end());
  Bytes record = {0x16, 0x03, 0x01};
  append_length(record, handshake.size(), 2);
  record.insert(record.end(), handshake.begin(), handshake.end());
  return record;
}

int milliseconds_left(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

// Waits for `events` on `fd` until the deadline; false if it passed first.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const int left = milliseconds_left(deadline);
    if (left == 0) return false;
    pollfd ready{fd, events, 0};
    const int rc = ::poll(&ready, 1, left);
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Sends (or receives) exactly `size` bytes on the non-blocking `fd` before the deadline.
bool transfer_all(int fd, std::uint8_t* data, std::size_t size, bool sending,
                  std::chrono::steady_clock::time_point deadline) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = sending ? ::send(fd, data + done, size - done, MSG_NOSIGNAL) : ::recv(fd, data + done, size - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      if (!wait_for(fd, sending ? POLLOUT : POLLIN, deadline)) return false;
    } else {
      return false;  // closed, or failed
    }
  }
  return true;
}

bool answers_with_a_tls_record(const addrinfo& address, std::chrono::steady_clock::time_point deadline) {
  const int fd = ::socket(address.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  bool tls = false;
  [&] {
    if (::connect(fd, address.ai_addr, address.ai_addrlen) != 0) {
      if (errno != EINPROGRESS || !wait_for(fd, POLLOUT, deadline)) return;
      int error = 0;
      socklen_t length = sizeof error;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) return;
    }
    Bytes hello = client_hello();
    std::array<std::uint8_t, 2> header{};
    if (!transfer_all(fd, hello.data(), hello.size(), true, deadline)) return;
    // Closed unanswered: not TLS (or not telling).
    if (!transfer_all(fd, header.data(), header.size(), false, deadline)) return;
    tls = (header[0] == 0x15 || header[0] == 0x16) && header[1] == 0x03;  // an alert or a handshake
  }();
  ::close(fd);
  return tls;
}

}  // namespace

bool speaks_tls(const std::string& host_port, std::chrono::milliseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  const HostPort target = split_host_port(host_port);
  if (target.port.empty()) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(target.host.c_str(), target.port.c_str(), &hints, &found) != 0) return false;
  bool tls = false;
  for (const addrinfo* address = found; address && !tls && milliseconds_left(deadline) > 0; address = address->ai_next)
    tls = answers_with_a_tls_record(*address, deadline);
  ::freeaddrinfo(found);
  return tls;
}

}  // namespace zkr::detail
