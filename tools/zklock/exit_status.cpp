#include "exit_status.hpp"

#include <sys/wait.h>

#include <zkr/error.hpp>

#include "cli_options.hpp"

namespace zklock {

bool is_conflict(std::error_code error) {
  return error == zkr::errc::would_block || error == zkr::errc::timed_out;
}

int exit_code_for(std::error_code error, const CliOptions& options) {
  if (is_conflict(error)) return options.conflict_exit_code;
  if (error == zkr::errc::invalid_path || error == zkr::errc::invalid_connect_string ||
      error == zkr::errc::invalid_argument) {
    return exit_code::usage;
  }
  if (error == zkr::errc::auth_failed || error == zkr::zk_errc::auth_failed ||
      error == zkr::zk_errc::no_auth || error == zkr::zk_errc::invalid_acl) {
    return exit_code::no_permission;
  }
  if (error == zkr::errc::connect_timeout || error == zkr::errc::session_lost ||
      error == zkr::errc::session_closed || error == zkr::zk_errc::connection_loss ||
      error == zkr::zk_errc::operation_timeout || error == zkr::zk_errc::session_expired ||
      error == zkr::zk_errc::session_moved || error == zkr::zk_errc::closing ||
      error == zkr::zk_errc::invalid_state) {
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
