// SPDX-License-Identifier: Apache-2.0
#include "messages.hpp"

#include <unistd.h>

#include <cerrno>

namespace zklock {

void write_all(int fd, std::string_view text) noexcept {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(written));
  }
}

}  // namespace zklock
