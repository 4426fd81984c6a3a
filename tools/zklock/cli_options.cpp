// SPDX-License-Identifier: Apache-2.0
#include "cli_options.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace zklock {

namespace {

constexpr std::string_view default_servers = "127.0.0.1:2181";
constexpr double max_seconds = 86'400.0;  // a day: longer values are typos, and overflow nothing

// zklock's options. Parsed here rather than by an options library: the parser is small, its
// errors name the option as zklock spells it, and zklock starts without setting up iostreams
// (a measurable part of a one-shot command's start, docs/BENCHMARKS.md section 7).
struct OptionSpec {
  std::string_view name;  // long name, and the key values are looked up by
  char short_name;        // '\0' if none
  bool takes_value;       // else a switch
  std::string_view alias = {};  // another long name for the same option
  // A mode that runs no command (--list, --break): its LOCKPATH may stand anywhere among the
  // options ("--list --json /a", "--list /a --json"), or be attached ("--list=/a").
  bool commandless_mode = false;
};

constexpr OptionSpec option_table[] = {
    {"zk", 'z', true},
    {"nonblock", 'n', false},
    {"wait", 'w', true, "timeout"},
    {"conflict-exit-code", 'E', true},
    {"shared", 's', false},
    {"exclusive", 'x', false},
    {"slots", 'N', true},
    {"once-per", '\0', true},
    {"tz", '\0', true},
    {"count-failed", '\0', false},
    {"session-timeout", '\0', true},
    {"connect-timeout", '\0', true},
    {"tick-time", '\0', true},
    {"kill-after", 'k', true},
    {"kill-signal", '\0', true},
    {"lost-exit-code", 'L', true},
    {"owner", '\0', true},
    {"auth-file", '\0', true},
    {"verbose", 'v', false},
    {"quiet", 'q', false},
    {"list", '\0', false, {}, true},
    {"break", '\0', false, {}, true},
    {"node", '\0', true},
    {"force", '\0', false},
    {"json", '\0', false},
    {"watch", '\0', false},
    {"recursive", 'r', false},
    {"prometheus", '\0', false},
    {"listen", '\0', true},
    {"max-locks", '\0', true},
    {"log-format", '\0', true},
    {"log-file", '\0', true},
    {"metrics-file", '\0', true},
    {"help", 'h', false},
    {"version", 'V', false},
    {"tls-ca", '\0', true},
    {"tls-cert", '\0', true},
    {"tls-key", '\0', true},
    {"tls-no-verify-host", '\0', false},
};

// Exact names only: an abbreviation must not start to mean another option once one is added.
const OptionSpec* find_long_option(std::string_view name) {
  for (const OptionSpec& option : option_table) {
    if (name == option.name || (!option.alias.empty() && name == option.alias)) return &option;
  }
  return nullptr;
}

const OptionSpec* find_short_option(char name) {
  for (const OptionSpec& option : option_table) {
    if (option.short_name != '\0' && name == option.short_name) return &option;
  }
  return nullptr;
}

std::string_view trim_seconds_suffix(std::string_view text) {
  if (!text.empty() && text.back() == 's') text.remove_suffix(1);
  return text;
}

std::chrono::milliseconds whole_milliseconds(std::chrono::nanoseconds duration) {
  return std::chrono::ceil<std::chrono::milliseconds>(duration);
}

}  // namespace

std::chrono::milliseconds parse_period(std::string_view text, std::string_view option) {
  struct Unit {
    char suffix;
    std::chrono::milliseconds length;
  };
  constexpr Unit units[] = {{'s', std::chrono::seconds(1)}, {'m', std::chrono::minutes(1)},
                            {'h', std::chrono::hours(1)},   {'d', std::chrono::days(1)},
                            {'w', std::chrono::weeks(1)}};
  const auto invalid = [&](std::string_view why) {
    return UsageError(fmt::format("invalid value '{}' for {}: {}", text, option, why));
  };
  if (text.empty()) throw invalid("expected a whole number and a unit, such as 30m, 1h or 1d");
  const auto unit = std::find_if(std::begin(units), std::end(units), [&](const Unit& u) { return u.suffix == text.back(); });
  if (unit == std::end(units)) throw invalid("expected a whole number and a unit (s, m, h, d or w), such as 30m, 1h or 1d");
  const std::string_view number = text.substr(0, text.size() - 1);
  std::int64_t count = 0;
  auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), count);
  if (number.empty() || error != std::errc{} || end != number.data() + number.size()) {
    throw invalid("expected a whole number and a unit, such as 30m, 1h or 1d");
  }
  constexpr auto longest = std::chrono::days(366);
  if (count < 1 || count > longest / unit->length) throw invalid("must be at least 1s and at most 366d");
  return count * unit->length;
}

