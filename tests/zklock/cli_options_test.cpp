// SPDX-License-Identifier: Apache-2.0
// zklock's command line, parsed without starting anything.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli_options.hpp"
#include "nesting.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

CliOptions parse(std::vector<std::string> args, const char* env_servers = nullptr) {
  args.insert(args.begin(), "zklock");
  return parse_command_line(args, env_servers);
}

// The UsageError's message, or "" if parsing succeeded.
std::string usage_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& error) {
    return error.what();
  }
  return "";
}

TEST(ZklockOptions, CommandAndDefaults) {
  const CliOptions options = parse({"/locks/a", "echo", "hi"});
  EXPECT_EQ(options.mode, Mode::run);
  EXPECT_EQ(options.lock_path, "/locks/a");
  EXPECT_THAT(options.command, ElementsAre("echo", "hi"));
  EXPECT_FALSE(options.shell_command);
  EXPECT_EQ(options.servers, "127.0.0.1:2181");
  EXPECT_FALSE(options.wait_timeout);
  EXPECT_EQ(options.conflict_exit_code, 1);
  EXPECT_EQ(options.lost_exit_code, 75);
  EXPECT_EQ(options.kind, LockKind::mutex);
  EXPECT_EQ(options.session_timeout, 20s);
  EXPECT_EQ(options.connect_timeout, 15s);
  EXPECT_EQ(options.kill_after, 5s);
  EXPECT_EQ(options.kill_signal, SIGTERM);
  EXPECT_EQ(options.verbosity, Verbosity::normal);
}

TEST(ZklockOptions, OptionsStopAtLockPath) {
  const CliOptions options = parse({"-n", "/locks/a", "grep", "-n", "x"});
  EXPECT_TRUE(options.nonblocking());
  EXPECT_THAT(options.command, ElementsAre("grep", "-n", "x"));
}

TEST(ZklockOptions, DoubleDashBeforeCommandOrLockPath) {
  EXPECT_THAT(parse({"/locks/a", "--", "-weird-command", "x"}).command, ElementsAre("-weird-command", "x"));
  const CliOptions options = parse({"-n", "--", "/locks/a", "true"});
  EXPECT_EQ(options.lock_path, "/locks/a");
  EXPECT_THAT(options.command, ElementsAre("true"));
}

TEST(ZklockOptions, ShellCommand) {
  const CliOptions options = parse({"/locks/a", "-c", "echo a | wc -l"});
  EXPECT_EQ(options.shell_command, "echo a | wc -l");
  EXPECT_TRUE(options.command.empty());
  EXPECT_THAT(usage_error({"/locks/a", "-c"}), HasSubstr("-c"));
  EXPECT_THAT(usage_error({"/locks/a", "-c", "echo", "extra"}), HasSubstr("-c"));
  EXPECT_THAT(usage_error({"-c", "echo", "/locks/a"}), HasSubstr("-c must follow LOCKPATH"));
}

TEST(ZklockOptions, ValuesInEveryForm) {
  const CliOptions options =
      parse({"-w2.5", "--zk=h1:1,h2:2/app", "-E", "9", "-L", "80", "--kill-after", "0.25", "--kill-signal",
             "sigint", "--session-timeout", "4", "--connect-timeout=1.5", "--owner", "me", "-v", "/a", "true"});
  EXPECT_EQ(options.wait_timeout, 2500ms);
  EXPECT_EQ(options.servers, "h1:1,h2:2/app");
  EXPECT_EQ(options.conflict_exit_code, 9);
  EXPECT_EQ(options.lost_exit_code, 80);
  EXPECT_EQ(options.kill_after, 250ms);
  EXPECT_EQ(options.kill_signal, SIGINT);
  EXPECT_EQ(options.session_timeout, 4s);
  EXPECT_EQ(options.connect_timeout, 1500ms);
  EXPECT_EQ(options.owner, "me");
  EXPECT_TRUE(options.verbose());
  EXPECT_EQ(parse({"--timeout", "3", "/a", "true"}).wait_timeout, 3s);
  EXPECT_EQ(parse({"--wait", "1", "/a", "true"}).wait_timeout, 1s);
  EXPECT_EQ(parse({"-nq", "/a", "true"}).verbosity, Verbosity::quiet);
  EXPECT_EQ(parse({"-w", "0", "/a", "true"}).nonblocking(), true);
}

