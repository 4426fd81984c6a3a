// SPDX-License-Identifier: Apache-2.0
#include "contender_report.hpp"

#include <algorithm>
#include <array>
#include <ctime>
#include <tuple>

#include <fmt/format.h>

#include <zkr/names.hpp>

#include "json_vocabulary.hpp"

namespace zklock {

namespace {

// A semaphore's contenders are "-lock-" nodes like a lock's, but what they hold is a lease.
std::string_view role_name(zkr::ContenderRole role, std::optional<int> slots) {
  if (slots && role == zkr::ContenderRole::exclusive) return "lease";
  switch (role) {
    case zkr::ContenderRole::exclusive: return "exclusive";
    case zkr::ContenderRole::read: return "read";
    case zkr::ContenderRole::write: return "write";
    case zkr::ContenderRole::latch: return "latch";
  }
  return "unknown";
}

std::string_view scheme_name(zkr::ContenderScheme scheme) {
  return scheme == zkr::ContenderScheme::kazoo ? "kazoo" : "zkrecipes";
}

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is not one (overlong forms,
// surrogates and code points past U+10FFFF included).
std::size_t utf8_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  if (length == 2 && lead < 0xC2) return 0;                                  // overlong
  if (length == 3 && lead == 0xE0 && byte(i + 1) < 0xA0) return 0;          // overlong
  if (length == 3 && lead == 0xED && byte(i + 1) >= 0xA0) return 0;         // surrogate
  if (length == 4 && lead == 0xF0 && byte(i + 1) < 0x90) return 0;          // overlong
  if (length == 4 && (lead > 0xF4 || (lead == 0xF4 && byte(i + 1) >= 0x90))) return 0;  // past U+10FFFF
  return length;
}

// True for a sequence a terminal may act on: a C0 control, DEL, or a C1 control (U+0080-U+009F,
// which UTF-8 writes as 0xC2 0x80-0x9F).
bool is_control(std::string_view sequence) {
  const auto lead = static_cast<unsigned char>(sequence[0]);
  if (sequence.size() == 1) return lead < 0x20 || lead == 0x7f;
  return sequence.size() == 2 && lead == 0xC2 && static_cast<unsigned char>(sequence[1]) <= 0x9F;
}

// Calls keep(sequence) for each valid, non-control UTF-8 sequence and replace(bytes) for each
// control sequence or byte that is not UTF-8.
template <typename Keep, typename Replace>
void for_each_sequence(std::string_view text, Keep keep, Replace replace) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = utf8_sequence_length(text, i);
    const std::string_view sequence = text.substr(i, length == 0 ? 1 : length);
    if (length == 0 || is_control(sequence)) replace(sequence);
    else keep(sequence);
    i += sequence.size();
  }
}

// Owner data is free text written by any client: keep a table row on one line and in one column.
std::string printable(std::string_view text) {
  std::string out;
  for_each_sequence(text, [&](std::string_view sequence) { out += sequence; },
                    [&](std::string_view) { out += '?'; });
  return out.empty() ? "-" : out;
}

// Terminal columns a printable() text takes: one per code point (wide characters aside).
std::size_t display_width(std::string_view text) {
  std::size_t width = 0;
  for (unsigned char c : text) width += (c & 0xC0) != 0x80 ? 1 : 0;
  return width;
}

std::string json_array(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + json_string(items[i]);
  return out + "]";
}

}  // namespace

std::string escape_for_terminal(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_sequence(text, [&](std::string_view sequence) { out += sequence; },
                    [&](std::string_view bytes) {
                      for (unsigned char c : bytes) out += fmt::format("\\x{:02x}", c);
                    });
  return out;
}

std::string format_utc(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  const auto since_epoch = duration_cast<milliseconds>(time.time_since_epoch());
  const std::time_t seconds = static_cast<std::time_t>(floor<std::chrono::seconds>(since_epoch).count());
  const auto millis = since_epoch.count() - static_cast<long long>(seconds) * 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1,
                     utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    const std::size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (length > 1) {
      out.append(text.substr(i, length));
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
    i += length;
  }
  out += '"';
  return out;
}

