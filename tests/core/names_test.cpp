// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

#include <cctype>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#include "zk_client.hpp"  // server_answered()

namespace {

TEST(Paths, AcceptsPlainAbsolutePaths) {
  EXPECT_FALSE(zkr::validate_path("/locks/job"));
  EXPECT_FALSE(zkr::validate_path("/a"));
  EXPECT_FALSE(zkr::validate_path("/zookeeperish/x"));
}

TEST(Paths, RefusesMalformedPathsWithAReason) {
  for (std::string_view bad : {"", "locks", "/locks/", "//locks", "/a//b", "/a/./b", "/a/../b", "/", "/zookeeper",
                               "/zookeeper/quota"}) {
    EXPECT_EQ(zkr::validate_path(bad), zkr::errc::invalid_path) << bad;
    EXPECT_FALSE(zkr::path_problem(bad).empty()) << bad;
  }
  EXPECT_EQ(zkr::validate_path(std::string_view("/a\0b", 4)), zkr::errc::invalid_path);
  EXPECT_EQ(zkr::validate_path("/a\nb"), zkr::errc::invalid_path);
  EXPECT_NE(zkr::path_problem("/a/").find("ends with"), std::string::npos);
}

// What the server's path check refuses (every character it refuses, and bytes that are not UTF-8,
// which it decodes as U+FFFD and then refuses) is refused here too, naming the character and where.
TEST(Paths, RefusesWhatTheServerRefusesNamingTheCharacterAndItsPosition) {
  const std::pair<std::string_view, std::string_view> cases[] = {
      {"/a\xc2\x85", "U+0085"},          // C1 control (NEL)
      {"/a\xc2\x80", "U+0080"},          // first C1 control
      {"/a\xc2\x9f", "U+009F"},          // last C1 control
      {"/a\x7f", "U+007F"},              // DEL
      {"/a\x1b", "U+001B"},              // ESC
      {"/a\xef\xbf\xbe", "U+FFFE"},      // noncharacter
      {"/a\xef\xbf\xbf", "U+FFFF"},      // noncharacter
      {"/a\xef\xbf\xbd", "U+FFFD"},      // the replacement character, in U+FFF0-U+FFFF
      {"/a\xef\xbf\xb0", "U+FFF0"},
      {"/a\xee\x80\x80", "U+E000"},      // private use, in U+D800-U+F8FF
      {"/a\xef\xa3\xbf", "U+F8FF"},
      {"/a\xf0\x9f\x98\x80", "U+1F600"},  // outside the BMP: a UTF-16 surrogate pair on the server
      {"/a\xed\xa0\x80", "U+D800"},      // a surrogate written in UTF-8: not UTF-8
      {"/a\xff", "0xFF"},                // not UTF-8 at all
      {"/a\xc0\xaf", "0xC0"},            // overlong '/'
      {"/a\xc3", "0xC3"},                // truncated
      {"/a\x80", "0x80"},                // stray continuation byte
      {"/a\xf4\x90\x80\x80", "0xF4"},    // past U+10FFFF
  };
  for (const auto& [path, character] : cases) {
    EXPECT_EQ(zkr::validate_path(path), zkr::errc::invalid_path) << zkr::path_problem(path);
    const std::string problem = zkr::path_problem(path);
    EXPECT_NE(problem.find(character), std::string::npos) << problem;
    EXPECT_NE(problem.find("byte 3"), std::string::npos) << problem;
  }
  EXPECT_NE(zkr::path_problem("/locks/job\xc2\x9b").find("byte 11"), std::string::npos)
      << zkr::path_problem("/locks/job\xc2\x9b");
  // What the server accepts.
  for (std::string_view good : {"/caf\xc3\xa9", "/\xe4\xb8\xad\xe6\x96\x87", "/a\xc2\xa0", "/a\xef\xbf\xaf",
                                "/a\xef\xa4\x80", "/a\xed\x9f\xbf", "/a b", "/a~b"})
    EXPECT_FALSE(zkr::validate_path(good)) << good << ": " << zkr::path_problem(good);
}

// A recipe creates every component of its path: one named like a contender node would be read by
// a lock on its parent as a holder (a phantom holder that nobody ever releases).
TEST(Paths, RefusesComponentsNamedLikeContenderNodes) {
  for (std::string_view bad : {"/q/lock-0000000000", "/q/_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-lock-0000000001/x",
                               "/0123456789abcdef0123456789abcdef__lock__0000000001"}) {
    EXPECT_EQ(zkr::validate_path(bad), zkr::errc::invalid_path) << bad;
    EXPECT_NE(zkr::path_problem(bad).find("contender"), std::string::npos) << zkr::path_problem(bad);
  }
  EXPECT_FALSE(zkr::validate_path("/q/report-lock-0000000000"));
}

TEST(ConnectStrings, ParsesHostsPortsAndChroot) {
  std::error_code ec;
  auto list = zkr::parse_servers("127.0.0.1:2181,zk2:2182,zk3/app/locks", ec);
  ASSERT_FALSE(ec);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->hosts, (std::vector<std::string>{"127.0.0.1:2181", "zk2:2182", "zk3:2181"}));
  EXPECT_EQ(list->chroot, "/app/locks");
  list = zkr::parse_servers("[::1]:2181", ec);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->hosts.front(), "[::1]:2181");
  list = zkr::parse_servers("[::1],zk1:02182", ec);
  ASSERT_TRUE(list);
  EXPECT_EQ(list->hosts, (std::vector<std::string>{"[::1]:2181", "zk1:2182"}));
  // A chroot of "/" alone is the root, as the Java client and kazoo read it.
  list = zkr::parse_servers("zk1:2181/", ec);
  ASSERT_TRUE(list) << ec.message();
  EXPECT_EQ(list->hosts, (std::vector<std::string>{"zk1:2181"}));
  EXPECT_EQ(list->chroot, "");
}

