// SPDX-License-Identifier: Apache-2.0
#include <zkr/names.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <unistd.h>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "request_limits.hpp"

namespace zkr {

namespace {

// A decoded UTF-8 sequence: its code point and length, or length 0 if the bytes at `at` are not
// UTF-8 (overlong forms, surrogates, past U+10FFFF, truncated, stray continuation bytes).
struct Utf8Char {
  char32_t code_point = 0;
  std::size_t length = 0;
  bool surrogate = false;  // well-formed apart from encoding U+D800-U+DFFF
};

Utf8Char decode_utf8(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[at + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return {lead, 1};
  std::size_t length = 0;
  char32_t code_point = 0;
  char32_t minimum = 0;
  if ((lead & 0xE0) == 0xC0) length = 2, code_point = lead & 0x1F, minimum = 0x80;
  else if ((lead & 0xF0) == 0xE0) length = 3, code_point = lead & 0x0F, minimum = 0x800;
  else if ((lead & 0xF8) == 0xF0) length = 4, code_point = lead & 0x07, minimum = 0x10000;
  else return {};
  if (at + length > text.size()) return {};
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return {};
    code_point = (code_point << 6) | (byte(k) & 0x3F);
  }
  if (code_point < minimum || code_point > 0x10FFFF) return {};
  if (code_point >= 0xD800 && code_point <= 0xDFFF) return {code_point, length, true};
  return {code_point, length};
}

// Why the server refuses this character in a path, or nullptr. The server decodes the path as
// UTF-8 into UTF-16 and refuses U+0000-U+001F, U+007F-U+009F, U+D800-U+F8FF and U+FFF0-U+FFFF
// code units; a character past U+FFFF becomes a surrogate pair, so it is refused as well.
const char* refused_character(char32_t c) {
  if (c == 0) return "a NUL character";
  if (c < 0x20 || c == 0x7F) return "a control character";
  if (c >= 0x80 && c <= 0x9F) return "a C1 control character";
  if (c >= 0xE000 && c <= 0xF8FF) return "a private-use character, which the server refuses";
  if (c >= 0xFFF0 && c <= 0xFFFF) return "a special or noncharacter (U+FFF0-U+FFFF), which the server refuses";
  if (c > 0xFFFF) return "a character outside the Basic Multilingual Plane, which the server refuses";
  return nullptr;
}

// The first character of path the server would refuse, described with its (1-based) byte position.
std::string character_problem(std::string_view path) {
  for (std::size_t at = 0; at < path.size();) {
    const Utf8Char decoded = decode_utf8(path, at);
    if (decoded.surrogate)
      return fmt::format("contains U+{:04X} at byte {}: a UTF-16 surrogate, which UTF-8 may not encode",
                         static_cast<std::uint32_t>(decoded.code_point), at + 1);
    if (decoded.length == 0)
      return fmt::format("is not valid UTF-8 at byte {} (0x{:02X})", at + 1, static_cast<unsigned char>(path[at]));
    if (const char* why = refused_character(decoded.code_point))
      return fmt::format("contains U+{:04X} at byte {}: {}", static_cast<std::uint32_t>(decoded.code_point),
                         at + 1, why);
    at += decoded.length;
  }
  return {};
}

}  // namespace

std::string path_problem(std::string_view path) {
  if (path.empty()) return "is empty";
  if (path.front() != '/') return "is not absolute (must start with '/')";
  if (path == "/") return "is the root (a recipe needs a path of its own)";
  if (path.back() == '/') return "ends with '/'";
  if (auto problem = character_problem(path); !problem.empty()) return problem;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    if (component.empty()) return "has an empty component ('//')";
    if (component == "." || component == "..") return "has a '.' or '..' component";
    // Recipes create the whole path: such a node would be taken for a contender of its parent.
    if (parse_contender_name(component))
      return fmt::format("has a component '{}' named like a contender node (a lock on its parent would "
                         "take it for a holder)", component);
    start = end + 1;
  }
  if (path == "/zookeeper" || path.starts_with("/zookeeper/"))
    return "is under /zookeeper, which the server reserves";
  if (path.size() > detail::kMaxRecipePathBytes)
    return fmt::format("is {} bytes long: a recipe path may have at most {} bytes, so that a request under it, with "
                       "a node name and at least one byte of owner data, fits the server's request limit "
                       "(jute.maxbuffer, {} bytes)",
                       path.size(), detail::kMaxRecipePathBytes, detail::kServerRequestLimit);
  return {};
}

