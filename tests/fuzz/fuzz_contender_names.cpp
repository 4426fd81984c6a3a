// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: contender node names (zkr::parse_contender_name, zkr::sort_by_sequence) for
// ours/Curator's and kazoo's schemes. A recognised name is exactly one of the documented formats:
// it is rebuilt, byte for byte, from what was parsed out of it. Sorting gives a permutation that is
// creation order: numeric without a wrap, serial (modulo 2^32) when the sequences lie within 2^31.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/names.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

namespace {

bool lower_hex(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string_view marker(const zkr::ContenderName& name) {
  const bool kazoo = name.scheme == zkr::ContenderScheme::kazoo;
  switch (name.role) {
    case zkr::ContenderRole::exclusive: return kazoo ? "__lock__" : "lock-";
    case zkr::ContenderRole::read: return kazoo ? "__rlock__" : "__READ__";
    case zkr::ContenderRole::write: return "__WRIT__";
    case zkr::ContenderRole::latch: return "latch-";
  }
  return "?";
}

void check_one(std::string_view child, std::vector<zkr::ContenderName>& parsed) {
  const auto name = zkr::parse_contender_name(child);
  if (!name) return;
  FUZZ_CHECK(name->name == child);
  FUZZ_CHECK(name->sequence >= INT32_MIN && name->sequence <= INT32_MAX);
  char sequence[16];
  std::snprintf(sequence, sizeof sequence, "%010d", static_cast<int>(name->sequence));
  std::string rebuilt;
  if (name->scheme == zkr::ContenderScheme::kazoo) {
    FUZZ_CHECK(name->guid.size() == 32 && lower_hex(name->guid));
    FUZZ_CHECK(name->role == zkr::ContenderRole::exclusive || name->role == zkr::ContenderRole::read);
    rebuilt = name->guid + std::string(marker(*name)) + sequence;
  } else if (name->guid.empty()) {  // Curator's unprotected form: no latch
    FUZZ_CHECK(name->role != zkr::ContenderRole::latch);
    rebuilt = std::string(marker(*name)) + sequence;
  } else {
    const std::string_view guid = name->guid;
    FUZZ_CHECK(guid.size() == 3 + 36 && guid.starts_with("_c_"));
    for (std::size_t i = 3; i < guid.size(); ++i) {
      const bool dash = i - 3 == 8 || i - 3 == 13 || i - 3 == 18 || i - 3 == 23;
      FUZZ_CHECK(dash ? guid[i] == '-' : lower_hex(guid.substr(i, 1)));
    }
    rebuilt = name->guid + "-" + std::string(marker(*name)) + sequence;
  }
  FUZZ_CHECK(rebuilt == child);
  parsed.push_back(*name);
}

std::uint32_t on_circle(const zkr::ContenderName& name) { return static_cast<std::uint32_t>(name.sequence); }

}  // namespace

// The input is one or more names separated by '/' (a character no node name can hold).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<zkr::ContenderName> parsed;
  for (std::size_t start = 0; start <= input.size();) {
    auto slash = input.find('/', start);
    if (slash == std::string_view::npos) slash = input.size();
    check_one(input.substr(start, slash - start), parsed);
    start = slash + 1;
  }
  auto sorted = parsed;
  zkr::sort_by_sequence(sorted);
  FUZZ_CHECK(sorted.size() == parsed.size());
  const auto by_name = [](const auto& a, const auto& b) { return a.name < b.name; };
  auto left = parsed, right = sorted;
  std::sort(left.begin(), left.end(), by_name);
  std::sort(right.begin(), right.end(), by_name);
  for (std::size_t i = 0; i < left.size(); ++i) FUZZ_CHECK(left[i].name == right[i].name);  // a permutation
  if (sorted.empty()) return 0;

  const auto [lowest, highest] = std::minmax_element(
      parsed.begin(), parsed.end(), [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  const bool one_sign = lowest->sequence >= 0 || highest->sequence < 0;
  // The shortest arc of the 2^32 circle that holds every sequence.
  std::vector<std::uint32_t> points;
  for (const auto& name : parsed) points.push_back(on_circle(name));
  std::sort(points.begin(), points.end());
  std::uint64_t widest_gap = 0;
  for (std::size_t i = 0; i < points.size(); ++i)
    widest_gap = std::max<std::uint64_t>(widest_gap, static_cast<std::uint32_t>(points[(i + 1) % points.size()] - points[i]));
  const std::uint64_t span = points.size() == 1 || widest_gap == 0 ? 0 : (1ULL << 32) - widest_gap;
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    if (one_sign) FUZZ_CHECK(sorted[i - 1].sequence <= sorted[i].sequence);  // no wrap: numeric
    if (span < (1ULL << 31))  // creation order across a wrap
      FUZZ_CHECK(static_cast<std::int32_t>(on_circle(sorted[i]) - on_circle(sorted[i - 1])) >= 0);
  }
  // Stable: among equal sequences the input order is kept.
  const auto names_with = [](const std::vector<zkr::ContenderName>& names, std::int64_t sequence) {
    std::vector<std::string> out;
    for (const auto& name : names)
      if (name.sequence == sequence) out.push_back(name.name);
    return out;
  };
  for (const auto& name : parsed) FUZZ_CHECK(names_with(parsed, name.sequence) == names_with(sorted, name.sequence));
  return 0;
}
