#include <zkr/names.hpp>

#include <algorithm>
#include <charconv>
#include <unistd.h>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "request_limits.hpp"

namespace zkr {

std::string path_problem(std::string_view path) {
  if (path.empty()) return "is empty";
  if (path.front() != '/') return "is not absolute (must start with '/')";
  if (path == "/") return "is the root (a recipe needs a path of its own)";
  if (path.back() == '/') return "ends with '/'";
  for (unsigned char c : path) {
    if (c == 0) return "contains a NUL character";
    if (c < 0x20 || c == 0x7f) return "contains a control character";
  }
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    if (component.empty()) return "has an empty component ('//')";
    if (component == "." || component == "..") return "has a '.' or '..' component";
    start = end + 1;
  }
  if (path == "/zookeeper" || path.starts_with("/zookeeper/"))
    return "is under /zookeeper, which the server reserves";
  if (path.size() > detail::kMaxRecipePathBytes)
    return fmt::format("is {} bytes long: with a node name under it a request would exceed the server's request "
                       "limit (jute.maxbuffer, {} bytes); a recipe path may have at most {} bytes",
                       path.size(), detail::kServerRequestLimit, detail::kMaxRecipePathBytes);
  return {};
}

namespace detail {

std::string request_size_problem(std::size_t path_bytes, std::size_t data_bytes) {
  if (path_bytes + data_bytes + kRequestAllowance <= kServerRequestLimit) return {};
  return fmt::format("{} bytes of data under a path of {} bytes would exceed the server's request limit "
                     "(jute.maxbuffer, {} bytes, including about {} bytes of node name and framing)",
                     data_bytes, path_bytes, kServerRequestLimit, kRequestAllowance);
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

bool valid_port(std::string_view text) {
  if (text.empty() || text.size() > 5) return false;
  unsigned port = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  return ec == std::errc{} && end == text.data() + text.size() && port >= 1 && port <= 65535;
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
    if (!valid_port(port)) return fmt::format("has an invalid port in '{}'", entry);
    normalised = fmt::format("[{}]:{}", host, port);
    return {};
  }
  auto colon = entry.rfind(':');
  if (colon != std::string_view::npos) {
    host = entry.substr(0, colon);
    port = entry.substr(colon + 1);
  }
  if (!valid_hostname(host)) return fmt::format("has an invalid host name in '{}'", entry);
  if (!valid_port(port)) return fmt::format("has an invalid port in '{}' (1-65535)", entry);
  normalised = fmt::format("{}:{}", host, port);
  return {};
}

std::string servers_problem(std::string_view servers, ServerList* out) {
  if (servers.empty()) return "is empty";
  std::string_view hosts = servers, chroot;
  if (auto slash = servers.find('/'); slash != std::string_view::npos) {
    hosts = servers.substr(0, slash);
    chroot = servers.substr(slash);
    if (auto problem = path_problem(chroot); !problem.empty())
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
  ContenderScheme scheme;
  ContenderRole role;
};

// Longest markers first so that "__rlock__" is not read as "__lock__" or "-lock-".
constexpr Marker kMarkers[] = {
    {"__rlock__", ContenderScheme::kazoo, ContenderRole::read},
    {"__lock__", ContenderScheme::kazoo, ContenderRole::exclusive},
    {"__READ__", ContenderScheme::zkrecipes_or_curator, ContenderRole::read},
    {"__WRIT__", ContenderScheme::zkrecipes_or_curator, ContenderRole::write},
    {"-latch-", ContenderScheme::zkrecipes_or_curator, ContenderRole::latch},
    {"lock-", ContenderScheme::zkrecipes_or_curator, ContenderRole::exclusive},
};

constexpr std::size_t kSequenceDigits = 10;

}  // namespace

std::optional<ContenderName> parse_contender_name(std::string_view child) {
  if (child.size() <= kSequenceDigits) return std::nullopt;
  std::string_view digits = child.substr(child.size() - kSequenceDigits);
  std::string_view head = child.substr(0, child.size() - kSequenceDigits);
  // The server formats the counter with "%010d": ten characters, a '-' first once it has wrapped.
  std::int64_t sequence = 0;
  {
    std::string_view number = digits;
    bool negative = number.front() == '-';
    if (negative) number.remove_prefix(1);
    if (number.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
    std::int64_t value = 0;
    std::from_chars(number.data(), number.data() + number.size(), value);
    sequence = negative ? -value : value;
  }
  for (const Marker& marker : kMarkers) {
    if (!head.ends_with(marker.text)) continue;
    std::string_view guid = head.substr(0, head.size() - marker.text.size());
    if (guid.ends_with('-')) guid.remove_suffix(1);  // the separator after "_c_<uuid>"
    return ContenderName{std::string(child), marker.scheme, marker.role, std::string(guid), sequence};
  }
  return std::nullopt;
}

void sort_by_sequence(std::vector<ContenderName>& contenders) {
  std::stable_sort(contenders.begin(), contenders.end(),
                   [](const ContenderName& a, const ContenderName& b) { return a.sequence < b.sequence; });
}

std::string default_owner_data() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return fmt::format("{}:{}", host[0] ? host : "unknown-host", getpid());
}

}  // namespace zkr
