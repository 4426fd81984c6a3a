// --list output formatting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "contender_report.hpp"

namespace zklock {
namespace {

using ::testing::HasSubstr;

zkr::ContenderInfo contender(std::string node, std::int64_t token, bool holds, std::string owner) {
  zkr::ContenderInfo info;
  info.node = std::move(node);
  info.sequence = 3;
  info.token = zkr::FencingToken(token);
  info.session_id = 0x1234abcd;
  info.owner_data = std::move(owner);
  info.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  info.holds = holds;
  return info;
}

TEST(ZklockReport, Utc) { EXPECT_EQ(format_utc(contender("n", 1, true, "").created), "2023-11-14T22:13:20.123Z"); }

TEST(ZklockReport, JsonStringsAreEscaped) {
  EXPECT_EQ(json_string("a\"b\\c\n\x01"), R"("a\"b\\c\n\u0001")");
  EXPECT_EQ(json_string("caf\xc3\xa9"), "\"caf\xc3\xa9\"");
  EXPECT_EQ(json_string("bad\xff"), R"("bad\ufffd")");
}

TEST(ZklockReport, Text) {
  const std::string text = format_contenders_text(
      "/locks/a", {contender("_c_x-lock-0000000003", 42, true, "host:1:job"),
                   contender("_c_y-lock-0000000004", 43, false, "line\nbreak")});
  EXPECT_THAT(text, HasSubstr("/locks/a: 1 holder, 1 waiter"));
  EXPECT_THAT(text, HasSubstr("holder"));
  EXPECT_THAT(text, HasSubstr("waiter"));
  EXPECT_THAT(text, HasSubstr("0x1234abcd"));
  EXPECT_THAT(text, HasSubstr("host:1:job"));
  EXPECT_THAT(text, HasSubstr("line?break"));  // one line per contender
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_EQ(format_contenders_text("/locks/a", {}), "/locks/a: free (no holder, no waiters)\n");
}

TEST(ZklockReport, Json) {
  EXPECT_EQ(format_contenders_json("/a", {contender("_c_x-lock-0000000003", 42, true, "o")}),
            R"({"path":"/a","contenders":[{"node":"_c_x-lock-0000000003","sequence":3,"token":42,)"
            R"("session_id":"0x1234abcd","owner":"o","since":"2023-11-14T22:13:20.123Z","holds":true,)"
            R"("role":"exclusive","scheme":"zkrecipes"}]})"
            "\n");
  EXPECT_EQ(format_contenders_json("/a", {}), "{\"path\":\"/a\",\"contenders\":[]}\n");
}

}  // namespace
}  // namespace zklock
