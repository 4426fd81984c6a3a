// SPDX-License-Identifier: Apache-2.0
#include "checker.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <queue>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "soak_log.hpp"

namespace zkr::soak {
namespace {

struct Grant {
  int client = 0;
  std::int64_t token = 0;
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::string how = "open";
  bool stopped_gracefully = false;  // told lost, the job took a while to stop (STOPPING)
};

struct Interval {
  std::int64_t begin = 0, end = 0;
};

struct AcknowledgedWrite {
  std::int64_t value = 0;
  int client = 0;
};

void note(CheckReport& report, std::string text) {
  if (report.details.size() < 30) report.details.push_back(std::move(text));
}

bool intersects(const std::vector<Interval>& intervals, std::int64_t begin, std::int64_t end) {
  return std::any_of(intervals.begin(), intervals.end(),
                     [&](const Interval& i) { return i.begin <= end && i.end >= begin; });
}

}  // namespace

CheckReport check_run(const std::filesystem::path& run_dir) {
  CheckReport report;
  if (!std::filesystem::exists(run_dir / "store.journal"))
    throw std::runtime_error(fmt::format("{}: no store.journal, not a soak run directory", run_dir.string()));

  // ---- run parameters ----
  std::int64_t session_timeout_ns = 3'000'000'000;
  std::int64_t run_start = 0, run_end = 0;
  {
    std::ifstream in(run_dir / "run.txt");
    for (std::string line; std::getline(in, line);) {
      auto words = split_words(line);
      if (words.size() != 2) continue;
      if (words[0] == "session_timeout_ms") session_timeout_ns = std::stoll(words[1]) * 1'000'000;
      if (words[0] == "start_ns") run_start = std::stoll(words[1]);
      if (words[0] == "end_ns") run_end = std::stoll(words[1]);
    }
  }

  // ---- faults ----
  std::map<int, std::vector<Interval>> frozen;             // per client: SIGSTOPped
  std::map<int, std::vector<Interval>> frozen_or_expired;  // per client: SIGSTOPped or force-expired
  {
    std::ifstream in(run_dir / "faults.log");
    std::map<std::pair<std::string, std::string>, std::int64_t> open;
    for (std::string line; std::getline(in, line);) {
      auto words = split_words(line);
      if (words.size() < 4) continue;
      const std::int64_t at = std::stoll(words[0]);
      const std::string& kind = words[2];
      const std::string& target = words[3];
      if (words[1] == "BEGIN") {
        ++report.faults[kind];
        open[{kind, target}] = at;
      } else if (words[1] == "END") {
        if (!target.starts_with("client-")) continue;
        const int client = std::stoi(target.substr(7));
        const Interval interval{open[{kind, target}], at};
        const bool freeze = kind.starts_with("freeze_holder") || kind.starts_with("freeze_client");
        if (freeze) frozen[client].push_back(interval);
        if (freeze || kind == "expire_session") frozen_or_expired[client].push_back(interval);
      }
    }
  }

  // ---- client logs ----
  std::vector<Grant> grants;
  std::unordered_map<std::string, AcknowledgedWrite> acknowledged;  // op id -> value written
  for (const auto& entry : std::filesystem::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("client-") || !name.ends_with(".log")) continue;
    std::ifstream in(entry.path());
    std::optional<std::size_t> open_grant;
    auto close_open = [&](std::int64_t at, const std::string& how) {
      if (!open_grant) return;
      grants[*open_grant].end = at;
      grants[*open_grant].how = how;
      ++report.endings[how];
      open_grant.reset();
    };
    for (std::string line; std::getline(in, line);) {
      auto words = split_words(line);
      if (words.size() < 3) continue;
      const std::int64_t at = std::stoll(words[0]);
      const int client = std::stoi(words[1]);
      const std::string& event = words[2];
      auto fields = key_values(words, 3);
      run_end = std::max(run_end, at);
      if (event == "START") {
        ++report.client_processes;
        close_open(at, "unknown");
      } else if (event == "ATTEMPT") {
        ++report.attempts;
      } else if (event == "TIMEOUT") {
        ++report.timeouts;
      } else if (event == "FAIL") {
        ++report.failures;
      } else if (event == "GRANT") {
        ++report.grants;
        close_open(at, "unknown");
        grants.push_back({client, std::stoll(fields["token"]), at, 0, "open"});
        open_grant = grants.size() - 1;
      } else if (event == "STOPPING") {
        ++report.graceful_stops;
        if (open_grant) grants[*open_grant].stopped_gracefully = true;
      } else if (event == "END") {
        close_open(at, fields["how"]);
      } else if (event == "KILLED") {
        close_open(at, "killed");
      } else if (event == "STOP") {
        close_open(at, "stopped");
      } else if (event == "OP" && fields["op"] == "WRITE" && fields["result"] == "OK") {
        ++report.acknowledged_writes;
        acknowledged[fields["id"]] = {std::stoll(fields["value"]), client};
      }
    }
    close_open(run_end, "open");
  }

