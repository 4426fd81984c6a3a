// SPDX-License-Identifier: Apache-2.0
// Operations on locks, read/write locks and semaphores, on the holds they return, on acquisition
// batches, and the control operations (await, cancel). Each predicts, where it can, what the
// library must do (reenter, refuse, grant a free lock at once) and the harvest checks it.
#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <zkr/asio.hpp>
#include <zkr/error.hpp>
#include <zkr/fenced.hpp>

#include "slots.hpp"

namespace zkr::swarm {

using namespace std::chrono_literals;

namespace {

std::string owner_data(int size_class, const std::string& path) {
  const auto bytes = owner_data_bytes(size_class, path);
  return bytes == 0 ? std::string() : std::string(bytes, 'o');
}

// Runs one blocking acquisition on the actor's thread and records its outcome. The HeldLock is
// built inside its box, never moved there (a move would unbind it from the thread).
template <typename Recipe>
void run_blocking(Recipe* recipe, OpKind kind, std::chrono::nanoseconds timeout, const std::shared_ptr<Outcome>& outcome,
                  std::stop_token stop) {
  std::shared_ptr<HoldBox> box;
  std::error_code ec;
  std::string unexpected;
  try {
    switch (kind) {
      case OpKind::acquire:
        box = std::make_shared<HoldBox>(HoldBox::FromHeld{}, [&] { return recipe->acquire(stop); });
        break;
      case OpKind::try_acquire:
        box = std::make_shared<HoldBox>(HoldBox::FromOptional{}, [&] { return recipe->try_acquire(); });
        break;
      case OpKind::try_acquire_for:
        box = std::make_shared<HoldBox>(HoldBox::FromOptional{}, [&] { return recipe->try_acquire_for(timeout, stop); });
        break;
      default:
        box = std::make_shared<HoldBox>(HoldBox::FromOptional{},
                                        [&] { return recipe->try_acquire_for(timeout, stop, ec); });
        break;
    }
  } catch (const Error& e) {
    ec = e.code();
    // The throwing try forms give up with an empty result, never an exception (zkr/lock.hpp).
    if ((kind == OpKind::try_acquire || kind == OpKind::try_acquire_for) && ec == condition::gave_up)
      unexpected = fmt::format("gave up by throwing {} instead of returning nothing", e.what());
  } catch (const std::exception& e) {
    unexpected = fmt::format("threw {}", e.what());
  }
  if (box && !box->held()) box.reset();
  // An empty optional of the throwing forms: which way it gave up, where that is certain.
  if (!box && !ec && unexpected.empty() && kind != OpKind::acquire) {
    if (kind == OpKind::try_acquire || timeout == std::chrono::nanoseconds::zero()) ec = make_error_code(errc::would_block);
    else if (!stop.stop_requested()) ec = make_error_code(errc::timed_out);
  }
  std::lock_guard lock(outcome->mutex);
  outcome->ec = ec;
  outcome->box = std::move(box);
  outcome->unexpected = std::move(unexpected);
  outcome->event = next_event();
  outcome->done = true;
}

AcquireHandler record_into(const std::shared_ptr<Outcome>& outcome, bool release_in_handler) {
  return [outcome, release_in_handler](std::error_code ec, HeldLock held) {
    auto box = std::make_shared<HoldBox>();
    box->direct = std::move(held);  // an async grant is no thread's: moving it unbinds nothing
    if (release_in_handler && box->direct) box->direct.release();  // let go from the callback itself
    std::lock_guard lock(outcome->mutex);
    outcome->ec = ec;
    if (box->direct) outcome->box = std::move(box);
    outcome->event = next_event();
    outcome->done = true;
  };
}

}  // namespace

// zkr::asio's completions: on the thread that runs this context, never inside the initiating call.
struct Swarm::AsioContext {
  boost::asio::io_context io;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work{io.get_executor()};
  std::thread thread{[this] { io.run(); }};
  std::mutex mutex;
  std::vector<std::string> violations;
  ~AsioContext() {
    work.reset();
    io.stop();
    thread.join();
  }
};

namespace {
thread_local bool inside_asio_initiation = false;
}  // namespace

void Swarm::check_asio() {
  if (!asio_) return;
  std::lock_guard lock(asio_->mutex);
  if (!asio_->violations.empty()) fail("asio completion", "", asio_->violations.front());
}

std::unique_ptr<Pending> Swarm::new_pending(const Op& op) {
  auto pending = std::make_unique<Pending>();
  pending->id = next_id_++;
  pending->kind = op.kind;
  pending->step = step_index_;
  pending->actor = op.actor;
  pending->slot = op.session;
  pending->epoch = slots_[static_cast<std::size_t>(op.session)]->epoch;
  pending->resource = op.resource;
  pending->what = fmt::format("step {} {}", step_index_, describe(op));
  pending->started_event = next_event();
  pending->started = Clock::now();
  return pending;
}

int Swarm::lock_object(int slot, int resource_index, int size) {
  // One Lock object per (session epoch, resource, owner data size): reentrancy is per object.
  const auto& s = *slots_[static_cast<std::size_t>(slot)];
  return ((slot * 1000 + s.epoch) * 64 + resource_index) * 4 + size;
}

// ---- acquisitions ----

bool Swarm::acquire(const Op& op) {
  const auto& r = resource(op.resource);
  if (!is_acquirable(r.kind)) return false;
  auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  auto& slot = *slots_[static_cast<std::size_t>(op.session)];
  const bool blocking = op.kind != OpKind::async_acquire;
  if (!actor.actor.idle()) return false;
  const bool peer_semaphore = r.kind == ResourceKind::semaphore && r.semaphore_layout != SemaphoreLayout::zkrecipes;
  const bool batch_here = actor.batch && actor.batch_effective && actor.batch_slot == op.session &&
                          actor.batch_epoch == slot.epoch;
  if (peer_semaphore && actor.batch && config_.excluded(Exclusion::peer_semaphore_in_batch)) return false;
  if (!blocking && batch_here && size_class(op) > 1 && config_.excluded(Exclusion::large_batch)) return false;
  if (peer_semaphore) slot.used_peer_semaphore = true;

  auto pending = new_pending(op);
  pending->blocking = blocking;
  pending->lock_object = lock_object(op.session, op.resource, size_class(op));
  // Held back by the open batch: the lock's acquisitions (semaphores go out at once).
  pending->held_back = !blocking && is_lock_like(r.kind) && batch_here;
  pending->release_in_handler = !blocking && variant(op);
  pending->unstoppable = !blocking && unstoppable(op);
  pending->window_counted = pending->unstoppable && is_lock_like(r.kind) && !batch_here;
  pending->started_session = slot.session->id();
  predict(*pending, op);

  // The recipe object, made on first use.
  Session& s = *slot.session;
  Lock* lock = nullptr;
  Semaphore* semaphore = nullptr;
  const auto size = size_class(op);
  if (r.kind == ResourceKind::semaphore) {
    auto& made = slot.semaphores[{op.resource, size}];
    if (!made)
      made = std::make_unique<Semaphore>(s, r.path, r.max_leases,
                                         SemaphoreOptions{owner_data(size, r.path), NodeAcl::open, r.semaphore_layout});
    semaphore = made.get();
  } else if (r.kind == ResourceKind::lock) {
    auto& made = slot.locks[{op.resource, size}];
    if (!made) made = std::make_unique<Lock>(s, r.path, LockOptions{owner_data(size, r.path), NodeAcl::open, r.reentrant});
    lock = made.get();
  } else {
    auto& made = slot.rwlocks[size];
    if (!made)
      made = std::make_unique<ReadWriteLock>(s, r.path, LockOptions{owner_data(size, r.path), NodeAcl::open, r.reentrant});
    lock = r.kind == ResourceKind::read_lock ? &made->read_lock() : &made->write_lock();
  }

  auto outcome = pending->outcome;
  Pending& recorded = *pending;
  pending_.push_back(std::move(pending));
  if (blocking) {
    actor.blocking_pending = recorded.id;
    const auto timeout = wait_timeout(op);
    const auto kind = op.kind;
    actor.actor.post([lock, semaphore, kind, timeout, outcome](std::stop_token stop) {
      if (lock) run_blocking(lock, kind, timeout, outcome, stop);
      else run_blocking(semaphore, kind, timeout, outcome, stop);
    });
    // A call that must end promptly is given its whole bound here, on the spot.
    if (recorded.prompt_by) actor.actor.wait_idle(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  *recorded.prompt_by - Clock::now() + 1ms));
  } else {
    const auto timeout = async_timeout(op);
    auto handler = record_into(outcome, recorded.release_in_handler);
    auto token = recorded.unstoppable ? std::stop_token() : recorded.stop.get_token();
    if (through_asio(op)) {
      if (!asio_) asio_ = std::make_shared<AsioContext>();
      // The context outlives every completion (see asio_), so the handler holds it by address: a
      // handler destroyed on the context's own thread must not be the one to join that thread.
      actor.actor.post([lock, semaphore, handler, token, context = asio_.get(), what = recorded.what](std::stop_token) {
        auto complete = boost::asio::bind_executor(
            context->io.get_executor(), [handler, context, what](std::exception_ptr error, HeldLock held) {
              std::error_code ec;
              std::string broken;
              if (inside_asio_initiation) broken = "completed inside the initiating call";
              else if (!context->io.get_executor().running_in_this_thread())
                broken = "completed on another thread than its handler's executor";
              if (error) {
                try {
                  std::rethrow_exception(error);
                } catch (const Error& e) {
                  ec = e.code();
                } catch (const std::exception& e) {
                  broken = fmt::format("completed with an exception the API does not promise: {}", e.what());
                  ec = make_error_code(errc::internal_error);
                }
              }
              if (!broken.empty()) {
                std::lock_guard guard(context->mutex);
                context->violations.push_back(fmt::format("{}: {}", what, broken));
              }
              handler(ec, std::move(held));
            });
        inside_asio_initiation = true;
        try {
          if (lock) zkr::asio::async_acquire(*lock, std::move(complete), token);
          else zkr::asio::async_acquire(*semaphore, std::move(complete), token);
        } catch (const Error& e) {
          inside_asio_initiation = false;
          handler(e.code(), HeldLock{});
        }
        inside_asio_initiation = false;
      });
    } else {
      actor.actor.post([lock, semaphore, timeout, handler, token](std::stop_token) {
        try {
          if (lock) lock->async_acquire(timeout, handler, token);
          else semaphore->async_acquire(timeout, handler, token);
        } catch (const Error& e) {
          handler(e.code(), HeldLock{});
        }
      });
    }
    if (!actor.actor.wait_idle(world_.slack()))
      fail("hang", std::string(r.name), fmt::format("{}: async_acquire did not return", recorded.what));
  }
  settle_after(op.actor);
  return true;
}

