// SPDX-License-Identifier: Apache-2.0
// SharedCounter: one integer kept in one znode, changed by compare-and-set on the node's data
// version, with a listener told of each change and of when its view may be stale.
//
// Every change reads the node (value and data version) and writes the new value only if the
// version is still the one read; a writer that lost the race (bad version) reads again and
// retries, until it succeeds or the operation's bound passes (CounterOptions::timeout, a
// std::stop_token). A missing node reads as 0 and is created by the first change (its missing
// parents as containers). So concurrent adds from any number of clients, this library's or a
// peer's, all count.
//
// A write whose reply is lost (connection loss) may or may not have been applied. Each write is
// conditional on the version it read, so at most one write per version read can succeed; after a
// lost reply the counter reads again: the same version means it was not applied (the write is
// sent again, still conditional on that version), the next version with other data means another
// writer won (ours can no longer apply: retried from the new value). In every other case - the
// next version with exactly our data, or a version further on - nothing can tell our write from
// another: the call fails with zk_errc::connection_loss and says that the outcome is unknown. It
// never applies an add twice.
//
// Layouts (CounterOptions::layout), byte-exact with the peers on the same node:
//   curator_atomic_long   Curator's DistributedAtomicLong: 8 bytes, big-endian two's complement.
//   curator_shared_count  Curator's SharedCount: 4 bytes, big-endian; the range of an int32.
//   kazoo                 kazoo's Counter (its default, an int): the number in ASCII decimal.
// Empty data reads as 0 in every layout (kazoo creates its node empty; Curator's
// DistributedAtomicLong reads empty data as 0). Data that does not decode in the chosen layout
// (another layout's bytes, a kazoo counter of floats) fails with errc::undecodable_data naming the
// path and what was found; it is never overwritten. A value that the layout cannot hold (past
// 2^31-1 in curator_shared_count, past the int64 range in any layout) fails with errc::out_of_range
// and nothing is written: the counter never wraps.
//
// The width alone cannot tell the layouts apart: kazoo's "1234" is also 4 bytes, a valid int32
// (825373492), and "12345678" 8. So the decode is strict, and one rule keeps any data readable in
// at most one layout:
//   - kazoo reads exactly what repr() of a Python int writes: "0", or an optional '-' and digits
//     without a leading zero ("+5", "007", "-0", "2.5" are refused);
//   - the Curator layouts refuse data that is a number in ASCII, as a kazoo Counter of ints or
//     floats writes it (an optional '-', digits with an optional fraction and exponent, or
//     inf/nan): such bytes are refused rather than guessed at. For the same reason they never
//     write a value whose bytes would be such text: errc::out_of_range, nothing written. These are
//     15,402 values of curator_shared_count, all between 758,132,272 ("-0.0") and 962,935,097
//     ("9e99"), and values of curator_atomic_long between 3.2e18 and 4.2e18.
// A peer (Curator, or kazoo with support_curator) may still bring a Curator counter to one of
// those values: the Curator layouts then refuse the node until it holds another, and the kazoo
// layout reads it as text ("1234" is also SharedCount's 825373492), which no decode can tell. The
// layout a path holds is the user's choice; choose the one its peers use.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

