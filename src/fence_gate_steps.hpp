// SPDX-License-Identifier: Apache-2.0
// The steps of DurableFenceGate's file write, for the test that kills a process after each one.
// Not installed, not part of the API.
#pragma once

namespace zkr::detail {

enum class GateWriteStep {
  temporary_written,  // the new contents are in the temporary file (maybe only in the page cache)
  temporary_synced,   // ... and on disk
  renamed,            // the temporary file replaced the gate file
  directory_synced,   // ... and the rename is on disk: the new token is durable
};

// Called after each step of every write of every DurableFenceGate in the process; nullptr (the
// default) for none. Set it before opening a gate.
void set_gate_write_observer(void (*observer)(GateWriteStep)) noexcept;

}  // namespace zkr::detail
