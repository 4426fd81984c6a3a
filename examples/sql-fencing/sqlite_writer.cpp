// SPDX-License-Identifier: Apache-2.0
// A job that writes to an SQLite file under a ZooKeeper lock, fenced by its token
// (sqlite-schema.sql; docs/fencing.md). For a resource on one host: SQLite's locking does not
// hold on network file systems.
//
// Usage: zkr_sqlite_writer SERVERS LOCKPATH DATABASE_FILE NAME VALUE [options of fenced_job.hpp]
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <sqlite3.h>

#include "fenced_job.hpp"

namespace {

using Database = std::unique_ptr<sqlite3, decltype(&sqlite3_close)>;
using Prepared = std::unique_ptr<sqlite3_stmt, decltype(&sqlite3_finalize)>;

struct Statement {
  std::string sql;
  std::vector<std::variant<std::int64_t, std::string>> parameters;  // bound, never parsed as SQL
};

// The schema's triggers refuse a stale token with RAISE(ABORT, ...) on a data row (the transaction
// stays open) or RAISE(ROLLBACK, ...) on the fence upsert (the transaction is gone); SQLite reports
// either as this extended code.
bool refused(sqlite3* db, int code) {
  return code == SQLITE_CONSTRAINT_TRIGGER &&
         std::string_view(sqlite3_errmsg(db)).starts_with("stale fencing token");
}

// Runs one statement with its parameters bound as text or integers. Returns its result code.
int run(sqlite3* db, const Statement& statement) {
  sqlite3_stmt* raw = nullptr;
  if (int code = sqlite3_prepare_v2(db, statement.sql.c_str(), -1, &raw, nullptr); code != SQLITE_OK) return code;
  Prepared prepared(raw, &sqlite3_finalize);
  int index = 1;
  for (const auto& parameter : statement.parameters) {
    if (const auto* number = std::get_if<std::int64_t>(&parameter)) {
      sqlite3_bind_int64(raw, index++, *number);
    } else {
      const std::string& text = std::get<std::string>(parameter);
      sqlite3_bind_text(raw, index++, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    }
  }
  const int code = sqlite3_step(raw);
  return code == SQLITE_DONE ? SQLITE_OK : code;
}

sql_fencing::WriteOutcome write_entry(const sql_fencing::WriteRequest& request) {
  const std::string& file = request.database;
  sqlite3* raw = nullptr;
  const int opened = sqlite3_open_v2(file.c_str(), &raw, SQLITE_OPEN_READWRITE, nullptr);
  Database db(raw, &sqlite3_close);
  if (opened != SQLITE_OK) {
    throw std::runtime_error(fmt::format("cannot open {}: {}", file, raw ? sqlite3_errmsg(raw) : sqlite3_errstr(opened)));
  }
  sqlite3_extended_result_codes(raw, 1);
  // Another writer holds the file's write lock: wait for it, but not for ever. Nothing can end a
  // frozen writer's transaction from outside: it keeps the lock for its whole freeze, and this
  // writer gets SQLITE_BUSY (nothing written) after the bound.
  sqlite3_busy_timeout(raw, static_cast<int>(request.lock_wait_bound.count()));
  auto run_checked = [&](const Statement& statement) {
    const int code = run(raw, statement);
    if (code != SQLITE_OK && !refused(raw, code)) {
      throw std::runtime_error(fmt::format("SQLite {}: {} ({})", file, sqlite3_errmsg(raw), statement.sql));
    }
    return code == SQLITE_OK;
  };
  // BEGIN IMMEDIATE takes the write lock before the token is compared: writers of the file are
  // serialized, and each sees the token the one before it committed.
  run_checked({"BEGIN IMMEDIATE", {}});
  if (request.pause_in_transaction) request.pause_in_transaction();
  // The data first, the fence upsert last (docs/fencing.md): a refusal anywhere leaves nothing of
  // the transaction to commit, even for a writer that would go on after an error.
  if (!run_checked({"INSERT INTO entries (name, token, value) VALUES (?1, ?2, ?3)",
                    {request.name, request.token, request.value}})) {
    run(raw, {"ROLLBACK", {}});  // a refused row leaves the transaction open: end it here
    return sql_fencing::WriteOutcome::refused;
  }
  if (!run_checked({"INSERT INTO fence (name, token) VALUES (?1, ?2) "
                    "ON CONFLICT (name) DO UPDATE SET token = excluded.token",
                    {request.name, request.token}}))
    return sql_fencing::WriteOutcome::refused;  // rolled back by the trigger
  run_checked({"COMMIT", {}});
  return sql_fencing::WriteOutcome::written;
}

}  // namespace

int main(int argc, char** argv) { return sql_fencing::run_fenced_job("zkr_sqlite_writer", argc, argv, write_entry); }
