// SPDX-License-Identifier: Apache-2.0
#include "tls_relay.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <atomic>
#include <map>
#include <cstdio>
#include <fstream>
#include <algorithm>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <fmt/format.h>

#include <zkr/names.hpp>

#include "host_port.hpp"
#include "log.hpp"

namespace zkr::detail {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

bool is_ip_address(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// Set on an SSL object when the server asked for a client certificate (a CertificateRequest) and
// the relay had none to give: the handshake's failure then means "a client certificate is needed".
int certificate_requested_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int note_certificate_request(SSL* ssl, X509**, EVP_PKEY**) {
  SSL_set_ex_data(ssl, certificate_requested_index(), reinterpret_cast<void*>(1));
  return 0;  // no certificate: the handshake goes on without one
}

bool certificate_was_requested(SSL* ssl) { return SSL_get_ex_data(ssl, certificate_requested_index()) != nullptr; }

std::string openssl_reason(const boost::system::error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) return ec.message();
  const auto code = static_cast<unsigned long>(ec.value());
  // A failed system call (opening a file, say): its errno is the reason.
  if (ERR_GET_LIB(code) == ERR_LIB_SYS) return std::strerror(ERR_GET_REASON(code));
  const char* reason = ERR_reason_error_string(code);
  return reason ? reason : ec.message();
}

bool is_alert(const boost::system::error_code& ec) {
  return ec.category() == asio::error::get_ssl_category() &&
         ERR_GET_REASON(static_cast<unsigned long>(ec.value())) >= SSL_AD_REASON_OFFSET;
}

// What a failed handshake with `server` means, once, for every connection.
TlsFailure classify_handshake_failure(const boost::system::error_code& ec, SSL* ssl, const std::string& server,
                                      const std::string& host, bool have_certificate) {
  TlsFailure failure;
  failure.server = server;
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK) {
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
      failure.code = make_error_code(errc::tls_hostname_mismatch);
      failure.message = fmt::format("the TLS certificate of {} does not name '{}' (hostname verification)", server, host);
    } else {
      failure.code = make_error_code(errc::tls_untrusted_certificate);
      failure.message = fmt::format("the TLS certificate of {} is not trusted: {}", server,
                                    X509_verify_cert_error_string(verify));
    }
    return failure;
  }
  const bool ssl_error = ec.category() == asio::error::get_ssl_category();
  const int reason = ssl_error ? ERR_GET_REASON(static_cast<unsigned long>(ec.value())) : 0;
  const bool alert = reason >= SSL_AD_REASON_OFFSET;
  const bool closed = ec == asio::ssl::error::stream_truncated || ec == asio::error::eof ||
                      ec == asio::error::connection_reset || reason == SSL_R_UNEXPECTED_EOF_WHILE_READING;
  if ((alert || closed) && certificate_was_requested(ssl) && !have_certificate) {
    failure.code = make_error_code(errc::tls_client_certificate_required);
    failure.message = fmt::format("{} demands a TLS client certificate (ssl.clientAuth=need) and none is configured "
                                  "({})", server, openssl_reason(ec));
  } else if (alert && have_certificate &&
             (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE || reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN ||
              reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA || reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED)) {
    failure.code = make_error_code(errc::tls_handshake_failed);
    failure.message = fmt::format("{} refused our TLS client certificate ({})", server, openssl_reason(ec));
  } else if (reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
             reason == SSL_R_RECORD_LENGTH_MISMATCH) {
    failure.code = make_error_code(errc::tls_plaintext_server);
    failure.message = fmt::format("{} does not speak TLS ({}): is it a plain-text port (clientPort) rather than "
                                  "its secureClientPort?", server, openssl_reason(ec));
  } else if (closed) {
    // A plain-text port closes on our ClientHello, and so does a TLS port whose settings allow
    // no handshake: the caller asks the port in plain text which it is (settle_closed_handshake).
    failure.code = make_error_code(errc::tls_plaintext_server);
    failure.message = fmt::format("the connection to {} closed during the TLS handshake ({})", server, openssl_reason(ec));
  } else {
    failure.code = make_error_code(errc::tls_handshake_failed);
    failure.message = fmt::format("the TLS handshake with {} failed: {}", server, openssl_reason(ec));
  }
  return failure;
}

