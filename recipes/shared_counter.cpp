// SPDX-License-Identifier: Apache-2.0
// The shared counter: a read, then a write conditional on the version read, until one succeeds;
// and a listener over a data watch set again with each read.
#include <zkr/shared_counter.hpp>

#include <algorithm>
#include <charconv>
#include <future>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include <zkr/names.hpp>

#include "callback_gate.hpp"
#include "internals.hpp"
#include "session_core.hpp"
#include "watched_read.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"

namespace zkr {
namespace {

using Clock = std::chrono::steady_clock;

// A missing node takes no data watch; the listener looks again this often until it exists.
constexpr auto kMissingNodeRetry = std::chrono::milliseconds(500);
// How often a wait for a connection looks at the stop token and the deadline.
constexpr auto kWaitSlice = std::chrono::milliseconds(20);

// No answer from the server: a read may be sent again; a write may or may not have been applied.
// (A closed Session is caught before each request: errc::session_closed.)
bool unanswered(zk_errc rc) { return is_connection_trouble(rc) || is_session_ended(rc); }

// ---- the layouts' encodings ----

// What was found, for messages: printable text quoted, anything else as hex bytes.
std::string describe_data(std::string_view data) {
  if (data.empty()) return "no data";
  bool printable = true;
  for (unsigned char c : data) printable = printable && c >= 0x20 && c < 0x7f;
  constexpr std::size_t kShown = 24;
  if (printable)
    return fmt::format("the text \"{}\"{}", data.substr(0, kShown), data.size() > kShown ? "..." : "");
  std::string hex;
  for (std::size_t i = 0; i < data.size() && i < kShown; ++i)
    hex += fmt::format("{}{:02x}", i ? " " : "", static_cast<unsigned char>(data[i]));
  return fmt::format("{} byte{} ({}{})", data.size(), data.size() == 1 ? "" : "s", hex,
                     data.size() > kShown ? " ..." : "");
}

std::string big_endian(std::uint64_t value, int bytes) {
  std::string out(static_cast<std::size_t>(bytes), '\0');
  for (int i = bytes - 1; i >= 0; --i, value >>= 8) out[static_cast<std::size_t>(i)] = static_cast<char>(value & 0xff);
  return out;
}

std::uint64_t from_big_endian(std::string_view data) {
  std::uint64_t value = 0;
  for (unsigned char c : data) value = (value << 8) | c;
  return value;
}

// Whether `data` is a number in ASCII as a kazoo Counter writes one (repr() of a Python int or
// float): an optional '-', then digits with an optional fraction and exponent ("12", "2.5",
// "1e+16", "1.5e-07"), or inf or nan. Four or eight such bytes are also a big-endian integer: the
// Curator layouts refuse them rather than guess, and never write them.
bool reads_as_number_text(std::string_view data) {
  std::string_view rest = data;
  if (rest.starts_with('-')) rest.remove_prefix(1);
  if (rest == "inf" || rest == "nan") return true;
  const auto digits = [&rest] {
    std::size_t n = 0;
    while (n < rest.size() && rest[n] >= '0' && rest[n] <= '9') ++n;
    rest.remove_prefix(n);
    return n > 0;
  };
  if (!digits()) return false;
  if (rest.starts_with('.')) {
    rest.remove_prefix(1);
    if (!digits()) return false;
  }
  if (rest.starts_with('e')) {
    rest.remove_prefix(1);
    if (rest.starts_with('+') || rest.starts_with('-')) rest.remove_prefix(1);
    if (!digits()) return false;
  }
  return rest.empty();
}

// The value's bytes in `layout`; throws errc::out_of_range if the layout cannot hold it.
std::string encode(CounterLayout layout, std::int64_t value, std::string_view operation, std::string_view path) {
  std::string bytes;
  switch (layout) {
    case CounterLayout::curator_atomic_long: bytes = big_endian(static_cast<std::uint64_t>(value), 8); break;
    case CounterLayout::curator_shared_count:
      if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max())
        throw Error(make_error_code(errc::out_of_range), operation, path,
                    fmt::format("{} does not fit the 4 bytes of Curator's SharedCount (a signed 32-bit integer)", value));
      bytes = big_endian(static_cast<std::uint32_t>(static_cast<std::int32_t>(value)), 4);
      break;
    case CounterLayout::kazoo: return fmt::format("{}", value);
  }
  if (bytes.empty()) throw Error(make_error_code(errc::invalid_argument), operation, path, "unknown counter layout");
  if (reads_as_number_text(bytes))
    throw Error(make_error_code(errc::out_of_range), operation, path,
                fmt::format("{} cannot be written in the {} layout: its bytes are {}, a kazoo Counter's data, which "
                            "this layout refuses to read",
                            value, to_string(layout), describe_data(bytes)));
  return bytes;
}

// The value `data` holds in `layout`; throws errc::undecodable_data naming what was found. Strict:
// a Curator layout takes its width and nothing that is a number in text, the kazoo layout only
// what repr() of a Python int writes, so that no layout reads another's data as its own.
std::int64_t decode(CounterLayout layout, std::string_view data, std::string_view operation, std::string_view path) {
  if (data.empty()) return 0;
  auto refuse = [&](std::string_view expected) -> std::int64_t {
    throw Error(make_error_code(errc::undecodable_data), operation, path,
                fmt::format("found {}; the {} layout keeps {}", describe_data(data), to_string(layout), expected));
  };
  constexpr std::string_view kText =
      ", and these bytes are also a number in text, as a kazoo Counter writes it: refused rather than guessed";
  switch (layout) {
    case CounterLayout::curator_atomic_long:
      if (data.size() != 8) return refuse("8 bytes (a big-endian signed 64-bit integer)");
      if (reads_as_number_text(data)) return refuse(fmt::format("8 bytes (a big-endian signed 64-bit integer){}", kText));
      return static_cast<std::int64_t>(from_big_endian(data));
    case CounterLayout::curator_shared_count:
      if (data.size() != 4) return refuse("4 bytes (a big-endian signed 32-bit integer)");
      if (reads_as_number_text(data)) return refuse(fmt::format("4 bytes (a big-endian signed 32-bit integer){}", kText));
      return static_cast<std::int32_t>(static_cast<std::uint32_t>(from_big_endian(data)));
    case CounterLayout::kazoo: {
      // Exactly repr() of a Python int: "0", or an optional '-' and digits without a leading zero.
      // A kazoo counter of floats ("2.5"), other spellings ("+5", "007", "-0") and a number past
      // the int64 range are refused, never rounded or guessed at.
      const std::string_view digits = data.starts_with('-') ? data.substr(1) : data;
      const bool canonical = !digits.empty() && (digits == "0" ? data.size() == 1 : digits.front() != '0') &&
                             std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!canonical) return refuse("an integer in ASCII decimal as Python's repr() writes it (a kazoo Counter of floats is not supported)");
      std::int64_t value = 0;
      auto [end, ec] = std::from_chars(data.data(), data.data() + data.size(), value);
      if (ec == std::errc::result_out_of_range || end != data.data() + data.size())
        return refuse("an integer in ASCII decimal, and this one is past the signed 64-bit range");
      return value;
    }
  }
  throw Error(make_error_code(errc::invalid_argument), operation, path, "unknown counter layout");
}

