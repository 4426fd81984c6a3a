// SPDX-License-Identifier: Apache-2.0
// Proxy: a fault-injecting TCP relay on its own Asio thread.
//
// Each direction of a connection reads whole ZooKeeper frames (4-byte big-endian length + body),
// queues them with a release time (now + latency) and writes them in order. Blackholing stops both
// reading and writing, so bytes stay in kernel buffers as on a cut link. Frame boundaries are what
// lets drop_next_reply() pick out exactly one reply; a stream that does not look like ZooKeeper
// framing (say a four-letter word) is relayed raw.
#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "testenv.hpp"

namespace zkr::testenv {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t max_frame = 64 * 1024 * 1024;

std::int32_t read_be32(const std::string& data, std::size_t offset) {
  auto byte = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(data[offset + i])); };
  return static_cast<std::int32_t>(byte(0) << 24 | byte(1) << 16 | byte(2) << 8 | byte(3));
}

tcp::endpoint parse_endpoint(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument(fmt::format("Proxy: upstream '{}' is not host:port", address));
  }
  try {
    auto host = asio::ip::make_address(address.substr(0, colon) == "localhost" ? "127.0.0.1"
                                                                               : address.substr(0, colon));
    int port = std::stoi(address.substr(colon + 1));
    if (port <= 0 || port > 65535) throw std::out_of_range("port");
    return {host, static_cast<unsigned short>(port)};
  } catch (const std::exception&) {
    throw std::invalid_argument(
        fmt::format("Proxy: upstream '{}' is not a numeric IP address and port", address));
  }
}

}  // namespace

struct Connection;

struct Proxy::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  tcp::endpoint upstream;
  std::thread thread;

  // Touched only on the io thread.
  bool blackholed = false;
  std::chrono::microseconds latency{0};
  bool drop_armed = false;
  std::vector<int> drop_opcodes;
  std::set<std::shared_ptr<Connection>> live;

  Proxy::Traffic traffic;  // touched only on the io thread

  std::atomic<int> dropped{0};
  std::atomic<int> open_connections{0};

  void accept();
  void resume_all();

  // Runs f on the io thread and waits for it.
  template <class F>
  auto run(F f) -> decltype(f()) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto result = task.get_future();
    asio::post(io, [&task] { task(); });
    return result.get();
  }
};

struct Connection : std::enable_shared_from_this<Connection> {
  struct Chunk {
    std::string bytes;
    Clock::time_point due;
  };
  struct Direction {
    explicit Direction(asio::io_context& io) : timer(io) {}
    tcp::socket* from = nullptr;
    tcp::socket* to = nullptr;
    bool from_client = false;
    std::array<char, 65536> read_buffer{};
    std::string unframed;  // bytes read but not yet a whole frame
    std::deque<Chunk> queue;
    asio::steady_timer timer;
    bool reading = false;
    bool writing = false;
    bool saw_first_frame = false;  // the connect request/response has no request header
    bool raw = false;
    bool end_of_stream = false;
  };

  Connection(Proxy::Impl& owner, tcp::socket socket)
      : proxy(owner), client(std::move(socket)), server(owner.io),
        to_server(owner.io), to_client(owner.io) {
    to_server.from = &client;
    to_server.to = &server;
    to_server.from_client = true;
    to_client.from = &server;
    to_client.to = &client;
  }

  Proxy::Impl& proxy;
  tcp::socket client;
  tcp::socket server;
  Direction to_server;
  Direction to_client;
  bool connecting = false;
  bool connected = false;
  bool closed = false;
  std::optional<std::int32_t> doomed_xid;  // reply to swallow
  bool reset_when_flushed = false;

  void connect_upstream() {
    if (connecting || connected || closed) return;
    connecting = true;
    server.async_connect(proxy.upstream, [self = shared_from_this()](boost::system::error_code ec) {
      self->connecting = false;
      if (ec) {
        self->close(true);  // like a server that is down: the client sees the connection drop
        return;
      }
      self->server.set_option(tcp::no_delay(true));
      self->connected = true;
      self->resume();
    });
  }

