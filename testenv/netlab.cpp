// SPDX-License-Identifier: Apache-2.0
// NetLab: the C++ face of testenv/netlab.py. Building, faults and teardown go through the script;
// four-letter words are sent from a short-lived thread that joined the server's namespace.
#include "netlab.hpp"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace zkr::testenv {
namespace {

constexpr auto ip_tool = "/usr/sbin/ip";

std::string script(std::string_view name) { return fmt::format("{}/testenv/{}", source_dir(), name); }

}  // namespace

std::string NetLab::unavailable_reason() {
  if (::geteuid() != 0) return fmt::format("network namespaces and nft need root (running as uid {})", ::geteuid());
  return ManagedDirectory::unavailable_reason("netlab.py");
}

NetLab::NetLab(NetLabOptions options) : options_(options) {
  if (options.servers < 1 || options.clients < 0 || options.tick_ms < 1 || options.sync_limit < 1 ||
      options.init_limit < 1) {
    throw std::invalid_argument(fmt::format(
        "NetLab: servers >= 1, clients >= 0 and positive tick_ms/sync_limit/init_limit needed, "
        "not servers={} clients={} tick_ms={} sync_limit={} init_limit={}",
        options.servers, options.clients, options.tick_ms, options.sync_limit, options.init_limit));
  }
  if (auto reason = unavailable_reason(); !reason.empty()) {
    throw std::runtime_error("NetLab: " + reason);
  }
  directory_ = std::make_unique<ManagedDirectory>("zkr-netlab", "netlab.py");
  try {
    // Initial sync may take initLimit ticks: give the start that long on top of the usual minute.
    double timeout_s = (60 + options.init_limit * options.tick_ms / 1000.0) * timeout_scale();
    std::vector<std::string> start{"start", "--servers", std::to_string(options.servers), "--clients",
                                   std::to_string(options.clients), "--tick-ms", std::to_string(options.tick_ms),
                                   "--sync-limit", std::to_string(options.sync_limit), "--init-limit",
                                   std::to_string(options.init_limit), "--timeout", fmt::format("{}", timeout_s)};
    for (auto& argument : directory_->owner_arguments()) start.push_back(std::move(argument));
    std::string summary = netlab(start);
    std::istringstream lines(summary);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream words(line);
      std::string key, index, address, ns;
      words >> key;
      if (key == "lab") {
        words >> lab_;
      } else if (key == "subnet") {
        words >> subnet_;
      } else if (key == "start_seconds") {
        words >> start_seconds_;
      } else if (key == "server" && (words >> index >> address >> ns)) {
        server_addresses_.push_back(address);
        server_namespaces_.push_back(ns);
      } else if (key == "client" && (words >> index >> address >> ns)) {
        client_addresses_.push_back(address);
        client_namespaces_.push_back(ns);
      }
    }
    if (lab_.empty() || servers() != options.servers || clients() != options.clients) {
      throw std::runtime_error(fmt::format("NetLab: netlab.py start printed an unexpected summary:\n{}", summary));
    }
  } catch (...) {
    directory_->keep();  // torn down all the same; its logs say why the start failed
    throw;
  }
}

NetLab::~NetLab() = default;

std::string NetLab::netlab(const std::vector<std::string>& arguments) const {
  // netlab.py bounds every wait itself (60 s to start); this only guards against a hang.
  return directory_->run(arguments, scaled(std::chrono::seconds(240)));
}

void NetLab::check_server(int server) const { check_server_index("NetLab", server, servers()); }

std::string NetLab::connect_string() const {
  std::string result;
  for (const auto& address : server_addresses_) {
    if (!result.empty()) result += ',';
    result += address;
  }
  return result;
}

std::string NetLab::server_address(int server) const {
  check_server(server);
  return server_addresses_[static_cast<std::size_t>(server)];
}

namespace {

// "s3" -> ('s', 3); throws on anything else.
std::pair<char, int> parse_host(const std::string& host, int servers, int clients) {
  if (host.size() >= 2 && (host[0] == 's' || host[0] == 'c') &&
      host.find_first_not_of("0123456789", 1) == std::string::npos && host.size() <= 4) {
    int index = std::stoi(host.substr(1));
    if (index < (host[0] == 's' ? servers : clients)) return {host[0], index};
  }
  throw std::invalid_argument(fmt::format("NetLab: no host '{}' (servers s0..s{}, clients c0..c{})", host,
                                          servers - 1, clients - 1));
}

}  // namespace

std::string NetLab::host_address(const std::string& host) const {
  auto [kind, index] = parse_host(host, servers(), clients());
  if (kind == 'c') return client_addresses_[static_cast<std::size_t>(index)];
  const auto& address = server_addresses_[static_cast<std::size_t>(index)];
  return address.substr(0, address.rfind(':'));
}

std::string NetLab::namespace_of(const std::string& host) const {
  auto [kind, index] = parse_host(host, servers(), clients());
  return (kind == 'c' ? client_namespaces_ : server_namespaces_)[static_cast<std::size_t>(index)];
}