std::chrono::nanoseconds parse_seconds(std::string_view text, std::string_view option) {
  std::string_view number = trim_seconds_suffix(text);
  double seconds = 0;
  auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), seconds);
  if (number.empty() || error != std::errc{} || end != number.data() + number.size() ||
      !std::isfinite(seconds)) {
    throw UsageError(fmt::format("invalid value '{}' for {}: expected seconds, such as 5 or 0.5",
                                 text, option));
  }
  if (seconds < 0 || seconds > max_seconds) {
    throw UsageError(fmt::format("invalid value '{}' for {}: must be between 0 and {} seconds",
                                 text, option, max_seconds));
  }
  return std::chrono::nanoseconds(std::llround(seconds * 1e9));
}

int parse_signal(std::string_view text, std::string_view option) {
  int number = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (!text.empty() && error == std::errc{} && end == text.data() + text.size()) {
    if (number >= 1 && number < NSIG) return number;
  } else {
    std::string name(text);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (name.starts_with("SIG")) name.erase(0, 3);
    for (int signal = 1; signal < SIGRTMIN; ++signal) {
      const char* abbreviation = sigabbrev_np(signal);
      if (abbreviation && name == abbreviation) return signal;
    }
  }
  throw UsageError(
      fmt::format("invalid value '{}' for {}: expected a signal name or number, such as TERM or 15",
                  text, option));
}

std::string signal_name(int signal) {
  const char* abbreviation = sigabbrev_np(signal);
  return abbreviation ? std::string(abbreviation) : std::to_string(signal);
}

int parse_exit_code(std::string_view text, std::string_view option) {
  int code = -1;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), code);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || code < 0 ||
      code > 255) {
    throw UsageError(
        fmt::format("invalid value '{}' for {}: expected an exit code from 0 to 255", text, option));
  }
  return code;
}

std::string format_duration(std::chrono::nanoseconds duration) {
  using namespace std::chrono;
  if (duration < 1s && duration % 1ms == 0ns) return fmt::format("{}ms", duration / 1ms);
  // Fixed-point to the nanosecond, trailing zeros dropped: exact however long ("1000000s", never
  // "1e+06s").
  const auto whole = duration_cast<seconds>(duration);
  const auto fraction = duration - whole;
  if (fraction == 0ns) return fmt::format("{}s", whole.count());
  std::string digits = fmt::format("{:09}", std::chrono::abs(fraction).count());
  while (digits.back() == '0') digits.pop_back();
  return fmt::format("{}{}.{}s", duration < 0ns && whole == 0s ? "-" : "", whole.count(), digits);
}

namespace {

// zklock's arguments: the options, by name, up to LOCKPATH (the first argument that is neither
// an option nor an option's value; "--" may stand before it), and what follows them. Long options
// take their value as "--name=VALUE" or "--name VALUE", short ones as "-wVALUE" or "-w VALUE";
// switches cluster ("-nv"). The argument after an option that takes a value is its value, whatever
// it looks like ("-k -1" is refused by --kill-after, naming it). Each option may be given once.
// After a mode that runs no command (--list, --break) nothing is a command: options may follow
// LOCKPATH, as getopt users expect.
class GivenOptions {
 public:
  explicit GivenOptions(const std::vector<std::string>& argv) {
    std::size_t i = 1;
    bool commandless = false;
    for (; i < argv.size(); ++i) {
      const std::string& arg = argv[i];
      if (arg == "--") {
        ++i;
        break;
      }
      if (arg.size() < 2 || arg[0] != '-') {  // LOCKPATH (and "-" alone)
        if (!commandless) break;
        operands_.push_back(arg);
        continue;
      }
      if (arg == "-c" || arg == "--command") {
        if (commandless) {  // refused by the mode, naming it
          operands_.push_back(arg);
          continue;
        }
        throw UsageError("-c must follow LOCKPATH: zklock [options] LOCKPATH -c 'SHELL COMMAND'");
      }
      const auto next_value = [&](const OptionSpec& option) -> const std::string& {
        if (i + 1 == argv.size()) {
          throw UsageError(fmt::format("the required argument for option '--{}' is missing", option.name));
        }
        return argv[++i];
      };
      if (arg.starts_with("--")) {
        const std::size_t equals = arg.find('=');
        const std::string_view name = std::string_view(arg).substr(2, equals == std::string::npos ? std::string::npos
                                                                                                   : equals - 2);
        const OptionSpec* option = find_long_option(name);
        if (!option) throw UsageError(fmt::format("unrecognised option '--{}'", name));
        if (option->commandless_mode) {
          commandless = true;
          store(*option, {});
          if (equals != std::string::npos) operands_.push_back(arg.substr(equals + 1));
        } else if (!option->takes_value) {
          if (equals != std::string::npos) {
            throw UsageError(fmt::format("option '--{}' does not take any arguments", option->name));
          }
          store(*option, {});
        } else {
          store(*option, equals != std::string::npos ? arg.substr(equals + 1) : next_value(*option));
        }
        continue;
      }
      for (std::size_t c = 1; c < arg.size(); ++c) {
        const OptionSpec* option = find_short_option(arg[c]);
        if (!option) throw UsageError(fmt::format("unrecognised option '{}'", arg));
        if (!option->takes_value) {
          store(*option, {});
          continue;
        }
        store(*option, c + 1 < arg.size() ? arg.substr(c + 1) : next_value(*option));
        break;
      }
    }
    operands_.insert(operands_.end(), argv.begin() + static_cast<std::ptrdiff_t>(std::min(i, argv.size())), argv.end());
  }

