// SPDX-License-Identifier: Apache-2.0
// A library participant in Curator's and kazoo's semaphore protocols (layouts read from their
// sources; see docs/recipes.md, "Semaphores shared with Curator and kazoo"). Both peers run the
// same protocol over different paths and names:
//   1. take the peer's internal lock (a mutex on its own path);
//   2. holding it, list the lease nodes with a children watch, and wait until fewer than N exist;
//   3. create our lease node (ephemeral); it is the lease, its czxid the token;
//   4. release the internal lock.
// Every lease node is created by a holder of the internal lock after it counted fewer than N, so
// at most N exist as long as every participant uses the same N and nobody deletes an internal
// lock node by hand. Curator creates its lease before counting and counts "at most N" with it;
// under the internal lock the two orders are the same. The internal lock is a contender of the
// queue, the lease another one that holds as soon as its node exists (held_once_created): their
// tokens, loss signals, retried deletes and GUID recovery are the queue's.
#include "peer_semaphore.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <future>
#include <mutex>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>

#include "contender_queue.hpp"

namespace zkr::detail {
namespace {

// After a listing failed with a dropped connection: look again this much later (the internal lock
// tells of a lost session; a listing on a dead session fails at once).
constexpr auto kRelistDelay = std::chrono::milliseconds(100);

// kazoo's record of the limit: the path's data as a decimal integer (Python's int(), which allows
// surrounding blanks and a sign). Anything else kazoo ignores.
std::optional<int> kazoo_limit_of(std::string_view data) {
  while (!data.empty() && std::isspace(static_cast<unsigned char>(data.front()))) data.remove_prefix(1);
  while (!data.empty() && std::isspace(static_cast<unsigned char>(data.back()))) data.remove_suffix(1);
  if (data.starts_with('+')) data.remove_prefix(1);
  int value = 0;
  auto [end, ec] = std::from_chars(data.data(), data.data() + data.size(), value);
  if (data.empty() || ec != std::errc() || end != data.data() + data.size()) return std::nullopt;
  return value;
}

std::function<std::error_code(const std::string&)> kazoo_limit_check(int max_leases,
                                                                     std::shared_ptr<RefusalDetail> refusal) {
  return [max_leases, refusal = std::move(refusal)](const std::string& data) -> std::error_code {
    if (const auto recorded = kazoo_limit_of(data)) {
      if (*recorded == max_leases) return {};
      refusal->set(fmt::format("the path records max_leases {} (kazoo's layout), this participant asks for {}",
                               *recorded, max_leases));
      return make_error_code(errc::limit_mismatch);
    }
    if (semaphore_limit_of(data)) {
      refusal->set(fmt::format("the path is a semaphore of zkrecipes' own layout (data '{}'), not kazoo's",
                               data.substr(0, 64)));
      return make_error_code(errc::limit_mismatch);
    }
    return {};  // as kazoo: other data (none yet, or the path's own use) records no limit
  };
}


// Gives up on a contender of ours: a waiting one is cancelled (its node deleted), a granted one
// released. Locks the session mutex.
void drop(const std::shared_ptr<Contender>& contender, std::error_code why) {
  if (contender && !contender->cancel(why)) contender->release();
}

class PeerLeaseAcquisition : public std::enable_shared_from_this<PeerLeaseAcquisition> {
 public:
  PeerLeaseAcquisition(std::shared_ptr<SessionCore> core, PeerLeaseRequest request, Acquisition::Done done)
      : core_(std::move(core)),
        request_(std::move(request)),
        paths_(peer_layout_paths(request_.layout, request_.path)),
        counted_(*core_, request_.path, true),
        done_(std::move(done)) {}

  void start(std::stop_token stop) {
    {
      std::lock_guard lock(mutex_);
      anchor_ = shared_from_this();  // alive until the outcome, whoever else lets go
      arm_deadline_locked();
      take_internal_lock_locked();
    }
    if (!stop.stop_possible()) return;
    auto callback = std::make_unique<CancelOnStop>(stop, [self = weak_from_this()] {
      if (auto acquisition = self.lock()) acquisition->give_up(make_error_code(errc::cancelled));
    });
    std::unique_lock lock(mutex_);
    if (completed_) {
      lock.unlock();
      return;  // the callback goes here, outside the lock
    }
    stop_callback_ = std::move(callback);
  }

 private:
  using CancelOnStop = std::stop_callback<std::function<void()>>;

  bool kazoo() const { return request_.layout == SemaphoreLayout::kazoo; }

