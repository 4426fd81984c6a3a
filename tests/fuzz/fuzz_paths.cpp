// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: lock and election paths (zkr::validate_path, zkr::path_problem).
// Both must agree, never throw, and accept only what the documented rules allow.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

namespace {

// What the server accepts in a path, decoded here a second way: the bytes are UTF-8 (shortest form,
// no surrogates) of characters in U+0020-U+007E, U+00A0-U+D7FF, U+F900-U+FFEF.
bool server_accepts_characters(std::string_view path) {
  for (std::size_t i = 0; i < path.size();) {
    const auto lead = static_cast<unsigned char>(path[i]);
    if (lead < 0x80) {
      if (lead < 0x20 || lead == 0x7f) return false;
      ++i;
      continue;
    }
    std::size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
    if (length == 0 || length == 4 || i + length > path.size()) return false;  // past U+FFFF: refused
    std::uint32_t code_point = lead & (length == 2 ? 0x1F : 0x0F);
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(path[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      code_point = code_point << 6 | (next & 0x3F);
    }
    if (length == 2 && code_point < 0x80) return false;
    if (length == 3 && code_point < 0x800) return false;
    const bool allowed = (code_point >= 0xA0 && code_point <= 0xD7FF) || (code_point >= 0xF900 && code_point <= 0xFFEF);
    if (!allowed) return false;
    i += length;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view path(reinterpret_cast<const char*>(data), size);
  const std::error_code ec = zkr::validate_path(path);
  const std::string problem = zkr::path_problem(path);
  FUZZ_CHECK(static_cast<bool>(ec) == !problem.empty());
  if (!server_accepts_characters(path)) FUZZ_CHECK(ec);  // what the server refuses is refused here
  if (ec) {
    FUZZ_CHECK(ec == zkr::errc::invalid_path);
    return 0;
  }
  // Accepted: absolute, not the root, no trailing '/', no empty/'.'/'..' component, nothing the
  // server refuses, no component named like a contender node, not under /zookeeper.
  FUZZ_CHECK(path.size() >= 2 && path.front() == '/' && path.back() != '/');
  FUZZ_CHECK(path.find("//") == std::string_view::npos);
  FUZZ_CHECK(path.find("/./") == std::string_view::npos && path.find("/../") == std::string_view::npos);
  FUZZ_CHECK(!path.ends_with("/.") && !path.ends_with("/.."));
  for (unsigned char c : path) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
  FUZZ_CHECK(server_accepts_characters(path));
  for (std::size_t start = 1; start < path.size();) {
    const std::size_t end = std::min(path.find('/', start), path.size());
    FUZZ_CHECK(!zkr::parse_contender_name(path.substr(start, end - start)));
    start = end + 1;
  }
  FUZZ_CHECK(path != "/zookeeper" && !path.starts_with("/zookeeper/"));
  return 0;
}
