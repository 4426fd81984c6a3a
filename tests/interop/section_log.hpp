// SPDX-License-Identifier: Apache-2.0
// The shared log of critical sections that every interop participant, ours and theirs, appends to
// (one O_APPEND write per line, CLOCK_MONOTONIC nanoseconds), and its checker.
//
//   ENTER <who> <ns> [<token>]   after the grant; the token is the fencing token where known
//   EXIT <who> <ns>              before the release
//   KILLED <who> <ns>            written by the test once <who>'s process is dead: ends its open section
//   FROZEN <who> <ns> <outlives> written by the test before SIGSTOP; <outlives> is 1 when the freeze
//   THAWED <who> <ns>            lasts longer than <who>'s session timeout (its session may expire)
//
// The recorded section lies inside the real one, so an overlap in the log proves two participants
// held at once, except where a participant was frozen past its session: then the server ended its
// term while it could not know, and only the fencing token orders the two (see fenced_overlaps).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace zkr::test {

inline std::int64_t monotonic_ns() {
  return std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch()).count();  // CLOCK_MONOTONIC
}

// The shared log, as the test and its in-process participants write it.
class SectionLog {
 public:
  SectionLog() {
    std::random_device random;
    file_ = (std::filesystem::temp_directory_path() / fmt::format("zkr-interop-{:08x}.log", random())).string();
    fd_ = ::open(file_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_TRUNC, 0644);
    if (fd_ < 0) throw std::runtime_error("cannot create " + file_);
  }
  ~SectionLog() {
    ::close(fd_);
    std::filesystem::remove(file_);
  }
  SectionLog(const SectionLog&) = delete;
  SectionLog& operator=(const SectionLog&) = delete;
  const std::string& file() const { return file_; }

  void record(std::string_view event, std::string_view who, std::string_view extra = {}) {
    const std::string line = extra.empty() ? fmt::format("{} {} {}\n", event, who, monotonic_ns())
                                           : fmt::format("{} {} {} {}\n", event, who, monotonic_ns(), extra);
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw std::runtime_error("short write to " + file_);
  }

 private:
  std::string file_;
  int fd_ = -1;
};

struct Section {
  std::string who;
  std::int64_t enter = 0;
  std::int64_t exit = 0;
  std::int64_t token = 0;  // 0: not logged
  bool killed = false;     // ended by KILLED, not by EXIT
};

struct Freeze {
  std::int64_t from = 0;
  std::int64_t to = 0;
  bool outlives_session = false;
};

struct SectionRecord {
  std::vector<Section> sections;                      // sorted by enter
  std::map<std::string, std::vector<Freeze>> freezes;  // by participant
};

// Pairs each participant's ENTER with its next EXIT (or KILLED). A malformed or unpaired line
// fails the test.
inline SectionRecord read_sections(const std::string& file) {
  std::ifstream in(file);
  std::map<std::string, Section> open;
  std::map<std::string, Freeze> frozen;
  SectionRecord record;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string event, who;
    std::int64_t at = 0;
    if (!(fields >> event >> who >> at)) {
      ADD_FAILURE() << "malformed log line: " << line;
      continue;
    }
    if (event == "ENTER") {
      if (open.count(who)) ADD_FAILURE() << who << " entered twice";
      Section section{who, at, 0, 0, false};
      fields >> section.token;
      open[who] = section;
    } else if (event == "EXIT" || event == "KILLED") {
      auto it = open.find(who);
      if (it == open.end()) {
        if (event == "EXIT") ADD_FAILURE() << who << " left without entering";
        continue;
      }
      it->second.exit = at;
      it->second.killed = event == "KILLED";
      record.sections.push_back(it->second);
      open.erase(it);
    } else if (event == "FROZEN") {
      int outlives = 0;
      fields >> outlives;
      frozen[who] = Freeze{at, 0, outlives != 0};
    } else if (event == "THAWED") {
      auto it = frozen.find(who);
      if (it == frozen.end()) {
        ADD_FAILURE() << who << " thawed without a freeze";
        continue;
      }
      it->second.to = at;
      record.freezes[who].push_back(it->second);
      frozen.erase(it);
    } else {
      ADD_FAILURE() << "unknown event: " << line;
    }
  }
  for (const auto& [who, section] : open) ADD_FAILURE() << who << " never left";
  for (const auto& [who, freeze] : frozen) ADD_FAILURE() << who << " never thawed";
  std::sort(record.sections.begin(), record.sections.end(),
            [](const Section& a, const Section& b) { return a.enter < b.enter; });
  return record;
}

using Excludes = std::function<bool(const Section&, const Section&)>;

inline std::string describe(const Section& a, const Section& b) {
  return fmt::format("{} [{}, {}] token {} overlaps {} [{}, {}] token {}", a.who, a.enter, a.exit, a.token, b.who,
                     b.enter, b.exit, b.token);
}

// Every pair of overlapping sections that must exclude each other, as pairs of indices into
// `sections` (sorted by enter).
inline std::vector<std::pair<std::size_t, std::size_t>> overlapping_pairs(const std::vector<Section>& sections,
                                                                          const Excludes& excludes) {
  std::vector<std::pair<std::size_t, std::size_t>> found;
  for (std::size_t i = 0; i < sections.size(); ++i)
    for (std::size_t j = i + 1; j < sections.size() && sections[j].enter < sections[i].exit; ++j)
      if (excludes(sections[i], sections[j])) found.emplace_back(i, j);
  return found;
}

// Every pair of sections that overlap although they must exclude each other, as text.
inline std::vector<std::string> overlaps(const std::vector<Section>& sections, const Excludes& excludes) {
  std::vector<std::string> found;
  for (const auto& [i, j] : overlapping_pairs(sections, excludes)) found.push_back(describe(sections[i], sections[j]));
  return found;
}

// Overlaps split into those the fencing token orders and the rest. An overlap is fenced when both
// tokens are known and the holder of the lower one was frozen past its session timeout in a
// freeze that began before the overlap did and ended no earlier than `slack` before that holder's
// ENTER (a freeze between the grant and the ENTER line counts: the term was granted before it).
// Such a holder's session may have expired while it was stopped, and the next term rightly
// began; its late work carries the lower token, which a fenced resource refuses. Any other
// overlap is two leaders at once.
struct OverlapCount {
  std::vector<std::string> unfenced;
  int fenced = 0;
};

inline OverlapCount classify_overlaps(const SectionRecord& record, const Excludes& excludes,
                                      std::chrono::nanoseconds slack = std::chrono::milliseconds(500)) {
  OverlapCount count;
  for (const auto& [i, j] : overlapping_pairs(record.sections, excludes)) {
    const Section& a = record.sections[i];
    const Section& b = record.sections[j];
    bool fenced = false;
    if (a.token > 0 && b.token > 0 && a.token != b.token) {
      const Section& lower = a.token < b.token ? a : b;
      const std::int64_t overlap_start = std::max(a.enter, b.enter);
      if (auto it = record.freezes.find(lower.who); it != record.freezes.end())
        for (const Freeze& freeze : it->second)
          fenced |= freeze.outlives_session && freeze.from < overlap_start && freeze.to >= lower.enter - slack.count();
    }
    if (fenced) ++count.fenced;
    else count.unfenced.push_back(describe(a, b));
  }
  return count;
}

inline std::map<std::string, int> entries_by_participant(const std::vector<Section>& sections) {
  std::map<std::string, int> counts;
  for (const auto& section : sections) ++counts[section.who];
  return counts;
}

inline bool everyone_excludes(const Section&, const Section&) { return true; }

}  // namespace zkr::test
