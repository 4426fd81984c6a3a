// SPDX-License-Identifier: Apache-2.0
// Fencing where the data lives (docs/fencing.md): a lock holder frozen past its session writes
// late with its stale token, and the database refuses it. Real ZooKeeper (the suite's shared
// server), a private PostgreSQL server (testenv/pgenv.py) and an SQLite file in a temporary
// directory. The writers are the ones users run: the C++ examples of examples/sql-fencing/, and
// zklock running that directory's psql and sqlite3 shell jobs.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <libpq-fe.h>
#include <sqlite3.h>

#include "postgres.hpp"
#include "testenv.hpp"

namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using zkr::testenv::Process;
using zkr::testenv::TempDir;
using zkr::testenv::scaled;

const std::string zklock_binary = ZKLOCK_BINARY;
const std::string examples_dir = ZKR_SQL_FENCING_DIR;
// Every zklock these tests start talks to testenv's servers, whose tickTime this is.
const bool tick_time_set = ::setenv("ZKLOCK_TICK_TIME",
                                    fmt::format("{:g}", zkr::testenv::kTestTickTime.count() / 1000.0).c_str(), 1) == 0;

// The name every writer protects: one fence row, many entries.
constexpr auto kName = "ledger";

std::string scaled_seconds(std::chrono::milliseconds duration) {
  return fmt::format("{:g}", static_cast<double>(scaled(duration).count()) / 1000.0);
}

Process::Options merged_output(std::map<std::string, std::string> env = {}) {
  Process::Options options;
  options.merge_stderr = true;
  options.new_process_group = true;
  options.env = std::move(env);
  return options;
}

struct Outcome {
  std::optional<int> exit_code;
  std::string output;
};

Outcome run_to_end(std::vector<std::string> argv, Process::Options options = merged_output()) {
  Process process(std::move(argv), std::move(options));
  Outcome outcome;
  outcome.output = process.read_all(scaled(60s));
  outcome.exit_code = process.wait(scaled(30s));
  return outcome;
}

long long number_after(const std::string& text, std::string_view prefix) {
  const auto at = text.find(prefix);
  if (at == std::string::npos) return -1;
  std::istringstream in(text.substr(at + prefix.size()));
  long long value = -1;
  in >> value;
  return value;
}

// True once the process is stopped (state T), polling for at most `timeout`.
bool wait_until_stopped(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + scaled(timeout);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T') return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// The parent of `pid` (0 if gone): a zklock job's parent is zklock's keeper.
pid_t parent_of(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(paren + 2));
  char state = 0;
  pid_t parent = 0;
  fields >> state >> parent;
  return parent;
}

// Kills a job's process group that a failed test left running (or stopped).
struct KillGroupAtEnd {
  pid_t pgid = 0;
  ~KillGroupAtEnd() {
    if (pgid > 0) {
      ::kill(-pgid, SIGKILL);
      ::kill(-pgid, SIGCONT);
    }
  }
};

// The SQL of the first ```sql block after `marker` in docs/fencing.md: the tests run the
// documented snippets as written, so the page cannot promise SQL that does not run.
std::string documented_sql(std::string_view marker) {
  std::ifstream in(ZKR_FENCING_DOC);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto at = doc.find(marker);
  EXPECT_NE(at, std::string::npos) << "docs/fencing.md no longer says: " << marker;
  const auto open = doc.find("```sql\n", at);
  const auto close = doc.find("```\n", open + 7);
  if (at == std::string::npos || open == std::string::npos || close == std::string::npos) return "";
  return doc.substr(open + 7, close - open - 7);
}

// Collects a process's output (stdout and stderr merged) until it ends.
struct Collected {
  std::string output;
  std::optional<int> exit_code;
};
Collected collect(Process& process) {
  Collected collected;
  collected.output = process.read_all(scaled(30s));
  collected.exit_code = process.wait(scaled(30s));
  return collected;
}

// ---------------------------------------------------------------------------------------------
// The rows a test shows and asserts on

struct FenceRow {
  std::string name;
  std::int64_t token;
  bool operator==(const FenceRow&) const = default;
};

struct EntryRow {
  std::string name;
  std::int64_t token;
  std::string value;
  bool operator==(const EntryRow&) const = default;
};

void PrintTo(const FenceRow& row, std::ostream* out) { *out << fmt::format("fence({}, {})", row.name, row.token); }
void PrintTo(const EntryRow& row, std::ostream* out) {
  *out << fmt::format("entry({}, {}, {})", row.name, row.token, row.value);
}

void show(std::string_view database, const std::vector<FenceRow>& fence, const std::vector<EntryRow>& entries) {
  std::cout << fmt::format("{}: table fence (name, token)\n", database);
  for (const auto& row : fence) std::cout << fmt::format("  {:<8} {}\n", row.name, row.token);
  std::cout << fmt::format("{}: table entries (name, token, value), in the order written\n", database);
  for (const auto& row : entries) std::cout << fmt::format("  {:<8} {:<12} {}\n", row.name, row.token, row.value);
  std::cout << std::flush;
}

// ---------------------------------------------------------------------------------------------
// One fixture per database: how to create the schema, read the rows, and run each writer.

