#include <gtest/gtest.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

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
}

TEST(ConnectStrings, RefusesMalformedOnesWithAReason) {
  for (std::string_view bad : {"", ",", "host:", "host:0", "host:70000", "host:12ab", "ho st:1", "h:1,", "h:1/",
                               "h:1/a/", "[::1", "[zz]:1"}) {
    std::error_code ec;
    EXPECT_FALSE(zkr::parse_servers(bad, ec)) << bad;
    EXPECT_EQ(ec, zkr::errc::invalid_connect_string) << bad;
    EXPECT_FALSE(zkr::describe_servers_problem(bad).empty()) << bad;
  }
}

TEST(ContenderNames, RecognisesOursCuratorsAndKazoos) {
  auto ours = zkr::parse_contender_name("_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f-lock-0000000042");
  ASSERT_TRUE(ours);
  EXPECT_EQ(ours->sequence, 42);
  EXPECT_EQ(ours->role, zkr::ContenderRole::exclusive);
  EXPECT_EQ(ours->guid, "_c_0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f");

  auto kazoo = zkr::parse_contender_name("0123456789abcdef0123456789abcdef__lock__0000000007");
  ASSERT_TRUE(kazoo);
  EXPECT_EQ(kazoo->scheme, zkr::ContenderScheme::kazoo);
  EXPECT_EQ(kazoo->sequence, 7);
  auto kazoo_read = zkr::parse_contender_name("0123456789abcdef0123456789abcdef__rlock__0000000008");
  ASSERT_TRUE(kazoo_read);
  EXPECT_EQ(kazoo_read->role, zkr::ContenderRole::read);

  auto read = zkr::parse_contender_name("_c_x-__READ__0000000003");
  auto write = zkr::parse_contender_name("_c_x-__WRIT__0000000004");
  ASSERT_TRUE(read && write);
  EXPECT_EQ(read->role, zkr::ContenderRole::read);
  EXPECT_EQ(write->role, zkr::ContenderRole::write);
  auto latch = zkr::parse_contender_name("_c_x-latch-0000000005");
  ASSERT_TRUE(latch);
  EXPECT_EQ(latch->role, zkr::ContenderRole::latch);
  EXPECT_TRUE(zkr::parse_contender_name("lock-0000000001"));
}

TEST(ContenderNames, IgnoresOtherChildren) {
  for (std::string_view other : {"", "lock-", "config", "lock-12345", "x-lock-00000000a1", "leases",
                                 "_c_x-lock-000000001"})
    EXPECT_FALSE(zkr::parse_contender_name(other)) << other;
}

TEST(ContenderNames, SortsNumericallyNotAsText) {
  std::vector<zkr::ContenderName> names;
  for (auto child : {"b-lock-0000000010", "a__lock__0000000002", "c-lock-0000000001", "d-lock--000000005"})
    names.push_back(*zkr::parse_contender_name(child));
  zkr::sort_by_sequence(names);
  EXPECT_EQ(names[0].sequence, -5);
  EXPECT_EQ(names[1].sequence, 1);
  EXPECT_EQ(names[2].sequence, 2);
  EXPECT_EQ(names[3].sequence, 10);
}

TEST(Errors, MessagesNameTheOperationAndPath) {
  zkr::Error error(make_error_code(zkr::zk_errc::no_auth), "acquire lock", "/locks/x");
  EXPECT_EQ(std::string(error.what()), "acquire lock /locks/x: not authorised (ACL refused)");
  EXPECT_EQ(error.path(), "/locks/x");
  EXPECT_EQ(error.code(), zkr::zk_errc::no_auth);
  zkr::Error detailed(make_error_code(zkr::errc::invalid_path), "lock path", "x", "is not absolute");
  EXPECT_EQ(std::string(detailed.what()), "lock path x: invalid path (is not absolute)");
}

}  // namespace
