// SPDX-License-Identifier: Apache-2.0
#include <zkr/fence_gate.hpp>

// README.md and fencing.md: the resource's gate, a durable one's failures caught as zkr::Error.
bool header_fence_gate_uses(zkr::FencingToken token) {
  zkr::FenceGate gate;
  if (!gate.admit("ledger", token)) return false;
  try {
    zkr::DurableFenceGate durable("/var/lib/app/fence");
    return durable.admit("ledger", token);
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::corrupt_state;
  }
}
