// SPDX-License-Identifier: Apache-2.0
// Serves a session's metrics on an HTTP /metrics endpoint for Prometheus to scrape.
//
// zkr::prometheus_text(session) returns the whole exposition (text format 0.0.4): per-lock gauges,
// wait and hold histograms, failures and losses by reason, and the session's own counters. This
// example opts one path prefix into per-path labels (every other path counts under path=""),
// makes some traffic (grants, a wait that times out, one that is cancelled, a lock lost because
// its node was deleted), checks the snapshot against what it did, and prints the text. With
// --serve it then holds one lock and serves /metrics on 127.0.0.1 (a port the kernel picks,
// printed) until SIGINT or SIGTERM; tests/core/metrics_scrape_test.cpp scrapes it over TCP.
//
// Usage: zkr_metrics_prometheus SERVERS [--serve]
//   prints "labelled path: P", "other path: P", then "# metrics consistent with this run" (exit 1
//   if not), and with --serve "holding NODE" and "serving http://127.0.0.1:PORT/metrics".
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <stop_token>
#include <string>
#include <thread>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/prometheus.hpp>
#include <zkr/session.hpp>

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

// One HTTP/1.1 exchange per connection: read the request head, answer, close. GET /metrics gets
// the exposition; anything else a 404 or 405. A client that sends nothing is dropped after 10 s.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(tcp::socket socket, const zkr::Session& session)
      : socket_(std::move(socket)), session_(session), deadline_(socket_.get_executor()) {}

  void start() {
    deadline_.expires_after(10s);
    deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->socket_.close();
    });
    asio::async_read_until(socket_, asio::dynamic_buffer(request_, 16 * 1024), "\r\n\r\n",
                           [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                             if (!ec) self->answer();
                           });
  }

 private:
  void answer() {
    const std::string_view request_line = std::string_view(request_).substr(0, request_.find("\r\n"));
    if (request_line.starts_with("GET /metrics ")) {
      respond("200 OK", std::string(zkr::kPrometheusContentType), zkr::prometheus_text(session_));
    } else if (request_line.starts_with("GET ")) {
      respond("404 Not Found", "text/plain; charset=utf-8", "only /metrics here\n");
    } else {
      respond("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n");
    }
  }

  void respond(std::string_view status, const std::string& content_type, const std::string& body) {
    response_ = fmt::format("HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                            status, content_type, body.size(), body);
    asio::async_write(socket_, asio::buffer(response_), [self = shared_from_this()](boost::system::error_code, std::size_t) {
      boost::system::error_code ignored;
      self->socket_.shutdown(tcp::socket::shutdown_both, ignored);
      self->deadline_.cancel();
    });
  }

  tcp::socket socket_;
  const zkr::Session& session_;
  asio::steady_timer deadline_;
  std::string request_;
  std::string response_;
};

void accept_next(tcp::acceptor& acceptor, const zkr::Session& session) {
  acceptor.async_accept([&acceptor, &session](boost::system::error_code ec, tcp::socket socket) {
    if (ec) return;  // the acceptor was closed
    std::make_shared<Exchange>(std::move(socket), session)->start();
    accept_next(acceptor, session);
  });
}

// Serves /metrics on 127.0.0.1 until SIGINT or SIGTERM.
void serve_metrics(const zkr::Session& session) {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::signal_set stop_signals(io, SIGINT, SIGTERM);
  stop_signals.async_wait([&](boost::system::error_code, int) {
    acceptor.close();
    io.stop();
  });
  accept_next(acceptor, session);
  fmt::print("serving http://127.0.0.1:{}/metrics\n", acceptor.local_endpoint().port());
  std::fflush(stdout);
  io.run();
}

bool lost_within(const zkr::HeldLock& held, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!held.lost() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(10ms);
  return held.lost();
}

