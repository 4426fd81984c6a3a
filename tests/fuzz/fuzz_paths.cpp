// libFuzzer target: lock and election paths (zkr::validate_path, zkr::path_problem).
// Both must agree, never throw, and accept only what the documented rules allow.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view path(reinterpret_cast<const char*>(data), size);
  const std::error_code ec = zkr::validate_path(path);
  const std::string problem = zkr::path_problem(path);
  FUZZ_CHECK(static_cast<bool>(ec) == !problem.empty());
  if (ec) {
    FUZZ_CHECK(ec == zkr::errc::invalid_path);
    return 0;
  }
  // Accepted: absolute, not the root, no trailing '/', no empty/'.'/'..' component, no control
  // character, not under /zookeeper.
  FUZZ_CHECK(path.size() >= 2 && path.front() == '/' && path.back() != '/');
  FUZZ_CHECK(path.find("//") == std::string_view::npos);
  FUZZ_CHECK(path.find("/./") == std::string_view::npos && path.find("/../") == std::string_view::npos);
  FUZZ_CHECK(!path.ends_with("/.") && !path.ends_with("/.."));
  for (unsigned char c : path) FUZZ_CHECK(c >= 0x20 && c != 0x7f);
  FUZZ_CHECK(path != "/zookeeper" && !path.starts_with("/zookeeper/"));
  return 0;
}
