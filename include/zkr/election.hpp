// SPDX-License-Identifier: Apache-2.0
// Leader election on a ZooKeeper path, with fencing.
//
// An election is the mutual-exclusion lock of lock.hpp seen from the other side: every participant
// queues an ephemeral sequential node under the path holding its participant data (for example
// "host:port"), and the participant whose node is first leads. Each waiter watches its
// predecessor (and what that one waits for, as lock waiters do), so a change of leader wakes the
// next participant and the one after it, never the whole queue.
//
// The node names (ElectionLayout) decide which peers share the queue:
//   - curator_latch, LeaderLatch's default: "_c_<uuid>-latch-<seq>", as Curator's LeaderLatch;
//   - curator_lock, LeaderSelector's default: "_c_<uuid>-lock-<seq>", as Curator's LeaderSelector
//     (its InterProcessMutex);
//   - kazoo: "<32 hex>__lock__<seq>", as kazoo's Election (its Lock).
// Participants of one layout, ours and the peer's, agree on who leads. Two layouts on one path would
// be two disjoint queues with a leader each: a participant that finds another layout's nodes on its
// path refuses with errc::incompatible_peer, naming the peer's recipe, and deletes its node
// (docs/migrating.md, "What may share a path"). So do kazoo Semaphore's 32-hex lease nodes (that
// semaphore counts every child of its path); other children, "locks" and "leases" included (where
// Curator's semaphore keeps its nodes), are no rival and are left alone.
//
// A term of leadership carries the fencing token (the czxid of the leader's node; a later leader
// always has a larger one) and a loss signal (callback and std::stop_token), exactly like a held
// lock: leadership is lost when the session monitor declares the session lost, before the server
// can expire it and let another participant lead. Send the token with every write that only the
// leader may make, and have the resource refuse lower tokens (fence_gate.hpp).
//
// Two styles:
//   - LeaderLatch: join, then ask is_leader() or wait for leadership; a listener hears every term
//     begin and end. After a loss the latch queues again by itself; resign() hands leadership to
//     the next participant at once and queues again at the back.
//   - LeaderSelector: runs a leadership function on its own thread for each term and queues again
//     (optionally) when the function returns or leadership is lost.
// Anyone, participant or not, can read the participants in order and the current leader, or be
// told of each change of leader (leader_watch.hpp).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/lock.hpp>

namespace zkr {

// How a participant names its node, and so which peers' participants share its queue.
enum class ElectionLayout {
  recipe_default,  // LeaderLatch: curator_latch; LeaderSelector: curator_lock
  curator_latch,   // "_c_<uuid>-latch-<seq>": with Curator's LeaderLatch
  curator_lock,    // "_c_<uuid>-lock-<seq>": with Curator's LeaderSelector
  kazoo,           // "<32 hex>__lock__<seq>": with kazoo's Election
};
std::string_view to_string(ElectionLayout layout) noexcept;

// What a LeaderLatch or LeaderSelector takes part with.
struct ElectionOptions {
  // Stored in the participant's node, read back by participants() and leader(). Empty means
  // default_owner_data() ("host:pid").
  std::string participant_data;
  NodeAcl acl = NodeAcl::open;
  // Which peers this participant shares its queue with (see the top of this file). Every
  // participant on a path must use the same layout: a participant that finds another layout's
  // nodes there fails with errc::incompatible_peer instead of leading a second queue.
  ElectionLayout layout = ElectionLayout::recipe_default;
};

// One participant of an election, as read from its node.
struct Participant {
  std::string node;  // child name
  std::string data;  // participant data (Curator: the participant id, or its IP address)
  // The participant's grant (its fencing token), owner session, and whether it leads now.
  FencingToken token;
  std::int64_t session_id = 0;
  bool leader = false;
};

// The participants of the election on `path`, leader first, then in queue order; empty if nobody
// takes part. Any session may read them. Throws Error: errc::invalid_path, errc::session_closed,
// errc::connect_timeout or errc::timed_out (no connection within the session's connect timeout),
// zk_errc::no_auth, other ZooKeeper errors.
std::vector<Participant> election_participants(Session& session, std::string_view path);
// The current leader, or nullopt if nobody takes part. Throws as election_participants().
std::optional<Participant> election_leader(Session& session, std::string_view path);
// Without exceptions (zkr/session.hpp): an empty result, and ec set, on failure.
std::vector<Participant> election_participants(Session& session, std::string_view path, std::error_code& ec) noexcept;
std::optional<Participant> election_leader(Session& session, std::string_view path, std::error_code& ec) noexcept;

// One term of leadership. A handle: copies share the term, and dropping them does not resign
// (the latch or selector that won the term ends it). The token and the loss signal are Grant's,
// those of the term's held lock. All members are thread-safe.
class Leadership : public Grant {
 public:
  Leadership() = default;  // no term
  // True while this object holds a term.
  explicit operator bool() const noexcept { return term_ != nullptr; }