  // LOCKPATH, then the command ("--" before it kept) or -c.
  std::vector<std::string> take_operands() { return std::move(operands_); }

  std::optional<std::string> text(std::string_view name) const {
    const auto found = values_.find(name);
    if (found == values_.end()) return std::nullopt;
    return found->second;
  }
  bool flag(std::string_view name) const { return values_.contains(name); }

 private:
  void store(const OptionSpec& option, std::string value) {
    if (!values_.emplace(option.name, std::move(value)).second) {
      throw UsageError(fmt::format("option '--{}' cannot be specified more than once", option.name));
    }
  }

  std::map<std::string_view, std::string> values_;  // keys point into option_table
  std::vector<std::string> operands_;
};

// A duration option that must be above zero, in whole milliseconds.
std::chrono::milliseconds positive_milliseconds(const std::string& value, std::string_view option) {
  const auto duration = whole_milliseconds(parse_seconds(value, option));
  if (duration <= std::chrono::milliseconds::zero()) {
    throw UsageError(fmt::format("invalid value '{}' for {}: must be above 0", value, option));
  }
  return duration;
}

// --prometheus, --listen HOST:PORT, --max-locks N (with --list; checked against the mode later).
void read_exposition(const GivenOptions& given, CliOptions& options) {
  options.prometheus = given.flag("prometheus");
  if (auto listen = given.text("listen")) {
    const auto colon = listen->rfind(':');
    int port = -1;
    if (colon != std::string::npos && colon > 0)
      std::from_chars(listen->data() + colon + 1, listen->data() + listen->size(), port);
    if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535 ||
        listen->find_first_not_of("0123456789", colon + 1) != std::string::npos || colon + 1 == listen->size())
      throw UsageError(fmt::format("invalid value '{}' for --listen: expected HOST:PORT (127.0.0.1:9475, [::1]:9475; "
                                   "port 0 picks a free one)",
                                   *listen));
    options.listen = *listen;
    options.prometheus = true;  // what it serves
  }
  if (auto value = given.text("max-locks")) {
    if (!options.prometheus) throw UsageError("--max-locks applies only to --prometheus or --listen");
    std::size_t most = 0;
    auto [end, error] = std::from_chars(value->data(), value->data() + value->size(), most);
    if (value->empty() || error != std::errc{} || end != value->data() + value->size() || most < 1)
      throw UsageError(fmt::format("invalid value '{}' for --max-locks: expected a number of paths, 1 or more", *value));
    options.max_locks = most;
  }
}

void read_ensemble(const GivenOptions& given, const char* env_servers, CliOptions& options) {
  if (auto zk = given.text("zk")) {
    options.servers = *zk;
  } else if (env_servers && *env_servers) {
    options.servers = env_servers;
  } else {
    options.servers = default_servers;
  }
  if (options.servers.starts_with('@')) {
    options.servers_file = options.servers.substr(1);
    options.servers = servers_from_file(options.servers_file);
  }
  if (options.servers.empty()) throw UsageError("invalid value '' for --zk: expected HOST:PORT[,...][/chroot]");
}

// A semaphore's slot count: as many as a path's children can sensibly hold.
constexpr int max_slots = 10'000;