// a + b, or errc::out_of_range rather than a wrapped value.
std::int64_t checked_sum(std::int64_t a, std::int64_t b, std::string_view path) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum))
    throw Error(make_error_code(errc::out_of_range), "add to", path,
                fmt::format("{} + {} is past the signed 64-bit range", a, b));
  return sum;
}

// ---- requests, bounded by the operation's deadline and stop token ----

struct NodeReply {
  zk_errc rc = zk_errc::ok;
  std::string data;
  NodeStat stat;
};

class Operation {
 public:
  Operation(const std::shared_ptr<detail::SessionCore>& core, std::string_view name, const std::string& path,
            std::chrono::milliseconds timeout, std::stop_token stop)
      : core_(core), name_(name), path_(path), deadline_(Clock::now() + timeout), stop_(std::move(stop)) {}

  // Throws errc::cancelled or errc::timed_out if the operation must end here.
  void check_bounds() const {
    if (stop_.stop_requested()) throw Error(make_error_code(errc::cancelled), name_, path_);
    if (Clock::now() >= deadline_) throw Error(make_error_code(errc::timed_out), name_, path_);
  }

  // Sends one request once connected and waits for its reply. A reply that does not come within
  // the client's own bound counts as a lost one (zk_errc::connection_loss).
  template <typename Reply, typename Send>
  Reply request(Send send) const {
    for (;;) {
      check_bounds();
      if (core_->ended()) throw Error(make_error_code(errc::session_closed), name_, path_);
      if (core_->wait_connected(kWaitSlice)) break;
    }
    auto reply = std::make_shared<std::promise<Reply>>();
    auto future = reply->get_future();
    {
      std::lock_guard lock(core_->mutex());
      if (core_->ended()) throw Error(make_error_code(errc::session_closed), name_, path_);
      send(core_->generation_locked(), [reply](Reply value) { reply->set_value(std::move(value)); });
    }
    const auto reply_wait = core_->options().connect_timeout + core_->options().session_timeout;
    if (future.wait_for(reply_wait) != std::future_status::ready) return Reply{zk_errc::connection_loss, {}, {}};
    return future.get();
  }

