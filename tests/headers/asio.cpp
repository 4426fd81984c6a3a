// SPDX-License-Identifier: Apache-2.0
#include <zkr/asio.hpp>

// guide.md, "Boost.Asio completion tokens": a callback completion with the Error it carries.
void header_asio_uses(zkr::Lock& lock) {
  zkr::asio::async_acquire(lock, [](std::exception_ptr error, zkr::HeldLock held) {
    try {
      if (error) std::rethrow_exception(error);
      held.release();
    } catch (const zkr::Error& e) {
      (void)(e.code() == zkr::errc::cancelled);
    }
  });
}

// recipes.md, "Caches": the initial load awaited with a callback completion.
void header_asio_cache_uses(zkr::TreeCache& cache) {
  zkr::asio::async_wait_initialized(cache, [](std::exception_ptr error) { (void)error; });
}