void read_lock_kind_and_verbosity(const GivenOptions& given, CliOptions& options) {
  if (given.flag("shared") && given.flag("exclusive")) throw UsageError("-s and -x exclude each other");
  options.kind = given.flag("shared") ? LockKind::read : given.flag("exclusive") ? LockKind::write : LockKind::mutex;
  if (auto value = given.text("slots")) {
    if (options.kind != LockKind::mutex) throw UsageError("-N/--slots and -s/-x exclude each other");
    int slots = 0;
    auto [end, error] = std::from_chars(value->data(), value->data() + value->size(), slots);
    if (value->empty() || error != std::errc{} || end != value->data() + value->size() || slots < 1 || slots > max_slots) {
      throw UsageError(fmt::format("invalid value '{}' for --slots: expected a number of slots from 1 to {}", *value,
                                   max_slots));
    }
    options.kind = LockKind::semaphore;
    options.slots = slots;
  }
  if (given.flag("verbose") && given.flag("quiet")) throw UsageError("-v and -q exclude each other");
  options.verbosity = given.flag("verbose") ? Verbosity::verbose
                      : given.flag("quiet") ? Verbosity::quiet
                                            : Verbosity::normal;
}

// -n, -w and the exit codes of the outcomes other than the command's own.
void read_waiting_and_exit_codes(const GivenOptions& given, CliOptions& options) {
  if (auto wait = given.text("wait")) {
    options.wait_timeout = parse_seconds(*wait, "--wait");
    if (given.flag("nonblock") && *options.wait_timeout != std::chrono::nanoseconds::zero()) {
      throw UsageError("-n and -w exclude each other (-w 0 is the same as -n)");
    }
  }
  if (given.flag("nonblock")) options.wait_timeout = std::chrono::nanoseconds::zero();
  if (auto code = given.text("conflict-exit-code")) {
    options.conflict_exit_code = parse_exit_code(*code, "--conflict-exit-code");
  }
  if (auto code = given.text("lost-exit-code")) options.lost_exit_code = parse_exit_code(*code, "--lost-exit-code");
}

void read_session_timing(const GivenOptions& given, const char* env_tick_time, CliOptions& options) {
  if (auto value = given.text("session-timeout")) {
    options.session_timeout = positive_milliseconds(*value, "--session-timeout");
  }
  if (auto value = given.text("connect-timeout")) {
    options.connect_timeout = positive_milliseconds(*value, "--connect-timeout");
  }
  if (auto value = given.text("tick-time")) {
    options.tick_time = positive_milliseconds(*value, "--tick-time");
  } else if (env_tick_time && *env_tick_time) {
    options.tick_time = positive_milliseconds(env_tick_time, "$ZKLOCK_TICK_TIME");
  }
}

void read_job_stop_and_node(const GivenOptions& given, CliOptions& options) {
  if (auto value = given.text("kill-after")) options.kill_after = whole_milliseconds(parse_seconds(*value, "--kill-after"));
  if (auto value = given.text("kill-signal")) options.kill_signal = parse_signal(*value, "--kill-signal");
  if (auto value = given.text("owner")) options.owner = *value;
  if (auto value = given.text("auth-file")) {
    if (value->empty()) throw UsageError("invalid value '' for --auth-file: expected a file name");
    options.auth_file = *value;
  }
  options.json = given.flag("json");
  options.watch = given.flag("watch");
  options.recursive = given.flag("recursive");
  read_exposition(given, options);
}

// TLS to the ensemble: each file from its option, else from $ZKLOCK_TLS_CA, _CERT, _KEY.
void read_tls(const GivenOptions& given, CliOptions& options) {
  const auto file = [&](const char* option, const char* variable) -> std::optional<std::filesystem::path> {
    if (auto value = given.text(option)) {
      if (value->empty()) throw UsageError(fmt::format("invalid value '' for --{}: expected a file name", option));
      return *value;
    }
    if (const char* value = std::getenv(variable); value && *value) return value;
    return std::nullopt;
  };
  options.tls_ca = file("tls-ca", "ZKLOCK_TLS_CA");
  options.tls_cert = file("tls-cert", "ZKLOCK_TLS_CERT");
  options.tls_key = file("tls-key", "ZKLOCK_TLS_KEY");
  // $ZKLOCK_TLS_NO_VERIFY_HOST (a zklock that did not verify sets it for its job) counts only with TLS.
  const char* no_verify = std::getenv("ZKLOCK_TLS_NO_VERIFY_HOST");
  const bool no_verify_from_environment = options.tls_ca && no_verify && *no_verify && std::string_view(no_verify) != "0";
  options.tls_verify_host = !given.flag("tls-no-verify-host") && !no_verify_from_environment;
  if (options.tls_cert.has_value() != options.tls_key.has_value())
    throw UsageError("--tls-cert and --tls-key go together (a client certificate and its key)");
  if (!options.tls_ca && (options.tls_cert || !options.tls_verify_host))
    throw UsageError("--tls-cert, --tls-key and --tls-no-verify-host need --tls-ca (or $ZKLOCK_TLS_CA)");
}