// The handshake of `failure` ended in a closed connection; `plain_text_reply` is whether the port
// answered a four-letter word in plain text (nullopt: it did not say either way).
TlsFailure settle_closed_handshake(TlsFailure failure, std::optional<bool> plain_text_reply) {
  if (plain_text_reply == true) {
    failure.message = fmt::format("{} does not speak TLS (it answers plain text): is it a plain-text port (clientPort) "
                                  "rather than its secureClientPort?", failure.server);
  } else if (plain_text_reply == false) {
    failure.code = make_error_code(errc::tls_handshake_failed);
    failure.message = fmt::format(
        "the TLS port {} broke off the TLS handshake (and closes plain text unanswered): its TLS settings allow no "
        "handshake with us; see the server's log (ssl.protocol, ssl.enabledProtocols, ssl.ciphersuites)",
        failure.server);
  } else {
    failure.code = make_error_code(errc::tls_handshake_failed);
    failure.message = fmt::format(
        "{} closed the connection during the TLS handshake: a TLS port that broke off the TLS handshake (see the "
        "server's log: ssl.protocol, ssl.enabledProtocols, ssl.ciphersuites), or a plain-text port (clientPort)",
        failure.server);
  }
  return failure;
}

// What the server told with the first read after a handshake that went through, which under TLS
// 1.3 is where the server's verdict on our certificate arrives (it checks it after our side of the
// handshake is done): an alert is a refusal, anything else is not the handshake's business.
std::optional<TlsFailure> classify_refusal_after_handshake(const boost::system::error_code& ec, SSL* ssl,
                                                           const std::string& server, const std::string& host,
                                                           bool have_certificate) {
  if (!is_alert(ec)) return std::nullopt;
  return classify_handshake_failure(ec, ssl, server, host, have_certificate);
}

// "0100007F:1F90": an IPv4 endpoint as /proc/net/tcp writes it (the address's bytes as a
// native-endian word, the port in host order).
std::string proc_net_tcp_endpoint(const tcp::endpoint& endpoint) {
  const std::uint32_t network_order = htonl(endpoint.address().to_v4().to_uint());
  return fmt::format("{:08X}:{:04X}", network_order, endpoint.port());
}

// The inodes of the sockets open in this process ("socket:[inode]" among /proc/self/fd).
std::set<std::string> sockets_open_in_this_process() {
  std::set<std::string> inodes;
  DIR* fds = ::opendir("/proc/self/fd");
  if (!fds) return inodes;
  while (const dirent* entry = ::readdir(fds)) {
    if (entry->d_name[0] == '.') continue;
    char target[64];
    const std::string link = std::string("/proc/self/fd/") + entry->d_name;
    const ssize_t length = ::readlink(link.c_str(), target, sizeof target);
    const std::string_view text(target, length > 0 ? static_cast<std::size_t>(length) : 0);
    if (text.starts_with("socket:[") && text.ends_with(']')) inodes.emplace(text.substr(8, text.size() - 9));
  }
  ::closedir(fds);
  return inodes;
}

// The inode of the socket at the other end of an accepted loopback connection: its connection
// (client end -> relay end) as /proc/self/net/tcp lists it; "" when not found. Whether that
// socket is one of this process's is for sockets_open_in_this_process to say.
std::string peer_socket_inode(const tcp::socket& accepted) {
  boost::system::error_code ec;
  const auto relay_end = accepted.local_endpoint(ec);
  if (ec) return {};
  const auto client_end = accepted.remote_endpoint(ec);
  if (ec || !client_end.address().is_v4()) return {};
  const std::string local = proc_net_tcp_endpoint(client_end), remote = proc_net_tcp_endpoint(relay_end);
  std::ifstream table("/proc/self/net/tcp");
  std::string line, inode;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    std::istringstream fields(line);
    std::string slot, local_address, remote_address, state, queues, timer, retransmits, uid, timeout;
    fields >> slot >> local_address >> remote_address >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (local_address == local && remote_address == remote) return inode == "0" ? std::string() : inode;
  }
  return {};
}