namespace {

std::string slots_note(std::optional<int> slots) {
  return slots ? fmt::format(" (a semaphore of {} slot{})", *slots, *slots == 1 ? "" : "s") : std::string();
}

std::string contenders_table(std::string_view path, const std::vector<zkr::ContenderInfo>& contenders,
                             std::optional<int> slots) {
  std::size_t holders = 0;
  for (const auto& contender : contenders) holders += contender.holds ? 1 : 0;
  std::string out = fmt::format("{}: {} holder{}, {} waiter{}{}\n", path, holders, holders == 1 ? "" : "s",
                                contenders.size() - holders, contenders.size() - holders == 1 ? "" : "s",
                                slots_note(slots));
  // Each column as wide as its longest value (owner data is free text of any length), and at least
  // as wide as usual, so that the columns stay aligned.
  constexpr std::size_t columns = 8;
  using Row = std::array<std::string, columns>;
  std::vector<Row> rows = {{"STATE", "ROLE", "CLIENT", "TOKEN", "SESSION", "SINCE", "OWNER", "NODE"}};
  for (const auto& contender : contenders) {
    rows.push_back({contender.holds ? "holder" : "waiter", std::string(role_name(contender.role, slots)),
                    std::string(scheme_name(contender.scheme)), std::to_string(contender.token.value()),
                    zkr::session_id_text(contender.session_id), format_utc(contender.created),
                    printable(contender.owner_data), printable(contender.node)});
  }
  std::array<std::size_t, columns> widths = {7, 9, 9, 12, 20, 24, 24, 0};
  for (const Row& row : rows) {
    for (std::size_t column = 0; column + 1 < columns; ++column) {
      widths[column] = std::max(widths[column], display_width(row[column]));
    }
  }
  constexpr std::size_t token_column = 3;  // numbers align right
  for (const Row& row : rows) {
    for (std::size_t column = 0; column + 1 < columns; ++column) {
      const std::string padding(widths[column] - display_width(row[column]), ' ');
      out += column == token_column ? padding + row[column] : row[column] + padding;
      out += ' ';
    }
    out += row.back() + '\n';
  }
  return out;
}

// Below, with the other recipes' readings.
std::string recipe_text(std::string_view path, const RecipeReading& recipe);
std::string recipe_json(const RecipeReading& recipe);

}  // namespace

std::string format_listing_text(std::string_view path, const zkr::PathListing& listing, std::string_view chroot,
                                std::optional<int> slots, const std::vector<RunRecord>& last_runs,
                                const std::optional<RecipeReading>& recipe) {
  if (!listing.exists) {
    const std::string barrier = recipe ? "; read as a barrier: down" : "";
    if (chroot.empty()) return fmt::format("{}: does not exist{}\n", path, barrier);
    return fmt::format("{}: does not exist (under the chroot {}, which may itself be missing){}\n", path, chroot,
                       barrier);
  }
  const auto& contenders = listing.contenders;
  std::string out;
  if (contenders.empty() && recipe) out = recipe_text(path, *recipe);
  else if (contenders.empty()) out = fmt::format("{}: free (no holder, no waiters){}\n", path, slots_note(slots));
  else out = contenders_table(path, contenders, slots);
  for (const auto& other : listing.not_contenders) out += fmt::format("not a contender: {}\n", printable(other));
  for (const auto& run : last_runs) {
    out += fmt::format("last --once-per run{}: {}\n", run.schedule.empty() ? "" : fmt::format(" ({})", run.schedule),
                       describe_run(run));
  }
  return out;
}

std::string describe_holders(const std::vector<zkr::ContenderInfo>& contenders) {
  std::string text;
  for (const auto& contender : contenders) {
    if (!contender.holds) continue;
    if (!text.empty()) text += ", ";
    text += fmt::format("session {} (", zkr::session_id_text(contender.session_id));
    if (!contender.owner_data.empty())
      text += fmt::format("owner \"{}\", ", escape_for_terminal(contender.owner_data));
    text += fmt::format("since {})", format_utc(contender.created));
  }
  return text.empty() ? "someone who has let go since" : text;
}

std::string format_listing_json(std::string_view path, const zkr::PathListing& listing, std::optional<int> slots,
                                const std::vector<RunRecord>& last_runs,
                                std::optional<std::chrono::system_clock::time_point> observed,
                                const std::optional<RecipeReading>& recipe) {
  std::string out = observed ? fmt::format("{{\"observed\":{},", json_string(format_utc(*observed))) : "{";
  out += fmt::format("\"path\":{},\"exists\":{},{}\"contenders\":[", json_string(path),
                                listing.exists ? "true" : "false",
                                slots ? fmt::format("\"slots\":{},", *slots) : std::string());
  bool first = true;
  for (const auto& contender : listing.contenders) {
    if (!first) out += ',';
    first = false;
    out += fmt::format(
        "{{\"node\":{},\"sequence\":{},\"token\":{},{},\"owner\":{},\"since\":{},"
        "\"holds\":{},\"role\":{},\"scheme\":{}}}",
        json_string(contender.node), contender.sequence, contender.token.value(),
        json_session_fields(contender.session_id), json_string(contender.owner_data),
        json_string(format_utc(contender.created)), contender.holds ? "true" : "false",
        json_string(role_name(contender.role, slots)), json_string(scheme_name(contender.scheme)));
  }
  out += fmt::format("],\"not_contenders\":{}", json_array(listing.not_contenders));
  if (recipe) out += fmt::format(",\"recipe\":{}", recipe_json(*recipe));
  if (!last_runs.empty()) {
    const auto latest = std::max_element(last_runs.begin(), last_runs.end(), [](const auto& a, const auto& b) {
      return a.started_ms < b.started_ms;
    });
    out += fmt::format(",\"last_run\":{},\"last_runs\":[", run_record_json(*latest));
    for (std::size_t i = 0; i < last_runs.size(); ++i) out += (i ? "," : "") + run_record_json(last_runs[i]);
    out += ']';
  }
  out += "}\n";
  return out;
}

}  // namespace zklock

