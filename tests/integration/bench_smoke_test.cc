// Smoke run of every granary_bench mode with a tiny duration: the benchmark runs, moves data,
// reports no errors, and writes its JSON records. (Speed is measured in bench/, never here.)
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

TEST(BenchSmokeTest, EveryModeRunsAndWritesRecords) {
  Cluster::Options o;
  o.node_segment_size = "128MB";
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const char* mode : {"put", "get", "mixed", "meta"}) {
    std::string out = (*c)->dir() + "/" + mode + ".json";
    auto p = Process::Start({BinDir() + "/granary_bench", mode, "--master=" + (*c)->master_address(),
                             "--block_size=4KB,64KB", "--batch=4", "--duration=0.3",
                             "--working_set=4MB", "--out=" + out},
                            {}, (*c)->dir() + "/bench_" + mode + ".log");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ((*p)->Wait(), 0) << mode << ":\n" << (*p)->Log();
    std::ifstream in(out);
    nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_TRUE(j.is_array()) << mode;
    ASSERT_EQ(j.size(), std::string(mode) == "meta" ? 4u : 2u) << mode;
    for (const auto& r : j) {
      EXPECT_GT(r["keys_per_s"].get<double>(), 0) << mode;
      for (const char* f : {"mode", "block_size", "batch", "threads", "lanes", "transport", "gbps",
                            "p50_us", "p99_us"}) {
        EXPECT_TRUE(r.contains(f)) << mode << " record lacks " << f;
      }
    }
  }
}

}  // namespace
}  // namespace granary::testing
