// SPDX-License-Identifier: Apache-2.0
// Operations on leader latches, the leader selector and leader watches. Terms are recorded as
// they begin and end (on the callback thread, or the selector's own thread) and harvested into
// grants like a lock's, so that the same invariants hold for them: one leader whose node stands,
// tokens that grow per path, every loss explained.
#include <algorithm>
#include <thread>

#include <fmt/format.h>

#include <zkr/error.hpp>
#include <zkr/fenced.hpp>

#include "slots.hpp"

namespace zkr::swarm {

using namespace std::chrono_literals;

namespace {

TermEvent term_event(LeadershipEvent event, const Leadership& term) {
  return {event, term.node_path(), term.token(), term.session_id(), next_event()};
}

}  // namespace

Swarm::LatchSlot& Swarm::latch(int slot_index, int resource_index) {
  auto& slot = *slots_[static_cast<std::size_t>(slot_index)];
  auto& made = slot.latches[resource_index];
  if (made) return *made;
  made = std::make_unique<LatchSlot>();
  const auto& r = resource(resource_index);
  made->latch = std::make_unique<LeaderLatch>(
      *slot.session, r.path, ElectionOptions{fmt::format("swarm-s{}", slot_index), NodeAcl::open, r.election_layout});
  auto shared = made->shared;
  shared->latch = made->latch.get();
  made->listener = made->latch->on_change([shared](LeadershipEvent event, const Leadership& term) {
    std::lock_guard lock(shared->mutex);
    shared->events.push_back(term_event(event, term));
    if (event == LeadershipEvent::gained && shared->close_on_gain && shared->latch) {
      shared->close_on_gain = false;
      shared->closed_by_listener = true;
      shared->latch->close();  // from the callback thread
    }
  });
  return *made;
}

// A latch that joins on an actor's thread inside that actor's open AcquisitionBatch (start, or
// resign's join at the back) joins when the batch is sent.
void Swarm::note_join_held_back(LatchSlot& latch, const Op& op) {
  const auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  if (actor.batch && actor.batch_effective && actor.batch_slot == op.session &&
      actor.batch_epoch == slots_[static_cast<std::size_t>(op.session)]->epoch)
    latch.held_back_by = op.actor;
}

Swarm::SelectorSlot& Swarm::selector(int slot_index) {
  auto& slot = *slots_[static_cast<std::size_t>(slot_index)];
  if (slot.selector) return *slot.selector;
  slot.selector = std::make_unique<SelectorSlot>();
  auto shared = slot.selector->shared;
  const auto& r = *std::find_if(resources().begin(), resources().end(),
                                [](const Resource& each) { return each.kind == ResourceKind::selector; });
  SelectorOptions options;
  options.participant_data = fmt::format("swarm-s{}", slot_index);
  options.layout = r.election_layout;
  options.auto_requeue = config_.selector_auto_requeue;
  slot.selector->selector = std::make_unique<LeaderSelector>(
      *slot.session, r.path,
      [shared](const Leadership& term) {
        std::unique_lock lock(shared->mutex);
        shared->running = term;
        shared->events.push_back(term_event(LeadershipEvent::gained, term));
        if (shared->close_inside && shared->selector) {
          shared->close_inside = false;
          LeaderSelector* self = shared->selector;
          lock.unlock();
          self->close();  // from its own leadership function: returns at once
          lock.lock();
        } else {
          shared->changed.wait(lock, term.ended_token(), [&] { return shared->yield; });
          shared->yield = false;
        }
        shared->running.reset();
        shared->events.push_back(term_event(term.lost() ? LeadershipEvent::lost : LeadershipEvent::resigned, term));
      },
      options);
  std::lock_guard lock(shared->mutex);
  shared->selector = slot.selector->selector.get();
  return *slot.selector;
}

bool Swarm::election_op(const Op& op) {
  const auto& r = resource(op.resource);
  if (!is_election(r.kind)) return false;
  auto& slot = *slots_[static_cast<std::size_t>(op.session)];
  auto& actor = *actors_[static_cast<std::size_t>(op.actor)];
  if (!actor.actor.idle()) return false;
  const std::string what = fmt::format("step {} {}", step_index_, describe(op));
  // Runs `call` on the actor; a call that must end by itself does so within `bound`.
  auto on_actor = [&](std::function<void()> call, std::chrono::milliseconds bound) {
    auto problem = std::make_shared<std::string>();
    const bool returned = actor.actor.run(
        [call, problem] {
          try {
            call();
          } catch (const Error& e) {
            if (e.code() == errc::internal_error) *problem = e.what();
          } catch (const std::exception& e) {
            *problem = fmt::format("threw {}", e.what());
          }
        },
        bound);
    if (!returned) fail("hang", std::string(r.name), fmt::format("{}: did not return within {} ms", what, bound.count()));
    else if (!problem->empty()) fail("exception", std::string(r.name), fmt::format("{}: {}", what, *problem));
    settle_after(op.actor);
    return true;
  };
  const auto slack = world_.slack();

  if (op.kind == OpKind::watch_start || op.kind == OpKind::watch_stop || op.kind == OpKind::watch_stop_inside) {
    auto& made = slot.watches[op.resource];
    if (op.kind == OpKind::watch_stop) {
      if (!made || made->stopped) return false;
      made->stopped = true;
      LeaderWatch* watch = made->watch.get();
      return on_actor([watch] { watch->stop(); }, slack);
    }
    if (op.kind == OpKind::watch_stop_inside) {
      if (!made || made->stopped) return false;
      std::lock_guard lock(made->shared->mutex);
      made->shared->stop_inside = true;
      return true;
    }
    if (made && !made->stopped) return false;
    made.reset();  // a stopped watch goes; a new one starts
    made = std::make_unique<WatchSlot>();
    auto shared = made->shared;
    Session* s = slot.session.get();
    auto created = std::make_shared<std::unique_ptr<LeaderWatch>>();
    const std::string path = r.path;
    on_actor(
        [s, path, shared, created] {
          *created = std::make_unique<LeaderWatch>(*s, path, [shared](const std::optional<Participant>&) {
            std::lock_guard lock(shared->mutex);
            ++shared->calls;
            if (shared->stop_inside && shared->watch) {
              shared->stop_inside = false;
              shared->stopped_inside = true;
              shared->watch->stop();  // from its own callback: returns at once
            }
          });
          std::lock_guard lock(shared->mutex);
          shared->watch = created->get();
        },
        slack);
    made->watch = std::move(*created);
    slot.used_elections = true;
    return true;
  }

  if (op.kind == OpKind::cache_start) {
    if (slot.cache && !slot.cache->error()) return false;  // one live cache per session
    slot.cache.reset();
    Session* s = slot.session.get();
    auto created = std::make_shared<std::unique_ptr<TreeCache>>();
    auto told = std::make_shared<CacheTold>();
    // A callback slower than the changes, and a small bound: events wait, several for one node,
    // and merge past the bound.
    auto callback = [told](const CacheEvent& event) {
      std::this_thread::sleep_for(500us);
      std::lock_guard lock(told->mutex);
      if (event.kind == CacheEvent::Kind::added || event.kind == CacheEvent::Kind::updated)
        told->nodes[event.path] = {event.node.stat.ephemeral_owner, event.node.stat.mzxid};
      else if (event.kind == CacheEvent::Kind::removed)
        told->nodes.erase(event.path);
    };
    on_actor([s, created, callback] {
      *created = std::make_unique<TreeCache>(*s, std::string(kRoot), callback, TreeCacheOptions{.max_pending_events = 4});
    }, slack);
    slot.cache = std::move(*created);
    slot.cache_told = std::move(told);
    return true;
  }
  if (op.kind == OpKind::cache_stop) {
    if (!slot.cache) return false;
    TreeCache* cache = slot.cache.get();
    const bool done = on_actor([cache] { cache->stop(); }, slack);
    if (done) slot.cache.reset();
    return done;
  }

  slot.used_elections = true;
  if (r.kind == ResourceKind::selector) {
    auto& sel = selector(op.session);
    auto shared = sel.shared;
    LeaderSelector* raw = sel.selector.get();
    switch (op.kind) {
      case OpKind::selector_start:
        if (sel.closed) return false;
        if (!sel.started) {
          sel.started = true;
          return on_actor([raw] { raw->start(); }, slack);
        }
        return on_actor([raw] { raw->requeue(); }, slack);
      case OpKind::selector_close:
        if (sel.closed) return false;
        sel.closed = true;
        // close() waits for the running function, which returns once its term ends.
        return on_actor([raw] { raw->close(); }, slack * 2);
      case OpKind::selector_yield: {
        std::lock_guard lock(shared->mutex);
        if (!shared->running) return false;
        shared->yield = true;
        shared->changed.notify_all();
        return true;
      }
      case OpKind::selector_close_inside: {
        std::lock_guard lock(shared->mutex);
        shared->close_inside = true;
        return true;
      }
      default: return false;
    }
  }

  if (r.kind != ResourceKind::latch) return false;
  auto& l = latch(op.session, op.resource);
  LeaderLatch* raw = l.latch.get();
  switch (op.kind) {
    case OpKind::latch_start:
      if (l.closed) return false;
      l.started = true;
      note_join_held_back(l, op);
      return on_actor([raw] { raw->start(); }, slack);
    case OpKind::latch_close:
      if (l.closed) return false;
      l.closed = true;
      return on_actor([raw] { raw->close(); }, slack);
    case OpKind::latch_resign:
      note_join_held_back(l, op);  // it joins again at the back
      return on_actor([raw] { raw->resign(); }, slack);
    case OpKind::latch_wait: {
      if (!l.started) return false;
      const auto timeout = wait_timeout(op);
      return on_actor([raw, timeout] { raw->wait_for_leadership(timeout); },
                      std::chrono::duration_cast<std::chrono::milliseconds>(timeout) + slack);
    }
    case OpKind::latch_async_wait: {
      if (!l.started) return false;
      auto pending = new_pending(op);
      const auto timeout = wait_timeout(op) + 50ms;
      pending->prompt_by = pending->started + std::chrono::duration_cast<Clock::duration>(timeout + slack);
      pending->expectation = "its timeout";
      auto outcome = pending->outcome;
      auto token = pending->stop.get_token();
      pending_.push_back(std::move(pending));
      return on_actor(
          [raw, timeout, outcome, token] {
            raw->async_wait_for_leadership(
                timeout,
                [outcome](std::error_code ec, Leadership) {
                  std::lock_guard lock(outcome->mutex);
                  outcome->ec = ec;
                  outcome->done = true;
                },
                token);
          },
          slack);
    }
    case OpKind::latch_fenced: {
      if (!healthy(op.session)) return false;
      const Leadership term = raw->leadership();
      if (!term) return false;
      const bool ended_before = term.ended();
      const std::string target = data_node(r);
      auto refused = std::make_shared<std::string>();
      on_actor(
          [term, target, refused] {
            try {
              FencedTransaction(term).set(target, term.token().to_string()).commit();
            } catch (const Error& e) {
              *refused = e.what();
            }
          },
          slack * 2);
      count(refused->empty() ? "fenced commits accepted" : "fenced commits refused");
      if (refused->empty() && ended_before)
        fail("fenced commit", std::string(r.name),
             fmt::format("{}: a FencedTransaction from a term that had ended ({}) committed", what, term.node_path()));
      return true;
    }
    case OpKind::latch_close_on_gain: {
      std::lock_guard lock(l.shared->mutex);
      l.shared->close_on_gain = true;
      return true;
    }
    default: return false;
  }
}

// Terms begun and ended become grants (resource: the election) with the same checks as locks'.
void Swarm::harvest_elections() {
  auto take = [&](int slot_index, int epoch, int resource_index, std::vector<TermEvent> events) {
    for (const auto& event : events) {
      if (failed()) return;
      if (event.event == LeadershipEvent::gained) {
        if (grants_.count(event.node)) continue;  // a latch told again of a term it holds
        Grant grant;
        grant.node = event.node;
        grant.resource = resource_index;
        grant.slot = slot_index;
        grant.epoch = epoch;
        grant.session_id = event.session_id;
        grant.token = event.token;
        grant.acquisition_event = event.seq;
        grant.observed_event = event.seq;
        grant.step = step_index_;
        Pending seen;
        seen.what = fmt::format("the term of {} on {}", event.node, resource(resource_index).name);
        seen.started_event = event.seq;
        check_new_grant(grant, seen);
        grants_.emplace(event.node, std::move(grant));
        count("terms");
        continue;
      }
      auto found = grants_.find(event.node);
      if (found == grants_.end()) continue;
      if (found->second.ended_event == 0) found->second.ended_event = event.seq;
    }
  };
  for (auto& slot : slots_) {
    for (auto& [index, made] : slot->latches) {
      std::vector<TermEvent> events;
      {
        std::lock_guard lock(made->shared->mutex);
        events.swap(made->shared->events);
      }
      take(slot->slot, slot->epoch, index, std::move(events));
    }
    if (slot->selector) {
      std::vector<TermEvent> events;
      {
        std::lock_guard lock(slot->selector->shared->mutex);
        events.swap(slot->selector->shared->events);
      }
      const int index = static_cast<int>(std::find_if(resources().begin(), resources().end(),
                                                      [](const Resource& r) { return r.kind == ResourceKind::selector; }) -
                                         resources().begin());
      take(slot->slot, slot->epoch, index, std::move(events));
    }
  }
}

void Swarm::close_elections() {
  for (auto& slot : slots_) {
    if (slot->cache) slot->cache->stop();
    for (auto& [index, made] : slot->watches)
      if (made && made->watch) made->watch->stop();
    if (slot->selector && slot->selector->selector) slot->selector->selector->close();
    for (auto& [index, made] : slot->latches)
      if (made->latch) made->latch->close();
  }
}

}  // namespace zkr::swarm
