// SPDX-License-Identifier: Apache-2.0
// --list output formatting.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "contender_report.hpp"
#include "json_vocabulary.hpp"

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

zkr::PathListing listing(std::vector<zkr::ContenderInfo> contenders, std::vector<std::string> others = {}) {
  zkr::PathListing result;
  result.exists = true;
  result.contenders = std::move(contenders);
  result.not_contenders = std::move(others);
  return result;
}

TEST(ZklockReport, TerminalEscapes) {
  EXPECT_EQ(escape_for_terminal("plain caf\xc3\xa9 \xe4\xb8\xad"), "plain caf\xc3\xa9 \xe4\xb8\xad");
  EXPECT_EQ(escape_for_terminal("a\nb\x1b[31m\x7f"), "a\\x0ab\\x1b[31m\\x7f");
  // C1 controls (U+0080-U+009F; U+009B is CSI) as both their UTF-8 bytes; U+00A0 is not one.
  EXPECT_EQ(escape_for_terminal("a\xc2\x9b" "31m\xc2\x80\xc2\x9f\xc2\xa0"), "a\\xc2\\x9b31m\\xc2\\x80\\xc2\\x9f\xc2\xa0");
  // Bytes that are not UTF-8: alone, truncated, overlong, a surrogate.
  EXPECT_EQ(escape_for_terminal("\x9b\xff\xc3"), "\\x9b\\xff\\xc3");
  EXPECT_EQ(escape_for_terminal("\xc0\xaf\xed\xa0\x80"), "\\xc0\\xaf\\xed\\xa0\\x80");
}

TEST(ZklockReport, Text) {
  const std::string text = format_listing_text(
      "/locks/a", listing({contender("_c_x-lock-0000000003", 42, true, "host:1:job"),
                           contender("_c_y-lock-0000000004", 43, false, "line\nbreak\xc2\x9b")}));
  EXPECT_THAT(text, HasSubstr("/locks/a: 1 holder, 1 waiter"));
  EXPECT_THAT(text, HasSubstr("holder"));
  EXPECT_THAT(text, HasSubstr("waiter"));
  EXPECT_THAT(text, HasSubstr("0x1234abcd"));
  EXPECT_THAT(text, HasSubstr("host:1:job"));
  EXPECT_THAT(text, HasSubstr("line?break? "));  // one line per contender, no control sequence
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_EQ(format_listing_text("/locks/a", listing({})), "/locks/a: free (no holder, no waiters)\n");
}

// Owner data of any length (zklock's default is host:pid:command) keeps every column aligned:
// each row's NODE and OWNER start where the header's do.
TEST(ZklockReport, ColumnsStayAlignedWithLongOwners) {
  const std::string long_owner = "build-host-with-a-long-name.example.com:48213:/usr/local/bin/nightly-report --all";
  const std::string text = format_listing_text(
      "/locks/a", listing({contender("_c_x-lock-0000000003", 42, true, long_owner),
                           contender("_c_y-lock-0000000004", 4294967302, false, "caf\xc3\xa9:1:short")}));
  std::vector<std::string> lines;
  for (std::size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    lines.push_back(text.substr(at, end - at));
  }
  ASSERT_EQ(lines.size(), 4u) << text;
  const auto column_of = [](const std::string& line, std::string_view value) {
    const auto at = line.find(value);
    // In characters, not bytes: the owner "café" takes four columns.
    return at == std::string::npos ? std::string::npos
                                   : static_cast<std::size_t>(std::count_if(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(at),
                                                                            [](char c) { return (c & 0xC0) != 0x80; }));
  };
  const std::size_t node = column_of(lines[1], "NODE");
  const std::size_t owner = column_of(lines[1], "OWNER");
  EXPECT_EQ(column_of(lines[2], "_c_x-lock-"), node) << text;
  EXPECT_EQ(column_of(lines[3], "_c_y-lock-"), node) << text;
  EXPECT_EQ(column_of(lines[2], long_owner), owner) << text;
  EXPECT_EQ(column_of(lines[3], "caf"), owner) << text;
  // Tokens align right, under the end of TOKEN.
  EXPECT_EQ(column_of(lines[2], " 42 ") + 3, column_of(lines[1], "TOKEN ") + 5) << text;
  EXPECT_EQ(column_of(lines[3], "4294967302 ") + 10, column_of(lines[1], "TOKEN ") + 5) << text;
}