// What the C client is handed: it adds no default port (a host without one fails the whole
// handle), splits at the last ':' (so no brackets) and reads the port with base 0 (so no leading 0).
TEST(ConnectStrings, TheClientGetsEveryHostWithAPlainPort) {
  using zkr::detail::client_connect_string;
  EXPECT_EQ(client_connect_string("127.0.0.1"), "127.0.0.1:2181");
  EXPECT_EQ(client_connect_string("zk1,zk2,zk3/app"), "zk1:2181,zk2:2181,zk3:2181/app");
  EXPECT_EQ(client_connect_string("localhost,127.0.0.1:2182"), "localhost:2181,127.0.0.1:2182");
  EXPECT_EQ(client_connect_string("[::1]:2181,[fe80::1]"), "::1:2181,fe80::1:2181");
  EXPECT_EQ(client_connect_string("zk1:02181/"), "zk1:2181");
}

TEST(ConnectStrings, RefusesMalformedOnesWithAReason) {
  for (std::string_view bad : {"", ",", "host:", "host:0", "host:70000", "host:12ab", "ho st:1", "h:1,", "h:1//",
                               "h:1/a/", "[::1", "[zz]:1"}) {
    std::error_code ec;
    EXPECT_FALSE(zkr::parse_servers(bad, ec)) << bad;
    EXPECT_EQ(ec, zkr::errc::invalid_connect_string) << bad;
    EXPECT_FALSE(zkr::describe_servers_problem(bad).empty()) << bad;
  }
}

constexpr std::string_view kUuid = "0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f";
constexpr std::string_view kHex32 = "0123456789abcdef0123456789abcdef";

std::string ours(std::string_view marker, std::string_view suffix) {
  return "_c_" + std::string(kUuid) + "-" + std::string(marker) + std::string(suffix);
}

