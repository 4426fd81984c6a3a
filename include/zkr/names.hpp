// SPDX-License-Identifier: Apache-2.0
// Paths, connect strings and contender node names: the parsers for outside input.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <zkr/error.hpp>
namespace zkr {

// A znode path a recipe may use: absolute, no trailing '/', no empty, '.' or '..' component, nothing
// the server refuses (bytes that are not UTF-8; U+0000-U+001F, U+007F-U+009F, U+E000-U+F8FF,
// U+FFF0-U+FFFF and characters past U+FFFF), no component named like a contender node (see
// parse_contender_name: it would be taken for a holder of its parent), not under /zookeeper.
// Returns errc::invalid_path (or nothing).
std::error_code validate_path(std::string_view path) noexcept;
// Why validate_path refused path, as a short phrase ("is not absolute", "contains U+0085 at byte 7:
// a C1 control character", ...; byte positions count from 1); empty if valid.
std::string path_problem(std::string_view path);

// A parsed connect string.
struct ServerList {
  std::vector<std::string> hosts;  // "host:port" or "[v6 address]:port", the port always given
  std::string chroot;              // "" or "/a/b"
};
// Parses "host[:port][,host[:port]...][/chroot]". A host without a port gets 2181 (also when the
// session connects); an IPv6 address is written in brackets, "[::1]:2181" or "[::1]".
std::optional<ServerList> parse_servers(std::string_view servers, std::error_code& ec);
std::string describe_servers_problem(std::string_view servers);

// Who wrote a contender node, and for which role.
enum class ContenderScheme { zkrecipes_or_curator, kazoo };
enum class ContenderRole { exclusive, read, write, latch };

// A contender node's name, parsed.
struct ContenderName {
  std::string name;       // the child name as stored
  ContenderScheme scheme;  // who wrote it
  ContenderRole role;  // for which role
  std::string guid;       // "_c_<uuid>" or kazoo's 32 hex digits; empty for the unprotected form
  std::int64_t sequence;  // the server's signed 32-bit counter, sign included
};

// Recognises exactly the node names the peers write, and nothing else:
//   ours/Curator:  "_c_<uuid>-lock-<seq>", "_c_<uuid>-__READ__<seq>", "_c_<uuid>-__WRIT__<seq>",
//                  "_c_<uuid>-latch-<seq>", <uuid> in the lowercase 8-4-4-4-12 form;
//                  unprotected: "lock-<seq>", "__READ__<seq>", "__WRIT__<seq>"
//   kazoo:         "<32 lowercase hex>__lock__<seq>", "<32 lowercase hex>__rlock__<seq>"
// <seq> is what the server appends to a sequential node: its signed 32-bit counter formatted
// "%010d" ("0000000042"; "-2147483648" once it has wrapped). Anything else under a lock path
// ("report-lock-0000000000", "block-0000000000") is not a contender: never a holder, never waited for.
std::optional<ContenderName> parse_contender_name(std::string_view child);

// The ids the peers write into node names: a UUID as Curator and this library write it
// ("0f8e0c6a-3a3e-4c4e-9c1d-2a5b6c7d8e9f", lowercase 8-4-4-4-12), and kazoo's (uuid4().hex: 32
// lowercase hex digits).
bool is_uuid(std::string_view text) noexcept;
bool is_kazoo_id(std::string_view text) noexcept;

// Sorts into queue order: creation order, by the numeric sequence (never as text), read across the
// counter's wrap from 2^31-1 to -2^31 as long as the contenders lie within 2^31 of each other (see
// docs/recipes.md, "Sequence numbers"). Stable among equal sequences.
void sort_by_sequence(std::vector<ContenderName>& contenders);

// "host:pid", the default owner data of a lock node.
std::string default_owner_data();

}  // namespace zkr
