#include <zkr/fence_gate.hpp>

namespace zkr {

bool FenceGate::admit(std::string_view key, FencingToken token) {
  std::lock_guard lock(mutex_);
  if (!token.valid()) {
    ++refused_;
    return false;
  }
  auto [it, inserted] = highest_.try_emplace(std::string(key), token);
  if (!inserted) {
    if (token < it->second) {
      ++refused_;
      return false;
    }
    it->second = token;
  }
  ++admitted_;
  return true;
}

std::optional<FencingToken> FenceGate::highest(std::string_view key) const {
  std::lock_guard lock(mutex_);
  auto it = highest_.find(std::string(key));
  if (it == highest_.end()) return std::nullopt;
  return it->second;
}

std::uint64_t FenceGate::admitted() const {
  std::lock_guard lock(mutex_);
  return admitted_;
}

std::uint64_t FenceGate::refused() const {
  std::lock_guard lock(mutex_);
  return refused_;
}

}  // namespace zkr