TEST(ContenderNames, RecognisesOursCuratorsAndKazoos) {
  auto lock = zkr::parse_contender_name(ours("lock-", "0000000042"));
  ASSERT_TRUE(lock);
  EXPECT_EQ(lock->sequence, 42);
  EXPECT_EQ(lock->role, zkr::ContenderRole::exclusive);
  EXPECT_EQ(lock->scheme, zkr::ContenderScheme::zkrecipes_or_curator);
  EXPECT_EQ(lock->guid, "_c_" + std::string(kUuid));

  auto kazoo = zkr::parse_contender_name(std::string(kHex32) + "__lock__0000000007");
  ASSERT_TRUE(kazoo);
  EXPECT_EQ(kazoo->scheme, zkr::ContenderScheme::kazoo);
  EXPECT_EQ(kazoo->role, zkr::ContenderRole::exclusive);
  EXPECT_EQ(kazoo->sequence, 7);
  EXPECT_EQ(kazoo->guid, kHex32);
  auto kazoo_read = zkr::parse_contender_name(std::string(kHex32) + "__rlock__0000000008");
  ASSERT_TRUE(kazoo_read);
  EXPECT_EQ(kazoo_read->role, zkr::ContenderRole::read);

  auto read = zkr::parse_contender_name(ours("__READ__", "0000000003"));
  auto write = zkr::parse_contender_name(ours("__WRIT__", "0000000004"));
  auto latch = zkr::parse_contender_name(ours("latch-", "0000000005"));
  ASSERT_TRUE(read && write && latch);
  EXPECT_EQ(read->role, zkr::ContenderRole::read);
  EXPECT_EQ(write->role, zkr::ContenderRole::write);
  EXPECT_EQ(latch->role, zkr::ContenderRole::latch);
  EXPECT_EQ(latch->sequence, 5);

  // The unprotected forms (no "_c_<uuid>-"), accepted as before.
  for (std::string_view bare : {"lock-0000000001", "__READ__0000000001", "__WRIT__0000000001"}) {
    auto name = zkr::parse_contender_name(bare);
    ASSERT_TRUE(name) << bare;
    EXPECT_EQ(name->guid, "") << bare;
    EXPECT_EQ(name->sequence, 1) << bare;
  }
}

TEST(ContenderNames, IgnoresOtherChildren) {
  for (std::string_view other : {"", "lock-", "config", "lock-12345", "x-lock-00000000a1", "leases",
                                 "_c_x-lock-000000001"})
    EXPECT_FALSE(zkr::parse_contender_name(other)) << other;
}

// A child is a contender only in exactly one of the formats the peers write: a name that merely
// ends like one (a container left by "zklock /q/report-lock-0000000000") is not a holder of /q.
TEST(ContenderNames, RefusesNamesThatOnlyEndLikeAContender) {
  const std::string uuid(kUuid), hex(kHex32);
  std::string upper_uuid = uuid;
  for (char& c : upper_uuid) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string misplaced_dash = uuid;
  std::swap(misplaced_dash[8], misplaced_dash[9]);
  const std::vector<std::string> others = {
      "block-0000000000",
      "report-lock-0000000000",
      "x-lock-0000000000",
      "_c_x-lock-0000000003",
      "_c_x-__READ__0000000003",
      "_c_x-latch-0000000005",
      "latch-0000000005",  // Curator's latch is always protected
      "_c_" + upper_uuid + "-lock-0000000001",
      "_c_" + misplaced_dash + "-lock-0000000001",
      "_c_" + uuid + "lock-0000000001",
      "_c_" + uuid + "-lock-lock-0000000001",
      "_c_" + uuid + "-lock-000000001",
      "_c_" + uuid + "-lock-00000000001",
      "_c_" + uuid + "-lock-000000000a",
      "_c_" + uuid + "-__rlock__0000000001",
      "c_" + uuid + "-lock-0000000001",
      "x_c_" + uuid + "-lock-0000000001",
      hex.substr(1) + "__lock__0000000001",
      hex + "0__lock__0000000001",
      "0123456789ABCDEF0123456789ABCDEF__lock__0000000001",
      "0123456789abcdef0123456789abcdeg__lock__0000000001",
      hex + "__READ__0000000001",
      hex + "-lock-0000000001",
      "__lock__0000000001",
      "report__lock__0000000001",
  };
  for (const auto& other : others) EXPECT_FALSE(zkr::parse_contender_name(other)) << other;
}

