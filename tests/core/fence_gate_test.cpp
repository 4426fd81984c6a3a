// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>

#include <testenv.hpp>

namespace {

TEST(FenceGate, AdmitsEqualOrHigherAndRefusesLower) {
  zkr::FenceGate gate;
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(10)));
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(10)));
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(12)));
  EXPECT_FALSE(gate.admit("k", zkr::FencingToken(11)));
  EXPECT_TRUE(gate.admit("other", zkr::FencingToken(1)));
  EXPECT_FALSE(gate.admit("k", zkr::FencingToken()));
  EXPECT_EQ(gate.highest("k"), zkr::FencingToken(12));
  EXPECT_FALSE(gate.highest("none"));
  EXPECT_EQ(gate.admitted(), 4u);
  EXPECT_EQ(gate.refused(), 2u);
}

TEST(FenceGate, KeepsTheMaximumUnderConcurrentWriters) {
  zkr::FenceGate gate;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      for (int i = 1; i <= 1000; ++i) gate.admit("k", zkr::FencingToken(i * 4 + t));
    });
  for (auto& w : writers) w.join();
  EXPECT_EQ(gate.highest("k"), zkr::FencingToken(4003));
  EXPECT_EQ(gate.admitted() + gate.refused(), 4000u);
}

// ---- DurableFenceGate ----

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class DurableFenceGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = zkr::testenv::make_temp_dir("zkr-gate");
    file_ = directory_ / "gate";
  }
  void TearDown() override { fs::remove_all(directory_); }

  static std::string read(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream contents;
    contents << in.rdbuf();
    return contents.str();
  }
  static void write(const fs::path& file, const std::string& contents) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << contents;
  }
  // The error opening the gate throws, or nullopt if it opens.
  std::optional<zkr::Error> open_error(const fs::path& file) {
    try {
      zkr::DurableFenceGate gate(file);
    } catch (const zkr::Error& e) {
      return e;
    }
    return std::nullopt;
  }

  fs::path directory_;
  fs::path file_;
};

TEST_F(DurableFenceGateTest, KeepsTheHighestTokensAcrossReopening) {
  {
    zkr::DurableFenceGate gate(file_);
    EXPECT_FALSE(gate.highest("ledger"));
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(10)));
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(12)));
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(12)));
    EXPECT_FALSE(gate.admit("ledger", zkr::FencingToken(11)));
    EXPECT_FALSE(gate.admit("ledger", zkr::FencingToken()));
    EXPECT_TRUE(gate.admit("odd key\nwith a newline", zkr::FencingToken(7)));
    EXPECT_EQ(gate.admitted(), 4u);
    EXPECT_EQ(gate.refused(), 2u);
  }
  zkr::DurableFenceGate reopened(file_);
  EXPECT_EQ(reopened.highest("ledger"), zkr::FencingToken(12));
  EXPECT_EQ(reopened.highest("odd key\nwith a newline"), zkr::FencingToken(7));
  EXPECT_FALSE(reopened.admit("ledger", zkr::FencingToken(11)));
  EXPECT_TRUE(reopened.admit("ledger", zkr::FencingToken(12)));
}

// The file is only ever replaced whole, so a truncated or altered one is damage, not an unfinished
// write: it is refused, never read as an empty gate (which would admit lower tokens again).
TEST_F(DurableFenceGateTest, RefusesADamagedFileWithAnErrorNamingIt) {
  {
    zkr::DurableFenceGate gate(file_);
    gate.admit("ledger", zkr::FencingToken(4294967298));
    gate.admit("accounts", zkr::FencingToken(77));
  }
  const std::string intact = read(file_);
  for (std::size_t size = 0; size < intact.size(); ++size) {
    write(file_, intact.substr(0, size));
    auto error = open_error(file_);
    ASSERT_TRUE(error) << "opened a file truncated to " << size << " of " << intact.size() << " bytes";
    EXPECT_EQ(error->code(), zkr::errc::corrupt_state);
    EXPECT_EQ(error->code(), zkr::condition::bad_input);
    EXPECT_NE(std::string(error->what()).find(file_.string()), std::string::npos) << error->what();
  }
  std::string altered = intact;
  altered[intact.find("4294967298")] = '1';  // a lower token, as bit rot might make it
  write(file_, altered);
  auto error = open_error(file_);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), zkr::errc::corrupt_state);
  EXPECT_NE(std::string(error->what()).find("checksum mismatch"), std::string::npos) << error->what();

  write(file_, "some other program's data\n");
  error = open_error(file_);
  ASSERT_TRUE(error);
  EXPECT_NE(std::string(error->what()).find("not a fence gate file"), std::string::npos) << error->what();

  write(file_, intact);
  EXPECT_FALSE(open_error(file_)) << "the intact file must still open";
}

