// SPDX-License-Identifier: Apache-2.0
// --metrics-file FILE: what a run did, as Prometheus text for node_exporter's textfile collector
// (or anything that reads the exposition format from a file). No daemon: zklock writes the file
// once, at its exit, to a temporary file beside it that it then renames over it, so that a reader
// sees the old file or the new one, never half of one.
//
// Every series is labelled by the lock path (lock="/jobs/nightly"): gauges of the last run
// (wait, hold, outcome, exit code, when it ended) and two counters carried over from the file's
// previous content (runs, losses). One file per lock path: series of other paths in the file are
// not kept.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "run_events.hpp"

namespace zklock {

// A label value of the text format: backslash, double quote and line feed escaped.
std::string label_value(std::string_view text);

// Checks, before anything is acquired, that a file can be created beside `file` (and removes it).
// Returns an error message naming the file if not.
std::optional<std::string> check_metrics_file(const std::filesystem::path& file);

// The exposition text for the run of `lock` summarised by `run`, carrying the counters on from
// `previous` (the file's content before, or empty).
std::string metrics_text(std::string_view lock, const RunSummary& run, std::string_view previous);

// Writes metrics_text() to `file` through a temporary file and a rename. Returns an error message
// naming the file if it could not (the temporary file is removed then).
std::optional<std::string> write_metrics_file(const std::filesystem::path& file, std::string_view lock,
                                              const RunSummary& run);

}  // namespace zklock