// What the library must do with this acquisition, where the model can tell: a thread that holds
// the lock reenters (reentrant, same Lock object) or is refused at once; a free lock on a healthy
// session is granted at once; a wait that never waits ends at once; a bounded wait ends by its
// timeout.
void Swarm::predict(Pending& pending, const Op& op) {
  const auto& r = resource(pending.resource);
  const auto slack = world_.slack();
  auto bound = [&](std::chrono::nanoseconds after, std::string why) {
    pending.prompt_by = pending.started + std::chrono::duration_cast<Clock::duration>(after + slack);
    pending.expectation = std::move(why);
  };
  auto bound_to_thread = [&](const Hold& hold) {
    return pending.blocking && is_lock_like(r.kind) && hold.blocking && hold.origin == pending.actor &&
           hold.owner == pending.actor && !hold.moved && !hold.released && !hold.destroyed &&
           hold.slot == pending.slot && hold.epoch == pending.epoch && resource(hold.resource).path == r.path;
  };
  // A grant the library says is lost is held by no thread (lock.hpp, "Holds, precisely"): the loss
  // is told before this acquisition starts, so its thread may not be refused for it.
  auto known_lost = [](const Hold& hold) {
    std::lock_guard lock(hold.box->mutex);
    return hold.box->held().lost();
  };
  // A hold moved to this thread may count as the thread's too (lock.hpp leaves a moved hold to
  // nobody; a library that gives it to its new thread refuses or reenters here, and may).
  pending.thread_may_hold = std::any_of(holds_.begin(), holds_.end(), [&](const Hold& hold) {
    return (bound_to_thread(hold) ||
            (pending.blocking && is_lock_like(r.kind) && hold.blocking && hold.owner == pending.actor &&
             !hold.released && !hold.destroyed && hold.slot == pending.slot && hold.epoch == pending.epoch &&
             resource(hold.resource).path == r.path)) &&
           !known_lost(hold);
  });
  if (!usable(pending.slot)) return bound(0ns, "its session is closed");
  if (!healthy(pending.slot) || pending.held_back) return;
  if (pending.thread_may_hold) {
    for (auto& hold : holds_) {
      if (!bound_to_thread(hold)) continue;
      bool lost = false;
      {
        std::lock_guard lock(hold.box->mutex);
        lost = hold.box->held().lost();
      }
      if (lost) continue;
      if (r.reentrant && hold.lock_object == pending.lock_object) {
        pending.expect_grant = true;
        pending.expected_node = hold.node;
        return bound(0ns, fmt::format("this thread holds {} through hold #{} (acquired at step {}, never moved) "
                                      "of the same reentrant Lock: it reenters",
                                      r.path, hold.id, hold.step));
      }
      pending.expect_refusal = true;
      return bound(0ns, fmt::format("this thread holds {} through hold #{} of another Lock object or role",
                                    r.path, hold.id));
    }
  }
  const bool free = free_for(pending);
  const bool never_waits = op.kind == OpKind::try_acquire ||
                           (op.kind == OpKind::async_acquire && async_timeout(op) == 0ns) ||
                           ((op.kind == OpKind::try_acquire_for || op.kind == OpKind::try_acquire_for_ec) &&
                            wait_timeout(op) == 0ns);
  // A free lock is granted whatever the wait allows, but a short timer can beat a busy machine,
  // and under ThreadSanitizer (several times slower) a 400 ms one can beat a grant of 600 KiB of
  // owner data: there only waits without a timer are predicted.
#if defined(__SANITIZE_THREAD__)
  constexpr auto kShortestPredictedWait = std::chrono::nanoseconds::max();
#else
  constexpr auto kShortestPredictedWait = std::chrono::nanoseconds(400ms);
#endif
  const auto timeout = pending.blocking ? (op.kind == OpKind::acquire ? -1ns : wait_timeout(op))
                                        : async_timeout(op);
  const bool long_enough = timeout <= 0ns || timeout >= kShortestPredictedWait;
  if (free && long_enough) {
    pending.expect_grant = true;
    return bound(0ns, fmt::format("{} was free (no node, no holder, no other acquisition) on a healthy session", r.path));
  }
  if (never_waits) return bound(0ns, "it never waits");
  if (pending.blocking && op.kind != OpKind::acquire) return bound(wait_timeout(op), "its timeout");
  if (!pending.blocking && async_timeout(op) > 0ns)
    return bound(async_timeout(op), "its timeout");
}

