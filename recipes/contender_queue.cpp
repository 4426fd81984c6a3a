// SPDX-License-Identifier: Apache-2.0
#include "contender_queue.hpp"

#include <algorithm>
#include <mutex>

#include <boost/asio/post.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>

#include "guid.hpp"
#include "log.hpp"
#include "state_check.hpp"

namespace zkr::detail {
namespace {

// The adapter's result codes, read through the library's conditions (zkr/error.hpp).
// A container parent that the server reaps between our parent create and our node create sends
// us round again; this bounds how often before giving up.
constexpr int kMaxParentRetries = 20;
// A request the server refuses by dropping the connection (one larger than its jute.maxbuffer,
// say) would be resent after every reconnect, and the session would flap until declared lost,
// taking every other recipe on it down. An acquisition whose requests met this many dropped
// connections in a row, with no reply in between, gives up instead.
constexpr int kMaxDropsInARow = 10;
// How long after a grant the holder starts watching its own node (see schedule_own_node_watch_locked).
constexpr auto kOwnNodeWatchDelay = std::chrono::milliseconds(50);

// The acquisitions an open AcquisitionBatch takes in: the batchable ones (ContenderRequest::batchable)
// started without waiting (a blocking one on the batch's thread would wait for a send only its own
// return can make).
bool joins_batches(const ContenderRequest& request) { return request.batchable && !request.on_done_inline; }

}  // namespace

namespace {
std::string_view to_string(Contender::Phase phase) {
  using P = Contender::Phase;
  switch (phase) {
    case P::waiting_for_session: return "waiting_for_session";
    case P::creating: return "creating";
    case P::recovering: return "recovering";
    case P::checking: return "checking";
    case P::watching: return "watching";
    case P::held: return "held";
    case P::releasing: return "releasing";
    case P::lost: return "lost";
    case P::finished: return "finished";
  }
  return "unknown";
}

// A contender's phases and the only ways between them. Waiting phases move among themselves; only
// a contender that has listed or watched is granted; a holder ends lost or releasing; nothing
// leaves finished.
bool phase_transition_allowed(Contender::Phase from, Contender::Phase to) {
  using P = Contender::Phase;
  if (from == to) return from != P::finished;
  switch (from) {
    case P::waiting_for_session:
    case P::creating:
    case P::recovering:
    case P::checking:
    case P::watching:
      if (to == P::held) return from == P::checking || from == P::watching;
      return to != P::lost;
    case P::held: return to == P::lost || to == P::releasing || to == P::finished;
    case P::releasing:
    case P::lost: return to == P::finished;
    case P::finished: return false;
  }
  return false;
}
}  // namespace

void Contender::set_phase_locked(Phase next) {
  if (kStateChecks && !phase_transition_allowed(phase_, next))
    state_check_failed("contender phase", to_string(phase_), to_string(next));
  if (phase_ == Phase::held && next != Phase::held) {
    // Every way out of held (released, lost) ends the hold here, once.
    const auto hold = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - granted_at_);
    counted_.hold_ended(hold);
  }
  // The start window's slot is given back once the first answers are in: when the contender waits
  // on a watch, holds, or ends. Every contender ends in `finished` (finish_locked), so no slot is
  // kept by one that is gone.
  const bool starting = next == Phase::waiting_for_session || next == Phase::creating ||
                        next == Phase::recovering || next == Phase::checking;
  if (start_slot_ && !starting) {
    start_slot_ = false;
    core_->release_start_slot_locked();
  }
  phase_ = next;
}

Contender::Contender(StartKey, std::shared_ptr<SessionCore> core, ContenderRequest request)
    : core_(std::move(core)),
      acquiring_(std::make_unique<Acquiring>(std::move(request))),
      start_slot_(acquiring_->request.holds_start_slot) {}

Contender::Acquiring& Contender::acquiring() const {
  if (kStateChecks && !acquiring_) state_check_failed("contender phase", to_string(phase_), "acquisition step");
  return *acquiring_;
}

Contender::~Contender() {
  if (!completed_) counted_.abandoned();  // never decided, and no longer waiting
  // A slot kept by a contender that is gone would shrink the session's start window for good.
  if (kStateChecks && start_slot_) state_check_failed("start window slot", to_string(phase_), "destroyed");
}

std::shared_ptr<Contender> Contender::start(std::shared_ptr<SessionCore> core, ContenderRequest request) {
  // One allocation for the contender and its reference counts.
  auto contender = std::make_shared<Contender>(StartKey(), std::move(core), std::move(request));
  const ContenderRequest& asked = contender->request();
  contender->counted_ = asked.counted ? *asked.counted : AcquisitionCount(*contender->core_, asked.parent);
  std::unique_lock lock(contender->core_->mutex());
  if (contender->core_->ended()) {
    contender->set_phase_locked(Phase::finished);
    contender->complete_locked(contender->core_->end_reason_locked());
    return contender;
  }
  // A try that does not wait lives on the session it starts on: it never waits for a replacement
  // (errc::session_lost), not even when the session is lost with its create unanswered.
  if (asked.timeout == std::chrono::nanoseconds::zero() && asked.only_generation == 0)
    contender->request().only_generation = contender->core_->generation_locked();
  // The session keeps every active contender alive until it finishes (finish_locked detaches).
  contender->core_->attach(contender);
  contender->arm_timeout();
  contender->begin_locked();
  return contender;
}

std::shared_ptr<Hold> Contender::spare_hold(const std::shared_ptr<Contender>& self) {
  if (self->spare_hold_taken_.exchange(true)) return nullptr;
  return std::shared_ptr<Hold>(self, &self->spare_hold_);
}

LogContext Contender::log_context_locked() const {
  // A holder no longer has its request: its node's path names the recipe's path too.
  const std::string_view path = acquiring_ ? std::string_view(acquiring_->request.parent)
                                           : std::string_view(node_path_).substr(0, node_path_.rfind('/'));
  return {.session_id = session_id_ != 0 ? session_id_ : core_->session_id(), .path = path, .node = node_path_};
}

std::string Contender::our_name() const {
  auto slash = node_path_.rfind('/');
  return slash == std::string::npos ? node_path_ : node_path_.substr(slash + 1);
}

// ---- creating ----

