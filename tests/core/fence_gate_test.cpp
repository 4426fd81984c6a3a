#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include <zkr/fence_gate.hpp>

namespace {

TEST(FenceGate, AdmitsEqualOrHigherAndRefusesLower) {
  zkr::FenceGate gate;
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(10)));
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(10)));
  EXPECT_TRUE(gate.admit("k", zkr::FencingToken(12)));
  EXPECT_FALSE(gate.admit("k", zkr::FencingToken(11)));
  EXPECT_TRUE(gate.admit("other", zkr::FencingToken(1)));
  EXPECT_FALSE(gate.admit("k", zkr::FencingToken()));
  EXPECT_EQ(gate.highest("k"), zkr::FencingToken(12));
  EXPECT_FALSE(gate.highest("none"));
  EXPECT_EQ(gate.admitted(), 4u);
  EXPECT_EQ(gate.refused(), 2u);
}

TEST(FenceGate, KeepsTheMaximumUnderConcurrentWriters) {
  zkr::FenceGate gate;
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&, t] {
      for (int i = 1; i <= 1000; ++i) gate.admit("k", zkr::FencingToken(i * 4 + t));
    });
  for (auto& w : writers) w.join();
  EXPECT_EQ(gate.highest("k"), zkr::FencingToken(4003));
  EXPECT_EQ(gate.admitted() + gate.refused(), 4000u);
}

}  // namespace
