// SPDX-License-Identifier: Apache-2.0
#include "ops.hpp"

#include <charconv>
#include <stdexcept>

#include <fmt/format.h>

namespace zkr::swarm {
namespace {

using F = OpFamily;
constexpr std::array<OpInfo, kOpKindCount> kTable{{
    {OpKind::acquire, "acquire", F::acquisition},
    {OpKind::try_acquire, "try_acquire", F::acquisition},
    {OpKind::try_acquire_for, "try_acquire_for", F::acquisition},
    {OpKind::try_acquire_for_ec, "try_acquire_for_ec", F::acquisition},
    {OpKind::async_acquire, "async_acquire", F::acquisition},
    {OpKind::release, "release", F::hold},
    {OpKind::release_and_confirm, "release_and_confirm", F::hold},
    {OpKind::destroy, "destroy", F::hold},
    {OpKind::move, "move", F::hold},
    {OpKind::release_on_loss, "release_on_loss", F::hold},
    {OpKind::fenced_commit, "fenced_commit", F::hold},
    {OpKind::gate_admit, "gate_admit", F::hold},
    {OpKind::latch_start, "latch_start", F::election},
    {OpKind::latch_close, "latch_close", F::election},
    {OpKind::latch_resign, "latch_resign", F::election},
    {OpKind::latch_wait, "latch_wait", F::election},
    {OpKind::latch_async_wait, "latch_async_wait", F::election},
    {OpKind::latch_fenced, "latch_fenced", F::election},
    {OpKind::latch_close_on_gain, "latch_close_on_gain", F::election},
    {OpKind::selector_start, "selector_start", F::election},
    {OpKind::selector_close, "selector_close", F::election},
    {OpKind::selector_yield, "selector_yield", F::election},
    {OpKind::selector_close_inside, "selector_close_inside", F::election},
    {OpKind::watch_start, "watch_start", F::election},
    {OpKind::watch_stop, "watch_stop", F::election},
    {OpKind::watch_stop_inside, "watch_stop_inside", F::election},
    {OpKind::cache_start, "cache_start", F::election},
    {OpKind::cache_stop, "cache_stop", F::election},
    {OpKind::batch_open, "batch_open", F::batch},
    {OpKind::batch_send, "batch_send", F::batch},
    {OpKind::batch_destroy, "batch_destroy", F::batch},
    {OpKind::await_async, "await_async", F::control},
    {OpKind::cancel, "cancel", F::control},
    {OpKind::session_close, "session_close", F::session},
    {OpKind::session_reopen, "session_reopen", F::session},
    {OpKind::session_close_on_change, "session_close_on_change", F::session},
    {OpKind::gate_reopen, "gate_reopen", F::session},
    {OpKind::fault_lost_reply, "fault_lost_reply", F::fault},
    {OpKind::fault_failed_create, "fault_failed_create", F::fault},
    {OpKind::fault_drop, "fault_drop", F::fault},
    {OpKind::fault_expire, "fault_expire", F::fault},
    {OpKind::fault_partition, "fault_partition", F::fault},
    {OpKind::fault_pause, "fault_pause", F::fault},
    {OpKind::fault_break, "fault_break", F::fault},
    {OpKind::fault_restart, "fault_restart", F::fault},
    {OpKind::fault_freeze, "fault_freeze", F::fault},
    {OpKind::fault_move, "fault_move", F::fault},
    {OpKind::counter_add, "counter_add", F::counter},
    {OpKind::multi_acquire, "multi_acquire", F::catalogue},
    {OpKind::multi_release, "multi_release", F::catalogue},
    {OpKind::group_join, "group_join", F::catalogue},
    {OpKind::group_leave, "group_leave", F::catalogue},
    {OpKind::view_start, "view_start", F::catalogue},
    {OpKind::view_stop, "view_stop", F::catalogue},
    {OpKind::barrier_set, "barrier_set", F::catalogue},
    {OpKind::barrier_remove, "barrier_remove", F::catalogue},
    {OpKind::barrier_wait, "barrier_wait", F::catalogue},
    {OpKind::double_enter, "double_enter", F::catalogue},
    {OpKind::double_leave, "double_leave", F::catalogue},
}};

constexpr bool table_in_order() {
  for (std::size_t i = 0; i < kTable.size(); ++i)
    if (static_cast<std::size_t>(kTable[i].kind) != i) return false;
  return true;
}
static_assert(table_in_order(), "kTable lists the OpKinds in declaration order");

int number(std::string_view text, std::string_view whole) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < 0)
    throw std::invalid_argument(fmt::format("swarm op '{}': '{}' is not a number", whole, text));
  return value;
}

}  // namespace

std::chrono::milliseconds wait_timeout(const Op& op) {
  using namespace std::chrono_literals;
  constexpr std::chrono::milliseconds kTimeouts[] = {0ms, 20ms, 100ms, 400ms};
  return kTimeouts[timeout_class(op)];
}

std::chrono::milliseconds async_timeout(const Op& op) {
  using namespace std::chrono_literals;
  constexpr std::chrono::milliseconds kTimeouts[] = {-1ms, 0ms, 50ms, 400ms};
  return kTimeouts[timeout_class(op)];
}

const OpInfo& info(OpKind kind) { return kTable.at(static_cast<std::size_t>(kind)); }

std::optional<OpKind> op_kind_named(std::string_view name) {
  for (const auto& entry : kTable)
    if (entry.name == name) return entry.kind;
  return std::nullopt;
}

std::string to_text(const Op& op) {
  return fmt::format("{}:{}.{}.{}.{}", info(op.kind).name, op.actor, op.session, op.resource, op.arg);
}

std::string to_text(const std::vector<Op>& ops) {
  std::string out;
  for (const auto& op : ops) {
    if (!out.empty()) out += ' ';
    out += to_text(op);
  }
  return out;
}

Op op_from_text(std::string_view text) {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos)
    throw std::invalid_argument(fmt::format("swarm op '{}': expected name:actor.session.resource.arg", text));
  const auto kind = op_kind_named(text.substr(0, colon));
  if (!kind) throw std::invalid_argument(fmt::format("swarm op '{}': no operation named so", text));
  std::array<int, 4> fields{};
  std::string_view rest = text.substr(colon + 1);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto dot = rest.find('.');
    if ((dot == std::string_view::npos) != (i + 1 == fields.size()))
      throw std::invalid_argument(fmt::format("swarm op '{}': expected four numbers after the name", text));
    fields[i] = number(rest.substr(0, dot), text);
    if (dot != std::string_view::npos) rest.remove_prefix(dot + 1);
  }
  return {*kind, fields[0], fields[1], fields[2], fields[3]};
}

std::vector<Op> ops_from_text(std::string_view text) {
  std::vector<Op> ops;
  while (!text.empty()) {
    const auto start = text.find_first_not_of(" \t\n,;");
    if (start == std::string_view::npos) break;
    text.remove_prefix(start);
    const auto end = text.find_first_of(" \t\n,;");
    ops.push_back(op_from_text(text.substr(0, end)));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end);
  }
  return ops;
}

}  // namespace zkr::swarm