std::vector<std::string> Swarm::contender_nodes(int resource_index) {
  const auto& r = resource(resource_index);
  std::vector<std::string> out;
  auto add = [&](const std::string& parent) {
    for (const auto& node : world_.children(parent))
      if (node.ephemeral_owner != 0) out.push_back(parent + "/" + node.name);
  };
  if (r.kind == ResourceKind::semaphore && r.semaphore_layout == SemaphoreLayout::curator_v2) {
    add(r.path + "/leases");
    add(r.path + "/locks");
  } else if (r.kind == ResourceKind::semaphore && r.semaphore_layout == SemaphoreLayout::kazoo) {
    add(r.path);
    add(r.path + "-__lock__");
  } else {
    add(r.path);
  }
  return out;
}

// Free: nothing on the server under the path (or fewer leases than the limit and nobody
// counting), no grant the test keeps there, no other acquisition on its way, and no peer there.
bool Swarm::free_for(const Pending& pending) {
  const auto& r = resource(pending.resource);
  if (world_.peers_on(r.path)) return false;  // a peer may come between the look and the acquisition
  for (const auto& other : pending_)
    if (other.get() != &pending && resource(other->resource).path == r.path) return false;
  int unreleased = 0;
  for (const auto& [node, grant] : grants_)
    if (grant.holds > 0 && resource(grant.resource).path == r.path) ++unreleased;
  const auto nodes = contender_nodes(pending.resource);
  if (r.kind != ResourceKind::semaphore) return unreleased == 0 && nodes.empty();
  return unreleased < r.max_leases && static_cast<int>(nodes.size()) < r.max_leases &&
         std::none_of(nodes.begin(), nodes.end(), [](const std::string& node) {
           return node.find("-__lock__") != std::string::npos || node.find("/locks/") != std::string::npos;
         });
}

