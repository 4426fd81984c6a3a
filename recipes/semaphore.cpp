// SPDX-License-Identifier: Apache-2.0
// The semaphore: the contender queue with max_holders = N, and the limit recorded on the path.
#include <zkr/semaphore.hpp>

#include <charconv>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "acquisition.hpp"
#include "internals.hpp"
#include "contender_queue.hpp"
#include "peer_layout.hpp"
#include "peer_semaphore.hpp"
#include "request_limits.hpp"
#include "without_exceptions.hpp"
#include "path_check.hpp"

namespace zkr {
namespace {
constexpr std::string_view kLimitKey = "max_leases=";
}  // namespace

namespace detail {
std::optional<int> semaphore_limit_of(std::string_view data) {
  if (!data.starts_with(kLimitKey)) return std::nullopt;
  data.remove_prefix(kLimitKey.size());
  int value = 0;
  auto [end, ec] = std::from_chars(data.data(), data.data() + data.size(), value);
  if (ec != std::errc() || end != data.data() + data.size() || value < 1) return std::nullopt;
  return value;
}
}  // namespace detail

namespace {

std::string limit_record(int max_leases) { return fmt::format("{}{}", kLimitKey, max_leases); }

std::optional<int> parse_limit(std::string_view data) { return detail::semaphore_limit_of(data); }

}  // namespace

Semaphore::Semaphore(Session& session, std::string path, int max_leases, SemaphoreOptions options)
    : core_(detail::Internals::core(session)), path_(std::move(path)), max_leases_(max_leases), options_(std::move(options)) {
  detail::require_valid_path(path_, "semaphore path");
  if (max_leases_ < 1)
    throw Error(make_error_code(errc::invalid_argument), "semaphore path", path_,
                fmt::format("max_leases must be at least 1, not {}", max_leases_));
  if (options_.owner_data.empty()) options_.owner_data = default_owner_data();
  if (auto problem = detail::request_size_problem(path_.size(), options_.owner_data.size()); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "semaphore path", path_, "owner_data: " + problem);
  if (to_string(options_.layout) == "unknown")
    throw Error(make_error_code(errc::invalid_argument), "semaphore path", path_,
                fmt::format("unknown layout {}", static_cast<int>(options_.layout)));
}

Semaphore::~Semaphore() = default;

std::optional<Semaphore> Semaphore::make(Session& session, std::string path, int max_leases, SemaphoreOptions options,
                                         std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] {
    return std::optional<Semaphore>(std::in_place, session, std::move(path), max_leases, std::move(options));
  });
}

namespace {

detail::ContenderRequest make_request(const std::string& path, int max_leases, const SemaphoreOptions& options,
                                      std::chrono::nanoseconds timeout,
                                      std::shared_ptr<detail::RefusalDetail> refusal) {
  detail::ContenderRequest request;
  request.parent = path;
  request.policy = {ContenderRole::exclusive, max_leases};
  request.owner_data = options.owner_data;
  request.acl = options.acl;
  request.timeout = timeout;
  request.parent_data = limit_record(max_leases);
  // Our leases are "-lock-" nodes; any other recipe's nodes (a Curator or kazoo semaphore's lease
  // and lock children, which our queue would not count) make the path another protocol's.
  request.check_children = detail::refuse_peers(
      path, "a zkr::Semaphore in the zkrecipes layout",
      [](detail::PeerNode kind) { return kind == detail::PeerNode::curator_lock; }, refusal);
  request.check_parent = [max_leases, refusal = std::move(refusal)](const std::string& data) -> std::error_code {
    const auto recorded = parse_limit(data);
    if (recorded == max_leases) return {};
    refusal->set(recorded ? fmt::format("the path records max_leases={}, this participant asks for {}", *recorded,
                                        max_leases)
                          : fmt::format("the path node holds no lease limit (data '{}'); expected '{}'",
                                        data.substr(0, 64), limit_record(max_leases)));
    return make_error_code(errc::limit_mismatch);
  };
  return request;
}

std::optional<Lease> leased(std::shared_ptr<detail::Contender> granted) {
  if (!granted) return std::nullopt;
  return Lease(detail::Internals::key(), std::move(granted));
}

}  // namespace