// The server appends its signed 32-bit counter formatted "%010d": past 2^31-1 it is negative and
// the suffix is eleven characters ("-2147483648").
TEST(ContenderNames, ParsesTheSignedCounterWithItsSign) {
  const std::pair<std::string_view, std::int64_t> cases[] = {
      {"0000000000", 0},          {"2147483647", 2147483647}, {"-2147483648", -2147483648LL},
      {"-2147483647", -2147483647}, {"-1000000000", -1000000000}, {"-000000005", -5},
  };
  for (const auto& [suffix, value] : cases) {
    for (const std::string& child : {ours("lock-", suffix), std::string(kHex32) + "__lock__" + std::string(suffix)}) {
      auto name = zkr::parse_contender_name(child);
      ASSERT_TRUE(name) << child;
      EXPECT_EQ(name->sequence, value) << child;
      EXPECT_EQ(name->role, zkr::ContenderRole::exclusive) << child;
    }
  }
  // Only what "%010d" of a 32-bit int produces.
  for (std::string_view suffix : {"2147483648", "-2147483649", "9999999999", "-0000000000", "-000000000",
                                  "+000000001", "-00000000005", "00000000001", "-99999999999", " 000000001"})
    EXPECT_FALSE(zkr::parse_contender_name(ours("lock-", suffix))) << suffix;
}

std::vector<std::int64_t> sorted_sequences(std::vector<std::int64_t> sequences) {
  std::vector<zkr::ContenderName> names;
  for (auto sequence : sequences) {
    auto name = zkr::parse_contender_name(ours("lock-", fmt::format("{:010d}", sequence)));
    EXPECT_TRUE(name) << sequence;
    if (name) names.push_back(*name);
  }
  zkr::sort_by_sequence(names);
  std::vector<std::int64_t> out;
  for (const auto& name : names) out.push_back(name.sequence);
  return out;
}

TEST(ContenderNames, SortsNumericallyNotAsText) {
  EXPECT_EQ(sorted_sequences({10, 2, 1, 1000000000, 999999999}),
            (std::vector<std::int64_t>{1, 2, 10, 999999999, 1000000000}));
  std::vector<zkr::ContenderName> names;
  for (const std::string& child : {ours("lock-", "0000000010"), std::string(kHex32) + "__lock__0000000002",
                                   ours("__READ__", "0000000001")})
    names.push_back(*zkr::parse_contender_name(child));
  zkr::sort_by_sequence(names);
  EXPECT_EQ(names[0].sequence, 1);
  EXPECT_EQ(names[1].sequence, 2);
  EXPECT_EQ(names[2].sequence, 10);
}

// Once the counter has wrapped, the nodes created after the wrap (negative) queue behind the ones
// created before it (positive): creation order, so the holder stays first.
TEST(ContenderNames, KeepsCreationOrderAcrossTheWrap) {
  EXPECT_EQ(sorted_sequences({-2147483648LL, 2147483647, -2147483647, 2147483646}),
            (std::vector<std::int64_t>{2147483646, 2147483647, -2147483648LL, -2147483647}));
  EXPECT_EQ(sorted_sequences({-2147483648LL, 2147483647}), (std::vector<std::int64_t>{2147483647, -2147483648LL}));
  // The second wrap, through -1 to 0.
  EXPECT_EQ(sorted_sequences({1, -1, 0, -2}), (std::vector<std::int64_t>{-2, -1, 0, 1}));
  // All after the wrap: plain numeric order.
  EXPECT_EQ(sorted_sequences({-2147483600LL, -2147483648LL, -2147483640LL}),
            (std::vector<std::int64_t>{-2147483648LL, -2147483640LL, -2147483600LL}));
}

TEST(Errors, MessagesNameTheOperationAndPath) {
  zkr::Error error(make_error_code(zkr::zk_errc::no_auth), "acquire lock", "/locks/x");
  EXPECT_EQ(std::string(error.what()), "acquire lock /locks/x: not authorised (ACL refused)");
  EXPECT_EQ(error.path(), "/locks/x");
  EXPECT_EQ(error.code(), zkr::zk_errc::no_auth);
  zkr::Error detailed(make_error_code(zkr::errc::invalid_path), "lock path", "x", "is not absolute");
  EXPECT_EQ(std::string(detailed.what()), "lock path x: invalid path (is not absolute)");
}