TEST(ZklockOptions, ServersFromEnvironmentUnlessGiven) {
  EXPECT_EQ(parse({"/a", "true"}, "zk9:2181").servers, "zk9:2181");
  EXPECT_EQ(parse({"-z", "zk1:1", "/a", "true"}, "zk9:2181").servers, "zk1:1");
  EXPECT_EQ(parse({"/a", "true"}, "").servers, "127.0.0.1:2181");
}

// -z @FILE: the servers as a file an ops tool keeps, read at the start: one or more per line,
// commas or blanks between them, '#' comments, the chroot on the last server or a line of its own.
TEST(ZklockOptions, ServersFromAFileGivenAsAtFile) {
  const std::string file = fmt::format("/tmp/zklock-servers-{}.txt", ::getpid());
  std::ofstream(file) << "# the ensemble, kept by config management\n"
                         "zk1.example:2181, zk2.example:2181\n"
                         "\n"
                         "  zk3.example:2181   # moved on 2026-11-30\n"
                         "/apps/billing\n";
  EXPECT_EQ(parse({"-z", "@" + file, "/a", "true"}).servers, "zk1.example:2181,zk2.example:2181,zk3.example:2181/apps/billing");
  EXPECT_EQ(parse({"/a", "true"}, ("@" + file).c_str()).servers,
            "zk1.example:2181,zk2.example:2181,zk3.example:2181/apps/billing");  // $ZKLOCK_SERVERS too
  std::ofstream(file) << "zk1:2181,zk2:2181/chroot\n";
  EXPECT_EQ(parse({"--zk=@" + file, "/a", "true"}).servers, "zk1:2181,zk2:2181/chroot");

  std::ofstream(file) << "# nothing but a comment\n";
  EXPECT_THAT(usage_error({"-z", "@" + file, "/a", "true"}), HasSubstr(file + " names no server"));
  std::ofstream(file) << "zk1:2181\n/a\n/b\n";
  EXPECT_THAT(usage_error({"-z", "@" + file, "/a", "true"}), HasSubstr("more than one chroot"));
  std::remove(file.c_str());
  EXPECT_THAT(usage_error({"-z", "@" + file, "/a", "true"}), HasSubstr("cannot read the servers from " + file));
  EXPECT_THAT(usage_error({"-z", "@", "/a", "true"}), HasSubstr("-z @FILE needs a file name"));
  EXPECT_THAT(usage_error({"-z", "@/tmp", "/a", "true"}), HasSubstr("cannot read the servers from /tmp: not a regular file"));
  EXPECT_THAT(usage_error({"-z", "@/dev/zero", "/a", "true"}), HasSubstr("/dev/zero: not a regular file"));
}

TEST(ZklockOptions, TickTimeFromOptionElseEnvironmentElseTwoSeconds) {
  EXPECT_EQ(parse({"/a", "true"}).tick_time, 2s);
  EXPECT_EQ(parse_command_line({"zklock", "/a", "true"}, nullptr, "0.1").tick_time, 100ms);
  EXPECT_EQ(parse_command_line({"zklock", "--tick-time", "3", "/a", "true"}, nullptr, "0.1").tick_time, 3s);
  EXPECT_THAT(usage_error({"--tick-time", "0", "/a", "true"}), HasSubstr("--tick-time"));
  try {
    parse_command_line({"zklock", "/a", "true"}, nullptr, "soon");
    ADD_FAILURE() << "a bad $ZKLOCK_TICK_TIME was accepted";
  } catch (const UsageError& error) {
    EXPECT_THAT(error.what(), HasSubstr("$ZKLOCK_TICK_TIME"));
  }
}

TEST(ZklockOptions, SharedAndExclusive) {
  EXPECT_EQ(parse({"-s", "/a", "true"}).kind, LockKind::read);
  EXPECT_EQ(parse({"-x", "/a", "true"}).kind, LockKind::write);
  EXPECT_THAT(usage_error({"-s", "-x", "/a", "true"}), HasSubstr("-s and -x"));
}