void Contender::begin_locked() {
  if (abandon_) {
    finish_locked();
    return;
  }
  generation_ = core_->generation_locked();
  if (request().only_generation != 0 && generation_ != request().only_generation) {
    complete_locked(make_error_code(errc::session_lost));
    finish_locked();
    return;
  }
  if (!core_->usable_locked(generation_)) {
    if (request().timeout == std::chrono::nanoseconds::zero()) {
      // A non-blocking attempt never waits for a session to come back.
      complete_locked(core_->state() == SessionState::lost ? make_error_code(errc::session_lost)
                                                           : make_error_code(zk_errc::connection_loss));
      finish_locked();
      return;
    }
    set_phase_locked(Phase::waiting_for_session);
    return;
  }
  set_phase_locked(Phase::creating);
  retry_ = Retry::none;
  node_path_.clear();
  own_watch_ = OwnWatch::none;
  path_watch_live_ = false;
  Acquiring& acquiring = this->acquiring();
  const ContenderRequest& request = acquiring.request;
  acquiring.touches_seen.clear();
  first_waiter_touch_sent_ = false;
  blocker_watch_live_ = false;
  std::string& guid = acquiring.guid;
  guid = new_guid();  // a fresh GUID per attempt: a late node of an earlier attempt is never mistaken for this one
  const std::uint64_t attempt = ++attempt_;
  const std::string_view marker = request.marker ? std::string_view(*request.marker) : node_marker(request.policy.role);
  std::string prefix;
  if (request.kazoo_naming) {
    std::erase(guid, '-');  // kazoo's uuid4().hex
    prefix = fmt::format("{}/{}{}", request.parent, guid, marker);
  } else {
    prefix = fmt::format("{}/_c_{}-{}", request.parent, guid, marker);
  }
  std::weak_ptr<Contender> self = weak_from_this();
  auto on_created = [self, attempt](zk_errc rc, std::string path, NodeStat stat) {
    if (auto contender = self.lock()) contender->on_created(attempt, rc, std::move(path), stat);
  };
  const bool batched = joins_batches(request) && core_->batch_open_here_locked();
  if (batched)
    core_->create_in_batch_locked(generation_, request.parent, std::move(prefix), request.owner_data, request.acl,
                                  std::move(on_created));
  else
    core_->create(generation_, prefix, request.owner_data,
                  request.sequential ? CreateMode::ephemeral_sequential : CreateMode::ephemeral, request.acl,
                  std::move(on_created));
  // A recipe that records data in its parent (a semaphore's limit) reads it in this pipeline. The
  // others expect a parent without data, which the listing's Stat of the parent shows without a
  // request of its own (see on_children); one with data is read then.
  parent_verified_ = !request.check_parent;
  acquiring.parent_problem.clear();
  if (!parent_verified_ && !request.parent_data.empty()) verify_parent_locked(attempt);
  // The server answers one session's requests in order, so this listing, sent before the create's
  // reply arrives, already contains our node: one round trip for an uncontended acquisition.
  // A one-holder recipe's listing also watches the path's children (see path_watch_live_): it
  // vouches for our node until the path changes, in place of a read of our own node.
  const bool watched = listings_watch_path();
  auto on_children = [self, attempt, watched](zk_errc rc, std::vector<std::string> children, NodeStat parent) {
    if (auto contender = self.lock()) contender->on_children(attempt, rc, std::move(children), parent, watched);
  };
  if (batched)
    core_->get_children_in_batch_locked(generation_, request.parent, std::move(on_children), path_watch());
  else
    core_->get_children(generation_, request.parent, std::move(on_children), watched ? path_watch() : NodeWatch());
}

bool Contender::listings_watch_path() const {
  return !request().policy.promotes_without_deleting() && !request().held_once_created;
}

NodeWatch Contender::path_watch() {
  return [self = weak_from_this()](NodeEvent) {
    auto contender = self.lock();
    if (!contender) return;
    std::unique_lock lock(contender->core_->mutex());
    contender->on_path_changed_locked();
  };
}

// Whether our node is known to stand from the listing that decided our wait until now: the
// children watch that listing set has not fired (no child came or went since, ours included), or
// the watch on our own node is set (its reply found the node after that listing; a deletion since
// would have reached us first, one connection delivering in order).
bool Contender::own_node_vouched_for_locked() const { return path_watch_live_ || own_watch_ == OwnWatch::set; }

void Contender::ensure_parent_then_create_locked() {
  if (++acquiring().parent_retries > kMaxParentRetries) {
    complete_locked(make_error_code(zk_errc::no_node));
    finish_locked();
    return;
  }
  // Create every ancestor as a container (the server removes it once empty), in one pipeline; the
  // server runs them in order, so the last reply means all are settled.
  const ContenderRequest& request = this->request();
  std::vector<std::string> ancestors;
  for (std::size_t slash = request.parent.find('/', 1); slash != std::string::npos;
       slash = request.parent.find('/', slash + 1))
    ancestors.push_back(request.parent.substr(0, slash));
  ancestors.push_back(request.parent);
  const std::uint64_t attempt = ++attempt_;
  std::weak_ptr<Contender> self = weak_from_this();
  // The topmost ancestor's parent is the root, which always exists, unless the connect string
  // names a chroot that does not: then no create can ever succeed.
  auto chroot_missing = std::make_shared<bool>(false);
  for (std::size_t i = 0; i < ancestors.size(); ++i) {
    const bool first = i == 0, last = i + 1 == ancestors.size();
    // Only the recipe's own node takes its ACL: ancestors may be shared with other recipes and
    // other identities, so they are created open.
    core_->create(generation_, ancestors[i], last ? request.parent_data : std::string(),
                  last ? request.parent_mode : CreateMode::container,
                  last ? request.acl : NodeAcl::open,
                  [self, attempt, first, last, chroot_missing](zk_errc rc, std::string, NodeStat) {
                    if (first && rc == zk_errc::no_node) *chroot_missing = true;
                    if (!last) return;
                    auto contender = self.lock();
                    if (!contender) return;
                    std::unique_lock lock(contender->core_->mutex());
                    if (attempt != contender->attempt_ || contender->phase_ != Phase::creating) return;
                    if (*chroot_missing) {
                      contender->complete_locked(make_error_code(errc::missing_chroot));
                      contender->finish_locked();
                    } else if (rc == zk_errc::ok || rc == zk_errc::node_exists || rc == zk_errc::no_node) {
                      contender->begin_locked();
                    } else if (!contender->handle_session_trouble_locked(rc, Retry::recover)) {
                      contender->complete_locked(make_error_code(rc));
                      contender->finish_locked();
                    }
                  });
  }
}

