// libFuzzer target: contender node names (zkr::parse_contender_name, zkr::sort_by_sequence) for
// ours/Curator's and kazoo's schemes. A recognised name keeps its text, carries the number of its
// last ten characters, and names a marker that it holds; sorting orders by that number, stably.
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <zkr/names.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

namespace {

void check_one(std::string_view child, std::vector<zkr::ContenderName>& parsed) {
  const auto name = zkr::parse_contender_name(child);
  if (!name) return;
  FUZZ_CHECK(name->name == child);
  FUZZ_CHECK(child.size() > 10);
  std::string_view digits = child.substr(child.size() - 10);
  const bool negative = digits.front() == '-';
  if (negative) digits.remove_prefix(1);
  std::int64_t value = -1;
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  FUZZ_CHECK(error == std::errc{} && end == digits.data() + digits.size());
  FUZZ_CHECK(name->sequence == (negative ? -value : value));
  const std::string_view head = child.substr(0, child.size() - 10);
  switch (name->role) {
    case zkr::ContenderRole::read:
      FUZZ_CHECK(head.ends_with(name->scheme == zkr::ContenderScheme::kazoo ? "__rlock__" : "__READ__"));
      break;
    case zkr::ContenderRole::write: FUZZ_CHECK(head.ends_with("__WRIT__")); break;
    case zkr::ContenderRole::latch: FUZZ_CHECK(head.ends_with("latch-")); break;
    case zkr::ContenderRole::exclusive:
      FUZZ_CHECK(head.ends_with(name->scheme == zkr::ContenderScheme::kazoo ? "__lock__" : "lock-"));
      break;
  }
  FUZZ_CHECK(head.starts_with(name->guid));
  parsed.push_back(*name);
}

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
  FUZZ_CHECK(std::is_sorted(sorted.begin(), sorted.end(),
                            [](const auto& a, const auto& b) { return a.sequence < b.sequence; }));
  // Stable: among equal sequences the input order is kept.
  auto expected = parsed;
  std::stable_sort(expected.begin(), expected.end(),
                   [](const auto& a, const auto& b) { return a.sequence < b.sequence; });
  for (std::size_t i = 0; i < sorted.size(); ++i) FUZZ_CHECK(sorted[i].name == expected[i].name);
  return 0;
}
