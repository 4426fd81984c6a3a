// SPDX-License-Identifier: Apache-2.0
// A job that writes to PostgreSQL under a ZooKeeper lock, fenced by its token
// (postgres-schema.sql; docs/fencing.md).
//
// Usage: zkr_postgres_writer SERVERS LOCKPATH DATABASE_URL NAME VALUE [options of fenced_job.hpp]
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <libpq-fe.h>

#include "fenced_job.hpp"

namespace {

// The SQLSTATE the schema's trigger raises for a token lower than one admitted before.
constexpr const char* kStaleToken = "ZF001";

using Connection = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

struct Statement {
  std::string sql;
  std::vector<std::string> parameters;  // sent as text, apart from the SQL: never parsed as SQL
};

Result execute(PGconn* connection, const Statement& statement) {
  std::vector<const char*> values;
  for (const std::string& parameter : statement.parameters) values.push_back(parameter.c_str());
  return Result(PQexecParams(connection, statement.sql.c_str(), static_cast<int>(values.size()), nullptr,
                             values.data(), nullptr, nullptr, 0),
                &PQclear);
}

bool failed(const PGresult* result) {
  const ExecStatusType status = PQresultStatus(result);
  return status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK;
}

bool refused(const PGresult* result) {
  const char* state = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  return state && std::strcmp(state, kStaleToken) == 0;
}

sql_fencing::WriteOutcome write_entry(const sql_fencing::WriteRequest& request) {
  Connection connection(PQconnectdb(request.database.c_str()), &PQfinish);
  if (PQstatus(connection.get()) != CONNECTION_OK) {
    throw std::runtime_error(fmt::format("cannot connect to PostgreSQL: {}", PQerrorMessage(connection.get())));
  }
  bool in_transaction = false;
  auto run = [&](const Statement& statement) {
    Result result = execute(connection.get(), statement);
    if (failed(result.get()) && !refused(result.get())) {
      if (in_transaction && statement.sql != "COMMIT" && PQstatus(connection.get()) == CONNECTION_BAD) {
        throw std::runtime_error(fmt::format(
            "PostgreSQL ended the session before COMMIT, so nothing was written (a transaction idle for "
            "longer than idle_in_transaction_session_timeout, {} ms, is ended): {}",
            request.idle_bound.count(), PQresultErrorMessage(result.get())));
      }
      throw std::runtime_error(fmt::format("PostgreSQL: {}", PQresultErrorMessage(result.get())));
    }
    return result;
  };
  const std::string token = std::to_string(request.token);
  // Bounds on how long a frozen writer can hold up the next one (values in milliseconds): the
  // server ends this session if its transaction sits idle past idle_bound (a writer frozen inside
  // it loses it, and the fence row's lock, before its ZooKeeper lock can go to anyone else), and
  // this writer gives up waiting for another's lock on the fence row after lock_wait_bound.
  run({fmt::format("SET idle_in_transaction_session_timeout = {}", request.idle_bound.count()), {}});
  run({fmt::format("SET lock_timeout = {}", request.lock_wait_bound.count()), {}});
  // The token check and the data write in one transaction: both commit, or neither does. The
  // upsert locks the name's fence row, so concurrent writers of one name are serialized and each
  // is compared with the token the one before it committed.
  run({"BEGIN", {}});
  in_transaction = true;
  Result admitted = run({"INSERT INTO fence (name, token) VALUES ($1, $2) "
                         "ON CONFLICT (name) DO UPDATE SET token = excluded.token",
                         {request.name, token}});
  if (refused(admitted.get())) return sql_fencing::WriteOutcome::refused;  // closing rolls back
  if (request.pause_in_transaction) request.pause_in_transaction();
  Result inserted = run({"INSERT INTO entries (name, token, value) VALUES ($1, $2, $3)",
                         {request.name, token, request.value}});
  if (refused(inserted.get())) return sql_fencing::WriteOutcome::refused;
  // The schema checks every row's token again at COMMIT (ZF001 there too). A COMMIT whose reply
  // is lost leaves the outcome unknown: look at the data before doing the write again.
  Result commit = run({"COMMIT", {}});
  if (refused(commit.get())) return sql_fencing::WriteOutcome::refused;
  if (std::strcmp(PQcmdStatus(commit.get()), "COMMIT") != 0) {
    throw std::runtime_error(fmt::format("PostgreSQL: COMMIT ended as {}", PQcmdStatus(commit.get())));
  }
  return sql_fencing::WriteOutcome::written;
}

}  // namespace

int main(int argc, char** argv) { return sql_fencing::run_fenced_job("zkr_postgres_writer", argc, argv, write_entry); }