// A file zklock writes: a name, not a directory.
std::filesystem::path file_name(const std::string& value, std::string_view option) {
  if (value.empty() || value.ends_with('/')) {
    throw UsageError(fmt::format("invalid value '{}' for {}: expected a file name", value, option));
  }
  return value;
}

void read_log_and_metrics(const GivenOptions& given, CliOptions& options) {
  if (auto value = given.text("log-format")) {
    if (*value == "text") options.log_format = LogFormat::text;
    else if (*value == "json") options.log_format = LogFormat::json;
    else throw UsageError(fmt::format("invalid value '{}' for --log-format: expected text or json", *value));
  }
  if (auto value = given.text("log-file")) options.log_file = file_name(*value, "--log-file");
  if (auto value = given.text("metrics-file")) options.metrics_file = file_name(*value, "--metrics-file");
}

void read_once_per(const GivenOptions& given, CliOptions& options) {
  const auto value = given.text("once-per");
  if (!value) {
    if (given.text("tz")) throw UsageError("--tz applies only to --once-per");
    if (given.flag("count-failed")) throw UsageError("--count-failed applies only to --once-per");
    return;
  }
  if (options.kind != LockKind::mutex) {
    throw UsageError("--once-per runs the job on one host at a time: it takes a plain lock, drop -s, -x or -N");
  }
  options.once_per = parse_period(*value, "--once-per");
  if (auto zone = given.text("tz")) {
    try {
      options.once_per_zone = TimeZone::load(*zone);
    } catch (const std::invalid_argument& error) {
      throw UsageError(fmt::format("invalid value '{}' for --tz: {}", *zone, error.what()));
    }
  }
  options.count_failed = given.flag("count-failed");
}

// What follows the options: nothing with --list; else LOCKPATH, then "-c SHELL-COMMAND" or the
// command ("--" may stand before it).
void read_operands(const GivenOptions& given, std::vector<std::string> rest, CliOptions& options) {
  const bool breaking = given.flag("break");
  if (!breaking && (given.text("node") || given.flag("force"))) throw UsageError("--node and --force apply only to --break");
  // --list and --break: exactly one LOCKPATH, wherever it stands among the options.
  const auto commandless_path = [&rest](std::string_view mode) {
    if (rest.empty()) throw UsageError(fmt::format("{} needs LOCKPATH", mode));
    if (rest.size() > 1) throw UsageError(fmt::format("{} takes no command (found '{}')", mode, rest[1]));
    return rest.front();
  };
  if (breaking) {
    if (given.flag("list")) throw UsageError("--list and --break exclude each other");
    options.mode = Mode::break_lock;
    options.lock_path = commandless_path("--break");
    if (auto node = given.text("node")) options.break_node = *node;
    options.force = given.flag("force");
    if (options.json) throw UsageError("--json applies only to --list");
    if (options.kind == LockKind::semaphore) throw UsageError("--break reads a semaphore's slots from the path: drop --slots");
    if (options.once_per) throw UsageError("--once-per applies only to running a command");
    if (options.watch) throw UsageError("--watch applies only to --list");
    if (options.recursive) throw UsageError("--recursive applies only to --list");
    if (options.prometheus) throw UsageError(options.listen.empty() ? "--prometheus applies only to --list"
                                                                     : "--listen applies only to --list");
    return;
  }
  if (given.flag("list")) {
    options.mode = Mode::list;
    options.lock_path = commandless_path("--list");
    if (options.kind == LockKind::semaphore) throw UsageError("--list reads a semaphore's slots from the path: drop --slots");
    if (options.once_per) throw UsageError("--list shows the path's last --once-per run by itself: drop --once-per");
    if (options.recursive && options.watch) throw UsageError("--watch follows one path: drop --recursive or --watch");
    if (!options.listen.empty() && options.json) throw UsageError("--listen and --json exclude each other");
    if (!options.listen.empty() && options.watch) throw UsageError("--listen and --watch exclude each other");
    if (options.prometheus && options.json) throw UsageError("--prometheus and --json exclude each other");
    if (options.prometheus && options.watch) throw UsageError("--prometheus and --watch exclude each other");
    return;
  }
  if (options.json) throw UsageError("--json applies only to --list");
  if (options.watch) throw UsageError("--watch applies only to --list");
  if (options.recursive) throw UsageError("--recursive applies only to --list");
  if (!options.listen.empty()) throw UsageError("--listen applies only to --list");
  if (options.prometheus) throw UsageError("--prometheus applies only to --list");

  if (rest.empty()) throw UsageError("missing LOCKPATH");
  options.lock_path = rest.front();
  rest.erase(rest.begin());

  if (!rest.empty() && (rest.front() == "-c" || rest.front() == "--command")) {
    if (rest.size() != 2) {
      throw UsageError("-c takes exactly one argument, the shell command (quote it: -c 'cmd1 | cmd2')");
    }
    options.shell_command = rest[1];
    return;
  }
  if (!rest.empty() && rest.front() == "--") {
    rest.erase(rest.begin());
  } else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-') {
    throw UsageError(fmt::format(
        "option '{}' after LOCKPATH: options go before LOCKPATH (write '--' before a command "
        "that starts with '-')",
        rest.front()));
  }
  if (rest.empty()) throw UsageError(fmt::format("missing COMMAND after LOCKPATH '{}'", options.lock_path));
  options.command = std::move(rest);
}

}  // namespace

