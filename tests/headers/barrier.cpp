// SPDX-License-Identifier: Apache-2.0
#include <zkr/barrier.hpp>

// docs/recipes.md, "Barriers": a barrier set, waited on and removed; N participants in and out.
bool header_barrier_uses(zkr::Session& session) {
  try {
    zkr::Barrier barrier(session, "/barriers/deploy");
    barrier.set();
    const bool down = barrier.wait(std::chrono::seconds(1));
    zkr::DoubleBarrier round(session, "/barriers/round", 3);
    round.async_enter(std::chrono::seconds(5), [](std::error_code ec) { (void)(ec == zkr::errc::timed_out); });
    return down && barrier.remove() && round.participants() == 3;
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::invalid_path;
  }
}