class DatabaseFencingTest : public ::testing::Test {
 protected:
  virtual std::string database() const = 0;            // what the writers are given
  virtual std::string database_kind() const = 0;       // "PostgreSQL", "SQLite"
  virtual std::string writer_binary() const = 0;       // the C++ example
  virtual std::string shell_job() const = 0;           // the shell job for zklock
  virtual int shell_job_refused_code() const = 0;      // its exit status when refused
  virtual std::vector<FenceRow> fence_rows() = 0;
  virtual std::vector<EntryRow> entry_rows() = 0;

  // A 4 s session: short, as B waits out the frozen A's expiry, yet tolerant of a loaded machine
  // (at 2 s a second's stall could cost A its lock before the test froze it).
  std::vector<std::string> zklock(std::vector<std::string> rest) const {
    std::vector<std::string> argv = {zklock_binary,       "--zk", servers_, "--session-timeout", scaled_seconds(4s),
                                     "--kill-after", scaled_seconds(300ms)};
    argv.insert(argv.end(), rest.begin(), rest.end());
    return argv;
  }

  std::vector<std::string> writer(std::string value, std::vector<std::string> options) const {
    std::vector<std::string> argv = {writer_binary(), servers_, path_, database(), kName, std::move(value),
                                     "--session-timeout", scaled_seconds(2s), "--tick-time",
                                     fmt::format("{:g}", zkr::testenv::kTestTickTime.count() / 1000.0)};
    argv.insert(argv.end(), options.begin(), options.end());
    return argv;
  }

  // Holder A (the C++ example) is granted, checks the lock and freezes before its write; its
  // session expires and B is granted and writes; A thaws and writes with its stale token.
  void frozen_example_writer_is_refused() {
    Process a(writer("A", {"--pause-before-write"}), merged_output());
    auto granted = a.wait_for_line("writer 'A': granted", scaled(30s));
    ASSERT_TRUE(granted) << "A was never granted the lock";
    const long long token_a = number_after(*granted, "fencing token ");
    ASSERT_TRUE(a.wait_for_line("writer 'A': pausing", scaled(10s)));
    ASSERT_TRUE(wait_until_stopped(a.pid(), 10s)) << "A did not stop itself";

    const Outcome b = run_to_end(writer("B", {"--wait", scaled_seconds(30s)}));
    std::cout << b.output;
    ASSERT_EQ(b.exit_code, 0) << "B's write was not accepted";
    const long long token_b = number_after(b.output, "fencing token ");
    EXPECT_GT(token_b, token_a);

    a.thaw();
    const std::string a_output = a.read_all(scaled(30s));
    std::cout << *granted << "\n" << a_output;
    EXPECT_EQ(a.wait(scaled(30s)), 3) << "A's stale write was not refused";
    EXPECT_THAT(a_output, HasSubstr(fmt::format("REFUSED: token {} is stale", token_a)));

    const auto fence = fence_rows();
    const auto entries = entry_rows();
    show(database_kind(), fence, entries);
    EXPECT_THAT(fence, ElementsAre(FenceRow{kName, token_b}));
    EXPECT_THAT(entries, ElementsAre(EntryRow{kName, token_b, "B"}));
  }

  // Holder A is a zklock job that writes once in time and then waits; zklock and the job are
  // frozen past the session; B's zklock is granted and its job writes; A's job thaws first and
  // writes with its stale token.
  void frozen_zklock_job_is_refused() {
    const std::string gate = (gate_dir_.file("thawed")).string();
    const auto env = merged_output({{"WRITE_JOB", shell_job()}, {"DATABASE", database()}, {"GATE", gate}});
    // The gate makes the job's late write wait for the test; the loop ends by itself after 30 s.
    Process a(zklock({path_, "-c",
                      "\"$WRITE_JOB\" \"$DATABASE\" ledger A-in-time || exit; "
                      "echo \"pgid $$ token $ZKLOCK_FENCING_TOKEN\"; "
                      "i=0; while [ ! -e \"$GATE\" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
                      "\"$WRITE_JOB\" \"$DATABASE\" ledger A-late; echo \"late write exit $?\""}),
              env);
    auto held = a.wait_for_line("pgid ", scaled(30s));
    ASSERT_TRUE(held) << "A's job never wrote in time: " << a.read_all(scaled(1s));
    KillGroupAtEnd job{static_cast<pid_t>(number_after(*held, "pgid "))};
    const long long token_a = number_after(*held, " token ");

    // The whole holder frozen (a frozen machine): zklock's group, its keeper (which would stop
    // the job at the session monitor's deadline), the job's own group.
    const pid_t keeper = parent_of(job.pgid);
    ASSERT_GT(keeper, 1);
    a.freeze();
    ::kill(keeper, SIGSTOP);
    ::kill(-job.pgid, SIGSTOP);

    const Outcome b = run_to_end(zklock({"-w", scaled_seconds(30s), path_, shell_job(), database(), kName, "B"}), env);
    ASSERT_EQ(b.exit_code, 0) << b.output;

    { std::ofstream touch(gate); }
    ::kill(-job.pgid, SIGCONT);
    std::string late_output;
    std::optional<std::string> late;
    while (auto line = a.read_line(scaled(30s))) {
      late_output += *line + "\n";
      if (line->starts_with("late write exit ")) {
        late = line;
        break;
      }
    }
    std::cout << *held << "\n" << late_output;
    ASSERT_TRUE(late) << "A's job never tried its late write";
    EXPECT_EQ(number_after(*late, "late write exit "), shell_job_refused_code());
    EXPECT_THAT(late_output, HasSubstr("stale fencing token"));

    a.thaw();
    ::kill(keeper, SIGCONT);
    EXPECT_EQ(a.wait(scaled(30s)), 75) << "zklock did not report the lost lock";

    const auto fence = fence_rows();
    const auto entries = entry_rows();
    show(database_kind(), fence, entries);
    ASSERT_EQ(fence.size(), 1u);
    const std::int64_t token_b = fence[0].token;
    EXPECT_GT(token_b, token_a);
    EXPECT_THAT(entries, ElementsAre(EntryRow{kName, token_a, "A-in-time"}, EntryRow{kName, token_b, "B"}));
  }