std::string NetLab::four_letter(int server, std::string_view command, std::chrono::milliseconds timeout) const {
  check_server(server);
  const std::string ns_path = "/run/netns/" + server_namespaces_[static_cast<std::size_t>(server)];
  const std::string address = server_addresses_[static_cast<std::size_t>(server)];
  std::string reply;
  std::string failure;
  // setns() moves only the calling thread; a socket keeps the namespace it was created in. The
  // thread ends right after, so no other code ever runs inside the lab's namespace.
  std::thread inside([&] {
    int fd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      failure = fmt::format("open {}: {}", ns_path, std::strerror(errno));
      return;
    }
    int joined = ::setns(fd, CLONE_NEWNET);
    int error = errno;
    ::close(fd);
    if (joined != 0) {
      failure = fmt::format("setns {}: {}", ns_path, std::strerror(error));
      return;
    }
    reply = four_letter_word(address, command, timeout);
  });
  inside.join();
  if (!failure.empty()) throw std::runtime_error("NetLab::four_letter: " + failure);
  return reply;
}

std::string NetLab::mode(int server) const {
  std::string reply = four_letter(server, "srvr");
  auto position = reply.find("Mode: ");
  if (position == std::string::npos) return {};
  auto end = reply.find('\n', position);
  return trim_trailing_space(reply.substr(position + 6, end == std::string::npos ? std::string::npos : end - position - 6));
}

int NetLab::leader() const {
  return leader_among(servers(), [this](int server) { return four_letter(server, "srvr"); });
}

bool NetLab::wait_for_leader(std::chrono::milliseconds timeout) const {
  return wait_until([this] { return leader() >= 0; }, timeout);
}

std::unique_ptr<Process> NetLab::spawn_on(const std::string& host, std::vector<std::string> argv,
                                          Process::Options options) const {
  if (argv.empty()) throw std::invalid_argument("NetLab::spawn: empty argv");
  std::vector<std::string> full{ip_tool, "netns", "exec", namespace_of(host)};
  full.insert(full.end(), std::make_move_iterator(argv.begin()), std::make_move_iterator(argv.end()));
  return std::make_unique<Process>(std::move(full), std::move(options));
}

std::unique_ptr<Process> NetLab::spawn(int client, std::vector<std::string> argv, Process::Options options) const {
  return spawn_on(fmt::format("c{}", client), std::move(argv), std::move(options));
}

std::unique_ptr<Process> NetLab::kazoo_client(int client, const std::string& hosts, double session_timeout_s,
                                              double op_timeout_s) const {
  Process::Options options;
  options.pipe_stdin = true;
  options.merge_stderr = true;
  auto process = spawn(client,
                       {kDebianPython, script("netlab_client.py"), hosts, "--session-timeout",
                        fmt::format("{}", session_timeout_s), "--op-timeout",
                        fmt::format("{}", op_timeout_s * timeout_scale()), "--connect-timeout",
                        fmt::format("{}", 15 * timeout_scale())},
                       options);
  auto line = process->read_line(scaled(std::chrono::seconds(30)));
  if (line != "connected") {
    throw std::runtime_error(fmt::format("NetLab: kazoo client in c{} could not connect to {}: {}", client, hosts,
                                         line.value_or("(no answer)")));
  }
  return process;
}

void NetLab::link_command(std::string_view command, const std::string& a, const std::string& b) {
  parse_host(a, servers(), clients());
  parse_host(b, servers(), clients());
  netlab({std::string(command), a, b});
}

void NetLab::drop(const std::string& from, const std::string& to) { link_command("drop", from, to); }
void NetLab::cut(const std::string& a, const std::string& b) { link_command("cut", a, b); }
void NetLab::undrop(const std::string& from, const std::string& to) { link_command("undrop", from, to); }
void NetLab::uncut(const std::string& a, const std::string& b) { link_command("uncut", a, b); }

void NetLab::isolate_from_servers(int server) {
  check_server(server);
  netlab({"isolate-from-servers", std::to_string(server)});
}

void NetLab::isolate(const std::string& host) {
  parse_host(host, servers(), clients());
  netlab({"isolate", host});
}

void NetLab::heal() { netlab({"heal"}); }

void NetLab::freeze_server(int server) { netlab(server_command("NetLab", "freeze", server, servers())); }
void NetLab::thaw_server(int server) { netlab(server_command("NetLab", "thaw", server, servers())); }
void NetLab::kill_server(int server) { netlab(server_command("NetLab", "kill", server, servers())); }
void NetLab::stop_server(int server) { netlab(server_command("NetLab", "stop-server", server, servers())); }
void NetLab::start_server(int server) { netlab(server_command("NetLab", "start-server", server, servers())); }

std::string NetLab::describe() const {
  return fmt::format(
      "netlab {} ({}): {} server{} ({}), {} client{}, tickTime {} ms, syncLimit {}, initLimit {}, started in {:.1f} s",
      lab_, subnet_, servers(), servers() == 1 ? "" : "s", connect_string(), clients(), clients() == 1 ? "" : "s",
      options_.tick_ms, options_.sync_limit, options_.init_limit, start_seconds_);
}

}  // namespace zkr::testenv
