// SPDX-License-Identifier: Apache-2.0
#include <zkr/prometheus_collectable.hpp>

#include <limits>
#include <utility>

namespace zkr {

PrometheusCollectable::PrometheusCollectable(const Session& session)
    : snapshot_([&session] { return session.metrics(); }) {}

PrometheusCollectable::PrometheusCollectable(std::function<SessionMetrics()> snapshot)
    : snapshot_(std::move(snapshot)) {}

std::vector<prometheus::MetricFamily> PrometheusCollectable::Collect() const {
  return to_prometheus(metric_families(snapshot_()));
}

std::vector<prometheus::MetricFamily> to_prometheus(const std::vector<MetricFamily>& families) {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families.size());
  for (const MetricFamily& family : families) {
    prometheus::MetricFamily& converted = out.emplace_back();
    converted.name = family.name;
    converted.help = family.help;
    converted.type = family.type == MetricType::counter ? prometheus::MetricType::Counter
                     : family.type == MetricType::gauge ? prometheus::MetricType::Gauge
                                                        : prometheus::MetricType::Histogram;
    for (const MetricSeries& series : family.series) {
      prometheus::ClientMetric& metric = converted.metric.emplace_back();
      for (const auto& [name, value] : series.labels) metric.label.push_back({name, value});
      switch (family.type) {
        case MetricType::counter: metric.counter.value = series.value; break;
        case MetricType::gauge: metric.gauge.value = series.value; break;
        case MetricType::histogram:
          metric.histogram.sample_count = series.count;
          metric.histogram.sample_sum = series.sum;
          for (const auto& [bound, count] : series.buckets) metric.histogram.bucket.push_back({count, bound});
          metric.histogram.bucket.push_back({series.count, std::numeric_limits<double>::infinity()});
          break;
      }
    }
  }
  return out;
}

}  // namespace zkr