TEST(ZklockReport, OtherChildrenAreShownAsNotContenders) {
  EXPECT_EQ(format_listing_text("/q", listing({}, {"config", "report-lock-0000000000"})),
            "/q: free (no holder, no waiters)\nnot a contender: config\nnot a contender: report-lock-0000000000\n");
  const std::string text = format_listing_text("/q", listing({contender("_c_x-lock-0000000003", 42, true, "o")}, {"x"}));
  EXPECT_THAT(text, HasSubstr("/q: 1 holder, 0 waiters"));
  EXPECT_THAT(text, ::testing::EndsWith("\nnot a contender: x\n"));
  EXPECT_EQ(format_listing_json("/q", listing({}, {"config", "a\"b"})),
            R"({"path":"/q","exists":true,"contenders":[],"not_contenders":["config","a\"b"]})" "\n");
}

TEST(ZklockReport, ConflictMessagesNameTheHolders) {
  EXPECT_EQ(describe_holders({contender("_c_a-lock-0000000001", 7, true, "host-a\nforged"),
                              contender("_c_b-lock-0000000002", 8, false, "waiter")}),
            "session 0x1234abcd (owner \"host-a\\x0aforged\", since 2023-11-14T22:13:20.123Z)");
  EXPECT_EQ(describe_holders({contender("_c_a-lock-0000000001", 7, true, ""), contender("_c_b-lock-0000000002", 8, true, "")}),
            "session 0x1234abcd (since 2023-11-14T22:13:20.123Z), session 0x1234abcd (since 2023-11-14T22:13:20.123Z)");
  EXPECT_EQ(describe_holders({contender("_c_b-lock-0000000002", 8, false, "waiter")}), "someone who has let go since");
}

TEST(ZklockReport, MissingPathIsNotFree) {
  zkr::PathListing missing;  // exists = false
  EXPECT_EQ(format_listing_text("/q", missing), "/q: does not exist\n");
  EXPECT_THAT(format_listing_text("/q", missing, "/app"), HasSubstr("/q: does not exist (under the chroot /app"));
  EXPECT_EQ(format_listing_json("/q", missing), R"({"path":"/q","exists":false,"contenders":[],"not_contenders":[]})" "\n");
}

TEST(ZklockReport, ASemaphoresHoldersHoldLeases) {
  const auto slots = listing({contender("_c_x-lock-0000000003", 42, true, "a"), contender("_c_y-lock-0000000004", 43, false, "b")});
  EXPECT_THAT(format_listing_text("/s", slots, "", 2), ::testing::ContainsRegex("holder +lease "));
  EXPECT_THAT(format_listing_text("/s", slots, "", 2), ::testing::ContainsRegex("waiter +lease "));
  EXPECT_THAT(format_listing_json("/s", slots, 2), HasSubstr(R"("role":"lease")"));
  EXPECT_THAT(format_listing_json("/s", slots), HasSubstr(R"("role":"exclusive")"));
}

TEST(ZklockReport, Json) {
  EXPECT_EQ(format_listing_json("/a", listing({contender("_c_x-lock-0000000003", 42, true, "o")})),
            R"({"path":"/a","exists":true,"contenders":[{"node":"_c_x-lock-0000000003","sequence":3,"token":42,)"
            R"("session_id":305441741,"session":"0x1234abcd","owner":"o","since":"2023-11-14T22:13:20.123Z","holds":true,)"
            R"("role":"exclusive","scheme":"zkrecipes"}],"not_contenders":[]})"
            "\n");
  EXPECT_EQ(format_listing_json("/a", listing({})), "{\"path\":\"/a\",\"exists\":true,\"contenders\":[],\"not_contenders\":[]}\n");
  // --watch: the time of the observation comes first.
  const auto observed = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'456));
  EXPECT_EQ(format_listing_json("/a", listing({}), std::nullopt, {}, observed),
            "{\"observed\":\"2023-11-14T22:13:20.456Z\",\"path\":\"/a\",\"exists\":true,\"contenders\":[],"
            "\"not_contenders\":[]}\n");
}

