// SPDX-License-Identifier: Apache-2.0
// What every C++ benchmark driver shares: the command line (the same one the Java and Python
// drivers accept), latency statistics, and the JSON-lines output that bench/compare parses.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <malloc.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double micros_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

struct DriverArgs {
  std::string driver;       // "ours", "floor": goes into every output line
  std::string connect;      // ZooKeeper connect string (possibly a proxy)
  std::string path;         // lock path, unique per run; the driver owns everything under it
  std::string scenario;     // uncontended | pipelined | contended | herd | loss | scale | scale_listed |
                            // scale_batched | heartbeat
  int iterations = 1000;    // timed rounds (uncontended, pipelined, scale: number of locks)
  int warmup = 100;         // untimed rounds before the timed ones (contended: grants at least)
  double duration_s = 5;    // contended: how long to run; scale: how long to watch the traffic
  double max_warmup_s = 10; // contended: longest wait for the rate to settle (measure_steady_rate)
  int contenders = 2;       // contended: sessions competing; herd: waiters; heartbeat: sessions
  int session_timeout_ms = 10'000;
  int trials = 3;           // loss: blackhole trials
  std::string samples_file; // optional: every latency sample, one per line, in microseconds
  std::string tls_dir;      // ours: TLS through the session's relay, with DIR's ca.pem, client.pem, client.key
  int start_window = -1;    // ours: SessionOptions::max_starting_acquisitions (negative: the default)
};

// Parses the shared command line; exits with a message naming the bad option on error.
inline DriverArgs parse_driver_args(std::string driver, int argc, char** argv) {
  namespace po = boost::program_options;
  DriverArgs args;
  args.driver = std::move(driver);
  po::options_description options("benchmark driver options");
  options.add_options()
      ("help", "show this help")
      ("connect", po::value(&args.connect)->required(), "ZooKeeper connect string")
      ("path", po::value(&args.path)->required(), "lock path (the driver owns its subtree)")
      ("scenario", po::value(&args.scenario)->required(),
       "uncontended | pipelined | contended | herd | loss | scale | scale_listed (floor)")
      ("iterations", po::value(&args.iterations), "timed rounds, or locks for scale")
      ("warmup", po::value(&args.warmup), "untimed rounds first")
      ("duration", po::value(&args.duration_s), "seconds to run (contended, scale)")
      ("max-warmup", po::value(&args.max_warmup_s),
       "contended: at most this many seconds for the rate to settle before measuring")
      ("contenders", po::value(&args.contenders), "sessions competing (contended), waiters (herd)")
      ("session-timeout-ms", po::value(&args.session_timeout_ms), "requested session timeout")
      ("trials", po::value(&args.trials), "blackhole trials (loss)")
      ("samples", po::value(&args.samples_file), "write every latency sample (us) to this file")
      ("tls-dir", po::value(&args.tls_dir), "ours: TLS with DIR/ca.pem, DIR/client.pem, DIR/client.key")
      ("start-window", po::value(&args.start_window),
       "ours: SessionOptions::max_starting_acquisitions (0: none; default: the library's)");
  try {
    po::variables_map values;
    po::store(po::parse_command_line(argc, argv, options), values);
    if (values.count("help")) {
      std::cout << options << '\n';
      std::exit(0);
    }
    po::notify(values);
  } catch (const po::error& error) {
    std::cerr << fmt::format("{}: {}\n", argv[0], error.what()) << options << '\n';
    std::exit(2);
  }
  if (args.iterations < 1 || args.warmup < 0 || args.contenders < 1 || args.duration_s <= 0 ||
      args.session_timeout_ms < 1 || args.trials < 1 || args.max_warmup_s < 0) {
    std::cerr << fmt::format("{}: --iterations, --contenders, --trials, --duration and "
                             "--session-timeout-ms must be positive, --warmup and --max-warmup "
                             "not negative\n",
                             argv[0]);
    std::exit(2);
  }
  return args;
}

