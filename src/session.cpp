// SPDX-License-Identifier: Apache-2.0
#include <zkr/session.hpp>

#include <fstream>

#include <fmt/format.h>

#include <zkr/error.hpp>

#include "internals.hpp"
#include "session_core.hpp"
#include "without_exceptions.hpp"

namespace zkr {

std::string_view to_string(LossReason reason) noexcept {
  switch (reason) {
    case LossReason::session_lost: return "session lost";
    case LossReason::connection_lost: return "connection lost";
    case LossReason::node_deleted: return "lock node deleted";
    case LossReason::session_closed: return "session closed";
  }
  return "unknown";
}

std::string_view to_string(SessionLossCause cause) noexcept {
  switch (cause) {
    case SessionLossCause::server_expiry: return "the ensemble expired the session";
    case SessionLossCause::local_deadline:
      return "no acknowledgement through the leader before the session monitor's deadline";
    case SessionLossCause::disconnect: return "the connection dropped (loss policy on_disconnect)";
  }
  return "unknown";
}

std::string session_id_text(std::int64_t session_id) {
  return fmt::format("{:#x}", static_cast<std::uint64_t>(session_id));
}

std::string_view to_string(SessionState state) noexcept {
  switch (state) {
    case SessionState::connecting: return "connecting";
    case SessionState::connected: return "connected";
    case SessionState::suspended: return "suspended";
    case SessionState::lost: return "lost";
    case SessionState::closed: return "closed";
    case SessionState::auth_failed: return "auth_failed";
  }
  return "unknown";
}

DigestCredentials DigestCredentials::from_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in)
    throw Error(std::error_code(errno ? errno : ENOENT, std::generic_category()), "read credentials from",
                file.string());
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' ')) line.pop_back();
  auto colon = line.find(':');
  // The message never quotes the file's content: it holds a password.
  if (colon == std::string::npos || colon == 0 || colon + 1 == line.size())
    throw Error(make_error_code(errc::invalid_argument), "read credentials from", file.string(),
                "expected one line 'user:password' with neither part empty");
  return {line.substr(0, colon), line.substr(colon + 1)};
}

std::optional<DigestCredentials> DigestCredentials::from_file(const std::filesystem::path& file,
                                                              std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return std::optional<DigestCredentials>(from_file(file)); });
}

Session::Session(SessionOptions options) : core_(std::make_shared<detail::SessionCore>(std::move(options))) {
  core_->connect_or_throw();
}

std::optional<Session> Session::connect(SessionOptions options, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return std::optional<Session>(std::in_place, std::move(options)); });
}

Session::~Session() { close(); }

SessionState Session::state() const { return core_->state(); }
std::int64_t Session::id() const { return core_->session_id(); }
std::optional<SessionLossCause> Session::last_loss_cause() const { return core_->last_loss_cause(); }
std::chrono::milliseconds Session::negotiated_timeout() const { return core_->negotiated_timeout(); }
std::chrono::milliseconds Session::lead_time() const { return core_->lead_time(); }
std::chrono::milliseconds Session::silence_tolerance() const { return core_->silence_tolerance(); }
const SessionOptions& Session::options() const { return core_->options(); }
std::string Session::servers() const { return core_->servers(); }
bool Session::set_servers(const std::string& servers) { return core_->set_servers(servers); }
bool Session::set_servers(const std::string& servers, std::error_code& ec) noexcept {
  return detail::without_exceptions(ec, [&] { return core_->set_servers(servers); });
}
bool Session::wait_connected(std::chrono::milliseconds timeout) const { return core_->wait_connected(timeout); }
Subscription Session::on_state_change(std::function<void(SessionState)> listener) {
  return core_->on_state_change(std::move(listener));
}
Subscription Session::on_deadline(std::function<void(SessionDeadline)> listener) {
  return core_->on_deadline(std::move(listener));
}
SessionMetrics Session::metrics() const { return core_->metrics(); }
void Session::close() { core_->close(); }

}  // namespace zkr
