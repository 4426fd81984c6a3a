// SPDX-License-Identifier: Apache-2.0
// What fleets read from zklock, against a real server: JSON log lines (--log-format json,
// --log-file), the Prometheus textfile (--metrics-file), one JSON vocabulary across --list and
// --watch, and the queue position while waiting. JSON and Prometheus text are checked by Debian's
// Python (json, prometheus_client's parser), not by the code that wrote them.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "metrics_file.hpp"
#include "queue_feedback.hpp"
#include "testenv.hpp"
#include "zklock_run.hpp"

namespace {

using namespace std::chrono_literals;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using zkr::testenv::Process;
using zkr::testenv::scaled;
using zkr::testenv::TempDir;

using namespace zklock_test;

// The records of a JSON-lines log, one "EVENT key=value..." line each (json_lines.py); the
// outcome fails if any line is not a JSON object with an event and a time.
Outcome json_records(const std::string& file, std::vector<std::string> fields) {
  std::vector<std::string> argv = {python, scripts_dir + "/json_lines.py", file};
  argv.insert(argv.end(), fields.begin(), fields.end());
  return run_to_end(argv);
}

// The samples of a Prometheus text file as prometheus_client parses it (prom_samples.py).
Outcome prometheus_samples(const std::filesystem::path& file) {
  return run_to_end({python, scripts_dir + "/prom_samples.py", file.string()});
}

// ---------------------------------------------------------------------------------------------
// The pure parts: the place in the queue, the exposition text

zkr::ContenderInfo contender(std::string node, std::int64_t session_id, bool holds, std::string owner = {}) {
  zkr::ContenderInfo info;
  info.node = std::move(node);
  info.token = zkr::FencingToken(7);
  info.session_id = session_id;
  info.owner_data = std::move(owner);
  info.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(1'700'000'000'123));
  info.holds = holds;
  return info;
}

TEST(QueuePlace, IsCountedAmongTheWaitersBehindTheHolders) {
  const std::vector<zkr::ContenderInfo> queue = {contender("a", 1, true, "db1"), contender("b", 2, false),
                                                 contender("c", 3, false), contender("d", 4, false)};
  const auto place = zklock::queue_place(queue, 3);
  ASSERT_TRUE(place);
  EXPECT_EQ(place->position, 2);
  EXPECT_EQ(place->waiters, 3);
  EXPECT_EQ(zklock::describe_queue_place("/q", *place),
            "queued for /q: position 2 (1 ahead), held by session 0x1 (owner \"db1\", since 2023-11-14T22:13:20.123Z)");
  EXPECT_EQ(zklock::queue_place(queue, 1), std::nullopt);  // holds: not queued
  EXPECT_EQ(zklock::queue_place(queue, 9), std::nullopt);  // not (yet) in the queue
  const auto next = zklock::queue_place({contender("b", 2, false)}, 2);
  ASSERT_TRUE(next);
  EXPECT_EQ(zklock::describe_queue_place("/q", *next), "queued for /q: position 1 (next), no holder now");
  // The same place behind another holder is a change to tell.
  auto other = *place;
  other.holders = {contender("z", 5, true)};
  EXPECT_FALSE(place->same_as(other));
  EXPECT_TRUE(place->same_as(*zklock::queue_place(queue, 3)));
}

