#pragma once

// Checks shared by the tests that restore a cluster's objects after a process dies
// (restart_test: the master; node_restart_test: a node): placements that must not overlap,
// and a master metric to wait for.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/integration/cluster.h"

namespace granary::testing {

// Every placement of the objects in a and b (the master's /api/v1/objects data), checked for
// overlap within each segment.
inline void ExpectNoOverlap(const nlohmann::json& a, const nlohmann::json& b) {
  std::vector<std::tuple<uint64_t, uint64_t, uint64_t, std::string>> ranges;
  for (const nlohmann::json* list : {&a, &b}) {
    for (const auto& o : *list) {
      for (const auto& p : o["placements"]) {
        ranges.emplace_back(p["segment_id"].get<uint64_t>(), p["offset"].get<uint64_t>(),
                            p["bytes"].get<uint64_t>(), o["key"].get<std::string>());
      }
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [seg0, off0, len0, key0] = ranges[i - 1];
    const auto& [seg1, off1, len1, key1] = ranges[i];
    if (seg0 == seg1) {
      ASSERT_LE(off0 + len0, off1) << key0 << " overlaps " << key1 << " in segment " << seg0;
    }
  }
}

// Polls a master metric until pred holds; false after timeout_sec.
template <typename Pred>
bool WaitForMasterMetric(Cluster* cluster, const std::string& sample, Pred pred,
                         double timeout_sec) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_sec * 1000));
  while (std::chrono::steady_clock::now() < deadline) {
    auto v = cluster->Metric(sample);
    if (v.ok() && pred(*v)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace granary::testing