TEST(ZklockOptions, ListMode) {
  const CliOptions options = parse({"--list", "/locks/a", "--json"});
  EXPECT_EQ(options.mode, Mode::list);
  EXPECT_EQ(options.lock_path, "/locks/a");
  EXPECT_TRUE(options.json);
  EXPECT_EQ(parse({"--json", "--list", "/a"}).mode, Mode::list);
  EXPECT_THAT(usage_error({"--list", "/a", "echo"}), HasSubstr("--list takes no command"));
  EXPECT_THAT(usage_error({"--json", "/a", "true"}), HasSubstr("--json"));
  // No command follows --list: options stand before or after LOCKPATH, as getopt users expect.
  for (const std::vector<std::string>& argv : std::vector<std::vector<std::string>>{
           {"--list", "--json", "/a"}, {"--list", "/a", "--json"}, {"--list=/a", "--json"}, {"--json", "--list", "--", "/a"}}) {
    const CliOptions any_order = parse(argv);
    EXPECT_EQ(any_order.mode, Mode::list) << argv.front();
    EXPECT_EQ(any_order.lock_path, "/a") << argv.front();
    EXPECT_TRUE(any_order.json) << argv.front();
  }
  EXPECT_THAT(usage_error({"--list"}), HasSubstr("--list needs LOCKPATH"));
  EXPECT_THAT(usage_error({"--list", "--json"}), HasSubstr("--list needs LOCKPATH"));
  EXPECT_THAT(usage_error({"--list", "/a", "-c", "echo"}), HasSubstr("--list takes no command (found '-c')"));
}

TEST(ZklockOptions, SlotsTakeASemaphore) {
  const CliOptions options = parse({"-N", "3", "/jobs/x", "true"});
  EXPECT_EQ(options.kind, LockKind::semaphore);
  EXPECT_EQ(options.slots, 3);
  EXPECT_EQ(parse({"--slots", "1", "/jobs/x", "true"}).slots, 1);
  EXPECT_EQ(parse({"/jobs/x", "true"}).kind, LockKind::mutex);
  for (const char* bad : {"0", "-1", "10001", "2x", ""}) {
    EXPECT_THAT(usage_error({"--slots", bad, "/jobs/x", "true"}),
                HasSubstr(std::string("invalid value '") + bad + "' for --slots: expected a number of slots from 1 to 10000"));
  }
  EXPECT_THAT(usage_error({"-N", "2", "-s", "/jobs/x", "true"}), HasSubstr("-N/--slots and -s/-x exclude each other"));
  EXPECT_THAT(usage_error({"-N", "2", "--list", "/jobs/x"}), HasSubstr("drop --slots"));
}

TEST(ZklockOptions, BreakTakesAPathAndOptionallyANode) {
  const CliOptions options = parse({"--break", "/jobs/x", "--node", "_c_a-lock-0000000001", "--force"});
  EXPECT_EQ(options.mode, Mode::break_lock);
  EXPECT_EQ(options.lock_path, "/jobs/x");
  EXPECT_EQ(options.break_node, "_c_a-lock-0000000001");
  EXPECT_TRUE(options.force);
  EXPECT_FALSE(parse({"--break", "/jobs/x"}).force);
  EXPECT_THAT(usage_error({"--force", "/jobs/x", "true"}), HasSubstr("--node and --force apply only to --break"));
  EXPECT_THAT(usage_error({"--break", "/jobs/x", "true"}), HasSubstr("--break takes no command"));
  const CliOptions forced_first = parse({"--break", "--force", "--node", "_c_a-lock-0000000001", "/jobs/x"});
  EXPECT_EQ(forced_first.mode, Mode::break_lock);
  EXPECT_EQ(forced_first.lock_path, "/jobs/x");
  EXPECT_TRUE(forced_first.force);
  EXPECT_THAT(usage_error({"--break", "/jobs/x", "--list", "/jobs/y"}), HasSubstr("--list and --break exclude each other"));
}