void Swarm::note_grant(const Pending& pending, const std::shared_ptr<HoldBox>& box) {
  const auto& r = resource(pending.resource);
  std::string node;
  FencingToken token;
  std::int64_t session_id = 0;
  {
    std::lock_guard lock(box->mutex);
    node = box->held().node_path();
    token = box->held().token();
    session_id = box->held().session_id();
  }
  const auto existing = grants_.find(node);
  const bool reentered = existing != grants_.end() && existing->second.holds > 0;
  if (existing != grants_.end() && !reentered) {
    fail("grant", std::string(r.name), fmt::format("{}: granted node {} again after all its holds were released",
                                                   pending.what, node));
    return;
  }
  if (pending.expect_refusal) {
    fail("reentrancy", std::string(r.name),
         fmt::format("{}: expected errc::would_deadlock ({}), got a grant of {}", pending.what, pending.expectation, node));
    return;
  }
  if (!pending.expected_node.empty() && node != pending.expected_node) {
    fail("reentrancy", std::string(r.name),
         fmt::format("{}: expected to reenter {} ({}), got a grant of {}", pending.what, pending.expected_node,
                     pending.expectation, node));
    return;
  }
  if (reentered) {
    const bool has_hold = std::any_of(holds_.begin(), holds_.end(), [&](const Hold& h) {
      return h.node == node && h.owner == pending.actor && !h.released && !h.destroyed;
    });
    if (!has_hold) {
      fail("reentrancy", std::string(r.name),
           fmt::format("{}: reentered grant {} of which this thread holds nothing", pending.what, node));
      return;
    }
    ++existing->second.holds;
    count("reentered");
  } else {
    Grant grant;
    grant.node = node;
    grant.resource = pending.resource;
    grant.slot = pending.slot;
    grant.epoch = pending.epoch;
    grant.session_id = session_id;
    grant.token = token;
    grant.acquisition_event = pending.started_event;
    grant.observed_event = next_event();
    grant.holds = 1;
    grant.step = step_index_;
    check_new_grant(grant, pending);
    auto& series = series_[{pending.slot, pending.epoch, r.path}];
    ++series.asked;
    ++series.grants;
    grants_.emplace(node, std::move(grant));
    count("grants");
  }
  trace("  hold #{}: {} {} (token {}, session {}){}", next_id_, reentered ? "reentered" : "granted", node,
        token.to_string(), session_id_text(session_id), pending.release_in_handler ? ", released by its handler" : "");
  Hold hold;
  hold.id = next_id_++;
  hold.box = box;
  hold.resource = pending.resource;
  hold.slot = pending.slot;
  hold.epoch = pending.epoch;
  hold.lock_object = pending.lock_object;
  hold.owner = pending.actor;
  hold.origin = pending.actor;
  hold.blocking = pending.blocking && is_lock_like(r.kind);
  hold.node = node;
  hold.token = token;
  hold.step = step_index_;
  holds_.push_back(hold);
  watch_loss(holds_.back());
  if (pending.release_in_handler) let_go(holds_.back());
}

