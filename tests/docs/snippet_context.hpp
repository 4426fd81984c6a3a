// SPDX-License-Identifier: Apache-2.0
// What a C++ snippet of the docs takes from the reader's own program: the session and lock it
// already has, and the reader's own functions (the store, the report, the logger). Declared, never
// defined: snippets are compiled, not linked or run, so only the zkr calls around these are
// checked. The names are those the docs use; a snippet that needs a new one adds it here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include <zkr/election.hpp>
#include <zkr/error.hpp>
#include <zkr/fence_gate.hpp>
#include <zkr/fenced.hpp>
#include <zkr/lock.hpp>
#include <zkr/prometheus.hpp>
#include <zkr/rwlock.hpp>
#include <zkr/semaphore.hpp>
#include <zkr/session.hpp>
#if __has_include(<zkr/leader_watch.hpp>)
#include <zkr/leader_watch.hpp>
#endif

#ifdef DOCS_SNIPPET_ASIO
#include <boost/asio.hpp>
#include <zkr/asio.hpp>
#endif

namespace docs_context {

// The reader's zkrecipes objects, made earlier in their program.
extern zkr::Session& session;
extern zkr::SessionOptions& options;
extern zkr::Lock& lock;
extern std::vector<zkr::Lock>& locks;
extern zkr::HeldLock& held;
extern zkr::FencingToken token;
extern std::int32_t version;  // a znode version read earlier

// The reader's own code.
struct Store {
  void write(const auto& data, zkr::FencingToken token);
};
extern Store& store;
extern std::string data;
extern std::vector<std::string> batches;
struct Metrics {
  void lock_lost(std::string_view reason);
};
extern Metrics& metrics;
struct Logger {
  template <typename... Args>
  void log(int level, std::string_view format, const Args&... args);
};
extern Logger& my_logger;
int to_my_level(zkr::LogLevel level);
enum class Status { ok, stale_token };
extern std::string write;
Status apply(const std::string& write);
void refuse();
void report(std::error_code error);  // how the reader's program reports a failure
void stop();
void do_work(std::stop_token lost);
void do_leader_work(zkr::FencingToken token);
void run_as_leader(zkr::FencingToken token, std::stop_token ended);
void route_writes_to(const std::string& address, zkr::FencingToken token);
void stop_routing();
void encode(zkr::FencingToken token, std::stop_token lost);

#ifdef DOCS_SNIPPET_ASIO
namespace asio = boost::asio;
extern asio::strand<asio::io_context::executor_type>& strand;
asio::awaitable<void> write_report(zkr::FencingToken token);
#else
void write_report(zkr::FencingToken token);
#endif

}  // namespace docs_context
