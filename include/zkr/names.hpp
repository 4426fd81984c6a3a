// Paths, connect strings and contender node names: the parsers for outside input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace zkr {

// A znode path a recipe may use: absolute, no trailing '/', no empty, '.' or '..' component, no NUL
// or control characters, not under /zookeeper. Returns errc::invalid_path (or nothing).
std::error_code validate_path(std::string_view path) noexcept;
// Why validate_path refused path, as a short phrase ("is not absolute", ...); empty if valid.
std::string path_problem(std::string_view path);

struct ServerList {
  std::vector<std::string> hosts;  // "host:port"
  std::string chroot;              // "" or "/a/b"
};
// Parses "host:port[,host:port...][/chroot]". A host without a port gets 2181.
std::optional<ServerList> parse_servers(std::string_view servers, std::error_code& ec);
std::string describe_servers_problem(std::string_view servers);

// Who wrote a contender node, and for which role.
enum class ContenderScheme { zkrecipes_or_curator, kazoo };
enum class ContenderRole { exclusive, read, write, latch };

struct ContenderName {
  std::string name;       // the child name as stored
  ContenderScheme scheme;
  ContenderRole role;
  std::string guid;       // the part before the marker, may be empty
  std::int64_t sequence;  // numeric 10-digit suffix
};

// Recognises the node names the peers write:
//   ours/Curator:  "_c_<uuid>-lock-0000000012", "_c_<uuid>-__READ__0000000012", "..__WRIT__..",
//                  "_c_<uuid>-latch-0000000012"
//   kazoo:         "<32 hex>__lock__0000000012", "<32 hex>__rlock__0000000012"
// Anything else is not a contender.
std::optional<ContenderName> parse_contender_name(std::string_view child);

// Sorts by the numeric sequence (never as text: the counter wraps and restarts).
void sort_by_sequence(std::vector<ContenderName>& contenders);

// "host:pid", the default owner data of a lock node.
std::string default_owner_data();

}  // namespace zkr