void Swarm::watch_loss(Hold& hold) {
  auto& grant = grants_.at(hold.node);
  if (grant.loss_watched) return;
  grant.loss_watched = true;
  std::lock_guard lock(hold.box->mutex);
  hold.box->held().on_lost([told = grant.told](LossReason) { told->store(next_event()); });
}

Hold* Swarm::find_hold(int actor, int resource_index, int which, bool include_released) {
  std::vector<Hold*> candidates;
  for (auto it = holds_.rbegin(); it != holds_.rend(); ++it)
    if (it->owner == actor && it->resource == resource_index && !it->destroyed && (include_released || !it->released))
      candidates.push_back(&*it);
  if (candidates.empty()) return nullptr;
  return candidates[static_cast<std::size_t>(which) % candidates.size()];
}

void Swarm::release_hold(Hold& hold, bool destroy) {
  if (hold.destroyed || (hold.released && !destroy)) return;
  trace("  {} hold #{} ({})", destroy ? "destroy" : "release", hold.id, hold.node);
  std::optional<LossReason> lost_before;
  {
    std::lock_guard lock(hold.box->mutex);
    lost_before = hold.box->held().loss_reason();  // a destroyed HeldLock answers nothing
    if (destroy) {
      hold.box->maybe.reset();
      hold.box->direct = HeldLock{};
    } else {
      hold.box->held().release();
    }
  }
  hold.destroyed = hold.destroyed || destroy;
  let_go(hold, lost_before);
}