void Contender::on_created(std::uint64_t attempt, zk_errc rc, std::string path, NodeStat stat) {
  std::unique_lock lock(core_->mutex());
  if (attempt != attempt_ || phase_ != Phase::creating) {
    // A create we no longer track that still took effect (its session is current): delete it.
    if (rc == zk_errc::ok && core_->usable_locked(generation_) && path != node_path_)
      core_->remove(generation_, path, -1, [](zk_errc) {});
    return;
  }
  if (abandon_ && rc != zk_errc::ok && !is_connection_trouble(rc)) {
    finish_locked();  // nothing was created and nothing is wanted any more
    return;
  }
  if (rc == zk_errc::ok) {
    node_path_ = std::move(path);
    token_ = FencingToken(stat.czxid);
    session_id_ = core_->session_id();
    if (abandon_) remove_node_locked();
    return;  // the pipelined listing decides
  }
  if (rc == zk_errc::runtime_inconsistency) {
    // A batched create, rolled back with its multi-op for another op's sake: nothing was created.
    begin_locked();
    return;
  }
  if (rc == zk_errc::no_node) {
    ensure_parent_then_create_locked();
    return;
  }
  if (handle_session_trouble_locked(rc, Retry::recover)) return;
  complete_locked(make_error_code(rc));  // no node was created (no auth, invalid ACL, ...)
  finish_locked();
}

void Contender::on_children(std::uint64_t attempt, zk_errc rc, std::vector<std::string> children, NodeStat parent,
                            bool listing_watches_path) {
  std::unique_lock lock(core_->mutex());
  if (attempt != attempt_ || (phase_ != Phase::creating && phase_ != Phase::checking)) return;
  if (node_path_.empty()) return;  // the create failed; on_created decided what happens
  if (rc == zk_errc::ok && listing_watches_path) path_watch_live_ = true;  // registered with this reply
  set_phase_locked(Phase::checking);
  if (rc == zk_errc::ok) drops_in_a_row_ = 0;
  if (rc == zk_errc::ok && !parent_verified_ && parent.data_length == 0) {
    // Read after our node exists, like the data a getData would bring: none, so check that.
    parent_verified_ = true;
    acquiring().parent_problem = request().check_parent(std::string());
  }
  if (rc == zk_errc::ok && acquiring().parent_problem) {
    complete_locked(acquiring().parent_problem);
    remove_node_locked();
  } else if (rc == zk_errc::ok && !parent_verified_) {
    check_locked();  // the parent has data (or its read failed for a while): read it, and list again
  } else if (rc == zk_errc::ok) {
    evaluate_locked(children);
  } else if (rc == zk_errc::no_node) {
    begin_locked();  // the parent, and so our node, is gone: queue again
  } else if (!handle_session_trouble_locked(rc, Retry::check)) {
    complete_locked(make_error_code(rc));
    remove_node_locked();
  }
}

// After a connection loss the create may or may not have happened: look for our GUID. The server
// we are now connected to may lag behind the leader and not know our create yet: a sync first
// makes the listing see every committed write (a node of ours it missed would block the queue).
void Contender::recover_locked() {
  set_phase_locked(Phase::recovering);
  ++attempt_;
  core_->sync(generation_, request().parent, [](zk_errc) {});  // the listing behind it reports failures
  core_->get_children(generation_, request().parent, for_this_step(Phase::recovering, [](Contender& contender, zk_errc rc, std::vector<std::string> children, NodeStat) {
    if (rc == zk_errc::ok) contender.drops_in_a_row_ = 0;
    if (rc != zk_errc::ok && rc != zk_errc::no_node) {
      if (!contender.handle_session_trouble_locked(rc, Retry::recover)) {
        contender.complete_locked(make_error_code(rc));
        contender.finish_locked();
      }
      return;
    }
    auto found = std::find_if(children.begin(), children.end(), [&](const std::string& child) {
      return child.find(contender.acquiring().guid) != std::string::npos;
    });
    if (found == children.end()) {
      contender.begin_locked();  // the create never happened
      return;
    }
    const std::string candidate = contender.request().parent + "/" + *found;
    contender.core_->exists(contender.generation_, candidate, contender.for_this_step(Phase::recovering, [candidate](Contender& again, zk_errc exists_rc, NodeStat stat) {
      if (exists_rc == zk_errc::ok && stat.ephemeral_owner == again.core_->session_id() && again.core_->session_id() != 0) {
        // Ours: created by this very session. Never adopt a node whose owner is another session.
        again.node_path_ = candidate;
        again.token_ = FencingToken(stat.czxid);
        again.session_id_ = stat.ephemeral_owner;
        if (again.abandon_) {
          again.remove_node_locked();
          return;
        }
        again.check_locked();
      } else if (exists_rc == zk_errc::ok || exists_rc == zk_errc::no_node) {
        again.begin_locked();
      } else if (!again.handle_session_trouble_locked(exists_rc, Retry::recover)) {
        again.complete_locked(make_error_code(exists_rc));
        again.finish_locked();
      }
    }));
  }));
}

// ---- waiting ----

void Contender::check_locked() {
  set_phase_locked(Phase::checking);
  const std::uint64_t attempt = ++attempt_;
  std::weak_ptr<Contender> self = weak_from_this();
  if (!parent_verified_) verify_parent_locked(attempt);
  const bool watched = listings_watch_path();
  core_->get_children(
      generation_, request().parent,
      [self, attempt, watched](zk_errc rc, std::vector<std::string> children, NodeStat parent) {
        if (auto contender = self.lock()) contender->on_children(attempt, rc, std::move(children), parent, watched);
      },
      watched ? path_watch() : NodeWatch());
}

// Sent before the listing of the same attempt; the server answers in order, so the verdict is in
// before the listing is evaluated.
void Contender::verify_parent_locked(std::uint64_t attempt) {
  std::weak_ptr<Contender> self = weak_from_this();
  core_->get_data(generation_, request().parent, [self, attempt](zk_errc rc, std::string data, NodeStat) {
    auto contender = self.lock();
    if (!contender) return;
    std::unique_lock lock(contender->core_->mutex());
    if (attempt != contender->attempt_ || !contender->acquiring_) return;
    if (rc == zk_errc::ok) {
      contender->parent_verified_ = true;
      contender->acquiring_->parent_problem = contender->request().check_parent(data);
    } else if (rc != zk_errc::no_node && !is_connection_trouble(rc) && !is_session_ended(rc)) {
      contender->acquiring_->parent_problem = make_error_code(rc);  // for example no read permission on the parent
    }
    // Otherwise the listing fails the same way and its handling retries.
  });
}

