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

sql_fencing::WriteOutcome write_entry(const std::string& database, const std::string& name, std::int64_t token,
                                const std::string& value) {
  Connection connection(PQconnectdb(database.c_str()), &PQfinish);
  if (PQstatus(connection.get()) != CONNECTION_OK) {
    throw std::runtime_error(fmt::format("cannot connect to PostgreSQL: {}", PQerrorMessage(connection.get())));
  }
  const std::string token_text = std::to_string(token);
  // The token check and the data write in one transaction: both commit, or neither does. The
  // upsert locks the name's fence row, so concurrent writers of one name are serialized and each
  // is compared with the token the one before it committed.
  const std::vector<Statement> transaction = {
      {"BEGIN", {}},
      {"INSERT INTO fence (name, token) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET token = excluded.token",
       {name, token_text}},
      {"INSERT INTO entries (name, token, value) VALUES ($1, $2, $3)", {name, token_text, value}},
  };
  for (const Statement& statement : transaction) {
    Result result = execute(connection.get(), statement);
    if (refused(result.get())) return sql_fencing::WriteOutcome::refused;  // closing rolls back
    if (failed(result.get())) {
      throw std::runtime_error(fmt::format("PostgreSQL: {}", PQresultErrorMessage(result.get())));
    }
  }
  Result commit = execute(connection.get(), {"COMMIT", {}});
  if (failed(commit.get()) || std::strcmp(PQcmdStatus(commit.get()), "COMMIT") != 0) {
    // A COMMIT that does not answer leaves the outcome unknown: look at the data before redoing.
    throw std::runtime_error(fmt::format("PostgreSQL: COMMIT failed: {}", PQresultErrorMessage(commit.get())));
  }
  return sql_fencing::WriteOutcome::written;
}

}  // namespace

int main(int argc, char** argv) { return sql_fencing::run_fenced_job("zkr_postgres_writer", argc, argv, write_entry); }
