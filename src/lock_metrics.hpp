// SPDX-License-Identifier: Apache-2.0
// Per-lock metrics: the series the contender queue records into, one per recipe path that the
// session's LockPathLabels name and one for all other paths (zkr::LockMetrics).
//
// Recording is a few relaxed atomic increments on a series the contender looked up once, when it
// started: no lock and no allocation per event. Only the first acquisition on a labelled path
// allocates its series; series live as long as the session, so the number of them is the cap.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/session.hpp>

namespace zkr::detail {

class DurationRecorder {
 public:
  void observe(std::chrono::nanoseconds duration);
  DurationHistogram snapshot() const;

 private:
  std::array<std::atomic<std::uint64_t>, kDurationBucketCount> buckets_{};  // not cumulative
  std::atomic<std::int64_t> sum_ns_{0};
};

class LockSeries {
 public:
  explicit LockSeries(std::string path) : path_(std::move(path)) {}

  void asked() { waiting_.fetch_add(1, std::memory_order_relaxed); }
  // The acquisition's outcome (success: the grant).
  void decided(std::error_code outcome);
  void abandoned() { waiting_.fetch_sub(1, std::memory_order_relaxed); }  // gone without an outcome
  void granted(std::chrono::nanoseconds wait);
  void hold_ended(std::chrono::nanoseconds hold);
  void lost(LossReason reason);

  LockMetrics snapshot() const;

 private:
  const std::string path_;
  std::atomic<std::int64_t> held_{0}, waiting_{0};
  DurationRecorder wait_, hold_;
  std::atomic<std::uint64_t> timeouts_{0}, cancellations_{0}, busy_{0}, failures_{0};
  std::array<std::atomic<std::uint64_t>, std::tuple_size_v<decltype(LockMetrics::losses)>> losses_{};
};

class LockMetricsRegistry {
 public:
  explicit LockMetricsRegistry(LockPathLabels labels) : labels_(std::move(labels)) {}

  // The series an acquisition on `path` records into; it lives as long as the registry.
  LockSeries& series_for(std::string_view path);
  // The "" series first, then the labelled paths sorted by path.
  std::vector<LockMetrics> snapshot() const;
  std::uint64_t overflow() const { return overflow_.load(std::memory_order_relaxed); }

 private:
  bool opted_in(std::string_view path) const;

  const LockPathLabels labels_;
  LockSeries unlabelled_{""};
  mutable std::mutex mutex_;
  std::map<std::string, std::unique_ptr<LockSeries>, std::less<>> labelled_;  // guarded by mutex_
  std::atomic<std::uint64_t> overflow_{0};
};

}  // namespace zkr::detail
