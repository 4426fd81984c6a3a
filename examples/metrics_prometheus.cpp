// Exports a session's counters and timings in the Prometheus text format.
//
// zkr::Session::metrics() returns a snapshot of plain counters; a service serves them on its
// /metrics endpoint. This example makes some traffic on one lock (grants, a wait that times out,
// a wait that is cancelled), counts session state changes with Session::on_state_change, and
// prints what a scrape would see. It checks the counters against what it did and exits 1 if they
// disagree, so the test suite can run it.
//
// Usage: zkr_metrics_prometheus SERVERS
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <stop_token>
#include <string>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>
#include <zkr/session.hpp>

using namespace std::chrono_literals;

namespace {

constexpr std::array kStates = {zkr::SessionState::connecting, zkr::SessionState::connected,
                                zkr::SessionState::suspended,  zkr::SessionState::lost,
                                zkr::SessionState::closed,     zkr::SessionState::auth_failed};

// Counts every state the session enters (the listener runs on the session's callback thread).
// A listener can only subscribe once the constructor has connected, so the first "connected" is
// not counted; a replacement session's is.
class StateChangeCounter {
 public:
  explicit StateChangeCounter(zkr::Session& session)
      : subscription_(session.on_state_change([this](zkr::SessionState state) {
          ++counts_[static_cast<std::size_t>(state)];
        })) {}
  std::uint64_t count(zkr::SessionState state) const { return counts_[static_cast<std::size_t>(state)]; }