  // True once the term is over for any reason: lost, resigned, or the latch/selector closed.
  bool ended() const;
  // Requested when the term ends for any reason: the token to hand to the leader's work. Its stop
  // callbacks may call the latch or selector (the stop is never requested under their locks).
  std::stop_token ended_token() const;

  struct Term;  // the library's (recipes/election.cpp): opaque here
  // The library's (see detail::Passkey): only the latch and the selector make terms.
  Leadership(detail::Passkey, std::shared_ptr<Term> term);

 private:
  std::shared_ptr<Term> term_;
};

enum class LeadershipEvent {
  gained,    // this participant leads
  lost,      // leadership was lost (see Leadership::loss_reason()); the latch queues again
  resigned,  // resign() or close() ended the term
};
std::string_view to_string(LeadershipEvent event) noexcept;

// Leader election in Curator's LeaderLatch layout: one participant leads until it closes or loses
// its session.
class LeaderLatch {
 public:
  // Does not join yet (see start()). Throws Error(errc::invalid_path) naming the path, or
  // Error(errc::invalid_argument) for a layout that is none of ElectionLayout's.
  LeaderLatch(Session& session, std::string path, ElectionOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  // `auto latch = zkr::LeaderLatch::make(...)`: a LeaderLatch does not move.
  static std::optional<LeaderLatch> make(Session& session, std::string path, ElectionOptions options,
                                         std::error_code& ec) noexcept;
  ~LeaderLatch();  // close()
  LeaderLatch(const LeaderLatch&) = delete;
  LeaderLatch& operator=(const LeaderLatch&) = delete;

  const std::string& path() const;

  // Joins the election (non-blocking; idempotent while joined). After a loss the latch joins
  // again by itself, at the back of the queue, on the session's next connection. Throws
  // Error(errc::cancelled) if the latch was closed.
  void start();
  void start(std::error_code& ec) noexcept;
  // Leaves: cancels the wait or ends the term (listeners hear `resigned`), deletes the node.
  // Idempotent, non-blocking.
  void close();

  // False as soon as the session knows the term is lost (the contender records the loss before
  // the callbacks that tell of it run, so a busy callback thread does not delay this answer).
  bool is_leader() const;
  // The current term, or an empty Leadership when not leading.
  Leadership leadership() const;

  // Waits until this participant leads. Empty when the timeout (negative: none) passes or stop is
  // requested. Throws Error: errc::invalid_argument if start() was never called, errc::cancelled
  // if the latch was closed, or the error that ended participation (for example
  // errc::session_closed when the Session was closed, zk_errc::no_auth).
  std::optional<Leadership> wait_for_leadership(std::chrono::nanoseconds timeout, std::stop_token stop = {});
  // The same without exceptions: empty with ec set to errc::timed_out or errc::cancelled (stop
  // requested) where the form above returns empty, else to what it throws.
  std::optional<Leadership> wait_for_leadership(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                std::error_code& ec) noexcept;
  // Callback form (zkr/asio.hpp builds on it): the handler runs once on the session's callback
  // thread with the term, or with errc::timed_out (the timeout passed; negative: none, zero: does
  // not wait), errc::cancelled (stop was requested, or the latch was closed), or the error that
  // ended participation. Throws Error(errc::invalid_argument) if start() was never called (a
  // caller's mistake, with no non-throwing form).
  using LeadershipHandler = std::function<void(std::error_code, Leadership)>;
  void async_wait_for_leadership(std::chrono::nanoseconds timeout, LeadershipHandler handler,
                                 std::stop_token stop = {});

  // Why participation ended by itself (session closed, ACL refusal, errc::incompatible_peer), or
  // no error.
  std::error_code error() const;

  // The listener runs on the session's callback thread for every term that begins or ends, in
  // order, and must not block for long. Unregisters when the Subscription goes.
  [[nodiscard]] Subscription on_change(std::function<void(LeadershipEvent, const Leadership&)> listener);

  // Ends the current term at once (the next participant leads as soon as the server deletes our
  // node; listeners hear `resigned`) and queues again at the back. False if not leading.
  bool resign();

  // Everyone on the path, and the leader, as election_participants() / election_leader().
  std::vector<Participant> participants() const;
  std::optional<Participant> leader() const;
  std::vector<Participant> participants(std::error_code& ec) const noexcept;
  std::optional<Participant> leader(std::error_code& ec) const noexcept;


 private:
  struct State;  // recipes/election.cpp
  std::shared_ptr<State> state_;
};

// A LeaderSelector's options: an ElectionOptions with the selector's own.
struct SelectorOptions : ElectionOptions {
  // Queue again each time the leadership function returns or leadership is lost. Without it the
  // selector runs one term and then waits for requeue().
  bool auto_requeue = true;
};

// Leader election in Curator's LeaderSelector layout: leadership is taken, held for a term and
// given up, and the participant queues again.
class LeaderSelector {
 public:
  // Runs on the selector's own thread for each term. It must return soon after
  // leadership.ended_token() is requested (leadership lost, or the selector closing): the next
  // term begins only after it returned. It may return at any time to resign. An exception it
  // throws ends the term like a return and is kept in last_exception().
  using LeadershipFunction = std::function<void(const Leadership&)>;

