// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: zklock's command line (zklock::parse_command_line). The input is argv after
// the program name, NUL-separated; a first argument starting with "ENV=" is $ZKLOCK_SERVERS
// instead. Parsing either throws UsageError or returns options that make sense.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <cli_options.hpp>

#define FUZZ_CHECK(condition) \
  if (!(condition)) std::abort()

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> argv = {"zklock"};
  for (std::size_t start = 0; start < input.size();) {
    auto nul = input.find('\0', start);
    if (nul == std::string_view::npos) nul = input.size();
    argv.emplace_back(input.substr(start, nul - start));
    start = nul + 1;
  }
  std::string env_servers;
  const bool has_env = argv.size() > 1 && argv[1].starts_with("ENV=");
  if (has_env) {
    env_servers = argv[1].substr(4);
    argv.erase(argv.begin() + 1);
  }
  // Option names and values holding message placeholders ("--x%canonical_option%") once hung the
  // options library zklock used; its own parser must refuse or accept them like any other input
  // (corpus: boost_placeholder_hang, placeholder_in_a_value).
  zklock::CliOptions options;
  try {
    options = zklock::parse_command_line(argv, has_env ? env_servers.c_str() : nullptr);
  } catch (const zklock::UsageError& error) {
    // One line, apart from line breaks copied from the culprit itself (the message quotes the
    // argument raw; zklock escapes control characters only when it prints the message).
    const std::string_view message = error.what();
    // $ZKLOCK_SERVERS counts too: "@FILE" there names a file, and a refusal quotes its name.
    std::size_t input_breaks = static_cast<std::size_t>(std::count(env_servers.begin(), env_servers.end(), '\n'));
    for (const auto& argument : argv) input_breaks += static_cast<std::size_t>(std::count(argument.begin(), argument.end(), '\n'));
    FUZZ_CHECK(static_cast<std::size_t>(std::count(message.begin(), message.end(), '\n')) <= input_breaks);
    return 0;
  }
  if (options.mode == zklock::Mode::run || options.mode == zklock::Mode::list) FUZZ_CHECK(!options.servers.empty());
  // The lock path is not checked here (the library's validator does it in the caller), so it may
  // be anything, even empty after "--"; but a run has exactly one way to start its job.
  if (options.mode == zklock::Mode::run)
    FUZZ_CHECK(options.command.empty() != !options.shell_command.has_value());
  FUZZ_CHECK(!options.wait_timeout || *options.wait_timeout >= std::chrono::nanoseconds::zero());
  FUZZ_CHECK(options.conflict_exit_code >= 0 && options.conflict_exit_code <= 255);
  FUZZ_CHECK(options.lost_exit_code >= 0 && options.lost_exit_code <= 255);
  FUZZ_CHECK(options.kill_after >= std::chrono::milliseconds::zero());
  FUZZ_CHECK(options.session_timeout > std::chrono::milliseconds::zero());
  FUZZ_CHECK(options.connect_timeout > std::chrono::milliseconds::zero());
  FUZZ_CHECK(options.kill_signal > 0 && options.kill_signal < 65);
  return 0;
}