  NodeReply get() const {
    return request<NodeReply>([&](std::uint64_t generation, auto deliver) {
      core_->get_data(generation, path_, [deliver](zk_errc rc, std::string data, NodeStat stat) {
        deliver(NodeReply{rc, std::move(data), stat});
      });
    });
  }

  NodeReply set(const std::string& data, int version) const {
    return request<NodeReply>([&](std::uint64_t generation, auto deliver) {
      core_->set_data(generation, path_, data, version,
                      [deliver](zk_errc rc, NodeStat stat) { deliver(NodeReply{rc, {}, stat}); });
    });
  }

  NodeReply create(const std::string& node, const std::string& data, CreateMode mode, NodeAcl acl) const {
    return request<NodeReply>([&](std::uint64_t generation, auto deliver) {
      core_->create(generation, node, data, mode, acl,
                    [deliver](zk_errc rc, std::string, NodeStat stat) { deliver(NodeReply{rc, {}, stat}); });
    });
  }

  // Creates the missing ancestors of the counter node as containers, as Curator does (the server
  // removes one once empty; the counter node keeps its parent). One that exists already is fine.
  void create_parents(NodeAcl acl) const {
    for (std::size_t slash = path_.find('/', 1); slash != std::string::npos; slash = path_.find('/', slash + 1)) {
      const auto reply = create(path_.substr(0, slash), {}, CreateMode::container, acl);
      if (reply.rc != zk_errc::ok && reply.rc != zk_errc::node_exists && !unanswered(reply.rc))
        throw Error(make_error_code(reply.rc), name_, path_, fmt::format("creating its parent {}", path_.substr(0, slash)));
    }
  }

  const std::string& path() const { return path_; }
  std::string_view name() const { return name_; }
  detail::SessionCore& core() const { return *core_; }

 private:
  const std::shared_ptr<detail::SessionCore>& core_;
  std::string_view name_;
  const std::string& path_;
  Clock::time_point deadline_;
  std::stop_token stop_;
};

// The counter as read by `operation`; throws on anything but a value or a missing node.
CounterValue read_counter(const Operation& operation, CounterLayout layout, std::string* raw = nullptr) {
  for (;;) {
    auto reply = operation.get();
    if (reply.rc == zk_errc::no_node) {
      if (raw) raw->clear();
      return {};
    }
    if (unanswered(reply.rc)) continue;  // a read may be sent again
    throw_if(make_error_code(reply.rc), operation.name(), operation.path());
    const auto value = decode(layout, reply.data, operation.name(), operation.path());
    if (raw) *raw = std::move(reply.data);
    return {value, reply.stat.version};
  }
}

