// SPDX-License-Identifier: Apache-2.0
#include "lock_metrics.hpp"

#include <algorithm>

#include <zkr/error.hpp>

namespace zkr::detail {
namespace {
constexpr auto kRelaxed = std::memory_order_relaxed;
}  // namespace

void DurationRecorder::observe(std::chrono::nanoseconds duration) {
  const double seconds = std::chrono::duration<double>(duration).count();
  const auto bucket = static_cast<std::size_t>(
      std::lower_bound(std::begin(kDurationBuckets), std::end(kDurationBuckets), seconds) - std::begin(kDurationBuckets));
  buckets_[bucket].fetch_add(1, kRelaxed);
  sum_ns_.fetch_add(duration.count(), kRelaxed);
}

DurationHistogram DurationRecorder::snapshot() const {
  // Recording goes on meanwhile: the count is the sum of the buckets read, so that the +Inf
  // bucket always equals it (the sum may include an observation the buckets do not yet).
  DurationHistogram out;
  std::uint64_t running = 0;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    running += buckets_[i].load(kRelaxed);
    out.cumulative_counts[i] = running;
  }
  out.count = running;
  out.sum = std::chrono::nanoseconds(sum_ns_.load(kRelaxed));
  return out;
}

void LockSeries::decided(std::error_code outcome) {
  waiting_.fetch_sub(1, kRelaxed);
  if (!outcome) return;  // a grant: granted() records it
  if (outcome == errc::timed_out) timeouts_.fetch_add(1, kRelaxed);
  else if (outcome == errc::cancelled) cancellations_.fetch_add(1, kRelaxed);
  else if (outcome == errc::would_block) busy_.fetch_add(1, kRelaxed);
  else failures_.fetch_add(1, kRelaxed);
}

void LockSeries::granted(std::chrono::nanoseconds wait) {
  held_.fetch_add(1, kRelaxed);
  wait_.observe(wait);
}

void LockSeries::hold_ended(std::chrono::nanoseconds hold) {
  held_.fetch_sub(1, kRelaxed);
  hold_.observe(hold);
}

void LockSeries::lost(LossReason reason) {
  const auto index = static_cast<std::size_t>(reason);
  if (index < losses_.size()) losses_[index].fetch_add(1, kRelaxed);
}

LockMetrics LockSeries::snapshot() const {
  LockMetrics out;
  out.path = path_;
  out.held = held_.load(kRelaxed);
  out.waiting = waiting_.load(kRelaxed);
  out.wait = wait_.snapshot();
  out.hold = hold_.snapshot();
  out.timeouts = timeouts_.load(kRelaxed);
  out.cancellations = cancellations_.load(kRelaxed);
  out.busy = busy_.load(kRelaxed);
  out.failures = failures_.load(kRelaxed);
  for (std::size_t i = 0; i < losses_.size(); ++i) out.losses[i] = losses_[i].load(kRelaxed);
  return out;
}

bool LockMetricsRegistry::opted_in(std::string_view path) const {
  return std::any_of(labels_.paths.begin(), labels_.paths.end(), [path](const std::string& entry) {
    if (!entry.empty() && entry.back() == '/') return path.size() > entry.size() && path.starts_with(entry);
    return path == entry;
  });
}

LockSeries& LockMetricsRegistry::series_for(std::string_view path) {
  if (!opted_in(path)) return unlabelled_;
  std::lock_guard lock(mutex_);
  if (auto found = labelled_.find(path); found != labelled_.end()) return *found->second;
  if (labelled_.size() >= labels_.max_paths) {
    overflow_.fetch_add(1, kRelaxed);
    return unlabelled_;
  }
  auto series = std::make_unique<LockSeries>(std::string(path));
  LockSeries& added = *series;
  labelled_.emplace(std::string(path), std::move(series));
  return added;
}

std::vector<LockMetrics> LockMetricsRegistry::snapshot() const {
  std::vector<LockMetrics> out{unlabelled_.snapshot()};
  std::lock_guard lock(mutex_);
  for (const auto& [path, series] : labelled_) out.push_back(series->snapshot());
  return out;
}

}  // namespace zkr::detail

