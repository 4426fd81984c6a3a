// The semaphore: the contender queue with max_holders = N, and the limit recorded on the path.
#include <zkr/semaphore.hpp>

#include <charconv>
#include <future>
#include <mutex>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "internals.hpp"
#include "contender_queue.hpp"
#include "request_limits.hpp"

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

// The refusal detail of one acquisition, written by the queue's parent check (under the session
// mutex) and read after the outcome.
struct MismatchDetail {
  std::mutex mutex;
  std::string text;
};

}  // namespace

Semaphore::Semaphore(Session& session, std::string path, int max_leases, SemaphoreOptions options)
    : core_(detail::Internals::core(session)), path_(std::move(path)), max_leases_(max_leases), options_(std::move(options)) {
  if (auto problem = path_problem(path_); !problem.empty())
    throw Error(make_error_code(errc::invalid_path), "semaphore path", path_, problem);
  if (max_leases_ < 1)
    throw Error(make_error_code(errc::invalid_argument), "semaphore path", path_,
                fmt::format("max_leases must be at least 1, not {}", max_leases_));
  if (options_.owner_data.empty()) options_.owner_data = default_owner_data();
  if (auto problem = detail::request_size_problem(path_.size(), options_.owner_data.size()); !problem.empty())
    throw Error(make_error_code(errc::invalid_argument), "semaphore path", path_, "owner_data: " + problem);
}

Semaphore::~Semaphore() = default;

namespace {

detail::ContenderRequest make_request(const std::string& path, int max_leases, const SemaphoreOptions& options,
                                      std::chrono::nanoseconds timeout, std::shared_ptr<MismatchDetail> detail) {
  detail::ContenderRequest request;
  request.parent = path;
  request.policy = {ContenderRole::exclusive, max_leases};
  request.owner_data = options.owner_data;
  request.acl = options.acl;
  request.timeout = timeout;
  request.parent_data = limit_record(max_leases);
  request.check_parent = [max_leases, detail = std::move(detail)](const std::string& data) -> std::error_code {
    const auto recorded = parse_limit(data);
    if (recorded == max_leases) return {};
    std::lock_guard lock(detail->mutex);
    detail->text = recorded ? fmt::format("the path records max_leases={}, this participant asks for {}", *recorded,
                                          max_leases)
                            : fmt::format("the path node holds no lease limit (data '{}'); expected '{}'",
                                          data.substr(0, 64), limit_record(max_leases));
    return make_error_code(errc::limit_mismatch);
  };
  return request;
}

std::string detail_of(const std::shared_ptr<MismatchDetail>& detail) {
  std::lock_guard lock(detail->mutex);
  return detail->text;
}

}  // namespace

std::optional<Lease> Semaphore::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop,
                                                std::error_code& ec) noexcept {
  try {
    auto [result, contender] = detail::await_contender(
        core_,
        make_request(path_, max_leases_, options_, std::max(timeout, std::chrono::nanoseconds::zero()),
                     std::make_shared<MismatchDetail>()),
        std::move(stop));
    ec = result;
    if (ec) return std::nullopt;
    return Lease(detail::Internals::key(), std::move(contender));
  } catch (const std::system_error& e) {
    ec = e.code();
  } catch (const std::bad_alloc&) {
    ec = std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    ec = make_error_code(errc::internal_error);
  }
  return std::nullopt;
}

std::optional<Lease> Semaphore::try_acquire_for(std::chrono::nanoseconds timeout, std::stop_token stop) {
  auto detail = std::make_shared<MismatchDetail>();
  auto [result, contender] = detail::await_contender(
      core_, make_request(path_, max_leases_, options_, std::max(timeout, std::chrono::nanoseconds::zero()), detail),
      std::move(stop));
  if (result && result != condition::gave_up) throw Error(result, "acquire semaphore", path_, detail_of(detail));
  if (result) return std::nullopt;
  return Lease(detail::Internals::key(), std::move(contender));
}

std::optional<Lease> Semaphore::try_acquire() { return try_acquire_for(std::chrono::nanoseconds::zero()); }

Lease Semaphore::acquire(std::stop_token stop) {
  auto detail = std::make_shared<MismatchDetail>();
  auto [result, contender] = detail::await_contender(
      core_, make_request(path_, max_leases_, options_, std::chrono::nanoseconds(-1), detail), std::move(stop));
  if (result) throw Error(result, "acquire semaphore", path_, detail_of(detail));
  return Lease(detail::Internals::key(), std::move(contender));
}

void Semaphore::async_acquire(std::chrono::nanoseconds timeout, AcquireHandler handler, std::stop_token stop) {
  detail::start_contender_async(
      core_, make_request(path_, max_leases_, options_, timeout, std::make_shared<MismatchDetail>()),
      [handler = std::move(handler)](std::error_code ec, const std::shared_ptr<detail::Contender>& contender) {
        handler(ec, ec ? Lease{} : Lease(detail::Internals::key(), contender));
      },
      std::move(stop));
}

std::vector<ContenderInfo> Semaphore::contenders() const {
  return detail::list_contenders(core_, path_, max_leases_);
}

std::optional<int> Semaphore::recorded_limit(Session& session, std::string_view path) {
  const std::string node(path);
  if (auto problem = path_problem(node); !problem.empty())
    throw Error(make_error_code(errc::invalid_path), "read semaphore limit of", node, problem);
  const auto& core = detail::Internals::core(session);
  const auto wait = core->options().connect_timeout;
  if (!core->wait_connected(wait))
    throw Error(make_error_code(core->ended() ? errc::session_closed : errc::connect_timeout),
                "read semaphore limit of", node);
  auto reply = std::make_shared<std::promise<std::pair<int, std::string>>>();
  auto future = reply->get_future();
  {
    std::lock_guard lock(core->mutex());
    core->get_data(core->generation_locked(), node, [reply](int rc, std::string data, detail::NodeStat) {
      reply->set_value({rc, std::move(data)});
    });
  }
  if (future.wait_for(wait) != std::future_status::ready)
    throw Error(make_error_code(errc::timed_out), "read semaphore limit of", node);
  auto [rc, data] = future.get();
  if (rc == static_cast<int>(zk_errc::no_node)) return std::nullopt;
  if (rc != 0) throw Error(zookeeper_error(rc), "read semaphore limit of", node);
  return parse_limit(data);
}

}  // namespace zkr
