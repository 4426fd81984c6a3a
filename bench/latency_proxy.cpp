// SPDX-License-Identifier: Apache-2.0
// A TCP proxy in front of one ZooKeeper server that adds a fixed latency to each direction, to
// emulate a network between client and ensemble on one machine.
//
//   zkr_bench_latency_proxy UPSTREAM_HOST:PORT ONE_WAY_LATENCY_US
//
// Prints its listen address ("127.0.0.1:port") on one line of stdout once it accepts connections,
// then runs until SIGTERM or SIGINT. It counts what passes (testenv's Proxy::Traffic): each line
// "traffic" read on stdin is answered with one JSON line on stdout, the counts since it started:
//
//   {"requests":{"1":12,"11":3,...},"sessions_created":2,"sessions_resumed":0,"watches_set":5,
//    "notifications":4}
//
// (requests by opcode; pings are opcode 11). bench/compare reads them before and after each run.
#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "testenv.hpp"

namespace {

std::string traffic_json(const zkr::testenv::Proxy::Traffic& traffic) {
  std::string requests;
  for (const auto& [opcode, count] : traffic.requests)
    requests += fmt::format("{}\"{}\":{}", requests.empty() ? "" : ",", opcode, count);
  return fmt::format(
      "{{\"requests\":{{{}}},\"sessions_created\":{},\"sessions_resumed\":{},\"watches_set\":{},"
      "\"notifications\":{}}}",
      requests, traffic.sessions_created, traffic.sessions_resumed, traffic.watches_set,
      traffic.notifications);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fputs(fmt::format("usage: {} UPSTREAM_HOST:PORT ONE_WAY_LATENCY_US\n", argv[0]).c_str(), stderr);
    return 2;
  }
  long latency_us = 0;
  try {
    std::size_t used = 0;
    latency_us = std::stol(argv[2], &used);
    if (used != std::string(argv[2]).size() || latency_us < 0) throw std::invalid_argument("latency");
  } catch (const std::exception&) {
    std::fputs(fmt::format("{}: latency '{}' is not a non-negative number of microseconds\n", argv[0],
                           argv[2]).c_str(), stderr);
    return 2;
  }
  // Block the stop signals before the proxy's thread starts, so that only sigwait sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  try {
    zkr::testenv::Proxy proxy(argv[1]);
    proxy.set_latency(std::chrono::microseconds(latency_us));
    std::fputs(fmt::format("{}\n", proxy.address()).c_str(), stdout);
    std::fflush(stdout);
    // Commands on stdin; at its end (or with no stdin) the proxy runs on until a stop signal.
    std::thread([&proxy] {
      for (std::string line; std::getline(std::cin, line);) {
        std::string answer = line == "traffic" ? traffic_json(proxy.traffic())
                                               : fmt::format("{{\"error\":\"unknown command\"}}");
        std::fputs((answer + "\n").c_str(), stdout);
        std::fflush(stdout);
      }
    }).detach();
    int received = 0;
    sigwait(&stop_signals, &received);
  } catch (const std::exception& error) {
    std::fputs(fmt::format("{}: {}\n", argv[0], error.what()).c_str(), stderr);
    return 1;
  }
  return 0;
}
