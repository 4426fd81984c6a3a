// SPDX-License-Identifier: Apache-2.0
// The soak's checker: reads a run directory (client logs, store journal, fault log, end state) and
// counts what must be zero and what must not be.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace zkr::soak {

struct CheckReport {
  // Acquisitions.
  std::uint64_t attempts = 0, grants = 0, timeouts = 0, failures = 0;
  std::map<std::string, std::uint64_t> endings;  // how beliefs ended: released, lost, fenced, killed...
  std::map<std::string, std::uint64_t> faults;   // injected faults by kind
  std::uint64_t client_processes = 0;             // START records (first starts and restarts)

  // Must be zero.
  std::uint64_t duplicate_tokens = 0;       // two grants carrying one token
  std::uint64_t out_of_order_grants = 0;    // a grant believed after an earlier grant with a larger token was released
  std::uint64_t accepted_stale_writes = 0;  // store accepted a token lower than one it had accepted before
  std::uint64_t lost_acknowledged_updates = 0;  // acknowledged increments missing from the final counter
  std::uint64_t orphan_nodes = 0;           // lock nodes left with no live owner at the end
  // A job told of the loss and still stopping (gracefully, within half its lead time) while the
  // next holder was already granted, its client neither frozen nor force-expired.
  std::uint64_t stopping_job_overlaps = 0;

  // Must be above zero when holders were frozen past the session timeout.
  std::uint64_t overlapping_beliefs = 0;     // pairs of grants believed at the same moment
  std::uint64_t grants_in_overlaps = 0;      // grants that were part of at least one such pair
  std::uint64_t stale_reads_refused = 0;
  std::uint64_t stale_writes_refused = 0;

  // For the record.
  std::uint64_t late_grant_records = 0;
  std::uint64_t graceful_stops = 0;  // STOPPING records: jobs that wound down after being told  // out of order only because the client was frozen between grant and log
  std::uint64_t overlaps_without_freeze_or_expiry = 0;  // earlier holder neither frozen nor force-expired
  std::uint64_t acknowledged_writes = 0, accepted_writes = 0;
  std::int64_t final_counter = 0;
  std::int64_t duration_ns = 0;
  std::vector<std::string> details;  // the first violations, for a human

  bool must_be_zero_all_zero() const {
    return duplicate_tokens == 0 && out_of_order_grants == 0 && accepted_stale_writes == 0 &&
           lost_acknowledged_updates == 0 && orphan_nodes == 0 && stopping_job_overlaps == 0;
  }
  bool races_exercised() const { return overlapping_beliefs > 0 && stale_reads_refused + stale_writes_refused > 0; }
};

// Throws std::runtime_error if the directory lacks what a run leaves.
CheckReport check_run(const std::filesystem::path& run_dir);

std::string format_report(const CheckReport& report);

}  // namespace zkr::soak
