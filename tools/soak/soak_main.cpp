// SPDX-License-Identifier: Apache-2.0
// zkr_soak: a soak of the lock under faults, and its checker.
//
//   zkr_soak run [--clients 5] [--duration 120] [--target-grants N] [--seed S] [--out DIR] ...
//   zkr_soak check RUN_DIR [--require-races]
//
// `run` starts a 3-server ensemble (testenv/zkenv.py), a fenced store, and N client processes
// (zkr_soak_client), each reaching every server through a proxy of its own so that its links can be
// cut or reset alone. A fault schedule drawn from the seed then injects, one at a time, every kind
// of fault in rounds (each round a shuffled bag holding every kind): frozen holders and clients,
// killed clients, blackholed and reset links, lost create replies, forced session expiry, a killed
// or frozen leader, and lost quorum. At the end it heals everything, checks that every lock node
// has a live owner, stops the clients, checks that no node is left, and runs the checker.
#include <zookeeper/zookeeper.h>

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <testenv.hpp>

#include "checker.hpp"
#include "fenced_store.hpp"
#include "soak_log.hpp"

namespace {

using namespace std::chrono_literals;
namespace po = boost::program_options;
namespace fs = std::filesystem;
using zkr::soak::monotonic_ns;
using Milliseconds = std::chrono::milliseconds;

struct RunOptions {
  int clients = 5;
  int servers = 3;
  int tick_ms = 100;
  int session_timeout_ms = 3000;
  double duration_s = 120;
  std::uint64_t target_grants = 0;
  std::uint64_t seed = 1;
  std::string out;
  int hold_max_ms = 20;
  bool require_races = false;
  std::string client_binary = ZKR_SOAK_CLIENT;
};

enum class FaultKind {
  freeze_holder,
  freeze_client_short,
  freeze_client_long,
  kill_client,
  blackhole_client,
  reset_client,
  drop_reply,
  expire_session,
  kill_leader,
  freeze_leader,
  freeze_follower,
  quorum_loss,
};

std::string_view name_of(FaultKind kind) {
  switch (kind) {
    case FaultKind::freeze_holder: return "freeze_holder";
    case FaultKind::freeze_client_short: return "freeze_client_short";
    case FaultKind::freeze_client_long: return "freeze_client_long";
    case FaultKind::kill_client: return "kill_client";
    case FaultKind::blackhole_client: return "blackhole_client";
    case FaultKind::reset_client: return "reset_client";
    case FaultKind::drop_reply: return "drop_reply";
    case FaultKind::expire_session: return "expire_session";
    case FaultKind::kill_leader: return "kill_leader";
    case FaultKind::freeze_leader: return "freeze_leader";
    case FaultKind::freeze_follower: return "freeze_follower";
    case FaultKind::quorum_loss: return "quorum_loss";
  }
  return "unknown";
}

// One round of the schedule: every kind, the common ones more than once.
const std::vector<FaultKind> kRound = {
    FaultKind::freeze_holder,    FaultKind::freeze_holder,       FaultKind::freeze_client_short,
    FaultKind::freeze_client_long, FaultKind::kill_client,       FaultKind::blackhole_client,
    FaultKind::blackhole_client, FaultKind::reset_client,        FaultKind::drop_reply,
    FaultKind::expire_session,   FaultKind::expire_session,      FaultKind::kill_leader,
    FaultKind::freeze_leader,    FaultKind::freeze_follower,     FaultKind::quorum_loss,
};

// The driver's own view of the ensemble, through the plain C client.
class ZooKeeperReader {
 public:
  explicit ZooKeeperReader(const std::string& servers) {
    handle_ = zookeeper_init(servers.c_str(), nullptr, 20000, nullptr, nullptr, 0);
    for (int i = 0; i < 300 && handle_ && zoo_state(handle_) != ZOO_CONNECTED_STATE; ++i)
      std::this_thread::sleep_for(100ms);
    if (!handle_ || zoo_state(handle_) != ZOO_CONNECTED_STATE)
      throw std::runtime_error(fmt::format("cannot connect to {} to inspect the lock", servers));
  }
  ~ZooKeeperReader() {
    if (handle_) zookeeper_close(handle_);
  }
  // (child name, ephemeral owner) pairs; throws on errors other than "no node".
  std::vector<std::pair<std::string, std::int64_t>> children_with_owners(const std::string& path) {
    std::vector<std::pair<std::string, std::int64_t>> out;
    String_vector names{};
    int rc = zoo_get_children(handle_, path.c_str(), 0, &names);
    if (rc == ZNONODE) return out;
    if (rc != ZOK) throw std::runtime_error(fmt::format("get_children {}: {}", path, zerror(rc)));
    for (int i = 0; i < names.count; ++i) {
      Stat stat{};
      if (zoo_exists(handle_, (path + "/" + names.data[i]).c_str(), 0, &stat) == ZOK)
        out.emplace_back(names.data[i], stat.ephemeralOwner);
    }
    deallocate_String_vector(&names);
    return out;
  }