TEST_F(DurableFenceGateTest, RefusesAFileItCannotReachWithTheSystemsReason) {
  auto error = open_error(directory_ / "no-such-directory" / "gate");
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::no_such_file_or_directory);
  EXPECT_NE(std::string(error->what()).find("no-such-directory/gate"), std::string::npos) << error->what();

  fs::create_directory(file_);  // a directory where the file should be
  error = open_error(file_);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::is_a_directory) << error->what();
}

// A write that cannot be made durable is not admitted, and the gate stops: after a failed write the
// file's state is unknown.
TEST_F(DurableFenceGateTest, AWriteThatFailsIsNotAdmittedAndStopsTheGate) {
  {
    zkr::DurableFenceGate gate(file_);
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(10)));
    fs::create_directory(file_.string() + ".tmp");  // where the next write's temporary file goes
    try {
      gate.admit("ledger", zkr::FencingToken(20));
      ADD_FAILURE() << "admitted a token it could not write";
    } catch (const zkr::Error& e) {
      EXPECT_EQ(e.code(), std::errc::is_a_directory) << e.what();
      EXPECT_NE(std::string(e.what()).find(file_.string()), std::string::npos) << e.what();
    }
    EXPECT_EQ(gate.highest("ledger"), zkr::FencingToken(10));
    fs::remove(file_.string() + ".tmp");
    try {
      gate.admit("ledger", zkr::FencingToken(30));
      ADD_FAILURE() << "a gate whose write failed admitted again";
    } catch (const zkr::Error& e) {
      EXPECT_EQ(e.code(), zkr::errc::corrupt_state) << e.what();
    }
  }
  zkr::DurableFenceGate reopened(file_);
  EXPECT_EQ(reopened.highest("ledger"), zkr::FencingToken(10));
  EXPECT_TRUE(reopened.admit("ledger", zkr::FencingToken(30)));
}

TEST_F(DurableFenceGateTest, RefusesAFileAnotherGateHasOpen) {
  std::optional<zkr::DurableFenceGate> first(std::in_place, file_);
  auto error = open_error(file_);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::device_or_resource_busy) << error->what();
  EXPECT_NE(std::string(error->what()).find(file_.string()), std::string::npos) << error->what();
  first.reset();
  EXPECT_FALSE(open_error(file_)) << "closing the first gate must let another open the file";
}

TEST_F(DurableFenceGateTest, RefusesAFileItMayNotReadOrReplace) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores file permissions";
  { zkr::DurableFenceGate gate(file_); }
  fs::permissions(file_, fs::perms::none);
  auto error = open_error(file_);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::permission_denied) << error->what();
  fs::permissions(file_, fs::perms::owner_read | fs::perms::owner_write);
  fs::permissions(directory_, fs::perms::owner_read | fs::perms::owner_exec);  // file readable, not replaceable
  error = open_error(file_);
  fs::permissions(directory_, fs::perms::owner_all);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::permission_denied) << error->what();
}

struct ResourceRun {
  std::vector<std::string> lines;
  std::optional<int> status;
  std::optional<long long> highest_at_open() const {
    for (const auto& line : lines)
      if (line.starts_with("HIGHEST ")) return std::stoll(line.substr(8));
    return std::nullopt;
  }
  std::vector<long long> tokens(std::string_view verdict) const {
    std::vector<long long> found;
    for (const auto& line : lines)
      if (line.starts_with(verdict)) found.push_back(std::stoll(line.substr(verdict.size() + 1)));
    return found;
  }
};