std::string servers_from_file(const std::string& file) {
  if (file.empty()) throw UsageError("-z @FILE needs a file name after the @");
  // A regular file of a sensible size: not a directory, a device or a pipe that would never end.
  constexpr std::uintmax_t most_bytes = 64 * 1024;
  std::error_code error;
  const auto status = std::filesystem::status(file, error);
  if (error) throw UsageError(fmt::format("cannot read the servers from {}: {}", file, error.message()));
  if (!std::filesystem::is_regular_file(status))
    throw UsageError(fmt::format("cannot read the servers from {}: not a regular file", file));
  if (std::filesystem::file_size(file, error) > most_bytes && !error)
    throw UsageError(fmt::format("cannot read the servers from {}: larger than {} bytes", file, most_bytes));
  std::ifstream in(file);
  if (!in) throw UsageError(fmt::format("cannot read the servers from {}: {}", file, std::strerror(errno)));
  std::vector<std::string> servers;
  std::string chroot, line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::replace(line.begin(), line.end(), ',', ' ');
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.front() != '/') {
        servers.push_back(word);
      } else if (chroot.empty()) {
        chroot = word;
      } else {
        throw UsageError(fmt::format("{} names more than one chroot ({} and {})", file, chroot, word));
      }
    }
  }
  if (in.bad()) throw UsageError(fmt::format("cannot read the servers from {}: {}", file, std::strerror(errno)));
  if (servers.empty()) throw UsageError(fmt::format("{} names no server (expected HOST:PORT, '#' for comments)", file));
  return fmt::format("{}{}", fmt::join(servers, ","), chroot);
}

// The checks run in this order, so that of several mistakes the same one is reported first.
CliOptions parse_command_line(const std::vector<std::string>& argv, const char* env_servers,
                              const char* env_tick_time) {
  GivenOptions given(argv);

  CliOptions options;
  if (given.flag("help")) {
    options.mode = Mode::help;
    return options;
  }
  if (given.flag("version")) {
    options.mode = Mode::version;
    return options;
  }
  read_ensemble(given, env_servers, options);
  read_lock_kind_and_verbosity(given, options);
  read_waiting_and_exit_codes(given, options);
  read_session_timing(given, env_tick_time, options);
  read_job_stop_and_node(given, options);
  read_tls(given, options);
  read_once_per(given, options);
  read_log_and_metrics(given, options);
  read_operands(given, given.take_operands(), options);
  if (options.metrics_file && options.mode != Mode::run) {
    throw UsageError("--metrics-file applies only to running a command");
  }
  return options;
}

std::vector<AcceptedOption> accepted_options() {
  std::vector<AcceptedOption> accepted = {{"command", 'c', {}}};  // read after LOCKPATH, not from the table
  for (const OptionSpec& option : option_table) accepted.push_back({option.name, option.short_name, option.alias});
  return accepted;
}

