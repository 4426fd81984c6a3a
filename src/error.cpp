// SPDX-License-Identifier: Apache-2.0
#include <zkr/error.hpp>

#include <optional>

#include <fmt/format.h>

namespace zkr {
namespace {

class ZooKeeperCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "zookeeper"; }
  std::string message(int rc) const override {
    switch (static_cast<zk_errc>(rc)) {
      case zk_errc::ok: return "ok";
      case zk_errc::system_error: return "system error";
      case zk_errc::runtime_inconsistency: return "runtime inconsistency";
      case zk_errc::data_inconsistency: return "data inconsistency";
      case zk_errc::connection_loss: return "connection to the ensemble lost";
      case zk_errc::marshalling_error: return "marshalling error";
      case zk_errc::unimplemented: return "operation not implemented by the server";
      case zk_errc::operation_timeout: return "operation timed out";
      case zk_errc::bad_arguments: return "bad arguments";
      case zk_errc::invalid_state: return "handle in an invalid state (session expired or closed)";
      case zk_errc::api_error: return "API error";
      case zk_errc::no_node: return "no such node";
      case zk_errc::no_auth: return "not authorised (ACL refused)";
      case zk_errc::bad_version: return "version conflict";
      case zk_errc::no_children_for_ephemerals: return "ephemeral nodes may not have children";
      case zk_errc::node_exists: return "node already exists";
      case zk_errc::not_empty: return "node has children";
      case zk_errc::session_expired: return "session expired";
      case zk_errc::invalid_callback: return "invalid callback";
      case zk_errc::invalid_acl: return "invalid ACL";
      case zk_errc::auth_failed: return "authentication failed";
      case zk_errc::closing: return "ZooKeeper handle is closing";
      case zk_errc::nothing: return "no server responses to process";
      case zk_errc::session_moved: return "session moved to another server";
    }
    return fmt::format("ZooKeeper error {}", rc);
  }
};

class LibraryCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "zkrecipes"; }
  std::string message(int value) const override {
    switch (static_cast<errc>(value)) {
      case errc::invalid_path: return "invalid path";
      case errc::invalid_connect_string: return "invalid connect string";
      case errc::invalid_argument: return "invalid argument";
      case errc::connect_timeout: return "ensemble not reachable within the connect timeout";
      case errc::session_lost: return "session lost";
      case errc::session_closed: return "session closed";
      case errc::auth_failed: return "authentication failed";
      case errc::cancelled: return "cancelled";
      case errc::timed_out: return "timed out";
      case errc::would_block: return "held by another contender";
      case errc::limit_mismatch: return "participants disagree on the limit";
      case errc::missing_chroot: return "the connect string's chroot node does not exist (create it first)";
      case errc::unknown_host: return "no host of the connect string resolves";
      case errc::internal_error: return "unexpected internal error";
      case errc::corrupt_state: return "stored state is damaged";
      case errc::lock_lost: return "lock lost: the write was refused as a whole, nothing of it applied";
      case errc::incompatible_peer: return "the path belongs to another recipe, which this one cannot share it with";
      case errc::would_deadlock: return "would deadlock";
      case errc::tls_untrusted_certificate: return "TLS: the server's certificate is not trusted";
      case errc::tls_hostname_mismatch: return "TLS: the server's certificate does not name the host";
      case errc::tls_client_certificate_required: return "TLS: the server demands a client certificate";
      case errc::tls_plaintext_server: return "TLS: the server does not speak TLS on this port";
      case errc::tls_server_requires_tls: return "the server speaks only TLS on this port (set TLS options)";
      case errc::tls_handshake_failed: return "TLS: the handshake failed";
      case errc::undecodable_data: return "the node's data is not in the layout asked for";
      case errc::out_of_range: return "the result is out of the layout's range; nothing was written";
      case errc::cache_limit: return "the cached subtree has more nodes than the cache's max_nodes";
    }
    return fmt::format("zkrecipes error {}", value);
  }
};