void Contender::evaluate_locked(const std::vector<std::string>& children, bool listing_carries_watch) {
  if (abandon_) {
    remove_node_locked();
    return;
  }
  if (request().held_once_created) {
    if (std::find(children.begin(), children.end(), our_name()) == children.end()) own_node_gone_locked();
    else grant_locked();
    return;
  }
  std::vector<ContenderName> queue;
  queue.reserve(children.size());
  for (const auto& child : children)
    if (auto name = parse_contender_name(child)) queue.push_back(std::move(*name));
  sort_by_sequence(queue);
  const std::string ours = our_name();
  auto it = std::find_if(queue.begin(), queue.end(), [&](const ContenderName& c) { return c.name == ours; });
  if (it == queue.end()) {
    own_node_gone_locked();
    return;
  }
  if (request().check_children) {
    if (auto refusal = request().check_children(children)) {
      complete_locked(refusal);
      remove_node_locked();
      return;
    }
  }
  const QueueDecision decision = decide(queue, static_cast<std::size_t>(it - queue.begin()), request().policy);
  if (decision.holds) {
    grant_locked();
    return;
  }
  if (request().timeout == std::chrono::nanoseconds::zero()) {
    complete_locked(make_error_code(errc::would_block));
    remove_node_locked();
    return;
  }
  if (decision.first_waiter && !first_waiter_touch_sent_) touch_as_first_waiter_locked();
  if (decision.watch_children) {
    // A listing that set the children watch is exactly what the watch guards: nothing to redo.
    if (!listing_carries_watch) watch_children_locked();
    return;
  }
  // If the blocker is all that stands between us and the grant, its deletion alone grants us the
  // lock: nodes created since our listing sort after us, and deletions only remove obstacles. That
  // saves re-listing the children on every hand-off.
  const std::size_t our_index = static_cast<std::size_t>(it - queue.begin());
  std::string blocker = request().parent + "/" + queue[decision.blocker].name;
  const std::string second_blocker =
      decision.watch_second ? request().parent + "/" + queue[decision.second_blocker].name : std::string();
  queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(decision.blocker));
  blocker_deletion_grants_ =
      decide(queue, decision.blocker < our_index ? our_index - 1 : our_index, request().policy).holds;
  if (blocker_watch_live_ && blocker == acquiring().blocker && !request().policy.promotes_without_deleting()) {
    // Looking again (our second watch fired), we find the blocker we already watch: that watch is
    // set and has not fired, so it guards exactly what a new one would, one request sooner. Its
    // deletion now grants us if this listing shows it as our last obstacle.
    blocker_watch_serves_ = attempt_;
    set_phase_locked(Phase::watching);
    if (blocker_deletion_grants_ && !own_node_vouched_for_locked()) watch_own_node_locked();
  } else {
    acquiring().blocker = std::move(blocker);
    watch_locked();
  }
  if (!second_blocker.empty()) watch_second_blocker_locked(second_blocker);
}

// A watch that only makes a waiter look again (a second blocker's, or the children watch of a
// semaphore's first two waiters), if it still waits on the same attempt.
NodeWatch Contender::wake_to_check() {
  return for_this_step(Phase::watching, [](Contender& contender, NodeEvent) { contender.check_locked(); },
                       /*is_watch=*/true);
}

// Granting on the blocker's deletion alone is safe only while our own node exists: the deletion
// grants only while something vouches for our node (own_node_vouched_for_locked); otherwise we
// list again. Where the listing's children watch cannot vouch (it is not set, or has fired), the
// own-node watch is set; a deletion of our node then reaches us before a later deletion of the
// blocker (one connection delivers in order), and own_node_gone_locked has queued us again
// before that event could grant anything. A semaphore waiter, whose listings set no children
// watch, always watches its own node.
//
// The watch serves the attempt that set it, and a later one of a lock that finds the same blocker
// while it is still set (see evaluate_locked): its callbacks act only while the current attempt is
// one it serves, and whether the deletion grants us is what the latest listing decided.
void Contender::watch_locked() {
  set_phase_locked(Phase::watching);
  const std::uint64_t watch_attempt = ++attempt_;
  blocker_watch_attempt_ = blocker_watch_serves_ = watch_attempt;
  blocker_watch_live_ = false;
  if (request().policy.promotes_without_deleting() || (blocker_deletion_grants_ && !own_node_vouched_for_locked()))
    watch_own_node_locked();
  auto serves_now = [watch_attempt](const Contender& contender) {
    return contender.blocker_watch_attempt_ == watch_attempt && contender.attempt_ == contender.blocker_watch_serves_ &&
           contender.phase_ == Phase::watching;
  };
  std::weak_ptr<Contender> self = weak_from_this();
  core_->get_data(
      generation_, acquiring().blocker,
      [self, serves_now](zk_errc rc, std::string, NodeStat stat) {
        auto contender = self.lock();
        if (!contender) return;
        std::unique_lock lock(contender->core_->mutex());
        if (!serves_now(*contender)) return;
        if (rc == zk_errc::ok && contender->request().policy.promotes_without_deleting() && stat.version > 0) {
          // A touched predecessor was promoted before our watch was set (see decide()): look
          // again, once per touch, so that a node touched by someone else cannot keep us
          // re-checking.
          if (contender->first_sight_of_touch_locked(contender->acquiring().blocker, stat.version)) contender->check_locked();
          return;
        }
        if (rc == zk_errc::ok) {
          contender->blocker_watch_live_ = true;  // set; wait for it
        } else if (rc == zk_errc::no_node) {
          // Gone already: ours, or look again.
          if (contender->blocker_deletion_grants_ && contender->own_node_vouched_for_locked()) contender->grant_locked();
          else contender->check_locked();
        } else if (!contender->handle_session_trouble_locked(rc, Retry::check)) {
          contender->complete_locked(make_error_code(rc));
          contender->remove_node_locked();
        }
      },
      [self, serves_now, watch_attempt](NodeEvent event) {
        auto contender = self.lock();
        if (!contender) return;
        ++contender->core_->wakeups;
        std::unique_lock lock(contender->core_->mutex());
        if (contender->blocker_watch_attempt_ == watch_attempt) contender->blocker_watch_live_ = false;
        if (!serves_now(*contender)) return;  // a listing under way sees what fired it
        if (event == NodeEvent::deleted && contender->blocker_deletion_grants_ &&
            contender->own_node_vouched_for_locked())
          contender->grant_locked();
        else
          contender->check_locked();
      },
      watch_owner_locked());
}

