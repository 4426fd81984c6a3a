// SPDX-License-Identifier: Apache-2.0
// Synchronous requests on a session's connection: the data API (Session::get, ..., commit) and
// fenced transactions (zkr/fenced.hpp) wait for their replies through this.
#pragma once

#include <future>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <zkr/error.hpp>
#include <zkr/session.hpp>

#include "session_core.hpp"

namespace zkr::detail {

// Sends one request with `send(generation, deliver)` (called with the session mutex held) and waits
// for `deliver(reply)`. Without a generation it first waits for a connection and uses the current
// one; with one (a fenced write, bound to the session that owns its lock node) it sends at once,
// and a replaced session answers zk_errc::invalid_state. Throws Error(errc::session_closed,
// errc::connect_timeout, or errc::timed_out: no reply in time, outcome unknown).
template <typename Reply, typename Send>
Reply wait_for_reply(const std::shared_ptr<SessionCore>& core, std::string_view operation, std::string_view path,
                     Send send, std::optional<std::uint64_t> generation = std::nullopt) {
  const auto connect_wait = core->options().connect_timeout;
  if (!generation && !core->wait_connected(connect_wait))
    throw Error(make_error_code(core->ended() ? errc::session_closed : errc::connect_timeout), operation, path);
  auto reply = std::make_shared<std::promise<Reply>>();
  auto future = reply->get_future();
  {
    std::lock_guard lock(core->mutex());
    if (core->ended()) throw Error(make_error_code(errc::session_closed), operation, path);
    send(generation.value_or(core->generation_locked()),
         [reply](Reply value) { reply->set_value(std::move(value)); });
  }
  // The client gives up on a request by itself within the session timeout; this bounds the wait
  // even if it did not.
  const auto reply_wait = connect_wait + core->options().session_timeout;
  if (future.wait_for(reply_wait) != std::future_status::ready)
    throw Error(make_error_code(errc::timed_out), operation, path, "no reply: the outcome is unknown");
  return future.get();
}

struct MultiReply {
  zk_errc rc = zk_errc::ok;
  std::vector<MultiOpOutcome> outcomes;
};

// The index of the op a refused multi failed on (the first whose own code is not ok), if known.
std::optional<std::size_t> failed_op(const MultiReply& reply);

}  // namespace zkr::detail
