// SPDX-License-Identifier: Apache-2.0
// A thin RAII handle over the ZooKeeper C client, for the floor driver and for the setup, cleanup
// and observer sessions of the other C++ drivers. Nothing here is a recipe: it is what any caller
// of the C client writes first.
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>
#include <fmt/format.h>

namespace bench {

class RawHandle {
 public:
  // Connects and waits up to `connect_timeout` for the session; throws std::runtime_error.
  RawHandle(const std::string& connect, int session_timeout_ms,
            std::chrono::milliseconds connect_timeout = std::chrono::seconds(20)) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    handle_ = zookeeper_init(connect.c_str(), &RawHandle::session_watcher, session_timeout_ms,
                             nullptr, this, 0);
    if (handle_ == nullptr) throw std::runtime_error(fmt::format("zookeeper_init {} failed", connect));
    // As the library does (SessionOptions::host_resolution_interval): no resolver call per poll.
    zoo_set_servers_resolution_delay(handle_, 10000);
    std::unique_lock lock(mutex_);
    if (!connected_cv_.wait_for(lock, connect_timeout, [this] { return connected_; })) {
      lock.unlock();
      close();
      throw std::runtime_error(fmt::format("no session with {} within {} ms", connect,
                                           connect_timeout.count()));
    }
  }
  ~RawHandle() { close(); }
  RawHandle(const RawHandle&) = delete;
  RawHandle& operator=(const RawHandle&) = delete;

  zhandle_t* get() const { return handle_; }
  std::int64_t session_id() const { return zoo_client_id(handle_)->client_id; }
  int negotiated_timeout_ms() const { return zoo_recv_timeout(handle_); }

  void close() {
    if (handle_ != nullptr) zookeeper_close(std::exchange(handle_, nullptr));
  }

  // Creates every missing component of `path` as a persistent node.
  void ensure_path(std::string_view path) const {
    std::string prefix;
    std::size_t start = 1;
    while (start <= path.size()) {
      auto slash = path.find('/', start);
      if (slash == std::string_view::npos) slash = path.size();
      prefix = std::string(path.substr(0, slash));
      int rc = zoo_create(handle_, prefix.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
                          nullptr, 0);
      if (rc != ZOK && rc != ZNODEEXISTS)
        throw std::runtime_error(fmt::format("create {}: {}", prefix, zerror(rc)));
      start = slash + 1;
    }
  }

  std::vector<std::string> children(const std::string& path) const {
    String_vector names{};
    int rc = zoo_get_children(handle_, path.c_str(), 0, &names);
    if (rc != ZOK) throw std::runtime_error(fmt::format("get_children {}: {}", path, zerror(rc)));
    std::vector<std::string> result(names.data, names.data + names.count);
    deallocate_String_vector(&names);
    return result;
  }

  // Deletes path and everything below it (the benchmark's own subtree at the end of a run). The
  // children are deleted pipelined, since the scale scenario leaves ten thousand of them; those
  // that turn out not to be empty are descended into.
  void delete_tree(const std::string& path) const {
    String_vector names{};
    if (zoo_get_children(handle_, path.c_str(), 0, &names) != ZOK) return;
    std::vector<PendingDelete> pending;
    pending.reserve(names.count);
    std::atomic<int> outstanding{0};
    for (int i = 0; i < names.count; ++i)
      pending.push_back({path + "/" + names.data[i], &outstanding});
    deallocate_String_vector(&names);
    for (auto& request : pending) {
      outstanding.fetch_add(1);
      if (zoo_adelete(handle_, request.path.c_str(), -1, &RawHandle::deleted, &request) != ZOK) {
        request.result = ZNOTEMPTY;  // not sent: try the slow way below
        outstanding.fetch_sub(1);
      }
    }
    for (int spins = 0; outstanding.load() > 0 && spins < 120'000; ++spins)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    for (const auto& request : pending)
      if (request.result == ZNOTEMPTY) delete_tree(request.path);
    zoo_delete(handle_, path.c_str(), -1);
  }

 private:
  static void session_watcher(zhandle_t*, int type, int state, const char*, void* context) {
    if (type != ZOO_SESSION_EVENT) return;
    auto* self = static_cast<RawHandle*>(context);
    std::lock_guard lock(self->mutex_);
    self->connected_ = state == ZOO_CONNECTED_STATE;
    self->connected_cv_.notify_all();
  }
  struct PendingDelete {
    std::string path;
    std::atomic<int>* outstanding;
    int result = ZOK;
  };
  static void deleted(int rc, const void* data) {
    auto* request = static_cast<PendingDelete*>(const_cast<void*>(data));
    request->result = rc;
    request->outstanding->fetch_sub(1);
  }

  zhandle_t* handle_ = nullptr;
  std::mutex mutex_;
  std::condition_variable connected_cv_;
  bool connected_ = false;
};

// "_c_<uuid>-lock-": the node name prefix Curator and this library write.
inline std::string lock_node_prefix(const std::string& lock_path) {
  static thread_local boost::uuids::random_generator generate;
  return fmt::format("{}/_c_{}-lock-", lock_path, boost::uuids::to_string(generate()));
}

// The numeric suffix of a lock node name, or nothing if it is not one.
inline std::optional<std::int64_t> lock_sequence(std::string_view name) {
  auto marker = name.rfind("-lock-");
  if (marker == std::string_view::npos || name.size() - marker - 6 != 10) return std::nullopt;
  std::int64_t value = 0;
  for (char c : name.substr(marker + 6)) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace bench