  // Holder A (the C++ example) is granted, admits its token and freezes inside its transaction,
  // holding the fence row's lock (PostgreSQL) or the file's write lock (SQLite); its session
  // expires and B is granted. Returns B's output once it ended (or after a bound, by which A is
  // thawed anyway, so the test ends either way) and A's, after thawing it.
  struct FrozenInside {
    long long token_a = 0;
    Collected a, b;
    bool b_ended_while_a_was_frozen = false;
    std::chrono::milliseconds b_after_grant{0};  // from B's grant until B ended
  };
  FrozenInside writer_frozen_inside_its_transaction() {
    FrozenInside run;
    Process a(writer("A", {"--pause-in-transaction"}), merged_output());
    auto granted = a.wait_for_line("writer 'A': granted", scaled(30s));
    EXPECT_TRUE(granted) << "A was never granted the lock";
    if (!granted) return run;
    run.token_a = number_after(*granted, "fencing token ");
    EXPECT_TRUE(a.wait_for_line("writer 'A': pausing inside the transaction", scaled(10s)));
    EXPECT_TRUE(wait_until_stopped(a.pid(), 10s)) << "A did not stop itself";

    Process b(writer("B", {"--wait", scaled_seconds(30s)}), merged_output());
    std::optional<std::chrono::steady_clock::time_point> b_granted;
    // Long enough for B's grant (about a session timeout) and any bound of the recipe, far
    // shorter than a real freeze: after it, A is thawed whatever happened.
    const auto give_up = std::chrono::steady_clock::now() + scaled(12s);
    while (std::chrono::steady_clock::now() < give_up) {
      auto line = b.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(
          std::max(give_up - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms))));
      if (!line) break;
      run.b.output += *line + "\n";
      if (line->starts_with("writer 'B': granted")) b_granted = std::chrono::steady_clock::now();
    }
    run.b_ended_while_a_was_frozen = b.at_end_of_output();
    if (b_granted)
      run.b_after_grant =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - *b_granted);
    a.thaw();
    run.a = collect(a);
    run.a.output = *granted + "\n" + run.a.output;
    Collected b_rest = collect(b);
    run.b.output += b_rest.output;
    run.b.exit_code = b_rest.exit_code;
    std::cout << run.a.output << run.b.output;
    return run;
  }

  std::string servers_ = zkr::testenv::shared_server();
  std::string path_ = zkr::testenv::unique_path();
  TempDir gate_dir_{"zkr-fencing-gate"};
};

// ---------------------------------------------------------------------------------------------
// PostgreSQL

using PgConnection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using PgResult = std::unique_ptr<PGresult, decltype(&PQclear)>;