detail::Acquisition Semaphore::acquisition() const {
  if (options_.layout != SemaphoreLayout::zkrecipes) {
    return {core_, "acquire semaphore", path_,
            detail::Acquisition::Start([this](std::chrono::nanoseconds timeout, auto refusal, auto done, auto stop) {
              detail::start_peer_lease(core_,
                                       {options_.layout, path_, max_leases_, options_.owner_data, options_.acl,
                                        timeout, std::move(refusal)},
                                       std::move(done), std::move(stop));
            })};
  }
  return {core_, "acquire semaphore", path_, [this](std::chrono::nanoseconds timeout, auto refusal) {
            return make_request(path_, max_leases_, options_, timeout, std::move(refusal));
          }};
}

std::optional<Lease> Semaphore::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                std::error_code& ec) noexcept {
  return leased(acquisition().try_for(timeout, std::move(stop), ec));
}

std::optional<Lease> Semaphore::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  return leased(acquisition().try_for(timeout, std::move(stop)));
}

std::optional<Lease> Semaphore::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

Lease Semaphore::acquire(std::stop_token stop) { return *leased(acquisition().wait(std::move(stop))); }

std::optional<Lease> Semaphore::try_acquire(std::error_code& ec) noexcept {
  return try_acquire_for(std::chrono::nanoseconds::zero(), {}, ec);
}

Lease Semaphore::acquire(std::stop_token stop, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return acquire(std::move(stop)); });
}

void Semaphore::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  acquisition().start(
      timeout,
      [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<detail::Contender>& contender) {
        handler(ec, contender ? Lease(detail::Internals::key(), contender) : Lease{});
      },
      std::move(stop));
}

std::vector<ContenderInfo> Semaphore::contenders() const {
  if (options_.layout != SemaphoreLayout::zkrecipes) return detail::list_peer_semaphore(core_, options_.layout, path_);
  return detail::list_contenders(core_, path_, max_leases_);
}

std::vector<ContenderInfo> Semaphore::contenders(std::error_code& ec) const noexcept {
  return detail::without_exceptions(ec, [&] { return contenders(); });
}

std::optional<int> Semaphore::recorded_limit(Session& session, std::string_view path, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return recorded_limit(session, path); });
}

std::string_view to_string(SemaphoreLayout layout) noexcept {
  switch (layout) {
    case SemaphoreLayout::zkrecipes: return "zkrecipes";
    case SemaphoreLayout::curator_v2: return "curator_v2";
    case SemaphoreLayout::kazoo: return "kazoo";
  }
  return "unknown";
}

std::optional<int> Semaphore::recorded_limit(Session& session, std::string_view path) {
  const std::string node(path);
  detail::require_valid_path(node, "read semaphore limit of");
  const auto& core = detail::Internals::core(session);
  const auto wait = core->options().connect_timeout;
  if (!core->wait_connected(wait))
    throw Error(make_error_code(core->ended() ? errc::session_closed : errc::connect_timeout),
                "read semaphore limit of", node);
  auto reply = std::make_shared<std::promise<std::pair<zk_errc, std::string>>>();
  auto future = reply->get_future();
  {
    std::lock_guard lock(core->mutex());
    core->get_data(core->generation_locked(), node, [reply](zk_errc rc, std::string data, detail::NodeStat) {
      reply->set_value({rc, std::move(data)});
    });
  }
  if (future.wait_for(wait) != std::future_status::ready)
    throw Error(make_error_code(errc::timed_out), "read semaphore limit of", node);
  auto [rc, data] = future.get();
  if (rc == zk_errc::no_node) return std::nullopt;
  if (rc != zk_errc::ok) throw Error(make_error_code(rc), "read semaphore limit of", node);
  return parse_limit(data);
}

}  // namespace zkr
