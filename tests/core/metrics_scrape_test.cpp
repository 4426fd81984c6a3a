// SPDX-License-Identifier: Apache-2.0
// A real scrape: starts examples/metrics_prometheus.cpp with --serve against the shared server,
// GETs /metrics over TCP as Prometheus would, reads the text with python3-prometheus-client's
// parser, and checks types, buckets and counts against what the example did (its fixed scenario)
// and what the test then does to it (deleting the node it holds: a loss, reason node_deleted).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/time.h>

#include <csignal>
#include <map>
#include <optional>
#include <string>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "../unit/python_readers.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

using boost::asio::ip::tcp;
using ::testing::Contains;
using ::testing::HasSubstr;

struct HttpResponse {
  std::string head;  // status line and headers
  std::string body;
};

// One GET on a fresh connection, read until the server closes it (bounded by a receive timeout).
HttpResponse http_get(unsigned short port, std::string_view target) {
  boost::asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), port));
  const timeval timeout{static_cast<time_t>(testenv::scaled(10s).count() / 1000), 0};
  ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  boost::asio::write(socket, boost::asio::buffer(fmt::format(
                                 "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAccept: text/plain\r\n\r\n", target, port)));
  std::string response;
  boost::system::error_code ec;
  boost::asio::read(socket, boost::asio::dynamic_buffer(response), ec);
  EXPECT_EQ(ec, boost::asio::error::eof) << "reading the response of GET " << target << ": " << ec.message();
  const std::size_t end_of_head = response.find("\r\n\r\n");
  if (end_of_head == std::string::npos) return {response, {}};
  return {response.substr(0, end_of_head), response.substr(end_of_head + 4)};
}

// What the parser read, by family (name -> type) and by sample.
struct Scrape {
  std::map<std::string, std::string> families;
  std::vector<std::string> samples;
  double value(std::string_view name, std::vector<std::pair<std::string, std::string>> labels) const {
    auto found = sample_value(samples, name, std::move(labels));
    EXPECT_TRUE(found.has_value()) << "no sample " << name;
    return found.value_or(-1);
  }
};