std::string help_text() {
  return R"(Usage:
  zklock [options] LOCKPATH COMMAND [ARGS...]
  zklock [options] LOCKPATH -c 'SHELL COMMAND'
  zklock [options] --list LOCKPATH [--json] [--watch | --recursive]
  zklock [options] --list LOCKPATH [--recursive] --prometheus | --listen HOST:PORT [--max-locks N]
  zklock [options] --break LOCKPATH [--node NAME] [--force]

Runs COMMAND while holding a ZooKeeper lock on LOCKPATH, like flock(1) across hosts. The command
runs in its own process group. If the lock is lost (session expired, or the session monitor's
deadline passed, or the lock node was deleted), the job - the command and every process it
started, even those that left its group or session (setsid, timeout) - gets the kill signal, then
SIGKILL after the grace period, and zklock exits with the lost code. The job is always stopped
before the lock is released; processes it leaves behind when it exits are stopped too. A small
keeper process (zklock-keeper) stays between zklock and the job: if zklock is killed, it kills the
whole job.

Options (they stop at LOCKPATH; '--' may stand before COMMAND). A value follows its option or is
joined to it (--wait=5, -w5); short switches group (-nq); long names are spelled out in full, and
each option is given at most once:
  -c, --command 'SHELL COMMAND' after LOCKPATH, instead of COMMAND: run it with /bin/sh -c
  -z, --zk HOSTS[/chroot]       ensemble, e.g. zk1:2181,zk2:2181/app
                                (default: $ZKLOCK_SERVERS, else 127.0.0.1:2181); @FILE reads
                                it from FILE, and again every 2 s while zklock runs: servers
                                one or more per line, '#' comments, the chroot on the last
                                server or alone on a line
  -n, --nonblock                fail at once if the lock is held (reaching the ensemble is
                                bounded by --connect-timeout)
  -w, --wait, --timeout SECS    give up after SECS, reaching the ensemble included
                                (fractions allowed; 0 means -n)
  -E, --conflict-exit-code N    exit code when the lock was not acquired (default 1)
  -s, --shared                  take the read side of a read/write lock
  -x, --exclusive               take the write side of a read/write lock; without -s or -x
                                zklock takes a plain exclusive lock, which also excludes
                                readers and writers
  -N, --slots N                 take one of N slots of a semaphore: up to N jobs run at once
                                (the library's Semaphore; every participant must give the same N)
      --once-per PERIOD         run the command once per PERIOD (30m, 1h, 1d, 1w...) on all
                                hosts together: periods are windows of the ensemble leader's
                                clock in the --tz zone (1d: calendar days; 1w: ISO weeks,
                                Monday 00:00 to Monday 00:00); a zklock that finds this
                                window's run done (or running) exits 0 without running it;
                                a run that failed (exit status not 0, killed, lock lost)
                                leaves the window open, and the next zklock runs it again
      --tz ZONE                 with --once-per: the time zone of its windows, a name of the
                                tz database such as Europe/Berlin (default UTC); days are 23
                                or 25 hours long when the clocks change
      --count-failed            with --once-per: any run that started uses up its window, even
                                one that failed (at most one start per window)
      --session-timeout SECS    requested session timeout (default 20: 9.334 s of ensemble
                                silence tolerated, see -v), raised if needed to
                                give the lead time --kill-after needs; the server may
                                negotiate another: if it leaves too little, zklock refuses (64)
      --connect-timeout SECS    how long to try to reach the ensemble (default 15); the
                                error names each host's cause
      --tick-time SECS          the servers' tickTime (default: $ZKLOCK_TICK_TIME, else 2);
                                the loss is declared early enough for a follower that tells
                                the leader of the session half a tick late
  -k, --kill-after SECS         grace between the kill signal and SIGKILL (default 5)
      --kill-signal SIG         signal sent to the job when the lock is lost (default TERM)
  -L, --lost-exit-code N        exit code when the lock was lost while the job ran (default 75)
      --owner TEXT              owner data stored in the lock node (default host:pid:command)
      --auth-file FILE          digest credentials 'user:password' (first line of FILE)
      --tls-ca FILE|DIR         TLS to the ensemble's secure client port, trusting these CA
                                certificates (PEM; default: $ZKLOCK_TLS_CA)
      --tls-cert FILE           a client certificate, with its chain (PEM; default:
                                $ZKLOCK_TLS_CERT)
      --tls-key FILE            its private key (PEM; default: $ZKLOCK_TLS_KEY)
      --tls-no-verify-host      accept a server certificate that does not name the host
                                (default: $ZKLOCK_TLS_NO_VERIFY_HOST=1)
  -v, --verbose                 report waiting, acquisition (token, node, session) and
                                session state changes on stderr; while queued, the place in
                                the queue and the holder each time they change (said on a
                                terminal even without -v)
      --log-format FORMAT       text (default): 'zklock: ...' lines; json: one JSON object a
                                line - zklock's events (connected, queued, acquired with its
                                token, not_acquired (a notice, not an error), signal, lost,
                                job_exit, released, error, exit) and messages, and the
                                library's log records
      --log-file FILE           append the log to FILE instead of stderr (checked before
                                anything is acquired); text lines then start with the time
                                and zklock's pid; fatal errors still go to stderr too
      --metrics-file FILE       at the exit, replace FILE (through a temporary file beside it
                                and a rename) with Prometheus text for node_exporter's textfile
                                collector: wait and hold seconds, outcome, exit code, runs
                                and losses, labelled by LOCKPATH
  -q, --quiet                   print nothing but fatal errors (a lost lock is one)
      --list LOCKPATH           print the holder and the waiters of LOCKPATH: node, token,
                                session, owner data, since when, and its last --once-per run;
                                on another recipe's path, a group's members, a counter's value
                                and layout, a double barrier's participants, a barrier up or
                                down; then exit (66 if LOCKPATH does not exist)
      --json                    with --list: print JSON instead of a table (numbers for
                                "token" and "session_id", "observed": when it was read)
  -r, --recursive               with --list: every lock, semaphore, election and recipe at or
                                under LOCKPATH, in path order (plain nodes and free lock paths
                                are passed over; at most 10000 paths are read); with --json,
                                one line: {"observed", "prefix", "paths": [each as --list]}
      --prometheus              with --list: print the listing as Prometheus metrics (holders,
                                waiters, held and oldest-wait seconds, token, per path), e.g.
                                for node_exporter's textfile collector
      --listen HOST:PORT        with --list: serve those metrics on http://HOST:PORT/metrics,
                                from one session that watches the prefix and reads it again
                                only after a change, until INT or TERM
                                (port 0: a free one; the address is printed first)
      --max-locks N             with --prometheus or --listen: at most N paths' series (default
                                1000); the others are counted in zklock_listing_paths_dropped
      --watch                   with --list: print the listing again each time the holders
                                change (who leads an election, who holds a lock), until
                                interrupted (then exit 0), each after an 'observed TIME' line;
                                with --json, one JSON line each; says when the connection
                                drops (reconnecting) and when the listing resumes
      --break LOCKPATH          operators: delete the holder's node of a stuck lock (asks
                                first on a terminal); its zklock stops the job and exits 75;
                                exit 1 if there is no holder, 66 if LOCKPATH does not exist
      --node NAME               with --break: which holder, when there are several
      --force                   with --break: do not ask
  -h, --help                    print this help and exit
  -V, --version                 print the version and exit

