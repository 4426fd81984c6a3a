// SPDX-License-Identifier: Apache-2.0
// PostgresServer: starts and stops a server through testenv/pgenv.py, in a ManagedDirectory.
#include "postgres.hpp"

#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "testenv.hpp"

namespace zkr::testenv {

std::string PostgresServer::unavailable_reason() { return ManagedDirectory::unavailable_reason("pgenv.py"); }

PostgresServer::PostgresServer() : directory_(std::make_unique<ManagedDirectory>("zkr-postgres", "pgenv.py")) {
  try {
    std::vector<std::string> start = {"start", "--timeout", fmt::format("{}", 30 * timeout_scale())};
    for (auto& argument : directory_->owner_arguments()) start.push_back(std::move(argument));
    // Prints the URI, then "pid N". pgenv.py bounds its own waits (initdb, 30 s to accept
    // connections).
    std::istringstream lines(directory_->run(start, scaled(std::chrono::seconds(120))));
    std::string pid_line;
    std::getline(lines, uri_);
    std::getline(lines, pid_line);
    if (!uri_.starts_with("postgresql://") || !pid_line.starts_with("pid ")) {
      throw std::runtime_error(fmt::format("pgenv.py start printed '{}' and '{}'", uri_, pid_line));
    }
    pid_ = static_cast<pid_t>(std::stol(pid_line.substr(4)));
  } catch (...) {
    directory_->keep();  // stopped all the same; postgres.log says why the start failed
    throw;
  }
}

PostgresServer::~PostgresServer() = default;

}  // namespace zkr::testenv