namespace detail {

std::string request_size_problem(std::size_t path_bytes, std::size_t data_bytes) {
  if (request_bytes(path_bytes, data_bytes) <= kServerRequestLimit) return {};
  const std::size_t without_path = request_bytes(0, data_bytes);
  const std::string room = without_path < kServerRequestLimit
                               ? fmt::format("with this data a path may have at most {} bytes",
                                             kServerRequestLimit - without_path)
                               : std::string("this much data fits under no path");
  return fmt::format("{} bytes of data under a path of {} bytes would exceed the server's request limit "
                     "(jute.maxbuffer, {} bytes, including about {} bytes of node name and framing): {}",
                     data_bytes, path_bytes, kServerRequestLimit, kRequestAllowance, room);
}

}  // namespace detail

std::error_code validate_path(std::string_view path) noexcept {
  try {
    return path_problem(path).empty() ? std::error_code{} : make_error_code(errc::invalid_path);
  } catch (...) {
    return make_error_code(errc::invalid_path);
  }
}

namespace {

// The port as a number, or nothing if `text` is not a decimal port (1-65535).
std::optional<unsigned> parse_port(std::string_view text) {
  if (text.empty() || text.size() > 5) return std::nullopt;
  unsigned port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc{} || end != text.data() + text.size() || port < 1 || port > 65535) return std::nullopt;
  return port;
}

bool valid_hostname(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  return std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '.' || c == '-' || c == '_';
  });
}

// Returns the problem with one "host[:port]" entry, or empty.
std::string host_problem(std::string_view entry, std::string& normalised) {
  if (entry.empty()) return "has an empty host entry";
  std::string_view host = entry, port = "2181";
  if (entry.front() == '[') {  // [v6]:port
    auto close = entry.find(']');
    if (close == std::string_view::npos) return fmt::format("has an unclosed '[' in '{}'", entry);
    host = entry.substr(1, close - 1);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return fmt::format("has an invalid IPv6 address in '{}'", entry);
    std::string_view rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return fmt::format("has junk after ']' in '{}'", entry);
      port = rest.substr(1);
    }
    const auto number = parse_port(port);
    if (!number) return fmt::format("has an invalid port in '{}'", entry);
    normalised = fmt::format("[{}]:{}", host, *number);
    return {};
  }
  auto colon = entry.rfind(':');
  if (colon != std::string_view::npos) {
    host = entry.substr(0, colon);
    port = entry.substr(colon + 1);
  }
  if (!valid_hostname(host)) return fmt::format("has an invalid host name in '{}'", entry);
  const auto number = parse_port(port);
  if (!number) return fmt::format("has an invalid port in '{}' (1-65535)", entry);
  // The port as a plain decimal number: "02181" would otherwise reach a parser that reads octal.
  normalised = fmt::format("{}:{}", host, *number);
  return {};
}

std::string servers_problem(std::string_view servers, ServerList* out) {
  if (servers.empty()) return "is empty";
  std::string_view hosts = servers, chroot;
  if (auto slash = servers.find('/'); slash != std::string_view::npos) {
    hosts = servers.substr(0, slash);
    chroot = servers.substr(slash);
    if (chroot == "/") chroot = {};  // the root itself: no chroot (as the Java client reads it)
    else if (auto problem = path_problem(chroot); !problem.empty())
      return fmt::format("has a chroot '{}' that {}", chroot, problem);
  }
  ServerList list;
  std::size_t start = 0;
  while (true) {
    auto comma = hosts.find(',', start);
    std::string_view entry = hosts.substr(start, comma == std::string_view::npos ? hosts.npos : comma - start);
    std::string normalised;
    if (auto problem = host_problem(entry, normalised); !problem.empty()) return problem;
    list.hosts.push_back(std::move(normalised));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  list.chroot = std::string(chroot);
  if (out) *out = std::move(list);
  return {};
}

}  // namespace

std::string describe_servers_problem(std::string_view servers) {
  return servers_problem(servers, nullptr);
}

std::optional<ServerList> parse_servers(std::string_view servers, std::error_code& ec) {
  ServerList list;
  if (!servers_problem(servers, &list).empty()) {
    ec = make_error_code(errc::invalid_connect_string);
    return std::nullopt;
  }
  ec.clear();
  return list;
}