The command's environment gets:
  ZKLOCK_FENCING_TOKEN   the grant's fencing token (decimal); pass it with every write to a
                         store that refuses tokens lower than the highest it has seen
  ZKLOCK_NODE            the full path of the lock node
  ZKLOCK_PATH            LOCKPATH
  ZKLOCK_SERVERS         the ensemble (--zk), so that a zklock in the job reaches the same one;
                         a zklock in the job that would wait for its parent's lock refuses
                         (exit 64); -s inside -s and -N K inside -N K (K > 1) run
  ZKLOCK_SESSION_ID      the ZooKeeper session id, as --list and the logs write it (0x...)
  ZKLOCK_TLS_CA, ZKLOCK_TLS_CERT, ZKLOCK_TLS_KEY
                         the TLS files zklock used (--tls-ca, ...), when it used TLS;
  ZKLOCK_TLS_NO_VERIFY_HOST
                         1 when it used --tls-no-verify-host

Signals: INT, TERM, HUP, QUIT, USR1 and USR2 are passed to the job's process group; zklock waits
for the job, releases the lock and exits with the job's status. A second INT or TERM sends SIGKILL
to every process of the job. A signal while still waiting for the lock withdraws from the queue
and exits 128+signal. Other signals that would end zklock by default (ALRM, PROF, PWR, real-time
signals...) are ignored.

Exit status:
  the command's status (128+N if it was killed by signal N)
  0             also: --once-per found this window's run already done or running elsewhere
  1 (or -E N)   the lock was held (-n) or the wait timed out (-w)
  75 (or -L N)  the lock was lost while the command ran (also when the command ended just as
                the loss came, or the release could not confirm it held to the end); the
                command was stopped
  64            usage error: bad option, value or lock path, or a chroot that does not exist
  65            --once-per: the path's run record is not one this zklock reads (another
                program's, or a newer zklock's); nothing was run
  66            with --list or --break: LOCKPATH (or the chroot) does not exist
  69            the ensemble could not be reached within the connect timeout (a session lost
                while waiting for the lock is replaced: zklock queues again and runs)
  70            an unexpected failure inside zklock or the library (a bug: please report it)
  77            authentication or ACL refusal
  126 / 127     the command could not be executed / was not found
  128+N         zklock got signal N while waiting for the lock

See zklock(1) for the cron, "run only on one host" and fencing recipes.
)";
}

#ifndef ZKLOCK_VERSION
#define ZKLOCK_VERSION "unknown"
#endif
std::string version_text() { return fmt::format("zklock (zkrecipes) {}\n", ZKLOCK_VERSION); }

}  // namespace zklock
