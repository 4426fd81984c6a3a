// SPDX-License-Identifier: Apache-2.0
// zklock's exit codes, and the one place where library failures are turned into them.
#pragma once

#include <system_error>

namespace zklock {

struct CliOptions;

namespace exit_code {
inline constexpr int usage = 64;           // bad option, value or lock path (EX_USAGE)
inline constexpr int data_error = 65;      // --once-per: the path's run record is not zklock's (EX_DATAERR)
inline constexpr int no_such_path = 66;    // --list: the lock path (or the chroot) does not exist (EX_NOINPUT)
inline constexpr int unavailable = 69;     // ensemble unreachable, session gone (EX_UNAVAILABLE)
inline constexpr int internal = 70;        // anything the library reports that fits nothing else
inline constexpr int no_permission = 77;   // authentication or ACL refusal (EX_NOPERM)
inline constexpr int cannot_execute = 126;  // as the shell: found but not executable
inline constexpr int not_found = 127;       // as the shell: command not found
inline constexpr int signal_base = 128;     // 128+N: killed by (or interrupted with) signal N
}  // namespace exit_code

// Maps a failure to reach, wait for or take the lock to an exit code. A conflict (the lock is held
// with -n, or the -w timeout ran out) maps to options.conflict_exit_code.
int exit_code_for(std::error_code error, const CliOptions& options);

// True for the conflict outcomes (would_block, timed_out).
bool is_conflict(std::error_code error);

// A waitpid() status as a shell reports it: the exit code, or 128+N if killed by signal N.
int exit_code_from_wait_status(int wait_status);

}  // namespace zklock