TEST(MetricsText, CarriesTheCountersOfItsOwnLockOn) {
  zklock::RunSummary run;
  run.job_ended = true;
  run.exit_code = 0;
  const std::string previous = "zklock_runs_total{lock=\"/a\\\"b\"} 41\nzklock_runs_total{lock=\"/other\"} 5\n"
                               "zklock_losses_total{lock=\"/a\\\"b\"} 2\n";
  const std::string text = zklock::metrics_text("/a\"b", run, previous);
  EXPECT_THAT(text, HasSubstr("\nzklock_runs_total{lock=\"/a\\\"b\"} 42\n"));
  EXPECT_THAT(text, HasSubstr("\nzklock_losses_total{lock=\"/a\\\"b\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("\nzklock_outcome{lock=\"/a\\\"b\",outcome=\"ran\"} 1\n"));
  EXPECT_THAT(text, Not(HasSubstr("/other")));
  EXPECT_THAT(text, HasSubstr("# TYPE zklock_runs_total counter\n"));
}

// Counters are integers written exactly: a textfile reader takes "1e+06" for a million, and a
// counter that stops there reads as flat to rate() and increase().
TEST(MetricsText, CountersStayExactPastAMillion) {
  zklock::RunSummary run;
  run.job_ended = true;
  run.exit_code = 0;
  const auto runs_after = [&](std::string_view before) {
    const std::string text = zklock::metrics_text("/a", run, fmt::format("zklock_runs_total{{lock=\"/a\"}} {}\n", before));
    const auto at = text.find("\nzklock_runs_total{lock=\"/a\"} ");
    if (at == std::string::npos) return std::string("(no sample)");
    const auto value = at + std::string_view("\nzklock_runs_total{lock=\"/a\"} ").size();
    return text.substr(value, text.find('\n', value) - value);
  };
  EXPECT_EQ(runs_after("999999"), "1000000");
  EXPECT_EQ(runs_after("1000000"), "1000001");
  EXPECT_EQ(runs_after("9007199254740993"), "9007199254740994");  // past a double's exact integers
  EXPECT_EQ(runs_after("1e+06"), "1000001");  // as an older zklock wrote it
  EXPECT_EQ(runs_after("-3"), "1");           // not a count: starts again
  // The timestamp and the durations are fixed-point too, however large.
  run.finished = std::chrono::system_clock::time_point(std::chrono::milliseconds(4'102'444'800'123));
  run.wait_started = zklock::RunSummary::Clock::now() - std::chrono::hours(24 * 400);
  run.acquired_at = *run.wait_started + std::chrono::hours(24 * 200);
  const std::string text = zklock::metrics_text("/a", run, "");
  EXPECT_THAT(text, HasSubstr("\nzklock_last_run_timestamp_seconds{lock=\"/a\"} 4102444800.123\n"));
  EXPECT_THAT(text, HasSubstr("\nzklock_wait_seconds{lock=\"/a\"} 17280000.000000\n"));
  EXPECT_THAT(text, Not(ContainsRegex("[0-9]e[+-]")));
}

class FleetOutputTest : public ::testing::Test {
 protected:
  std::vector<std::string> zklock(std::vector<std::string> rest) const {
    std::vector<std::string> argv = {zklock_binary, "--zk", servers_, "--session-timeout", "2", "--kill-after", "0.3"};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }

  // A zklock whose job prints "held <token>" and then waits for `release` to exist.
  std::unique_ptr<Process> start_holder(const std::filesystem::path& release, std::vector<std::string> options = {},
                                        std::string* token = nullptr) {
    options.insert(options.end(), {path_, "-c",
                                   fmt::format("echo \"held $ZKLOCK_FENCING_TOKEN\"; while [ ! -e '{}' ]; do sleep 0.05; done",
                                               release.string())});
    auto holder = std::make_unique<Process>(zklock(options), merged_output());
    const auto line = holder->wait_for_line("held ", scaled(30s));
    EXPECT_TRUE(line) << "the holder never got the lock";
    if (line && token) *token = line->substr(5);
    return holder;
  }

  int contender_count() const { return contenders_listed(run_to_end(zklock({"--list", path_, "--json"}))); }

  std::string servers_ = zkr::testenv::shared_server();
  std::string path_ = zkr::testenv::unique_path();
  TempDir dir_{"zklock-fleet"};
};

// ---------------------------------------------------------------------------------------------
// One vocabulary: numeric token and session_id in --list, --watch and the --once-per record

TEST_F(FleetOutputTest, ListJsonWritesTokensAndSessionIdsAsNumbers) {
  ASSERT_EQ(run_to_end(zklock({"--once-per", "1h", path_, "true"})).exit_code, 0);
  std::string token;
  auto holder = start_holder(dir_.file("release"), {}, &token);
  const Outcome json = run_to_end(zklock({"--list", path_, "--json"}));
  std::ofstream(dir_.file("release")) << "go\n";
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, ContainsRegex(R"("observed":"[0-9T:.-]+Z","path":)"));
  EXPECT_THAT(json.output, HasSubstr(fmt::format(R"("token":{},"session_id":)", token)));
  EXPECT_THAT(json.output, ContainsRegex(R"("last_run":\{"schedule":"1h UTC","started":"[^"]+","owner":"[^"]*","token":[0-9]+,)"
                                         R"("session_id":[0-9]+,"session":"0x[0-9a-f]+","exit_code":0,)"));
  EXPECT_THAT(json.output, Not(ContainsRegex(R"re("(token|session_id)":")re")));
  // The number and the text name the same session.
  const Outcome same = run_to_end(
      {python, "-c",
       "import json,sys; listing = json.loads(sys.argv[1]); "
       "records = listing['contenders'] + [listing['last_run']] + listing['last_runs']; "
       "print(all(int(r['session'], 16) == r['session_id'] and isinstance(r['token'], int) for r in records))",
       json.output});
  EXPECT_EQ(same.output, "True\n") << json.output;
  EXPECT_EQ(holder->wait(scaled(30s)), 0);
}

TEST_F(FleetOutputTest, WatchLinesCarryTheTimeOfObservation) {
  Process watcher(zklock({"--list", path_, "--json", "--watch"}), merged_output());
  const auto missing = watcher.read_line(scaled(30s));
  ASSERT_TRUE(missing);
  EXPECT_THAT(*missing, ContainsRegex(R"(^\{"observed":"20[0-9-]+T[0-9:.]+Z","path":.*"exists":false)"));
  watcher.signal(SIGTERM);
  EXPECT_EQ(watcher.wait(scaled(30s)), 0);

  Process text_watcher(zklock({"--list", path_, "--watch"}), merged_output());
  const auto first = text_watcher.read_line(scaled(30s));
  ASSERT_TRUE(first);
  EXPECT_THAT(*first, ContainsRegex("^observed 20[0-9-]+T[0-9:.]+Z$"));
  text_watcher.signal(SIGTERM);
  EXPECT_EQ(text_watcher.wait(scaled(30s)), 0);
}

// ---------------------------------------------------------------------------------------------
// --log-format json

TEST_F(FleetOutputTest, JsonLogRecordsTheRunOneObjectALine) {
  const auto log = dir_.file("zklock.log");
  std::ofstream(log) << R"({"time":"2026-01-01T00:00:00Z","event":"earlier"})" "\n";  // appended to, not replaced
  const Outcome run = run_to_end(zklock({"--log-format", "json", "--log-file", log.string(), "-v", path_, "-c",
                                         "echo \"token $ZKLOCK_FENCING_TOKEN\"; exit 3"}));
  EXPECT_EQ(run.exit_code, 3) << run.output;
  // Only the job's own output on stdout and stderr: zklock's lines went to the file.
  ASSERT_THAT(run.output, ContainsRegex("^token [0-9]+\n$"));
  const std::string token = run.output.substr(6, run.output.size() - 7);

  const Outcome records = json_records(log.string(), {"lock", "token", "session_id", "exit_code", "outcome", "level"});
  ASSERT_EQ(records.exit_code, 0) << records.output << read_file(log);
  EXPECT_THAT(records.output, ::testing::StartsWith("earlier\n"));
  EXPECT_THAT(records.output, ContainsRegex(fmt::format("\nconnected lock=\"{}\" session_id=[0-9]+ level=\"info\"\n", path_)));
  EXPECT_THAT(records.output, HasSubstr(fmt::format("\nacquired lock=\"{}\" token={} session_id=", path_, token)));
  EXPECT_THAT(records.output, HasSubstr(fmt::format("\njob_exit lock=\"{}\" token={} exit_code=3", path_, token)));
  EXPECT_THAT(records.output, HasSubstr(fmt::format("\nreleased lock=\"{}\" token={}", path_, token)));
  EXPECT_THAT(records.output, ::testing::EndsWith(fmt::format("\nexit lock=\"{}\" token={} exit_code=3 outcome=\"ran\" level=\"info\"\n", path_, token)));
  // With -v the library's own records come too, in the same vocabulary.
  EXPECT_THAT(records.output, ContainsRegex("\nlog .*level=\"(info|debug|warning)\""));

  // The job killed by a signal: its name, and the shell's code.
  const Outcome killed = run_to_end(zklock({"--log-format", "json", path_, "-c", "kill -KILL $$"}));
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);
  Process parse({python, scripts_dir + "/json_lines.py", "-", "exit_code", "signal"},
                [] {
                  Process::Options options;
                  options.pipe_stdin = true;
                  return options;
                }());
  parse.write_stdin(killed.output);
  parse.close_stdin();
  const std::string on_stderr = parse.read_all(scaled(30s));
  EXPECT_EQ(parse.wait(scaled(30s)), 0) << on_stderr;
  EXPECT_THAT(on_stderr, HasSubstr("job_exit exit_code=137 signal=\"SIGKILL\""));
}

TEST_F(FleetOutputTest, JsonLogRecordsConflictsTimeoutsSignalsAndLoss) {
  const auto log = dir_.file("zklock.log");
  std::string token;
  auto holder = start_holder(dir_.file("release"), {"--log-format", "json", "--log-file", log.string()}, &token);
  EXPECT_EQ(run_to_end(zklock({"--log-format", "json", "--log-file", log.string(), "-n", path_, "true"})).exit_code, 1);
  EXPECT_EQ(run_to_end(zklock({"--log-format", "json", "--log-file", log.string(), "-w", "0.3", path_, "true"})).exit_code, 1);
  // A waiter interrupted while queued.
  Process waiter(zklock({"--log-format", "json", "--log-file", log.string(), path_, "true"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  waiter.signal(SIGINT);
  EXPECT_EQ(waiter.wait(scaled(30s)), 128 + SIGINT);
  // The holder's lock broken: lost, the job stopped.
  EXPECT_EQ(run_to_end(zklock({"--break", path_, "--force", "-q"})).exit_code, 0);
  EXPECT_EQ(holder->wait(scaled(30s)), 75);

  // A signal passed on to the job.
  Process signalled(zklock({"--log-format", "json", "--log-file", log.string(), path_, "-c",
                            "trap 'exit 5' TERM; echo started; while :; do sleep 0.05; done"}),
                    merged_output());
  ASSERT_TRUE(signalled.wait_for_line("started", scaled(30s)));
  signalled.signal(SIGTERM);
  EXPECT_EQ(signalled.wait(scaled(30s)), 5);

  const Outcome records = json_records(log.string(), {"reason", "signal", "action", "token", "exit_code", "outcome"});
  ASSERT_EQ(records.exit_code, 0) << records.output << read_file(log);
  EXPECT_THAT(records.output, HasSubstr("\nnot_acquired reason=\"held\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nexit exit_code=1 outcome=\"held\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nnot_acquired reason=\"timed_out\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nexit exit_code=1 outcome=\"timed_out\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nsignal signal=\"SIGINT\" action=\"withdrew\"\n"));
  EXPECT_THAT(records.output, ContainsRegex("\nsignal signal=\"SIGTERM\" action=\"passed\" token=[0-9]+\n"));
  EXPECT_THAT(records.output, ContainsRegex("\njob_exit token=[0-9]+ exit_code=5\n"));
  EXPECT_THAT(records.output, HasSubstr(fmt::format("\nexit exit_code={} outcome=\"interrupted\"\n", 128 + SIGINT)));
  // One vocabulary: the loss reason as the library's metrics name it; the stopped job's exit comes
  // after the loss, before the release.
  EXPECT_THAT(records.output,
              ContainsRegex(fmt::format("\nlost reason=\"node_deleted\" token={0}\n(message\n)?job_exit( signal=\"SIG[A-Z]+\")? "
                                        "token={0} exit_code=[0-9]+\nreleased token={0}\nexit token={0} exit_code=75 "
                                        "outcome=\"lost\"\n",
                                        token)));
}

// Finding the lock held (-n) or the wait timing out (-w) is a routine outcome, not an error: a
// fleet that alerts on levels must not page for a skipped turn, with or without -q.
TEST_F(FleetOutputTest, JsonLogRecordsASkippedTurnAsAnOutcomeNotAnError) {
  const auto log = dir_.file("zklock.log");
  auto holder = start_holder(dir_.file("release"));
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"-n"}, {"-w", "0.3"}, {"-n", "-q"}, {"-w", "0.3", "-q"}}) {
    std::vector<std::string> argv = {"--log-format", "json", "--log-file", log.string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {path_, "true"});
    const Outcome run = run_to_end(zklock(argv));
    EXPECT_EQ(run.exit_code, 1) << run.output;
    EXPECT_EQ(run.output, "") << "a routine outcome is for the log only";
  }
  std::ofstream(dir_.file("release")) << "go\n";
  EXPECT_EQ(holder->wait(scaled(30s)), 0);
  const Outcome records = json_records(log.string(), {"reason", "level", "outcome", "message"});
  ASSERT_EQ(records.exit_code, 0) << records.output << read_file(log);
  EXPECT_THAT(records.output, Not(HasSubstr("level=\"error\""))) << records.output;
  EXPECT_THAT(records.output, Not(HasSubstr("level=\"warning\""))) << records.output;
  EXPECT_THAT(records.output, Not(ContainsRegex("(^|\n)error "))) << records.output;
  // Said once, in its own record, with the message text says (not under -q).
  EXPECT_THAT(records.output, ContainsRegex(fmt::format("\nnot_acquired reason=\"held\" level=\"notice\" message=\"{} is held by ", path_)));
  EXPECT_THAT(records.output, ContainsRegex("\nnot_acquired reason=\"timed_out\" level=\"notice\" message=\"timed out after 300ms "));
  EXPECT_THAT(records.output, HasSubstr("\nnot_acquired reason=\"held\" level=\"notice\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nnot_acquired reason=\"timed_out\" level=\"notice\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nexit level=\"notice\" outcome=\"held\"\n"));
  EXPECT_THAT(records.output, HasSubstr("\nexit level=\"notice\" outcome=\"timed_out\"\n"));
}

// With --log-file, a fatal error still prints its line on stderr (cron mails it), as well as in
// the file; routine outcomes and progress stay in the file.
TEST_F(FleetOutputTest, FatalErrorsReachStderrBesideTheLogFile) {
  const int closed_port = [] {
    Process probe({python, "-c", "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"},
                  merged_output());
    return std::stoi(probe.read_all(scaled(30s)));
  }();
  const std::string nowhere = fmt::format("127.0.0.1:{}", closed_port);
  for (const std::string format : {"text", "json"}) {
    const auto log = dir_.file("fatal-" + format + ".log");
    const Outcome run = run_to_end({zklock_binary, "--zk", nowhere, "--connect-timeout", "0.5", "--log-format", format,
                                    "--log-file", log.string(), "-q", path_, "echo", "job-ran"});
    EXPECT_EQ(run.exit_code, 69) << run.output;
    EXPECT_THAT(run.output, ContainsRegex("^zklock: cannot reach ZooKeeper at " + nowhere + " within 500ms [^\n]*\n$"))
        << format;
    EXPECT_THAT(read_file(log), HasSubstr("cannot reach ZooKeeper at " + nowhere)) << format;
  }
  // A metrics file that cannot be written, found once the log is open: a usage error, on stderr.
  const auto log = dir_.file("usage.log");
  const std::string bad = dir_.file("missing-dir").string() + "/zklock.prom";
  const Outcome refused = run_to_end(zklock({"--log-file", log.string(), "--metrics-file", bad, path_, "true"}));
  EXPECT_EQ(refused.exit_code, 64) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("zklock: --metrics-file " + bad + ": cannot create a file beside it"));
  EXPECT_THAT(read_file(log), HasSubstr("--metrics-file " + bad));

  // A lock lost while the job ran is such an error, even with -q (cron mails it).
  const auto lost_log = dir_.file("lost.log");
  auto holder = start_holder(dir_.file("release"), {"-q", "--log-file", lost_log.string()});
  EXPECT_EQ(run_to_end(zklock({"--break", path_, "--force", "-q"})).exit_code, 0);
  const std::string said = holder->read_all(scaled(30s));
  EXPECT_EQ(holder->wait(scaled(30s)), 75);
  EXPECT_THAT(said, ContainsRegex("zklock: lost the lock on " + path_ + " \\(lock node deleted\\)")) << said;
  EXPECT_THAT(read_file(lost_log), HasSubstr("lost the lock on " + path_));
}

