// SPDX-License-Identifier: Apache-2.0
#include <zkr/fence_gate.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <system_error>

#include <boost/crc.hpp>
#include <fmt/format.h>

#include <zkr/error.hpp>

#include "fence_gate_steps.hpp"
#include "without_exceptions.hpp"

namespace zkr {
namespace {
// The gates' one rule: a valid token not lower than the highest admitted for its key.
bool admissible(FencingToken token, const FencingToken* highest) {
  return token.valid() && (highest == nullptr || !(token < *highest));
}
}  // namespace

bool FenceGate::admit(std::string_view key, FencingToken token) {
  std::lock_guard lock(mutex_);
  std::string owned_key(key);  // built once: for the lookup and, for a new key, the entry
  auto it = highest_.find(owned_key);
  if (!admissible(token, it == highest_.end() ? nullptr : &it->second)) {
    ++refused_;
    return false;
  }
  if (it == highest_.end())
    highest_.emplace(std::move(owned_key), token);
  else
    it->second = token;
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

// ---- DurableFenceGate ----
//
// The file, all of it text but the keys, which may hold any byte:
//   zkr-fence-gate 1\n
//   <token> <key length> <key>\n      (one line per key)
//   crc32 <8 hex digits>\n             (CRC-32 of every byte before this line)

namespace detail {
namespace {
std::atomic<void (*)(GateWriteStep)> gate_write_observer{nullptr};
}  // namespace

void set_gate_write_observer(void (*observer)(GateWriteStep)) noexcept { gate_write_observer = observer; }
}  // namespace detail

namespace {

using GateState = std::map<std::string, FencingToken, std::less<>>;

constexpr std::string_view gate_header = "zkr-fence-gate 1\n";
constexpr std::string_view checksum_label = "crc32 ";
constexpr std::size_t checksum_line_size = checksum_label.size() + 8 + 1;  // 8 hex digits, newline

void observe(detail::GateWriteStep step) {
  if (auto observer = detail::gate_write_observer.load()) observer(step);
}

std::uint32_t crc32_of(std::string_view bytes) {
  boost::crc_32_type crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

[[noreturn]] void throw_system(int error, std::string_view operation, const std::filesystem::path& file,
                               std::string_view detail = {}) {
  throw Error(std::error_code(error, std::generic_category()), operation, file.string(), detail);
}

[[noreturn]] void throw_corrupt(const std::filesystem::path& file, std::string_view detail) {
  throw Error(errc::corrupt_state, "open fence gate", file.string(), detail);
}

std::string encode(const GateState& state) {
  std::string out(gate_header);
  for (const auto& [key, token] : state) out += fmt::format("{} {} {}\n", token.value(), key.size(), key);
  out += fmt::format("{}{:08x}\n", checksum_label, crc32_of(out));
  return out;
}

// Reads one unsigned decimal number ending in `delimiter` at `at`, advancing past the delimiter.
template <typename Number>
std::optional<Number> read_number(std::string_view text, std::size_t& at, char delimiter) {
  Number value{};
  auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data() + at || end == text.data() + text.size() || *end != delimiter)
    return std::nullopt;
  at = static_cast<std::size_t>(end - text.data()) + 1;
  return value;
}

GateState decode(std::string_view contents, const std::filesystem::path& file) {
  if (contents.empty()) throw_corrupt(file, "the file is empty");
  if (!contents.starts_with(gate_header))
    throw_corrupt(file, "not a fence gate file, or truncated: it does not start with \"zkr-fence-gate 1\"");
  if (contents.size() < gate_header.size() + checksum_line_size || contents.back() != '\n')
    throw_corrupt(file, "truncated: it does not end with its checksum line");
  std::string_view body = contents.substr(0, contents.size() - checksum_line_size);
  std::string_view checksum_line = contents.substr(body.size());
  std::uint32_t stored = 0;
  auto hex = checksum_line.substr(checksum_label.size(), 8);
  if (!checksum_line.starts_with(checksum_label) ||
      std::from_chars(hex.data(), hex.data() + hex.size(), stored, 16).ptr != hex.data() + hex.size())
    throw_corrupt(file, "truncated: it does not end with its checksum line");
  if (stored != crc32_of(body))
    throw_corrupt(file, fmt::format("checksum mismatch (stored {:08x}, contents {:08x})", stored, crc32_of(body)));

  GateState state;
  std::size_t at = gate_header.size();
  while (at < body.size()) {
    auto entry_at = at;
    auto token = read_number<std::int64_t>(body, at, ' ');
    auto key_size = token ? read_number<std::size_t>(body, at, ' ') : std::nullopt;
    if (!token || !key_size || *key_size >= body.size() - at || body[at + *key_size] != '\n' ||
        !FencingToken(*token).valid())
      throw_corrupt(file, fmt::format("malformed entry at byte {}", entry_at));
    auto [it, inserted] = state.try_emplace(std::string(body.substr(at, *key_size)), FencingToken(*token));
    if (!inserted) throw_corrupt(file, fmt::format("key \"{}\" appears twice", it->first));
    at += *key_size + 1;
  }
  return state;
}

// The file a gate's name leads to: symbolic links followed (a dangling one to the file the gate
// will create there), its directory made canonical. Every name of one file leads to one path, so
// gates share one lock file whatever name opened them, and the gate writes beside the real file,
// never over a link.
std::filesystem::path real_file_of(const std::filesystem::path& given) {
  constexpr int most_links_followed = 40;  // as the kernel's own limit (ELOOP)
  std::filesystem::path current = given;
  for (int followed = 0;; ++followed) {
    struct stat status {};
    if (::lstat(current.c_str(), &status) != 0) {
      if (errno == ENOENT) break;  // a new gate; its directory must exist (checked below)
      throw_system(errno, "open fence gate", given);
    }
    if (S_ISDIR(status.st_mode)) throw_system(EISDIR, "open fence gate", given);
    if (!S_ISLNK(status.st_mode)) break;
    if (followed == most_links_followed) throw_system(ELOOP, "open fence gate", given);
    std::error_code error;
    auto target = std::filesystem::read_symlink(current, error);
    if (error) throw_system(error.value(), "open fence gate", given, fmt::format("reading the link {}", current.string()));
    current = target.is_absolute() ? target : current.parent_path() / target;
  }
  const auto name = current.filename();
  if (name.empty() || name == "." || name == "..") throw_system(EISDIR, "open fence gate", given);
  const auto directory = current.parent_path().empty() ? std::filesystem::path(".") : current.parent_path();
  std::error_code error;
  auto real_directory = std::filesystem::canonical(directory, error);
  if (error) throw_system(error.value(), "open fence gate", given, fmt::format("its directory {}", directory.string()));
  return real_directory / name;
}

// The whole file (opened in `directory_fd`), or nullopt if it does not exist. `file` names it in
// errors. A file with another hard link is refused: the gate's first write (a rename) would leave
// the other name behind with the old tokens, a second gate that admits them again.
std::optional<std::string> read_whole_file(int directory_fd, const std::filesystem::path& name,
                                           const std::filesystem::path& file) {
  int fd = ::openat(directory_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_system(errno, "open fence gate", file);
  }
  struct stat status {};
  if (::fstat(fd, &status) != 0) {
    int error = errno;
    ::close(fd);
    throw_system(error, "open fence gate", file);
  }
  if (status.st_nlink > 1) {
    ::close(fd);
    throw Error(errc::invalid_argument, "open fence gate", file.string(),
                fmt::format("the file has {} hard links: a gate file must have one name, since each write "
                            "replaces it and would leave the other names with old tokens",
                            status.st_nlink));
  }
  std::string contents;
  char buffer[8192];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      ::close(fd);
      throw_system(error, "read fence gate", file);
    }
    if (n == 0) break;
    contents.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return contents;
}

}  // namespace

DurableFenceGate::DurableFenceGate(std::filesystem::path file) : file_(std::move(file)) {
  auto close_all = [this] {
    if (lock_fd_ >= 0) ::close(lock_fd_);
    if (directory_fd_ >= 0) ::close(directory_fd_);
  };
  try {
    real_file_ = real_file_of(file_);
    name_ = real_file_.filename();
    temporary_name_ = name_.string() + ".tmp";
    const auto directory = real_file_.parent_path();
    directory_fd_ = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (directory_fd_ < 0)
      throw_system(errno, "open fence gate", file_, fmt::format("its directory {}", directory.string()));
    // Two gates on one file would each admit from their own memory: the second is refused. The
    // lock file is named after the real file, so every name of the file finds the same one.
    const std::string lock_name = name_.string() + ".lock";
    const auto lock_file = directory / lock_name;
    lock_fd_ = ::openat(directory_fd_, lock_name.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (lock_fd_ < 0) throw_system(errno, "open fence gate", file_, fmt::format("creating {}", lock_file.string()));
    if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0)
      throw_system(errno == EWOULDBLOCK ? EBUSY : errno, "open fence gate", file_,
                   fmt::format("another gate holds {}", lock_file.string()));
    auto contents = read_whole_file(directory_fd_, name_, file_);
    if (contents) highest_ = decode(*contents, file_);
    // Rewriting what was read (or an empty gate) checks now, not at the first admit, that the file
    // can be written, and replaces a temporary file left by a write that a crash interrupted (that
    // write was never admitted, so dropping it is safe).
    persist(highest_);
  } catch (...) {
    close_all();
    throw;
  }
}

DurableFenceGate::~DurableFenceGate() {
  ::close(lock_fd_);
  ::close(directory_fd_);
}

void DurableFenceGate::persist(const GateState& state) {
  const std::string contents = encode(state);
  const auto temporary = real_file_.parent_path() / temporary_name_;
  int fd = ::openat(directory_fd_, temporary_name_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) throw_system(errno, "write fence gate", file_, fmt::format("creating {}", temporary.string()));
  auto fail = [&](std::string_view what) {
    int error = errno;
    if (fd >= 0) ::close(fd);
    throw_system(error, "write fence gate", file_, what);
  };
  for (std::size_t written = 0; written < contents.size();) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(fmt::format("writing {}", temporary.string()));
    written += static_cast<std::size_t>(n);
  }
  observe(detail::GateWriteStep::temporary_written);
  if (::fsync(fd) != 0) fail(fmt::format("fsync of {}", temporary.string()));
  if (::close(fd) != 0) {
    fd = -1;
    fail(fmt::format("closing {}", temporary.string()));
  }
  fd = -1;
  observe(detail::GateWriteStep::temporary_synced);
  if (::renameat(directory_fd_, temporary_name_.c_str(), directory_fd_, name_.c_str()) != 0)
    fail(fmt::format("renaming {} over {}", temporary.string(), real_file_.string()));
  observe(detail::GateWriteStep::renamed);
  if (::fsync(directory_fd_) != 0) fail("fsync of its directory");
  observe(detail::GateWriteStep::directory_synced);
}