class PostgresFencingTest : public DatabaseFencingTest {
 protected:
  void SetUp() override {
    if (auto reason = zkr::testenv::PostgresServer::unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
    server_ = std::make_unique<zkr::testenv::PostgresServer>();
    // The schema, with the command docs/fencing.md gives.
    const Outcome schema = run_to_end({"psql", server_->uri(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f",
                                       examples_dir + "/postgres-schema.sql"});
    ASSERT_EQ(schema.exit_code, 0) << schema.output;
  }

  std::string database() const override { return server_->uri(); }
  std::string database_kind() const override { return "PostgreSQL"; }
  std::string writer_binary() const override { return ZKR_POSTGRES_WRITER; }
  std::string shell_job() const override { return examples_dir + "/psql-write.sh"; }
  int shell_job_refused_code() const override { return 3; }  // psql: an SQL statement failed

  std::vector<FenceRow> fence_rows() override {
    std::vector<FenceRow> rows;
    PgResult result = query("SELECT name, token FROM fence ORDER BY name");
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      rows.push_back({PQgetvalue(result.get(), row, 0), std::stoll(PQgetvalue(result.get(), row, 1))});
    }
    return rows;
  }

  std::vector<EntryRow> entry_rows() override {
    std::vector<EntryRow> rows;
    PgResult result = query("SELECT name, token, value FROM entries ORDER BY id");
    for (int row = 0; row < PQntuples(result.get()); ++row) {
      rows.push_back({PQgetvalue(result.get(), row, 0), std::stoll(PQgetvalue(result.get(), row, 1)),
                      PQgetvalue(result.get(), row, 2)});
    }
    return rows;
  }

  PgResult query(const char* sql) {
    PgConnection connection(PQconnectdb(server_->uri().c_str()), &PQfinish);
    EXPECT_EQ(PQstatus(connection.get()), CONNECTION_OK) << PQerrorMessage(connection.get());
    PgResult result(PQexec(connection.get(), sql), &PQclear);
    EXPECT_EQ(PQresultStatus(result.get()), PGRES_TUPLES_OK) << PQresultErrorMessage(result.get());
    return result;
  }

  std::unique_ptr<zkr::testenv::PostgresServer> server_;
};

TEST_F(PostgresFencingTest, FrozenCxxWriterIsRefused) { frozen_example_writer_is_refused(); }

TEST_F(PostgresFencingTest, FrozenZklockJobWithPsqlIsRefused) { frozen_zklock_job_is_refused(); }

// The schema's rule holds for any client: a lower token fails with ZF001 and takes the
// transaction's data write with it; an equal token is admitted (one grant writes many times).
TEST_F(PostgresFencingTest, LowerTokenAbortsTheWholeTransaction) {
  PgConnection connection(PQconnectdb(server_->uri().c_str()), &PQfinish);
  ASSERT_EQ(PQstatus(connection.get()), CONNECTION_OK) << PQerrorMessage(connection.get());
  auto run = [&](const char* sql) { return PgResult(PQexec(connection.get(), sql), &PQclear); };
  const char* admit_200 =
      "BEGIN; INSERT INTO fence (name, token) VALUES ('ledger', 200) "
      "ON CONFLICT (name) DO UPDATE SET token = excluded.token; "
      "INSERT INTO entries (name, token, value) VALUES ('ledger', 200, 'x'); COMMIT";
  ASSERT_EQ(PQresultStatus(run(admit_200).get()), PGRES_COMMAND_OK);
  ASSERT_EQ(PQresultStatus(run(admit_200).get()), PGRES_COMMAND_OK) << "an equal token must pass";

  ASSERT_EQ(PQresultStatus(run("BEGIN").get()), PGRES_COMMAND_OK);
  ASSERT_EQ(PQresultStatus(run("INSERT INTO entries (name, token, value) VALUES ('ledger', 100, 'stale')").get()),
            PGRES_COMMAND_OK);
  PgResult refused = run("UPDATE fence SET token = 100 WHERE name = 'ledger'");
  EXPECT_EQ(PQresultStatus(refused.get()), PGRES_FATAL_ERROR);
  EXPECT_STREQ(PQresultErrorField(refused.get(), PG_DIAG_SQLSTATE), "ZF001");
  PgResult commit = run("COMMIT");
  EXPECT_STREQ(PQcmdStatus(commit.get()), "ROLLBACK");

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 200}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 200, "x"}, EntryRow{kName, 200, "x"}));
}

// Writers of one name are serialized by the fence row's lock: a stale writer that arrives while a
// later one's transaction is open waits for it, and is then compared with the token it committed
// (READ COMMITTED re-reads the row), not with the one it saw when it started.
TEST_F(PostgresFencingTest, StaleWriterWaitingOnALaterOneIsRefusedWhenItCommits) {
  auto connect = [&] {
    PgConnection connection(PQconnectdb(server_->uri().c_str()), &PQfinish);
    EXPECT_EQ(PQstatus(connection.get()), CONNECTION_OK) << PQerrorMessage(connection.get());
    return connection;
  };
  PgConnection later = connect(), stale = connect(), observer = connect();
  auto run = [](PGconn* connection, const char* sql) { return PgResult(PQexec(connection, sql), &PQclear); };
  ASSERT_EQ(PQresultStatus(run(later.get(), "INSERT INTO fence (name, token) VALUES ('ledger', 50)").get()),
            PGRES_COMMAND_OK);

  ASSERT_EQ(PQresultStatus(run(later.get(), "BEGIN").get()), PGRES_COMMAND_OK);
  ASSERT_EQ(PQresultStatus(run(later.get(), "INSERT INTO fence (name, token) VALUES ('ledger', 200) "
                                            "ON CONFLICT (name) DO UPDATE SET token = excluded.token")
                               .get()),
            PGRES_COMMAND_OK);
  // The stale writer (token 100, higher than the committed 50) sends its whole transaction.
  ASSERT_EQ(PQsendQuery(stale.get(),
                        "BEGIN; INSERT INTO fence (name, token) VALUES ('ledger', 100) "
                        "ON CONFLICT (name) DO UPDATE SET token = excluded.token; "
                        "INSERT INTO entries (name, token, value) VALUES ('ledger', 100, 'stale'); COMMIT"),
            1);
  const int stale_pid = PQbackendPID(stale.get());
  const auto deadline = std::chrono::steady_clock::now() + scaled(10s);
  bool waiting = false;
  while (!waiting && std::chrono::steady_clock::now() < deadline) {
    PgResult blocked = run(observer.get(), fmt::format("SELECT count(*) FROM pg_locks WHERE pid = {} AND NOT granted",
                                                       stale_pid).c_str());
    waiting = PQresultStatus(blocked.get()) == PGRES_TUPLES_OK && std::string(PQgetvalue(blocked.get(), 0, 0)) != "0";
    if (!waiting) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(waiting) << "the stale writer never waited for the fence row's lock";
  ASSERT_EQ(PQresultStatus(run(later.get(), "INSERT INTO entries (name, token, value) VALUES ('ledger', 200, 'later')")
                               .get()),
            PGRES_COMMAND_OK);
  ASSERT_EQ(std::string(PQcmdStatus(run(later.get(), "COMMIT").get())), "COMMIT");

  std::optional<std::string> stale_state;
  while (PGresult* raw = PQgetResult(stale.get())) {
    PgResult result(raw, &PQclear);
    if (PQresultStatus(raw) == PGRES_FATAL_ERROR && !stale_state) {
      const char* state = PQresultErrorField(raw, PG_DIAG_SQLSTATE);
      stale_state = state ? state : "";
    }
  }
  EXPECT_EQ(stale_state, "ZF001");

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 200}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 200, "later"}));
}

