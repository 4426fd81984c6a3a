// SPDX-License-Identifier: Apache-2.0
// The Prometheus text format written by hand: it is small and fully specified, and the library
// stays free of prometheus-cpp, which it would otherwise make every user install (the optional
// zkrecipes::prometheus component, prometheus/, is for services that use it already).
// tests/unit/observability_format_test.cpp checks the output with python3-prometheus-client's
// parser; the families themselves are described once, by metric_families().
#include <zkr/prometheus.hpp>

#include <array>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "text_escape.hpp"

namespace zkr {
namespace {

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

class Families {
 public:
  Families& family(std::string name, MetricType type, std::string help) {
    families_.push_back(MetricFamily{std::move(name), type, std::move(help), {}});
    return *this;
  }
  template <typename Value>
  Families& sample(std::vector<std::pair<std::string, std::string>> labels, Value value) {
    families_.back().series.push_back(MetricSeries{std::move(labels), static_cast<double>(value), {}, 0, 0});
    return *this;
  }
  void histograms(const std::vector<LockMetrics>& locks, DurationHistogram LockMetrics::*member) {
    for (const auto& lock : locks) {
      const DurationHistogram& h = lock.*member;
      MetricSeries series{{{"path", lock.path}}, 0, {}, h.count, seconds(h.sum)};
      for (std::size_t i = 0; i < std::size(kDurationBuckets); ++i)
        series.buckets.emplace_back(kDurationBuckets[i], h.cumulative_counts[i]);
      families_.back().series.push_back(std::move(series));
    }
  }
  std::vector<MetricFamily> take() { return std::move(families_); }

