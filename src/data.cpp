// SPDX-License-Identifier: Apache-2.0
// The data API of a Session: typed, synchronous calls on the session's own connection.
#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/names.hpp>
#include <zkr/session.hpp>

#include "data_calls.hpp"
#include "path_check.hpp"
#include "without_exceptions.hpp"

namespace zkr {
namespace {

using detail::require_valid_path;

std::string_view kind_name(DataOp::Kind kind) {
  switch (kind) {
    case DataOp::Kind::create: return "create";
    case DataOp::Kind::set: return "set";
    case DataOp::Kind::remove: return "remove";
    case DataOp::Kind::check: return "check";
  }
  return "op";
}

struct DataReply {
  zk_errc rc;
  std::string data;
  NodeStat stat;
};
struct ChildrenReply {
  zk_errc rc;
  std::vector<std::string> children;
};
struct StatReply {
  zk_errc rc;
  NodeStat stat;
};
struct CreateReply {
  zk_errc rc;
  std::string created;
};

// The adapter runs watches on the completion thread; user code runs on the callback thread.
detail::NodeWatch on_callback_thread(const std::shared_ptr<detail::SessionCore>& core, DataWatch watch) {
  if (!watch) return {};
  return [weak_core = std::weak_ptr<detail::SessionCore>(core), watch = std::move(watch)](NodeEvent event) {
    if (auto session = weak_core.lock())
      session->post_callback([watch, event] { watch(event); });
  };
}

}  // namespace

std::string describe(const DataOp& op) {
  std::string text = fmt::format("{} {}", kind_name(op.kind), op.path);
  if (op.kind != DataOp::Kind::create && op.version != -1) text += fmt::format(" (version {})", op.version);
  return text;
}

Transaction& Transaction::create(std::string path, std::string data, CreateMode mode, NodeAcl acl) {
  require_valid_path(path, "transaction: create");
  ops_.push_back({DataOp::Kind::create, std::move(path), std::move(data), mode, acl, -1});
  return *this;
}

Transaction& Transaction::set(std::string path, std::string data, int version) {
  require_valid_path(path, "transaction: set");
  ops_.push_back({DataOp::Kind::set, std::move(path), std::move(data), CreateMode::persistent, NodeAcl::open, version});
  return *this;
}

Transaction& Transaction::remove(std::string path, int version) {
  require_valid_path(path, "transaction: remove");
  ops_.push_back({DataOp::Kind::remove, std::move(path), {}, CreateMode::persistent, NodeAcl::open, version});
  return *this;
}

Transaction& Transaction::check(std::string path, int version) {
  require_valid_path(path, "transaction: check");
  ops_.push_back({DataOp::Kind::check, std::move(path), {}, CreateMode::persistent, NodeAcl::open, version});
  return *this;
}

namespace detail {

std::optional<std::size_t> failed_op(const MultiReply& reply) {
  for (std::size_t i = 0; i < reply.outcomes.size(); ++i)
    if (reply.outcomes[i].rc != zk_errc::ok) return i;
  return std::nullopt;
}

}  // namespace detail

NodeData Session::get(std::string_view path, DataWatch watch) const {
  require_valid_path(path, "get");
  const std::string node(path);
  auto reply = detail::wait_for_reply<DataReply>(core_, "get", path, [&](std::uint64_t generation, auto deliver) {
    core_->get_data(
        generation, node,
        [deliver](zk_errc rc, std::string data, NodeStat stat) { deliver(DataReply{rc, std::move(data), stat}); },
        on_callback_thread(core_, std::move(watch)));
  });
  throw_if(make_error_code(reply.rc), "get", path);
  return {std::move(reply.data), reply.stat};
}

std::optional<NodeStat> Session::exists(std::string_view path) const {
  require_valid_path(path, "exists");
  const std::string node(path);
  auto reply = detail::wait_for_reply<StatReply>(core_, "exists", path, [&](std::uint64_t generation, auto deliver) {
    core_->exists(generation, node, [deliver](zk_errc rc, NodeStat stat) { deliver(StatReply{rc, stat}); });
  });
  if (reply.rc == zk_errc::no_node) return std::nullopt;
  throw_if(make_error_code(reply.rc), "exists", path);
  return reply.stat;
}

std::vector<std::string> Session::children(std::string_view path, DataWatch watch) const {
  require_valid_path(path, "children of");
  const std::string node(path);
  auto reply =
      detail::wait_for_reply<ChildrenReply>(core_, "children of", path, [&](std::uint64_t generation, auto deliver) {
        core_->get_children(
            generation, node,
            [deliver](zk_errc rc, std::vector<std::string> children, NodeStat) { deliver(ChildrenReply{rc, std::move(children)}); },
            on_callback_thread(core_, std::move(watch)));
      });
  throw_if(make_error_code(reply.rc), "children of", path);
  return std::move(reply.children);
}

std::string Session::create(std::string_view path, std::string_view data, CreateMode mode, NodeAcl acl) {
  require_valid_path(path, "create");
  const std::string node(path), content(data);
  auto reply = detail::wait_for_reply<CreateReply>(core_, "create", path, [&](std::uint64_t generation, auto deliver) {
    core_->create(generation, node, content, mode, acl,
                  [deliver](zk_errc rc, std::string created, NodeStat) { deliver(CreateReply{rc, std::move(created)}); });
  });
  throw_if(make_error_code(reply.rc), "create", path);
  return std::move(reply.created);
}

NodeStat Session::set(std::string_view path, std::string_view data, int version) {
  require_valid_path(path, "set");
  const std::string node(path), content(data);
  auto reply = detail::wait_for_reply<StatReply>(core_, "set", path, [&](std::uint64_t generation, auto deliver) {
    core_->set_data(generation, node, content, version,
                    [deliver](zk_errc rc, NodeStat stat) { deliver(StatReply{rc, stat}); });
  });
  throw_if(make_error_code(reply.rc), "set", path);
  return reply.stat;
}

void Session::remove(std::string_view path, int version) {
  require_valid_path(path, "remove");
  const std::string node(path);
  auto reply = detail::wait_for_reply<zk_errc>(core_, "remove", path, [&](std::uint64_t generation, auto deliver) {
    core_->remove(generation, node, version, [deliver](zk_errc rc) { deliver(rc); });
  });
  throw_if(make_error_code(reply), "remove", path);
}

std::vector<DataOpResult> Session::commit(const Transaction& transaction) {
  if (transaction.empty()) return {};
  const auto& ops = transaction.ops();
  auto reply = detail::wait_for_reply<detail::MultiReply>(
      core_, "commit", ops.front().path, [&](std::uint64_t generation, auto deliver) {
        core_->multi(generation, ops, [deliver](zk_errc rc, std::vector<detail::MultiOpOutcome> outcomes) {
          deliver(detail::MultiReply{rc, std::move(outcomes)});
        });
      });
  if (reply.rc != zk_errc::ok) {
    if (auto failed = detail::failed_op(reply))
      throw Error(make_error_code(reply.outcomes[*failed].rc), "commit", ops[*failed].path,
                  fmt::format("op {} of {}: {}; no op was applied", *failed + 1, ops.size(), describe(ops[*failed])));
    throw Error(make_error_code(reply.rc), "commit", ops.front().path,
                fmt::format("transaction of {} ops", ops.size()));
  }
  std::vector<DataOpResult> results(ops.size());
  for (std::size_t i = 0; i < ops.size() && i < reply.outcomes.size(); ++i)
    results[i] = {std::move(reply.outcomes[i].created_path), reply.outcomes[i].stat};
  return results;
}

// ---- the same without exceptions (src/without_exceptions.hpp) ----

using detail::without_exceptions;

NodeData Session::get(std::string_view path, std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] { return get(path); });
}
NodeData Session::get(std::string_view path, DataWatch watch, std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] { return get(path, std::move(watch)); });
}
std::optional<NodeStat> Session::exists(std::string_view path, std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] { return exists(path); });
}
std::vector<std::string> Session::children(std::string_view path, std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] { return children(path); });
}
std::vector<std::string> Session::children(std::string_view path, DataWatch watch, std::error_code& ec) const noexcept {
  return without_exceptions(ec, [&] { return children(path, std::move(watch)); });
}
std::string Session::create(std::string_view path, std::string_view data, std::error_code& ec) noexcept {
  return without_exceptions(ec, [&] { return create(path, data); });
}
std::string Session::create(std::string_view path, std::string_view data, CreateMode mode, NodeAcl acl,
                            std::error_code& ec) noexcept {
  return without_exceptions(ec, [&] { return create(path, data, mode, acl); });
}
NodeStat Session::set(std::string_view path, std::string_view data, std::error_code& ec) noexcept {
  return without_exceptions(ec, [&] { return set(path, data); });
}
NodeStat Session::set(std::string_view path, std::string_view data, int version, std::error_code& ec) noexcept {
  return without_exceptions(ec, [&] { return set(path, data, version); });
}
void Session::remove(std::string_view path, std::error_code& ec) noexcept {
  without_exceptions(ec, [&] { remove(path); });
}
void Session::remove(std::string_view path, int version, std::error_code& ec) noexcept {
  without_exceptions(ec, [&] { remove(path, version); });
}
std::vector<DataOpResult> Session::commit(const Transaction& transaction, std::error_code& ec) noexcept {
  return without_exceptions(ec, [&] { return commit(transaction); });
}

}  // namespace zkr
