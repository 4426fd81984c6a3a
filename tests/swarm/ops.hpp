// SPDX-License-Identifier: Apache-2.0
// The swarm's operations: what an actor may do with the public API (include/zkr/*.hpp), and the
// faults a world may inject. An operation is five small numbers, so that a run is a list of them,
// printed and parsed back as text ("acquire:0.1.2.5 move:0.1.2.9 ...") to replay it.
//
// Operations name what they act on relatively (the newest hold of actor 0 on resource 2, the
// session in slot 1), never by an outcome of an earlier step: a list with steps removed still
// means something, which is what shrinking needs. An operation whose object is missing when it
// runs (nothing held, no batch open) does nothing.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/election.hpp>
#include <zkr/semaphore.hpp>

namespace zkr::swarm {

enum class OpKind : std::uint8_t {
  // Acquisitions of a lock, read or write lock, or semaphore (arg: owner data size, timeout, variant).
  acquire,             // blocking acquire(stop)
  try_acquire,         // try_acquire(): never waits
  try_acquire_for,     // try_acquire_for(timeout, stop), the throwing form
  try_acquire_for_ec,  // try_acquire_for(timeout, stop, ec), the form that never throws
  async_acquire,       // async_acquire(timeout, handler, stop); variant: the handler drops what it got;
                       //   unstoppable: for ever without a stop token (the start window's)
  // Holds (arg: which hold, newest first; move: to which actor; variant).
  release,
  release_and_confirm,
  destroy,          // the HeldLock's destructor
  move,             // move-construct the HeldLock on another actor's thread
  release_on_loss,  // on_lost callback that releases the hold from the callback thread
  fenced_commit,    // FencedTransaction(hold).set(...).commit(); variant: release the hold first
  gate_admit,       // DurableFenceGate::admit(path, token)
  // Elections (resource: a latch or the selector; watches take any election resource).
  latch_start,
  latch_close,
  latch_resign,
  latch_wait,        // wait_for_leadership(timeout)
  latch_async_wait,  // async_wait_for_leadership(timeout)
  latch_fenced,      // FencedTransaction(leadership()).commit()
  latch_close_on_gain,  // an on_change listener that closes the latch when it gains leadership
  selector_start,
  selector_close,
  selector_yield,         // the running leadership function returns
  selector_close_inside,  // the next term's function closes its own selector
  watch_start,
  watch_stop,
  watch_stop_inside,  // the watch's next callback stops it
  cache_start,  // a TreeCache of the whole swarm tree on the session (one per session)
  cache_stop,
  // Acquisition batches, on the actor's thread.
  batch_open,
  batch_send,
  batch_destroy,
  // Control.
  await_async,  // the actor waits for its async acquisitions that must end promptly
  cancel,       // request stop of the actor's waits (arg 0: its blocking call, else its asyncs too)
  // Sessions.
  session_close,
  session_reopen,
  session_close_on_change,  // a state listener that closes its own session on the next change
  gate_reopen,              // the resource restarts: the gate is closed and opened again
  // Faults (session: where; arg: how many steps it lasts).
  fault_lost_reply,     // the next create takes effect and its reply is lost with the connection
  fault_failed_create,  // the next create fails before it takes effect, the connection drops
  fault_drop,           // the connection drops
  fault_expire,         // the server expires the session; the client hears it when it reconnects
  fault_partition,      // cut off, and expired on the server while cut off
  fault_pause,          // replies are held (a slow link)
  fault_break,          // an operator breaks the holder of the resource (zkr::break_holder)
  fault_restart,        // the server restarts (real servers only)
  fault_freeze,         // the session's worker stops for 3/8 of the timeout, as in a frozen process
                        // (real servers only; no loss may follow from it alone)
  fault_move,           // Session::set_servers moves the session between its proxy and the server's
                        // own port, each list leaving out the other (real servers only; it is a
                        // reconnection: no loss under LossPolicy::at_deadline)
  // The shared counter, on actors' threads (arg 0-3: one add of arg + 1; 4 and up: a burst of
  // calls in flight at once, see counters.cpp).
  counter_add,  // SharedCounter calls on the run's counter
  // The rest of the catalogue (catalogue.cpp), posted every few steps like counter_add.
  multi_acquire,   // MultiLock::async_acquire over two or three of lock0-lock2 (arg: paths, timeout class)
  multi_release,   // HeldMultiLock::release of the actor's newest multi-lock hold
  group_join,      // GroupMember (arg: which of the session's members) joins
  group_leave,     // ... leaves
  view_start,      // a GroupView of the group on the session (one per session)
  view_stop,
  barrier_set,     // Barrier::set on the swarm's barrier
  barrier_remove,  // Barrier::remove
  barrier_wait,    // Barrier::async_wait (arg: timeout class)
  double_enter,    // DoubleBarrier::async_enter of the actor's participant on the session
  double_leave,    // DoubleBarrier::async_leave of a participant that entered
};

inline constexpr std::size_t kOpKindCount = static_cast<std::size_t>(OpKind::double_leave) + 1;

enum class OpFamily { acquisition, hold, election, batch, control, session, fault, counter, catalogue };

struct OpInfo {
  OpKind kind;
  std::string_view name;
  OpFamily family;
};
const OpInfo& info(OpKind kind);
std::optional<OpKind> op_kind_named(std::string_view name);

struct Op {
  OpKind kind = OpKind::acquire;
  int actor = 0;     // the thread that runs it
  int session = 0;   // session slot
  int resource = 0;  // index into the resource catalogue (resources.hpp)
  int arg = 0;       // kind-specific: see the decoders below

  bool operator==(const Op&) const = default;
};

// ---- arg decoders ----
// Acquisitions: owner data size class, timeout class, variant.
inline int size_class(const Op& op) { return op.arg & 3; }
inline int timeout_class(const Op& op) { return (op.arg >> 2) & 3; }
inline bool variant(const Op& op) { return ((op.arg >> 4) & 1) != 0; }
// An async acquisition that waits for ever without a stop token (bit 5): one the session's start
// window may hold back (SessionOptions::max_starting_acquisitions); a cancel cannot reach it.
inline bool unstoppable(const Op& op) { return ((op.arg >> 5) & 1) != 0 && timeout_class(op) == 0; }
// An async acquisition that waits for ever, with a stop token, through zkr::asio (bit 6), its
// handler bound to an executor of its own.
inline bool through_asio(const Op& op) {
  return op.kind == OpKind::async_acquire && ((op.arg >> 6) & 1) != 0 && timeout_class(op) == 0 && !unstoppable(op);
}
// Holds: rank (0 = newest), destination actor (move), variant.
inline int rank(const Op& op) { return op.arg & 7; }
inline int destination(const Op& op) { return (op.arg >> 3) & 7; }
inline bool hold_variant(const Op& op) { return ((op.arg >> 6) & 1) != 0; }
// The timeout class as a wait: 0, 20, 100 or 400 ms (try_acquire_for, wait_for_leadership); as an
// async acquisition's: for ever (negative), 0, 50 or 400 ms.
std::chrono::milliseconds wait_timeout(const Op& op);
std::chrono::milliseconds async_timeout(const Op& op);
// Faults: how many steps the fault lasts before the world heals it.
inline int fault_steps(const Op& op) { return 1 + (op.arg & 3); }

// "acquire:0.1.2.5"
std::string to_text(const Op& op);
std::string to_text(const std::vector<Op>& ops);  // space-separated
// Throws std::invalid_argument naming the token it cannot read.
Op op_from_text(std::string_view text);
std::vector<Op> ops_from_text(std::string_view text);

}  // namespace zkr::swarm