bool DurableFenceGate::admit(std::string_view key, FencingToken token) {
  std::lock_guard lock(mutex_);
  if (write_failed_)
    throw Error(errc::corrupt_state, "admit", file_.string(),
                "an earlier write of the file failed, so its contents are unknown: open the gate again");
  auto it = highest_.find(key);
  if (!admissible(token, it == highest_.end() ? nullptr : &it->second)) {
    ++refused_;
    return false;
  }
  if (it == highest_.end() || it->second < token) {
    GateState next = highest_;
    next.insert_or_assign(std::string(key), token);
    try {
      persist(next);  // durable before the caller hears "admitted", so it applies only after
    } catch (...) {
      write_failed_ = true;
      throw;
    }
    highest_ = std::move(next);
  }
  ++admitted_;
  return true;
}

std::optional<FencingToken> DurableFenceGate::highest(std::string_view key) const {
  std::lock_guard lock(mutex_);
  auto it = highest_.find(key);
  if (it == highest_.end()) return std::nullopt;
  return it->second;
}

std::uint64_t DurableFenceGate::admitted() const {
  std::lock_guard lock(mutex_);
  return admitted_;
}

std::uint64_t DurableFenceGate::refused() const {
  std::lock_guard lock(mutex_);
  return refused_;
}

std::optional<DurableFenceGate> DurableFenceGate::open(std::filesystem::path file, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return std::optional<DurableFenceGate>(std::in_place, std::move(file)); });
}

bool DurableFenceGate::admit(std::string_view key, FencingToken token, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return admit(key, token); });
}

}  // namespace zkr