// Every relay's addresses of the process, for name_real_servers: relay address -> real server.
struct RelayAddresses {
  std::mutex mutex;
  std::map<std::string, std::string> real_server;
  std::atomic<bool> any{false};
};
RelayAddresses& relay_addresses() {
  static auto& addresses = *new RelayAddresses;  // outlives the C client's threads that log
  return addresses;
}

// The relay's descriptors stay out of the programs this process runs (a child must not hold our
// port, nor accept from it).
void close_on_exec(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC);
}

// One relayed server: its real address and our port for it.
struct Endpoint {
  std::string server;  // "host:port" as the connect string gives it
  HostPort target;
  tcp::acceptor acceptor;
  std::string relay_address;  // "127.0.0.1:port"
  bool last_failed = false;   // the latest connection to it ended in a TLS failure (relay thread)
  bool listed = true;         // in the latest list (guarded by Impl::endpoints_mutex)
};

class Connection;

}  // namespace

struct TlsRelay::Impl {
  // The SSL context outlives the io_context (whose destruction destroys the streams that use it),
  // which outlives the acceptors of `endpoints`.
  asio::ssl::context ssl{asio::ssl::context::tls_client};
  asio::io_context io;
  // Guards `endpoints` (which only grows: an Endpoint stays where it is until the relay goes),
  // each one's `listed`, and client_connect_string: set_servers runs on the session's threads.
  mutable std::mutex endpoints_mutex;
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::string client_connect_string;
  TlsOptions options;
  bool have_certificate = false;
  std::chrono::milliseconds handshake_timeout{};
  FailureHandler on_failure;
  std::thread thread;
  // The C client handles that may connect through the relay (admit_client_handle), and the
  // connections it serves (relay thread only).
  std::shared_ptr<std::atomic<int>> client_handles = std::make_shared<std::atomic<int>>(0);
  std::vector<std::weak_ptr<Connection>> served;

  void accept(Endpoint& endpoint);
  Endpoint& open_endpoint_locked(const std::string& server);
  std::string list_locked(const ServerList& list);
  bool admit(const std::set<std::string>& open_sockets);
  void report(Endpoint& endpoint, TlsFailure failure);
};

namespace {

void ask_in_plain_text(TlsRelay::Impl& relay, Endpoint& endpoint, TlsFailure failure);

// One connection of the C client, carried to one server.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(TlsRelay::Impl& relay, Endpoint& endpoint, tcp::socket client, std::string client_inode)
      : relay_(relay), endpoint_(endpoint), client_(std::move(client)), client_inode_(std::move(client_inode)),
        server_(relay.io, relay.ssl), resolver_(relay.io), deadline_(relay.io) {}

