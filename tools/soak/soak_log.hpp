// SPDX-License-Identifier: Apache-2.0
// The soak's record formats, shared by the client, the driver and the checker.
//
// Every record is one line, written with a single write(2) so that a killed process never leaves a
// torn line, and starts with CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock on Linux), a
// clock that every process on the machine shares: the checker compares times across processes.
//
// Client log, "<ns> <client> <EVENT> key=value...":
//   START pid=                     process started
//   SESSION id= timeout_ms=        a session (first or replacement) is connected
//   ATTEMPT a=                     acquisition attempt a begins
//   GRANT a= token= node= session= the lock is believed held from here
//   TIMEOUT a= / FAIL a= error=    the attempt ended without a grant
//   OP a= token= op=READ|WRITE id= value= result=OK|STALE|ERR
//                                  one request to the fenced store and its answer
//   END a= token= how=released|lost|fenced|stopped reason=
//                                  the belief ends (logged before the release is sent)
//   KILLED                         appended by the driver after it SIGKILLed the process
//   STOP                           clean exit
// Store journal, "<ns> <seq> <READ|WRITE> <client> <op-id> <token> <OK|STALE> <value> <highest>".
// Fault log, "<ns> BEGIN <kind> <target> <duration_ms>" and "<ns> END <kind> <target>".
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace zkr::soak {

inline std::int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> words;
  std::istringstream in{std::string(line)};
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// "key=value" words after the first `skip` words.
inline std::map<std::string, std::string> key_values(const std::vector<std::string>& words, std::size_t skip) {
  std::map<std::string, std::string> out;
  for (std::size_t i = skip; i < words.size(); ++i) {
    auto eq = words[i].find('=');
    if (eq != std::string::npos) out[words[i].substr(0, eq)] = words[i].substr(eq + 1);
  }
  return out;
}

}  // namespace zkr::soak