// One output line: {"driver":"floor","scenario":"uncontended",...}. Keys are plain identifiers.
class JsonLine {
 public:
  JsonLine(const DriverArgs& args) {
    add("driver", args.driver);
    add("scenario", args.scenario);
  }
  JsonLine& add(std::string_view key, std::string_view value) {
    std::string escaped;
    for (char c : value) {
      if (c == '"' || c == '\\') escaped += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        escaped += fmt::format("\\u{:04x}", static_cast<int>(c));
        continue;
      }
      escaped += c;
    }
    return raw(key, fmt::format("\"{}\"", escaped));
  }
  JsonLine& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonLine& add(std::string_view key, double value) { return raw(key, fmt::format("{:.3f}", value)); }
  JsonLine& add(std::string_view key, std::int64_t value) { return raw(key, fmt::format("{}", value)); }
  JsonLine& add(std::string_view key, std::uint64_t value) { return raw(key, fmt::format("{}", value)); }
  JsonLine& add(std::string_view key, int value) { return raw(key, fmt::format("{}", value)); }
  JsonLine& add(std::string_view key, bool value) { return raw(key, value ? "true" : "false"); }
  void print() const {
    std::fputs(fmt::format("{{{}}}\n", body_).c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  JsonLine& raw(std::string_view key, std::string_view value) {
    if (!body_.empty()) body_ += ',';
    body_ += fmt::format("\"{}\":{}", key, value);
    return *this;
  }
  std::string body_;
};

// Nearest-rank percentile of sorted samples.
inline double percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(fraction * static_cast<double>(sorted.size()) + 0.999999);
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

// Adds n, p50, p90, p99, min, max, mean (all microseconds) and writes the samples file if asked.
inline void add_latency_summary(JsonLine& line, std::vector<double> samples_us,
                                const DriverArgs& args) {
  if (!args.samples_file.empty()) {
    std::ofstream out(args.samples_file);
    for (double sample : samples_us) out << fmt::format("{:.3f}\n", sample);
  }
  std::sort(samples_us.begin(), samples_us.end());
  double sum = 0;
  for (double sample : samples_us) sum += sample;
  line.add("n", static_cast<int>(samples_us.size()))
      .add("p50_us", percentile(samples_us, 0.50))
      .add("p90_us", percentile(samples_us, 0.90))
      .add("p99_us", percentile(samples_us, 0.99))
      .add("min_us", samples_us.empty() ? 0.0 : samples_us.front())
      .add("max_us", samples_us.empty() ? 0.0 : samples_us.back())
      .add("mean_us", samples_us.empty() ? 0.0 : sum / static_cast<double>(samples_us.size()));
}

// Bytes the process's heap has handed out and not yet taken back, in all malloc arenas: unlike the
// RSS, not rounded to pages, and blind to freed memory that malloc keeps for later.
inline std::int64_t heap_bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<std::int64_t>(info.uordblks + info.hblkhd);
}

// Resident set size of this process, in bytes.
inline std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t total_pages = 0, resident_pages = 0;
  statm >> total_pages >> resident_pages;
  return resident_pages * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

// Contended scenarios measure a steady rate. The contenders run continuously from the start; the
// measured interval begins once two consecutive windows of grants agree, so that a cold start (a
// JVM's JIT, an interpreter's caches, the server's own) is not averaged into the figure, and it
// follows on without restarting anything. The Java and Python drivers do the same.
inline constexpr auto rate_window = std::chrono::milliseconds(250);
inline constexpr double rate_tolerance = 0.10;  // two windows' rates within 10% of each other

struct SteadyRate {
  double warmup_s = 0;         // from the contenders' start to the measured interval's
  std::uint64_t grants = 0;    // within the measured interval
  double duration_s = 0;       // of the measured interval
};

// Called once the contenders run: waits, window by window, until the rate of `grants` settles
// (after at least args.warmup grants, at most args.max_warmup_s), then counts args.duration_s.
inline SteadyRate measure_steady_rate(const std::atomic<std::uint64_t>& grants,
                                      const DriverArgs& args) {
  const auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  const auto started = Clock::now();
  auto window_start = started;
  std::uint64_t window_start_grants = grants.load();
  double previous_rate = -1;
  const auto longest_warmup = std::chrono::duration<double>(args.max_warmup_s);
  while (Clock::now() - started < longest_warmup) {
    std::this_thread::sleep_for(rate_window);
    const auto now = Clock::now();
    const std::uint64_t count = grants.load();
    const double rate = static_cast<double>(count - window_start_grants) / seconds(now - window_start);
    const bool agrees = previous_rate > 0 && std::abs(rate - previous_rate) <=
                                                 rate_tolerance * std::max(rate, previous_rate);
    if (agrees && count >= static_cast<std::uint64_t>(args.warmup)) break;
    previous_rate = rate;
    window_start = now;
    window_start_grants = count;
  }
  const auto measured_from = Clock::now();
  const std::uint64_t grants_before = grants.load();
  std::this_thread::sleep_until(measured_from + std::chrono::duration<double>(args.duration_s));
  const auto measured_to = Clock::now();
  return {seconds(measured_from - started), grants.load() - grants_before,
          seconds(measured_to - measured_from)};
}

// The contended scenario's result line. `grants_total` counts every grant of the run, the
// warm-up's and those after the measured interval included (bench/compare divides the server's
// request count for the whole run by it).
inline void print_contended_line(const DriverArgs& args, const SteadyRate& run,
                                 std::uint64_t overlaps, std::uint64_t grants_total) {
  JsonLine(args)
      .add("contenders", args.contenders)
      .add("acquisitions", run.grants)
      .add("duration_s", run.duration_s)
      .add("throughput_per_s", static_cast<double>(run.grants) / run.duration_s)
      .add("warmup_s", run.warmup_s)
      .add("overlaps", overlaps)
      .add("grants_total", grants_total)
      .print();
}

// The heartbeat scenario's gate: every driver prints {"holding":N} once its N sessions each hold a
// lock of their own, then idles until a line (or the end) on stdin, while bench/compare counts
// what the servers receive; then it lets go and prints its result line.
inline void hold_until_told(const DriverArgs& args) {
  JsonLine(args).add("holding", args.contenders).print();
  std::string line;
  std::getline(std::cin, line);
}

inline void fail(std::string_view what) {
  std::cerr << what << '\n';
  std::exit(1);
}

}  // namespace bench