namespace {

struct Marker {
  std::string_view text;
  ContenderRole role;
};

// After "_c_<uuid>-" (ours, Curator's protected form) or alone (Curator's unprotected form).
constexpr Marker kProtectedMarkers[] = {
    {"lock-", ContenderRole::exclusive},
    {"__READ__", ContenderRole::read},
    {"__WRIT__", ContenderRole::write},
    {"latch-", ContenderRole::latch},
};
// Curator's recipes write only the protected form; these bare ones were accepted before and still are.
constexpr Marker kUnprotectedMarkers[] = {
    {"lock-", ContenderRole::exclusive},
    {"__READ__", ContenderRole::read},
    {"__WRIT__", ContenderRole::write},
};
// After kazoo's 32 hex digits.
constexpr Marker kKazooMarkers[] = {
    {"__lock__", ContenderRole::exclusive},
    {"__rlock__", ContenderRole::read},
};

constexpr std::string_view kProtectedPrefix = "_c_";
constexpr std::size_t kUuidLength = 36;
constexpr std::size_t kKazooIdLength = 32;

// The server appends its signed 32-bit counter formatted "%010d": "0000000042", "-000000005",
// "-2147483648". Anything else (other widths, a '+', out of range) is not one.
std::optional<std::int32_t> parse_sequence(std::string_view suffix) {
  if (suffix.size() != 10 && suffix.size() != 11) return std::nullopt;
  std::int64_t value = 0;
  const bool negative = suffix.front() == '-';
  const std::string_view digits = negative ? suffix.substr(1) : suffix;
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  if (negative) value = -value;
  if (value < std::numeric_limits<std::int32_t>::min() || value > std::numeric_limits<std::int32_t>::max())
    return std::nullopt;
  const auto sequence = static_cast<std::int32_t>(value);
  if (fmt::format("{:010d}", sequence) != suffix) return std::nullopt;  // the one text "%010d" gives
  return sequence;
}

template <std::size_t N>
std::optional<ContenderName> parse_after_id(std::string_view child, std::string_view id, std::string_view rest,
                                            ContenderScheme scheme, const Marker (&markers)[N]) {
  for (const Marker& marker : markers) {
    if (!rest.starts_with(marker.text)) continue;
    if (auto sequence = parse_sequence(rest.substr(marker.text.size())))
      return ContenderName{std::string(child), scheme, marker.role, std::string(id), *sequence};
  }
  return std::nullopt;
}

}  // namespace

std::optional<ContenderName> parse_contender_name(std::string_view child) {
  if (child.starts_with(kProtectedPrefix)) {
    const std::size_t id_end = kProtectedPrefix.size() + kUuidLength;  // "_c_<uuid>"
    if (child.size() <= id_end || !is_uuid(child.substr(kProtectedPrefix.size(), kUuidLength)) ||
        child[id_end] != '-')
      return std::nullopt;
    return parse_after_id(child, child.substr(0, id_end), child.substr(id_end + 1),
                          ContenderScheme::zkrecipes_or_curator, kProtectedMarkers);
  }
  if (child.size() > kKazooIdLength && is_kazoo_id(child.substr(0, kKazooIdLength)))
    return parse_after_id(child, child.substr(0, kKazooIdLength), child.substr(kKazooIdLength),
                          ContenderScheme::kazoo, kKazooMarkers);
  return parse_after_id(child, {}, child, ContenderScheme::zkrecipes_or_curator, kUnprotectedMarkers);
}

// Queue order is creation order. The counter is a signed 32-bit int that wraps from 2^31-1 to
// -2^31 (and later from -1 to 0), so numeric order is wrong across a wrap. The sequences are placed
// on the 2^32 circle and read starting after the widest empty arc: when all of them lie within 2^31
// of each other (contenders created less than 2^31 counter steps apart), that is creation order
// whatever wrapped, and without a wrap it is plain numeric order. Every client that sees the same
// children computes the same order.
void sort_by_sequence(std::vector<ContenderName>& contenders) {
  const auto on_circle = [](const ContenderName& c) { return static_cast<std::uint32_t>(c.sequence); };
  std::stable_sort(contenders.begin(), contenders.end(),
                   [&](const ContenderName& a, const ContenderName& b) { return on_circle(a) < on_circle(b); });
  if (contenders.size() < 2) return;
  std::size_t first = 0;
  std::uint32_t widest = 0;
  for (std::size_t i = 0; i < contenders.size(); ++i) {
    const std::size_t next = (i + 1) % contenders.size();
    const std::uint32_t gap = on_circle(contenders[next]) - on_circle(contenders[i]);  // mod 2^32
    if (gap > widest) widest = gap, first = next;
  }
  std::rotate(contenders.begin(), contenders.begin() + static_cast<std::ptrdiff_t>(first), contenders.end());
}

std::string default_owner_data() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}", host[0] ? host : "unknown-host", getpid());
}

namespace {
bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
}  // namespace

// As Java's and Boost's UUID to-string write it.
bool is_uuid(std::string_view text) noexcept {
  if (text.size() != kUuidLength) return false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const bool dash_here = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash_here ? text[i] != '-' : !is_lower_hex(text[i])) return false;
  }
  return true;
}

bool is_kazoo_id(std::string_view text) noexcept {
  return text.size() == kKazooIdLength && std::all_of(text.begin(), text.end(), is_lower_hex);
}

}  // namespace zkr
