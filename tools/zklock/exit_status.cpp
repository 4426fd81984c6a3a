// SPDX-License-Identifier: Apache-2.0
#include "exit_status.hpp"

#include <sys/wait.h>

#include <zkr/error.hpp>

#include "cli_options.hpp"

namespace zklock {

bool is_conflict(std::error_code error) {
  return error == zkr::errc::would_block || error == zkr::errc::timed_out;
}

// The library's conditions decide; zklock only names the exit code of each.
int exit_code_for(std::error_code error, const CliOptions& options) {
  if (is_conflict(error)) return options.conflict_exit_code;
  if (error == zkr::condition::bad_input) return exit_code::usage;
  if (error == zkr::condition::no_permission) return exit_code::no_permission;
  if (error == zkr::condition::connection_trouble || error == zkr::condition::session_ended) {
    return exit_code::unavailable;
  }
  return exit_code::internal;
}

int exit_code_from_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return exit_code::signal_base + WTERMSIG(wait_status);
  return exit_code::internal;
}

}  // namespace zklock