// Each code means exactly one condition (or none); callers compare with conditions, not lists.
TEST(Errors, EveryCodeMeansOneCondition) {
  using zkr::condition;
  const std::vector<std::pair<std::error_code, std::optional<condition>>> cases = {
      {make_error_code(zkr::errc::would_block), condition::gave_up},
      {make_error_code(zkr::errc::timed_out), condition::gave_up},
      {make_error_code(zkr::errc::cancelled), condition::gave_up},
      {make_error_code(zkr::errc::connect_timeout), condition::connection_trouble},
      {make_error_code(zkr::errc::unknown_host), condition::connection_trouble},
      {make_error_code(zkr::zk_errc::connection_loss), condition::connection_trouble},
      {make_error_code(zkr::zk_errc::operation_timeout), condition::connection_trouble},
      {make_error_code(zkr::errc::session_lost), condition::session_ended},
      {make_error_code(zkr::errc::session_closed), condition::session_ended},
      {make_error_code(zkr::errc::lock_lost), condition::session_ended},
      {make_error_code(zkr::zk_errc::session_expired), condition::session_ended},
      {make_error_code(zkr::zk_errc::invalid_state), condition::session_ended},
      {make_error_code(zkr::errc::invalid_path), condition::bad_input},
      {make_error_code(zkr::errc::limit_mismatch), condition::bad_input},
      {make_error_code(zkr::errc::incompatible_peer), condition::bad_input},
      {make_error_code(zkr::errc::corrupt_state), condition::bad_input},
      {make_error_code(zkr::zk_errc::bad_arguments), condition::bad_input},
      {make_error_code(zkr::errc::auth_failed), condition::no_permission},
      {make_error_code(zkr::zk_errc::no_auth), condition::no_permission},
      {make_error_code(zkr::zk_errc::invalid_acl), condition::no_permission},
      {make_error_code(zkr::zk_errc::no_node), std::nullopt},
      {make_error_code(zkr::errc::internal_error), std::nullopt},
      {std::make_error_code(std::errc::not_enough_memory), std::nullopt},
  };
  for (const auto& [code, expected] : cases) {
    for (condition c : {condition::gave_up, condition::connection_trouble, condition::session_ended,
                        condition::bad_input, condition::no_permission}) {
      EXPECT_EQ(code == c, expected == c) << code.message() << " vs " << make_error_condition(c).message();
    }
  }
}

// ZooKeeper's success code is no error at all, however it is made.
TEST(Errors, ZooKeeperSuccessIsTheEmptyErrorCode) {
  EXPECT_FALSE(make_error_code(zkr::zk_errc::ok));
  EXPECT_EQ(make_error_code(zkr::zk_errc::ok), std::error_code());
  EXPECT_EQ(zkr::zookeeper_error(0), std::error_code());
  EXPECT_EQ(zkr::zookeeper_error(-101), zkr::zk_errc::no_node);
}

// The session monitor's proof of life (and the fake's): a reply proves that the server answered
// only if it is a success or the server's refusal of the request itself.
TEST(Errors, OnlyTheServersOwnAnswersProveItAnswered) {
  using zkr::zk_errc;
  for (zk_errc answered : {zk_errc::ok, zk_errc::no_node, zk_errc::no_auth, zk_errc::bad_version,
                           zk_errc::node_exists, zk_errc::not_empty, zk_errc::invalid_acl})
    EXPECT_TRUE(zkr::detail::server_answered(answered)) << make_error_code(answered).message();
  for (zk_errc not_answered : {zk_errc::connection_loss, zk_errc::operation_timeout, zk_errc::invalid_state,
                               zk_errc::marshalling_error, zk_errc::system_error, zk_errc::bad_arguments,
                               zk_errc::session_expired, zk_errc::closing, zk_errc::auth_failed,
                               zk_errc::session_moved})
    EXPECT_FALSE(zkr::detail::server_answered(not_answered)) << make_error_code(not_answered).message();
}

}  // namespace
