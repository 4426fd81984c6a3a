// SPDX-License-Identifier: Apache-2.0
#include <zkr/group.hpp>

// docs/recipes.md, "Group membership": a member told of its loss, a view of the members.
bool header_group_uses(zkr::Session& session) {
  try {
    zkr::GroupMember member(session, "/groups/app", "worker-1", "10.0.0.7:8080", {},
                            [](const zkr::MembershipEvent& event) {
                              (void)(event.state == zkr::MembershipState::lost && event.reason == zkr::LossReason::session_lost);
                            });
    zkr::GroupView view(session, "/groups/app", zkr::GroupLayout::curator, [](const zkr::GroupSnapshot& snapshot) {
      (void)(snapshot.stale || snapshot.members.empty());
    });
    member.join();
    return view.wait_fresh(std::chrono::seconds(1)) && member.state() == zkr::MembershipState::joined;
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::invalid_path;
  }
}