  // Does not join yet (see start()). Throws Error(errc::invalid_path) naming the path, or
  // Error(errc::invalid_argument) if the function is empty or the layout is none of ElectionLayout's.
  LeaderSelector(Session& session, std::string path, LeadershipFunction function, SelectorOptions options = {});
  // The constructor without exceptions (zkr/session.hpp): nullopt, and ec set, on failure.
  static std::optional<LeaderSelector> make(Session& session, std::string path, LeadershipFunction function,
                                            SelectorOptions options, std::error_code& ec) noexcept;
  ~LeaderSelector();  // close()
  LeaderSelector(const LeaderSelector&) = delete;
  LeaderSelector& operator=(const LeaderSelector&) = delete;

  const std::string& path() const;

  // Starts the selector's thread, which joins the election. Idempotent. Throws
  // Error(errc::cancelled) if the selector was closed.
  void start();
  void start(std::error_code& ec) noexcept;
  // Queues once more after a term ended (only needed without auto_requeue). False if the
  // selector is queued or leading already, or closed.
  bool requeue();
  // Stops: cancels the wait, or requests ended_token() of the running term and waits for the
  // function to return; deletes the node. Idempotent. Called (or the selector destroyed) from the
  // leadership function itself, it returns at once: the selector's thread ends the term when
  // the function returns and then exits on its own.
  void close();

  // False as soon as the session knows the term is lost, even before the callbacks that tell of
  // the loss have run.
  bool is_leader() const;
  // Terms this selector has led so far.
  std::uint64_t terms() const;
  // Why the selector stopped by itself (errc::session_closed, zk_errc::no_auth,
  // errc::incompatible_peer, ...), or none; last_exception() then holds that Error, whose message
  // says more (which peer's nodes, for example).
  std::error_code error() const;
  std::exception_ptr last_exception() const;

  std::vector<Participant> participants() const;
  std::optional<Participant> leader() const;


 private:
  struct State;  // recipes/election.cpp
  std::shared_ptr<State> state_;
};

}  // namespace zkr