  const std::string& client_inode() const { return client_inode_; }
  bool stopped() const { return stopped_; }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    boost::system::error_code ignored;
    deadline_.cancel();
    resolver_.cancel();
    client_.close(ignored);
    server_.lowest_layer().close(ignored);
  }

  void start() {
    deadline_.expires_after(relay_.handshake_timeout);
    deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec && !self->relaying_) self->stop();  // the server stayed silent: as a dropped connection
    });
    resolver_.async_resolve(endpoint_.target.host, endpoint_.target.port,
                            [self = shared_from_this()](boost::system::error_code ec, tcp::resolver::results_type found) {
                              if (ec || self->stopped_) return self->stop();
                              self->connect(found);
                            });
  }

 private:
  void connect(const tcp::resolver::results_type& found) {
    asio::async_connect(server_.lowest_layer(), found,
                        [self = shared_from_this()](boost::system::error_code ec, const tcp::endpoint&) {
                          if (ec || self->stopped_) return self->stop();
                          close_on_exec(self->server_.lowest_layer().native_handle());
                          // Requests and replies are small: Nagle's delay would hold each one back.
                          boost::system::error_code ignored;
                          self->server_.lowest_layer().set_option(tcp::no_delay(true), ignored);
                          self->handshake();
                        });
  }

  void handshake() {
    SSL* ssl = server_.native_handle();
    const std::string& host = endpoint_.target.host;
    if (!is_ip_address(host)) SSL_set_tlsext_host_name(ssl, host.c_str());  // SNI names hosts, not addresses
    if (relay_.options.verify_host) {
      X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
      if (is_ip_address(host)) X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
      else X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    }
    server_.async_handshake(asio::ssl::stream_base::client, [self = shared_from_this()](boost::system::error_code ec) {
      if (self->stopped_) return self->stop();
      if (ec) {
        TlsFailure failure = classify_handshake_failure(ec, self->server_.native_handle(), self->endpoint_.server,
                                                        self->endpoint_.target.host, self->relay_.have_certificate);
        if (failure.code == errc::tls_plaintext_server && closed_during_handshake(ec)) {
          self->stop();
          return ask_in_plain_text(self->relay_, self->endpoint_, std::move(failure));
        }
        self->relay_.report(self->endpoint_, std::move(failure));
        return self->stop();
      }
      self->endpoint_.last_failed = false;
      self->relaying_ = true;
      self->deadline_.cancel();
      self->client_to_server();
      self->server_to_client();
    });
  }

  // Each direction has at most one read or one write outstanding: the next read starts once the
  // previous bytes are written, so what the client sent before closing (a closeSession) reaches
  // the server before the relay closes that side too.
  void client_to_server() {
    client_.async_read_some(asio::buffer(upstream_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (ec || self->stopped_) return self->stop();
      asio::async_write(self->server_, asio::buffer(self->upstream_, n),
                        [self](boost::system::error_code write_ec, std::size_t) {
                          if (write_ec || self->stopped_) return self->stop();
                          self->client_to_server();
                        });
    });
  }

  void server_to_client() {
    server_.async_read_some(asio::buffer(downstream_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
      if (ec && !self->stopped_ && !self->heard_from_server_) {
        if (auto refusal = classify_refusal_after_handshake(ec, self->server_.native_handle(), self->endpoint_.server,
                                                            self->endpoint_.target.host, self->relay_.have_certificate))
          self->relay_.report(self->endpoint_, std::move(*refusal));
      }
      if (ec || self->stopped_) return self->stop();
      self->heard_from_server_ = true;
      asio::async_write(self->client_, asio::buffer(self->downstream_, n),
                        [self](boost::system::error_code write_ec, std::size_t) {
                          if (write_ec || self->stopped_) return self->stop();
                          self->server_to_client();
                        });
    });
  }

  static bool closed_during_handshake(const boost::system::error_code& ec) {
    const bool ssl_error = ec.category() == asio::error::get_ssl_category();
    return ec == asio::ssl::error::stream_truncated || ec == asio::error::eof || ec == asio::error::connection_reset ||
           (ssl_error && ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_UNEXPECTED_EOF_WHILE_READING);
  }

  TlsRelay::Impl& relay_;
  Endpoint& endpoint_;
  tcp::socket client_;
  const std::string client_inode_;  // the C client's end of client_
  asio::ssl::stream<tcp::socket> server_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_;
  bool relaying_ = false;
  bool stopped_ = false;
  bool heard_from_server_ = false;  // a byte of the server's came through
  std::array<char, 16 * 1024> upstream_{};
  std::array<char, 16 * 1024> downstream_{};
};

// Whether a port that closed our ClientHello answers a four-letter word in plain text (any
// ZooKeeper plain port does, "not in the whitelist" included): then it is a plain-text port; one
// that closes that too unanswered is a TLS port that breaks off handshakes.
class PlainTextQuestion : public std::enable_shared_from_this<PlainTextQuestion> {
 public:
  PlainTextQuestion(TlsRelay::Impl& relay, Endpoint& endpoint, TlsFailure failure)
      : relay_(relay), endpoint_(endpoint), failure_(std::move(failure)), socket_(relay.io), resolver_(relay.io),
        deadline_(relay.io) {}