// ---- holds ----

bool Swarm::hold_op(const Op& op) {
  auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  const bool fenced = op.kind == OpKind::fenced_commit;
  Hold* found = find_hold(op.actor, op.resource, rank(op), fenced || op.kind == OpKind::gate_admit);
  if (!found) return false;
  const int index = static_cast<int>(found - holds_.data());
  auto hold = [&]() -> Hold& { return holds_[static_cast<std::size_t>(index)]; };
  const auto& r = resource(hold().resource);
  const std::string what = fmt::format("step {} {} (hold #{}, node {})", step_index_, describe(op), hold().id, hold().node);
  auto other_holds = [&] { return grants_.at(hold().node).holds - (hold().released ? 0 : 1); };

  switch (op.kind) {
    case OpKind::release:
    case OpKind::destroy:
      release_hold(hold(), op.kind == OpKind::destroy);
      settle_after(-1);
      return true;

    case OpKind::release_and_confirm: {
      if (!actor.actor.idle()) return false;
      auto box = hold().box;
      auto answer = std::make_shared<std::string>();
      const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(world_.slack() / 3);
      const bool returned = actor.actor.run(
          [box, answer, timeout] {
            std::lock_guard lock(box->mutex);
            try {
              *answer = std::string(to_string(box->held().release_and_confirm(timeout)));
            } catch (const Error& e) {
              *answer = e.code().message();  // a hold its on_lost callback released meanwhile
            }
          },
          world_.slack() * 2);
      if (!returned) fail("hang", std::string(r.name), fmt::format("{}: release_and_confirm did not return", what));
      let_go(hold());
      count(fmt::format("release_and_confirm: {}", *answer));
      settle_after(op.actor);
      return true;
    }

    case OpKind::move: {
      if (other_holds() > 0 && config_.excluded(Exclusion::move_reentrant)) return false;
      int to = destination(op) % config_.actors;
      if (to == op.actor) to = (to + 1) % config_.actors;
      auto& target = *actors_[static_cast<std::size_t>(to)];
      if (!target.actor.idle()) return false;
      auto source = hold().box;
      auto moved = std::make_shared<std::shared_ptr<HoldBox>>();
      // Move-constructed on the destination's thread, as a program hands a lock to a worker.
      const bool returned = target.actor.run(
          [source, moved] {
            std::lock_guard lock(source->mutex);
            *moved = std::make_shared<HoldBox>(HoldBox::FromHeld{}, [&] { return std::move(source->held()); });
          },
          world_.slack());
      if (!returned) {
        fail("hang", std::string(r.name), fmt::format("{}: moving the HeldLock did not return", what));
        return true;
      }
      Hold copy = hold();
      hold().destroyed = true;  // moved from: empty
      hold().released = true;
      copy.id = next_id_++;
      copy.box = *moved;
      copy.owner = to;
      copy.moved = true;
      copy.release_on_loss = false;  // its callback releases the box it was registered with: now empty
      copy.step = step_index_;
      holds_.push_back(copy);
      count("moves");
      return true;
    }

    case OpKind::release_on_loss: {
      auto box = hold().box;
      auto ran = std::make_shared<std::atomic<bool>>(false);
      bool lost_already = false;
      {
        std::lock_guard lock(box->mutex);
        lost_already = box->held().lost();
        box->held().on_lost([weak = std::weak_ptr<HoldBox>(box), ran](LossReason) {
          ran->store(true);
          if (auto held = weak.lock()) {
            std::lock_guard inner(held->mutex);
            held->held().release();  // from the callback thread
          }
        });
      }
      hold().release_on_loss = true;
      // Registered on a grant already lost: it runs at once (zkr/lock.hpp), checked with the
      // losses told.
      if (lost_already) late_loss_callbacks_.push_back({std::move(ran), what, step_index_});
      return true;
    }

    case OpKind::gate_admit: {
      auto& gate = *gate_;
      const FencingToken before = gate.highest.count(r.path) ? gate.highest[r.path] : FencingToken{};
      bool admitted = false;
      try {
        admitted = gate.gate->admit(r.path, hold().token);
      } catch (const Error& e) {
        fail("fence gate", std::string(r.name), fmt::format("{}: admit threw {}", what, e.what()));
        return true;
      }
      check_gate(hold(), admitted, before);
      return true;
    }

    case OpKind::fenced_commit: {
      const bool release_first = hold_variant(op);
      const bool released_hold = hold().released || release_first;
      if (released_hold && other_holds() > 0 && config_.excluded(Exclusion::fenced_released_hold)) return false;
      if (!healthy(hold().slot) || !actor.actor.idle()) return false;
      if (release_first) release_hold(hold(), false);
      const int others = grants_.at(hold().node).holds;
      auto box = hold().box;
      auto result = std::make_shared<std::pair<bool, std::string>>(false, "");
      const std::string target = data_node(r);
      const std::string value = hold().token.to_string();
      const bool returned = actor.actor.run(
          [box, result, target, value] {
            std::lock_guard lock(box->mutex);
            try {
              FencedTransaction(box->held()).set(target, value).commit();
              result->first = true;
            } catch (const Error& e) {
              result->second = e.what();
              if (e.code() != errc::lock_lost) result->second = "unexpected: " + result->second;
            }
          },
          world_.slack() * 2);
      if (!returned) {
        fail("hang", std::string(r.name), fmt::format("{}: FencedTransaction::commit did not return", what));
        return true;
      }
      count(result->first ? "fenced commits accepted" : "fenced commits refused");
      if (result->first && hold().released)
        fail("fenced commit", std::string(r.name),
             fmt::format("{}: a FencedTransaction made from a released HeldLock committed (its grant {} has {} "
                         "other hold(s) still; fenced.hpp: once it is released, commit() is refused)",
                         what, hold().node, others));
      settle_after(op.actor);
      return true;
    }
    default:
      return false;
  }
}

