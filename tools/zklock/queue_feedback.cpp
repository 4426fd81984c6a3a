// SPDX-License-Identifier: Apache-2.0
#include "queue_feedback.hpp"

#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "contender_report.hpp"
#include "messages.hpp"
#include "run_events.hpp"

namespace zklock {

bool QueuePlace::same_as(const QueuePlace& other) const {
  return position == other.position && waiters == other.waiters &&
         std::equal(holders.begin(), holders.end(), other.holders.begin(), other.holders.end(),
                    [](const auto& a, const auto& b) { return a.node == b.node; });
}

std::optional<QueuePlace> queue_place(const std::vector<zkr::ContenderInfo>& contenders, std::int64_t session_id) {
  QueuePlace place;
  for (const auto& contender : contenders) {
    if (contender.holds) {
      place.holders.push_back(contender);
      continue;
    }
    ++place.waiters;
    if (contender.session_id == session_id && place.position == 0) place.position = place.waiters;
  }
  if (place.position == 0) return std::nullopt;
  return place;
}

std::string describe_queue_place(std::string_view lock_path, const QueuePlace& place) {
  const std::string ahead =
      place.position == 1 ? std::string("next") : fmt::format("{} ahead", place.position - 1);
  const std::string holders = place.holders.empty() ? std::string("no holder now") : "held by " + describe_holders(place.holders);
  return fmt::format("queued for {}: position {} ({}), {}", lock_path, place.position, ahead, holders);
}

QueueFeedback::QueueFeedback(zkr::Session& session, const CliOptions& options, std::shared_ptr<Inbox> inbox)
    : session_(session), options_(options), inbox_(std::move(inbox)) {
  if (options.nonblocking()) return;  // no waiting, no feedback
  record_it_ = json_log();
  say_it_ = !record_it_ && !options.quiet() && (options.verbose() || (!options.log_file && ::isatty(STDERR_FILENO)));
}

void QueueFeedback::refresh() noexcept {
  if (!enabled()) return;
  try {
    try {
      session_.children(options_.lock_path, [inbox = inbox_](zkr::NodeEvent) { inbox->post_path_changed(); });
      watching_ = true;
    } catch (const zkr::Error& error) {
      watching_ = false;
      if (error.code() != zkr::zk_errc::no_node) return;
    }
    const int max_holders = options_.kind == LockKind::semaphore ? options_.slots : 1;
    const auto place = queue_place(zkr::list_contenders(session_, options_.lock_path, max_holders), session_.id());
    if (!place || (told_ && told_->same_as(*place))) return;
    told_ = place;
    // The line says the place and the holders, not how many wait behind: a change there alone
    // (one more waiter queued) is a new record, not a new line.
    if (say_it_) {
      std::string line = describe_queue_place(options_.lock_path, *place);
      if (line != said_) say("{}", line);
      said_ = std::move(line);
    }
    if (record_it_) {
      std::vector<QueueHolder> holders;
      for (const auto& holder : place->holders) holders.push_back({holder.token.value(), holder.session_id, holder.owner_data});
      run_events().queued(place->position, place->waiters, holders);
    }
  } catch (...) {
    // Feedback only: the next change (or poll) tries again.
  }
}

}  // namespace zklock