  void start() {
    deadline_.expires_after(std::min<std::chrono::milliseconds>(relay_.handshake_timeout, std::chrono::seconds(2)));
    deadline_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->finish(std::nullopt);
    });
    resolver_.async_resolve(endpoint_.target.host, endpoint_.target.port,
                            [self = shared_from_this()](boost::system::error_code ec, tcp::resolver::results_type found) {
                              if (ec) return self->finish(std::nullopt);
                              asio::async_connect(self->socket_, found, [self](boost::system::error_code connect_ec, const tcp::endpoint&) {
                                if (connect_ec) return self->finish(std::nullopt);
                                close_on_exec(self->socket_.native_handle());
                                // The newline: Netty's TLS port decides only once it has 5 bytes.
                                asio::async_write(self->socket_, asio::buffer("srvr\n", 5), [self](boost::system::error_code write_ec, std::size_t) {
                                  if (write_ec) return self->finish(std::nullopt);
                                  self->socket_.async_read_some(asio::buffer(self->reply_), [self](boost::system::error_code read_ec, std::size_t n) {
                                    if (n > 0) return self->finish(true);
                                    const bool closed = read_ec == asio::error::eof || read_ec == asio::error::connection_reset;
                                    self->finish(closed ? std::optional<bool>(false) : std::nullopt);
                                  });
                                });
                              });
                            });
  }

 private:
  void finish(std::optional<bool> answered) {
    if (done_) return;
    done_ = true;
    boost::system::error_code ignored;
    deadline_.cancel();
    resolver_.cancel();
    socket_.close(ignored);
    relay_.report(endpoint_, settle_closed_handshake(std::move(failure_), answered));
  }

  TlsRelay::Impl& relay_;
  Endpoint& endpoint_;
  TlsFailure failure_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_;
  std::array<char, 64> reply_{};
  bool done_ = false;
};

void ask_in_plain_text(TlsRelay::Impl& relay, Endpoint& endpoint, TlsFailure failure) {
  std::make_shared<PlainTextQuestion>(relay, endpoint, std::move(failure))->start();
}

// A TLS file that cannot be used is named with the reason (missing, permission denied, ...), which
// OpenSSL's own error would not give.
void check_readable(const std::filesystem::path& path, std::string_view what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw Error(make_error_code(errc::invalid_argument), "set up TLS", path.string(), fmt::format("the {} does not exist", what));
  const bool directory = std::filesystem::is_directory(path, ec);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0)
    throw Error(make_error_code(errc::invalid_argument), "set up TLS", path.string(),
                fmt::format("cannot read the {}: {}", what, std::strerror(errno)));
  ::close(fd);
}

}  // namespace

// Which connections are the C client's own. The C client connects by itself, silently: a failed
// attempt to one server and the next attempt to another give no event, so the session cannot
// announce each connect to the relay, and counting state events would fall behind. What can be
// counted is handles: a handle of the C client (zookeeper_init, flags 0: no read-only probing)
// has at most one socket, and closes it before it opens the next. So the relay serves, over all
// its ports, at most one connection per handle the session holds (admit_client_handle), and a
// connection counts until the process no longer has its client end open; another socket of this
// process that connects while every handle has its connection is closed unread. (Between two of
// a handle's connections a socket of this process could take its place and the handle would be
// refused until that one closes: only code in this process can, which can read the key anyway.)
// A socket of another process is never served: the process boundary is what keeps another local
// user from borrowing our certificate.
bool TlsRelay::Impl::admit(const std::set<std::string>& open_sockets) {
  std::erase_if(served, [&](const std::weak_ptr<Connection>& weak) {
    const auto connection = weak.lock();
    if (!connection || connection->stopped()) return true;
    if (open_sockets.contains(connection->client_inode())) return false;
    connection->stop();  // its client closed it and moved on; the end of stream is still on its way
    return true;
  });
  return static_cast<int>(served.size()) < client_handles->load();
}