  // ---- duplicate tokens ----
  std::map<std::int64_t, int> grants_per_token;
  for (const auto& grant : grants) ++grants_per_token[grant.token];
  for (const auto& [token, count] : grants_per_token) {
    if (count > 1) {
      report.duplicate_tokens += static_cast<std::uint64_t>(count - 1);
      note(report, fmt::format("token {} granted {} times", token, count));
    }
  }

  // ---- overlapping beliefs and out-of-order grants (sweep in order of belief start) ----
  std::sort(grants.begin(), grants.end(), [](const Grant& a, const Grant& b) { return a.start < b.start; });
  {
    std::vector<const Grant*> active;
    // Released beliefs by end time: once a grant was released, no later grant may carry a smaller token.
    std::priority_queue<std::pair<std::int64_t, std::int64_t>, std::vector<std::pair<std::int64_t, std::int64_t>>,
                        std::greater<>>
        released;  // (end, token)
    std::int64_t highest_released = 0;
    std::set<const Grant*> in_overlaps;
    for (const auto& grant : grants) {
      std::erase_if(active, [&](const Grant* other) { return other->end < grant.start; });
      for (const Grant* other : active) {
        if (other->token == grant.token) continue;
        ++report.overlapping_beliefs;
        in_overlaps.insert(other);
        in_overlaps.insert(&grant);
        const Grant& earlier = other->token < grant.token ? *other : grant;
        if (!intersects(frozen_or_expired[earlier.client], earlier.start - 2 * session_timeout_ns, earlier.end)) {
          ++report.overlaps_without_freeze_or_expiry;
          if (earlier.stopped_gracefully) ++report.stopping_job_overlaps;
          note(report, fmt::format("overlap without a freeze or expiry: client {} token {} [{} .. {}] and client {} "
                                   "token {} [{} .. {}]",
                                   other->client, other->token, other->start, other->end, grant.client, grant.token,
                                   grant.start, grant.end));
        }
      }
      active.push_back(&grant);
      while (!released.empty() && released.top().first < grant.start) {
        highest_released = std::max(highest_released, released.top().second);
        released.pop();
      }
      if (grant.token < highest_released) {
        // A grant decided before a freeze is logged after it: the record is late, not the grant.
        if (intersects(frozen[grant.client], grant.start - 2 * session_timeout_ns, grant.start)) {
          ++report.late_grant_records;
        } else {
          ++report.out_of_order_grants;
          note(report, fmt::format("client {} believed token {} from {} after token {} had been released",
                                   grant.client, grant.token, grant.start, highest_released));
        }
      }
      if (grant.how == "released") released.push({grant.end, grant.token});
    }
    report.grants_in_overlaps = in_overlaps.size();
  }

  // ---- the store: stale acceptance, refusals, the counter's chain ----
  {
    std::ifstream in(run_dir / "store.journal");
    std::int64_t highest_accepted = 0;
    std::int64_t counter = 0;
    std::unordered_map<std::string, std::int64_t> accepted_values;
    bool final_seen = false;
    for (std::string line; std::getline(in, line);) {
      auto words = split_words(line);
      if (words.size() >= 5 && words[1] == "FINAL") {
        report.final_counter = std::stoll(words[3]);
        final_seen = true;
        continue;
      }
      if (words.size() != 9) continue;
      const std::string& op = words[2];
      const std::string& op_id = words[4];
      const std::int64_t token = std::stoll(words[5]);
      const bool ok = words[6] == "OK";
      const std::int64_t value = std::stoll(words[7]);
      if (!ok) {
        (op == "READ" ? report.stale_reads_refused : report.stale_writes_refused)++;
        continue;
      }
      if (token < highest_accepted) {
        ++report.accepted_stale_writes;
        note(report, fmt::format("store accepted {} {} with token {} after token {}", op, op_id, token,
                                 highest_accepted));
      }
      highest_accepted = std::max(highest_accepted, token);
      if (op == "WRITE") {
        ++report.accepted_writes;
        // Every accepted increment builds on the one before: a smaller step overwrote an update.
        if (value != counter + 1) {
          const std::int64_t overwritten = counter + 1 - value;
          if (overwritten > 0) report.lost_acknowledged_updates += static_cast<std::uint64_t>(overwritten);
          note(report, fmt::format("write {} set the counter from {} to {}", op_id, counter, value));
        }
        counter = value;
        accepted_values[op_id] = value;
      }
    }
    if (!final_seen) report.final_counter = counter;
    for (const auto& [op_id, write] : acknowledged) {
      auto it = accepted_values.find(op_id);
      if (it == accepted_values.end() || it->second != write.value) {
        ++report.lost_acknowledged_updates;
        note(report, fmt::format("acknowledged write {} of client {} is not in the store", op_id, write.client));
      }
    }
    if (report.final_counter != counter) {
      ++report.lost_acknowledged_updates;
      note(report, fmt::format("final counter {} but the journal's last write set {}", report.final_counter, counter));
    }
  }