  void resume() {
    if (closed || proxy.blackholed) return;
    if (!connected) {
      connect_upstream();
      return;
    }
    for (Direction* d : {&to_server, &to_client}) {
      read(*d);
      write(*d);
    }
  }

  void read(Direction& d) {
    if (d.reading || d.end_of_stream || closed || proxy.blackholed || reset_when_flushed) return;
    d.reading = true;
    d.from->async_read_some(asio::buffer(d.read_buffer),
                            [self = shared_from_this(), &d](boost::system::error_code ec, std::size_t n) {
                              d.reading = false;
                              if (self->closed) return;
                              if (ec) {
                                if (ec == asio::error::eof) {
                                  d.end_of_stream = true;
                                  self->write(d);  // flush what is queued, then close
                                } else {
                                  self->close(false);
                                }
                                return;
                              }
                              self->on_bytes(d, n);
                              self->read(d);
                            });
  }

  void on_bytes(Direction& d, std::size_t n) {
    d.unframed.append(d.read_buffer.data(), n);
    while (!reset_when_flushed) {
      if (d.raw) {
        if (!d.unframed.empty()) enqueue(d, std::exchange(d.unframed, {}));
        break;
      }
      if (d.unframed.size() < 4) break;
      auto length = read_be32(d.unframed, 0);
      if (length < 0 || static_cast<std::size_t>(length) > max_frame) {
        d.raw = true;
        continue;
      }
      std::size_t frame_size = 4 + static_cast<std::size_t>(length);
      if (d.unframed.size() < frame_size) break;
      std::string frame = d.unframed.substr(0, frame_size);
      d.unframed.erase(0, frame_size);
      if (!inspect(d, frame)) {
        proxy.dropped.fetch_add(1);
        reset_when_flushed = true;
        d.unframed.clear();
        break;
      }
      enqueue(d, std::move(frame));
    }
    write(d);
  }

  // False if the frame is the reply to swallow.
  bool inspect(Direction& d, const std::string& frame) {
    if (!d.saw_first_frame) {
      d.saw_first_frame = true;
      // ConnectRequest: protocolVersion, lastZxidSeen (8 bytes), timeOut, sessionId (8 bytes), ...
      if (d.from_client && frame.size() >= 28) {
        bool resumed = read_be32(frame, 20) != 0 || read_be32(frame, 24) != 0;
        ++(resumed ? proxy.traffic.sessions_resumed : proxy.traffic.sessions_created);
      }
      return true;
    }
    if (frame.size() < 12) return true;
    std::int32_t xid = read_be32(frame, 4);
    if (!d.from_client && xid == -1) ++proxy.traffic.notifications;
    if (d.from_client) {
      std::int32_t opcode = read_be32(frame, 8);
      count_request(opcode, frame);
      if (proxy.drop_armed && !doomed_xid &&
          std::find(proxy.drop_opcodes.begin(), proxy.drop_opcodes.end(), opcode) !=
              proxy.drop_opcodes.end()) {
        proxy.drop_armed = false;
        doomed_xid = xid;
      }
      return true;
    }
    return !(doomed_xid && xid == *doomed_xid);
  }

  // After the request header (length, xid, opcode): exists (3), getData (4), getChildren (8) and
  // getChildren2 (12) carry a path and then a watch flag; addWatch (106) always sets one.
  void count_request(std::int32_t opcode, const std::string& frame) {
    auto& traffic = proxy.traffic;
    ++traffic.requests[opcode];
    if (opcode == 106) {
      ++traffic.watches_set;
    } else if ((opcode == 3 || opcode == 4 || opcode == 8 || opcode == 12) && frame.size() >= 16) {
      std::int32_t path_length = read_be32(frame, 12);
      std::size_t flag = 16 + static_cast<std::size_t>(std::max(path_length, 0));
      if (flag < frame.size() && frame[flag] != 0) ++traffic.watches_set;
    }
  }

  void enqueue(Direction& d, std::string bytes) {
    d.queue.push_back({std::move(bytes), Clock::now() + proxy.latency});
  }

