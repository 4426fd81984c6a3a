// SPDX-License-Identifier: Apache-2.0
// Micro benchmarks of the library's pure functions: the work a contender does on every children
// list (parse and sort the names) and a fenced resource does on every write (FenceGate::admit),
// and what per-lock metrics cost: recording one acquisition, and writing a scrape.
// Run: zkr_bench_micro [--benchmark_filter=...]
#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <zkr/fence_gate.hpp>
#include <zkr/names.hpp>
#include <zkr/prometheus.hpp>

#include "lock_metrics.hpp"  // the library's own: what the contender queue records into

namespace {

// A children list as a contended lock path holds it: Curator-style names, shuffled.
std::vector<std::string> lock_children(int count) {
  std::vector<std::string> names;
  for (int i = 0; i < count; ++i)
    names.push_back(fmt::format("_c_{:08x}-8c3e-4f0a-9b7d-{:012x}-lock-{:010}", i * 7919, i * 104729, i));
  std::shuffle(names.begin(), names.end(), std::mt19937(42));
  return names;
}

void parse_contender_name_curator(benchmark::State& state) {
  const std::string name = "_c_2f1b6a52-8c3e-4f0a-9b7d-5e2a9c1d7f40-lock-0000004711";
  for (auto _ : state) benchmark::DoNotOptimize(zkr::parse_contender_name(name));
}
BENCHMARK(parse_contender_name_curator);

void parse_contender_name_kazoo(benchmark::State& state) {
  const std::string name = "2f1b6a528c3e4f0a9b7d5e2a9c1d7f40__lock__0000004711";
  for (auto _ : state) benchmark::DoNotOptimize(zkr::parse_contender_name(name));
}
BENCHMARK(parse_contender_name_kazoo);

void parse_contender_name_foreign(benchmark::State& state) {
  const std::string name = "config-backup-2024";
  for (auto _ : state) benchmark::DoNotOptimize(zkr::parse_contender_name(name));
}
BENCHMARK(parse_contender_name_foreign);

// Parse and sort a whole children list: what a waiter does after each wake-up.
void parse_and_sort_children(benchmark::State& state) {
  const auto children = lock_children(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    std::vector<zkr::ContenderName> contenders;
    contenders.reserve(children.size());
    for (const auto& child : children)
      if (auto parsed = zkr::parse_contender_name(child)) contenders.push_back(std::move(*parsed));
    zkr::sort_by_sequence(contenders);
    benchmark::DoNotOptimize(contenders.data());
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(parse_and_sort_children)->Arg(2)->Arg(32)->Arg(1000);

void fence_gate_admit_one_key(benchmark::State& state) {
  zkr::FenceGate gate;
  std::int64_t zxid = 1;
  for (auto _ : state) benchmark::DoNotOptimize(gate.admit("accounts/42", zkr::FencingToken(++zxid)));
}
BENCHMARK(fence_gate_admit_one_key);

void fence_gate_admit_many_keys(benchmark::State& state) {
  zkr::FenceGate gate;
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back(fmt::format("accounts/{}", i));
  std::int64_t zxid = 1;
  std::size_t next = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(gate.admit(keys[next], zkr::FencingToken(++zxid)));
    next = (next + 1) % keys.size();
  }
}
BENCHMARK(fence_gate_admit_many_keys);

void fence_gate_refuse_stale(benchmark::State& state) {
  zkr::FenceGate gate;
  gate.admit("accounts/42", zkr::FencingToken(1'000'000));
  for (auto _ : state) benchmark::DoNotOptimize(gate.admit("accounts/42", zkr::FencingToken(5)));
}
BENCHMARK(fence_gate_refuse_stale);

}  // namespace

// Everything the contender queue records for one acquisition that is granted and released:
// the series lookup at its start, the waiting gauge, the wait and hold histograms. Argument 0:
// the path is not opted in (the default); 1: it has a series of its own.
void lock_metrics_one_acquisition(benchmark::State& state) {
  zkr::LockPathLabels labels;
  if (state.range(0) == 1) labels.paths = {"/locks/"};
  zkr::detail::LockMetricsRegistry registry(labels);
  const std::string path = "/locks/jobs/nightly-report";
  for (auto _ : state) {
    zkr::detail::LockSeries& series = registry.series_for(path);
    series.asked();
    series.granted(std::chrono::milliseconds(3));
    series.decided({});
    series.hold_ended(std::chrono::milliseconds(20));
    benchmark::DoNotOptimize(&series);
  }
}
BENCHMARK(lock_metrics_one_acquisition)->Arg(0)->Arg(1);

// One scrape's text with the "" series and N labelled paths (64 is the default cap).
void prometheus_text_of_paths(benchmark::State& state) {
  zkr::SessionMetrics metrics;
  metrics.locks.resize(static_cast<std::size_t>(state.range(0)) + 1);
  for (std::size_t i = 1; i < metrics.locks.size(); ++i) metrics.locks[i].path = fmt::format("/locks/jobs/job-{}", i);
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string text = zkr::prometheus_text(metrics);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(prometheus_text_of_paths)->Arg(0)->Arg(64);

BENCHMARK_MAIN();