// docs/fencing.md's write, run by psql as written (its :'name', :'token' and :'value' are psql
// variables), and its operator's lowering of a fence row on purpose, which nothing else can do.
TEST_F(PostgresFencingTest, DocumentedWriteAndLoweringRunAsWritten) {
  const std::string write_sql = documented_sql("The write, in one transaction, fence first");
  const std::string lower_sql = documented_sql("An operator lowers a name's token on purpose");
  ASSERT_FALSE(write_sql.empty());
  ASSERT_FALSE(lower_sql.empty());
  auto psql = [&](const std::string& sql, std::vector<std::string> variables) {
    std::vector<std::string> argv{"psql", server_->uri(), "-X", "-q", "-v", "ON_ERROR_STOP=1"};
    for (auto& variable : variables) {
      argv.push_back("-v");
      argv.push_back(std::move(variable));
    }
    std::ofstream(gate_dir_.file("snippet.sql")) << sql;
    argv.push_back("-f");
    argv.push_back(gate_dir_.file("snippet.sql").string());
    return run_to_end(std::move(argv));
  };
  const Outcome first = psql(write_sql, {"name=ledger", "token=200", "value=it's 200"});
  EXPECT_EQ(first.exit_code, 0) << write_sql << first.output;
  const Outcome stale = psql(write_sql, {"name=ledger", "token=100", "value=stale"});
  EXPECT_EQ(stale.exit_code, 3) << stale.output;
  EXPECT_THAT(stale.output, HasSubstr("stale fencing token 100 for ledger"));

  // Lowering without saying so is refused, for everyone; deleting is refused while rows refer to it.
  PgConnection connection(PQconnectdb(server_->uri().c_str()), &PQfinish);
  PgResult lowered(PQexec(connection.get(), "UPDATE fence SET token = 5 WHERE name = 'ledger'"), &PQclear);
  EXPECT_STREQ(PQresultErrorField(lowered.get(), PG_DIAG_SQLSTATE), "ZF001");
  PgResult deleted(PQexec(connection.get(), "DELETE FROM fence WHERE name = 'ledger'"), &PQclear);
  EXPECT_EQ(PQresultStatus(deleted.get()), PGRES_FATAL_ERROR);

  const Outcome operator_run = psql(lower_sql, {"name=ledger", "token=5"});
  EXPECT_EQ(operator_run.exit_code, 0) << lower_sql << operator_run.output;
  const Outcome after_rebuild = psql(write_sql, {"name=ledger", "token=10", "value=new ensemble"});
  EXPECT_EQ(after_rebuild.exit_code, 0) << after_rebuild.output;
  const Outcome below = psql(write_sql, {"name=ledger", "token=7", "value=stale again"});
  EXPECT_EQ(below.exit_code, 3) << below.output;

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 10}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 200, "it's 200"}, EntryRow{kName, 10, "new ensemble"}));
}

// A client that ignores the refusal and goes on, in a transaction that survives it, cannot commit
// its rows: psql with ON_ERROR_ROLLBACK (a savepoint around each statement) running the documented
// write, and a libpq client that rolls back to a savepoint after each failed statement.
TEST_F(PostgresFencingTest, IgnoringTheRefusalCannotCommit) {
  PgConnection connection(PQconnectdb(server_->uri().c_str()), &PQfinish);
  ASSERT_EQ(PQstatus(connection.get()), CONNECTION_OK) << PQerrorMessage(connection.get());
  auto run = [&](const std::string& sql) { return PgResult(PQexec(connection.get(), sql.c_str()), &PQclear); };
  ASSERT_EQ(PQresultStatus(run("BEGIN; INSERT INTO fence (name, token) VALUES ('ledger', 300); "
                               "INSERT INTO entries (name, token, value) VALUES ('ledger', 300, 'later'); COMMIT")
                               .get()),
            PGRES_COMMAND_OK);

  std::ofstream(gate_dir_.file("write.sql")) << documented_sql("The write, in one transaction, fence first");
  const Outcome psql = run_to_end({"psql", server_->uri(), "-X", "-v", "ON_ERROR_ROLLBACK=on", "-v", "name=ledger",
                                   "-v", "token=250", "-v", "value=psql ignoring", "-f",
                                   gate_dir_.file("write.sql").string()});
  std::cout << "psql -v ON_ERROR_ROLLBACK=on:\n" << psql.output;
  EXPECT_THAT(psql.output, HasSubstr("stale fencing token 250 for ledger in entries"))
      << "the COMMIT was not refused";

  // A savepoint per statement, by hand: the failed upsert is rolled back alone.
  auto in_savepoint = [&](const std::string& sql) {
    run("SAVEPOINT statement");
    PgResult result = run(sql);
    run(PQresultStatus(result.get()) == PGRES_FATAL_ERROR ? "ROLLBACK TO SAVEPOINT statement"
                                                          : "RELEASE SAVEPOINT statement");
    return result;
  };
  ASSERT_EQ(PQresultStatus(run("BEGIN").get()), PGRES_COMMAND_OK);
  PgResult upsert = in_savepoint("INSERT INTO fence (name, token) VALUES ('ledger', 250) "
                                 "ON CONFLICT (name) DO UPDATE SET token = excluded.token");
  EXPECT_STREQ(PQresultErrorField(upsert.get(), PG_DIAG_SQLSTATE), "ZF001");
  PgResult insert = in_savepoint("INSERT INTO entries (name, token, value) VALUES ('ledger', 250, 'savepoints')");
  EXPECT_EQ(PQresultStatus(insert.get()), PGRES_COMMAND_OK) << PQresultErrorMessage(insert.get());
  PgResult commit = run("COMMIT");
  EXPECT_EQ(PQresultStatus(commit.get()), PGRES_FATAL_ERROR) << "committed: " << PQcmdStatus(commit.get());
  EXPECT_STREQ(PQresultErrorField(commit.get(), PG_DIAG_SQLSTATE), "ZF001");

  // Rows written without admitting their token at all are refused at COMMIT too.
  ASSERT_EQ(PQresultStatus(run("BEGIN").get()), PGRES_COMMAND_OK);
  run("INSERT INTO entries (name, token, value) VALUES ('ledger', 400, 'never admitted')");
  PgResult unfenced = run("COMMIT");
  EXPECT_STREQ(PQresultErrorField(unfenced.get(), PG_DIAG_SQLSTATE), "ZF002") << PQresultErrorMessage(unfenced.get());

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 300}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 300, "later"}));
}

