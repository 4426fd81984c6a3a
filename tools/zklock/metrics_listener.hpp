// SPDX-License-Identifier: Apache-2.0
// --list ... --listen HOST:PORT: the smallest HTTP/1.1 server a Prometheus scrape needs. One
// request per connection (Connection: close), answered in order on zklock's main thread: a GET of
// a target the caller knows gets 200 and its text; any other target 404, any other method 405. A
// request that does not arrive whole within a few seconds, or is larger than a request line and
// headers need, is dropped, so that a client cannot hold zklock up for long.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace zklock {

class MetricsListener {
 public:
  // Binds HOST:PORT ("127.0.0.1:9475", "[::1]:0", "localhost:9475"; port 0 picks a free one) and
  // listens. Throws std::runtime_error naming the address and the reason.
  static MetricsListener open(const std::string& host_port);
  MetricsListener(MetricsListener&& other) noexcept;
  MetricsListener& operator=(MetricsListener&&) = delete;
  MetricsListener(const MetricsListener&) = delete;
  ~MetricsListener();

  int fd() const { return fd_; }
  // The address as bound ("127.0.0.1:40123", "[::1]:40123").
  const std::string& address() const { return address_; }
  // Accepts every connection waiting (none: returns at once) and answers each. `respond` gets the
  // request target of a GET and returns the body (text/plain; version=0.0.4), or nullopt for 404.
  void serve_waiting(const std::function<std::optional<std::string>(std::string_view target)>& respond);

 private:
  MetricsListener(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  int fd_ = -1;
  std::string address_;
};

}  // namespace zklock
