// SPDX-License-Identifier: Apache-2.0
// A job that writes to the fenced store under a ZooKeeper lock, passing its fencing token.
//
// Usage: zkr_fenced_writer SERVERS LOCKPATH STORE_PORT KEY VALUE [options]
//   --session-timeout SECS   requested session timeout (default 4)
//   --tick-time SECS         the servers' tickTime (default 2, ZooKeeper's default)
//   --wait SECS              give up waiting for the lock after SECS (default 30)
//   --pause-before-write     stop this process (SIGSTOP) between taking the lock and writing,
//                            as a long GC pause would; resumes on SIGCONT
// Exit status: 0 the store accepted the write, 3 the store refused it (stale token), 1 the lock
// was not granted or another failure, 64 usage.
#include <csignal>
#include <cstdio>
#include <string>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/lock.hpp>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

constexpr int kAccepted = 0, kFailed = 1, kRefused = 3, kUsage = 64;

int usage(std::string_view problem) {
  fmt::print(stderr, "zkr_fenced_writer: {}\n", problem);
  fmt::print(stderr,
             "usage: zkr_fenced_writer SERVERS LOCKPATH STORE_PORT KEY VALUE [--session-timeout SECS] "
             "[--tick-time SECS] [--wait SECS] [--pause-before-write]\n");
  return kUsage;
}

// One request, one reply line.
std::string ask_store(unsigned short port, const std::string& request) {
  asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(asio::ip::address_v4::loopback(), port));
  asio::write(socket, asio::buffer(request + "\n"));
  std::string reply;
  asio::read_until(socket, asio::dynamic_buffer(reply, 64 * 1024), '\n');
  return reply.substr(0, reply.find('\n'));
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 6) return usage("missing arguments");
  const std::string servers = argv[1], lock_path = argv[2], key = argv[4], value = argv[5];
  unsigned short store_port = 0;
  double session_timeout_s = 4, tick_time_s = 2, wait_s = 30;
  bool pause_before_write = false;
  try {
    store_port = static_cast<unsigned short>(std::stoul(argv[3]));
    for (int i = 6; i < argc; ++i) {
      std::string_view arg = argv[i];
      if (arg == "--session-timeout" && i + 1 < argc) session_timeout_s = std::stod(argv[++i]);
      else if (arg == "--tick-time" && i + 1 < argc) tick_time_s = std::stod(argv[++i]);
      else if (arg == "--wait" && i + 1 < argc) wait_s = std::stod(argv[++i]);
      else if (arg == "--pause-before-write") pause_before_write = true;
      else return usage(fmt::format("unknown option '{}'", arg));
    }
  } catch (const std::exception&) {
    return usage("STORE_PORT, --session-timeout, --tick-time and --wait take numbers");
  }
  if (session_timeout_s <= 0 || tick_time_s <= 0 || wait_s < 0) return usage("timeouts must be positive");

  try {
    zkr::SessionOptions options;
    options.servers = servers;
    options.session_timeout = std::chrono::milliseconds(static_cast<long>(session_timeout_s * 1000));
    options.ensemble_tick_time = std::chrono::milliseconds(static_cast<long>(tick_time_s * 1000));
    zkr::Session session(options);
    zkr::Lock lock(session, lock_path, {.owner_data = fmt::format("fenced writer '{}'", value)});

    auto held = lock.try_acquire_for(std::chrono::milliseconds(static_cast<long>(wait_s * 1000)));
    if (!held) {
      fmt::print("writer '{}': the lock was not granted within {} s\n", value, wait_s);
      return kFailed;
    }
    const zkr::FencingToken token = held->token();
    fmt::print("writer '{}': granted {} with fencing token {}\n", value, lock_path, token.value());

    // A careful job checks the lock before writing, and this one does. But nothing can stop it
    // from pausing right after the check: only the store, which sees the token, can refuse the
    // write that follows a pause.
    if (held->lost()) {
      fmt::print("writer '{}': the lock was lost before the write; not writing\n", value);
      return kFailed;
    }
    if (pause_before_write) {
      fmt::print("writer '{}': pausing before the write (SIGSTOP)\n", value);
      std::raise(SIGSTOP);
      fmt::print("writer '{}': resumed; lock lost meanwhile: {}\n", value, held->lost() ? "yes" : "not yet known");
    }

    const std::string reply = ask_store(store_port, fmt::format("WRITE {} {} {}", key, token.value(), value));
    fmt::print("writer '{}': store replied '{}'\n", value, reply);
    held->release();
    if (reply.starts_with("OK")) return kAccepted;
    if (reply.starts_with("REFUSED")) return kRefused;
    return kFailed;
  } catch (const zkr::Error& e) {
    fmt::print(stderr, "zkr_fenced_writer: {}\n", e.what());
    return kFailed;
  } catch (const std::exception& e) {
    fmt::print(stderr, "zkr_fenced_writer: store at 127.0.0.1:{}: {}\n", store_port, e.what());
    return kFailed;
  }
}