// A waiter's second watch (see decide()), set with the same attempt as the blocker's: it only
// makes us look again (a lock then keeps its blocker's watch if the blocker is unchanged).
void Contender::watch_second_blocker_locked(const std::string& node) {
  core_->get_data(generation_, node,
                  for_this_step(Phase::watching,
                                [node](Contender& contender, zk_errc rc, std::string, NodeStat stat) {
                                  if (rc == zk_errc::ok) {
                                    if (stat.version > 0 && contender.first_sight_of_touch_locked(node, stat.version))
                                      contender.check_locked();
                                  } else if (rc == zk_errc::no_node) {
                                    contender.check_locked();
                                  }
                                  // Anything else reaches the blocker's watch too, which handles it.
                                }),
                  wake_to_check(), watch_owner_locked());
}

// Waiters' watches on other nodes belong to their acquisition: once it is decided (granted, timed
// out, cancelled, failed) nothing wants them, and the connection forgets them rather than keep
// one per attempt until those nodes change (a poller retrying a lock held for hours).
WatchOwner Contender::watch_owner_locked() {
  auto& owner = acquiring().watch_owner;
  if (!owner) owner = std::make_shared<char>();
  return owner;
}

void Contender::abandon_watches_locked() {
  if (!acquiring_ || !acquiring_->watch_owner) return;
  acquiring_->watch_owner.reset();
  core_->drop_abandoned_watches(generation_, request().parent + "/");
}

bool Contender::first_sight_of_touch_locked(const std::string& node, std::int32_t version) {
  auto& touches_seen = acquiring().touches_seen;
  auto seen = std::make_pair(node, version);
  if (std::find(touches_seen.begin(), touches_seen.end(), seen) != touches_seen.end()) return false;
  if (touches_seen.size() >= 8) touches_seen.erase(touches_seen.begin());  // only recent ones matter
  touches_seen.push_back(std::move(seen));
  return true;
}

// The first waiter of a semaphore (see decide()). The listing returned with the watch is
// evaluated at once, so nothing that happens between the listing and the watch goes unseen.
void Contender::watch_children_locked() {
  set_phase_locked(Phase::watching);
  ++attempt_;
  core_->get_children(
      generation_, request().parent,
      for_this_step(Phase::watching,
                    [](Contender& contender, zk_errc rc, std::vector<std::string> children, NodeStat) {
                      if (rc == zk_errc::ok) {
                        contender.drops_in_a_row_ = 0;
                        contender.evaluate_locked(children, true);
                      } else if (rc == zk_errc::no_node) {
                        contender.check_locked();  // the parent went, and our node with it: check queues again
                      } else if (!contender.handle_session_trouble_locked(rc, Retry::check)) {
                        contender.complete_locked(make_error_code(rc));
                        contender.remove_node_locked();
                      }
                    }),
      wake_to_check());
}

// ---- holding ----

void Contender::grant_locked() {
  // A grant decided after the session's deadline would hand out a lock the server may already
  // have given away: the session is declared lost instead, which queues us again. (A grant for an
  // older session than the current one cannot reach here, its replies being dropped; should one,
  // it queues again too rather than wait for nothing.) While the monitor asks about a deadline it
  // slept through, the grant waits for its verdict: checked again once the session is proven
  // alive (on_deadline_renewed), queued again on the next session if it is not.
  switch (core_->deadline_verdict_locked(generation_)) {
    case SessionCore::DeadlineVerdict::alive: break;
    case SessionCore::DeadlineVerdict::in_doubt: retry_ = Retry::check; return;
    case SessionCore::DeadlineVerdict::lost:
      if (phase_ == Phase::checking || phase_ == Phase::watching) begin_locked();
      return;
  }
  set_phase_locked(Phase::held);
  drops_in_a_row_ = 0;
  granted_at_ = Clock::now();
  log(LogLevel::debug, log_context_locked(), "lock {} granted (token {})", node_path_, token_.value());
  if (request().policy.promotes_without_deleting()) touch_locked();
  if (!path_watch_live_) schedule_own_node_watch_locked();
  complete_locked({});
  forget_request_locked();
}

// A holder never queues again (held leads only to lost, releasing or finished): what only an
// acquisition reads goes (see Acquiring).
void Contender::forget_request_locked() {
  if (!request().policy.promotes_without_deleting()) {
    acquiring_.reset();
    return;
  }
  // A holder that touches its node keeps the owner data and the policy; the rest goes.
  ContenderRequest kept;
  kept.parent = std::move(acquiring_->request.parent);
  kept.policy = acquiring_->request.policy;
  kept.owner_data = std::move(acquiring_->request.owner_data);
  acquiring_ = std::make_unique<Acquiring>(std::move(kept));
}

// The own-node watch only catches an operator deleting a held node; session loss is the monitor's
// job. Setting it a moment after the grant keeps it off the acquisition's path, and a lock
// released within that moment never needs it.
void Contender::schedule_own_node_watch_locked() {
  own_watch_timer_ = std::make_unique<boost::asio::steady_timer>(core_->worker());
  std::weak_ptr<Contender> self = weak_from_this();
  const std::uint64_t generation = generation_;
  boost::asio::post(core_->worker(), [self, generation] {
    auto contender = self.lock();
    if (!contender || !contender->own_watch_timer_) return;
    contender->own_watch_timer_->expires_after(kOwnNodeWatchDelay);
    contender->own_watch_timer_->async_wait([self, generation](boost::system::error_code ec) {
      if (ec) return;
      auto again = self.lock();
      if (!again) return;
      std::unique_lock lock(again->core_->mutex());
      if (again->phase_ == Phase::held && again->generation_ == generation) again->watch_own_node_locked();
      // Done with (on its own thread, which destroying it from its handler allows): a lock held
      // for long does not keep a timer (about 100 bytes) for nothing.
      again->own_watch_timer_.reset();
    });
  });
}

