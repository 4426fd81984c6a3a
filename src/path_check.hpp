// SPDX-License-Identifier: Apache-2.0
// The check every operation on a caller's path starts with: the error names the operation, the
// path and what is wrong with it (zkr::path_problem).
#pragma once

#include <string>
#include <string_view>

#include <zkr/error.hpp>
#include <zkr/names.hpp>

namespace zkr::detail {

// Throws Error(errc::invalid_path) unless `path` is a valid ZooKeeper path.
inline void require_valid_path(std::string_view path, std::string_view operation) {
  if (auto problem = path_problem(path); !problem.empty())
    throw Error(make_error_code(errc::invalid_path), operation, path, problem);
}

// The same, handing the valid path on (for a member initialiser).
inline std::string valid_path(std::string path, std::string_view operation) {
  require_valid_path(path, operation);
  return path;
}

}  // namespace zkr::detail