ResourceRun run_resource(const fs::path& gate, const fs::path& applied, std::string crash_at, int crash_on,
                 std::vector<std::string> tokens) {
  std::vector<std::string> argv{ZKR_TEST_FENCE_GATE, gate.string(), applied.string(), crash_at,
                                std::to_string(crash_on)};
  argv.insert(argv.end(), tokens.begin(), tokens.end());
  zkr::testenv::Process resource(argv);
  ResourceRun run;
  while (auto line = resource.read_line(10s)) run.lines.push_back(*line);
  run.status = resource.wait(10s);
  return run;
}

// The resource admits 10, 20, 30 for one key (an equal 10 too, which writes nothing) and is killed
// with SIGKILL at each point of the file write that makes 30 durable, or after 30 was admitted and
// before it applied the write. Restarted, it must admit no token lower than one it had admitted.
TEST_F(DurableFenceGateTest, KilledAtEveryStepOfAWriteItAdmitsNoLowerTokenAfterRestart) {
  struct Case {
    std::string crash_at;
    int crash_on;
    long long durable;  // the highest token on disk after the crash: the last write finished or not
  };
  const std::vector<Case> cases{
      {"temporary_written", 1, 0},  {"temporary_synced", 1, 0},  {"renamed", 1, 10},
      {"directory_synced", 1, 10},  {"temporary_written", 3, 20}, {"temporary_synced", 3, 20},
      {"renamed", 3, 30},           {"directory_synced", 3, 30},  {"admitted", 4, 30},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.crash_at + " of write " + std::to_string(c.crash_on));
    fs::remove_all(directory_);
    fs::create_directory(directory_);
    const auto applied = directory_ / "applied";

    ResourceRun crashed = run_resource(file_, applied, c.crash_at, c.crash_on, {"10", "10", "20", "30"});
    ASSERT_EQ(crashed.status, 128 + SIGKILL);
    auto admitted = crashed.tokens("ADMITTED");
    long long highest_admitted = admitted.empty() ? 0 : admitted.back();
    // Every write applied before the crash was admitted first, so its token is covered on disk.
    std::istringstream applied_before_crash(read(applied));
    for (long long token = 0; applied_before_crash >> token;) EXPECT_LE(token, c.durable);

    ResourceRun restarted = run_resource(file_, applied, "none", 0, {"5", "15", "25", "30", "35"});
    ASSERT_EQ(restarted.status, 0);
    EXPECT_EQ(restarted.highest_at_open(), c.durable);
    EXPECT_GE(restarted.highest_at_open(), highest_admitted);
    for (long long token : restarted.tokens("ADMITTED"))
      EXPECT_GE(token, highest_admitted) << "admitted " << token << " after admitting " << highest_admitted;
    EXPECT_EQ(restarted.tokens("ADMITTED").back(), 35);

  }
}

// One file reached through two names is one gate: the lock and the temporary file live beside the
// real file, whichever name opened it.
TEST_F(DurableFenceGateTest, ASecondGateThroughASymlinkIsBusy) {
  const auto alias = directory_ / "alias";
  fs::create_symlink("gate", alias);
  const auto linked_directory = directory_.string() + "-link";
  fs::create_directory_symlink(directory_, linked_directory);
  struct RemoveAtEnd {
    fs::path path;
    ~RemoveAtEnd() { fs::remove(path); }
  } remove_link{linked_directory};

  for (const auto& [first, second] : std::vector<std::pair<fs::path, fs::path>>{
           {file_, alias}, {alias, file_}, {file_, fs::path(linked_directory) / "gate"},
           {fs::path(linked_directory) / "alias", file_}}) {
    SCOPED_TRACE(first.string() + " then " + second.string());
    std::optional<zkr::DurableFenceGate> open(std::in_place, first);
    auto error = open_error(second);
    ASSERT_TRUE(error) << "two gates were open on one file at once";
    EXPECT_EQ(error->code(), std::errc::device_or_resource_busy) << error->what();
    EXPECT_NE(std::string(error->what()).find(second.string()), std::string::npos) << error->what();
  }
}