// A listing's children watch (see begin_locked) stands in for the own-node watch until the path's
// children first change: our node's deletion is such a change. From then on a holder watches its
// own node as one granted without the children watch does (a moment after, see
// schedule_own_node_watch_locked: the change is often the hand-off that granted us, and a short
// hold never needs it), and a waiter that its blocker's deletion would grant watches it at once.
// The own-node watch's reply also tells if the node is gone already.
void Contender::on_path_changed_locked() {
  if (!path_watch_live_) return;
  path_watch_live_ = false;
  if (phase_ == Phase::held && own_watch_ == OwnWatch::none && !own_watch_timer_) schedule_own_node_watch_locked();
  else if (phase_ == Phase::watching && blocker_deletion_grants_) watch_own_node_locked();
}

// Rewrites our node's data so that the data watches of the waiters behind us fire: a promotion
// deletes nothing, and they must learn that they move up (see decide()). Two conditional
// rewrites in one pipeline leave the node at version 2 whether or not our first-waiter touch
// (to version 1) got there first: version 2 marks a granted semaphore node for the listing.
// Resent after a connection loss, both simply fail with a bad version if they took effect. Sent
// before the own-node watch, which the server therefore registers after these changes.
void Contender::touch_locked() {
  std::weak_ptr<Contender> self = weak_from_this();
  auto on_reply = [self](zk_errc rc, NodeStat) {
    if (rc == zk_errc::ok || rc == zk_errc::no_node || rc == zk_errc::bad_version) return;
    auto contender = self.lock();
    if (!contender) return;
    std::unique_lock lock(contender->core_->mutex());
    if (contender->phase_ != Phase::held) return;  // released or lost: the delete wakes the successor
    // A touch lost to a connection drop is resent, with the own-node watch sent behind it, once
    // the same session is back; a lost session deletes the node, which wakes the successor anyway.
    contender->handle_session_trouble_locked(rc, Retry::touch);
  };
  core_->set_data(generation_, node_path_, request().owner_data, 0, on_reply);
  core_->set_data(generation_, node_path_, request().owner_data, 1, on_reply);
}

// A semaphore waiter that became the first waiter rewrites its node (to version 1, once): the
// waiter two places behind it watches it and moves up into the children-watching pair, even if
// the waiter between us is dead or frozen (see decide()).
void Contender::touch_as_first_waiter_locked() {
  first_waiter_touch_sent_ = true;
  std::weak_ptr<Contender> self = weak_from_this();
  const std::uint64_t generation = generation_;
  core_->set_data(generation_, node_path_, request().owner_data, 0, [self, generation](zk_errc rc, NodeStat) {
    if (rc == zk_errc::ok || rc == zk_errc::no_node || rc == zk_errc::bad_version) return;
    auto contender = self.lock();
    if (!contender) return;
    std::unique_lock lock(contender->core_->mutex());
    if (contender->generation_ != generation ||
        (contender->phase_ != Phase::checking && contender->phase_ != Phase::watching))
      return;  // granted (whose touch covers this one), gone, or queueing again
    // Lost with the connection: look again once it is back, which touches again if still first.
    contender->first_waiter_touch_sent_ = false;
    contender->handle_session_trouble_locked(rc, Retry::check);
  });
}

// Watches our own node from the moment we wait until we let go: a deletion by someone else (an
// operator, a peer breaking the lock) means "queue again" for a waiter and "lost" for a holder (see
// own_node_gone_locked). One data watch at a time; a data change (our own semaphore touch) re-arms it.
void Contender::watch_own_node_locked() {
  if (own_watch_ != OwnWatch::none || node_path_.empty()) return;
  own_watch_ = OwnWatch::pending;
  std::weak_ptr<Contender> self = weak_from_this();
  // Our node is known by its czxid (our token): unique per node, and no copy of its path in a
  // watch that may stay registered as long as the lock is held.
  const std::uint64_t generation = generation_;
  const FencingToken node = token_;
  auto still_this_node = [generation, node](const Contender& c) {
    return c.generation_ == generation && !c.node_path_.empty() && c.token_ == node;
  };
  core_->get_data(
      generation_, node_path_,
      [self, still_this_node](zk_errc rc, std::string, NodeStat) {
        auto contender = self.lock();
        if (!contender) return;
        std::unique_lock lock(contender->core_->mutex());
        if (!still_this_node(*contender)) return;
        if (rc == zk_errc::ok) {
          contender->own_watch_ = OwnWatch::set;
          return;
        }
        contender->own_watch_ = OwnWatch::none;
        if (rc == zk_errc::no_node) {
          contender->own_node_gone_locked();
        } else if (contender->phase_ == Phase::held && contender->retry_ != Retry::touch) {
          // A pending touch resends this watch too. The client registers a watch only with its
          // reply, and the server forgets the watches of a dropped connection: a watch whose reply
          // was lost is not set. Set it again once the same session is back. (A waiter's blocker
          // watch, sent behind this one, fails the same way and re-checks, which re-arms this.)
          contender->handle_session_trouble_locked(rc, Retry::watch_own);
        }
      },
      [self, still_this_node](NodeEvent event) {
        auto contender = self.lock();
        if (!contender) return;
        std::unique_lock lock(contender->core_->mutex());
        if (!still_this_node(*contender)) return;
        contender->own_watch_ = OwnWatch::none;
        if (event == NodeEvent::deleted) contender->own_node_gone_locked();
        else if (contender->phase_ == Phase::held || contender->phase_ == Phase::watching)
          contender->watch_own_node_locked();
      });
}

// The one rule for a node of ours that someone else deleted: a waiter queues again with a new node
// (it never holds on the strength of a node that is gone); a holder has lost its grant.
void Contender::own_node_gone_locked() {
  switch (phase_) {
    case Phase::held:
      lose_locked(LossReason::node_deleted);
      break;
    case Phase::creating:
    case Phase::checking:
    case Phase::watching:
      log(LogLevel::warning, log_context_locked(), "waiting node {} disappeared; queueing again", node_path_);
      begin_locked();
      break;
    default:
      break;  // recovering finds out by itself; releasing, lost and finished need nothing
  }
}

