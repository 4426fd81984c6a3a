// SPDX-License-Identifier: Apache-2.0
// Collects a snapshot through the installed zkrecipes::prometheus component, without a server.
#include <cstdio>

#include <zkr/prometheus_collectable.hpp>

int main() {
  zkr::PrometheusCollectable collectable([] {
    zkr::SessionMetrics metrics;
    metrics.sessions_established = 3;
    return metrics;
  });
  for (const auto& family : collectable.Collect()) {
    if (family.name == "zkr_sessions_established_total" && family.metric.size() == 1 &&
        family.metric.front().counter.value == 3) {
      std::puts("consumer: all checks passed");
      return 0;
    }
  }
  std::puts("consumer: zkr_sessions_established_total 3 was not collected");
  return 1;
}