// A write sent and not answered: it may still be applied, but only on top of `base_version`.
struct LostWrite {
  std::int32_t base_version = -1;  // -1: a create
  std::string data;
};

[[noreturn]] void outcome_unknown(const Operation& operation, const LostWrite& lost, std::string_view found) {
  ++operation.core().counter_unknown_outcomes;
  throw Error(make_error_code(zk_errc::connection_loss), operation.name(), operation.path(),
              fmt::format("the reply to a write on version {} was lost and the node {} since: the write may or may "
                          "not have been applied",
                          lost.base_version, found));
}

// The one write loop of set, compare_and_set and add. `next` gives the value to write over the
// current one, or nullopt to write nothing (compare_and_set's mismatch). Returns the value written,
// or nullopt.
template <typename Next>
std::optional<std::int64_t> update(const Operation& operation, const CounterOptions& options, Next next) {
  std::optional<LostWrite> lost;
  for (;;) {
    CounterValue current;
    std::string raw;
    try {
      operation.check_bounds();
      current = read_counter(operation, options.layout, &raw);
    } catch (const Error& error) {
      // Out of time, stopped, the session closed, the data changed beyond reading: whatever ends
      // the operation here, a write still unaccounted for makes its outcome unknown.
      if (lost) outcome_unknown(operation, *lost, fmt::format("could not be read again ({})", error.code().message()));
      throw;
    }
    if (lost) {
      // The lost write can apply only on its base version: at the next version with its data, it
      // may have; at the next with other data it lost; further on, nobody can tell.
      if (current.version == lost->base_version + 1 && raw == lost->data)
        outcome_unknown(operation, *lost, "holds exactly its data at the next version");
      if (current.version > lost->base_version + 1)
        outcome_unknown(operation, *lost, fmt::format("moved on to version {}", current.version));
      if (current.version == lost->base_version + 1) lost.reset();  // another writer won: ours cannot apply
      // At the same version it was not applied (yet): the write below is conditional on that
      // version too, so at most one of the two can be.
    }
    const std::optional<std::int64_t> desired = next(current.value);
    if (!desired) {
      if (lost) outcome_unknown(operation, *lost, "was not read again at a later version");
      return std::nullopt;
    }
    const std::string data = encode(options.layout, *desired, operation.name(), operation.path());
    NodeReply reply;
    if (current.version < 0) {
      reply = operation.create(operation.path(), data, CreateMode::persistent, options.acl);
      if (reply.rc == zk_errc::no_node) {
        operation.create_parents(options.acl);
        continue;
      }
      if (reply.rc == zk_errc::node_exists) {  // created by another meanwhile: read it
        ++operation.core().counter_conflicts;
        continue;
      }
    } else {
      reply = operation.set(data, current.version);
      if (reply.rc == zk_errc::bad_version || reply.rc == zk_errc::no_node) {  // another writer won
        ++operation.core().counter_conflicts;
        continue;
      }
    }
    if (reply.rc == zk_errc::ok) {  // ours, so any earlier lost write cannot apply
      ++operation.core().counter_writes;
      return desired;
    }
    if (unanswered(reply.rc)) {
      lost = LostWrite{current.version, data};
      continue;
    }
    if (lost) outcome_unknown(operation, *lost, fmt::format("refused the next write ({})", make_error_code(reply.rc).message()));
    throw_if(make_error_code(reply.rc), operation.name(), operation.path());
  }
}

}  // namespace

std::string_view to_string(CounterLayout layout) noexcept {
  switch (layout) {
    case CounterLayout::curator_atomic_long: return "curator_atomic_long";
    case CounterLayout::curator_shared_count: return "curator_shared_count";
    case CounterLayout::kazoo: return "kazoo";
  }
  return "unknown";
}