// Which nested zklock would wait for its parent's node (the node itself is found on the ensemble).
TEST(ZklockNesting, RefusesOnlyAWaitForTheParent) {
  using zkr::ContenderRole;
  EXPECT_TRUE(waits_for_parent(parse({"/jobs/x", "true"}), ContenderRole::exclusive, std::nullopt));
  EXPECT_TRUE(waits_for_parent(parse({"-s", "/jobs/x", "true"}), ContenderRole::write, std::nullopt));
  EXPECT_TRUE(waits_for_parent(parse({"-x", "/jobs/x", "true"}), ContenderRole::read, std::nullopt));
  EXPECT_FALSE(waits_for_parent(parse({"-s", "/jobs/x", "true"}), ContenderRole::read, std::nullopt));
  EXPECT_FALSE(waits_for_parent(parse({"-N", "3", "/jobs/x", "true"}), ContenderRole::exclusive, 3));
  EXPECT_TRUE(waits_for_parent(parse({"-N", "1", "/jobs/x", "true"}), ContenderRole::exclusive, 1));
}

TEST(ZklockNesting, FindsTheParentsNodeThroughEitherChroot) {
  const ParentGrant parent{"/jobs/x/_c_a-lock-0000000001", "/app", 1, 2};
  EXPECT_EQ(parent_node_seen_from(parent, ""), "/app/jobs/x/_c_a-lock-0000000001");
  EXPECT_EQ(parent_node_seen_from(parent, "/app"), "/jobs/x/_c_a-lock-0000000001");
  EXPECT_EQ(parent_node_seen_from(parent, "/app/jobs"), "/x/_c_a-lock-0000000001");
  EXPECT_FALSE(parent_node_seen_from(parent, "/other"));
  EXPECT_FALSE(parent_node_seen_from(parent, "/ap"));
}

TEST(ZklockOptions, HelpAndVersion) {
  EXPECT_EQ(parse({"--help"}).mode, Mode::help);
  EXPECT_EQ(parse({"-V"}).mode, Mode::version);
}

TEST(ZklockOptions, BadValuesNameTheOption) {
  EXPECT_THAT(usage_error({"--kill-after", "soon", "/a", "true"}), HasSubstr("--kill-after"));
  EXPECT_THAT(usage_error({"-k", "-1", "/a", "true"}), HasSubstr("--kill-after"));
  EXPECT_THAT(usage_error({"-w", "nan", "/a", "true"}), HasSubstr("--wait"));
  EXPECT_THAT(usage_error({"-w", "1e9", "/a", "true"}), HasSubstr("--wait"));
  EXPECT_THAT(usage_error({"-E", "256", "/a", "true"}), HasSubstr("--conflict-exit-code"));
  EXPECT_THAT(usage_error({"-L", "x", "/a", "true"}), HasSubstr("--lost-exit-code"));
  EXPECT_THAT(usage_error({"--kill-signal", "NOPE", "/a", "true"}), HasSubstr("--kill-signal"));
  EXPECT_THAT(usage_error({"--kill-signal", "0", "/a", "true"}), HasSubstr("--kill-signal"));
  EXPECT_THAT(usage_error({"--session-timeout", "0", "/a", "true"}), HasSubstr("--session-timeout"));
  EXPECT_THAT(usage_error({"--connect-timeout", "0", "/a", "true"}), HasSubstr("--connect-timeout"));
  EXPECT_THAT(usage_error({"--bogus", "/a", "true"}), HasSubstr("bogus"));
  EXPECT_THAT(usage_error({"-n", "-w", "2", "/a", "true"}), HasSubstr("-n and -w"));
  EXPECT_THAT(usage_error({"-v", "-q", "/a", "true"}), HasSubstr("-v and -q"));
  EXPECT_THAT(usage_error({"--auth-file", "", "/a", "true"}), HasSubstr("--auth-file"));
  EXPECT_THAT(usage_error({"--zk", "", "/a", "true"}), HasSubstr("--zk"));
  EXPECT_THAT(usage_error({"--kill-after"}), HasSubstr("kill-after"));
}

// Boost.ProgramOptions 1.74, which zklock once used, looped forever formatting the error for these
// names (its own message placeholders); they are refused like any unknown option, naming it.
TEST(ZklockOptions, OptionNamesHoldingPlaceholdersAreRefused) {
  EXPECT_THAT(usage_error({"--x%canonical_option%", "/a", "true"}), HasSubstr("unrecognised option '--x%canonical_option%'"));
  EXPECT_THAT(usage_error({"--%option%=1", "/a", "true"}), HasSubstr("unrecognised option"));
  EXPECT_THAT(usage_error({"-n%value%", "/a", "true"}), HasSubstr("unrecognised option '-n%value%'"));
  // Values may hold them.
  EXPECT_EQ(parse({"--owner=%canonical_option%", "/a", "true"}).owner, "%canonical_option%");
  EXPECT_THAT(usage_error({"--json=%canonical_option%", "/a", "true"}), HasSubstr("'--json' does not take"));
}

