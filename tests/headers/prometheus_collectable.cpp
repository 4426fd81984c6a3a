// SPDX-License-Identifier: Apache-2.0
#include <zkr/prometheus_collectable.hpp>

// guide.md, the zkrecipes::prometheus component: a session's metrics as a Collectable.
std::vector<prometheus::MetricFamily> header_prometheus_collectable_uses(const zkr::Session& session) {
  const zkr::PrometheusCollectable metrics(session);
  return metrics.Collect();
}