// A holder frozen inside its transaction holds the fence row's lock. The recipe's
// idle_in_transaction_session_timeout (the session's silence tolerance) makes the server end that
// transaction before the lock can be granted to B: B writes without waiting out the freeze, and
// A's write never commits.
TEST_F(PostgresFencingTest, WriterFrozenInsideItsTransactionLosesItBeforeTheNextIsGranted) {
  const FrozenInside run = writer_frozen_inside_its_transaction();
  EXPECT_TRUE(run.b_ended_while_a_was_frozen) << "B waited for the frozen A's transaction";
  EXPECT_EQ(run.b.exit_code, 0) << "B's write was not accepted";
  EXPECT_LT(run.b_after_grant, scaled(2s)) << "B waited on the fence row after its grant";
  EXPECT_EQ(run.a.exit_code, 1) << "A's transaction was not ended by the server";
  EXPECT_THAT(run.a.output, HasSubstr("nothing was written"));
  std::ifstream log(server_->state_dir() / "postgres.log");
  const std::string server_log((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_THAT(server_log, HasSubstr("terminating connection due to idle-in-transaction timeout"));

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  ASSERT_EQ(entries.size(), 1u) << "A's stale write committed";
  EXPECT_EQ(entries[0].value, "B");
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, entries[0].token}));
  EXPECT_GT(entries[0].token, run.token_a);
}

// testenv's server: never root, on 127.0.0.1 only, and gone (process and directory) afterwards.
TEST(PostgresServerTest, RunsUnprivilegedAndLeavesNothingBehind) {
  if (auto reason = zkr::testenv::PostgresServer::unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  pid_t pid = 0;
  std::filesystem::path state_dir;
  {
    zkr::testenv::PostgresServer server;
    pid = server.pid();
    state_dir = server.state_dir();
    EXPECT_THAT(server.uri(), HasSubstr("@127.0.0.1:"));
    std::ifstream status(fmt::format("/proc/{}/status", pid));
    std::string line;
    std::optional<long> uid;
    while (std::getline(status, line)) {
      if (line.starts_with("Uid:")) uid = std::stol(line.substr(4));
    }
    ASSERT_TRUE(uid) << "postmaster " << pid << " not found";
    EXPECT_NE(*uid, 0) << "postgres runs as root";
    if (::geteuid() != 0) {
      EXPECT_EQ(*uid, static_cast<long>(::geteuid()));
    }
    PgConnection connection(PQconnectdb(server.uri().c_str()), &PQfinish);
    EXPECT_EQ(PQstatus(connection.get()), CONNECTION_OK) << PQerrorMessage(connection.get());
  }
  // The pid may linger as a zombie until its adoptive parent reaps it; it must not run.
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  EXPECT_TRUE(text.empty() || (paren != std::string::npos && text[paren + 2] == 'Z')) << text;
  EXPECT_FALSE(std::filesystem::exists(state_dir));
}

// ---------------------------------------------------------------------------------------------
// SQLite

using SqliteDatabase = std::unique_ptr<sqlite3, decltype(&sqlite3_close)>;
using SqliteStatement = std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)>;

class SqliteFencingTest : public DatabaseFencingTest {
 protected:
  void SetUp() override {
    // The schema, with the command docs/fencing.md gives.
    const Outcome schema = run_to_end({"/bin/sh", "-c", "sqlite3 -bail \"$0\" < \"$1\"", database(),
                                       examples_dir + "/sqlite-schema.sql"});
    ASSERT_EQ(schema.exit_code, 0) << "sqlite3 (Debian package sqlite3) failed: " << schema.output;
  }

  std::string database() const override { return dir_.file("ledger.db").string(); }
  std::string database_kind() const override { return "SQLite"; }
  std::string writer_binary() const override { return ZKR_SQLITE_WRITER; }
  std::string shell_job() const override { return examples_dir + "/sqlite-write.sh"; }
  int shell_job_refused_code() const override { return 1; }  // sqlite3 -bail: a statement failed

