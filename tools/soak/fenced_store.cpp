// SPDX-License-Identifier: Apache-2.0
#include "fenced_store.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "soak_log.hpp"

namespace zkr::soak {

FencedStore::FencedStore(std::filesystem::path socket_path, std::filesystem::path journal_path)
    : socket_path_(std::move(socket_path)), journal_(journal_path, std::ios::app) {
  if (!journal_) throw std::runtime_error(fmt::format("cannot open the store journal {}", journal_path.string()));
  std::filesystem::remove(socket_path_);
  listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (socket_path_.string().size() >= sizeof address.sun_path)
    throw std::runtime_error(fmt::format("store socket path too long: {}", socket_path_.string()));
  std::strncpy(address.sun_path, socket_path_.c_str(), sizeof address.sun_path - 1);
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listen_fd_, 64) != 0)
    throw std::runtime_error(fmt::format("store cannot listen on {}: {}", socket_path_.string(), std::strerror(errno)));
  acceptor_ = std::thread([this] { accept_loop(); });
}

FencedStore::~FencedStore() { stop(); }

void FencedStore::stop() {
  if (stopping_.exchange(true)) return;
  acceptor_.join();
  ::close(listen_fd_);
  {
    std::lock_guard lock(connections_mutex_);
    for (int fd : connection_fds_) ::shutdown(fd, SHUT_RDWR);
  }
  for (auto& thread : connection_threads_) thread.join();
  std::lock_guard lock(mutex_);
  for (const auto& [key, value] : values_) {
    auto highest = gate_.highest(key);
    journal_ << fmt::format("{} FINAL {} {} {}\n", monotonic_ns(), key, value, highest ? highest->value() : 0);
  }
  journal_.flush();
  std::filesystem::remove(socket_path_);
}

void FencedStore::accept_loop() {
  while (!stopping_) {
    pollfd listening{listen_fd_, POLLIN, 0};
    if (::poll(&listening, 1, 200) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(connections_mutex_);
    connection_fds_.push_back(fd);
    connection_threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void FencedStore::serve(int fd) {
  std::string buffer;
  char chunk[1024];
  while (!stopping_) {
    pollfd connection{fd, POLLIN, 0};
    int ready = ::poll(&connection, 1, 200);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    auto n = ::recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    for (auto newline = buffer.find('\n'); newline != std::string::npos; newline = buffer.find('\n')) {
      std::string reply = handle(buffer.substr(0, newline)) + "\n";
      buffer.erase(0, newline + 1);
      ::send(fd, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
  }
  std::lock_guard lock(connections_mutex_);
  connection_fds_.remove(fd);
  ::close(fd);
}

std::string FencedStore::handle(const std::string& request) {
  const auto words = split_words(request);
  const bool is_read = words.size() == 5 && words[0] == "READ";
  const bool is_write = words.size() == 6 && words[0] == "WRITE";
  if (!is_read && !is_write) return "ERR malformed request";
  try {
    const std::string& key = words[1];
    const FencingToken token(std::stoll(words[2]));
    const std::string& client = words[is_read ? 3 : 4];
    const std::string& op_id = words[is_read ? 4 : 5];
    std::lock_guard lock(mutex_);
    const bool admitted = gate_.admit(key, token);
    std::int64_t& value = values_[key];
    if (admitted && is_write) value = std::stoll(words[3]);
    const auto highest = gate_.highest(key);
    journal_ << fmt::format("{} {} {} {} {} {} {} {} {}\n", monotonic_ns(), ++sequence_, words[0], client, op_id,
                            token.value(), admitted ? "OK" : "STALE", value, highest ? highest->value() : 0);
    journal_.flush();
    if (!admitted) return fmt::format("STALE {}", highest ? highest->value() : 0);
    last_accepted_client_ = std::stoi(client);
    if (is_read) {
      ++reads_accepted_;
      last_reader_ = std::stoi(client);
      read_accepted_.notify_all();
    }
    return is_read ? fmt::format("OK {}", value) : "OK";
  } catch (const std::exception&) {
    return "ERR malformed request";
  }
}

int FencedStore::wait_for_next_read(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  const std::uint64_t seen = reads_accepted_;
  if (!read_accepted_.wait_for(lock, timeout, [&] { return reads_accepted_ != seen; })) return -1;
  return last_reader_;
}

}  // namespace zkr::soak