Scrape scrape(unsigned short port) {
  const HttpResponse response = http_get(port, "/metrics");
  EXPECT_THAT(response.head, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(response.head, HasSubstr("\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8"));
  Scrape out;
  for (const auto& line : run_python_reader("read_exposition.py", {}, response.body)) {
    if (line.starts_with("family ")) {
      const auto space = line.find(' ', 7);
      out.families[line.substr(7, space - 7)] = line.substr(space + 1);
    } else if (line.starts_with("sample ")) {
      out.samples.push_back(line.substr(7));
    }
  }
  return out;
}

// The histogram's buckets for `path`, in the order served: non-decreasing, and +Inf is the count.
void expect_cumulative_buckets(const Scrape& s, const std::string& name, const std::string& path) {
  const std::string prefix = name + "_bucket le=";
  const std::string path_label = ",path=" + hex(path) + " ";
  std::vector<std::string> les;
  std::vector<double> counts;
  for (const auto& sample : s.samples) {
    if (!sample.starts_with(prefix) || sample.find(path_label) == std::string::npos) continue;
    les.push_back(sample.substr(prefix.size(), sample.find(',') - prefix.size()));
    counts.push_back(std::stod(sample.substr(sample.rfind(' ') + 1)));
  }
  ASSERT_EQ(counts.size(), kDurationBucketCount) << name << " " << path;
  EXPECT_EQ(les.back(), hex("+Inf"));
  for (std::size_t i = 1; i < counts.size(); ++i) EXPECT_LE(counts[i - 1], counts[i]) << name << " bucket " << i;
  EXPECT_EQ(counts.back(), s.value(name + "_count", {{"path", path}}));
}

std::string after(const std::optional<std::string>& line, std::string_view prefix) {
  return line ? line->substr(prefix.size()) : std::string();
}

TEST(MetricsScrape, ServesWhatTheExampleDidAndWhatTheTestDidToIt) {
  const std::string servers = testenv::shared_server();
  testenv::Process example({ZKR_EXAMPLE_METRICS_PROMETHEUS, servers, "--serve"});
  const auto wait = testenv::scaled(60s);
  const std::string labelled = after(example.wait_for_line("labelled path: ", wait), "labelled path: ");
  const std::string other = after(example.wait_for_line("other path: ", wait), "other path: ");
  ASSERT_TRUE(example.wait_for_line("# metrics consistent with this run", wait));
  const std::string node = after(example.wait_for_line("holding ", wait), "holding ");
  const std::string url = after(example.wait_for_line("serving http://127.0.0.1:", wait), "serving http://127.0.0.1:");
  ASSERT_FALSE(labelled.empty() || other.empty() || node.empty() || url.empty());
  const auto port = static_cast<unsigned short>(std::stoi(url.substr(0, url.find('/'))));

  const Scrape first = scrape(port);
  EXPECT_EQ(first.families.at("zkr_locks_held"), "gauge");
  EXPECT_EQ(first.families.at("zkr_locks_waiting"), "gauge");
  EXPECT_EQ(first.families.at("zkr_lock_wait_seconds"), "histogram");
  EXPECT_EQ(first.families.at("zkr_lock_hold_seconds"), "histogram");
  EXPECT_EQ(first.families.at("zkr_locks_lost"), "counter");  // the parser drops _total from the family
  EXPECT_EQ(first.families.at("zkr_lock_acquire_failures"), "counter");
  // The example's scenario: 3 grants, a timeout, a cancellation, a grant lost to a deleted node,
  // and the grant it holds now, on the labelled path; one grant on the other path, which has no
  // label of its own and so counts under path="".
  EXPECT_EQ(first.value("zkr_locks_held", {{"path", labelled}}), 1);
  EXPECT_EQ(first.value("zkr_locks_waiting", {{"path", labelled}}), 0);
  EXPECT_EQ(first.value("zkr_lock_wait_seconds_count", {{"path", labelled}}), 5);
  EXPECT_EQ(first.value("zkr_lock_hold_seconds_count", {{"path", labelled}}), 4);
  EXPECT_EQ(first.value("zkr_lock_acquire_failures_total", {{"path", labelled}, {"reason", "timeout"}}), 1);
  EXPECT_EQ(first.value("zkr_lock_acquire_failures_total", {{"path", labelled}, {"reason", "cancelled"}}), 1);
  EXPECT_EQ(first.value("zkr_locks_lost_total", {{"path", labelled}, {"reason", "node_deleted"}}), 1);
  EXPECT_EQ(first.value("zkr_lock_wait_seconds_count", {{"path", ""}}), 1);
  EXPECT_FALSE(sample_value(first.samples, "zkr_locks_held", {{"path", other}}).has_value())
      << "a path that was not opted in has no series of its own";
  EXPECT_EQ(first.value("zkr_session_state", {{"state", "connected"}}), 1);
  EXPECT_EQ(first.value("zkr_sessions_established_total", {}), 1);
  for (const std::string& path : {labelled, std::string()}) {
    expect_cumulative_buckets(first, "zkr_lock_wait_seconds", path);
    expect_cumulative_buckets(first, "zkr_lock_hold_seconds", path);
  }

  // The test deletes the node the example holds: a second loss by node_deleted, nothing held.
  RawClient raw(servers);
  ASSERT_EQ(raw.remove(node), ZOK);
  std::optional<Scrape> second;
  EXPECT_TRUE(eventually([&] {
    second = scrape(port);
    return second->value("zkr_locks_lost_total", {{"path", labelled}, {"reason", "node_deleted"}}) == 2;
  }));
  EXPECT_EQ(second->value("zkr_locks_held", {{"path", labelled}}), 0);
  EXPECT_EQ(second->value("zkr_lock_hold_seconds_count", {{"path", labelled}}), 5);
  EXPECT_EQ(second->value("zkr_locks_lost_total", {{"path", labelled}, {"reason", "session_lost"}}), 0);

  EXPECT_THAT(http_get(port, "/elsewhere").head, ::testing::StartsWith("HTTP/1.1 404 "));
  example.signal(SIGTERM);
  EXPECT_EQ(example.wait(testenv::scaled(30s)), 0);
}

}  // namespace
}  // namespace zkr::test
