// SPDX-License-Identifier: Apache-2.0
// zkrecipes::prometheus: the session's metrics registered as a prometheus-cpp Collectable, served
// by prometheus-cpp's own Exposer and scraped over HTTP, read the same as the library's
// dependency-free text exposition (both read by python3-prometheus-client's parser).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <fmt/format.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <testenv.hpp>
#include <zkr/lock.hpp>
#include <zkr/prometheus.hpp>
#include <zkr/prometheus_collectable.hpp>
#include <zkr/session.hpp>

#include "../core/test_support.hpp"
#include "../unit/python_readers.hpp"

namespace zkr::test {
namespace {

using namespace std::chrono_literals;
using boost::asio::ip::tcp;
using ::testing::Contains;
using ::testing::HasSubstr;

// One GET of /metrics on a fresh connection, the body read until the server closes it.
std::string scrape(int port) {
  boost::asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
  const timeval timeout{static_cast<time_t>(testenv::scaled(10s).count() / 1000), 0};
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  boost::asio::write(socket, boost::asio::buffer(fmt::format(
                                 "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n", port)));
  std::string response;
  boost::system::error_code ec;
  boost::asio::read(socket, boost::asio::dynamic_buffer(response), ec);
  EXPECT_EQ(ec, boost::asio::error::eof) << ec.message();
  EXPECT_THAT(response, ::testing::StartsWith("HTTP/1.1 200 "));
  const auto body = response.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : response.substr(body + 4);
}

// What the parser read (families and samples), sorted: the order of series is not the format's.
std::vector<std::string> read_sorted(std::string_view text) {
  auto lines = run_python_reader("read_exposition.py", {}, text);
  std::sort(lines.begin(), lines.end());
  return lines;
}

// Only the lines of the zkr_* families (the scrape also holds the service's own).
std::vector<std::string> zkr_lines(std::vector<std::string> lines) {
  std::erase_if(lines, [](const std::string& line) {
    return !line.starts_with("family zkr_") && !line.starts_with("sample zkr_");
  });
  return lines;
}

// A snapshot with a labelled path that needs escaping, histograms and every kind of family.
SessionMetrics snapshot() {
  SessionMetrics metrics;
  metrics.sessions_established = 2;
  metrics.suspensions = 1;
  metrics.requests_sent = 40;
  metrics.state = SessionState::connected;
  metrics.negotiated_timeout = 10s;
  metrics.lead_time = 4500ms;
  for (std::string path : {std::string(), std::string("/jobs/a\"b\\c")}) {
    LockMetrics lock;
    lock.path = path;
    lock.held = 1;
    lock.timeouts = 3;
    lock.losses[1] = 2;
    lock.wait.count = 2;
    lock.wait.sum = 1500ms;
    for (std::size_t i = 0; i < std::size(kDurationBuckets); ++i) lock.wait.cumulative_counts[i] = i < 4 ? 1 : 2;
    metrics.locks.push_back(lock);
  }
  return metrics;
}

TEST(PrometheusComponent, AScrapeOfTheExposerReadsAsTheTextExposition) {
  prometheus::Exposer exposer("127.0.0.1:0");
  // The service's own registry, as it has it already; the library's metrics go beside it.
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter().Name("service_jobs_total").Help("Jobs.").Register(*registry).Add({}).Increment(7);
  auto metrics = std::make_shared<PrometheusCollectable>([] { return snapshot(); });
  exposer.RegisterCollectable(registry);
  exposer.RegisterCollectable(metrics);
  ASSERT_EQ(exposer.GetListeningPorts().size(), 1u);

  const std::string scraped = scrape(exposer.GetListeningPorts().front());
  EXPECT_THAT(scraped, HasSubstr("service_jobs_total 7"));
  const auto expected = read_sorted(prometheus_text(snapshot()));
  EXPECT_THAT(expected, Contains("family zkr_lock_wait_seconds histogram"));
  EXPECT_EQ(zkr_lines(read_sorted(scraped)), expected) << scraped;
  // The help texts are the same too.
  for (const auto& family : metric_families(snapshot())) {
    EXPECT_THAT(scraped, HasSubstr(fmt::format("# HELP {} ", family.name))) << family.name;
  }
}

TEST(PrometheusComponent, ALiveSessionIsCollectedAtEachScrape) {
  Session session(session_options(testenv::shared_server()));
  prometheus::Exposer exposer("127.0.0.1:0");
  auto metrics = std::make_shared<PrometheusCollectable>(session);
  exposer.RegisterCollectable(metrics);
  const int port = exposer.GetListeningPorts().front();
  const auto held = [&] {
    return sample_value(read_exposition(scrape(port)), "zkr_locks_held", {{"path", ""}}).value_or(-1);
  };
  EXPECT_EQ(held(), 0);
  {
    HeldLock lock = Lock(session, testenv::unique_path()).acquire();
    EXPECT_EQ(held(), 1);
  }
  EXPECT_EQ(held(), 0);
  EXPECT_EQ(sample_value(read_exposition(scrape(port)), "zkr_sessions_established_total", {}), 1);
}

}  // namespace
}  // namespace zkr::test