// The option syntax itself: what each form means, and each mistake named.
TEST(ZklockOptions, OptionSyntax) {
  // Short switches cluster, and a cluster may end with an option that takes a value.
  const CliOptions clustered = parse({"-nvz", "h:1", "/a", "true"});
  EXPECT_TRUE(clustered.nonblocking());
  EXPECT_TRUE(clustered.verbose());
  EXPECT_EQ(clustered.servers, "h:1");
  EXPECT_EQ(parse({"-vw3", "/a", "true"}).wait_timeout, 3s);
  // The argument after an option that takes one is its value, even if it starts with '-'.
  EXPECT_EQ(parse({"--owner", "-me-", "/a", "true"}).owner, "-me-");
  EXPECT_EQ(parse({"--owner=", "/a", "true"}).owner, "");
  EXPECT_THAT(usage_error({"-k", "-1", "/a", "true"}), HasSubstr("invalid value '-1' for --kill-after"));
  // Each option once, under any of its names.
  EXPECT_THAT(usage_error({"-w", "1", "--timeout", "2", "/a", "true"}),
              HasSubstr("option '--wait' cannot be specified more than once"));
  EXPECT_THAT(usage_error({"-v", "--verbose", "/a", "true"}),
              HasSubstr("option '--verbose' cannot be specified more than once"));
  EXPECT_THAT(usage_error({"-nn", "/a", "true"}), HasSubstr("option '--nonblock' cannot be specified more than once"));
  // A value missing at the end, in either form.
  EXPECT_THAT(usage_error({"--zk"}), HasSubstr("the required argument for option '--zk' is missing"));
  EXPECT_THAT(usage_error({"-nz"}), HasSubstr("the required argument for option '--zk' is missing"));
  // Exact names only: no abbreviations, and switches take no value.
  EXPECT_THAT(usage_error({"--non", "/a", "true"}), HasSubstr("unrecognised option '--non'"));
  EXPECT_THAT(usage_error({"--nonblock=yes", "/a", "true"}), HasSubstr("option '--nonblock' does not take any arguments"));
  EXPECT_THAT(usage_error({"-ny", "/a", "true"}), HasSubstr("unrecognised option '-ny'"));
  EXPECT_THAT(usage_error({"--=1", "/a", "true"}), HasSubstr("unrecognised option '--'"));
}

// Of several mistakes, the same one is reported first, whatever order they were given in.
TEST(ZklockOptions, FirstMistakeReportedIsStable) {
  EXPECT_THAT(usage_error({"--session-timeout", "0", "-L", "x", "/a", "true"}), HasSubstr("--lost-exit-code"));
  EXPECT_THAT(usage_error({"--kill-signal", "NOPE", "--tick-time", "0", "/a", "true"}), HasSubstr("--tick-time"));
  EXPECT_THAT(usage_error({"--json", "-s", "-x", "/a", "true"}), HasSubstr("-s and -x"));
  EXPECT_THAT(usage_error({"--json", "/a"}), HasSubstr("--json applies only to --list"));
  EXPECT_THAT(usage_error({"--bogus", "-s", "-x", "/a", "true"}), HasSubstr("bogus"));
}

TEST(ZklockOptions, MissingPieces) {
  EXPECT_THAT(usage_error({}), HasSubstr("missing LOCKPATH"));
  EXPECT_THAT(usage_error({"-n"}), HasSubstr("missing LOCKPATH"));
  EXPECT_THAT(usage_error({"/a"}), HasSubstr("missing COMMAND"));
  EXPECT_THAT(usage_error({"/a", "--"}), HasSubstr("missing COMMAND"));
  EXPECT_THAT(usage_error({"/a", "-n", "true"}), HasSubstr("options go before LOCKPATH"));
}

