// SPDX-License-Identifier: Apache-2.0
#include <zkr/leader_watch.hpp>

// guide.md, "Election": told of each leader, errors as zkr::Error.
bool header_leader_watch_uses(zkr::Session& session) {
  try {
    zkr::LeaderWatch watch(session, "/election/app", [](const std::optional<zkr::Participant>& leader) {
      (void)(leader && leader->token.valid());
    });
    return watch.error() == zkr::errc::session_closed;
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::invalid_path;
  }
}
