// SPDX-License-Identifier: Apache-2.0
#include <zkr/election.hpp>

// guide.md and recipes.md, "Election": a latch, a term with its token, errors as zkr::Error.
bool header_election_uses(zkr::Session& session) {
  try {
    zkr::LeaderLatch latch(session, "/election/app", {.participant_data = "host:8080"});
    latch.start();
    std::optional<zkr::Leadership> term = latch.wait_for_leadership(std::chrono::seconds(5));
    return term && term->token().valid() && !zkr::election_participants(session, "/election/app").empty();
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::incompatible_peer;
  }
}