// In text, a log file's lines say when and which zklock: several may append to one file.
TEST_F(FleetOutputTest, TextLogFileLinesCarryTimeAndPid) {
  const auto log = dir_.file("zklock.log");
  const Outcome run = run_to_end(zklock({"--log-file", log.string(), "-v", path_, "-c", "echo job-ran"}));
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.output, "job-ran\n");
  const std::string text = read_file(log);
  EXPECT_THAT(text, ContainsRegex("(^|\n)20[0-9-]+T[0-9:.]+Z zklock\\[[0-9]+\\]: connected to "));
  EXPECT_THAT(text, ContainsRegex("\n20[0-9-]+T[0-9:.]+Z zklock\\[[0-9]+\\]: released /"));
  EXPECT_THAT(text, Not(ContainsRegex("(^|\n)zklock: ")));
}

TEST_F(FleetOutputTest, ABadLogFileIsRefusedBeforeAnythingIsAcquired) {
  const std::string bad = dir_.file("missing-dir").string() + "/zklock.log";
  const Outcome refused = run_to_end(zklock({"--log-file", bad, path_, "echo", "job-ran"}));
  EXPECT_EQ(refused.exit_code, 64) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(fmt::format("--log-file {}: cannot open for appending: No such file or directory", bad)));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
  EXPECT_EQ(contender_count(), -1);  // the path was never created
  const Outcome bad_format = run_to_end(zklock({"--log-format", "xml", path_, "true"}));
  EXPECT_EQ(bad_format.exit_code, 64);
  EXPECT_THAT(bad_format.output, HasSubstr("invalid value 'xml' for --log-format: expected text or json"));
}