TEST(ZklockOptions, SignalNamesAndNumbers) {
  EXPECT_EQ(parse_signal("TERM", "--kill-signal"), SIGTERM);
  EXPECT_EQ(parse_signal("SIGKILL", "--kill-signal"), SIGKILL);
  EXPECT_EQ(parse_signal("hup", "--kill-signal"), SIGHUP);
  EXPECT_EQ(parse_signal("10", "--kill-signal"), 10);
  EXPECT_EQ(signal_name(SIGUSR2), "USR2");
}

TEST(ZklockOptions, DurationText) {
  EXPECT_EQ(format_duration(250ms), "250ms");
  EXPECT_EQ(format_duration(2s), "2s");
  EXPECT_EQ(format_duration(1500ms), "1.5s");
  // Exact however long: never "1e+06s".
  EXPECT_EQ(format_duration(1'000'000s), "1000000s");
  EXPECT_EQ(format_duration(1'234'567'890ms), "1234567.89s");
  EXPECT_EQ(format_duration(12'345'678us), "12.345678s");
}

TEST(ZklockOptions, HelpMentionsTheEnvironmentAndExitCodes) {
  const std::string help = help_text();
  for (const char* item : {"ZKLOCK_FENCING_TOKEN", "ZKLOCK_NODE", "ZKLOCK_PATH", "ZKLOCK_SESSION_ID", "ZKLOCK_SERVERS",
                           "75", "64", "65", "66", "69", "70", "77", "126", "127"}) {
    EXPECT_THAT(help, HasSubstr(item));
  }
}

// The man page's OPTIONS section: the tag line of each entry (the line after ".TP").
std::vector<std::string> man_page_option_tags() {
  std::ifstream in(ZKLOCK_MAN_PAGE);
  std::vector<std::string> tags;
  bool in_options = false;
  bool after_tp = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(".SH")) in_options = line == ".SH OPTIONS";
    if (in_options && after_tp) tags.push_back(line);
    after_tp = line == ".TP";
  }
  return tags;
}

// The option as the man page's source spells it: "\-\-kill\-after".
std::string roff(std::string_view text) {
  std::string out;
  for (char c : text) out += c == '-' ? std::string("\\-") : std::string(1, c);
  return out;
}

// Whatever the parser accepts, --help lists (in its column of options) and the man page describes
// (an entry of its OPTIONS section), by every name it goes by.
TEST(ZklockOptions, HelpAndManPageDescribeEveryAcceptedOption) {
  const std::string help = help_text();
  const std::vector<std::string> tags = man_page_option_tags();
  ASSERT_FALSE(tags.empty()) << "no OPTIONS entries in " << ZKLOCK_MAN_PAGE;
  const auto tagged = [&](const std::string& needle) {
    return std::any_of(tags.begin(), tags.end(), [&](const std::string& tag) {
      for (auto at = tag.find(needle); at != std::string::npos; at = tag.find(needle, at + 1)) {
        const char before = at > 0 ? tag[at - 1] : ' ';
        const char next = at + needle.size() < tag.size() ? tag[at + needle.size()] : ' ';
        // Not part of a longer name (\-k inside \-\-kill\-after).
        if (before != '-' && !std::isalnum(static_cast<unsigned char>(next)) && next != '\\') return true;
      }
      return false;
    });
  };
  for (const AcceptedOption& option : accepted_options()) {
    const std::string name = fmt::format("--{}", option.name);
    const std::string help_entry =
        option.short_name ? fmt::format("\n  -{}, {}", option.short_name, name) : fmt::format("\n      {}", name);
    EXPECT_NE(help.find(help_entry), std::string::npos) << "--help does not list " << name;
    EXPECT_TRUE(tagged(roff(name))) << "the man page's OPTIONS do not describe " << name;
    if (option.short_name) {
      EXPECT_TRUE(tagged(roff(fmt::format("-{}", option.short_name))))
          << "the man page's OPTIONS do not describe -" << option.short_name;
    }
    if (!option.alias.empty()) {
      EXPECT_NE(help.find(fmt::format(", --{}", option.alias)), std::string::npos)
          << "--help does not list --" << option.alias;
      EXPECT_TRUE(tagged(roff(fmt::format("--{}", option.alias))))
          << "the man page's OPTIONS do not describe --" << option.alias;
    }
  }
}

