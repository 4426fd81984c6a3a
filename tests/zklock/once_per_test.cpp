// SPDX-License-Identifier: Apache-2.0
// --once-per's record and windows, as units (the real runs are in zklock_process_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "once_per.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

TEST(OncePerRecord, RoundTripsWithAndWithoutAnExitCode) {
  RunRecord record{1764547200123, "host-a:42:backup.sh", "4294967312", "0x1000a2b3c0002", std::nullopt, 0, "1d UTC"};
  std::string problem;
  auto parsed = parse_run_records(encode_run_records({record}), problem);
  ASSERT_TRUE(parsed) << problem;
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ(parsed->front().started_ms, record.started_ms);
  EXPECT_EQ(parsed->front().owner, record.owner);
  EXPECT_EQ(parsed->front().token, record.token);
  EXPECT_EQ(parsed->front().session, record.session);
  EXPECT_EQ(parsed->front().schedule, "1d UTC");
  EXPECT_FALSE(parsed->front().exit_code);

  record.exit_code = 3;
  record.finished_ms = 1764547300000;
  parsed = parse_run_records(encode_run_records({record}), problem);
  ASSERT_TRUE(parsed) << problem;
  EXPECT_EQ(parsed->front().exit_code, 3);
  EXPECT_EQ(parsed->front().finished_ms, 1764547300000);
}

TEST(OncePerRecord, KeepsOneRunPerSchedule) {
  const RunRecord weekly{1000, "a", "7", "0x1", 0, 2000, "1w UTC"};
  const RunRecord hourly{3000, "b", "8", "0x2", std::nullopt, 0, "1h Europe/Berlin"};
  const std::string text = encode_run_records({weekly, hourly});
  EXPECT_THAT(text, ::testing::StartsWith("zklock run record 2\nrun 1w UTC\nstarted_ms=1000\n"));
  std::string problem;
  const auto parsed = parse_run_records(text, problem);
  ASSERT_TRUE(parsed) << problem;
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].schedule, "1w UTC");
  EXPECT_EQ((*parsed)[0].exit_code, 0);
  EXPECT_EQ((*parsed)[1].schedule, "1h Europe/Berlin");
  EXPECT_EQ((*parsed)[1].owner, "b");
  EXPECT_FALSE((*parsed)[1].exit_code);
  EXPECT_FALSE(parse_run_records(encode_run_records({weekly, weekly}), problem));
  EXPECT_THAT(problem, HasSubstr("two runs of '1w UTC'"));
}

TEST(OncePerRecord, SchedulesAreNamedInTheLargestWholeUnit) {
  const TimeZone utc;
  EXPECT_EQ(schedule_text(std::chrono::weeks(1), utc), "1w UTC");
  EXPECT_EQ(schedule_text(std::chrono::days(14), utc), "2w UTC");
  EXPECT_EQ(schedule_text(std::chrono::days(3), utc), "3d UTC");
  EXPECT_EQ(schedule_text(90min, utc), "90m UTC");
  EXPECT_EQ(schedule_text(45s, utc), "45s UTC");
}

TEST(OncePerRecord, AVersionOneRecordIsReadAsARunOfEverySchedule) {
  std::string problem;
  const auto parsed = parse_run_records(
      "zklock run record 1\nstarted_ms=5\nowner=o\ntoken=9\nsession=0x3\nexit_code=0\n", problem, 77);
  ASSERT_TRUE(parsed) << problem;
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ(parsed->front().schedule, "");
  EXPECT_EQ(parsed->front().exit_code, 0);
  EXPECT_EQ(parsed->front().finished_ms, 77);  // the node's mtime
}

TEST(OncePerRecord, ANewerVersionAsksForAnUpgrade) {
  std::string problem;
  EXPECT_FALSE(parse_run_records("zklock run record 3\nrun 1d UTC\nstarted_ms=1\n", problem));
  EXPECT_EQ(problem, "it is a version 3 run record, and this zklock reads versions 1 and 2: upgrade zklock");
}

TEST(OncePerRecord, AnOwnerCannotAddLinesToTheRecord) {
  RunRecord record{5, "evil\nrun 1h UTC\nstarted_ms=99999999999999\nexit_code=0", "1", "0x1", std::nullopt, 0,
                   "1d UTC"};
  std::string problem;
  const auto parsed = parse_run_records(encode_run_records({record}), problem);
  ASSERT_TRUE(parsed) << problem;
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ(parsed->front().started_ms, 5);
  EXPECT_FALSE(parsed->front().exit_code);
  EXPECT_THAT(parsed->front().owner, HasSubstr("\\x0a"));
}

