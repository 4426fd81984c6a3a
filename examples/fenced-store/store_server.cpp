// SPDX-License-Identifier: Apache-2.0
// A resource that checks fencing tokens: a tiny key-value store on 127.0.0.1 that applies a write
// only if its token is not lower than the highest token it has accepted for that key.
//
// This is the part of fencing that no lock can do for you. A lock holder can pause past the end of
// its lease (GC, a frozen VM, SIGSTOP) and wake up still believing it holds the lock; by then a
// later grant, with a larger token, may have written. The store sees both tokens and refuses the
// late one. Here zkr::FenceGate keeps the highest token per key in memory, as the data is; a store
// whose data survives a restart keeps the tokens durable too: zkr::DurableFenceGate, or the same
// transaction as the data (docs/fencing.md).
//
// Protocol: one request per line, one reply per line.
//   WRITE <key> <token> <value>   ->  OK <token>  |  REFUSED <token> below <highest>  |  ERROR <why>
//   READ <key>                    ->  VALUE <token> <value>  |  EMPTY
//
// Usage: zkr_fenced_store --port-file FILE [--port N]
// Listens on 127.0.0.1 (port 0: any free port), writes the port to FILE, serves until SIGINT or
// SIGTERM.
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <string_view>

#include <utility>  // before Boost.Asio: 1.74's awaitable.hpp uses std::exchange without it

#include <boost/asio.hpp>
#include <fmt/format.h>

#include <zkr/fence_gate.hpp>
#include <zkr/fencing_token.hpp>

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

struct Entry {
  zkr::FencingToken token;
  std::string value;
};

class Store {
 public:
  std::string handle(std::string_view line) {
    auto [command, rest] = split(line);
    if (command == "WRITE") {
      auto [key, after_key] = split(rest);
      auto [token_text, value] = split(after_key);
      std::int64_t token_value = 0;
      auto [end, ec] = std::from_chars(token_text.data(), token_text.data() + token_text.size(), token_value);
      if (key.empty() || ec != std::errc{} || end != token_text.data() + token_text.size())
        return "ERROR expected: WRITE <key> <token> <value>";
      const zkr::FencingToken token(token_value);
      // The check and the write happen together (one thread serves all requests).
      if (!gate_.admit(key, token)) {
        auto highest = gate_.highest(key);
        fmt::print("store: REFUSED write to '{}' with token {} (highest accepted {})\n", key, token.value(),
                   highest ? highest->value() : 0);
        return fmt::format("REFUSED {} below {}", token.value(), highest ? highest->value() : 0);
      }
      entries_[std::string(key)] = Entry{token, std::string(value)};
      fmt::print("store: ACCEPTED write to '{}' with token {}: '{}'\n", key, token.value(), value);
      return fmt::format("OK {}", token.value());
    }
    if (command == "READ") {
      auto it = entries_.find(std::string(rest));
      if (it == entries_.end()) return "EMPTY";
      return fmt::format("VALUE {} {}", it->second.token.value(), it->second.value);
    }
    return fmt::format("ERROR unknown command '{}' (WRITE, READ)", command);
  }

 private:
  static std::pair<std::string_view, std::string_view> split(std::string_view text) {
    auto space = text.find(' ');
    if (space == text.npos) return {text, {}};
    return {text.substr(0, space), text.substr(space + 1)};
  }

  zkr::FenceGate gate_;
  std::map<std::string, Entry, std::less<>> entries_;
};

asio::awaitable<void> serve(tcp::socket socket, Store& store) {
  try {
    std::string buffer;
    for (;;) {
      // A line longer than this is not a request of ours: drop the connection.
      auto dynamic = asio::dynamic_buffer(buffer, 64 * 1024);
      std::size_t length = co_await asio::async_read_until(socket, dynamic, '\n', asio::use_awaitable);
      std::string line = buffer.substr(0, length - 1);
      buffer.erase(0, length);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string reply = store.handle(line) + "\n";
      co_await asio::async_write(socket, asio::buffer(reply), asio::use_awaitable);
    }
  } catch (const boost::system::system_error&) {
    // The client closed the connection, or sent an overlong line.
  }
}

asio::awaitable<void> listen(tcp::acceptor& acceptor, Store& store) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket), store), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the scenario script reads the log as it goes
  std::string port_file;
  unsigned short port = 0;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--port-file" && i + 1 < argc) {
      port_file = argv[++i];
    } else if (arg == "--port" && i + 1 < argc) {
      std::string_view text = argv[++i];
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
      if (ec != std::errc{} || end != text.data() + text.size()) {
        fmt::print(stderr, "zkr_fenced_store: --port needs a number 0-65535, not '{}'\n", text);
        return 64;
      }
    } else {
      fmt::print(stderr, "usage: zkr_fenced_store --port-file FILE [--port N]\n");
      return 64;
    }
  }
  if (port_file.empty()) {
    fmt::print(stderr, "usage: zkr_fenced_store --port-file FILE [--port N]\n");
    return 64;
  }

  try {
    asio::io_context io;
    tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), port));
    {
      // Written to a temporary name and renamed, so that a reader never sees half a number.
      const std::string temporary = port_file + ".tmp";
      std::ofstream(temporary) << acceptor.local_endpoint().port() << "\n";
      std::rename(temporary.c_str(), port_file.c_str());
    }
    fmt::print("store: listening on 127.0.0.1:{}\n", acceptor.local_endpoint().port());
    std::fflush(stdout);

    Store store;
    asio::signal_set stop_signals(io, SIGINT, SIGTERM);
    stop_signals.async_wait([&io](boost::system::error_code, int) { io.stop(); });
    asio::co_spawn(io, listen(acceptor, store), asio::detached);
    io.run();
    fmt::print("store: stopped\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "zkr_fenced_store: {}\n", e.what());
    return 1;
  }
}
