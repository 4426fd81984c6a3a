// SPDX-License-Identifier: Apache-2.0
// What the library writes for machines, checked without a server: the Prometheus text of a
// metrics snapshot (order, escaping, histogram buckets) and the JSON log lines (escaping of every
// kind of awkward string), each read back by an independent parser (python_readers.hpp).
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <testenv.hpp>
#include <zkr/prometheus.hpp>
#include <zkr/session.hpp>

#include "client_log.hpp"
#include "python_readers.hpp"

namespace zkr::test {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

// A path with everything the format must escape: a quote, a backslash, a line feed, a byte that is
// not UTF-8, and a character that is (é).
const std::string kAwkwardPath = "/locks/a\"b\\c\nd\xff-\xC3\xA9";
const std::string kAwkwardPathRead = "/locks/a\"b\\c\nd\xEF\xBF\xBD-\xC3\xA9";  // 0xff became U+FFFD

SessionMetrics snapshot_with_two_series() {
  SessionMetrics metrics;
  LockMetrics all_others;
  all_others.held = 2;
  LockMetrics awkward;
  awkward.path = kAwkwardPath;
  awkward.held = 1;
  awkward.waiting = 3;
  // Observations of 0.02 s and 2 s: buckets from le=0.025 count one, from le=2.5 both.
  for (std::size_t i = 0; i < kDurationBucketCount; ++i) {
    const double bound = i < std::size(kDurationBuckets) ? kDurationBuckets[i] : 1e300;
    awkward.wait.cumulative_counts[i] = (bound >= 0.02 ? 1 : 0) + (bound >= 2 ? 1 : 0);
  }
  awkward.wait.count = 2;
  awkward.wait.sum = std::chrono::milliseconds(2020);
  awkward.timeouts = 4;
  awkward.losses[static_cast<std::size_t>(LossReason::node_deleted)] = 5;
  metrics.locks = {all_others, awkward};
  metrics.state = SessionState::connected;
  metrics.negotiated_timeout = std::chrono::seconds(10);
  return metrics;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(PrometheusText, EscapesLabelValuesAndReplacesBytesThatAreNotUtf8) {
  const std::string text = prometheus_text(snapshot_with_two_series());
  EXPECT_THAT(text, HasSubstr("zkr_locks_held{path=\"/locks/a\\\"b\\\\c\\nd\xEF\xBF\xBD-\xC3\xA9\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("zkr_locks_held{path=\"\"} 2\n"));
  // Read back by python3-prometheus-client: the label value is the path (with U+FFFD).
  const auto samples = read_exposition(text);
  EXPECT_THAT(samples, Contains(fmt::format("zkr_locks_held path={} 1.0", hex(kAwkwardPathRead))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_locks_waiting path={} 3.0", hex(kAwkwardPathRead))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_lock_acquire_failures_total path={},reason={} 4.0",
                                            hex(kAwkwardPathRead), hex("timeout"))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_locks_lost_total path={},reason={} 5.0", hex(kAwkwardPathRead),
                                            hex("node_deleted"))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_session_state state={} 1.0", hex("connected"))));
}

TEST(PrometheusText, EveryFamilyHasHelpAndTypeBeforeItsSamplesAndAppearsOnce) {
  const auto lines = lines_of(prometheus_text(snapshot_with_two_series()));
  std::vector<std::string> families;
  std::string current;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.starts_with("# HELP ")) {
      current = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_THAT(families, ::testing::Not(Contains(current))) << "family twice: " << current;
      families.push_back(current);
      ASSERT_LT(i + 1, lines.size());
      EXPECT_TRUE(lines[i + 1].starts_with("# TYPE " + current + " ")) << lines[i + 1];
      continue;
    }
    if (line.starts_with("# ")) continue;
    ASSERT_FALSE(current.empty()) << "a sample before any family: " << line;
    EXPECT_TRUE(line.starts_with(current)) << line << " outside its family " << current;
  }
  EXPECT_THAT(families, Contains("zkr_lock_wait_seconds"));
  EXPECT_THAT(families, Contains("zkr_lock_hold_seconds"));
}

TEST(PrometheusText, HistogramBucketsAscendEndWithInfAndAreCumulative) {
  const auto samples = read_exposition(prometheus_text(snapshot_with_two_series()));
  // The awkward path's wait histogram, as the independent parser read it, in order.
  const std::string prefix = "zkr_lock_wait_seconds_bucket le=";
  const std::string path_label = ",path=" + hex(kAwkwardPathRead) + " ";
  std::vector<std::pair<std::string, double>> buckets;  // le (hex), cumulative count
  for (const auto& sample : samples) {
    if (!sample.starts_with(prefix) || sample.find(path_label) == std::string::npos) continue;
    const std::string le = sample.substr(prefix.size(), sample.find(',') - prefix.size());
    buckets.emplace_back(le, std::stod(sample.substr(sample.rfind(' ') + 1)));
  }
  ASSERT_EQ(buckets.size(), kDurationBucketCount);
  for (std::size_t i = 0; i < std::size(kDurationBuckets); ++i)
    EXPECT_EQ(buckets[i].first, hex(fmt::format("{}", kDurationBuckets[i]))) << "bucket " << i;
  EXPECT_EQ(buckets.back().first, hex("+Inf"));
  for (std::size_t i = 1; i < buckets.size(); ++i) EXPECT_LE(buckets[i - 1].second, buckets[i].second);
  EXPECT_EQ(buckets.back().second, 2.0);
  EXPECT_THAT(samples, Contains(fmt::format("zkr_lock_wait_seconds_count path={} 2.0", hex(kAwkwardPathRead))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_lock_wait_seconds_sum path={} 2.02", hex(kAwkwardPathRead))));
  // The bucket of 0.01 s counts nothing, that of 0.025 s the 0.02 s wait.
  EXPECT_THAT(samples, Contains(fmt::format("zkr_lock_wait_seconds_bucket le={},path={} 0.0", hex("0.01"),
                                            hex(kAwkwardPathRead))));
  EXPECT_THAT(samples, Contains(fmt::format("zkr_lock_wait_seconds_bucket le={},path={} 1.0", hex("0.025"),
                                            hex(kAwkwardPathRead))));
}

// Writes records through json_lines_log_sink to a file and returns what Python read back.
std::vector<std::string> json_lines_read_back(const std::vector<LogRecord>& records) {
  testenv::TempDir dir("zkr-json-lines");
  const std::string file = dir.file("log.jsonl").string();
  std::FILE* out = std::fopen(file.c_str(), "w");
  EXPECT_NE(out, nullptr);
  if (!out) return {};
  const LogRecordSink sink = json_lines_log_sink(out);
  for (const auto& record : records) sink(record);
  std::fclose(out);
  return read_json_lines(file);
}

TEST(JsonLinesLogSink, EscapesControlCharactersQuotesAndBytesThatAreNotUtf8) {
  using namespace std::string_literals;  // for the NUL inside
  const std::string message =
      "quote \" backslash \\ tab \t newline \n nul \0 bell \x07 escape \x1b del \x7f bad \xff\xfe end é "
      "\xF0\x9F\x94\x92 cut \xE2\x82"s;
  const std::string read_message =
      "quote \" backslash \\ tab \t newline \n nul \0 bell \x07 escape \x1b del \x7f bad \xEF\xBF\xBD\xEF\xBF\xBD end é "
      "\xF0\x9F\x94\x92 cut \xEF\xBF\xBD\xEF\xBF\xBD"s;
  LogRecord record;
  record.time = std::chrono::system_clock::time_point(std::chrono::microseconds(1'700'000'000'123'456));
  record.level = LogLevel::warning;
  record.message = message;
  record.session_id = 0x1000abc;
  record.path = kAwkwardPath;
  record.node = "/locks/x/_c_1-lock-0000000001";
  const auto read = json_lines_read_back({record});
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0], fmt::format("level={},message={},node={},path={},session={},time={}", hex("warning"),
                                 hex(read_message), hex(record.node), hex(kAwkwardPathRead), hex("0x1000abc"),
                                 hex("2023-11-14T22:13:20.123456Z")));
}

TEST(JsonLinesLogSink, LeavesOutWhatIsUnknown) {
  LogRecord record;
  record.level = LogLevel::error;
  record.message = "";
  const auto read = json_lines_read_back({record, record});
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0], fmt::format("level={},message=,time={}", hex("error"), hex("1970-01-01T00:00:00.000000Z")));
}

// The C client's lines, as its log callback gets them (3.8.0's format).
TEST(ClientLog, TheClientsPrefixIsTakenOffAndItsLevelRead) {
  const auto line = detail::parse_client_log_line(
      "2026-12-03 11:50:00,123:4242(0x7f12ab34cd56):ZOO_ERROR@handle_socket_error_msg@1290: Socket "
      "127.0.0.1:4000 zk retcode=-4, errno=111(Connection refused): server refused to accept the client\n");
  EXPECT_EQ(line.level, LogLevel::error);
  EXPECT_EQ(line.message,
            "Socket 127.0.0.1:4000 zk retcode=-4, errno=111(Connection refused): server refused to accept the client");
  const auto warning = detail::parse_client_log_line("2026-12-03 11:50:00,123:1(0x1):ZOO_WARN@f@2: a: b");
  EXPECT_EQ(warning.level, LogLevel::warning);
  EXPECT_EQ(warning.message, "a: b");
  const auto other = detail::parse_client_log_line("something else");
  EXPECT_EQ(other.level, LogLevel::debug);
  EXPECT_EQ(other.message, "something else");
}

TEST(ClientLog, ARepeatedLineIsLoggedFirstThenCountedOncePerInterval) {
  using namespace std::chrono_literals;
  detail::RepeatSummary summary(10s, 2);
  const auto start = detail::RepeatSummary::Clock::time_point() + 1h;
  EXPECT_EQ(summary.admit(LogLevel::error, "refused", start), "refused");
  EXPECT_EQ(summary.admit(LogLevel::warning, "refused", start), "refused");  // another level, another line
  for (int i = 1; i < 58; ++i) EXPECT_EQ(summary.admit(LogLevel::error, "refused", start + i * 170ms), std::nullopt);
  EXPECT_EQ(summary.admit(LogLevel::error, "refused", start + 10s), "refused (repeated 58 times in 10s)");
  EXPECT_EQ(summary.admit(LogLevel::error, "refused", start + 11s), std::nullopt);
  EXPECT_EQ(summary.admit(LogLevel::error, "refused", start + 30s), "refused (repeated 2 times in 20s)");
  // A line that comes back after a quiet interval is logged as it is.
  EXPECT_EQ(summary.admit(LogLevel::error, "refused", start + 60s), "refused");
  // Bounded: a third message forgets the one reported longest ago.
  EXPECT_EQ(summary.admit(LogLevel::info, "other", start + 61s), "other");
  EXPECT_EQ(summary.admit(LogLevel::warning, "refused", start + 62s), "refused");
}

}  // namespace
}  // namespace zkr::test
