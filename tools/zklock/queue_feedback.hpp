// SPDX-License-Identifier: Apache-2.0
// Feedback while queued: where a waiting zklock stands (its place in the queue) and who holds the
// lock, said again each time either changes: a line each change, not a spinner. On a terminal
// (stderr) or with -v, as a message; with --log-format json, as a "queued" record, which also
// counts the waiters (so one more waiter behind makes a record, not a line).
//
// zklock's own node is found by its session (the queue's nodes carry their owner's session), so
// nothing of the recipe's internals is needed: the same listing --list reads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/lock.hpp>
#include <zkr/session.hpp>

#include "cli_options.hpp"
#include "inbox.hpp"

namespace zklock {

struct QueuePlace {
  int position = 0;  // 1: next in line
  int waiters = 0;
  std::vector<zkr::ContenderInfo> holders;

  // The same place behind the same holders (their nodes).
  bool same_as(const QueuePlace& other) const;
};

// The place of `session_id`'s waiting node among `contenders` (list_contenders(): holders first,
// then waiters in queue order), or nothing if that session has no waiting node there.
std::optional<QueuePlace> queue_place(const std::vector<zkr::ContenderInfo>& contenders, std::int64_t session_id);

// "queued for /jobs/a: position 2 (1 ahead), held by session 0x... (owner "...", since ...)"
std::string describe_queue_place(std::string_view lock_path, const QueuePlace& place);

class QueueFeedback {
 public:
  // Does nothing unless there is someone to tell (see the top of this file).
  QueueFeedback(zkr::Session& session, const CliOptions& options, std::shared_ptr<Inbox> inbox);

  bool enabled() const { return say_it_ || record_it_; }
  // Reads the queue again and tells if the place or the holders changed. Sets a watch on the path's
  // children that posts to the Inbox (post_path_changed): call again when it fired. Never throws:
  // a listing that fails is tried again at the next call.
  void refresh() noexcept;
  // Whether refresh() found no watch to set (the path is not there yet): call it again soon.
  bool needs_poll() const { return enabled() && !watching_; }

 private:
  zkr::Session& session_;
  const CliOptions& options_;
  std::shared_ptr<Inbox> inbox_;
  bool say_it_ = false;
  bool record_it_ = false;
  bool watching_ = false;
  std::optional<QueuePlace> told_;
  std::string said_;  // the last line said
};

}  // namespace zklock