  ContenderRequest contender_request(std::string parent) const {
    ContenderRequest contender;
    contender.parent = std::move(parent);
    contender.policy = {ContenderRole::exclusive, 1};
    contender.owner_data = request_.owner_data;
    contender.acl = request_.acl;
    contender.kazoo_naming = kazoo();
    if (kazoo()) contender.parent_mode = CreateMode::persistent;  // kazoo's ensure_path
    return contender;
  }

  // Step 1: the peer's internal lock, named as the peer names it ("_c_<uuid>-lock-" for Curator's
  // InterProcessMutex, "<32 hex>__lock__" for kazoo's Lock, which sees no other names).
  void take_internal_lock_locked() {
    ++listing_;
    auto request = contender_request(paths_.internal_lock);
    if (kazoo()) request.marker = "__lock__";
    request.counted = AcquisitionCount();  // a step of our acquisition, which counted_ counts
    // The deadline is ours (it covers all the steps), except that a try does not wait at all.
    request.timeout = request_.timeout == std::chrono::nanoseconds::zero() ? request_.timeout
                                                                            : std::chrono::nanoseconds(-1);
    request.on_done = [self = weak_from_this()](std::error_code ec, const std::shared_ptr<Contender>& contender) {
      if (auto acquisition = self.lock()) acquisition->on_internal_lock(ec, contender);
    };
    internal_lock_ = Contender::start(core_, std::move(request));
  }

  void on_internal_lock(std::error_code ec, const std::shared_ptr<Contender>& contender) {
    std::lock_guard lock(mutex_);
    if (completed_ || contender != internal_lock_) return;  // given up: dropped already
    if (ec) return finish_locked(ec, nullptr);
    generation_ = contender->generation();
    contender->on_lost([self = weak_from_this(), weak = std::weak_ptr<Contender>(contender)](LossReason) {
      if (auto acquisition = self.lock()) acquisition->on_internal_lock_lost(weak.lock());
    });
    count_leases_locked();
  }

  // The internal lock went with its session (or was deleted): whatever we counted is void. Start
  // over on the next session, as the lock's acquire() does; a try reports the loss.
  void on_internal_lock_lost(const std::shared_ptr<Contender>& contender) {
    std::lock_guard lock(mutex_);
    if (completed_ || contender != internal_lock_) return;
    start_over_locked();
  }

  void start_over_locked() {
    // The lease was granted already (its outcome is on its way here): it is the outcome.
    if (counted_.granted()) return finish_locked({}, lease_);
    drop(internal_lock_, make_error_code(errc::session_lost));
    drop(lease_, make_error_code(errc::session_lost));
    lease_.reset();
    if (request_.timeout == std::chrono::nanoseconds::zero())
      return finish_locked(make_error_code(errc::session_lost), nullptr);
    take_internal_lock_locked();
  }

  // Step 2: count the leases, with a children watch. Only the internal lock's holder waits here,
  // so a release wakes one waiter.
  void count_leases_locked() {
    const std::uint64_t listing = ++listing_;
    auto self = weak_from_this();
    std::lock_guard core_lock(core_->mutex());
    core_->get_children(
        generation_, paths_.leases,
        [self, listing](zk_errc rc, std::vector<std::string> children, NodeStat) {
          if (auto acquisition = self.lock()) acquisition->on_leases(listing, rc, children.size());
        },
        [self, listing](NodeEvent) {
          auto acquisition = self.lock();
          if (!acquisition) return;
          ++acquisition->core_->wakeups;
          std::lock_guard lock(acquisition->mutex_);
          if (!acquisition->completed_ && listing == acquisition->listing_) acquisition->count_leases_locked();
        });
  }

  void on_leases(std::uint64_t listing, zk_errc rc, std::size_t leases) {
    std::lock_guard lock(mutex_);
    if (completed_ || listing != listing_) return;
    if (rc == zk_errc::ok || rc == zk_errc::no_node) {
      // No lease parent yet: no lease (the lease's create makes the parent).
      if (rc == zk_errc::no_node) leases = 0;
      if (leases < static_cast<std::size_t>(request_.max_leases)) return create_lease_locked();
      if (request_.timeout == std::chrono::nanoseconds::zero())
        return finish_locked(make_error_code(errc::would_block), nullptr);
      return;  // the watch looks again
    }
    if (is_connection_trouble(rc)) return relist_later_locked(listing);
    if (make_error_code(rc) == condition::session_ended) return;  // the internal lock's loss starts over
    finish_locked(make_error_code(rc), nullptr);
  }

