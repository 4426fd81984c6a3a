// SPDX-License-Identifier: Apache-2.0
// A private PostgreSQL server for a test: the C++ face of testenv/pgenv.py. It links no client
// library; a test talks to the server with libpq or psql through uri().
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <memory>
#include <vector>

#include "managed_directory.hpp"

namespace zkr::testenv {

// initdb in a fresh temporary directory and a postgres on 127.0.0.1, on a port chosen at run time,
// as an unprivileged user when the test runs as root. Never a system service: clusters managed by
// pg_ctlcluster (and their port and socket directory) are not touched. A watchdog stops the server
// if the test process dies without running the destructor.
class PostgresServer {
 public:
  // Why no server can be started here (no PostgreSQL binaries); empty if one can. Tests skip
  // with this reason.
  static std::string unavailable_reason();

  PostgresServer();   // throws std::runtime_error carrying pgenv.py's message
  ~PostgresServer();  // fast shutdown (SIGINT), SIGKILL if needed; removes the directory
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // "postgresql://zkr:PASSWORD@127.0.0.1:PORT/postgres?connect_timeout=10": for libpq and psql.
  const std::string& uri() const { return uri_; }
  pid_t pid() const { return pid_; }  // the postmaster
  const std::filesystem::path& state_dir() const { return directory_->path(); }  // log: postgres.log

 private:
  std::unique_ptr<ManagedDirectory> directory_;
  std::string uri_;
  pid_t pid_ = 0;
};

}  // namespace zkr::testenv
