// SPDX-License-Identifier: Apache-2.0
// Security: lock nodes under digest ACLs, credentials kept out of logs, errors and jobs, and a
// held node deleted by an operator reported as lost. Real servers, and the zklock binary.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>

#include "internals.hpp"
#include "test_support.hpp"

namespace zkr::test {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string random_password() {
  std::random_device device;
  return fmt::format("pw-{:08x}{:08x}", device(), device());
}

SessionOptions with_credentials(SessionOptions options, const std::string& user, const std::string& password) {
  options.credentials = DigestCredentials{user, password};
  return options;
}

class SecurityTest : public ::testing::Test {
 protected:
  std::string servers = testenv::shared_server();
  std::string path = testenv::unique_path();
  std::string password = random_password();
  LockOptions protected_lock{.owner_data = "security-test", .acl = NodeAcl::creator_all};

  // The library creates missing ancestors with the lock's own ACL (see the disabled test below),
  // which would lock every other test out of the shared "/zkr-test": make sure it exists, open.
  void SetUp() override {
    RawClient raw(servers);
    const int rc = raw.create("/zkr-test");
    ASSERT_TRUE(rc == ZOK || rc == ZNODEEXISTS) << zerror(rc);
  }

  // A raw client with alice's credentials: the only one allowed to look under `path`.
  std::unique_ptr<RawClient> alice_raw() {
    auto raw = std::make_unique<RawClient>(servers);
    EXPECT_EQ(raw->add_auth("alice:" + password), ZOK);
    return raw;
  }
};

TEST_F(SecurityTest, WithoutCredentialsTheHoldersNodeCannotBeDeletedOrOverwritten) {
  Session holder(with_credentials(session_options(servers), "alice", password));
  Lock lock(holder, path, protected_lock);
  HeldLock held = lock.acquire();
  const std::string node = held.node_path();

  RawClient anonymous(servers);
  RawClient mallory(servers);
  ASSERT_EQ(mallory.add_auth("mallory:" + password), ZOK);  // right password, wrong user
  RawClient wrong_password(servers);
  ASSERT_EQ(wrong_password.add_auth("alice:not-" + password), ZOK);
  for (RawClient* intruder : {&anonymous, &mallory, &wrong_password}) {
    EXPECT_EQ(intruder->remove(node), ZNOAUTH);
    EXPECT_EQ(zoo_set(intruder->handle(), node.c_str(), "x", 1, -1), ZNOAUTH);
    EXPECT_EQ(zoo_set_acl(intruder->handle(), node.c_str(), -1, &ZOO_OPEN_ACL_UNSAFE), ZNOAUTH);
    // Nor can it slip a fake contender into the queue.
    EXPECT_EQ(intruder->create(path + "/_c_00000000-0000-0000-0000-000000000000-lock-", {}, ZOO_SEQUENCE), ZNOAUTH);
  }
  std::this_thread::sleep_for(300ms);  // time for a wrongly delivered loss to arrive
  EXPECT_FALSE(held.lost());
  auto alice = alice_raw();
  EXPECT_EQ(alice->stat(node).czxid, held.token().value());
  EXPECT_EQ(alice->children(path).size(), 1u);
  held.release();
  EXPECT_TRUE(eventually([&] { return alice->children(path).empty(); }));
}

TEST_F(SecurityTest, ContenderWithoutTheCredentialsIsRefusedAndLeavesNoNode) {
  Session holder(with_credentials(session_options(servers), "alice", password));
  Lock lock(holder, path, protected_lock);
  HeldLock held = lock.acquire();

  Session anonymous(session_options(servers));
  Session mallory(with_credentials(session_options(servers), "mallory", password));
  struct Intruder {
    Session* session;
    LockOptions options;
    std::vector<std::error_code> expected;
  };
  // Without any credentials, asking for a creator-only node is refused before anything is sent;
  // every other case is NOAUTH on the parent.
  try {
    Lock refused(anonymous, path, protected_lock);
    ADD_FAILURE() << "a creator-only lock without credentials was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    EXPECT_THAT(e.what(), HasSubstr("credentials"));
  }
  const std::vector<Intruder> intruders = {
      {&anonymous, {}, {zk_errc::no_auth}},
      {&mallory, protected_lock, {zk_errc::no_auth}},
      {&mallory, {}, {zk_errc::no_auth}},
  };
  for (const auto& intruder : intruders) {
    Lock their_lock(*intruder.session, path, intruder.options);
    try {
      their_lock.acquire();
      ADD_FAILURE() << "acquired a lock under someone else's ACL";
    } catch (const Error& e) {
      EXPECT_THAT(intruder.expected, ::testing::Contains(e.code())) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(path));
    }
    std::error_code ec;
    EXPECT_FALSE(their_lock.try_acquire_for(1s, {}, ec));
    EXPECT_THAT(intruder.expected, ::testing::Contains(ec)) << ec.message();
  }
  EXPECT_FALSE(held.lost());
  auto alice = alice_raw();
  auto children = alice->children(path);
  ASSERT_EQ(children.size(), 1u) << "a refused contender left a node";
  EXPECT_EQ(path + "/" + children[0], held.node_path());
}