void Contender::lose_locked(LossReason reason) {
  if (phase_ != Phase::held) return;
  set_phase_locked(Phase::lost);
  loss_reason_ = reason;
  counted_.lost(reason);
  core_->detach(this);
  if (reason == LossReason::session_lost || reason == LossReason::connection_lost) {
    // The server may still have our node: it stays until we let go (see SessionCore).
    core_->hold_lost_session_locked(generation_);
    holding_lost_session_ = true;
  }
  log(LogLevel::warning, log_context_locked(), "lock {} lost ({})", node_path_, to_string(reason));
  // The stop token and the callbacks run on the callback thread: user code never runs under the
  // session mutex or on the monitor's thread.
  std::vector<std::function<void(LossReason)>> callbacks;
  if (asked_) callbacks = std::exchange(asked_->lost_callbacks, {});
  // Tokens handed out so far are stopped there; one asked for from now on is made stopped.
  core_->post_callback([callbacks = std::move(callbacks), reason, told = lost_source_]() mutable {
    told.request_stop();
    // One callback that throws does not keep the loss from the others.
    for (const auto& callback : callbacks) SessionCore::run_user_callback([&] { callback(reason); });
  });
}

// ---- giving up ----

bool Contender::cancel(std::error_code why) {
  std::unique_lock lock(core_->mutex());
  if (completed_) return false;
  complete_locked(why);
  abandon_ = true;
  switch (phase_) {
    case Phase::waiting_for_session: finish_locked(); break;
    case Phase::checking:
    case Phase::watching: remove_node_locked(); break;
    case Phase::creating:
      // The node's name is not known until the create's reply: on_created deletes it then.
      if (!node_path_.empty()) remove_node_locked();
      break;
    case Phase::recovering: break;  // deleted once found
    default: break;
  }
  return true;
}

bool Contender::release(std::function<void(ReleaseOutcome)> on_answer) {
  std::unique_lock lock(core_->mutex());
  switch (phase_) {
    case Phase::held:
      if (on_answer) asked_locked().release_answer = std::move(on_answer);
      remove_node_locked();
      return true;
    case Phase::lost:
      if (on_answer) asked_locked().release_answer = std::move(on_answer);
      finish_locked();  // the node went (or goes) with the session, or was deleted by someone else
      return true;
    case Phase::releasing:
    case Phase::finished:
      return false;
    default:
      lock.unlock();
      cancel(make_error_code(errc::cancelled));
      return false;
  }
}

void Contender::answer_release_locked(ReleaseOutcome outcome) {
  if (!asked_) return;
  if (auto answer = std::exchange(asked_->release_answer, nullptr)) answer(outcome);
}

Contender::Asked& Contender::asked_locked() {
  if (!asked_) asked_ = std::make_unique<Asked>();
  return *asked_;
}

// Never deletes anything but this contender's own node, on the session that created it.
void Contender::remove_node_locked() {
  abandon_ = true;
  if (node_path_.empty() || generation_ != core_->generation_locked()) {
    finish_locked();
    return;
  }
  set_phase_locked(Phase::releasing);
  retry_ = Retry::none;
  if (!core_->usable_locked(generation_)) {
    retry_ = Retry::remove;
    return;
  }
  ++attempt_;
  core_->remove(generation_, node_path_, -1, for_this_step(Phase::releasing, [](Contender& contender, zk_errc rc) {
    if (rc == zk_errc::ok || rc == zk_errc::no_node) {
      // Sequence numbers never repeat, so no one else's node has our name: a delete that removed
      // it proves it stood until now. Gone already: lost, unless our own earlier delete may have
      // taken it before its connection dropped.
      contender.answer_release_locked(rc == zk_errc::ok          ? ReleaseOutcome::held_to_the_end
                                      : contender.delete_in_doubt_ ? ReleaseOutcome::unconfirmed
                                                                   : ReleaseOutcome::lost);
      contender.finish_locked();
      return;
    }
    if (is_connection_trouble(rc)) contender.delete_in_doubt_ = true;
    if (!contender.handle_session_trouble_locked(rc, Retry::remove)) {
      log(LogLevel::error, contender.log_context_locked(), "deleting {} failed: {}", contender.node_path_,
          make_error_code(rc).message());
      contender.answer_release_locked(ReleaseOutcome::unconfirmed);
      contender.finish_locked();
    }
  }));
}

void Contender::complete_locked(std::error_code outcome) {
  if (completed_) return;
  completed_ = true;
  counted_.decide(outcome, granted_at_);  // a grant part that lost the race: its owner releases us
  cancel_timeout();
  abandon_watches_locked();
  if (!request().on_done) return;
  auto done = std::move(request().on_done);
  if (request().on_done_inline) done(outcome, shared_from_this());
  else core_->post_callback([done = std::move(done), outcome, self = shared_from_this()] { done(outcome, self); });
}

void Contender::finish_locked() {
  // Finished without the delete's answer: the node went with its session, or was gone already -
  // unless a delete of ours may have taken it first.
  answer_release_locked(delete_in_doubt_ ? ReleaseOutcome::unconfirmed : ReleaseOutcome::lost);
  if (phase_ == Phase::finished) return;
  set_phase_locked(Phase::finished);
  if (std::exchange(holding_lost_session_, false)) core_->let_go_locked(generation_);
  retry_ = Retry::none;
  cancel_timeout();
  core_->detach(this);
}

// ---- connection trouble ----

// Connection loss or a closing/expired handle: true if handled (the step resumes on reconnect or
// on a new session), false if rc is a real failure for the caller to report.
bool Contender::handle_session_trouble_locked(zk_errc rc, Retry what) {
  if (is_connection_trouble(rc)) {
    // Every request in flight fails with one drop: count the drop, and decide, once. Only an
    // acquisition gives up: a holder keeps its grant, and a release (a small delete) keeps trying
    // until done or until the session, and the node with it, is gone.
    const bool acquiring = phase_ == Phase::creating || phase_ == Phase::recovering ||
                           phase_ == Phase::checking || phase_ == Phase::watching;
    if (acquiring && !drop_counted_) {
      drop_counted_ = true;
      if (++drops_in_a_row_ > kMaxDropsInARow) {
        give_up_after_drops_locked();
        return true;
      }
    }
    retry_after_reconnect_locked(what);
    return true;
  }
  if (is_session_ended(rc)) {
    // The session of this step is gone; on_session_lost / on_session_ended take it from here
    // (and may already have).
    if (generation_ != core_->generation_locked() && phase_ != Phase::finished && phase_ != Phase::held &&
        phase_ != Phase::lost) {
      if (abandon_ || phase_ == Phase::releasing) finish_locked();
      else begin_locked();
    }
    return true;
  }
  return false;
}