TEST(OncePerRecord, ForeignTextIsRefusedSayingWhy) {
  std::string problem;
  EXPECT_FALSE(parse_run_records("", problem));
  EXPECT_THAT(problem, HasSubstr("does not start with 'zklock run record 2'"));
  EXPECT_FALSE(parse_run_records("hello", problem));
  EXPECT_FALSE(parse_run_records("zklock run record x\n", problem));
  EXPECT_FALSE(parse_run_records("zklock run record 2\nrun 1d UTC\nowner=x\n", problem));
  EXPECT_THAT(problem, HasSubstr("its run of '1d UTC' has no started_ms"));
  EXPECT_FALSE(parse_run_records("zklock run record 1\nowner=x\n", problem));
  EXPECT_THAT(problem, HasSubstr("no started_ms"));
  EXPECT_FALSE(parse_run_records("zklock run record 2\nrun 1d UTC\nstarted_ms=12x\n", problem));
  EXPECT_THAT(problem, HasSubstr("started_ms '12x' is not a number"));
  EXPECT_FALSE(parse_run_records("zklock run record 2\nrun 1d UTC\nstarted_ms=1\nexit_code=\n", problem));
  EXPECT_THAT(problem, HasSubstr("exit_code '' is not a number"));
  // Lines a later version may add are passed over.
  EXPECT_TRUE(parse_run_records("zklock run record 2\nrun 1d UTC\nstarted_ms=1\nhost_clock=7\nnote\n", problem));
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

// Instants of late 2026 and 2040 (checked against Python's zoneinfo).
constexpr std::int64_t monday_2026_11_30 = 1795996800000;   // 2026-11-30T00:00:00Z, a Monday
constexpr std::int64_t thursday_2026_12_03 = 1796256000000;  // 2026-12-03T00:00:00Z
constexpr std::int64_t day_ms = 86'400'000;

TEST(OncePerWindows, WeeksRunFromMondayToMonday) {
  const std::chrono::milliseconds week = std::chrono::weeks(1);
  const auto window = window_of(thursday_2026_12_03, week);
  EXPECT_EQ(window_start(window, week), monday_2026_11_30);
  EXPECT_EQ(window_start(window + 1, week), monday_2026_11_30 + 7 * day_ms);
  // Wednesday and the Thursday after it are one week; Sunday night and Monday morning are two.
  EXPECT_EQ(window_of(thursday_2026_12_03 - 1, week), window);
  EXPECT_EQ(window_of(monday_2026_11_30, week), window);
  EXPECT_EQ(window_of(monday_2026_11_30 - 1, week), window - 1);
  EXPECT_EQ(window_of(monday_2026_11_30 + 7 * day_ms - 1, week), window);
  // Whole weeks, however written: 7d is 1w.
  EXPECT_EQ(window_of(monday_2026_11_30 - 1, std::chrono::days(7)), window - 1);
}

TimeZone zone(std::string_view name) { return TimeZone::load(name); }

TEST(OncePerWindows, DaysAreCalendarDaysOfTheZone) {
  const TimeZone berlin = zone("Europe/Berlin");
  const std::chrono::milliseconds day = std::chrono::days(1);
  // 2026-03-29 in Berlin: 23:00Z the day before (CET) to 22:00Z (CEST), 23 hours.
  const std::int64_t spring_start = 1774738800000, spring_end = 1774821600000;
  const auto spring = window_of(spring_start, day, berlin);
  EXPECT_EQ(window_of(spring_start - 1, day, berlin), spring - 1);
  EXPECT_EQ(window_of(spring_end - 1, day, berlin), spring);
  EXPECT_EQ(window_of(spring_end, day, berlin), spring + 1);
  EXPECT_EQ(window_start(spring, day, berlin), spring_start);
  EXPECT_EQ(window_start(spring + 1, day, berlin) - window_start(spring, day, berlin), 23 * 3'600'000);
  // 2026-10-25: 22:00Z the day before (CEST) to 23:00Z (CET), 25 hours.
  const std::int64_t autumn_start = 1792879200000, autumn_end = 1792969200000;
  const auto autumn = window_of(autumn_start, day, berlin);
  EXPECT_EQ(window_of(autumn_start - 1, day, berlin), autumn - 1);
  EXPECT_EQ(window_of(autumn_end - 1, day, berlin), autumn);
  EXPECT_EQ(window_start(autumn + 1, day, berlin) - window_start(autumn, day, berlin), 25 * 3'600'000);
  // 23:30Z is tomorrow in Berlin, today in UTC.
  EXPECT_EQ(window_of(spring_start + 1'800'000, day, berlin), spring);
  EXPECT_EQ(window_of(spring_start + 1'800'000, day), window_of(spring_start - 1, day));
}

TEST(OncePerWindows, TheHourRepeatedWhenClocksGoBackIsOneWindow) {
  const TimeZone berlin = zone("Europe/Berlin");
  const std::chrono::milliseconds hour = 1h;
  // 2026-10-25: 02:00-03:00 happens at 00:00Z (CEST) and again at 01:00Z (CET).
  const std::int64_t first_two_am = 1792886400000, second_two_am = first_two_am + 3'600'000;
  EXPECT_EQ(window_of(second_two_am, hour, berlin), window_of(first_two_am, hour, berlin));
  EXPECT_EQ(window_of(second_two_am + 1'800'000, hour, berlin), window_of(first_two_am + 1'800'000, hour, berlin));
  EXPECT_EQ(window_of(second_two_am + 3'600'000, hour, berlin), window_of(first_two_am, hour, berlin) + 1);
  EXPECT_EQ(window_start(window_of(second_two_am, hour, berlin), hour, berlin), first_two_am);
  // In UTC, two windows.
  EXPECT_EQ(window_of(second_two_am, hour), window_of(first_two_am, hour) + 1);
}

TEST(OncePerWindows, WeeksStartOnMondayInTheZone) {
  const TimeZone berlin = zone("Europe/Berlin");
  const std::chrono::milliseconds week = std::chrono::weeks(1);
  const std::int64_t berlin_monday = 1795993200000;  // 2026-11-30T00:00+01:00
  const auto window = window_of(thursday_2026_12_03, week, berlin);
  EXPECT_EQ(window_start(window, week, berlin), berlin_monday);
  EXPECT_EQ(window_of(berlin_monday - 1, week, berlin), window - 1);
}

TEST(OncePerWindows, AreDescribedInTheZone) {
  EXPECT_EQ(describe_window(1774738800000 + 3'600'000, std::chrono::days(1), zone("Europe/Berlin")),
            "2026-03-29T00:00:00.000+01:00 - 2026-03-30T00:00:00.000+02:00 (Europe/Berlin)");
  EXPECT_EQ(describe_window(thursday_2026_12_03, std::chrono::weeks(1)),
            "2026-11-30T00:00:00.000Z - 2026-12-07T00:00:00.000Z");
}

TEST(TimeZones, FollowTheZoneRuleAfterTheLastTransition) {
  // The tz database's files list transitions up to 2037; later ones come from the closing rule.
  EXPECT_EQ(zone("Europe/Berlin").offset_at(2224713600), 7200);  // 2040-07-01
  EXPECT_EQ(zone("Europe/Berlin").offset_at(2208988800), 3600);  // 2040-01-01
  EXPECT_EQ(zone("Europe/Berlin").offset_at(2216249999), 3600);  // 2040-03-25T00:59:59Z
  EXPECT_EQ(zone("Europe/Berlin").offset_at(2216250000), 7200);  // 01:00Z: clocks go forward
  EXPECT_EQ(zone("America/New_York").offset_at(2224713600), -4 * 3600);
  EXPECT_EQ(zone("Australia/Sydney").offset_at(2208988800), 11 * 3600);  // southern summer
  EXPECT_EQ(zone("Australia/Sydney").offset_at(2224713600), 10 * 3600);
  EXPECT_EQ(zone("Asia/Kolkata").offset_at(2224713600), 5 * 3600 + 1800);
  EXPECT_EQ(TimeZone().offset_at(2224713600), 0);
}

TEST(TimeZones, BadNamesAndFilesAreRefusedSayingWhy) {
  const auto refusal = [](std::string_view name) {
    try {
      TimeZone::load(name);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(refusal("Mars/Olympus"), HasSubstr("unknown time zone 'Mars/Olympus': there is no "
                                                 "/usr/share/zoneinfo/Mars/Olympus"));
  EXPECT_THAT(refusal("../../etc/passwd"), HasSubstr("is not a time zone name"));
  EXPECT_THAT(refusal("/etc/passwd"), HasSubstr("is not a time zone name"));
  EXPECT_THAT(refusal("Europe"), HasSubstr("unknown time zone 'Europe'"));
  EXPECT_THROW(TimeZone::from_tzif("X", "TZif2"), std::invalid_argument);
  try {
    TimeZone::from_tzif("X", "not a zone file at all, but long enough to have a header......");
    FAIL();
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), HasSubstr("'X' cannot be read: it is not a TZif file"));
  }
}

TEST(OncePerRecord, DescribedForPeopleAndForJson) {
  RunRecord record{1764547200123, "host-a:42:job", "77", "0x5", std::nullopt, 0, "1d UTC"};
  EXPECT_EQ(describe_run(record),
            "started 2025-12-01T00:00:00.123Z by \"host-a:42:job\" (token 77, session 0x5), not (yet) finished");
  EXPECT_THAT(run_record_json(record), HasSubstr(R"("exit_code":null,"finished":null)"));
  record.exit_code = 0;
  record.finished_ms = 1764547260000;
  EXPECT_THAT(describe_run(record), HasSubstr(", exited 0 at 2025-12-01T00:01:00.000Z"));
  EXPECT_EQ(run_record_json(record),
            R"({"schedule":"1d UTC","started":"2025-12-01T00:00:00.123Z","owner":"host-a:42:job","token":77,)"
            R"("session_id":5,"session":"0x5",)"
            R"("exit_code":0,"finished":"2025-12-01T00:01:00.000Z"})");
  // A record another zklock version wrote with a token or session that is not a number: null, not a guess.
  record.token = "x";
  record.session = "host";
  EXPECT_THAT(run_record_json(record), HasSubstr(R"("token":null,"session_id":null,"session":"host",)"));
}

}  // namespace
}  // namespace zklock