// ---------------------------------------------------------------------------------------------
// The other recipes' paths

namespace zklock {

namespace {

// The server shows a client 0 as the owner of a container or TTL node, a session id otherwise.
bool is_ephemeral(const zkr::NodeStat& stat) { return stat.ephemeral_owner != 0; }

// A participant's name: kazoo's uuid4().hex, or Curator's (and this library's) 8-4-4-4-12 form.
bool is_uuid_name(std::string_view name) { return zkr::is_kazoo_id(name) || zkr::is_uuid(name); }

constexpr std::string_view kPartyNodeSuffix = "__party__";
bool is_party_name(std::string_view name) {
  return name.size() == 32 + kPartyNodeSuffix.size() && name.ends_with(kPartyNodeSuffix) && zkr::is_kazoo_id(name.substr(0, 32));
}
bool is_shallow_party_name(std::string_view name) {
  return name.size() > 33 && name[32] == '-' && zkr::is_kazoo_id(name.substr(0, 32));
}

RecipeReading::Member member_of(const ListedNode& child, std::string id) {
  return {std::move(id), child.data, child.name, child.stat.ephemeral_owner,
          std::chrono::system_clock::time_point(std::chrono::milliseconds(child.stat.ctime_ms))};
}

std::optional<RecipeReading> recognise_childless(const ListedNode& node) {
  RecipeReading reading;
  reading.data = node.data;
  reading.version = node.stat.version;
  if (node.data.empty()) {
    reading.kind = RecipeReading::Kind::empty;
    return reading;
  }
  for (const auto layout :
       {zkr::CounterLayout::curator_atomic_long, zkr::CounterLayout::curator_shared_count, zkr::CounterLayout::kazoo}) {
    if (const auto value = zkr::decode_counter(layout, node.data)) reading.counter.push_back({layout, *value});
  }
  reading.kind = reading.counter.empty() ? RecipeReading::Kind::unrecognised : RecipeReading::Kind::counter;
  return reading;
}

}  // namespace

std::optional<RecipeReading> recognise_recipe(const ListedNode& node, const std::vector<ListedNode>& children) {
  if (children.empty()) return recognise_childless(node);
  const auto all = [&](auto predicate) { return std::all_of(children.begin(), children.end(), predicate); };
  if (!all([](const ListedNode& child) { return child.name == "ready" || is_ephemeral(child.stat); })) return std::nullopt;
  RecipeReading reading;
  if (all([](const ListedNode& child) { return child.name == "ready" || is_uuid_name(child.name); })) {
    reading.kind = RecipeReading::Kind::double_barrier;
    for (const auto& child : children) {
      if (child.name == "ready") reading.ready = true;
      else reading.members.push_back(member_of(child, {}));
    }
    return reading;
  }
  if (!all([](const ListedNode& child) { return is_ephemeral(child.stat); })) return std::nullopt;
  reading.kind = RecipeReading::Kind::group;
  if (all([](const ListedNode& child) { return is_party_name(child.name); })) {
    reading.group_layout = zkr::GroupLayout::kazoo_party;
  } else if (all([](const ListedNode& child) { return is_shallow_party_name(child.name); })) {
    reading.group_layout = zkr::GroupLayout::kazoo_shallow_party;
  }
  for (const auto& child : children) {
    std::string id = reading.group_layout == zkr::GroupLayout::curator   ? child.name
                     : reading.group_layout == zkr::GroupLayout::kazoo_party ? child.data
                                                                          : child.name.substr(33);
    reading.members.push_back(member_of(child, std::move(id)));
  }
  std::sort(reading.members.begin(), reading.members.end(),
            [](const auto& a, const auto& b) { return std::tie(a.id, a.node) < std::tie(b.id, b.node); });
  return reading;
}

namespace {

std::string aligned_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows)
    for (std::size_t column = 0; column + 1 < row.size(); ++column)
      widths[column] = std::max(widths[column], display_width(row[column]));
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t column = 0; column + 1 < row.size(); ++column)
      out += row[column] + std::string(widths[column] - display_width(row[column]) + 1, ' ');
    out += row.back() + '\n';
  }
  return out;
}