std::optional<std::int64_t> decode_counter(CounterLayout layout, std::string_view data) noexcept {
  try {
    return decode(layout, data, "decode counter", {});
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

SharedCounter::SharedCounter(Session& session, std::string path, CounterOptions options)
    : core_(detail::Internals::core(session)), path_(std::move(path)), options_(options) {
  detail::require_valid_path(path_, "counter path");
  if (to_string(options_.layout) == "unknown")
    throw Error(make_error_code(errc::invalid_argument), "counter path", path_,
                fmt::format("unknown layout {}", static_cast<int>(options_.layout)));
  if (options_.timeout < std::chrono::milliseconds(0))
    throw Error(make_error_code(errc::invalid_argument), "counter path", path_, "the timeout is negative");
  if (options_.timeout == std::chrono::milliseconds(0)) options_.timeout = core_->options().connect_timeout;
}

std::optional<SharedCounter> SharedCounter::make(Session& session, std::string path, CounterOptions options,
                                                 std::error_code& ec) noexcept {
  return detail::without_exceptions(
      ec, [&] { return std::optional<SharedCounter>(std::in_place, session, std::move(path), options); });
}

CounterValue SharedCounter::read(std::stop_token stop) const {
  const Operation operation(core_, "read counter", path_, options_.timeout, std::move(stop));
  return read_counter(operation, options_.layout);
}

void SharedCounter::set(std::int64_t value, std::stop_token stop) {
  const Operation operation(core_, "set counter", path_, options_.timeout, std::move(stop));
  encode(options_.layout, value, operation.name(), path_);  // out of range: refused before anything is read
  update(operation, options_, [value](std::int64_t) { return std::optional<std::int64_t>(value); });
}

bool SharedCounter::compare_and_set(std::int64_t expected, std::int64_t desired, std::stop_token stop) {
  const Operation operation(core_, "compare and set counter", path_, options_.timeout, std::move(stop));
  encode(options_.layout, desired, operation.name(), path_);
  return update(operation, options_, [expected, desired](std::int64_t current) {
           return current == expected ? std::optional<std::int64_t>(desired) : std::nullopt;
         }).has_value();
}

std::int64_t SharedCounter::add(std::int64_t delta, std::stop_token stop) {
  const Operation operation(core_, "add to counter", path_, options_.timeout, std::move(stop));
  return *update(operation, options_, [&](std::int64_t current) {
    return std::optional<std::int64_t>(checked_sum(current, delta, path_));
  });
}

CounterValue SharedCounter::read(std::stop_token stop, std::error_code& ec) const noexcept {
  return detail::without_exceptions(ec, [&] { return read(std::move(stop)); });
}
void SharedCounter::set(std::int64_t value, std::stop_token stop, std::error_code& ec) noexcept {
  detail::without_exceptions(ec, [&] { set(value, std::move(stop)); });
}
bool SharedCounter::compare_and_set(std::int64_t expected, std::int64_t desired, std::stop_token stop,
                                    std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return compare_and_set(expected, desired, std::move(stop)); });
}
std::int64_t SharedCounter::add(std::int64_t delta, std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return add(delta, std::move(stop)); });
}

// ---- the listener ----

namespace {

struct CounterListenerState final : detail::SessionListener, std::enable_shared_from_this<CounterListenerState> {
  CounterListenerState(std::shared_ptr<detail::SessionCore> session_core, std::string watched, CounterLayout format,
                       SharedCounter::Listener on_update)
      : core(std::move(session_core)), path(std::move(watched)), layout(format), listener(std::move(on_update)) {}

  // ---- reading (under core->mutex()) ----

  // Reads the node, with the data watch that reads it again (see WatchedRead).
  void refresh_locked() {
    if (!stopped) reading.read_data_locked(*this, path);
  }

  // The latest read's reply.
  void on_data_locked(zk_errc rc, std::string data, NodeStat stat) {
    if (stopped) return;
    if (rc == zk_errc::no_node) {
      report_locked(CounterUpdate{});
      return reading.retry_later_locked(*this, kMissingNodeRetry);
    }
    if (unanswered(rc)) return;  // read again on the next connection
    if (rc != zk_errc::ok) {
      CounterUpdate update = last_read;
      update.error = make_error_code(rc);
      report_locked(update);
      return stop_locked();
    }
    CounterUpdate update;
    try {
      update.value = decode(layout, data, "read counter", path);
      update.version = stat.version;
      last_read = update;
    } catch (const Error& error) {
      update = last_read;
      update.error = error.code();
    }
    report_locked(update);
  }