namespace zkr {

// How the value is encoded in the node (see the top of this file).
enum class CounterLayout {
  curator_atomic_long,   // 8 bytes big-endian (Curator's DistributedAtomicLong)
  curator_shared_count,  // 4 bytes big-endian (Curator's SharedCount; kazoo's Counter with support_curator)
  kazoo,                 // ASCII decimal text (kazoo's Counter)
};
std::string_view to_string(CounterLayout layout) noexcept;  // "curator_atomic_long", ...

// The value `data` holds in `layout` (empty data: 0), as the counter reads it; nullopt if it does
// not decode in that layout. No data decodes in two layouts (see the top of this file). For tools
// that look at a node whose layout they do not know.
std::optional<std::int64_t> decode_counter(CounterLayout layout, std::string_view data) noexcept;

// How a SharedCounter stores its value.
struct CounterOptions {
  CounterLayout layout = CounterLayout::curator_atomic_long;  // the peer's layout
  // For the counter node and the parents it creates.
  NodeAcl acl = NodeAcl::open;
  // The longest one operation may take: waiting for a connection and retrying after other writers
  // won included. Zero means the session's connect timeout. A request already sent is waited for
  // (the client gives up on it within the session timeout).
  std::chrono::milliseconds timeout{0};
};

// The counter as read: its value and the node's data version (-1: there is no node; value 0).
struct CounterValue {
  std::int64_t value = 0;  // the counter's value
  std::int32_t version = -1;  // the node's data version it was read at (-1: no node yet)
};

// What a listener is told.
struct CounterUpdate {
  std::int64_t value = 0;     // the value last read (0 while there is no node)
  std::int32_t version = -1;  // its data version, -1 for no node
  // True: the connection dropped or the session was lost since the value was read, so the value
  // may be out of date. A fresh update (stale false) follows once the node was read again.
  bool stale = false;
  // Set when the node cannot be read or decoded: errc::undecodable_data (value and version are
  // those last read well), zk_errc::no_auth (the listener stops), errc::session_closed (the
  // session ended: the last update, stale).
  std::error_code error;
};

// A counter shared through one node, changed by compare-and-set on its version.
class SharedCounter {
 public:
  // Throws Error: errc::invalid_path naming the path, errc::invalid_argument for an unknown layout
  // or a negative timeout. Sends nothing.
  SharedCounter(Session& session, std::string path, CounterOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<SharedCounter> make(Session& session, std::string path, CounterOptions options,
                                           std::error_code& ec) noexcept;

  // The counter's path and options.
  const std::string& path() const { return path_; }
  const CounterOptions& options() const { return options_; }

  // Each operation throws Error: errc::undecodable_data (the node's data is not this layout's),
  // errc::out_of_range (the result does not fit the layout; nothing written), errc::timed_out
  // (the operation's bound passed; nothing written), errc::cancelled (stop requested; nothing
  // written), zk_errc::connection_loss (a reply was lost and the outcome is unknown, see the top
  // of this file), errc::session_closed, zk_errc::no_auth and other ZooKeeper errors.
  // Must not be called from the session's own threads (a listener).
  CounterValue read(std::stop_token stop = {}) const;
  std::int64_t get(std::stop_token stop = {}) const { return read(std::move(stop)).value; }
  // Writes `value` whatever the counter holds.
  void set(std::int64_t value, std::stop_token stop = {});
  // Writes `desired` if the counter holds `expected` (a missing node holds 0); false if it holds
  // another value (then nothing was written).
  bool compare_and_set(std::int64_t expected, std::int64_t desired, std::stop_token stop = {});
  // Adds `delta` (negative subtracts) and returns the value it wrote.
  std::int64_t add(std::int64_t delta, std::stop_token stop = {});

  // The same without exceptions: ec set to what the forms above throw.
  CounterValue read(std::stop_token stop, std::error_code& ec) const noexcept;
  void set(std::int64_t value, std::stop_token stop, std::error_code& ec) noexcept;
  bool compare_and_set(std::int64_t expected, std::int64_t desired, std::stop_token stop, std::error_code& ec) noexcept;
  std::int64_t add(std::int64_t delta, std::stop_token stop, std::error_code& ec) noexcept;

  // Told the value at once (once read), then on each change; changes faster than a read may be
  // merged, but the last update always tells the value as of the latest read. One data watch on
  // the node, set again with each read (a missing node takes none: it is looked at again every
  // half second). When the connection drops or the session is lost, the listener is told the last
  // value with stale = true; once the node was read again on the resumed or new session, it is
  // told the value with stale = false, changed or not. Calls run on the session's callback thread,
  // one at a time and in order, and must not block for long. The listener is called until the
  // Subscription is reset or destroyed; reset() from another thread waits for a running call.
  // Throws Error(errc::invalid_argument) if the listener is empty.
  using Listener = std::function<void(const CounterUpdate& update)>;
  [[nodiscard]] Subscription on_change(Listener listener);

 private:
  std::shared_ptr<detail::SessionCore> core_;
  std::string path_;
  CounterOptions options_;
};

}  // namespace zkr