// Every code the library or the server can report, classified once.
class ConditionCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "zkrecipes condition"; }
  std::string message(int value) const override {
    switch (static_cast<condition>(value)) {
      case condition::gave_up: return "gave up waiting";
      case condition::connection_trouble: return "the ensemble cannot be reached";
      case condition::session_ended: return "the session ended";
      case condition::bad_input: return "bad input";
      case condition::no_permission: return "no permission";
    }
    return fmt::format("zkrecipes condition {}", value);
  }
  bool equivalent(const std::error_code& code, int value) const noexcept override {
    return classify(code) == static_cast<condition>(value);
  }

 private:
  static std::optional<condition> classify(const std::error_code& code) noexcept {
    if (code.category() == category()) {
      switch (static_cast<errc>(code.value())) {
        case errc::would_block:
        case errc::timed_out:
        case errc::cancelled: return condition::gave_up;
        case errc::connect_timeout:
        case errc::unknown_host: return condition::connection_trouble;
        case errc::session_lost:
        case errc::session_closed:
        case errc::lock_lost: return condition::session_ended;
        case errc::invalid_path:
        case errc::invalid_connect_string:
        case errc::invalid_argument:
        case errc::limit_mismatch:
        case errc::incompatible_peer:
        case errc::missing_chroot:
        case errc::corrupt_state:
        case errc::would_deadlock:
        case errc::undecodable_data:
        case errc::out_of_range:
        case errc::cache_limit: return condition::bad_input;
        case errc::auth_failed: return condition::no_permission;
        // The ensemble cannot be reached as configured; an operator's fix (a certificate, a port)
        // may make the same call work later.
        case errc::tls_untrusted_certificate:
        case errc::tls_hostname_mismatch:
        case errc::tls_client_certificate_required:
        case errc::tls_plaintext_server:
        case errc::tls_server_requires_tls:
        case errc::tls_handshake_failed: return condition::connection_trouble;
        default: return std::nullopt;
      }
    }
    if (code.category() == zookeeper_category()) {
      switch (static_cast<zk_errc>(code.value())) {
        case zk_errc::connection_loss:
        case zk_errc::operation_timeout:
        case zk_errc::session_moved: return condition::connection_trouble;
        case zk_errc::session_expired:
        case zk_errc::closing:
        case zk_errc::invalid_state: return condition::session_ended;
        case zk_errc::bad_arguments: return condition::bad_input;
        case zk_errc::no_auth:
        case zk_errc::invalid_acl:
        case zk_errc::auth_failed: return condition::no_permission;
        default: return std::nullopt;
      }
    }
    return std::nullopt;
  }
};

}  // namespace

const std::error_category& condition_category() noexcept {
  static const ConditionCategory instance;
  return instance;
}

std::error_condition make_error_condition(condition c) noexcept {
  return {static_cast<int>(c), condition_category()};
}

const std::error_category& zookeeper_category() noexcept {
  static const ZooKeeperCategory instance;
  return instance;
}

const std::error_category& category() noexcept {
  static const LibraryCategory instance;
  return instance;
}

std::error_code make_error_code(zk_errc e) noexcept {
  if (e == zk_errc::ok) return {};
  return {static_cast<int>(e), zookeeper_category()};
}

std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), category()}; }

std::error_code zookeeper_error(int rc) noexcept { return make_error_code(static_cast<zk_errc>(rc)); }

static std::string describe(std::error_code ec, std::string_view operation, std::string_view path,
                            std::string_view detail) {
  // A message quotes at most the start of an absurdly long path (Error::path() keeps all of it).
  constexpr std::size_t kQuotedPathBytes = 200;
  std::string shown(path.substr(0, kQuotedPathBytes));
  if (path.size() > kQuotedPathBytes) shown += fmt::format("... ({} bytes)", path.size());
  std::string text = path.empty() ? fmt::format("{}: {}", operation, ec.message())
                                  : fmt::format("{} {}: {}", operation, shown, ec.message());
  if (!detail.empty()) text += fmt::format(" ({})", detail);
  return text;
}

// std::system_error appends ": " + ec.message() to its argument; build what() ourselves instead.
Error::Error(std::error_code ec, std::string_view operation, std::string_view path, std::string_view detail)
    : std::system_error(ec), path_(path), detail_(detail), what_(describe(ec, operation, path, detail)) {}

void throw_if(std::error_code ec, std::string_view operation, std::string_view path, std::string_view detail) {
  if (ec) throw Error(ec, operation, path, detail);
}

}  // namespace zkr
