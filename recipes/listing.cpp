// SPDX-License-Identifier: Apache-2.0
// Who holds and who waits: read by anyone, participant or not.
#include <algorithm>
#include <future>
#include <map>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "data_calls.hpp"
#include "internals.hpp"
#include "contender_queue.hpp"
#include "log.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"

namespace zkr {
namespace detail {
namespace {

struct Listing {
  std::mutex mutex;
  std::promise<std::error_code> done;
  bool exists = true;
  std::vector<ContenderName> names;
  std::vector<std::string> not_contenders;
  std::map<std::string, std::pair<std::string, NodeStat>> details;  // by child name
  std::size_t outstanding = 0;
  bool finished = false;

  void finish(std::error_code ec) {
    if (finished) return;
    finished = true;
    done.set_value(ec);
  }
};

// Who is under `path`, and what else is. Throws Error.
PathListing list_path(const std::shared_ptr<SessionCore>& core, const std::string& path, int max_holders) {
  detail::require_valid_path(path, "list contenders of");
  const auto wait = core->options().connect_timeout;
  if (!core->wait_connected(wait))
    throw Error(make_error_code(core->ended() ? errc::session_closed : errc::connect_timeout),
                "list contenders of", path);

  auto listing = std::make_shared<Listing>();
  auto future = listing->done.get_future();
  {
    std::lock_guard lock(core->mutex());
    const std::uint64_t generation = core->generation_locked();
    std::weak_ptr<SessionCore> weak_core = core;
    core->get_children(generation, path, [listing, weak_core, generation, path](zk_errc rc, std::vector<std::string> children, NodeStat) {
      std::lock_guard guard(listing->mutex);
      if (rc == zk_errc::no_node) {
        listing->exists = false;
        return listing->finish({});
      }
      if (rc != zk_errc::ok) return listing->finish(make_error_code(rc));
      for (auto& child : children) {
        if (auto name = parse_contender_name(child)) listing->names.push_back(std::move(*name));
        else listing->not_contenders.push_back(std::move(child));
      }
      sort_by_sequence(listing->names);
      if (listing->names.empty()) return listing->finish({});
      auto session = weak_core.lock();
      if (!session) return listing->finish(make_error_code(errc::session_closed));
      listing->outstanding = listing->names.size();
      std::lock_guard session_lock(session->mutex());
      for (const auto& name : listing->names) {
        session->get_data(generation, path + "/" + name.name, [listing, child = name.name](zk_errc data_rc, std::string data, NodeStat stat) {
          std::lock_guard inner(listing->mutex);
          // A node deleted since the listing is simply no longer a contender.
          if (data_rc == zk_errc::ok) listing->details[child] = {std::move(data), stat};
          else if (data_rc != zk_errc::no_node) return listing->finish(make_error_code(data_rc));
          if (--listing->outstanding == 0) listing->finish({});
        });
      }
    });
  }
  if (future.wait_for(wait) != std::future_status::ready)
    throw Error(make_error_code(errc::timed_out), "list contenders of", path);
  if (auto ec = future.get()) throw Error(ec, "list contenders of", path);

  std::lock_guard guard(listing->mutex);
  PathListing result;
  result.exists = listing->exists;
  result.not_contenders = std::move(listing->not_contenders);
  std::sort(result.not_contenders.begin(), result.not_contenders.end());
  if (!result.not_contenders.empty()) {
    // Someone put them there (a path named below this one, a tool, a hand): say so, once per listing.
    constexpr std::size_t kNamed = 5;
    std::string named;
    for (std::size_t i = 0; i < std::min(kNamed, result.not_contenders.size()); ++i)
      named += fmt::format("{}'{}'", i ? ", " : "", result.not_contenders[i]);
    const std::size_t count = result.not_contenders.size();
    log(LogLevel::warning, LogContext{0, path, {}}, "list contenders of {}: {} {} not named like a contender node, never a holder: {}{}",
        path, count, count == 1 ? "child is" : "children are", named, count > kNamed ? ", ..." : "");
  }
  std::vector<ContenderName> present;
  for (const auto& name : listing->names)
    if (listing->details.count(name.name)) present.push_back(name);
  std::vector<ContenderInfo> rows;
  for (std::size_t i = 0; i < present.size(); ++i) {
    const auto& [data, stat] = listing->details[present[i].name];
    ContenderInfo row;
    row.node = present[i].name;
    row.sequence = present[i].sequence;
    row.token = FencingToken(stat.czxid);
    row.session_id = stat.ephemeral_owner;
    row.owner_data = data;
    row.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(stat.ctime_ms));
    row.scheme = present[i].scheme;
    row.role = present[i].role;
    const QueuePolicy policy{present[i].role, max_holders};
    row.holds = decide(present, i, policy).holds;
    // A semaphore node among the first N holds once its owner took the lease, which the grant
    // marks by bringing the node to version 2 (see decide()); before that (its owner has not
    // noticed yet, or is dead or frozen) it is listed as waiting, though it counts against N.
    if (policy.promotes_without_deleting() && stat.version < 2) row.holds = false;
    rows.push_back(std::move(row));
  }
  std::stable_partition(rows.begin(), rows.end(), [](const ContenderInfo& r) { return r.holds; });
  result.contenders = std::move(rows);
  return result;
}

}  // namespace

std::vector<ContenderInfo> list_contenders(const std::shared_ptr<SessionCore>& core, const std::string& path,
                                           int max_holders) {
  return list_path(core, path, max_holders).contenders;
}

}  // namespace detail

