// SPDX-License-Identifier: Apache-2.0
#include "text_escape.hpp"

#include <fmt/format.h>

namespace zkr::detail {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// The length of the valid UTF-8 sequence starting at text[i] (RFC 3629: no overlong forms, no
// surrogates, nothing above U+10FFFF), or 0 if none starts there.
std::size_t valid_sequence_length(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // the allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t k = 2; k < length; ++k)
    if (!is_continuation(byte(k))) return 0;
  return length;
}

// Calls escape_ascii(out, c) for each ASCII character (it returns false to copy c as it is), and
// copies every other valid character; invalid bytes become U+FFFD, one per byte.
template <typename EscapeAscii>
void append_utf8(std::string& out, std::string_view text, EscapeAscii escape_ascii) {
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t length = valid_sequence_length(text, i);
    if (length == 0) {
      out += kReplacementCharacter;
      ++i;
    } else if (length == 1) {
      if (!escape_ascii(out, text[i])) out += text[i];
      ++i;
    } else {
      out.append(text, i, length);
      i += length;
    }
  }
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  append_utf8(out, text, [](std::string& to, char c) {
    switch (c) {
      case '"': to += "\\\""; return true;
      case '\\': to += "\\\\"; return true;
      case '\n': to += "\\n"; return true;
      case '\r': to += "\\r"; return true;
      case '\t': to += "\\t"; return true;
      default:
        if (static_cast<unsigned char>(c) >= 0x20) return false;
        fmt::format_to(std::back_inserter(to), "\\u{:04x}", static_cast<unsigned>(c));
        return true;
    }
  });
  out += '"';
}

void append_label_value(std::string& out, std::string_view text) {
  append_utf8(out, text, [](std::string& to, char c) {
    switch (c) {
      case '"': to += "\\\""; return true;
      case '\\': to += "\\\\"; return true;
      case '\n': to += "\\n"; return true;
      default: return false;
    }
  });
}

}  // namespace zkr::detail
