// --once-per's record and windows, as units (the real runs are in zklock_process_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "once_per.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(OncePerRecord, RoundTripsWithAndWithoutAnExitCode) {
  RunRecord record{1764547200123, "host-a:42:backup.sh", "4294967312", "0x1000a2b3c0002", std::nullopt, 0};
  std::string problem;
  auto parsed = parse_run_record(encode_run_record(record), problem);
  ASSERT_TRUE(parsed) << problem;
  EXPECT_EQ(parsed->started_ms, record.started_ms);
  EXPECT_EQ(parsed->owner, record.owner);
  EXPECT_EQ(parsed->token, record.token);
  EXPECT_EQ(parsed->session, record.session);
  EXPECT_FALSE(parsed->exit_code);

  record.exit_code = 3;
  parsed = parse_run_record(encode_run_record(record), problem);
  ASSERT_TRUE(parsed) << problem;
  EXPECT_EQ(parsed->exit_code, 3);
}

TEST(OncePerRecord, AnOwnerCannotAddLinesToTheRecord) {
  RunRecord record{5, "evil\nstarted_ms=99999999999999\nexit_code=0", "1", "0x1", std::nullopt, 0};
  std::string problem;
  const auto parsed = parse_run_record(encode_run_record(record), problem);
  ASSERT_TRUE(parsed) << problem;
  EXPECT_EQ(parsed->started_ms, 5);
  EXPECT_FALSE(parsed->exit_code);
  EXPECT_THAT(parsed->owner, HasSubstr("\\x0a"));
}

TEST(OncePerRecord, ForeignTextIsRefusedSayingWhy) {
  std::string problem;
  EXPECT_FALSE(parse_run_record("", problem));
  EXPECT_THAT(problem, HasSubstr("does not start with 'zklock run record 1'"));
  EXPECT_FALSE(parse_run_record("hello", problem));
  EXPECT_FALSE(parse_run_record("zklock run record 1\nowner=x\n", problem));
  EXPECT_THAT(problem, HasSubstr("no started_ms"));
  EXPECT_FALSE(parse_run_record("zklock run record 1\nstarted_ms=12x\n", problem));
  EXPECT_THAT(problem, HasSubstr("started_ms '12x' is not a number"));
  EXPECT_FALSE(parse_run_record("zklock run record 1\nstarted_ms=1\nexit_code=\n", problem));
  EXPECT_THAT(problem, HasSubstr("exit_code '' is not a number"));
  // Lines a later version may add are passed over.
  EXPECT_TRUE(parse_run_record("zklock run record 1\nstarted_ms=1\nhost_clock=7\nnote\n", problem));
}

TEST(OncePerWindows, AreAlignedToThePeriodSinceTheEpoch) {
  constexpr std::chrono::milliseconds day = std::chrono::days(1);
  const std::int64_t midnight = 20'423LL * 86'400'000;  // a UTC midnight
  EXPECT_EQ(window_of(midnight, day), 20'423);
  EXPECT_EQ(window_of(midnight - 1, day), 20'422);
  EXPECT_EQ(window_of(midnight + day.count() - 1, day), 20'423);
  // A daily run at 02:00:00.400 one day and 02:00:00.300 the next: two windows, both run.
  const std::int64_t two_am = midnight + 2 * 3'600'000;
  EXPECT_LT(window_of(two_am + 400, day), window_of(two_am + day.count() + 300, day));
  EXPECT_EQ(window_of(0, 1h), 0);
  EXPECT_EQ(window_of(-1, 1h), -1);
}

TEST(OncePerRecord, DescribedForPeopleAndForJson) {
  RunRecord record{1764547200123, "host-a:42:job", "77", "0x5", std::nullopt, 0};
  EXPECT_EQ(describe_run(record),
            "started 2025-12-01T00:00:00.123Z by \"host-a:42:job\" (token 77, session 0x5), not (yet) finished");
  EXPECT_THAT(run_record_json(record), HasSubstr(R"("exit_code":null,"finished":null)"));
  record.exit_code = 0;
  record.finished_ms = 1764547260000;
  EXPECT_THAT(describe_run(record), HasSubstr(", exited 0 at 2025-12-01T00:01:00.000Z"));
  EXPECT_EQ(run_record_json(record),
            R"({"started":"2025-12-01T00:00:00.123Z","owner":"host-a:42:job","token":77,"session_id":5,"session":"0x5",)"
            R"("exit_code":0,"finished":"2025-12-01T00:01:00.000Z"})");
  // A record another zklock version wrote with a token or session that is not a number: null, not a guess.
  record.token = "x";
  record.session = "host";
  EXPECT_THAT(run_record_json(record), HasSubstr(R"("token":null,"session_id":null,"session":"host",)"));
}

}  // namespace
}  // namespace zklock
