// SPDX-License-Identifier: Apache-2.0
// FencedStore: the resource the soak's jobs write to. A counter per key behind a zkr::FenceGate,
// served on a Unix socket, one line per request:
//   "READ <key> <token> <client> <op-id>"           -> "OK <value>" | "STALE <highest>"
//   "WRITE <key> <token> <value> <client> <op-id>"  -> "OK" | "STALE <highest>"
// Reads are fenced as well as writes: a read with token t raises the floor to t, so a holder that
// lost its lock can neither overwrite nor interleave with its successor's read-modify-write.
// Every request and its outcome is appended to a journal (see soak_log.hpp) that the checker
// reads independently of this code.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <zkr/fence_gate.hpp>

namespace zkr::soak {

class FencedStore {
 public:
  FencedStore(std::filesystem::path socket_path, std::filesystem::path journal_path);
  ~FencedStore();  // stop()
  FencedStore(const FencedStore&) = delete;
  FencedStore& operator=(const FencedStore&) = delete;

  // Closes the socket and every connection, waits for the threads, writes the final values.
  void stop();

  // The client whose request was last accepted (-1 before any): most likely the holder.
  int last_accepted_client() const { return last_accepted_client_.load(); }
  std::uint64_t accepted() const { return gate_.admitted(); }
  std::uint64_t refused() const { return gate_.refused(); }

  // Waits (at most `timeout`) for the next accepted READ and returns its client, or -1. A client
  // whose read was just accepted is inside its job, between checking its lock and writing: the
  // moment to freeze or expire it.
  int wait_for_next_read(std::chrono::milliseconds timeout);

  // For tests and the driver: handle one request line as a connection would.
  std::string handle(const std::string& request);

 private:
  void accept_loop();
  void serve(int fd);

  std::filesystem::path socket_path_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;

  std::mutex connections_mutex_;
  std::list<std::thread> connection_threads_;
  std::list<int> connection_fds_;

  mutable std::mutex mutex_;  // the values, the journal, the sequence
  FenceGate gate_;
  std::map<std::string, std::int64_t> values_;
  std::ofstream journal_;
  std::uint64_t sequence_ = 0;
  std::atomic<int> last_accepted_client_{-1};
  std::condition_variable read_accepted_;
  std::uint64_t reads_accepted_ = 0;  // under mutex_
  int last_reader_ = -1;              // under mutex_
};

}  // namespace zkr::soak