  // Tells the listener unless it was told this already (and nothing made it stale since).
  void report_locked(const CounterUpdate& update) {
    if (!need_fresh && reported && reported->value == update.value && reported->version == update.version &&
        reported->error == update.error)
      return;
    need_fresh = false;
    reported = update;
    core->post_callback([weak = weak_from_this(), update] {
      if (auto self = weak.lock()) self->deliver(update);
    });
  }

  void stop_locked() {
    if (stopped) return;
    stopped = true;
    reading.stop_locked(*this);
    core->detach(this);
  }

  // ---- SessionListener (under core->mutex()) ----
  void on_reconnected(std::uint64_t) override {  // the watch set stays set
    need_fresh = true;
    refresh_locked();
  }
  void on_new_session(std::uint64_t) override {
    reading.forget_watch_locked();
    need_fresh = true;
    refresh_locked();
  }
  void on_session_lost(std::uint64_t, LossReason) override {}  // told stale by the state listener
  void on_session_ended(std::error_code why) override {
    if (stopped) return;
    CounterUpdate update = reported.value_or(CounterUpdate{});
    update.stale = true;
    update.error = why ? why : make_error_code(errc::session_closed);
    core->post_callback([weak = weak_from_this(), update] {
      if (auto self = weak.lock()) self->deliver(update);
    });
    stop_locked();
  }

  // ---- calling back (callback thread) ----

  // The session's state listener: it runs on the callback thread in order with the updates, so
  // a drop is told after every value read before it and before every value read after it.
  void on_state(SessionState state) {
    if (state != SessionState::suspended && state != SessionState::lost) return;
    std::optional<CounterUpdate> stale;
    {
      std::lock_guard guard(told_mutex);
      if (!told || told->stale) return;  // nothing told yet, or told stale already
      stale = *told;
      stale->stale = true;
    }
    deliver(*stale);
  }

  void deliver(const CounterUpdate& update) {
    gate.run([&] {
      {
        std::lock_guard guard(told_mutex);
        told = update;
      }
      listener(update);
    });
  }

  // No call starts after this returns; one running on another thread has returned by then.
  void stop() {
    {
      std::lock_guard lock(core->mutex());
      stop_locked();
    }
    state_subscription.reset();  // takes the session mutex itself
    gate.stop();
  }

  const std::shared_ptr<detail::SessionCore> core;
  const std::string path;
  const CounterLayout layout;
  const SharedCounter::Listener listener;
  Subscription state_subscription;  // set once, before the first read

  // Under core->mutex().
  bool stopped = false;
  detail::WatchedRead reading;
  bool need_fresh = true;      // the next read is told even if nothing changed (after a drop)
  CounterUpdate last_read;     // the latest value that decoded
  std::optional<CounterUpdate> reported;

  detail::CallbackGate gate;
  std::mutex told_mutex;
  std::optional<CounterUpdate> told;  // under told_mutex
};

}  // namespace

Subscription SharedCounter::on_change(Listener listener) {
  if (!listener) throw Error(make_error_code(errc::invalid_argument), "listen to counter", path_, "the listener is empty");
  auto state = std::make_shared<CounterListenerState>(core_, path_, options_.layout, std::move(listener));
  state->state_subscription = core_->on_state_change([weak = std::weak_ptr<CounterListenerState>(state)](SessionState s) {
    if (auto self = weak.lock()) self->on_state(s);
  });
  {
    std::lock_guard lock(core_->mutex());
    if (core_->ended()) {
      state->stopped = true;
    } else {
      core_->attach(state);
      state->refresh_locked();
    }
  }
  return Subscription([state] { state->stop(); });
}

}  // namespace zkr