TEST(ZklockReport, JsonVocabulary) {
  EXPECT_EQ(json_session_fields(0x1234abcd), R"("session_id":305441741,"session":"0x1234abcd")");
  // Server ids of 128 and more set the top bit: still a positive number.
  EXPECT_EQ(json_session_fields(static_cast<std::int64_t>(0x8100000000000001ULL)),
            R"("session_id":9295429630892703745,"session":"0x8100000000000001")");
  EXPECT_EQ(parse_session_id_text("0x8100000000000001"), static_cast<std::int64_t>(0x8100000000000001ULL));
  EXPECT_EQ(parse_session_id_text("0x"), std::nullopt);
  EXPECT_EQ(parse_session_id_text("12"), std::nullopt);
  EXPECT_EQ(format_utc_micros(std::chrono::system_clock::time_point(std::chrono::microseconds(1'700'000'000'123'456))),
            "2023-11-14T22:13:20.123456Z");
}

// recognise_recipe(): what another recipe's path is, by what is there; nothing guessed beyond it.
ListedNode listed_child(std::string name, std::int64_t owner, std::string data = {}) {
  ListedNode node{std::move(name), std::move(data), {}};
  node.stat.ephemeral_owner = owner;
  return node;
}

TEST(ZklockReport, RecipesAreRecognisedByWhatIsThere) {
  const ListedNode path_node{};
  zkr::PathListing existing;
  existing.exists = true;
  // Double barrier: UUID-named ephemeral participants (either form) and "ready".
  const auto barrier = recognise_recipe(
      path_node, {listed_child("0123456789abcdef0123456789abcdef", 7, "a"), listed_child("01234567-89ab-cdef-0123-456789abcdef", 8, "b"),
                  listed_child("ready", 0)});
  ASSERT_TRUE(barrier);
  EXPECT_EQ(barrier->kind, RecipeReading::Kind::double_barrier);
  EXPECT_TRUE(barrier->ready);
  EXPECT_EQ(barrier->members.size(), 2u);
  const auto only_ready = recognise_recipe(path_node, {listed_child("ready", 0)});
  ASSERT_TRUE(only_ready);
  EXPECT_EQ(only_ready->kind, RecipeReading::Kind::double_barrier);
  EXPECT_TRUE(only_ready->members.empty());
  // A persistent child among ephemeral ones: nothing is recognised (listed as not contenders).
  EXPECT_FALSE(recognise_recipe(path_node, {listed_child("m", 7), listed_child("x", 0)}));
  // Groups: ids from the name (curator), the data (kazoo Party), after the GUID (ShallowParty).
  const auto party = recognise_recipe(path_node, {listed_child("0123456789abcdef0123456789abcdef__party__", 7, "id-1")});
  ASSERT_TRUE(party);
  EXPECT_EQ(party->group_layout, zkr::GroupLayout::kazoo_party);
  EXPECT_EQ(party->members.at(0).id, "id-1");
  const auto shallow = recognise_recipe(path_node, {listed_child("0123456789abcdef0123456789abcdef-id-2", 7, "id-2")});
  ASSERT_TRUE(shallow);
  EXPECT_EQ(shallow->group_layout, zkr::GroupLayout::kazoo_shallow_party);
  EXPECT_EQ(shallow->members.at(0).id, "id-2");
  // A member's data cannot forge a line or send control sequences to the terminal.
  const auto group = recognise_recipe(path_node, {listed_child("b", 9, "x\n\x1b[31m"), listed_child("a", 8, "y")});
  ASSERT_TRUE(group);
  EXPECT_EQ(group->group_layout, zkr::GroupLayout::curator);
  EXPECT_EQ(group->members.at(0).id, "a");  // sorted by id
  const std::string text = format_listing_text("/g", existing, {}, std::nullopt, {}, group);
  EXPECT_THAT(text, HasSubstr("/g: a group (curator layout), 2 members\n"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  // A childless node: empty, a counter (each layout that reads it), or data named as no counter's.
  EXPECT_EQ(recognise_recipe(listed_child("", 0), {})->kind, RecipeReading::Kind::empty);
  const auto eight = recognise_recipe(listed_child("", 0, std::string("\0\0\0\0\0\0\0\x05", 8)), {});
  ASSERT_EQ(eight->counter.size(), 1u);
  EXPECT_EQ(eight->counter[0].layout, zkr::CounterLayout::curator_atomic_long);
  EXPECT_EQ(eight->counter[0].value, 5);
  // Four ASCII digits are kazoo's text: the Curator layouts refuse data that reads as a number.
  const auto digits = recognise_recipe(listed_child("", 0, "1234"), {});
  ASSERT_EQ(digits->counter.size(), 1u);
  EXPECT_EQ(digits->counter[0].layout, zkr::CounterLayout::kazoo);
  EXPECT_EQ(digits->counter[0].value, 1234);
  const auto other = recognise_recipe(listed_child("", 0, "\x1b]0;x"), {});
  EXPECT_EQ(other->kind, RecipeReading::Kind::unrecognised);
  EXPECT_EQ(format_listing_text("/c", existing, {}, std::nullopt, {}, other).find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace zklock