TEST(ZklockOptions, OncePerTakesAPeriodWithAUnit) {
  EXPECT_EQ(parse({"--once-per", "1d", "/p", "true"}).once_per, std::chrono::milliseconds(std::chrono::days(1)));
  EXPECT_EQ(parse({"--once-per=30m", "/p", "true"}).once_per, std::chrono::milliseconds(30min));
  EXPECT_EQ(parse({"--once-per", "2w", "/p", "true"}).once_per, std::chrono::milliseconds(std::chrono::weeks(2)));
  EXPECT_EQ(parse({"--once-per", "90s", "/p", "true"}).once_per, std::chrono::milliseconds(90s));
  EXPECT_FALSE(parse({"/p", "true"}).once_per);
  for (const char* bad : {"", "0s", "1", "1x", "h", "-1h", "1.5h", "367d", "53w", "99999999999999999999d"}) {
    EXPECT_THAT(usage_error({"--once-per", bad, "/p", "true"}), HasSubstr(fmt::format("invalid value '{}' for --once-per", bad)))
        << bad;
  }
  EXPECT_THAT(usage_error({"--once-per", "1h", "-s", "/p", "true"}), HasSubstr("--once-per runs the job on one host at a time"));
  EXPECT_THAT(usage_error({"--once-per", "1h", "-N", "2", "/p", "true"}), HasSubstr("drop -s, -x or -N"));
  EXPECT_THAT(usage_error({"--once-per", "1h", "--list", "/p"}), HasSubstr("drop --once-per"));
  EXPECT_THAT(usage_error({"--once-per", "1h", "--break", "/p"}), HasSubstr("--once-per applies only to running a command"));
}

TEST(ZklockOptions, OncePerTakesATimeZoneAndTheFailedRunPolicy) {
  const CliOptions defaults = parse({"--once-per", "1d", "/p", "true"});
  EXPECT_EQ(defaults.once_per_zone.name(), "UTC");
  EXPECT_FALSE(defaults.count_failed);
  const CliOptions berlin = parse({"--once-per", "1d", "--tz", "Europe/Berlin", "--count-failed", "/p", "true"});
  EXPECT_EQ(berlin.once_per_zone.name(), "Europe/Berlin");
  EXPECT_TRUE(berlin.count_failed);
  EXPECT_EQ(parse({"--once-per", "1d", "--tz=Asia/Kolkata", "/p", "true"}).once_per_zone.offset_at(0), 19800);
  EXPECT_THAT(usage_error({"--once-per", "1d", "--tz", "Mars/Base", "/p", "true"}),
              HasSubstr("invalid value 'Mars/Base' for --tz: unknown time zone 'Mars/Base'"));
  EXPECT_THAT(usage_error({"--once-per", "1d", "--tz", "", "/p", "true"}),
              HasSubstr("invalid value '' for --tz: '' is not a time zone name"));
  EXPECT_THAT(usage_error({"--tz", "UTC", "/p", "true"}), HasSubstr("--tz applies only to --once-per"));
  EXPECT_THAT(usage_error({"--count-failed", "/p", "true"}), HasSubstr("--count-failed applies only to --once-per"));
  const std::string help = help_text();
  EXPECT_THAT(help, HasSubstr("--tz ZONE"));
  EXPECT_THAT(help, HasSubstr("(default UTC)"));
  EXPECT_THAT(help, HasSubstr("Monday 00:00 to Monday 00:00"));
  EXPECT_THAT(help, HasSubstr("--count-failed"));
}

TEST(ZklockOptions, RecursiveGoesWithListOnlyAndNotWithWatch) {
  EXPECT_TRUE(parse({"--list", "/p", "--recursive"}).recursive);
  EXPECT_TRUE(parse({"-r", "--json", "--list", "/"}).recursive);
  EXPECT_FALSE(parse({"--list", "/p"}).recursive);
  EXPECT_THAT(usage_error({"--recursive", "/p", "true"}), HasSubstr("--recursive applies only to --list"));
  EXPECT_THAT(usage_error({"--recursive", "--break", "/p"}), HasSubstr("--recursive applies only to --list"));
  EXPECT_THAT(usage_error({"--list", "/p", "--recursive", "--watch"}), HasSubstr("--watch follows one path"));
}