  void write(Direction& d) {
    if (d.writing || closed) return;
    if (d.queue.empty()) {
      if (reset_when_flushed && to_client.queue.empty() && !to_client.writing) {
        close(true);
      } else if (d.end_of_stream) {
        close(false);
      }
      return;
    }
    if (proxy.blackholed) return;
    d.writing = true;
    auto self = shared_from_this();
    if (d.queue.front().due > Clock::now()) {
      d.timer.expires_at(d.queue.front().due);
      d.timer.async_wait([self, &d](boost::system::error_code) {
        d.writing = false;
        self->write(d);
      });
      return;
    }
    asio::async_write(*d.to, asio::buffer(d.queue.front().bytes),
                      [self, &d](boost::system::error_code ec, std::size_t) {
                        d.writing = false;
                        if (self->closed) return;
                        if (ec) {
                          self->close(false);
                          return;
                        }
                        d.queue.pop_front();
                        self->write(d);
                      });
  }

  // with_reset: SO_LINGER 0, so the peers see RST instead of an orderly FIN.
  void close(bool with_reset) {
    if (closed) return;
    closed = true;
    boost::system::error_code ignored;
    for (tcp::socket* socket : {&client, &server}) {
      if (with_reset && socket->is_open()) socket->set_option(asio::socket_base::linger(true, 0), ignored);
      socket->close(ignored);
    }
    to_server.timer.cancel();
    to_client.timer.cancel();
    proxy.open_connections.fetch_sub(1);
    proxy.live.erase(shared_from_this());
  }
};

void Proxy::Impl::accept() {
  // The Impl outlives the io thread, so a plain pointer is safe (and makes no reference cycle).
  acceptor.async_accept([self = this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) return;
    if (!ec) {
      boost::system::error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto connection = std::make_shared<Connection>(*self, std::move(socket));
      self->live.insert(connection);
      self->open_connections.fetch_add(1);
      connection->resume();  // held while blackholed
    }
    self->accept();
  });
}

void Proxy::Impl::resume_all() {
  auto connections = live;  // resume() may close and erase
  for (const auto& connection : connections) connection->resume();
}

Proxy::Proxy(std::string upstream) : impl_(std::make_shared<Impl>()) {
  impl_->upstream = parse_endpoint(upstream);
  tcp::endpoint local(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(local.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(local);
  impl_->acceptor.listen();
  impl_->accept();
  impl_->thread = std::thread([impl = impl_] { impl->io.run(); });
}

Proxy::~Proxy() {
  try {
    impl_->run([impl = impl_.get()] {
      boost::system::error_code ignored;
      impl->acceptor.close(ignored);
      auto connections = impl->live;
      for (const auto& connection : connections) connection->close(false);
    });
  } catch (...) {
  }
  impl_->io.stop();
  impl_->thread.join();
}

std::string Proxy::address() const {
  return fmt::format("127.0.0.1:{}", impl_->acceptor.local_endpoint().port());
}

void Proxy::pass() {
  impl_->run([impl = impl_.get()] {
    impl->blackholed = false;
    impl->resume_all();
  });
}

void Proxy::blackhole() {
  impl_->run([impl = impl_.get()] { impl->blackholed = true; });
}

void Proxy::reset() {
  impl_->run([impl = impl_.get()] {
    auto connections = impl->live;
    for (const auto& connection : connections) connection->close(true);
    impl->blackholed = false;
  });
}

void Proxy::sever() {
  impl_->run([impl = impl_.get()] {
    impl->blackholed = true;
    auto connections = impl->live;
    for (const auto& connection : connections) connection->close(true);
  });
}

void Proxy::set_latency(std::chrono::microseconds one_way) {
  impl_->run([impl = impl_.get(), one_way] { impl->latency = one_way; });
}

void Proxy::drop_next_reply(std::vector<int> opcodes) {
  impl_->run([impl = impl_.get(), opcodes = std::move(opcodes)]() mutable {
    impl->drop_opcodes = std::move(opcodes);
    impl->drop_armed = true;
  });
}

Proxy::Traffic Proxy::traffic() const {
  return impl_->run([impl = impl_.get()] { return impl->traffic; });
}

int Proxy::dropped_replies() const { return impl_->dropped.load(); }
int Proxy::connections() const { return impl_->open_connections.load(); }

}  // namespace zkr::testenv
