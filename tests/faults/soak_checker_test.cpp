// SPDX-License-Identifier: Apache-2.0
// The soak's checker on hand-written runs: each violation it exists to find is planted once, so a
// checker that stopped finding it fails here rather than passing every soak.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "checker.hpp"

namespace zkr::soak {
namespace {

class SoakCheckerTest : public ::testing::Test {
 protected:
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              fmt::format("zkr-soak-checker-{}", std::random_device{}());

  void SetUp() override {
    std::filesystem::create_directories(dir);
    write("run.txt", "session_timeout_ms 1000\nstart_ns 1000\nend_ns 100000000000\n");
    write("end.txt", "stray_nodes_while_running 0\nnodes_after_all_exited 0\n");
    write("faults.log", "");
  }
  void TearDown() override { std::filesystem::remove_all(dir); }

  void write(const std::string& name, const std::string& text) { std::ofstream(dir / name) << text; }

  // A clean grant of `token` to `client` from `start` to `end` (seconds), with one acknowledged
  // read-increment-write of the counter from `value` to value + 1.
  static std::string clean_grant(int client, std::int64_t token, int start, int end, int value, int op) {
    const std::int64_t s = start * 1'000'000'000LL, e = end * 1'000'000'000LL;
    return fmt::format(
        "{0} {1} ATTEMPT a=1\n{0} {1} GRANT a=1 token={2} node=n session=1\n"
        "{3} {1} OP a=1 token={2} op=READ id=r{5} value={4} result=OK\n"
        "{3} {1} OP a=1 token={2} op=WRITE id=w{5} value={6} result=OK\n"
        "{7} {1} END a=1 token={2} how=released reason=-\n",
        s, client, token, s + 1000, value, op, value + 1, e);
  }
  static std::string journal(int seq, const std::string& op, int client, const std::string& id, std::int64_t token,
                             bool ok, int value) {
    return fmt::format("{} {} {} {} {} {} {} {} {}\n", 1000 + seq, seq, op, client, id, token, ok ? "OK" : "STALE",
                       value, token);
  }

