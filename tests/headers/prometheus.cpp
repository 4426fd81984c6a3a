// SPDX-License-Identifier: Apache-2.0
#include <zkr/prometheus.hpp>

// guide.md, "Prometheus text": the text of a session's metrics.
std::string header_prometheus_uses(const zkr::Session& session) {
  return std::string(zkr::kPrometheusContentType) + zkr::prometheus_text(session);
}
