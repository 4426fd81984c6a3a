// SPDX-License-Identifier: Apache-2.0
// Independent readers of what the library writes for machines: Python's json module for the JSON
// log lines, python3-prometheus-client's parser for the metrics text (tests/unit/read_*.py). Each
// returns the reader's lines; a reader that cannot read the input fails the test with its reason.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <testenv.hpp>

namespace zkr::test {

// Lower-case hex of the bytes, as the readers print strings.
inline std::string hex(std::string_view bytes) {
  std::string out;
  for (unsigned char byte : bytes) out += fmt::format("{:02x}", byte);
  return out;
}

inline std::vector<std::string> run_python_reader(std::string_view script, std::vector<std::string> arguments,
                                                  std::string_view input = {}) {
  std::vector<std::string> argv{"/usr/bin/python3", fmt::format("{}/tests/unit/{}", testenv::source_dir(), script)};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  testenv::Process::Options options;
  options.pipe_stdin = true;
  testenv::Process reader(argv, options);
  reader.write_stdin(input);
  reader.close_stdin();
  const std::string output = reader.read_all(testenv::scaled(std::chrono::seconds(30)));
  const auto status = reader.wait(testenv::scaled(std::chrono::seconds(30)));
  EXPECT_EQ(status, 0) << script << " could not read the input:\n" << output << "\ninput:\n" << input;
  std::vector<std::string> lines;
  for (std::size_t start = 0; start < output.size();) {
    const std::size_t end = output.find('\n', start);
    lines.push_back(output.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return lines;
}

// The samples python3-prometheus-client read from `text`: "NAME LABEL=HEX,... VALUE".
inline std::vector<std::string> read_exposition(std::string_view text) {
  std::vector<std::string> samples;
  for (auto& line : run_python_reader("read_exposition.py", {}, text))
    if (line.starts_with("sample ")) samples.push_back(line.substr(7));
  return samples;
}

// The value of the sample NAME with exactly these labels (any order), if the reader read one.
inline std::optional<double> sample_value(const std::vector<std::string>& samples, std::string_view name,
                                          std::vector<std::pair<std::string, std::string>> labels) {
  std::sort(labels.begin(), labels.end());
  std::string prefix = fmt::format("{} ", name);
  for (std::size_t i = 0; i < labels.size(); ++i)
    prefix += fmt::format("{}{}={}", i ? "," : "", labels[i].first, hex(labels[i].second));
  prefix += ' ';
  for (const auto& sample : samples)
    if (sample.starts_with(prefix)) return std::stod(sample.substr(prefix.size()));
  return std::nullopt;
}

// The records Python's json module read from the JSON-lines file: "KEY=HEX,..." sorted by key.
inline std::vector<std::string> read_json_lines(const std::string& file) {
  std::vector<std::string> records;
  for (auto& line : run_python_reader("read_json_lines.py", {file}))
    if (line.starts_with("record ")) records.push_back(line.substr(7));
  return records;
}

}  // namespace zkr::test