std::string members_table(const std::vector<RecipeReading::Member>& members, bool with_id) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"SESSION", "SINCE", "DATA", "NODE"});
  if (with_id) rows.back().insert(rows.back().begin(), "ID");
  for (const auto& member : members) {
    rows.push_back({zkr::session_id_text(member.session_id), format_utc(member.since), printable(member.data),
                    printable(member.node)});
    if (with_id) rows.back().insert(rows.back().begin(), printable(member.id));
  }
  return aligned_rows(rows);
}

std::string plural(std::size_t count, std::string_view noun) {
  return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

// The data as a line may show it: text if it is printable, else its bytes in hex.
std::string data_shown(std::string_view data) {
  const bool text = std::all_of(data.begin(), data.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  if (text) return fmt::format("\"{}\"", data);
  std::string hex;
  for (unsigned char c : data) hex += fmt::format("{:02x}", c);
  return "0x" + hex;
}

std::string recipe_text(std::string_view path, const RecipeReading& recipe) {
  using Kind = RecipeReading::Kind;
  switch (recipe.kind) {
    case Kind::group:
      return fmt::format("{}: a group ({} layout), {}\n", path, zkr::to_string(recipe.group_layout),
                         plural(recipe.members.size(), "member")) +
             (recipe.members.empty() ? "" : members_table(recipe.members, true));
    case Kind::double_barrier:
      return fmt::format("{}: a double barrier, {}, {}\n", path, plural(recipe.members.size(), "participant"),
                         recipe.ready ? "ready (all had entered)" : "not ready") +
             (recipe.members.empty() ? "" : members_table(recipe.members, false));
    case Kind::empty: return fmt::format("{}: free (no holder, no waiters); read as a barrier: up\n", path);
    case Kind::missing: return fmt::format("{}: does not exist; read as a barrier: down\n", path);
    case Kind::counter: {
      std::string values;
      for (std::size_t i = 0; i < recipe.counter.size(); ++i)
        values += fmt::format("{}{} ({} layout)", i ? " or " : "", recipe.counter[i].value,
                              zkr::to_string(recipe.counter[i].layout));
      return fmt::format("{}: a counter, {}; data {} ({}), data version {}{}\n", path, values,
                         escape_for_terminal(data_shown(recipe.data)), plural(recipe.data.size(), "byte"),
                         recipe.version, recipe.counter.size() > 1 ? "; the layout cannot be told from the data" : "");
    }
    case Kind::unrecognised:
      return fmt::format("{}: no contender, no children; data {} ({}), which no counter layout reads\n", path,
                         escape_for_terminal(data_shown(recipe.data)), plural(recipe.data.size(), "byte"));
  }
  return {};
}

std::string members_json(const std::vector<RecipeReading::Member>& members, bool with_id) {
  std::string out = "[";
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto& member = members[i];
    out += fmt::format("{}{{{}\"data\":{},\"node\":{},{},\"since\":{}}}", i ? "," : "",
                       with_id ? fmt::format("\"id\":{},", json_string(member.id)) : std::string(),
                       json_string(member.data), json_string(member.node), json_session_fields(member.session_id),
                       json_string(format_utc(member.since)));
  }
  return out + "]";
}

std::string recipe_json(const RecipeReading& recipe) {
  using Kind = RecipeReading::Kind;
  switch (recipe.kind) {
    case Kind::group:
      return fmt::format("{{\"kind\":\"group\",\"layout\":{},\"members\":{}}}",
                         json_string(zkr::to_string(recipe.group_layout)), members_json(recipe.members, true));
    case Kind::double_barrier:
      return fmt::format("{{\"kind\":\"double_barrier\",\"ready\":{},\"participants\":{}}}",
                         recipe.ready ? "true" : "false", members_json(recipe.members, false));
    case Kind::empty: return "{\"kind\":\"empty\",\"barrier\":\"up\"}";
    case Kind::missing: return "{\"kind\":\"missing\",\"barrier\":\"down\"}";
    case Kind::counter: {
      std::string values;
      for (std::size_t i = 0; i < recipe.counter.size(); ++i)
        values += fmt::format("{}{{\"layout\":{},\"value\":{}}}", i ? "," : "",
                              json_string(zkr::to_string(recipe.counter[i].layout)), recipe.counter[i].value);
      return fmt::format("{{\"kind\":\"counter\",\"data_version\":{},\"bytes\":{},\"values\":[{}]}}", recipe.version,
                         recipe.data.size(), values);
    }
    case Kind::unrecognised:
      return fmt::format("{{\"kind\":\"unrecognised\",\"data_version\":{},\"bytes\":{}}}", recipe.version,
                         recipe.data.size());
  }
  return "null";
}

}  // namespace

}  // namespace zklock
