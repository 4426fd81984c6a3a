// SPDX-License-Identifier: Apache-2.0
// The optional zkrecipes::prometheus component: a session's metrics as a prometheus-cpp
// Collectable, for a service that already exports with prometheus-cpp (Debian's
// prometheus-cpp-dev). Link zkrecipes::prometheus; the library itself never links prometheus-cpp.
//
//   auto metrics = std::make_shared<zkr::PrometheusCollectable>(session);
//   exposer.RegisterCollectable(registry);  // the service's own metrics
//   exposer.RegisterCollectable(metrics);   // zkr_* beside them, on the same /metrics
//
// The families, names, labels and help texts are those of prometheus_text() (<zkr/prometheus.hpp>,
// metric_families()): both read the one description. Each Collect() takes a fresh snapshot.
#pragma once

#include <functional>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <zkr/prometheus.hpp>
#include <zkr/session.hpp>

namespace zkr {

// A session's metrics as a prometheus-cpp Collectable (the zkrecipes::prometheus component).
class PrometheusCollectable final : public prometheus::Collectable {
 public:
  // The session must outlive the collectable: unregister it (or destroy the Exposer) first.
  explicit PrometheusCollectable(const Session& session);
  // Any source of snapshots, such as several sessions' metrics combined by the caller.
  explicit PrometheusCollectable(std::function<SessionMetrics()> snapshot);

  // The session's metrics now, as prometheus-cpp's metric families.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  std::function<SessionMetrics()> snapshot_;
};

// metric_families() in prometheus-cpp's terms.
std::vector<prometheus::MetricFamily> to_prometheus(const std::vector<MetricFamily>& families);

}  // namespace zkr