// The man page and the shell completion know the options too.
TEST(FleetOutputDocs, ManPageAndCompletionNameTheOptions) {
  const std::string man_page = read_file(scripts_dir + "/../../tools/zklock/zklock.1");
  const std::string completion = read_file(scripts_dir + "/../../tools/zklock/zklock.bash-completion");
  ASSERT_FALSE(man_page.empty());
  for (const std::string option : {"log-format", "log-file", "metrics-file"}) {
    std::string escaped = "\\-\\-";
    for (char c : option) escaped += c == '-' ? std::string("\\-") : std::string(1, c);
    EXPECT_THAT(man_page, HasSubstr(".BI " + escaped)) << option;
    EXPECT_THAT(completion, HasSubstr("--" + option)) << option;
  }
}

// docs/operations.md names every library the .deb depends on beyond the C/C++ runtime.
TEST(FleetOutputDocs, OperationsGuideNamesThePackagesDependencies) {
  const std::string package = read_file(scripts_dir + "/../../cmake/ZkrPackage.cmake");
  const std::string guide = read_file(scripts_dir + "/../../docs/operations.md");
  const auto depends = package.find("libc6 (");
  ASSERT_NE(depends, std::string::npos) << "no Depends line in cmake/ZkrPackage.cmake";
  const std::string line = package.substr(depends, package.find('"', depends) - depends);
  std::istringstream packages(line);
  std::string entry;
  int named = 0;
  while (std::getline(packages, entry, ',')) {
    entry.erase(0, entry.find_first_not_of(' '));
    const std::string name = entry.substr(0, entry.find(' '));
    if (name == "libc6" || name == "libgcc-s1" || name == "libstdc++6") continue;  // "the C/C++ runtime"
    EXPECT_THAT(guide, HasSubstr("`" + name + "`")) << "docs/operations.md does not name " << name;
    ++named;
  }
  EXPECT_GE(named, 2) << line;
}

