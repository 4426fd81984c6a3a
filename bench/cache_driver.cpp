// SPDX-License-Identifier: Apache-2.0
// bench/cache_compare's driver for this library's TreeCache (the Curator and kazoo drivers do the
// same with CuratorCache and kazoo's TreeCache):
//
//   zkr_bench_cache CONNECT ROOT NODES
//
// Loads the tree under ROOT (NODES nodes below it, written by the script), prints
// "LOADED <ms> <rss bytes added> <nodes cached> <heap bytes added>", then waits for a line on stdin, after which the
// script updates each node once; prints "EVENTS <updates seen> <seconds from first to last>" once
// it has seen NODES updates (or 60 s passed).
#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <zkr/cache.hpp>

namespace {

// The resident size, after glibc hands back what it keeps of freed memory (the load's replies and
// delivered events are freed by other threads than allocated them, into arenas that keep them).
long rss_bytes() {
  malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// The bytes malloc has handed out and not had back, in every arena: what the cache holds, without
// the allocator's free lists and page rounding that the resident size includes.
long heap_bytes() { return static_cast<long>(mallinfo2().uordblks); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: zkr_bench_cache CONNECT ROOT NODES\n");
    return 64;
  }
  using Clock = std::chrono::steady_clock;
  const long nodes = std::stol(argv[3]);
  zkr::SessionOptions options;
  options.servers = argv[1];
  zkr::Session session(options);
  std::atomic<long> updates{0};
  std::atomic<Clock::rep> first{0}, last{0};
  const long rss_before = rss_bytes();
  const long heap_before = heap_bytes();
  const auto start = Clock::now();
  zkr::TreeCache cache(session, argv[2], [&](const zkr::CacheEvent& event) {
    if (event.kind != zkr::CacheEvent::Kind::updated) return;
    const auto now = Clock::now().time_since_epoch().count();
    if (updates.fetch_add(1) == 0) first = now;
    last = now;
  });
  if (!cache.wait_initialized(std::chrono::minutes(5))) {
    std::printf("ERROR not loaded\n");
    return 1;
  }
  const auto load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const long rss_added = rss_bytes() - rss_before;
  std::printf("LOADED %.1f %ld %zu %ld\n", load_ms, rss_added, cache.size(), heap_bytes() - heap_before);
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (updates.load() < nodes && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double seconds = std::chrono::duration<double>(Clock::duration(last.load() - first.load())).count();
  std::printf("EVENTS %ld %.3f\n", updates.load(), seconds);
  return 0;
}
