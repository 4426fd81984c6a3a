// SPDX-License-Identifier: Apache-2.0
// Errors: one scheme for the whole library.
//
// Every failure is a std::error_code in one of two categories:
//   - zookeeper_category(): ZooKeeper's own result codes (connection loss, no node, no auth, ...),
//     with the same numeric values the server and C client use.
//   - zkr::category(): conditions this library decides (invalid path, connect timeout, session
//     lost, cancelled, ...).
// What a failure *means* for the caller is one of the conditions below (zkr::condition), whatever
// category carried it: `if (ec == zkr::condition::connection_trouble) retry();`. They classify the
// codes once, here, so that no caller keeps a list of codes of its own.
// Calls come in two forms: the plain form throws zkr::Error (a std::system_error that also names
// the path involved); the overload that takes `std::error_code& ec` last never throws, sets ec (or
// clears it) and returns an empty result on failure. Constructors that check their arguments have
// a factory instead (Session::connect, Lock::make, ...). docs/guide.md, "Without exceptions", lists
// every such form, and the few calls that throw only on a caller's mistake.
#pragma once

#include <string>
#include <string_view>
#include <system_error>

namespace zkr {

// ZooKeeper result codes (values as in the protocol). `ok` is success: its error_code is empty.
enum class zk_errc : int {
  ok = 0,
  system_error = -1,
  runtime_inconsistency = -2,
  data_inconsistency = -3,
  connection_loss = -4,
  marshalling_error = -5,
  unimplemented = -6,
  operation_timeout = -7,
  bad_arguments = -8,
  invalid_state = -9,
  api_error = -100,
  no_node = -101,
  no_auth = -102,
  bad_version = -103,
  no_children_for_ephemerals = -108,
  node_exists = -110,
  not_empty = -111,
  session_expired = -112,
  invalid_callback = -113,
  invalid_acl = -114,
  auth_failed = -115,
  closing = -116,
  nothing = -117,
  session_moved = -118,
};

// Conditions decided by this library.
enum class errc : int {
  invalid_path = 1,            // lock/election path malformed or reserved
  invalid_connect_string,      // host list or chroot malformed
  invalid_argument,            // some other argument out of range
  connect_timeout,             // ensemble not reachable within the connect timeout
  session_lost,                // a non-blocking acquisition found its session lost (a replacement is on its way)
  session_closed,              // the Session was closed by its owner
  auth_failed,                 // credentials refused by the ensemble
  cancelled,                   // a stop_token was triggered
  timed_out,                   // a wait ran past its timeout
  would_block,                 // non-blocking acquire found the lock held
  limit_mismatch,              // participants disagree on a semaphore's limit (or its path records none)
  // 12 is retired (it was never raised).
  missing_chroot = 13,         // the connect string's chroot node does not exist
  unknown_host = 14,           // no host of the connect string resolves (the resolver's reason in the message)
  internal_error = 15,         // an unexpected exception inside the library (a bug: please report it)
  corrupt_state = 16,          // a file of state the library keeps (a DurableFenceGate's) is damaged
  lock_lost = 17,              // a write fenced by a grant was refused: the grant is lost or released
  incompatible_peer = 18,      // the path is another recipe's (a semaphore's, another library's): names it
  would_deadlock = 19,         // a thread asked for a lock it holds (it would wait for itself)
  // TLS (SessionOptions::tls): each message names the server's address.
  tls_untrusted_certificate = 20,        // the server's certificate does not verify (unknown CA, expired, ...)
  tls_hostname_mismatch = 21,            // the server's certificate does not name the host connected to
  tls_client_certificate_required = 22,  // the server demands a client certificate and none was given
  tls_plaintext_server = 23,             // TLS was spoken to a plain-text port (clientPort)
  tls_server_requires_tls = 24,          // plain text was spoken to a TLS-only port (secureClientPort)
  tls_handshake_failed = 25,             // another TLS failure (the server refused our certificate, ...)
  undecodable_data = 28,       // a node's data is not in the layout asked for (a counter's): names the path and what was found
  out_of_range = 29,           // a result the layout cannot hold (a 4-byte counter past 2^31-1): nothing was written
  cache_limit = 32,            // a cache's subtree outgrew its max_nodes (zkr/cache.hpp): the cache stopped
};

// What an error means for the caller (compare an error_code with these; see the top of the file).
enum class condition : int {
  gave_up = 1,         // no grant, and nothing is wrong: would_block, timed_out, cancelled
  connection_trouble,  // the ensemble cannot be reached now; trying again later may work
  session_ended,       // the session (or the grant, lock_lost) this depended on is gone (expired, lost, closed)
  bad_input,           // a caller's argument was refused; the same call will fail again
  no_permission,       // credentials refused, or an ACL does not allow it
};

// The error categories of zk_errc (ZooKeeper's codes), errc (the library's), and condition.
const std::error_category& zookeeper_category() noexcept;
const std::error_category& category() noexcept;
const std::error_category& condition_category() noexcept;

// Make std::error_code and std::error_condition of the library's enums (found by ADL).
std::error_code make_error_code(zk_errc e) noexcept;
std::error_code make_error_code(errc e) noexcept;
std::error_condition make_error_condition(condition c) noexcept;

// Wraps a raw ZooKeeper result code (as returned by the C client); 0 gives an empty error_code.
std::error_code zookeeper_error(int rc) noexcept;

// The exception thrown by the throwing forms.
class Error : public std::system_error {
 public:
  // what() is "<operation> <path>: <ec.message()>", then " (<detail>)" when a detail is given.
  Error(std::error_code ec, std::string_view operation, std::string_view path = {},
        std::string_view detail = {});
  const std::string& path() const noexcept { return path_; }
  // The detail alone (what a connect failure found, say), empty if none was given.
  const std::string& detail() const noexcept { return detail_; }
  const char* what() const noexcept override { return what_.c_str(); }

 private:
  std::string path_;
  std::string detail_;
  std::string what_;
};

// Throws Error if ec is set.
void throw_if(std::error_code ec, std::string_view operation, std::string_view path = {},
              std::string_view detail = {});

}  // namespace zkr

template <>
struct std::is_error_code_enum<zkr::zk_errc> : std::true_type {};
template <>
struct std::is_error_code_enum<zkr::errc> : std::true_type {};
template <>
struct std::is_error_condition_enum<zkr::condition> : std::true_type {};