  // ---- the end state ----
  {
    std::ifstream in(run_dir / "end.txt");
    if (!in) {
      note(report, "no end.txt: the run did not finish its end checks");
      ++report.orphan_nodes;
    }
    for (std::string line; std::getline(in, line);) {
      auto words = split_words(line);
      if (words.size() != 2) continue;
      if (words[0] == "stray_nodes_while_running" || words[0] == "nodes_after_all_exited")
        report.orphan_nodes += std::stoull(words[1]);
    }
  }
  report.duration_ns = (run_end > run_start && run_start > 0) ? run_end - run_start : 0;
  return report;
}

std::string format_report(const CheckReport& r) {
  std::string out;
  out += fmt::format("duration                        {:.0f} s\n", r.duration_ns / 1e9);
  out += fmt::format("client processes started        {}\n", r.client_processes);
  out += fmt::format("acquisitions tried              {}\n", r.attempts);
  out += fmt::format("acquisitions granted            {}\n", r.grants);
  out += fmt::format("acquisitions timed out          {}\n", r.timeouts);
  out += fmt::format("acquisitions failed             {}\n", r.failures);
  for (const auto& [how, count] : r.endings) out += fmt::format("  beliefs ended {:<17} {}\n", how, count);
  std::uint64_t total_faults = 0;
  for (const auto& [kind, count] : r.faults) total_faults += count;
  out += fmt::format("faults injected                 {}\n", total_faults);
  for (const auto& [kind, count] : r.faults) out += fmt::format("  {:<29} {}\n", kind, count);
  out += "must be zero:\n";
  out += fmt::format("  duplicate tokens              {}\n", r.duplicate_tokens);
  out += fmt::format("  out-of-order grants           {}\n", r.out_of_order_grants);
  out += fmt::format("  accepted stale writes         {}\n", r.accepted_stale_writes);
  out += fmt::format("  lost acknowledged updates     {}\n", r.lost_acknowledged_updates);
  out += fmt::format("  orphan nodes                  {}\n", r.orphan_nodes);
  out += fmt::format("  stopping job overlapping the next grant {}\n", r.stopping_job_overlaps);
  out += "must be above zero under freezes:\n";
  out += fmt::format("  overlapping beliefs (pairs)   {} (grants involved: {})\n", r.overlapping_beliefs,
                     r.grants_in_overlaps);
  out += fmt::format("  stale writes refused          {}\n", r.stale_writes_refused);
  out += fmt::format("  stale reads refused           {}\n", r.stale_reads_refused);
  out += "for the record:\n";
  out += fmt::format("  overlaps w/o freeze or expiry {}\n", r.overlaps_without_freeze_or_expiry);
  out += fmt::format("  late grant records            {}\n", r.late_grant_records);
  out += fmt::format("  graceful stops after a loss   {}\n", r.graceful_stops);
  out += fmt::format("  acknowledged writes           {}\n", r.acknowledged_writes);
  out += fmt::format("  accepted writes               {}\n", r.accepted_writes);
  out += fmt::format("  final counter                 {}\n", r.final_counter);
  for (const auto& detail : r.details) out += fmt::format("detail: {}\n", detail);
  out += fmt::format("verdict: {}\n", r.must_be_zero_all_zero() ? "PASS (every must-be-zero count is zero)"
                                                                 : "FAIL (a must-be-zero count is not zero)");
  return out;
}

}  // namespace zkr::soak