 private:
  zhandle_t* handle_ = nullptr;
};

class SoakRun {
 public:
  explicit SoakRun(RunOptions options)
      : options_(std::move(options)), out_(options_.out), random_(options_.seed) {}

  int run();

 private:
  struct Client {
    int id = 0;
    std::vector<std::unique_ptr<zkr::testenv::Proxy>> proxies;
    std::unique_ptr<zkr::testenv::Process> process;
    fs::path log, session_file;
    std::string target() const { return fmt::format("client-{}", id); }
  };

  Milliseconds timeout() const { return Milliseconds(options_.session_timeout_ms); }
  // A duration drawn uniformly between low and high multiples of the session timeout.
  Milliseconds draw(double low, double high) {
    std::uniform_real_distribution<double> between(low, high);
    return Milliseconds(static_cast<std::int64_t>(between(random_) * options_.session_timeout_ms));
  }
  int draw_index(int size) { return std::uniform_int_distribution<int>(0, size - 1)(random_); }

  void start_client(Client& client);
  void kill_client(Client& client);
  void set_links(Client& client, bool blackholed);
  void inject(FaultKind kind);
  int current_leader();
  int holder_in_its_job(int otherwise);
  void heal();
  void begin_fault(FaultKind kind, const std::string& target, Milliseconds duration);
  void end_fault(FaultKind kind, const std::string& target);
  void note(const std::string& text);
  std::uint64_t count_grants();
  std::map<int, std::int64_t> live_sessions();
  void end_checks();
  void write_run_file(std::int64_t start_ns, std::int64_t end_ns);