std::vector<ContenderInfo> list_contenders(Session& session, std::string_view path, int max_holders) {
  return detail::list_contenders(detail::Internals::core(session), std::string(path), max_holders);
}

PathListing list_lock_path(Session& session, std::string_view path, int max_holders) {
  return detail::list_path(detail::Internals::core(session), std::string(path), max_holders);
}

bool break_holder(Session& session, std::string_view path, const ContenderInfo& holder) {
  detail::require_valid_path(path, "break the holder of");
  if (holder.node.find('/') != std::string::npos || !parse_contender_name(holder.node))
    throw Error(make_error_code(errc::invalid_argument), "break the holder of", path,
                fmt::format("'{}' is not a contender node's name", holder.node));
  const std::string node = std::string(path) + "/" + holder.node;
  // Only the node that holds this token. ZooKeeper makes a delete conditional on the data version,
  // never on the czxid: the delete names the version read along with the token, so a node of the
  // same name made in between (its parent reaped and made again, and its GUID used again) is left
  // alone unless it reached that very version. A version moved by the owner's own rewrite (a
  // semaphore's grant) is read again.
  const auto core = detail::Internals::core(session);
  const std::string_view operation = "break the holder of";
  struct Read {
    zk_errc rc;
    NodeStat stat;
  };
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    const auto read = detail::wait_for_reply<Read>(core, operation, path, [&](std::uint64_t generation, auto deliver) {
      core->exists(generation, node, [deliver](zk_errc rc, NodeStat stat) { deliver(Read{rc, stat}); });
    });
    if (read.rc == zk_errc::no_node || (read.rc == zk_errc::ok && FencingToken(read.stat.czxid) != holder.token))
      return false;
    throw_if(make_error_code(read.rc), operation, path, holder.node);
    const auto removed = detail::wait_for_reply<zk_errc>(core, operation, path, [&](std::uint64_t generation, auto deliver) {
      core->remove(generation, node, read.stat.version, [deliver](zk_errc rc) { deliver(rc); });
    });
    if (removed == zk_errc::ok) break;
    if (removed == zk_errc::no_node) return false;
    if (removed != zk_errc::bad_version || attempt == kAttempts)
      throw Error(make_error_code(removed), operation, path, holder.node);
  }
  detail::log(LogLevel::warning, {.session_id = holder.session_id, .path = path, .node = holder.node},
              "broke {}: deleted {} (token {}, session {})", path, holder.node, holder.token.value(),
              session_id_text(holder.session_id));
  return true;
}

std::vector<ContenderInfo> list_contenders(Session& session, std::string_view path, int max_holders,
                                           std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return list_contenders(session, path, max_holders); });
}

PathListing list_lock_path(Session& session, std::string_view path, int max_holders, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return list_lock_path(session, path, max_holders); });
}

bool break_holder(Session& session, std::string_view path, const ContenderInfo& holder, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return break_holder(session, path, holder); });
}

}  // namespace zkr
