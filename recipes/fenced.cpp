// SPDX-License-Identifier: Apache-2.0
// FencedTransaction: a multi guarded by a check of the grant's own node (see zkr/fenced.hpp).
#include <zkr/fenced.hpp>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "contender_queue.hpp"
#include "data_calls.hpp"
#include "thread_holds.hpp"
#include "without_exceptions.hpp"

namespace zkr {

namespace {
constexpr std::string_view kOperation = "fenced commit";
}

FencedTransaction::FencedTransaction(const HeldLock& held) : contender_(held.contender_), hold_(held.hold_) {
  if (!contender_) throw Error(make_error_code(errc::invalid_argument), "fenced transaction", {}, "the lock is not held");
}

FencedTransaction::FencedTransaction(const Leadership& term) : contender_(term.contender_), term_(term) {
  if (!term || !contender_)
    throw Error(make_error_code(errc::invalid_argument), "fenced transaction", {}, "not a term of leadership");
}

FencedTransaction& FencedTransaction::create(std::string path, std::string data, CreateMode mode, NodeAcl acl) {
  ops_.create(std::move(path), std::move(data), mode, acl);
  return *this;
}
FencedTransaction& FencedTransaction::set(std::string path, std::string data, int version) {
  ops_.set(std::move(path), std::move(data), version);
  return *this;
}
FencedTransaction& FencedTransaction::remove(std::string path, int version) {
  ops_.remove(std::move(path), version);
  return *this;
}
FencedTransaction& FencedTransaction::check(std::string path, int version) {
  ops_.check(std::move(path), version);
  return *this;
}

std::vector<DataOpResult> FencedTransaction::commit() {
  // The HeldLock's own state, not its grant's: other holds of a reentrant grant keep the node.
  if (hold_ && hold_->released())
    throw Error(make_error_code(errc::lock_lost), kOperation, contender_->node_path(),
                "the HeldLock was released; nothing was sent");
  const auto& core = contender_->core();
  std::string refusal;
  std::optional<detail::Contender::FenceCheck> fence;
  {
    std::lock_guard lock(core->mutex());
    fence = contender_->fence_check_locked(refusal);
  }
  const std::string node = fence ? fence->node_path : contender_->node_path();
  if (!fence) throw Error(make_error_code(errc::lock_lost), kOperation, node, refusal + "; nothing was sent");
  if (term_ && term_->ended())
    throw Error(make_error_code(errc::lock_lost), kOperation, node, "the leadership term ended; nothing was sent");

  // Our check first: when the grant is gone, that is what the refusal names.
  std::vector<detail::MultiOp> ops;
  ops.reserve(ops_.ops().size() + 1);
  ops.push_back({DataOp::Kind::check, node, {}, CreateMode::persistent, NodeAcl::open, -1});
  ops.insert(ops.end(), ops_.ops().begin(), ops_.ops().end());
  const std::size_t count = ops_.ops().size();

  auto reply = detail::wait_for_reply<detail::MultiReply>(
      core, kOperation, node,
      [&](std::uint64_t generation, auto deliver) {
        core->multi(generation, ops, [deliver](zk_errc rc, std::vector<detail::MultiOpOutcome> outcomes) {
          deliver(detail::MultiReply{rc, std::move(outcomes)});
        });
      },
      fence->generation);

  if (reply.rc == zk_errc::ok) {
    std::vector<DataOpResult> results(count);
    for (std::size_t i = 0; i < count && i + 1 < reply.outcomes.size(); ++i)
      results[i] = {std::move(reply.outcomes[i + 1].created_path), reply.outcomes[i + 1].stat};
    return results;
  }
  if (auto failed = detail::failed_op(reply)) {
    if (*failed == 0)
      throw Error(make_error_code(errc::lock_lost), kOperation, node,
                  fmt::format("the server refused the check of the lock node: {}; none of the {} ops was applied",
                              make_error_code(reply.outcomes[0].rc).message(), count));
    const DataOp& op = ops[*failed];
    throw Error(make_error_code(reply.outcomes[*failed].rc), kOperation, op.path,
                fmt::format("op {} of {}: {}; none was applied", *failed, count, describe(op)));
  }
  switch (reply.rc) {
    case zk_errc::invalid_state:
    case zk_errc::session_expired:
    case zk_errc::closing:
    case zk_errc::session_moved:
      // Only the session that created the node can prove it still holds: a replaced or expired
      // one cannot, whatever the node's fate.
      throw Error(make_error_code(errc::lock_lost), kOperation, node,
                  fmt::format("the session that owns the lock node is gone ({}); none of the {} ops was applied",
                              make_error_code(reply.rc).message(), count));
    default:
      throw Error(make_error_code(reply.rc), kOperation, node,
                  fmt::format("the outcome of the {} ops is unknown: all of them or none were applied", count));
  }
}

std::vector<DataOpResult> FencedTransaction::commit(std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return commit(); });
}

}  // namespace zkr