TEST_F(SecurityTest, OperatorDeletingAProtectedHeldNodeIsReportedLostAndTheNextIsGranted) {
  Session holder(with_credentials(session_options(servers), "alice", password));
  Session waiter(with_credentials(session_options(servers), "alice", password));
  Lock holder_lock(holder, path, protected_lock), waiter_lock(waiter, path, protected_lock);
  HeldLock held = holder_lock.acquire();
  std::promise<LossReason> lost;
  held.on_lost([&](LossReason reason) { lost.set_value(reason); });
  std::promise<HeldLock> grant;
  waiter_lock.async_acquire(-1ns, [&](std::error_code ec, HeldLock lock) {
    if (!ec) grant.set_value(std::move(lock));
  });
  auto operator_client = alice_raw();
  ASSERT_TRUE(eventually([&] { return operator_client->children(path).size() == 2; }));

  ASSERT_EQ(operator_client->remove(held.node_path()), ZOK);
  auto reason = lost.get_future();
  ASSERT_EQ(reason.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_EQ(reason.get(), LossReason::node_deleted);
  EXPECT_TRUE(held.lost_token().stop_requested());
  auto granted = grant.get_future();
  ASSERT_EQ(granted.wait_for(testenv::scaled(10s)), std::future_status::ready);
  EXPECT_GT(granted.get().token(), held.token());
  EXPECT_EQ(holder.metrics().sessions_lost, 0u) << "the session itself is fine";
}

// Everything the library logs at debug level, and every error it reports, through connects,
// disconnects, a forced expiry, a replacement session, refusals and bad credential files.
TEST_F(SecurityTest, CredentialsNeverAppearInLogsOrErrors) {
  std::mutex mutex;
  std::vector<std::string> lines;
  set_log_sink(
      [&](LogLevel, std::string_view message) {
        std::lock_guard lock(mutex);
        lines.emplace_back(message);
      },
      LogLevel::debug);
  std::vector<std::string> errors;

  const auto dir = std::filesystem::temp_directory_path() / testenv::unique_path("creds").substr(1);
  std::filesystem::create_directories(dir);
  const auto credentials_file = dir / "credentials";
  std::ofstream(credentials_file) << "alice:" << password << "\n";
  const auto bad_file = dir / "bad";
  std::ofstream(bad_file) << "alice" << password << "\n";  // no colon
  try {
    DigestCredentials::from_file(bad_file);
    ADD_FAILURE() << "a malformed credentials file was accepted";
  } catch (const Error& e) {
    errors.emplace_back(e.what());
  }

  {
    testenv::Proxy proxy(servers);
    auto options = session_options(proxy.address(), testenv::scaled(4000ms));
    options.credentials = DigestCredentials::from_file(credentials_file);
    Session holder(options);
    Lock lock(holder, path, protected_lock);
    HeldLock held = lock.acquire();
    proxy.reset();  // a reconnect on the same session
    ASSERT_TRUE(eventually([&] { return holder.metrics().suspensions >= 1; }));
    ASSERT_TRUE(holder.wait_connected(testenv::scaled(10s)));

    Session intruder(with_credentials(session_options(servers), "mallory", password));
    Lock their_lock(intruder, path, protected_lock);
    try {
      their_lock.acquire();
      ADD_FAILURE() << "acquired under someone else's ACL";
    } catch (const Error& e) {
      errors.emplace_back(e.what());
    }

    // A forced expiry: the replacement session must authenticate again (the parent is alice's).
    auto id = detail::Internals::core(holder)->client_id();
    proxy.blackhole();
    testenv::expire_session(servers, id.session_id, id.password);
    proxy.reset();
    ASSERT_TRUE(eventually([&] { return held.lost(); }));
    ASSERT_TRUE(eventually([&] { return holder.state() == SessionState::connected; }));
    auto again = lock.try_acquire_for(testenv::scaled(10s));
    ASSERT_TRUE(again) << "the replacement session lost the credentials";
    again->release();
  }
  std::filesystem::remove_all(dir);
  set_log_sink(nullptr);

  ASSERT_FALSE(lines.empty()) << "nothing was logged: the check would prove nothing";
  ASSERT_EQ(errors.size(), 2u);
  for (const auto& line : lines) EXPECT_THAT(line, Not(HasSubstr(password))) << "log line";
  for (const auto& error : errors) EXPECT_THAT(error, Not(HasSubstr(password))) << "error";
}

// Missing ancestors of a lock path are created open: a creator-only lock at /a/b/lock must not
// make /a and /a/b creator-only and lock every other identity out of other locks under them.
TEST_F(SecurityTest, AProtectedLockDoesNotLockOthersOutOfASharedAncestor) {
  const std::string shared = path + "/shared";
  Session alice(with_credentials(session_options(servers), "alice", password));
  Lock alice_lock(alice, shared + "/alice", protected_lock);
  HeldLock held = alice_lock.acquire();
  Session anonymous(session_options(servers));
  Lock other_lock(anonymous, shared + "/other");
  std::error_code ec;
  auto other = other_lock.try_acquire_for(testenv::scaled(5s), {}, ec);
  EXPECT_TRUE(other) << ec.message();
}

#ifdef ZKLOCK_BINARY
// zklock takes credentials from a file only; neither its verbose output nor the job's environment
// nor its command line carries them.
TEST_F(SecurityTest, ZklockKeepsCredentialsOutOfItsOutputArgvAndTheJob) {
  const auto dir = std::filesystem::temp_directory_path() / testenv::unique_path("zklock-creds").substr(1);
  std::filesystem::create_directories(dir);
  const auto credentials_file = dir / "credentials";
  std::ofstream(credentials_file) << "alice:" << password << "\n";
  testenv::Process::Options options;
  options.merge_stderr = true;
  testenv::Process zklock({ZKLOCK_BINARY, "-v", "--zk", servers, "--auth-file", credentials_file.string(), path,
                           // The job's parent is zklock's keeper (a fork of zklock, named so);
                           // zklock is the keeper's parent.
                           "-c", "cat /proc/$PPID/comm; for pid in $PPID $(cut -d' ' -f4 /proc/$PPID/stat); do "
                           "tr '\\0' ' ' < /proc/$pid/cmdline; echo; done; env; echo job-done"},
                          options);
  const std::string output = zklock.read_all(testenv::scaled(30s));
  EXPECT_EQ(zklock.wait(testenv::scaled(10s)), 0) << output;
  EXPECT_THAT(output, HasSubstr("job-done"));
  EXPECT_THAT(output, HasSubstr("--auth-file"));  // the zklock command line was printed
  EXPECT_THAT(output, HasSubstr("zklock-keeper"));  // the keeper's name, and its command line
  EXPECT_THAT(output, HasSubstr("ZKLOCK_FENCING_TOKEN="));  // and the job's environment
  EXPECT_THAT(output, Not(HasSubstr(password)));
  std::filesystem::remove_all(dir);
}
#endif

}  // namespace
}  // namespace zkr::test