bool Swarm::gate_reopen() {
  auto& gate = *gate_;
  gate.gate.reset();
  try {
    gate.gate = std::make_unique<DurableFenceGate>(gate.file());
  } catch (const Error& e) {
    fail("fence gate", "", fmt::format("step {}: reopening the gate failed: {}", step_index_, e.what()));
    return true;
  }
  for (const auto& [key, token] : gate.highest)
    if (gate.gate->highest(key) != token)
      fail("fence gate", "",
           fmt::format("step {}: after reopening, the gate's highest token for {} is {}, expected {}", step_index_, key,
                       gate.gate->highest(key) ? gate.gate->highest(key)->to_string() : "none", token.to_string()));
  count("gate reopened");
  return true;
}

// ---- batches ----

bool Swarm::batch_op(const Op& op) {
  auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  if (!actor.actor.idle()) return false;
  if (op.kind == OpKind::batch_open) {
    if (actor.batch) return false;
    auto& slot = *slots_[static_cast<std::size_t>(op.session)];
    const bool first = std::none_of(actors_.begin(), actors_.end(), [&](const auto& other) {
      return other->batch && other->batch_effective && other->batch_slot == op.session &&
             other->batch_epoch == slot.epoch;
    });
    Session* s = slot.session.get();
    auto made = std::make_shared<std::unique_ptr<AcquisitionBatch>>();
    if (!actor.actor.run([s, made] { *made = std::make_unique<AcquisitionBatch>(*s); }, world_.slack())) {
      fail("hang", "", fmt::format("step {} {}: AcquisitionBatch's constructor did not return", step_index_, describe(op)));
      return true;
    }
    actor.batch = std::move(*made);
    actor.batch_slot = op.session;
    actor.batch_epoch = slot.epoch;
    actor.batch_effective = first;
    count("batches");
    return true;
  }
  if (!actor.batch) return false;
  auto batch = std::make_shared<std::unique_ptr<AcquisitionBatch>>(std::move(actor.batch));
  const bool send = op.kind == OpKind::batch_send;
  const bool returned = actor.actor.run(
      [batch, send] {
        if (send) (*batch)->send();
        batch->reset();  // a sent batch's destructor sends nothing
      },
      world_.slack());
  if (!returned) fail("hang", "", fmt::format("step {} {}: sending the batch did not return", step_index_, describe(op)));
  for (auto& pending : pending_)
    if (pending->actor == op.actor && pending->held_back) pending->held_back = false;
  actor.batch_slot = -1;
  actor.batch_effective = false;
  settle_after(op.actor);
  return true;
}

