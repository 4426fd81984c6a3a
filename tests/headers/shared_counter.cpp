// SPDX-License-Identifier: Apache-2.0
#include <zkr/shared_counter.hpp>

// recipes.md, "Shared counter": add, compare_and_set, a listener, errors as zkr::Error.
bool header_shared_counter_uses(zkr::Session& session) {
  try {
    zkr::SharedCounter counter(session, "/counters/hits", {.layout = zkr::CounterLayout::curator_shared_count});
    auto subscription = counter.on_change([](const zkr::CounterUpdate& update) { (void)(update.stale && update.error); });
    const std::int64_t now = counter.add(1);
    return counter.compare_and_set(now, now + 1) && counter.read().version >= 0;
  } catch (const zkr::Error& error) {
    return error.code() == zkr::errc::undecodable_data || error.code() == zkr::errc::out_of_range ||
           error.code() == zkr::condition::connection_trouble;
  }
}