  void relist_later_locked(std::uint64_t listing) {
    if (!relist_timer_) relist_timer_ = std::make_unique<boost::asio::steady_timer>(core_->worker());
    boost::asio::post(core_->worker(), [self = weak_from_this(), listing] {
      auto acquisition = self.lock();
      if (!acquisition) return;
      std::lock_guard lock(acquisition->mutex_);
      if (acquisition->completed_ || listing != acquisition->listing_) return;
      acquisition->relist_timer_->expires_after(kRelistDelay);
      acquisition->relist_timer_->async_wait([self, listing](boost::system::error_code ec) {
        auto again = self.lock();
        if (ec || !again) return;
        std::lock_guard inner(again->mutex_);
        if (!again->completed_ && listing == again->listing_) again->count_leases_locked();
      });
    });
  }

  // Step 3: our lease node: Curator's "<path>/leases/_c_<uuid>-lease-<seq>", kazoo's
  // "<path>/<32 hex>" (not sequential), on the internal lock's session only.
  void create_lease_locked() {
    ++listing_;  // the count is done: its watch is stale from now on
    auto request = contender_request(paths_.leases);
    request.held_once_created = true;
    request.only_generation = generation_;
    request.counted = counted_.grant_part();  // its grant decides the outcome, unless decided before
    if (kazoo()) {
      request.marker = "";
      request.sequential = false;
      request.parent_data = std::to_string(request_.max_leases);
      request.check_parent = kazoo_limit_check(request_.max_leases, request_.refusal);
    } else {
      request.marker = "lease-";
    }
    request.on_done = [self = weak_from_this()](std::error_code ec, const std::shared_ptr<Contender>& contender) {
      if (auto acquisition = self.lock()) acquisition->on_lease(ec, contender);
    };
    lease_ = Contender::start(core_, std::move(request));
  }

  void on_lease(std::error_code ec, const std::shared_ptr<Contender>& contender) {
    std::lock_guard lock(mutex_);
    if (completed_ || contender != lease_) return;
    if (ec == errc::session_lost) return start_over_locked();
    finish_locked(ec, ec ? nullptr : contender);  // step 4: finish releases the internal lock
  }

  void give_up(std::error_code why) {
    std::lock_guard lock(mutex_);
    if (!completed_) finish_locked(why, nullptr);
  }

  // The acquisition's outcome: the first of the lease's grant (decided by the lease, see
  // create_lease_locked) and anything else (a timeout, a cancel, a failure) that ends it. A grant
  // decided first is the outcome even when the timeout's or the cancel's call gets here first; a
  // grant decided too late is released below, with the lease that was not given.
  void finish_locked(std::error_code outcome, std::shared_ptr<Contender> lease) {
    completed_ = true;
    if (!counted_.decide(outcome) && counted_.granted()) {
      outcome = {};
      lease = lease_;
    }
    ++listing_;
    drop(internal_lock_, outcome ? outcome : make_error_code(errc::cancelled));
    if (!lease) drop(lease_, outcome);
    internal_lock_.reset();
    lease_.reset();
    // Weak: on a closed session the worker has stopped and this never runs; kept there, a strong
    // reference would hold the acquisition, and through it the session, for ever. An acquisition
    // that is gone took its timers with it.
    boost::asio::post(core_->worker(), [self = weak_from_this()] {
      auto acquisition = self.lock();
      if (!acquisition) return;
      std::lock_guard lock(acquisition->mutex_);
      if (acquisition->deadline_timer_) acquisition->deadline_timer_->cancel();
      if (acquisition->relist_timer_) acquisition->relist_timer_->cancel();
    });
    // The stop callback is destroyed off this lock (its destructor waits for a running callback,
    // which takes this lock) and before the outcome is told.
    core_->post_callback([done = std::move(done_), outcome, lease = std::move(lease),
                          stop_callback = std::shared_ptr<CancelOnStop>(std::move(stop_callback_)),
                          anchor = std::move(anchor_)]() mutable {
      stop_callback.reset();
      done(outcome, lease);
    });
  }

  void arm_deadline_locked() {
    if (request_.timeout <= std::chrono::nanoseconds::zero()) return;
    deadline_timer_ = std::make_unique<boost::asio::steady_timer>(core_->worker());
    boost::asio::post(core_->worker(), [self = weak_from_this(), timeout = request_.timeout] {
      auto acquisition = self.lock();
      if (!acquisition) return;
      acquisition->deadline_timer_->expires_after(timeout);
      acquisition->deadline_timer_->async_wait([self](boost::system::error_code ec) {
        if (ec) return;
        if (auto again = self.lock()) again->give_up(make_error_code(errc::timed_out));
      });
    });
  }