void TlsRelay::Impl::accept(Endpoint& endpoint) {
  endpoint.acceptor.async_accept([this, &endpoint](boost::system::error_code ec, tcp::socket client) {
    if (ec == asio::error::operation_aborted || !endpoint.acceptor.is_open()) return;
    if (!ec) {
      close_on_exec(client.native_handle());
      boost::system::error_code ignored;
      client.set_option(tcp::no_delay(true), ignored);  // as the C client sets on its end
      // Only our own C client's connections are carried (see admit); anything else is closed unread.
      const std::string peer = peer_socket_inode(client);
      const auto open_sockets = sockets_open_in_this_process();
      if (!peer.empty() && open_sockets.contains(peer) && admit(open_sockets)) {
        auto connection = std::make_shared<Connection>(*this, endpoint, std::move(client), peer);
        served.push_back(connection);
        connection->start();
      } else {
        log(LogLevel::warning, "the TLS relay for {} refused a connection that is not its session's client's",
            endpoint.server);
      }
    }
    accept(endpoint);
  });
}

void TlsRelay::Impl::report(Endpoint& endpoint, TlsFailure failure) {
  endpoint.last_failed = true;
  failure.every_server_failed = true;
  {
    std::lock_guard lock(endpoints_mutex);
    for (const auto& other : endpoints)
      if (other->listed) failure.every_server_failed = failure.every_server_failed && other->last_failed;
  }
  if (on_failure) on_failure(failure);
}

// A port of our own for `server` (loopback only, a port the kernel picks: the C client is the only
// one meant to connect), accepting at once.
Endpoint& TlsRelay::Impl::open_endpoint_locked(const std::string& server) {
  auto endpoint = std::unique_ptr<Endpoint>(new Endpoint{server, split_host_port(server), tcp::acceptor(io), {}});
  const tcp::endpoint listen(asio::ip::address_v4::loopback(), 0);
  endpoint->acceptor.open(listen.protocol());
  close_on_exec(endpoint->acceptor.native_handle());
  endpoint->acceptor.bind(listen);
  endpoint->acceptor.listen();
  endpoint->relay_address = fmt::format("127.0.0.1:{}", endpoint->acceptor.local_endpoint().port());
  {
    auto& addresses = relay_addresses();
    std::lock_guard lock(addresses.mutex);
    addresses.real_server[endpoint->relay_address] = endpoint->server;
    addresses.any = true;
  }
  Endpoint& opened = *endpoints.emplace_back(std::move(endpoint));
  accept(opened);  // a new acceptor: no other thread touches it yet
  return opened;
}

// Marks the endpoints of `list` listed (opening those missing) and the others not; sets and
// returns client_connect_string.
std::string TlsRelay::Impl::list_locked(const ServerList& list) {
  for (const auto& endpoint : endpoints) endpoint->listed = false;
  std::string connect;
  for (const std::string& server : list.hosts) {
    auto found = std::find_if(endpoints.begin(), endpoints.end(), [&](const auto& each) { return each->server == server; });
    Endpoint& endpoint = found != endpoints.end() ? **found : open_endpoint_locked(server);
    endpoint.listed = true;
    if (!connect.empty()) connect += ',';
    connect += endpoint.relay_address;
  }
  client_connect_string = connect + list.chroot;
  return client_connect_string;
}

