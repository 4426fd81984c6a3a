// SPDX-License-Identifier: Apache-2.0
// The job zklock hands to its waiting keeper: what crosses the pipe arrives whole, and a spec cut
// short (zklock died while writing it) is never mistaken for a job.
#include <gtest/gtest.h>

#include "keeper.hpp"

namespace zklock {
namespace {

const KeeperDeadline sample_deadline{zkr::BootClock::time_point(std::chrono::nanoseconds(123'456'789'012)), 10,
                                     std::chrono::milliseconds(2500)};

JobSpec sample_spec() {
  return {true, sample_deadline, {0, 1, 2, 7}, "/bin/sh", {"sh", "-c", "echo \"a b\"", ""},
          {"A=1", "EMPTY=", "ZKLOCK_PATH=/x"}};
}

TEST(JobSpec, CrossesThePipeWhole) {
  const JobSpec spec = sample_spec();
  const auto decoded = decode_job_spec(encode_job_spec(spec));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->take_terminal, spec.take_terminal);
  EXPECT_EQ(decoded->deadline.at, sample_deadline.at);
  EXPECT_EQ(decoded->deadline.kill_signal, sample_deadline.kill_signal);
  EXPECT_EQ(decoded->deadline.grace, sample_deadline.grace);
  EXPECT_EQ(decoded->passed_fds, spec.passed_fds);
  EXPECT_EQ(decoded->path, spec.path);
  EXPECT_EQ(decoded->argv, spec.argv);
  EXPECT_EQ(decoded->environment, spec.environment);
}

TEST(JobSpec, WithoutDescriptorsOrEnvironment) {
  const auto decoded = decode_job_spec(encode_job_spec({false, sample_deadline, {}, "/usr/bin/true", {"true"}, {}}));
  ASSERT_TRUE(decoded);
  EXPECT_FALSE(decoded->take_terminal);
  EXPECT_TRUE(decoded->passed_fds.empty());
  EXPECT_EQ(decoded->argv, std::vector<std::string>{"true"});
  EXPECT_TRUE(decoded->environment.empty());
}

TEST(JobSpec, CutShortIsNoJob) {
  const std::string bytes = encode_job_spec(sample_spec());
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    EXPECT_FALSE(decode_job_spec(bytes.substr(0, length))) << "cut at " << length;
  }
  EXPECT_FALSE(decode_job_spec(bytes + "x"));
}

TEST(JobSpec, NoCommandIsNoJob) {
  EXPECT_FALSE(decode_job_spec(encode_job_spec({false, sample_deadline, {}, "/usr/bin/true", {}, {"A=1"}})));
}

}  // namespace
}  // namespace zklock