  RunOptions options_;
  fs::path out_;
  std::mt19937_64 random_;
  std::unique_ptr<zkr::testenv::Cluster> cluster_;
  std::unique_ptr<zkr::soak::FencedStore> store_;
  std::vector<Client> clients_;
  std::vector<bool> server_down_, server_frozen_;
  std::ofstream fault_log_;
  std::string lock_path_ = "/soak/lock";
  std::map<fs::path, std::uintmax_t> scanned_bytes_;
  std::uint64_t grants_seen_ = 0;
  std::uint64_t faults_injected_ = 0;
  std::int64_t started_ns_ = 0;
};

void SoakRun::begin_fault(FaultKind kind, const std::string& target, Milliseconds duration) {
  ++faults_injected_;
  fault_log_ << fmt::format("{} BEGIN {} {} {}\n", monotonic_ns(), name_of(kind), target, duration.count());
  fault_log_.flush();
  fmt::print("[{:5.0f} s] fault {:4} {:<20} {:<10} {:5} ms   grants so far {}\n",
             (monotonic_ns() - started_ns_) / 1e9, faults_injected_, name_of(kind), target, duration.count(),
             count_grants());
  std::fflush(stdout);
}

void SoakRun::end_fault(FaultKind kind, const std::string& target) {
  fault_log_ << fmt::format("{} END {} {}\n", monotonic_ns(), name_of(kind), target);
  fault_log_.flush();
}

void SoakRun::note(const std::string& text) {
  fault_log_ << fmt::format("{} NOTE {}\n", monotonic_ns(), text);
  fault_log_.flush();
  fmt::print("          note: {}\n", text);
}

void SoakRun::start_client(Client& client) {
  std::vector<std::string> addresses;
  for (const auto& proxy : client.proxies) addresses.push_back(proxy->address());
  zkr::testenv::Process::Options process_options;
  process_options.pipe_stdin = true;
  client.process = std::make_unique<zkr::testenv::Process>(
      std::vector<std::string>{options_.client_binary,
                               "--id", std::to_string(client.id),
                               "--servers", fmt::format("{}", fmt::join(addresses, ",")),
                               "--path", lock_path_,
                               "--store", (out_ / "store.sock").string(),
                               "--log", client.log.string(),
                               "--session-file", client.session_file.string(),
                               "--session-timeout-ms", std::to_string(options_.session_timeout_ms),
                               "--tick-ms", std::to_string(options_.tick_ms),
                               "--acquire-timeout-ms", std::to_string(options_.session_timeout_ms * 4),
                               "--hold-max-ms", std::to_string(options_.hold_max_ms),
                               "--seed", std::to_string(options_.seed * 1000 + static_cast<std::uint64_t>(client.id))},
      process_options);
}

void SoakRun::kill_client(Client& client) {
  if (!client.process) return;
  client.process->signal(SIGKILL);
  const std::int64_t killed_at = monotonic_ns();
  client.process->wait(10s);
  client.process.reset();
  // The process is gone: appending its last record cannot interleave with its own writes.
  std::ofstream(client.log, std::ios::app) << fmt::format("{} {} KILLED\n", killed_at, client.id);
}

void SoakRun::set_links(Client& client, bool blackholed) {
  for (auto& proxy : client.proxies) blackholed ? proxy->blackhole() : proxy->pass();
}

// The client whose store read was accepted next (it holds the lock and is inside its job), or
// `otherwise` if none reads within a while.
int SoakRun::holder_in_its_job(int otherwise) {
  const int reader = store_->wait_for_next_read(2 * timeout());
  return reader >= 0 && reader < options_.clients ? reader : otherwise;
}

int SoakRun::current_leader() {
  if (!cluster_->wait_for_leader(10s)) return -1;
  return cluster_->leader();
}

void SoakRun::inject(FaultKind kind) {
  switch (kind) {
    case FaultKind::freeze_holder:
    case FaultKind::freeze_client_short:
    case FaultKind::freeze_client_long: {
      const auto duration = kind == FaultKind::freeze_client_short ? draw(0.2, 0.5) : draw(1.2, 2.5);
      int index = draw_index(options_.clients);
      if (kind == FaultKind::freeze_holder) index = holder_in_its_job(index);
      Client& client = clients_[static_cast<std::size_t>(index)];
      if (!client.process) break;
      begin_fault(kind, client.target(), duration);
      client.process->freeze();
      std::this_thread::sleep_for(duration);
      client.process->thaw();
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::kill_client: {
      Client& client = clients_[static_cast<std::size_t>(draw_index(options_.clients))];
      const auto down = draw(0.1, 1.0);
      begin_fault(kind, client.target(), down);
      kill_client(client);
      std::this_thread::sleep_for(down);
      start_client(client);
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::blackhole_client: {
      Client& client = clients_[static_cast<std::size_t>(draw_index(options_.clients))];
      const auto duration = draw(0.3, 2.0);
      begin_fault(kind, client.target(), duration);
      set_links(client, true);
      std::this_thread::sleep_for(duration);
      set_links(client, false);
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::reset_client: {
      Client& client = clients_[static_cast<std::size_t>(draw_index(options_.clients))];
      begin_fault(kind, client.target(), 0ms);
      for (auto& proxy : client.proxies) proxy->reset();
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::drop_reply: {
      // Armed on every link of the client; whichever carries its next create loses the reply.
      Client& client = clients_[static_cast<std::size_t>(draw_index(options_.clients))];
      begin_fault(kind, client.target(), 0ms);
      for (auto& proxy : client.proxies) proxy->drop_next_reply();
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::expire_session: {
      const auto linger = draw(0.0, 0.3);
      Client& client = clients_[static_cast<std::size_t>(holder_in_its_job(draw_index(options_.clients)))];
      std::ifstream in(client.session_file);
      std::string id_hex, password_hex;
      if (!(in >> id_hex >> password_hex) || password_hex.size() != 32) {
        note(fmt::format("expire_session: no session file for {}", client.target()));
        break;
      }
      std::string password;
      for (std::size_t i = 0; i < password_hex.size(); i += 2)
        password += static_cast<char>(std::stoi(password_hex.substr(i, 2), nullptr, 16));
      begin_fault(kind, client.target(), linger);
      // Cut the client off first, or it may reconnect to its session in between.
      set_links(client, true);
      try {
        zkr::testenv::expire_session(cluster_->connect_string(), static_cast<std::int64_t>(std::stoull(id_hex, nullptr, 16)),
                                     password);
      } catch (const std::exception& e) {
        note(fmt::format("expire_session {}: {}", client.target(), e.what()));
      }
      std::this_thread::sleep_for(linger);
      set_links(client, false);
      end_fault(kind, client.target());
      break;
    }
    case FaultKind::kill_leader: {
      const int leader = current_leader();
      if (leader < 0) {
        note("kill_leader: no leader to kill");
        break;
      }
      const auto down = draw(0.3, 1.5);
      const std::string target = fmt::format("server-{}", leader);
      begin_fault(kind, target, down);
      cluster_->kill(leader);
      server_down_[static_cast<std::size_t>(leader)] = true;
      std::this_thread::sleep_for(down);
      cluster_->start(leader);
      server_down_[static_cast<std::size_t>(leader)] = false;
      end_fault(kind, target);
      break;
    }
    case FaultKind::freeze_leader: {
      const int leader = current_leader();
      if (leader < 0) {
        note("freeze_leader: no leader to freeze");
        break;
      }
      // Past syncLimit x tickTime (5 x tick), so that the followers elect another leader.
      const auto duration = std::max(draw(0.5, 2.0), Milliseconds(10 * options_.tick_ms));
      const std::string target = fmt::format("server-{}", leader);
      begin_fault(kind, target, duration);
      cluster_->freeze(leader);
      server_frozen_[static_cast<std::size_t>(leader)] = true;
      std::this_thread::sleep_for(duration);
      cluster_->thaw(leader);
      server_frozen_[static_cast<std::size_t>(leader)] = false;
      end_fault(kind, target);
      break;
    }
    case FaultKind::freeze_follower: {
      // A paused server that clients talk to: its clients hear nothing and are told lost by their
      // deadline; the leader expires their sessions. Longer than a session.
      const int leader = current_leader();
      const int follower = leader < 0 ? draw_index(options_.servers)
                                      : (leader + 1 + draw_index(options_.servers - 1)) % options_.servers;
      const auto duration = std::max(draw(0.5, 2.0), timeout() + Milliseconds(options_.tick_ms));
      const std::string target = fmt::format("server-{}", follower);
      begin_fault(kind, target, duration);
      cluster_->freeze(follower);
      server_frozen_[static_cast<std::size_t>(follower)] = true;
      std::this_thread::sleep_for(duration);
      cluster_->thaw(follower);
      server_frozen_[static_cast<std::size_t>(follower)] = false;
      end_fault(kind, target);
      break;
    }
    case FaultKind::quorum_loss: {
      const int first = draw_index(options_.servers);
      const int second = (first + 1 + draw_index(options_.servers - 1)) % options_.servers;
      const auto duration = draw(1.2, 2.0);
      const std::string target = fmt::format("server-{}+{}", first, second);
      begin_fault(kind, target, duration);
      for (int index : {first, second}) {
        cluster_->kill(index);
        server_down_[static_cast<std::size_t>(index)] = true;
      }
      std::this_thread::sleep_for(duration);
      for (int index : {first, second}) {
        cluster_->start(index);
        server_down_[static_cast<std::size_t>(index)] = false;
      }
      end_fault(kind, target);
      break;
    }
  }
}

// Whatever a failed step left broken: servers down or frozen, clients frozen or gone, links cut.
void SoakRun::heal() {
  for (int i = 0; i < options_.servers; ++i) {
    const auto index = static_cast<std::size_t>(i);
    try {
      if (server_frozen_[index]) cluster_->thaw(i);
      server_frozen_[index] = false;
      // A start that failed may still have left the server running: then there is nothing to do.
      if (server_down_[index] && cluster_->pid(i) == 0) cluster_->start(i);
      server_down_[index] = false;
    } catch (const std::exception& e) {
      note(fmt::format("heal server-{}: {}", i, e.what()));
    }
  }
  for (auto& client : clients_) {
    set_links(client, false);
    if (client.process) {
      client.process->thaw();
      if (!client.process->running()) {
        note(fmt::format("{} exited by itself; restarting it", client.target()));
        client.process.reset();
      }
    }
    if (!client.process) start_client(client);
  }
}

std::uint64_t SoakRun::count_grants() {
  for (const auto& client : clients_) {
    std::ifstream in(client.log, std::ios::binary);
    auto& offset = scanned_bytes_[client.log];
    in.seekg(static_cast<std::streamoff>(offset));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // a line still being written: read it next time
      offset += line.size() + 1;
      if (line.find(" GRANT ") != std::string::npos) ++grants_seen_;
    }
  }
  return grants_seen_;
}

std::map<int, std::int64_t> SoakRun::live_sessions() {
  std::map<int, std::int64_t> sessions;
  for (const auto& client : clients_) {
    std::ifstream in(client.session_file);
    std::string id_hex;
    if (in >> id_hex) sessions[client.id] = static_cast<std::int64_t>(std::stoull(id_hex, nullptr, 16));
  }
  return sessions;
}

void SoakRun::end_checks() {
  std::ofstream end(out_ / "end.txt.tmp");
  // 1. Healed and quiet for a while: every lock node must belong to the current session of a live
  //    client, one node per session at most.
  std::this_thread::sleep_for(3 * timeout());
  ZooKeeperReader reader(cluster_->connect_string());
  std::uint64_t stray = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto sessions = live_sessions();
    std::set<std::int64_t> live;
    for (const auto& [id, session] : sessions) live.insert(session);
    std::map<std::int64_t, int> nodes_per_session;
    stray = 0;
    for (const auto& [name, owner] : reader.children_with_owners(lock_path_)) {
      if (!live.contains(owner) || ++nodes_per_session[owner] > 1) {
        ++stray;
        if (attempt == 9) note(fmt::format("stray lock node {} (owner {:x})", name, owner));
      }
    }
    if (stray == 0) break;
    std::this_thread::sleep_for(timeout() / 2);
  }
  end << "stray_nodes_while_running " << stray << "\n";

  // 2. Stop every client cleanly; then the lock path must empty.
  int not_exited = 0;
  for (auto& client : clients_)
    if (client.process) client.process->close_stdin();
  for (auto& client : clients_) {
    if (!client.process) continue;
    if (!client.process->wait(30s)) {
      ++not_exited;
      note(fmt::format("{} did not exit within 30 s of its stdin closing", client.target()));
      kill_client(client);
    }
    client.process.reset();
  }
  std::size_t remaining = 0;
  const auto deadline = std::chrono::steady_clock::now() + 3 * timeout() + 10s;
  do {
    remaining = reader.children_with_owners(lock_path_).size();
    if (remaining == 0) break;
    std::this_thread::sleep_for(200ms);
  } while (std::chrono::steady_clock::now() < deadline);
  end << "nodes_after_all_exited " << remaining << "\n";
  end << "clients_not_exited " << not_exited << "\n";
  int dropped = 0;
  for (const auto& client : clients_)
    for (const auto& proxy : client.proxies) dropped += proxy->dropped_replies();
  end << "create_replies_dropped " << dropped << "\n";
  end.close();
  fs::rename(out_ / "end.txt.tmp", out_ / "end.txt");
}

void SoakRun::write_run_file(std::int64_t start_ns, std::int64_t end_ns) {
  std::string version = "unknown";
  const std::string srvr = zkr::testenv::four_letter_word(cluster_->server_address(0), "srvr");
  if (auto at = srvr.find("version: "); at != std::string::npos)
    version = srvr.substr(at + 9, srvr.find_first_of(",\n", at) - at - 9);
  std::ofstream run(out_ / "run.txt");
  run << "seed " << options_.seed << "\n"
      << "clients " << options_.clients << "\n"
      << "ensemble_size " << options_.servers << "\n"
      << "tick_ms " << options_.tick_ms << "\n"
      << "session_timeout_ms " << options_.session_timeout_ms << "\n"
      << "zookeeper_version " << version << "\n"
      << "start_ns " << start_ns << "\n"
      << "end_ns " << end_ns << "\n";
}

int SoakRun::run() {
  if (options_.clients < 1 || options_.servers != 3 || options_.session_timeout_ms < 400 || options_.duration_s <= 0)
    throw std::invalid_argument("need --clients >= 1, --servers 3, --session-timeout-ms >= 400, --duration > 0");
  fs::create_directories(out_);
  for (const auto& entry : fs::directory_iterator(out_)) fs::remove_all(entry.path());
  // The C client logs errors to stderr by default; the driver's handles log to a file instead.
  static FILE* client_log = std::fopen((out_ / "driver-zookeeper-client.log").c_str(), "w");
  zoo_set_log_stream(client_log);
  zoo_set_debug_level(ZOO_LOG_LEVEL_WARN);

  fmt::print("soak: {} clients, 3 servers (tickTime {} ms), session timeout {} ms, seed {}, up to {:.0f} s{}\n",
             options_.clients, options_.tick_ms, options_.session_timeout_ms, options_.seed, options_.duration_s,
             options_.target_grants ? fmt::format(" or {} grants", options_.target_grants) : "");
  cluster_ = std::make_unique<zkr::testenv::Cluster>(
      zkr::testenv::ClusterOptions{.servers = options_.servers, .tick_ms = options_.tick_ms, .sync_limit = 5});
  server_down_.assign(static_cast<std::size_t>(options_.servers), false);
  server_frozen_.assign(static_cast<std::size_t>(options_.servers), false);
  store_ = std::make_unique<zkr::soak::FencedStore>(out_ / "store.sock", out_ / "store.journal");
  fault_log_.open(out_ / "faults.log");

  started_ns_ = monotonic_ns();
  for (int id = 0; id < options_.clients; ++id) {
    Client client;
    client.id = id;
    client.log = out_ / fmt::format("client-{}.log", id);
    client.session_file = out_ / fmt::format("client-{}.session", id);
    for (int server = 0; server < options_.servers; ++server)
      client.proxies.push_back(std::make_unique<zkr::testenv::Proxy>(cluster_->server_address(server)));
    clients_.push_back(std::move(client));
  }
  for (auto& client : clients_) start_client(client);

  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<std::int64_t>(options_.duration_s * 1000));
  std::vector<FaultKind> bag;
  std::this_thread::sleep_for(timeout());  // let everyone connect and queue first
  while (std::chrono::steady_clock::now() < end &&
         (options_.target_grants == 0 || count_grants() < options_.target_grants)) {
    if (bag.empty()) {
      bag = kRound;
      std::shuffle(bag.begin(), bag.end(), random_);
    }
    const FaultKind kind = bag.back();
    bag.pop_back();
    try {
      inject(kind);
    } catch (const std::exception& e) {
      note(fmt::format("{} failed: {}", name_of(kind), e.what()));
      heal();
    }
    std::this_thread::sleep_for(draw(0.3, 1.5));
  }
  fmt::print("soak: faults done ({} injected, {} grants); healing and checking the end state\n", faults_injected_,
             count_grants());
  heal();
  end_checks();
  const std::int64_t ended_ns = monotonic_ns();
  store_->stop();
  write_run_file(started_ns_, ended_ns);
  fault_log_.close();
  for (auto& client : clients_) client.proxies.clear();
  cluster_.reset();

  const auto report = zkr::soak::check_run(out_);
  const std::string text = zkr::soak::format_report(report);
  std::ofstream(out_ / "summary.txt") << text;
  fmt::print("{}", text);
  if (!report.must_be_zero_all_zero()) return 1;
  if (report.grants == 0) {
    fmt::print("soak: no grants at all\n");
    return 1;
  }
  if (options_.require_races && !report.races_exercised()) {
    fmt::print("soak: no overlapping beliefs or no refused stale request: the race was not exercised\n");
    return 1;
  }
  return 0;
}

int check_command(const std::vector<std::string>& arguments) {
  bool require_races = false;
  std::string dir;
  for (const auto& argument : arguments) {
    if (argument == "--require-races") require_races = true;
    else dir = argument;
  }
  if (dir.empty()) {
    fmt::print(stderr, "usage: zkr_soak check RUN_DIR [--require-races]\n");
    return 64;
  }
  const auto report = zkr::soak::check_run(dir);
  fmt::print("{}", zkr::soak::format_report(report));
  if (!report.must_be_zero_all_zero()) return 1;
  if (require_races && !report.races_exercised()) return 1;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> arguments(argv + 1, argv + argc);
  if (!arguments.empty() && arguments[0] == "check") {
    try {
      return check_command({arguments.begin() + 1, arguments.end()});
    } catch (const std::exception& e) {
      fmt::print(stderr, "zkr_soak check: {}\n", e.what());
      return 1;
    }
  }
  if (arguments.empty() || arguments[0] != "run") {
    fmt::print(stderr, "usage: zkr_soak run [options] | zkr_soak check RUN_DIR [--require-races]\n"
                       "       zkr_soak run --help\n");
    return 64;
  }
  RunOptions options;
  po::options_description description("zkr_soak run options");
  description.add_options()
      ("help", "this text")
      ("clients", po::value(&options.clients)->default_value(options.clients), "client processes")
      ("duration", po::value(&options.duration_s)->default_value(options.duration_s),
       "seconds of fault injection (the end checks come after)")
      ("target-grants", po::value(&options.target_grants), "stop injecting once this many grants were made")
      ("seed", po::value(&options.seed)->default_value(options.seed), "seed of the fault schedule")
      ("session-timeout-ms", po::value(&options.session_timeout_ms)->default_value(options.session_timeout_ms),
       "requested session timeout (T)")
      ("tick-ms", po::value(&options.tick_ms)->default_value(options.tick_ms), "the servers' tickTime")
      ("hold-max-ms", po::value(&options.hold_max_ms)->default_value(options.hold_max_ms),
       "longest pause before each store request")
      ("out", po::value(&options.out)->required(), "run directory (emptied first)")
      ("require-races", po::bool_switch(&options.require_races),
       "fail unless overlapping beliefs and refused stale requests were seen")
      ("client-binary", po::value(&options.client_binary)->default_value(options.client_binary), "zkr_soak_client");
  try {
    po::variables_map values;
    po::store(po::command_line_parser(std::vector<std::string>(arguments.begin() + 1, arguments.end()))
                  .options(description)
                  .run(),
              values);
    if (values.count("help")) {
      std::cout << description;
      return 0;
    }
    po::notify(values);
  } catch (const std::exception& e) {
    fmt::print(stderr, "zkr_soak run: {}\n", e.what());
    return 64;
  }
  try {
    return SoakRun(options).run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "zkr_soak run: {}\n", e.what());
    return 1;
  }
}