// The one series of `metrics` for `path` ("" for all paths without their own).
const zkr::LockMetrics* series(const zkr::SessionMetrics& metrics, std::string_view path) {
  for (const auto& lock : metrics.locks)
    if (lock.path == path) return &lock;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const bool serve = argc == 3 && std::string_view(argv[2]) == "--serve";
  if (argc != 2 && !serve) {
    fmt::print(stderr, "usage: zkr_metrics_prometheus SERVERS [--serve]   (e.g. 127.0.0.1:2181)\n");
    return 64;
  }
  const std::string base = fmt::format("/zkr-examples/metrics-{}", getpid());
  const std::string labelled_path = base + "/jobs/report", other_path = base + "/other";
  try {
    zkr::SessionOptions options;
    options.servers = argv[1];
    zkr::Session other(options);  // another process, as far as the locks can tell
    // Every lock under <base>/jobs/ gets series of its own; at most 16 such paths.
    options.metrics_path_labels = {.paths = {base + "/jobs/"}, .max_paths = 16};
    zkr::Session session(options);
    zkr::Lock lock(session, labelled_path), other_lock(other, labelled_path);
    zkr::Lock unlabelled_lock(session, other_path);
    fmt::print("labelled path: {}\nother path: {}\n", labelled_path, other_path);

    // Three grants, each held a little while, and one on a path without a label of its own.
    constexpr int kGrants = 3;
    constexpr auto kHold = 20ms;
    for (int i = 0; i < kGrants; ++i) {
      zkr::HeldLock held = lock.acquire();
      std::this_thread::sleep_for(kHold);
    }
    unlabelled_lock.acquire().release();

    // Another process holds the lock: one wait times out, one is cancelled.
    zkr::HeldLock held_elsewhere = other_lock.acquire();
    const bool timed_out_empty = !lock.try_acquire_for(200ms).has_value();
    std::stop_source stop;
    std::jthread canceller([&stop] {
      std::this_thread::sleep_for(100ms);
      stop.request_stop();
    });
    const bool cancelled_empty = !lock.try_acquire_for(30s, stop.get_token()).has_value();
    held_elsewhere.release();

    // An operator breaks our hold (zklock --break does the same): lost, reason node_deleted.
    zkr::HeldLock doomed = lock.acquire();
    const auto contenders = zkr::list_contenders(other, labelled_path);
    const bool broken = !contenders.empty() && zkr::break_holder(other, labelled_path, contenders.front());
    const bool lost_in_time = lost_within(doomed, 10s);
    doomed.release();

    fmt::print("{}", zkr::prometheus_text(session));
    std::fflush(stdout);

    // What this run did, against what the metrics say.
    const zkr::SessionMetrics m = session.metrics();
    const zkr::LockMetrics* jobs = series(m, labelled_path);
    const zkr::LockMetrics* rest = series(m, "");
    int problems = 0;
    auto expect = [&problems](bool ok, std::string_view what) {
      if (!ok) {
        fmt::print("# MISMATCH: {}\n", what);
        ++problems;
      }
    };
    expect(timed_out_empty && cancelled_empty, "both contested waits ended without a grant");
    expect(broken && lost_in_time, "the grant whose node was deleted was lost");
    expect(jobs && rest && m.locks.size() == 2, "two series: the labelled path and all others");
    if (jobs && rest) {
      expect(jobs->wait.count == kGrants + 1, fmt::format("grants on the labelled path {} == 4", jobs->wait.count));
      expect(jobs->timeouts == 1 && jobs->cancellations == 1, "one timeout, one cancellation");
      expect(jobs->losses[static_cast<std::size_t>(zkr::LossReason::node_deleted)] == 1, "one loss: node_deleted");
      expect(jobs->hold.count == kGrants + 1 && jobs->hold.sum >= kGrants * kHold, "four holds ended");
      expect(jobs->held == 0 && jobs->waiting == 0, "nothing held or waiting now");
      expect(rest->wait.count == 1 && rest->hold.count == 1, "one grant on the other path");
    }
    expect(m.acquisitions == kGrants + 2, fmt::format("acquisitions {} == 5", m.acquisitions));
    expect(m.sessions_established == 1 && m.sessions_lost == 0, "one session, never lost");
    expect(m.state == zkr::SessionState::connected, "the session is connected");
    if (problems != 0) return 1;
    fmt::print("# metrics consistent with this run\n");
    std::fflush(stdout);
    if (!serve) return 0;

    // Hold the lock while serving: a scraper sees held 1, and an operator may delete the node.
    zkr::HeldLock held = lock.acquire();
    fmt::print("holding {}\n", held.node_path());
    serve_metrics(session);
    return 0;
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "zkr_metrics_prometheus: {}\n", e.what());
    return 1;
  }
}
