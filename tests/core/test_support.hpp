// SPDX-License-Identifier: Apache-2.0
// Helpers for the core tests: session options scaled for tests, and a raw C-client handle that
// inspects the server independently of the library under test.
#pragma once

#include <gtest/gtest.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <testenv.hpp>
#include <zkr/lock.hpp>

#include "session_core.hpp"  // client_id(), to force a server-side expiry

namespace zkr::test {

using namespace std::chrono_literals;

inline SessionOptions session_options(const std::string& servers, std::chrono::milliseconds timeout = 4000ms) {
  SessionOptions options;
  options.servers = servers;
  options.session_timeout = timeout;
  options.connect_timeout = testenv::scaled(15s);
  options.ensemble_tick_time = testenv::kTestTickTime;
  return options;
}

// Waits (bounded) until predicate() holds; returns whether it did.
// A Lock made with LockOptions::reentrant.
inline Lock reentrant_lock(Session& session, const std::string& path) {
  LockOptions options;
  options.reentrant = true;
  return Lock(session, path, options);
}

template <typename Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds timeout = testenv::scaled(10s)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (predicate()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return predicate();
}

// A plain C-client handle: the test's own eyes on the server.
class RawClient {
 public:
  explicit RawClient(const std::string& servers) {
    zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
    handle_ = zookeeper_init(servers.c_str(), &RawClient::watcher, 10000, nullptr, this, 0);
    if (!handle_) throw std::runtime_error("zookeeper_init failed");
    std::unique_lock lock(mutex_);
    if (!connected_cv_.wait_for(lock, testenv::scaled(15s), [this] { return connected_; }))
      throw std::runtime_error("raw client could not connect to " + servers);
  }
  ~RawClient() { zookeeper_close(handle_); }

  std::vector<std::string> children(const std::string& path) {
    String_vector names{};
    std::vector<std::string> out;
    int rc = zoo_get_children(handle_, path.c_str(), 0, &names);
    if (rc == ZNONODE) return out;
    if (rc != ZOK) throw std::runtime_error("get_children failed: " + std::string(zerror(rc)));
    for (int i = 0; i < names.count; ++i) out.emplace_back(names.data[i]);
    deallocate_String_vector(&names);
    return out;
  }

  // The node's Stat, or czxid 0 if it does not exist.
  Stat stat(const std::string& path) {
    Stat stat{};
    int rc = zoo_exists(handle_, path.c_str(), 0, &stat);
    if (rc == ZNONODE) return Stat{};
    if (rc != ZOK) throw std::runtime_error("exists failed: " + std::string(zerror(rc)));
    return stat;
  }

  int remove(const std::string& path) { return zoo_delete(handle_, path.c_str(), -1); }
  int create(const std::string& path, const std::string& data = {}, int flags = 0,
             ACL_vector* acl = &ZOO_OPEN_ACL_UNSAFE) {
    return zoo_create(handle_, path.c_str(), data.data(), static_cast<int>(data.size()), acl, flags, nullptr, 0);
  }
  int add_auth(const std::string& user_password) {
    return zoo_add_auth(handle_, "digest", user_password.data(), static_cast<int>(user_password.size()), nullptr,
                        nullptr);
  }
  zhandle_t* handle() { return handle_; }

 private:
  static void watcher(zhandle_t*, int type, int state, const char*, void* context) {
    auto* self = static_cast<RawClient*>(context);
    if (type == ZOO_SESSION_EVENT && state == ZOO_CONNECTED_STATE) {
      std::lock_guard lock(self->mutex_);
      self->connected_ = true;
      self->connected_cv_.notify_all();
    }
  }

  zhandle_t* handle_ = nullptr;
  std::mutex mutex_;
  std::condition_variable connected_cv_;
  bool connected_ = false;
};

// A test against the shared server on a path of its own, with the raw client to look at it.
class ServerTest : public ::testing::Test {
 protected:
  std::string servers = testenv::shared_server();
  std::string path = testenv::unique_path();
  RawClient raw{servers};

  std::vector<std::string> nodes() { return raw.children(path); }
  // The children in queue order (by their sequence number, the last ten digits).
  std::vector<std::string> queue() {
    auto children = nodes();
    std::sort(children.begin(), children.end(), [](const std::string& a, const std::string& b) {
      return a.substr(a.size() - 10) < b.substr(b.size() - 10);
    });
    return children;
  }
};

// The safety check of a partition: `holder` reaches the server through `proxy`, `waiter` directly,
// both contend for `path`; once the proxy forwards nothing, the holder must be told its lock is
// lost before the waiter is granted it, and the next grant's token is larger. (Used plain and
// through TLS.)
inline void expect_blackholed_holder_told_lost_first(Session& holder, Session& waiter, testenv::Proxy& proxy,
                                                     const std::string& path) {
  Lock holder_lock(holder, path), waiter_lock(waiter, path);
  HeldLock held = holder_lock.acquire();
  std::atomic<std::int64_t> lost_at{0}, granted_at{0};
  auto now_ns = [] { return std::chrono::steady_clock::now().time_since_epoch().count(); };
  held.on_lost([&](LossReason) { lost_at = now_ns(); });
  std::promise<HeldLock> next;
  waiter_lock.async_acquire(std::chrono::nanoseconds(-1), [&](std::error_code ec, HeldLock lock) {
    granted_at = now_ns();
    EXPECT_FALSE(ec);
    next.set_value(std::move(lock));
  });
  ASSERT_TRUE(eventually([&] { return waiter.children(path).size() == 2; }));
  proxy.blackhole();
  auto future = next.get_future();
  ASSERT_EQ(future.wait_for(testenv::scaled(std::chrono::seconds(30))), std::future_status::ready);
  ASSERT_NE(lost_at.load(), 0);
  EXPECT_LT(lost_at.load(), granted_at.load());
  EXPECT_GT(future.get().token(), held.token());
}

}  // namespace zkr::test