TEST(ZklockOptions, PrometheusAndListenGoWithListAndNotWithJsonOrWatch) {
  EXPECT_TRUE(parse({"--list", "/", "-r", "--prometheus"}).prometheus);
  const auto served = parse({"--list", "/jobs", "-r", "--listen", "127.0.0.1:9475", "--max-locks", "50"});
  EXPECT_EQ(served.listen, "127.0.0.1:9475");
  EXPECT_TRUE(served.prometheus);  // what it serves
  EXPECT_EQ(served.max_locks, 50u);
  EXPECT_EQ(parse({"--list", "/jobs", "--prometheus"}).max_locks, 1000u);
  EXPECT_THAT(usage_error({"--prometheus", "/p", "true"}), HasSubstr("--prometheus applies only to --list"));
  EXPECT_THAT(usage_error({"--listen", "127.0.0.1:1", "/p", "true"}), HasSubstr("--listen applies only to --list"));
  EXPECT_THAT(usage_error({"--list", "/p", "--prometheus", "--json"}), HasSubstr("--prometheus and --json exclude each other"));
  EXPECT_THAT(usage_error({"--list", "/p", "--listen", "127.0.0.1:1", "--watch"}), HasSubstr("--listen and --watch exclude each other"));
  EXPECT_THAT(usage_error({"--list", "/p", "--max-locks", "5"}), HasSubstr("--max-locks applies only to --prometheus or --listen"));
  EXPECT_THAT(usage_error({"--list", "/p", "--prometheus", "--max-locks", "0"}), HasSubstr("invalid value '0' for --max-locks"));
  EXPECT_THAT(usage_error({"--list", "/p", "--listen", "9475"}), HasSubstr("invalid value '9475' for --listen: expected HOST:PORT"));
}

TEST(ZklockOptions, WatchGoesWithListOnly) {
  EXPECT_TRUE(parse({"--list", "/p", "--watch"}).watch);
  EXPECT_TRUE(parse({"--watch", "--json", "--list", "/p"}).watch);
  EXPECT_FALSE(parse({"--list", "/p"}).watch);
  EXPECT_THAT(usage_error({"--watch", "/p", "true"}), HasSubstr("--watch applies only to --list"));
  EXPECT_THAT(usage_error({"--watch", "--break", "/p"}), HasSubstr("--watch applies only to --list"));
}

}  // namespace
}  // namespace zklock

namespace zklock {
namespace {

TEST(ZklockOptions, LogFormatLogFileAndMetricsFile) {
  const CliOptions defaults = parse({"/a", "true"});
  EXPECT_EQ(defaults.log_format, LogFormat::text);
  EXPECT_FALSE(defaults.log_file);
  EXPECT_FALSE(defaults.metrics_file);
  const CliOptions options = parse({"--log-format", "json", "--log-file=/var/log/z.log", "--metrics-file", "/m/z.prom", "/a", "true"});
  EXPECT_EQ(options.log_format, LogFormat::json);
  EXPECT_EQ(options.log_file, std::filesystem::path("/var/log/z.log"));
  EXPECT_EQ(options.metrics_file, std::filesystem::path("/m/z.prom"));
  EXPECT_EQ(usage_error({"--log-format", "JSONL", "/a", "true"}), "invalid value 'JSONL' for --log-format: expected text or json");
  EXPECT_EQ(usage_error({"--log-file", "", "/a", "true"}), "invalid value '' for --log-file: expected a file name");
  EXPECT_EQ(usage_error({"--metrics-file", "", "/a", "true"}), "invalid value '' for --metrics-file: expected a file name");
  EXPECT_EQ(usage_error({"--metrics-file", "/m/", "/a", "true"}), "invalid value '/m/' for --metrics-file: expected a file name");
  // Logs serve every mode; metrics describe a run.
  EXPECT_EQ(parse({"--log-format", "json", "--list", "/a"}).log_format, LogFormat::json);
  EXPECT_EQ(usage_error({"--metrics-file", "/m/z.prom", "--list", "/a"}), "--metrics-file applies only to running a command");
  for (const char* option : {"--log-format", "--log-file", "--metrics-file"}) EXPECT_THAT(help_text(), HasSubstr(option));
}

}  // namespace
}  // namespace zklock