// Plain restarts, one process after another, through the link and through the real name: the
// token admitted through one name is the floor through the other.
TEST_F(DurableFenceGateTest, RestartsThroughASymlinkAndTheRealNameNeverAdmitALowerToken) {
  const auto alias = directory_ / "alias";
  const auto applied = directory_ / "applied";
  ASSERT_EQ(run_resource(file_, applied, "none", 0, {"100"}).status, 0);
  fs::create_symlink(file_, alias);
  ResourceRun through_link = run_resource(alias, applied, "none", 0, {"300"});
  ASSERT_EQ(through_link.status, 0);
  EXPECT_EQ(through_link.highest_at_open(), 100);
  ResourceRun through_real_name = run_resource(file_, applied, "none", 0, {"250", "300"});
  ASSERT_EQ(through_real_name.status, 0);
  EXPECT_EQ(through_real_name.highest_at_open(), 300);
  EXPECT_EQ(through_real_name.tokens("REFUSED"), std::vector<long long>{250}) << "admitted 250 after 300";
  ResourceRun through_link_again = run_resource(alias, applied, "none", 0, {"250"});
  EXPECT_EQ(through_link_again.highest_at_open(), 300);
  EXPECT_EQ(through_link_again.tokens("REFUSED"), std::vector<long long>{250});
  EXPECT_TRUE(fs::is_symlink(alias)) << "the link was replaced by a file of its own";
}

// The realistic case: the gate's name is a symlink onto a persistent volume, made before the gate
// file exists there. Writes go to the volume; the link stays a link.
TEST_F(DurableFenceGateTest, AGateReachedThroughASymlinkKeepsItsStateOnTheTarget) {
  const auto volume = directory_ / "volume";
  const auto app = directory_ / "app";
  fs::create_directories(volume);
  fs::create_directories(app);
  const auto link = app / "fence";
  fs::create_symlink("../volume/fence", link);  // relative, and dangling until the gate writes
  {
    zkr::DurableFenceGate gate(link);
    EXPECT_EQ(gate.file(), link);
    EXPECT_EQ(gate.real_file(), fs::canonical(volume) / "fence");
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(300)));
    EXPECT_TRUE(gate.admit("ledger", zkr::FencingToken(400)));
  }
  EXPECT_TRUE(fs::is_symlink(link)) << "the link was replaced by a file of its own";
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(volume / "fence")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(app / "fence.tmp")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(app / "fence.lock")));
  zkr::DurableFenceGate on_the_volume(volume / "fence");
  EXPECT_EQ(on_the_volume.highest("ledger"), zkr::FencingToken(400));
}

TEST_F(DurableFenceGateTest, RefusesASymlinkLoopNamingIt) {
  const auto loop = directory_ / "loop";
  fs::create_symlink("loop", loop);
  auto error = open_error(loop);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->code(), std::errc::too_many_symbolic_link_levels) << error->what();
  EXPECT_NE(std::string(error->what()).find(loop.string()), std::string::npos) << error->what();
}

// A hard link is a second name for the same inode; the gate's first write (a rename) would split
// the two names into two gates. Refused, naming the file and its link count.
TEST_F(DurableFenceGateTest, RefusesAFileWithAnotherHardLink) {
  { zkr::DurableFenceGate gate(file_); gate.admit("ledger", zkr::FencingToken(300)); }
  const auto alias = directory_ / "alias";
  fs::create_hard_link(file_, alias);
  for (const auto& name : {alias, file_}) {
    auto error = open_error(name);
    ASSERT_TRUE(error) << "opened " << name << ", a file with 2 hard links";
    EXPECT_EQ(error->code(), zkr::errc::invalid_argument) << error->what();
    EXPECT_EQ(error->code(), zkr::condition::bad_input);
    EXPECT_NE(std::string(error->what()).find(name.string()), std::string::npos) << error->what();
    EXPECT_NE(std::string(error->what()).find("2 hard links"), std::string::npos) << error->what();
  }
  fs::remove(alias);
  zkr::DurableFenceGate gate(file_);
  EXPECT_FALSE(gate.admit("ledger", zkr::FencingToken(250)));
}

}  // namespace