// The acquisition's step never got through (see kMaxDropsInARow): it fails with connection
// loss and the step is not sent again. A node we have is deleted if its name is known (a delete
// is small); a node whose create's outcome is still unknown goes with the session.
void Contender::give_up_after_drops_locked() {
  log(LogLevel::error, log_context_locked(),
      "giving up an acquisition under {}: the connection dropped {} times in a row while its requests were in "
      "flight (a request the server refuses, such as one larger than its jute.maxbuffer?)",
      request().parent, drops_in_a_row_);
  complete_locked(make_error_code(zk_errc::connection_loss));
  retry_ = Retry::none;
  if (node_path_.empty()) {
    abandon_ = true;
    finish_locked();
  } else {
    remove_node_locked();
  }
}

void Contender::retry_after_reconnect_locked(Retry what) {
  retry_ = what;
  if (core_->usable_locked(generation_)) on_reconnected(generation_);
}

// A grant that waited for the monitor's verdict (grant_locked) is decided again, unless something
// else decided it meanwhile (a listing that granted, a drop that set its own retry).
void Contender::on_deadline_renewed(std::uint64_t generation) {
  if (generation != generation_ || retry_ != Retry::check || !core_->usable_locked(generation)) return;
  if (phase_ != Phase::checking && phase_ != Phase::watching) return;
  retry_ = Retry::none;
  check_locked();
}

void Contender::on_reconnected(std::uint64_t generation) {
  if (generation != generation_) return;
  drop_counted_ = false;
  const Retry what = std::exchange(retry_, Retry::none);
  switch (what) {
    case Retry::none: break;
    case Retry::recover: recover_locked(); break;
    case Retry::check: check_locked(); break;
    case Retry::remove: remove_node_locked(); break;
    case Retry::touch:
      if (phase_ == Phase::held) {
        touch_locked();
        watch_own_node_locked();
      }
      break;
    case Retry::watch_own:
      if (phase_ == Phase::held) watch_own_node_locked();
      break;
  }
  if (phase_ == Phase::waiting_for_session) begin_locked();
  // After a reconnect the client sets its watches again, and the server reports what changed
  // meanwhile in an order of its own (data watches before children watches), not in the order it
  // happened: a waiter that a deletion could grant lists again instead of trusting that order.
  else if (phase_ == Phase::watching && listings_watch_path()) check_locked();
}

void Contender::on_new_session(std::uint64_t) {
  drop_counted_ = false;
  if (phase_ == Phase::waiting_for_session) begin_locked();
}

void Contender::on_session_lost(std::uint64_t generation, LossReason reason) {
  if (generation != generation_) return;
  switch (phase_) {
    case Phase::held: lose_locked(reason); break;
    case Phase::releasing: finish_locked(); break;  // the node goes with the session
    case Phase::lost:
    case Phase::finished: break;
    default:
      // A waiter never held anything: queue again on the next session, unless it lives on this one
      // only (see ContenderRequest::only_generation). Its node, if the create landed, goes with the
      // session.
      ++attempt_;
      node_path_.clear();
      retry_ = Retry::none;
      if (abandon_) {
        finish_locked();
      } else if (request().only_generation != 0) {
        complete_locked(make_error_code(errc::session_lost));
        finish_locked();
      } else {
        set_phase_locked(Phase::waiting_for_session);
      }
      break;
  }
}

void Contender::on_session_ended(std::error_code why) {
  switch (phase_) {
    case Phase::held: lose_locked(LossReason::session_closed); break;
    case Phase::lost:
    case Phase::finished: break;
    default:
      complete_locked(why);
      finish_locked();
      break;
  }
}

// ---- timeout ----

void Contender::arm_timeout() {
  if (request().timeout <= std::chrono::nanoseconds::zero()) return;
  timeout_timer_ = std::make_unique<boost::asio::steady_timer>(core_->worker());
  std::weak_ptr<Contender> self = weak_from_this();
  boost::asio::post(core_->worker(), [self, timeout = request().timeout] {
    auto contender = self.lock();
    if (!contender || !contender->timeout_timer_) return;
    contender->timeout_timer_->expires_after(timeout);
    contender->timeout_timer_->async_wait([self](boost::system::error_code ec) {
      if (ec) return;
      if (auto again = self.lock()) again->cancel(make_error_code(errc::timed_out));
    });
  });
}

void Contender::cancel_timeout() {
  if (!timeout_timer_) return;
  // Timers belong to the worker thread.
  boost::asio::post(core_->worker(), [self = weak_from_this()] {
    if (auto contender = self.lock())
      if (contender->timeout_timer_) contender->timeout_timer_->cancel();
  });
}

// ---- queries ----

std::stop_token Contender::lost_token() const {
  std::lock_guard lock(core_->mutex());
  if (!lost_source_.stop_possible()) {
    lost_source_ = std::stop_source();
    // Nothing is registered on a new source yet, so stopping it here runs no user code.
    if (loss_reason_) lost_source_.request_stop();
  }
  return lost_source_.get_token();
}

FencingToken Contender::token() const {
  std::lock_guard lock(core_->mutex());
  return token_;
}

std::string Contender::node_path() const {
  std::lock_guard lock(core_->mutex());
  return node_path_;
}

std::optional<Contender::FenceCheck> Contender::fence_check_locked(std::string& refusal) const {
  if (loss_reason_) {
    refusal = fmt::format("the grant was lost ({})", to_string(*loss_reason_));
    return std::nullopt;
  }
  if (phase_ != Phase::held) {
    refusal = phase_ == Phase::releasing || phase_ == Phase::finished ? "the grant was released"
                                                                      : "the grant is not held";
    return std::nullopt;
  }
  return FenceCheck{generation_, node_path_};
}

std::uint64_t Contender::generation() const {
  std::lock_guard lock(core_->mutex());
  return generation_;
}

std::int64_t Contender::session_id() const {
  std::lock_guard lock(core_->mutex());
  return session_id_;
}

bool Contender::lost() const {
  std::lock_guard lock(core_->mutex());
  return loss_reason_.has_value();
}

std::optional<LossReason> Contender::loss_reason() const {
  std::lock_guard lock(core_->mutex());
  return loss_reason_;
}

void Contender::on_lost(std::function<void(LossReason)> callback) {
  std::lock_guard lock(core_->mutex());
  if (loss_reason_) {
    core_->post_callback([callback = std::move(callback), reason = *loss_reason_] { callback(reason); });
    return;
  }
  asked_locked().lost_callbacks.push_back(std::move(callback));
}

}  // namespace zkr::detail