  const std::shared_ptr<SessionCore> core_;
  const PeerLeaseRequest request_;
  const PeerLayoutPaths paths_;
  // The metrics count one acquisition of the semaphore, under its path: asked here, decided once,
  // by the lease's grant or by finish_locked, whichever comes first; the hold is counted by the
  // lease (see acquisition_count.hpp).
  const AcquisitionCount counted_;

  // Everything below is guarded by mutex_, which is taken before the session mutex, never after.
  // Replies, watches and the contenders' outcomes reach us without the session mutex held.
  std::mutex mutex_;
  Acquisition::Done done_;
  std::shared_ptr<PeerLeaseAcquisition> anchor_;
  bool completed_ = false;
  std::shared_ptr<Contender> internal_lock_;
  std::shared_ptr<Contender> lease_;
  std::uint64_t generation_ = 0;  // the internal lock's session
  std::uint64_t listing_ = 0;     // bumps with every step: older replies and watches are stale
  std::unique_ptr<CancelOnStop> stop_callback_;
  // Timers: made once, used only on the worker thread.
  std::unique_ptr<boost::asio::steady_timer> deadline_timer_;
  std::unique_ptr<boost::asio::steady_timer> relist_timer_;
};

}  // namespace

PeerLayoutPaths peer_layout_paths(SemaphoreLayout layout, const std::string& path) {
  if (layout == SemaphoreLayout::kazoo) return {path + "-__lock__", path};
  return {path + "/locks", path + "/leases"};
}

std::vector<ContenderInfo> list_peer_semaphore(const std::shared_ptr<SessionCore>& core, SemaphoreLayout layout,
                                               const std::string& path) {
  const auto paths = peer_layout_paths(layout, path);
  const auto wait = core->options().connect_timeout;
  if (!core->wait_connected(wait))
    throw Error(make_error_code(core->ended() ? errc::session_closed : errc::connect_timeout), "list leases of", path);
  struct Leases {
    std::mutex mutex;
    std::promise<std::error_code> done;
    std::vector<ContenderInfo> rows;
    std::size_t outstanding = 0;
  };
  auto leases = std::make_shared<Leases>();
  auto future = leases->done.get_future();
  {
    std::lock_guard lock(core->mutex());
    const std::uint64_t generation = core->generation_locked();
    std::weak_ptr<SessionCore> weak_core = core;
    core->get_children(generation, paths.leases, [=](zk_errc rc, std::vector<std::string> children, NodeStat) {
      if (rc == zk_errc::no_node || (rc == zk_errc::ok && children.empty())) return leases->done.set_value({});
      if (rc != zk_errc::ok) return leases->done.set_value(make_error_code(rc));
      auto session = weak_core.lock();
      if (!session) return leases->done.set_value(make_error_code(errc::session_closed));
      leases->outstanding = children.size();
      std::lock_guard session_lock(session->mutex());
      for (const auto& child : children) {
        session->get_data(generation, paths.leases + "/" + child, [leases, child](zk_errc data_rc, std::string data, NodeStat stat) {
          std::lock_guard guard(leases->mutex);
          if (data_rc == zk_errc::ok) {  // a lease released since the listing is simply gone
            ContenderInfo row;
            row.node = child;
            row.token = FencingToken(stat.czxid);
            row.session_id = stat.ephemeral_owner;
            row.owner_data = std::move(data);
            row.created = std::chrono::system_clock::time_point(std::chrono::milliseconds(stat.ctime_ms));
            row.holds = true;
            leases->rows.push_back(std::move(row));
          }
          if (--leases->outstanding == 0) leases->done.set_value({});
        });
      }
    });
  }
  if (future.wait_for(wait) != std::future_status::ready) throw Error(make_error_code(errc::timed_out), "list leases of", path);
  if (auto ec = future.get()) throw Error(ec, "list leases of", path);
  std::lock_guard guard(leases->mutex);
  auto rows = std::move(leases->rows);
  std::sort(rows.begin(), rows.end(), [](const ContenderInfo& a, const ContenderInfo& b) { return a.token < b.token; });
  // The internal lock's queue waits for a lease; its first node is counting (or creating its lease).
  for (auto& waiter : list_contenders(core, paths.internal_lock, 1)) {
    waiter.holds = false;
    rows.push_back(std::move(waiter));
  }
  return rows;
}

void start_peer_lease(const std::shared_ptr<SessionCore>& core, PeerLeaseRequest request, Acquisition::Done done,
                      std::stop_token stop) {
  std::make_shared<PeerLeaseAcquisition>(core, std::move(request), std::move(done))->start(std::move(stop));
}

}  // namespace zkr::detail