  std::vector<FenceRow> fence_rows() override {
    std::vector<FenceRow> rows;
    select("SELECT name, token FROM fence ORDER BY name", [&](sqlite3_stmt* row) {
      rows.push_back({text(row, 0), sqlite3_column_int64(row, 1)});
    });
    return rows;
  }

  std::vector<EntryRow> entry_rows() override {
    std::vector<EntryRow> rows;
    select("SELECT name, token, value FROM entries ORDER BY id", [&](sqlite3_stmt* row) {
      rows.push_back({text(row, 0), sqlite3_column_int64(row, 1), text(row, 2)});
    });
    return rows;
  }

  static std::string text(sqlite3_stmt* row, int column) {
    const auto* value = sqlite3_column_text(row, column);
    return value ? reinterpret_cast<const char*>(value) : "";
  }

  template <typename Each>
  void select(const char* sql, Each each) {
    sqlite3* raw = nullptr;
    const int opened = sqlite3_open_v2(database().c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    SqliteDatabase db(raw, &sqlite3_close);
    ASSERT_EQ(opened, SQLITE_OK) << sqlite3_errstr(opened);
    sqlite3_stmt* statement = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(raw, sql, -1, &statement, nullptr), SQLITE_OK) << sqlite3_errmsg(raw);
    SqliteStatement owned(statement, &sqlite3_finalize);
    int code;
    while ((code = sqlite3_step(statement)) == SQLITE_ROW) each(statement);
    EXPECT_EQ(code, SQLITE_DONE) << sqlite3_errmsg(raw);
  }

  TempDir dir_{"zkr-sqlite"};
};

TEST_F(SqliteFencingTest, FrozenCxxWriterIsRefused) { frozen_example_writer_is_refused(); }

TEST_F(SqliteFencingTest, FrozenZklockJobWithSqlite3IsRefused) { frozen_zklock_job_is_refused(); }

// docs/fencing.md's SQLite write, as sqlite3 runs it with its parameters set. A stale writer that
// goes on after errors (sqlite3 without -bail) commits nothing: its row is refused and its upsert
// rolls the transaction back. Outside a transaction a stale row is refused too, and a row with a
// newer token raises the fence with it: no row stands with a token the fence has not admitted.
TEST_F(SqliteFencingTest, IgnoringTheRefusalCannotWrite) {
  const std::string write_sql = documented_sql("The write, in one transaction begun with `BEGIN IMMEDIATE`");
  ASSERT_FALSE(write_sql.empty());
  auto with_parameters = [&](std::int64_t token, std::string_view value) {
    return fmt::format(".parameter set :name \"'{}'\"\n.parameter set :token {}\n.parameter set :value \"'{}'\"\n{}",
                       kName, token, value, write_sql);
  };
  const Outcome later = run_to_end({"/bin/sh", "-c", "printf '%s' \"$1\" | sqlite3 -bail \"$0\"", database(),
                                    with_parameters(300, "later")});
  ASSERT_EQ(later.exit_code, 0) << later.output;
  // From standard input, as a script: sqlite3 without -bail goes on after an error there.
  const Outcome ignoring = run_to_end({"/bin/sh", "-c", "printf '%s' \"$1\" | sqlite3 \"$0\"", database(),
                                       with_parameters(250, "ignoring")});
  std::cout << "sqlite3 without -bail:\n" << ignoring.output;
  EXPECT_THAT(ignoring.output, HasSubstr("stale fencing token"));
  const Outcome stale_alone = run_to_end(
      {"sqlite3", database(), "INSERT INTO entries (name, token, value) VALUES ('ledger', 250, 'stale alone')"});
  EXPECT_NE(stale_alone.exit_code, 0) << stale_alone.output;
  EXPECT_THAT(stale_alone.output, HasSubstr("stale fencing token"));
  const Outcome newer_alone = run_to_end(
      {"sqlite3", database(), "INSERT INTO entries (name, token, value) VALUES ('ledger', 400, 'newer alone')"});
  EXPECT_EQ(newer_alone.exit_code, 0) << newer_alone.output;

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 400}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 300, "later"}, EntryRow{kName, 400, "newer alone"}));
}

// A stale writer that ignores every error (sqlite3 reading a script without -bail: it goes on
// after each failed statement) and whose transaction touches more than the guarded table: 20,000
// rows into a table without triggers, a DELETE of the newer holder's row, a CREATE TABLE. Its
// transaction follows docs/fencing.md (data writes, then the fence upsert last). Nothing of it may
// commit, in either journal mode: a refused data row fails alone and leaves the transaction open,
// and the stale upsert that ends it rolls it all back.
class SqliteStaleWriterTest : public SqliteFencingTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(SqliteStaleWriterTest, IgnoringEveryErrorCommitsNothing) {
  const std::string journal_mode = GetParam();
  const Outcome setup = run_to_end({"sqlite3", "-bail", database(),
                                    fmt::format("PRAGMA journal_mode = {};", journal_mode),
                                    "CREATE TABLE notes (value TEXT NOT NULL) STRICT;"});
  ASSERT_EQ(setup.exit_code, 0) << setup.output;
  ASSERT_THAT(setup.output, HasSubstr(journal_mode == "wal" ? "wal" : "delete"));
  // The newer holder's write admits its token first: both orders are right for a writer that is
  // not stale (and this one runs on a schema of either version).
  const std::string newer =
      "BEGIN IMMEDIATE;\n"
      "INSERT INTO fence (name, token) VALUES ('ledger', 300) ON CONFLICT (name) DO UPDATE SET token = excluded.token;\n"
      "INSERT INTO entries (name, token, value) VALUES ('ledger', 300, 'newer');\n"
      "COMMIT;\n";
  const Outcome written = run_to_end({"sqlite3", "-bail", database(), newer});
  ASSERT_EQ(written.exit_code, 0) << written.output;

