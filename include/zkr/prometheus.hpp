// SPDX-License-Identifier: Apache-2.0
// The session's metrics in the Prometheus text exposition format (version 0.0.4), for a service's
// /metrics endpoint: serve the text with kPrometheusContentType.
//
// Families (every counter ends in _total; times are in seconds):
//   zkr_locks_held, zkr_locks_waiting                     gauges, by path
//   zkr_lock_wait_seconds, zkr_lock_hold_seconds          histograms (buckets kDurationBuckets), by path
//   zkr_lock_acquire_failures_total                       by path and reason (timeout, cancelled, busy, error)
//   zkr_locks_lost_total                                  by path and reason (the LossReason names)
//   zkr_lock_path_label_overflow_total                    acquisitions past LockPathLabels::max_paths
//   zkr_sessions_established_total, zkr_session_losses_total{cause}, zkr_session_suspensions_total,
//   zkr_session_state{state} (1 for the current state), zkr_session_negotiated_timeout_seconds,
//   zkr_session_lead_time_seconds, zkr_requests_total, zkr_heartbeats_total, zkr_wakeups_total
//
// The `path` label is a recipe path that LockPathLabels opted in, or "" for all other paths; so
// the number of series is bounded by the options, never by the paths a program happens to use.
// Label values are escaped as the format requires, and bytes that are not UTF-8 become U+FFFD.
//
// metric_families() is the one description of these families: prometheus_text() writes it, and
// the optional zkrecipes::prometheus component (<zkr/prometheus_collectable.hpp>) hands it to
// prometheus-cpp; another exporter can read it too.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <zkr/session.hpp>

namespace zkr {

// The Content-Type of the Prometheus text format 0.0.4.
inline constexpr std::string_view kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// A metric's Prometheus type.
enum class MetricType { counter, gauge, histogram };

// One series of a family: its labels (raw values, unescaped) and its value, or for a histogram its
// buckets (upper bound in seconds, cumulative count; the +Inf bucket is `count`), count and sum.
struct MetricSeries {
  std::vector<std::pair<std::string, std::string>> labels;  // label name and value pairs
  double value = 0;  // a counter's or gauge's value
  std::vector<std::pair<double, std::uint64_t>> buckets;  // a histogram's (upper bound, cumulative count) pairs
  std::uint64_t count = 0;  // a histogram's observations
  double sum = 0;  // a histogram's sum of observations
};

// A metric and its series.
struct MetricFamily {
  std::string name;  // e.g. zkr_lock_wait_seconds
  MetricType type = MetricType::gauge;  // counter, gauge or histogram
  std::string help;  // the HELP text
  std::vector<MetricSeries> series;  // one per label set
};

// The families listed above, in that order, from a snapshot.
std::vector<MetricFamily> metric_families(const SessionMetrics& metrics);

// The same text from metrics taken earlier.
std::string prometheus_text(const SessionMetrics& metrics);
// prometheus_text(session.metrics())
std::string prometheus_text(const Session& session);

}  // namespace zkr