// ---------------------------------------------------------------------------------------------
// --metrics-file

TEST_F(FleetOutputTest, MetricsFileIsPrometheusTextReplacedAtomically) {
  const auto metrics = dir_.file("nightly.prom");
  ASSERT_EQ(run_to_end(zklock({"--metrics-file", metrics.string(), path_, "-c", "sleep 0.2; exit 3"})).exit_code, 3);
  Outcome samples = prometheus_samples(metrics);
  ASSERT_EQ(samples.exit_code, 0) << samples.output << read_file(metrics);
  const std::string lock = fmt::format("lock=\"{}\"", path_);
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_exit_code{{{}}} 3\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_outcome{{{},outcome=\"ran\"}} 1\n", lock)));
  EXPECT_THAT(samples.output, ContainsRegex(fmt::format("gauge zklock_wait_seconds\\{{{}\\}} [0-9.e-]+\n", lock)));
  EXPECT_THAT(samples.output, ContainsRegex(fmt::format("gauge zklock_hold_seconds\\{{{}\\}} (0\\.[2-9]|[1-9])", lock)));
  EXPECT_THAT(samples.output, ContainsRegex(fmt::format("gauge zklock_last_run_timestamp_seconds\\{{{}\\}} 1[0-9.e+]+\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("counter zklock_runs_total{{{}}} 1\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("counter zklock_losses_total{{{}}} 0\n", lock)));

  // The next run replaces the file and carries the counters on; no temporary file is left beside it.
  std::string token;
  auto holder = start_holder(dir_.file("release"), {"--metrics-file", metrics.string()}, &token);
  EXPECT_EQ(run_to_end(zklock({"--break", path_, "--force", "-q"})).exit_code, 0);
  EXPECT_EQ(holder->wait(scaled(30s)), 75);
  samples = prometheus_samples(metrics);
  ASSERT_EQ(samples.exit_code, 0) << samples.output << read_file(metrics);
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_outcome{{{},outcome=\"lost\"}} 1\n", lock)));
  EXPECT_THAT(samples.output, Not(HasSubstr("outcome=\"ran\"")));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_exit_code{{{}}} 75\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("counter zklock_runs_total{{{}}} 2\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("counter zklock_losses_total{{{}}} 1\n", lock)));
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) names.push_back(entry.path().filename());
  EXPECT_THAT(names, ::testing::ElementsAre("nightly.prom"));

  // Not acquired: the outcome says so, and no hold is reported.
  auto other = start_holder(dir_.file("release-2"));
  EXPECT_EQ(run_to_end(zklock({"--metrics-file", metrics.string(), "-n", path_, "true"})).exit_code, 1);
  std::ofstream(dir_.file("release-2")) << "go\n";
  EXPECT_EQ(other->wait(scaled(30s)), 0);
  samples = prometheus_samples(metrics);
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_outcome{{{},outcome=\"held\"}} 1\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("gauge zklock_hold_seconds{{{}}} 0\n", lock)));
  EXPECT_THAT(samples.output, HasSubstr(fmt::format("counter zklock_runs_total{{{}}} 2\n", lock)));
}

TEST_F(FleetOutputTest, ABadMetricsFileIsRefusedBeforeAnythingIsAcquired) {
  const std::string bad = dir_.file("missing-dir").string() + "/zklock.prom";
  const Outcome refused = run_to_end(zklock({"--metrics-file", bad, path_, "echo", "job-ran"}));
  EXPECT_EQ(refused.exit_code, 64) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr(fmt::format("--metrics-file {}: cannot create a file beside it", bad)));
  EXPECT_THAT(refused.output, Not(HasSubstr("job-ran")));
  EXPECT_EQ(contender_count(), -1);
}