TlsRelay::TlsRelay(const std::string& servers, const TlsOptions& options, std::chrono::milliseconds handshake_timeout,
                   FailureHandler on_failure)
    : impl_(std::make_shared<Impl>()) {
  std::error_code parse_ec;
  const auto list = parse_servers(servers, parse_ec);
  if (!list) throw Error(make_error_code(errc::invalid_connect_string), "connect to", servers, describe_servers_problem(servers));
  Impl& impl = *impl_;
  impl.options = options;
  impl.handshake_timeout = handshake_timeout;
  impl.on_failure = std::move(on_failure);

  if (options.ca.empty())
    throw Error(make_error_code(errc::invalid_argument), "set up TLS", {}, "a CA file or directory is required");
  if (options.cert.empty() != options.key.empty())
    throw Error(make_error_code(errc::invalid_argument), "set up TLS", options.cert.empty() ? options.key.string() : options.cert.string(),
                "a client certificate needs its key, and a key its certificate");
  check_readable(options.ca, "CA file or directory");
  SSL_CTX* context = impl.ssl.native_handle();
  // TLS 1.2 at least, as ZooKeeper's own client and server default to.
  SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION);
  boost::system::error_code ec;
  if (std::filesystem::is_directory(options.ca)) impl.ssl.add_verify_path(options.ca.string(), ec);
  else impl.ssl.load_verify_file(options.ca.string(), ec);
  if (ec)
    throw Error(make_error_code(errc::invalid_argument), "set up TLS", options.ca.string(),
                fmt::format("cannot read the CA certificates: {}", openssl_reason(ec)));
  if (!options.cert.empty()) {
    check_readable(options.cert, "client certificate");
    check_readable(options.key, "client key");
    impl.ssl.use_certificate_chain_file(options.cert.string(), ec);
    if (ec)
      throw Error(make_error_code(errc::invalid_argument), "set up TLS", options.cert.string(),
                  fmt::format("cannot read the client certificate: {}", openssl_reason(ec)));
    impl.ssl.use_private_key_file(options.key.string(), asio::ssl::context::pem, ec);
    if (ec || SSL_CTX_check_private_key(context) != 1)
      throw Error(make_error_code(errc::invalid_argument), "set up TLS", options.key.string(),
                  fmt::format("cannot use the client key: {}", ec ? openssl_reason(ec) : "it does not match the certificate"));
    impl.have_certificate = true;
  }
  impl.ssl.set_verify_mode(asio::ssl::verify_peer);
  SSL_CTX_set_client_cert_cb(context, note_certificate_request);

  {
    std::lock_guard lock(impl.endpoints_mutex);
    impl.list_locked(*list);
  }
  impl.thread = std::thread([impl = impl_] { impl->io.run(); });
}

// No set_servers runs any more (the session has ended); the relay thread only reads `endpoints`.
TlsRelay::~TlsRelay() {
  {
    auto& addresses = relay_addresses();
    std::lock_guard lock(addresses.mutex);
    for (const auto& endpoint : impl_->endpoints) addresses.real_server.erase(endpoint->relay_address);
    addresses.any = !addresses.real_server.empty();
  }
  asio::post(impl_->io, [impl = impl_.get()] {
    boost::system::error_code ignored;
    for (const auto& endpoint : impl->endpoints) endpoint->acceptor.close(ignored);
    impl->io.stop();
  });
  if (impl_->thread.joinable()) {
    if (impl_->thread.get_id() == std::this_thread::get_id()) impl_->thread.detach();
    else impl_->thread.join();
  }
}

std::shared_ptr<void> TlsRelay::admit_client_handle() {
  auto handles = impl_->client_handles;
  handles->fetch_add(1);
  return std::shared_ptr<void>(handles.get(), [handles](void*) { handles->fetch_sub(1); });
}

std::string TlsRelay::client_connect_string() const {
  std::lock_guard lock(impl_->endpoints_mutex);
  return impl_->client_connect_string;
}

std::string TlsRelay::set_servers(const std::string& servers) {
  std::error_code parse_ec;
  const auto list = parse_servers(servers, parse_ec);
  if (!list) throw Error(make_error_code(errc::invalid_connect_string), "relay", servers, describe_servers_problem(servers));
  std::lock_guard lock(impl_->endpoints_mutex);
  return impl_->list_locked(*list);
}

std::string TlsRelay::real_server(std::string_view relay_address) const {
  std::lock_guard lock(impl_->endpoints_mutex);
  for (const auto& endpoint : impl_->endpoints)
    if (endpoint->relay_address == relay_address) return endpoint->server;
  return std::string(relay_address);
}

std::string name_real_servers(std::string text) {
  auto& addresses = relay_addresses();
  if (!addresses.any.load(std::memory_order_relaxed) || text.find("127.0.0.1:") == std::string::npos) return text;
  std::lock_guard lock(addresses.mutex);
  for (const auto& [relay, server] : addresses.real_server) {
    const std::string named = server + " (through the TLS relay)";
    for (auto at = text.find(relay); at != std::string::npos; at = text.find(relay, at + named.size())) {
      // The whole port: "127.0.0.1:4012" must not match inside "127.0.0.1:40123".
      const auto end = at + relay.size();
      if (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) {
        at += 1;
        continue;
      }
      text.replace(at, relay.size(), named);
    }
  }
  return text;
}

}  // namespace zkr::detail
