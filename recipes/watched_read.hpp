// SPDX-License-Identifier: Apache-2.0
// WatchedRead: a path read again whenever it changes, under one watch (the leader watch's and the
// group view's children listings, the counter listener's data reads).
//
// Every read supersedes the earlier ones: their replies are dropped. One watch at a time: the
// client keeps it across connection drops (it sends it again on reconnection, and the server fires
// it for a change made meanwhile), so a read sets one only while none is set or being set. The
// client sets a read's watch only with a successful reply: a read without a reply has no watch,
// and a later read that counted on it reads again (with one). An absent node takes no watch
// either: the owner looks again later (retry_later_locked).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <boost/asio/steady_timer.hpp>

#include "completion.hpp"
#include "session_core.hpp"

namespace zkr::detail {

// The owner is a recipe's state held by a shared_ptr (enable_shared_from_this), with `core` (its
// SessionCore) and refresh_locked(), which reads again through list_children_locked or
// read_data_locked unless it stopped. Every call here is made under the session mutex.
class WatchedRead {
 public:
  // Lists the children of `path`, if the connection is usable (false if not: the owner reads again
  // on reconnection or on the new session). The latest listing's reply goes to
  // owner.on_children_locked(generation, rc, children).
  template <typename Owner>
  bool list_children_locked(Owner& owner, const std::string& path) {
    return send_locked(owner, &SessionCore::get_children, path,
                       [](Owner& self, std::uint64_t generation, zk_errc rc, std::vector<std::string> children,
                          NodeStat) { self.on_children_locked(generation, rc, std::move(children)); });
  }

  // Reads the data of `path`, as list_children_locked: the latest reply goes to
  // owner.on_data_locked(rc, data, stat).
  template <typename Owner>
  bool read_data_locked(Owner& owner, const std::string& path) {
    return send_locked(owner, &SessionCore::get_data, path,
                       [](Owner& self, std::uint64_t, zk_errc rc, std::string data, NodeStat stat) {
                         self.on_data_locked(rc, std::move(data), stat);
                       });
  }

  // Reads again after `delay`, unless another read came first.
  template <typename Owner>
  void retry_later_locked(Owner& owner, std::chrono::milliseconds delay) {
    const std::uint64_t read = latest_;
    owner.core->post_to_worker([weak = owner.weak_from_this(), this, read, delay] {  // timers are the worker's
      auto self = weak.lock();
      if (!self) return;
      if (!retry_timer_) retry_timer_ = std::make_unique<boost::asio::steady_timer>(self->core->worker());
      retry_timer_->expires_after(delay);
      retry_timer_->async_wait(when_alive_locked(weak, [this, read](const auto& again, boost::system::error_code ec) {
        if (!ec && read == latest_) again->refresh_locked();
      }));
    });
  }

  // Every reply, watch and retry in flight is stale from here on.
  template <typename Owner>
  void stop_locked(Owner& owner) {
    ++latest_;
    owner.core->post_to_worker([weak = owner.weak_from_this(), this] {
      if (auto self = weak.lock(); self && retry_timer_) retry_timer_->cancel();
    });
  }

  // A new session: the lost session's watches went with its handle.
  void forget_watch_locked() { watching_ = 0; }

  // The latest read's number: a request the owner sends on a reply is stale once it is no longer
  // the latest.
  std::uint64_t latest_locked() const { return latest_; }

 private:
  // Sends `request` (SessionCore's get_children or get_data) for `path` with the watch, if none is
  // set or being set already; `handle(owner, generation, rc, rest...)` runs for the latest read's
  // reply only, under the session mutex, while the owner lives.
  template <typename Owner, typename Request, typename Handle>
  bool send_locked(Owner& owner, Request request, const std::string& path, Handle handle) {
    const std::uint64_t generation = owner.core->generation_locked();
    if (!owner.core->usable_locked(generation)) return false;
    const std::uint64_t read = ++latest_;
    std::weak_ptr<Owner> weak = owner.weak_from_this();
    NodeWatch watch;
    if (watching_ == 0) {
      watching_ = read;
      watch = when_alive_locked(weak, [this, read](const auto& self, NodeEvent) {
        if (read != watching_) return;  // an earlier session's
        watching_ = 0;
        self->refresh_locked();
      });
    }
    auto reply = when_alive_locked(weak, [this, read, generation, handle](const auto& self, zk_errc rc, auto... rest) {
      if (read == watching_ && rc != zk_errc::ok) {
        watching_ = 0;  // no reply, no watch
        if (read != latest_) return self->refresh_locked();
      }
      if (read == latest_) handle(*self, generation, rc, std::move(rest)...);
    });
    ((*owner.core).*request)(generation, path, std::move(reply), std::move(watch), WatchOwner{});
    return true;
  }

  std::uint64_t latest_ = 0;
  std::uint64_t watching_ = 0;  // the read whose watch is set or being set; 0: none
  std::unique_ptr<boost::asio::steady_timer> retry_timer_;  // the worker thread's
};

}  // namespace zkr::detail
