// SPDX-License-Identifier: Apache-2.0
// A fenced resource in its own process, for the tests that kill it mid-write.
// Usage: zkr_test_fence_gate GATE_FILE APPLIED_FILE CRASH_AT N TOKEN...
// Opens a DurableFenceGate on GATE_FILE and prints "HIGHEST <token>" for key "ledger" (0 if none).
// Then, for each TOKEN: admits it for "ledger"; prints "ADMITTED <token>" and applies the write
// (appends the token to APPLIED_FILE and fsyncs it), or prints "REFUSED <token>". CRASH_AT makes it
// SIGKILL itself: after step CRASH_AT (temporary_written, temporary_synced, renamed,
// directory_synced) of the N-th file write of an admit, or with CRASH_AT "admitted" after printing
// the N-th ADMITTED and before applying that write; "none" never. A failure to open the gate is
// printed as "ERROR <what>" on stderr with exit status 2.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>

#include "fence_gate_steps.hpp"

namespace {

using zkr::detail::GateWriteStep;

std::string_view crash_at;
int crash_on = 0;
int writes_seen = 0;

std::string_view step_name(GateWriteStep step) {
  switch (step) {
    case GateWriteStep::temporary_written: return "temporary_written";
    case GateWriteStep::temporary_synced: return "temporary_synced";
    case GateWriteStep::renamed: return "renamed";
    case GateWriteStep::directory_synced: return "directory_synced";
  }
  return "?";
}

void on_write_step(GateWriteStep step) {
  if (step == GateWriteStep::temporary_written) ++writes_seen;
  if (writes_seen == crash_on && step_name(step) == crash_at) ::raise(SIGKILL);
}

void apply(const char* applied_file, long long token) {
  int fd = ::open(applied_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  auto line = fmt::format("{}\n", token);
  if (fd < 0 || ::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()) || ::fsync(fd) != 0) {
    std::perror("apply");
    std::exit(3);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    fmt::print(stderr, "usage: zkr_test_fence_gate GATE_FILE APPLIED_FILE CRASH_AT N TOKEN...\n");
    return 64;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  crash_at = argv[3];
  crash_on = std::atoi(argv[4]);
  try {
    zkr::DurableFenceGate gate(argv[1]);
    zkr::detail::set_gate_write_observer(on_write_step);  // count only the writes of admits
    fmt::print("HIGHEST {}\n", gate.highest("ledger").value_or(zkr::FencingToken()).value());
    int admitted = 0;
    for (int i = 5; i < argc; ++i) {
      zkr::FencingToken token(std::atoll(argv[i]));
      if (!gate.admit("ledger", token)) {
        fmt::print("REFUSED {}\n", token.value());
        continue;
      }
      fmt::print("ADMITTED {}\n", token.value());
      if (crash_at == "admitted" && ++admitted == crash_on) ::raise(SIGKILL);
      apply(argv[2], token.value());
    }
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "ERROR {}\n", e.what());
    return 2;
  }
  return 0;
}