  void write_clean_run() {
    write("client-0.log", clean_grant(0, 100, 1, 2, 0, 1));
    write("client-1.log", clean_grant(1, 200, 3, 4, 1, 2));
    write("store.journal", journal(1, "READ", 0, "r1", 100, true, 0) + journal(2, "WRITE", 0, "w1", 100, true, 1) +
                               journal(3, "READ", 1, "r2", 200, true, 1) +
                               journal(4, "WRITE", 1, "w2", 200, true, 2) + "5000 FINAL counter 2 200\n");
  }
};

TEST_F(SoakCheckerTest, ACleanRunHasNothingToReport) {
  write_clean_run();
  const auto report = check_run(dir);
  EXPECT_TRUE(report.must_be_zero_all_zero()) << format_report(report);
  EXPECT_EQ(report.grants, 2u);
  EXPECT_EQ(report.acknowledged_writes, 2u);
  EXPECT_EQ(report.overlapping_beliefs, 0u);
  EXPECT_FALSE(report.races_exercised());
}

TEST_F(SoakCheckerTest, FindsADuplicateToken) {
  write_clean_run();
  write("client-1.log", clean_grant(1, 100, 3, 4, 1, 2));
  EXPECT_EQ(check_run(dir).duplicate_tokens, 1u);
}

TEST_F(SoakCheckerTest, FindsAGrantWithASmallerTokenAfterARelease) {
  write_clean_run();
  write("client-1.log", clean_grant(1, 50, 3, 4, 1, 2));
  EXPECT_EQ(check_run(dir).out_of_order_grants, 1u);
}

TEST_F(SoakCheckerTest, ExcusesALateGrantRecordOfAFrozenClient) {
  write_clean_run();
  write("client-1.log", clean_grant(1, 50, 3, 4, 1, 2));
  write("faults.log", "1500000000 BEGIN freeze_holder client-1 1000\n2500000000 END freeze_holder client-1\n");
  const auto report = check_run(dir);
  EXPECT_EQ(report.out_of_order_grants, 0u);
  EXPECT_EQ(report.late_grant_records, 1u);
}

TEST_F(SoakCheckerTest, FindsAStaleWriteTheStoreAccepted) {
  write_clean_run();
  write("store.journal", journal(1, "READ", 1, "r2", 200, true, 0) + journal(2, "WRITE", 0, "w1", 100, true, 1) +
                             journal(3, "WRITE", 1, "w2", 200, true, 2) + "5000 FINAL counter 2 200\n");
  EXPECT_EQ(check_run(dir).accepted_stale_writes, 1u);
}

TEST_F(SoakCheckerTest, FindsLostAcknowledgedUpdates) {
  write_clean_run();
  // Both wrote 1: the second increment overwrote the first.
  write("store.journal", journal(1, "READ", 0, "r1", 100, true, 0) + journal(2, "WRITE", 0, "w1", 100, true, 1) +
                             journal(3, "WRITE", 1, "w2", 200, true, 1) + "5000 FINAL counter 1 200\n");
  const auto report = check_run(dir);
  EXPECT_GE(report.lost_acknowledged_updates, 1u) << format_report(report);
}

TEST_F(SoakCheckerTest, FindsAnAcknowledgedWriteMissingFromTheStore) {
  write_clean_run();
  write("store.journal", journal(1, "READ", 0, "r1", 100, true, 0) + journal(2, "WRITE", 0, "w1", 100, true, 1) +
                             "5000 FINAL counter 1 100\n");
  EXPECT_EQ(check_run(dir).lost_acknowledged_updates, 1u);
}

TEST_F(SoakCheckerTest, CountsOrphansAndOverlapsAndRefusals) {
  write_clean_run();
  write("client-1.log", clean_grant(1, 200, 1, 4, 1, 2));  // believed while client 0 still did
  write("store.journal", journal(1, "READ", 0, "r1", 100, true, 0) + journal(2, "WRITE", 0, "w1", 100, true, 1) +
                             journal(3, "READ", 1, "r2", 200, true, 1) + journal(4, "WRITE", 0, "w9", 100, false, 1) +
                             journal(5, "WRITE", 1, "w2", 200, true, 2) + "5000 FINAL counter 2 200\n");
  write("end.txt", "stray_nodes_while_running 1\nnodes_after_all_exited 2\n");
  const auto report = check_run(dir);
  EXPECT_EQ(report.orphan_nodes, 3u);
  EXPECT_EQ(report.overlapping_beliefs, 1u);
  EXPECT_EQ(report.overlaps_without_freeze_or_expiry, 1u);
  EXPECT_EQ(report.stale_writes_refused, 1u);
  EXPECT_TRUE(report.races_exercised());
}

// Client 0 is told it lost the lock and is still stopping (STOPPING, then END at 4 s) when client
// 1 is granted at 3 s, without any freeze or forced expiry of client 0: the lead time failed.
TEST_F(SoakCheckerTest, FindsAStoppingJobOverlappingTheNextGrant) {
  const std::string stopping =
      "1000000000 0 ATTEMPT a=1\n1000000000 0 GRANT a=1 token=100 node=n session=1\n"
      "2500000000 0 STOPPING a=1 ms=1500\n4000000000 0 END a=1 token=100 how=lost reason=session_lost\n";
  write("client-0.log", stopping);
  write("client-1.log", clean_grant(1, 200, 3, 5, 0, 2));
  write("store.journal", journal(1, "READ", 1, "r2", 200, true, 0) + journal(2, "WRITE", 1, "w2", 200, true, 1) +
                             "6000 FINAL counter 1 200\n");
  const auto report = check_run(dir);
  EXPECT_EQ(report.graceful_stops, 1u);
  EXPECT_EQ(report.stopping_job_overlaps, 1u) << format_report(report);
  EXPECT_FALSE(report.must_be_zero_all_zero());
}

}  // namespace
}  // namespace zkr::soak