// ---------------------------------------------------------------------------------------------
// Feedback while queued

TEST_F(FleetOutputTest, AWaiterSaysItsPlaceInTheQueueAndWhoHoldsWhenTheyChange) {
  std::string token;
  auto holder = start_holder(dir_.file("release"), {"--owner", "the-holder"}, &token);
  Process first_waiter(zklock({"--owner", "first-waiter", path_, "true"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  Process waiter(zklock({"-v", path_, "echo", "job-ran"}), merged_output());
  const auto second = waiter.wait_for_line("zklock: queued for " + path_, scaled(30s));
  ASSERT_TRUE(second);
  EXPECT_THAT(*second, HasSubstr("position 2 (1 ahead)"));
  EXPECT_THAT(*second, HasSubstr("held by session 0x"));
  EXPECT_THAT(*second, HasSubstr("owner \"the-holder\""));
  first_waiter.signal(SIGINT);  // withdraws: the waiter moves up
  EXPECT_EQ(first_waiter.wait(scaled(30s)), 128 + SIGINT);
  const auto first = waiter.wait_for_line("zklock: queued for " + path_, scaled(30s));
  ASSERT_TRUE(first);
  EXPECT_THAT(*first, HasSubstr("position 1 (next)"));
  std::ofstream(dir_.file("release")) << "go\n";
  EXPECT_TRUE(waiter.wait_for_line("job-ran", scaled(30s)));
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  EXPECT_EQ(holder->wait(scaled(30s)), 0);
}

// Someone queueing behind changes nothing a text line says: no second, identical line.
TEST_F(FleetOutputTest, AWaiterSaysItsPlaceOnceWhileOnlyTheQueueBehindItGrows) {
  auto holder = start_holder(dir_.file("release"));
  Process waiter(zklock({"-v", path_, "echo", "job-ran"}), merged_output());
  ASSERT_TRUE(waiter.wait_for_line("zklock: queued for " + path_, scaled(30s)));
  Process behind(zklock({path_, "true"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 3; }, 30s));
  std::this_thread::sleep_for(scaled(1s));  // the waiter's watch fires and it reads the queue again
  std::ofstream(dir_.file("release")) << "go\n";
  const std::string output = waiter.read_all(scaled(30s));
  EXPECT_EQ(waiter.wait(scaled(30s)), 0);
  EXPECT_EQ(behind.wait(scaled(30s)), 0);
  EXPECT_EQ(holder->wait(scaled(30s)), 0);
  EXPECT_THAT(output, Not(HasSubstr("zklock: queued for "))) << "said again:\n" << output;
  EXPECT_THAT(output, HasSubstr("job-ran"));
}

// --once-per's own record beside the contenders is no stranger: no warning about it, run after run.
TEST_F(FleetOutputTest, OncePerRunsDoNotWarnAboutTheirOwnRecord) {
  for (int run = 0; run < 2; ++run) {
    const Outcome text = run_to_end(zklock({"-v", "--once-per", "1s", path_, "true"}));
    EXPECT_EQ(text.exit_code, 0) << text.output;
    EXPECT_THAT(text.output, Not(HasSubstr("not named like a contender"))) << text.output;
    EXPECT_THAT(text.output, Not(HasSubstr("[warning]"))) << text.output;
    const Outcome json = run_to_end(zklock({"--log-format", "json", "--once-per", "1s", path_, "true"}));
    EXPECT_EQ(json.exit_code, 0) << json.output;
    EXPECT_THAT(json.output, Not(HasSubstr("not named like a contender"))) << json.output;
    std::this_thread::sleep_for(1100ms);  // the next window
  }
  // A child that is not zklock's is still named.
  const Outcome created = run_to_end(
      {python, "-c",
       "import sys; from kazoo.client import KazooClient; client = KazooClient(hosts=sys.argv[1]); "
       "client.start(timeout=15); client.create(sys.argv[2]); client.stop(); client.close()",
       servers_, path_ + "/stranger"});
  ASSERT_EQ(created.exit_code, 0) << created.output;
  const Outcome stranger = run_to_end(zklock({"-v", "--once-per", "1s", path_, "true"}));
  EXPECT_THAT(stranger.output, HasSubstr("'stranger'")) << stranger.output;
}

// An ensemble restart while watching: said as it happens (reconnecting), then the listing resumes.
TEST(FleetOutputRestart, ListWatchSaysItIsReconnectingDuringARestart) {
  zkr::testenv::Cluster cluster;
  const std::string path = zkr::testenv::unique_path();
  Process watcher({zklock_binary, "--zk", cluster.connect_string(), "--session-timeout", "8", "--list", path, "--watch"},
                  merged_output());
  ASSERT_TRUE(watcher.wait_for_line("observed ", scaled(30s)));
  cluster.stop(0);
  const auto reconnecting = watcher.wait_for_line("zklock: ", scaled(30s));
  ASSERT_TRUE(reconnecting) << "nothing said while the ensemble is down";
  EXPECT_THAT(*reconnecting, HasSubstr("reconnecting"));
  cluster.start(0);
  const auto back = watcher.wait_for_line("zklock: ", scaled(60s));
  ASSERT_TRUE(back);
  EXPECT_THAT(*back, ContainsRegex("reconnected|listing .* again"));
  watcher.signal(SIGTERM);
  EXPECT_EQ(watcher.wait(scaled(30s)), 0);
}

// On a terminal zklock says the same without -v (and nothing of it when stderr is not one: the
// test above without -v would print only job-ran).
TEST_F(FleetOutputTest, OnATerminalAWaiterSaysItsPlaceWithoutVerbose) {
  auto holder = start_holder(dir_.file("release"), {"--owner", "the-holder"});
  std::vector<std::string> argv = {python, scripts_dir + "/on_a_terminal.py", dir_.file("release").string()};
  const auto waiter = zklock({path_, "echo", "job-ran"});
  argv.insert(argv.end(), waiter.begin(), waiter.end());
  const Outcome run = run_to_end(argv);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("zklock: queued for " + path_ + ": position 1 (next), held by session 0x"));
  EXPECT_THAT(run.output, HasSubstr("job-ran"));
  EXPECT_EQ(holder->wait(scaled(30s)), 0);

  auto quiet_holder = start_holder(dir_.file("release-2"));
  Process not_a_terminal(zklock({path_, "echo", "job-ran"}), merged_output());
  ASSERT_TRUE(eventually([&] { return contender_count() == 2; }, 30s));
  std::ofstream(dir_.file("release-2")) << "go\n";
  EXPECT_EQ(not_a_terminal.read_all(scaled(30s)), "job-ran\n");
  EXPECT_EQ(not_a_terminal.wait(scaled(30s)), 0);
  EXPECT_EQ(quiet_holder->wait(scaled(30s)), 0);
}

}  // namespace