 private:
  std::vector<MetricFamily> families_;
};

void append_series_name(std::string& out, std::string_view name,
                        const std::vector<std::pair<std::string, std::string>>& labels,
                        std::pair<std::string_view, std::string_view> extra = {}) {
  out += name;
  if (labels.empty() && extra.first.empty()) return;
  char separator = '{';
  const auto label = [&](std::string_view label_name, std::string_view value) {
    out += separator;
    out += label_name;
    out += "=\"";
    detail::append_label_value(out, value);
    out += '"';
    separator = ',';
  };
  for (const auto& [label_name, value] : labels) label(label_name, value);
  if (!extra.first.empty()) label(extra.first, extra.second);
  out += '}';
}

// The text of a bucket's bound: kDurationBuckets' are written once.
std::string bound_text(std::size_t index, double bound) {
  static const std::array<std::string, std::size(kDurationBuckets)> texts = [] {
    std::array<std::string, std::size(kDurationBuckets)> formatted;
    for (std::size_t i = 0; i < formatted.size(); ++i) formatted[i] = fmt::format("{}", kDurationBuckets[i]);
    return formatted;
  }();
  return index < texts.size() && bound == kDurationBuckets[index] ? texts[index] : fmt::format("{}", bound);
}

}  // namespace

std::vector<MetricFamily> metric_families(const SessionMetrics& m) {
  using enum MetricType;
  Families out;
  out.family("zkr_locks_held", gauge, "Grants held now (locks, read/write locks, semaphore leases, leadership), by recipe path.");
  for (const auto& lock : m.locks) out.sample({{"path", lock.path}}, lock.held);
  out.family("zkr_locks_waiting", gauge, "Acquisitions asked for and not yet decided, by recipe path.");
  for (const auto& lock : m.locks) out.sample({{"path", lock.path}}, lock.waiting);
  out.family("zkr_lock_wait_seconds", histogram, "Time from asking for a grant to getting it, per grant.");
  out.histograms(m.locks, &LockMetrics::wait);
  out.family("zkr_lock_hold_seconds", histogram, "Time from a grant to its release or loss, per hold that ended.");
  out.histograms(m.locks, &LockMetrics::hold);
  out.family("zkr_lock_acquire_failures_total", counter, "Acquisitions that ended without a grant, by reason.");
  for (const auto& lock : m.locks) {
    out.sample({{"path", lock.path}, {"reason", "timeout"}}, lock.timeouts)
        .sample({{"path", lock.path}, {"reason", "cancelled"}}, lock.cancellations)
        .sample({{"path", lock.path}, {"reason", "busy"}}, lock.busy)
        .sample({{"path", lock.path}, {"reason", "error"}}, lock.failures);
  }
  out.family("zkr_locks_lost_total", counter, "Grants lost while held, by reason.");
  for (const auto& lock : m.locks)
    for (auto reason : kLossReasons)
      out.sample({{"path", lock.path}, {"reason", std::string(label_of(reason))}},
                 lock.losses[static_cast<std::size_t>(reason)]);
  out.family("zkr_lock_path_label_overflow_total", counter,
             "Acquisitions on opted-in paths counted under path=\"\" because max_paths paths had series already.")
      .sample({}, m.unlabelled_overflow);
  out.family("zkr_wakeups_total", counter, "Blocker watches that fired for waiting contenders (a lock release wakes at most two).")
      .sample({}, m.wakeups);
  out.family("zkr_counter_writes_total", counter,
             "Shared counter writes: applied, lost to another writer and retried (conflict), of unknown outcome.")
      .sample({{"outcome", "applied"}}, m.counter_writes)
      .sample({{"outcome", "conflict"}}, m.counter_conflicts)
      .sample({{"outcome", "unknown"}}, m.counter_unknown_outcomes);
  out.family("zkr_group_membership_changes_total", counter,
             "Group members that joined, joined again on a new session after a loss (rejoined), or lost their node.")
      .sample({{"change", "joined"}}, m.group_joins)
      .sample({{"change", "rejoined"}}, m.group_rejoins)
      .sample({{"change", "lost"}}, m.group_losses);
  out.family("zkr_group_views_stale_total", counter, "Group views that went from fresh to stale (a drop, a session loss).")
      .sample({}, m.group_views_stale);
  out.family("zkr_barrier_waits_total", counter,
             "Barrier waits (wait, enter, leave) by how they ended: passed, timeout, cancelled, error.")
      .sample({{"outcome", "passed"}}, m.barrier_passes)
      .sample({{"outcome", "timeout"}}, m.barrier_timeouts)
      .sample({{"outcome", "cancelled"}}, m.barrier_cancellations)
      .sample({{"outcome", "error"}}, m.barrier_failures);

  out.family("zkr_sessions_established_total", counter, "Sessions established, replacements included.")
      .sample({}, m.sessions_established);
  out.family("zkr_session_losses_total", counter, "Sessions lost, by what decided it.")
      .sample({{"cause", "deadline"}}, m.losses_by_deadline)
      .sample({{"cause", "expiry"}}, m.losses_by_expiry)
      .sample({{"cause", "disconnect"}}, m.losses_by_disconnect);
  out.family("zkr_session_deadline_rechecks_total", counter,
             "Deadlines the session monitor slept through (a frozen process) and asked the ensemble about.")
      .sample({}, m.deadline_rechecks);
  out.family("zkr_session_suspensions_total", counter, "Connection drops while the session lived on.")
      .sample({}, m.suspensions);
  out.family("zkr_session_state", gauge, "1 for the session's current state, 0 for the others.");
  for (auto state : kStates) out.sample({{"state", std::string(to_string(state))}}, m.state == state ? 1 : 0);
  out.family("zkr_session_negotiated_timeout_seconds", gauge, "Session timeout the ensemble granted.")
      .sample({}, seconds(m.negotiated_timeout));
  out.family("zkr_session_lead_time_seconds", gauge, "Warning holders get before the earliest possible expiry.")
      .sample({}, seconds(m.lead_time));
  out.family("zkr_requests_total", counter, "Requests sent to the ensemble.").sample({}, m.requests_sent);
  out.family("zkr_heartbeats_total", counter, "Heartbeat requests among them.").sample({}, m.heartbeats_sent);
  return out.take();
}

std::string prometheus_text(const SessionMetrics& metrics) {
  std::string out;
  for (const MetricFamily& family : metric_families(metrics)) {
    const std::string_view type = family.type == MetricType::counter ? "counter"
                                  : family.type == MetricType::gauge ? "gauge"
                                                                      : "histogram";
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", family.name, family.help, family.name, type);
    for (const MetricSeries& series : family.series) {
      if (family.type != MetricType::histogram) {
        append_series_name(out, family.name, series.labels);
        fmt::format_to(std::back_inserter(out), " {}\n", series.value);
        continue;
      }
      const std::string bucket = family.name + "_bucket";
      for (std::size_t i = 0; i < series.buckets.size(); ++i) {
        const auto& [bound, count] = series.buckets[i];
        append_series_name(out, bucket, series.labels, {"le", bound_text(i, bound)});
        fmt::format_to(std::back_inserter(out), " {}\n", count);
      }
      append_series_name(out, bucket, series.labels, {"le", "+Inf"});
      fmt::format_to(std::back_inserter(out), " {}\n", series.count);
      append_series_name(out, family.name + "_sum", series.labels);
      fmt::format_to(std::back_inserter(out), " {}\n", series.sum);
      append_series_name(out, family.name + "_count", series.labels);
      fmt::format_to(std::back_inserter(out), " {}\n", series.count);
    }
  }
  return out;
}

std::string prometheus_text(const Session& session) { return prometheus_text(session.metrics()); }

}  // namespace zkr
