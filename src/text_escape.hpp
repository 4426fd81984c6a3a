// SPDX-License-Identifier: Apache-2.0
// Escaping for the text the library writes for machines: JSON strings (the JSON-lines log sink)
// and Prometheus label values. Both need valid UTF-8, which paths and messages need not be (a
// ZooKeeper path is bytes to the C client): a byte that starts no valid UTF-8 sequence becomes
// U+FFFD, so one odd path cannot make a whole log line or scrape unreadable.
#pragma once

#include <string>
#include <string_view>

namespace zkr::detail {

// `text` as a JSON string, quotes included: '"', '\\' and control characters escaped.
void append_json_string(std::string& out, std::string_view text);
// `text` as the inside of a Prometheus label value (text format 0.0.4): '\\', '"' and line feed
// escaped.
void append_label_value(std::string& out, std::string_view text);

}  // namespace zkr::detail