// ---- control ----

bool Swarm::control_op(const Op& op) {
  auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  if (op.kind == OpKind::cancel) {
    bool any = false;
    if (actor.blocking_pending != 0) {
      actor.actor.cancel();
      for (auto& pending : pending_)
        if (pending->id == actor.blocking_pending) pending->stop_requested = any = true;
    }
    if (op.arg != 0)
      for (auto& pending : pending_)
        if (pending->actor == op.actor && !pending->blocking && !pending->unstoppable) {
          pending->stop.request_stop();
          pending->stop_requested = any = true;
        }
    // A stop ends a waiting acquisition at once (cancelled, unless a grant came first), on a healthy
    // session and outside a batch not yet sent: a wait that goes on is a hang.
    const auto stopped_by = Clock::now() + world_.slack();
    for (auto& pending : pending_)
      if (pending->actor == op.actor && pending->stop_requested && !pending->held_back && healthy(pending->slot) &&
          slots_[static_cast<std::size_t>(pending->slot)]->epoch == pending->epoch &&
          (!pending->prompt_by || *pending->prompt_by > stopped_by)) {
        pending->prompt_by = stopped_by;
        pending->expectation = fmt::format("its stop was requested at step {} on a healthy session", step_index_);
      }
    if (any) settle_after(op.actor);
    return any;
  }
  // await_async: the actor waits (on its own thread, inside its batch's scope if one is open) for
  // its async acquisitions that must end promptly.
  if (!actor.actor.idle()) return false;
  std::vector<std::pair<std::shared_ptr<Outcome>, Clock::time_point>> awaited;
  std::vector<const Pending*> which;
  for (const auto& pending : pending_)
    if (pending->actor == op.actor && !pending->blocking && pending->prompt_by && !pending->held_back) {
      awaited.emplace_back(pending->outcome, *pending->prompt_by);
      which.push_back(pending.get());
    }
  if (awaited.empty()) return false;
  auto late = std::make_shared<std::vector<std::size_t>>();
  const bool returned = actor.actor.run(
      [awaited, late] {
        for (std::size_t i = 0; i < awaited.size(); ++i) {
          for (;;) {
            {
              std::lock_guard lock(awaited[i].first->mutex);
              if (awaited[i].first->done) break;
            }
            if (Clock::now() > awaited[i].second) {
              late->push_back(i);
              break;
            }
            std::this_thread::sleep_for(1ms);
          }
        }
      },
      world_.slack() * 4);
  if (!returned || !late->empty()) {
    const Pending& first = *which[late->empty() ? 0 : late->front()];
    fail("hang", std::string(resource(first.resource).name),
         fmt::format("step {} {}: waiting on its thread for {} which did not end within its bound ({}){}", step_index_,
                     describe(op), first.what, first.expectation,
                     actor.batch ? " - the thread has an AcquisitionBatch open" : ""));
  }
  settle_after(op.actor);
  return true;
}

}  // namespace zkr::swarm