 private:
  std::array<std::atomic<std::uint64_t>, kStates.size()> counts_{};
  zkr::Subscription subscription_;
};

double seconds(std::chrono::nanoseconds duration) { return std::chrono::duration<double>(duration).count(); }

void metric(fmt::memory_buffer& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename Value>
void sample(fmt::memory_buffer& out, std::string_view name, std::string_view labels, Value value) {
  if (labels.empty()) fmt::format_to(std::back_inserter(out), "{} {}\n", name, value);
  else fmt::format_to(std::back_inserter(out), "{}{{{}}} {}\n", name, labels, value);
}

// The whole exposition for one session. Counters end in _total; accumulated times are counters
// in seconds (rate(wait) / rate(acquisitions) is the mean wait).
std::string prometheus_text(const zkr::Session& session, const StateChangeCounter& changes) {
  const zkr::SessionMetrics m = session.metrics();
  fmt::memory_buffer out;

  metric(out, "zkr_lock_acquisitions_total", "counter", "Lock grants (every recipe on this session).");
  sample(out, "zkr_lock_acquisitions_total", "", m.acquisitions);
  metric(out, "zkr_lock_wait_seconds_total", "counter", "Time from asking for a lock to its grant, summed over grants.");
  sample(out, "zkr_lock_wait_seconds_total", "", seconds(m.total_wait));
  metric(out, "zkr_lock_hold_seconds_total", "counter", "Time locks were held, summed over holds that ended.");
  sample(out, "zkr_lock_hold_seconds_total", "", seconds(m.total_hold));
  metric(out, "zkr_lock_acquire_failures_total", "counter", "Waits that ended without a grant, by reason.");
  sample(out, "zkr_lock_acquire_failures_total", "reason=\"timeout\"", m.acquire_timeouts);
  sample(out, "zkr_lock_acquire_failures_total", "reason=\"cancelled\"", m.acquire_cancellations);
  metric(out, "zkr_locks_lost_total", "counter", "Held locks lost (session loss, deleted node, close).");
  sample(out, "zkr_locks_lost_total", "", m.locks_lost);
  metric(out, "zkr_wakeups_total", "counter", "Predecessor watches that fired (each wakes one waiter).");
  sample(out, "zkr_wakeups_total", "", m.wakeups);

  metric(out, "zkr_sessions_established_total", "counter", "Sessions established, replacements included.");
  sample(out, "zkr_sessions_established_total", "", m.sessions_established);
  metric(out, "zkr_session_losses_total", "counter", "Sessions lost, by cause.");
  sample(out, "zkr_session_losses_total", "cause=\"deadline\"", m.losses_by_deadline);
  sample(out, "zkr_session_losses_total", "cause=\"expiry\"", m.losses_by_expiry);
  sample(out, "zkr_session_losses_total", "cause=\"disconnect\"", m.losses_by_disconnect);
  metric(out, "zkr_session_suspensions_total", "counter", "Connection drops while the session lived on.");
  sample(out, "zkr_session_suspensions_total", "", m.suspensions);
  metric(out, "zkr_session_state_changes_total", "counter", "Session state changes, by the state entered.");
  for (auto state : kStates)
    sample(out, "zkr_session_state_changes_total", fmt::format("state=\"{}\"", zkr::to_string(state)),
           changes.count(state));
  metric(out, "zkr_session_state", "gauge", "1 for the session's current state.");
  for (auto state : kStates)
    sample(out, "zkr_session_state", fmt::format("state=\"{}\"", zkr::to_string(state)),
           session.state() == state ? 1 : 0);
  metric(out, "zkr_session_negotiated_timeout_seconds", "gauge", "Session timeout the ensemble granted.");
  sample(out, "zkr_session_negotiated_timeout_seconds", "", seconds(session.negotiated_timeout()));
  metric(out, "zkr_session_lead_time_seconds", "gauge", "Warning holders get before the earliest possible expiry.");
  sample(out, "zkr_session_lead_time_seconds", "", seconds(session.lead_time()));

  metric(out, "zkr_requests_total", "counter", "Requests sent to the ensemble.");
  sample(out, "zkr_requests_total", "", m.requests_sent);
  metric(out, "zkr_heartbeats_total", "counter", "Heartbeat requests among them.");
  sample(out, "zkr_heartbeats_total", "", m.heartbeats_sent);
  return fmt::to_string(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: zkr_metrics_prometheus SERVERS   (e.g. 127.0.0.1:2181)\n");
    return 64;
  }
  const std::string path = fmt::format("/zkr-examples/metrics-{}", getpid());
  try {
    zkr::SessionOptions options;
    options.servers = argv[1];
    zkr::Session session(options), other(options);
    StateChangeCounter changes(session);
    zkr::Lock lock(session, path);
    zkr::Lock other_lock(other, path);

    // Three grants, each held a little while.
    constexpr int kGrants = 3;
    constexpr auto kHold = 20ms;
    for (int i = 0; i < kGrants; ++i) {
      zkr::HeldLock held = lock.acquire();
      std::this_thread::sleep_for(kHold);
    }

    // Another process holds the lock: one wait times out, one is cancelled.
    zkr::HeldLock held_elsewhere = other_lock.acquire();
    const bool timed_out_empty = !lock.try_acquire_for(200ms).has_value();
    std::stop_source stop;
    std::jthread canceller([&stop] {
      std::this_thread::sleep_for(100ms);
      stop.request_stop();
    });
    const bool cancelled_empty = !lock.try_acquire_for(30s, stop.get_token()).has_value();
    held_elsewhere.release();

    fmt::print("{}", prometheus_text(session, changes));

    // What this run did, against what the counters say.
    const zkr::SessionMetrics m = session.metrics();
    int problems = 0;
    auto expect = [&problems](bool ok, std::string_view what) {
      if (!ok) {
        fmt::print("# MISMATCH: {}\n", what);
        ++problems;
      }
    };
    expect(timed_out_empty && cancelled_empty, "both contested waits ended without a grant");
    expect(m.acquisitions == kGrants, fmt::format("acquisitions {} == {}", m.acquisitions, kGrants));
    expect(m.acquire_timeouts == 1, fmt::format("acquire_timeouts {} == 1", m.acquire_timeouts));
    expect(m.acquire_cancellations == 1, fmt::format("acquire_cancellations {} == 1", m.acquire_cancellations));
    expect(m.total_hold >= kGrants * kHold, "total hold covers the three holds");
    expect(m.total_wait > std::chrono::nanoseconds::zero(), "some wait was recorded");
    expect(m.sessions_established == 1 && m.sessions_lost == 0, "one session, never lost");
    expect(session.state() == zkr::SessionState::connected, "the session is connected");
    if (problems != 0) return 1;
    fmt::print("# metrics consistent with this run\n");
    return 0;
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "zkr_metrics_prometheus: {}\n", e.what());
    return 1;
  }
}
