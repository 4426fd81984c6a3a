// SPDX-License-Identifier: Apache-2.0
#include "metrics_listener.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

namespace zklock {
namespace {

constexpr std::size_t kMostRequestBytes = 8192;
constexpr auto kRequestPatience = std::chrono::seconds(5);

std::string endpoint_text(const sockaddr_storage& address) {
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    return fmt::format("[{}]:{}", host, ntohs(v6.sin6_port));
  }
  const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
  ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
  return fmt::format("{}:{}", host, ntohs(v4.sin_port));
}

// Writes all of `data` within the request's patience; false if the client went away or stalled.
bool send_within(int fd, std::string_view data, std::chrono::steady_clock::time_point deadline) {
  while (!data.empty()) {
    const auto n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd out{fd, POLLOUT, 0};
    ::poll(&out, 1, static_cast<int>(left.count()));
  }
  return true;
}

// The request line and headers, up to the blank line; empty if they do not come whole in time.
std::string read_request_within(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (request.size() > kMostRequestBytes) return {};
    const auto n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      request.append(buffer, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return {};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return {};
    pollfd in{fd, POLLIN, 0};
    ::poll(&in, 1, static_cast<int>(left.count()));
  }
  return request;
}

std::string http_response(std::string_view status, std::string_view content_type, std::string_view body) {
  return fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}", status,
                     content_type, body.size(), body);
}

}  // namespace

MetricsListener MetricsListener::open(const std::string& host_port) {
  const auto colon = host_port.rfind(':');
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0)
    throw std::runtime_error(fmt::format("cannot listen on {}: {}", host_port, ::gai_strerror(rc)));
  std::string reason = "no address";
  for (addrinfo* each = found; each; each = each->ai_next) {
    const int fd = ::socket(each->ai_family, each->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, each->ai_protocol);
    if (fd < 0) {
      reason = std::strerror(errno);
      continue;
    }
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, each->ai_addr, each->ai_addrlen) == 0 && ::listen(fd, 16) == 0) {
      sockaddr_storage bound{};
      socklen_t length = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
      ::freeaddrinfo(found);
      return MetricsListener(fd, endpoint_text(bound));
    }
    reason = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  throw std::runtime_error(fmt::format("cannot listen on {}: {}", host_port, reason));
}

MetricsListener::MetricsListener(MetricsListener&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), address_(std::move(other.address_)) {}

MetricsListener::~MetricsListener() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsListener::serve_waiting(const std::function<std::optional<std::string>(std::string_view)>& respond) {
  while (true) {
    const int client = ::accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client < 0) return;  // none waiting (EAGAIN), or one that went away meanwhile
    const auto deadline = std::chrono::steady_clock::now() + kRequestPatience;
    const std::string request = read_request_within(client, deadline);
    const auto line_end = request.find_first_of("\r\n");
    const std::string_view line = std::string_view(request).substr(0, line_end);
    const auto first_space = line.find(' ');
    const auto second_space = line.find(' ', first_space == std::string_view::npos ? 0 : first_space + 1);
    std::string reply;
    if (request.empty() || first_space == std::string_view::npos || second_space == std::string_view::npos) {
      reply = http_response("400 Bad Request", "text/plain; charset=utf-8", "a request line: GET /metrics HTTP/1.1\n");
    } else if (line.substr(0, first_space) != "GET") {
      reply = http_response("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET /metrics\n");
    } else {
      std::string_view target = line.substr(first_space + 1, second_space - first_space - 1);
      target = target.substr(0, target.find('?'));  // Prometheus may add parameters
      if (auto body = respond(target)) reply = http_response("200 OK", "text/plain; version=0.0.4; charset=utf-8", *body);
      else reply = http_response("404 Not Found", "text/plain; charset=utf-8", "the metrics are at /metrics\n");
    }
    send_within(client, reply, std::chrono::steady_clock::now() + kRequestPatience);
    ::close(client);
  }
}

}  // namespace zklock