  const std::string stale =
      "BEGIN IMMEDIATE;\n"
      "INSERT INTO entries (name, token, value) VALUES ('ledger', 250, 'stale');\n"
      "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)\n"
      "  INSERT INTO notes (value) SELECT 'stale ' || i FROM n;\n"
      "DELETE FROM entries WHERE token = 300;\n"
      "CREATE TABLE stale_ddl (x INTEGER);\n"
      "INSERT INTO entries (name, token, value) VALUES ('ledger', 250, 'stale again');\n"
      "INSERT INTO fence (name, token) VALUES ('ledger', 250) ON CONFLICT (name) DO UPDATE SET token = excluded.token;\n"
      "COMMIT;\n";
  const Outcome ignoring = run_to_end({"/bin/sh", "-c", "printf '%s' \"$1\" | sqlite3 \"$0\"", database(), stale});
  std::cout << "stale sqlite3 without -bail (" << journal_mode << "):\n" << ignoring.output;
  EXPECT_THAT(ignoring.output, HasSubstr("stale fencing token"));

  const Outcome left = run_to_end({"sqlite3", "-bail", database(),
                                   "SELECT 'notes=' || count(*) FROM notes;",
                                   "SELECT 'stale_ddl=' || count(*) FROM sqlite_schema WHERE name = 'stale_ddl';"});
  ASSERT_EQ(left.exit_code, 0) << left.output;
  EXPECT_THAT(left.output, HasSubstr("notes=0"));
  EXPECT_THAT(left.output, HasSubstr("stale_ddl=0"));
  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 300}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 300, "newer"}));
}

INSTANTIATE_TEST_SUITE_P(JournalModes, SqliteStaleWriterTest, ::testing::Values("wal", "delete"),
                         [](const auto& instance) { return std::string(instance.param); });

// docs/fencing.md's operator step for SQLite: delete the name's row, and the next writer starts it
// again from its own token. An update that lowers it is refused.
TEST_F(SqliteFencingTest, AnOperatorLowersTheFenceByDeletingItsRow) {
  const std::string write = "BEGIN IMMEDIATE; INSERT INTO entries (name, token, value) VALUES ('ledger', {0}, 'v{0}'); "
                            "INSERT INTO fence (name, token) VALUES ('ledger', {0}) "
                            "ON CONFLICT (name) DO UPDATE SET token = excluded.token; COMMIT;";
  ASSERT_EQ(run_to_end({"sqlite3", "-bail", database(), fmt::format(fmt::runtime(write), 300)}).exit_code, 0);
  const Outcome lowered = run_to_end({"sqlite3", "-bail", database(), "UPDATE fence SET token = 5 WHERE name = 'ledger'"});
  EXPECT_NE(lowered.exit_code, 0);
  EXPECT_THAT(lowered.output, HasSubstr("stale fencing token"));
  const std::string operator_sql = documented_sql("In SQLite an operator deletes the row");
  ASSERT_FALSE(operator_sql.empty());
  std::ofstream(dir_.file("reset.sql")) << operator_sql;
  const Outcome reset = run_to_end({"/bin/sh", "-c", "sqlite3 -bail \"$0\" < \"$1\"", database(),
                                    dir_.file("reset.sql").string()});
  EXPECT_EQ(reset.exit_code, 0) << operator_sql << reset.output;
  EXPECT_EQ(run_to_end({"sqlite3", "-bail", database(), fmt::format(fmt::runtime(write), 10)}).exit_code, 0);

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, 10}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, 300, "v300"}, EntryRow{kName, 10, "v10"}));
}

// A holder frozen inside its transaction holds the file's write lock, and nothing outside it can
// end that transaction. The recipe bounds the next holder's wait with its busy timeout (twice the
// session's silence tolerance): B gives up with SQLITE_BUSY, nothing written, instead of waiting
// out the freeze. A's write lands when it thaws, before any write of B's (ordered, lower token).
TEST_F(SqliteFencingTest, WriterFrozenInsideItsTransactionHoldsTheNextOnlyForTheBusyTimeout) {
  const FrozenInside run = writer_frozen_inside_its_transaction();
  EXPECT_TRUE(run.b_ended_while_a_was_frozen) << "B waited out the frozen A's transaction";
  EXPECT_EQ(run.b.exit_code, 1);
  EXPECT_THAT(run.b.output, HasSubstr("database is locked"));
  EXPECT_LT(run.b_after_grant, scaled(4s)) << "B's wait for the file's lock was not bounded by the recipe";
  EXPECT_EQ(run.a.exit_code, 0) << "A's write, the only one, should have landed on thaw";

  const auto fence = fence_rows();
  const auto entries = entry_rows();
  show(database_kind(), fence, entries);
  EXPECT_THAT(fence, ElementsAre(FenceRow{kName, run.token_a}));
  EXPECT_THAT(entries, ElementsAre(EntryRow{kName, run.token_a, "A"}));
}

}  // namespace
