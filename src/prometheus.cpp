// The Prometheus text format written by hand: it is small and fully specified, and Debian
// bookworm has no prometheus-cpp package, which the library would otherwise make every user
// install (tests/unit/prometheus_text_test.cpp checks the output with python3-prometheus-client's
// parser).
#include <zkr/prometheus.hpp>

#include <array>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "text_escape.hpp"

namespace zkr {
namespace {

// A label set: pairs of name and raw value (escaped when written).
using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  template <typename Value>
  void sample(std::string_view name, Labels labels, Value value) {
    out_ += name;
    if (labels.size() != 0) {
      char separator = '{';
      for (const auto& [label, value_text] : labels) {
        out_ += separator;
        out_ += label;
        out_ += "=\"";
        detail::append_label_value(out_, value_text);
        out_ += '"';
        separator = ',';
      }
      out_ += '}';
    }
    fmt::format_to(std::back_inserter(out_), " {}\n", value);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

double seconds(std::chrono::nanoseconds duration) { return std::chrono::duration<double>(duration).count(); }

std::string_view label_of(LossReason reason) {
  switch (reason) {
    case LossReason::session_lost: return "session_lost";
    case LossReason::connection_lost: return "connection_lost";
    case LossReason::node_deleted: return "node_deleted";
    case LossReason::session_closed: return "session_closed";
  }
  return "unknown";
}

constexpr std::array kLossReasons = {LossReason::session_lost, LossReason::connection_lost,
                                     LossReason::node_deleted, LossReason::session_closed};
constexpr std::array kStates = {SessionState::connecting, SessionState::connected, SessionState::suspended,
                                SessionState::lost,       SessionState::closed,    SessionState::auth_failed};

void histogram(Exposition& out, std::string_view name, const std::vector<LockMetrics>& locks,
               DurationHistogram LockMetrics::*member) {
  const std::string bucket = fmt::format("{}_bucket", name), sum = fmt::format("{}_sum", name),
                    count = fmt::format("{}_count", name);
  static const std::array<std::string, std::size(kDurationBuckets)> bounds = [] {
    std::array<std::string, std::size(kDurationBuckets)> texts;
    for (std::size_t i = 0; i < texts.size(); ++i) texts[i] = fmt::format("{}", kDurationBuckets[i]);
    return texts;
  }();
  for (const auto& lock : locks) {
    const DurationHistogram& h = lock.*member;
    for (std::size_t i = 0; i < bounds.size(); ++i)
      out.sample(bucket, {{"path", lock.path}, {"le", bounds[i]}}, h.cumulative_counts[i]);
    out.sample(bucket, {{"path", lock.path}, {"le", "+Inf"}}, h.count);
    out.sample(sum, {{"path", lock.path}}, seconds(h.sum));
    out.sample(count, {{"path", lock.path}}, h.count);
  }
}

}  // namespace

std::string prometheus_text(const SessionMetrics& m) {
  Exposition out;
  out.family("zkr_locks_held", "gauge", "Grants held now (locks, read/write locks, semaphore leases, leadership), by recipe path.");
  for (const auto& lock : m.locks) out.sample("zkr_locks_held", {{"path", lock.path}}, lock.held);
  out.family("zkr_locks_waiting", "gauge", "Acquisitions asked for and not yet decided, by recipe path.");
  for (const auto& lock : m.locks) out.sample("zkr_locks_waiting", {{"path", lock.path}}, lock.waiting);
  out.family("zkr_lock_wait_seconds", "histogram", "Time from asking for a grant to getting it, per grant.");
  histogram(out, "zkr_lock_wait_seconds", m.locks, &LockMetrics::wait);
  out.family("zkr_lock_hold_seconds", "histogram", "Time from a grant to its release or loss, per hold that ended.");
  histogram(out, "zkr_lock_hold_seconds", m.locks, &LockMetrics::hold);
  out.family("zkr_lock_acquire_failures_total", "counter", "Acquisitions that ended without a grant, by reason.");
  for (const auto& lock : m.locks) {
    out.sample("zkr_lock_acquire_failures_total", {{"path", lock.path}, {"reason", "timeout"}}, lock.timeouts);
    out.sample("zkr_lock_acquire_failures_total", {{"path", lock.path}, {"reason", "cancelled"}}, lock.cancellations);
    out.sample("zkr_lock_acquire_failures_total", {{"path", lock.path}, {"reason", "busy"}}, lock.busy);
    out.sample("zkr_lock_acquire_failures_total", {{"path", lock.path}, {"reason", "error"}}, lock.failures);
  }
  out.family("zkr_locks_lost_total", "counter", "Grants lost while held, by reason.");
  for (const auto& lock : m.locks)
    for (auto reason : kLossReasons)
      out.sample("zkr_locks_lost_total", {{"path", lock.path}, {"reason", label_of(reason)}},
                 lock.losses[static_cast<std::size_t>(reason)]);
  out.family("zkr_lock_path_label_overflow_total", "counter",
             "Acquisitions on opted-in paths counted under path=\"\" because max_paths paths had series already.");
  out.sample("zkr_lock_path_label_overflow_total", {}, m.unlabelled_overflow);
  out.family("zkr_wakeups_total", "counter", "Blocker watches that fired for waiting contenders (a lock release wakes at most two).");
  out.sample("zkr_wakeups_total", {}, m.wakeups);

  out.family("zkr_sessions_established_total", "counter", "Sessions established, replacements included.");
  out.sample("zkr_sessions_established_total", {}, m.sessions_established);
  out.family("zkr_session_losses_total", "counter", "Sessions lost, by what decided it.");
  out.sample("zkr_session_losses_total", {{"cause", "deadline"}}, m.losses_by_deadline);
  out.sample("zkr_session_losses_total", {{"cause", "expiry"}}, m.losses_by_expiry);
  out.sample("zkr_session_losses_total", {{"cause", "disconnect"}}, m.losses_by_disconnect);
  out.family("zkr_session_suspensions_total", "counter", "Connection drops while the session lived on.");
  out.sample("zkr_session_suspensions_total", {}, m.suspensions);
  out.family("zkr_session_state", "gauge", "1 for the session's current state, 0 for the others.");
  for (auto state : kStates) out.sample("zkr_session_state", {{"state", to_string(state)}}, m.state == state ? 1 : 0);
  out.family("zkr_session_negotiated_timeout_seconds", "gauge", "Session timeout the ensemble granted.");
  out.sample("zkr_session_negotiated_timeout_seconds", {}, seconds(m.negotiated_timeout));
  out.family("zkr_session_lead_time_seconds", "gauge", "Warning holders get before the earliest possible expiry.");
  out.sample("zkr_session_lead_time_seconds", {}, seconds(m.lead_time));
  out.family("zkr_requests_total", "counter", "Requests sent to the ensemble.");
  out.sample("zkr_requests_total", {}, m.requests_sent);
  out.family("zkr_heartbeats_total", "counter", "Heartbeat requests among them.");
  out.sample("zkr_heartbeats_total", {}, m.heartbeats_sent);
  return out.take();
}

std::string prometheus_text(const Session& session) { return prometheus_text(session.metrics()); }

}  // namespace zkr
