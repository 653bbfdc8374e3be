// Smoke run of every granary_bench mode with a tiny duration: the benchmark runs, moves data,
// reports no errors, and writes its JSON records. (Speed is measured in bench/, never here.)
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

TEST(BenchSmokeTest, EveryModeRunsAndWritesRecords) {
  Cluster::Options o;
  o.node_segment_size = "128MB";
  auto c = Cluster::Start(o);
  ASSERT_TRUE(c.ok()) << c.status();
  for (const char* mode : {"put", "get", "mixed", "meta", "memcpy"}) {
    std::string out = (*c)->dir() + "/" + mode + ".json";
    auto p = Process::Start({BinDir() + "/granary_bench", mode,
                             "--master=" + (*c)->master_address(), "--block_size=4KB,64KB",
                             "--batch=4", "--duration=0.3", "--working_set=4MB", "--out=" + out},
                            {}, (*c)->dir() + "/bench_" + mode + ".log");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ((*p)->Wait(), 0) << mode << ":\n" << (*p)->Log();
    std::ifstream in(out);
    nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_TRUE(j.is_array()) << mode;
    // Two block sizes; meta and memcpy give two records per size (put and get).
    const bool two_per_size = std::string(mode) == "meta" || std::string(mode) == "memcpy";
    ASSERT_EQ(j.size(), two_per_size ? 4u : 2u) << mode;
    for (const auto& r : j) {
      EXPECT_GT(r["keys_per_s"].get<double>(), 0) << mode;
      for (const char* f : {"mode", "block_size", "batch", "threads", "lanes", "transport", "gbps",
                            "p50_us", "p99_us"}) {
        EXPECT_TRUE(r.contains(f)) << mode << " record lacks " << f;
      }
    }
  }
  // meta with several batches in flight per thread, on two threads.
  {
    std::string out = (*c)->dir() + "/meta_lanes.json";
    auto p = Process::Start(
        {BinDir() + "/granary_bench", "meta", "--master=" + (*c)->master_address(),
         "--block_size=4KB", "--batch=8", "--threads=2", "--lanes=4", "--ops=256", "--out=" + out},
        {}, (*c)->dir() + "/bench_meta_lanes.log");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ((*p)->Wait(), 0) << (*p)->Log();
    std::ifstream in(out);
    nlohmann::json j = nlohmann::json::parse(in);
    ASSERT_EQ(j.size(), 2u);
    for (const auto& r : j) {
      EXPECT_EQ(r["lanes"].get<int>(), 4);
      EXPECT_EQ(r["errors"].get<int>(), 0) << r.dump();
      EXPECT_GT(r["keys_per_s"].get<double>(), 0);
    }
  }
  // A run longer than a second prints a progress line each second.
  {
    auto p = Process::Start({BinDir() + "/granary_bench", "get",
                             "--master=" + (*c)->master_address(), "--block_size=4KB", "--batch=4",
                             "--duration=2.2", "--working_set=4MB", "--progress=always"},
                            {}, (*c)->dir() + "/bench_progress.log");
    ASSERT_TRUE(p.ok());
    ASSERT_EQ((*p)->Wait(), 0) << (*p)->Log();
    std::string log = (*p)->Log();
    EXPECT_NE(log.find("get 4096 B: 1 s, "), std::string::npos) << log;
    EXPECT_NE(log.find("get 4096 B: 2 s, "), std::string::npos) << log;
    EXPECT_NE(log.find(" keys/s, "), std::string::npos) << log;
  }
  // Lanes are for meta only; a bad value is named.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"get", "--lanes=2"}, std::vector<std::string>{"meta", "--lanes=0"},
        std::vector<std::string>{"get", "--progress=sometimes"}}) {
    std::vector<std::string> argv = {BinDir() + "/granary_bench", args[0], args[1],
                                     "--master=" + (*c)->master_address()};
    auto p = Process::Start(argv, {}, (*c)->dir() + "/bench_bad.log");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ((*p)->Wait(), 2) << args[0] << " " << args[1];
    const std::string named = args[1] == "--lanes=2"   ? "--lanes 2"
                              : args[1] == "--lanes=0" ? "--lanes 0"
                                                       : "--progress 'sometimes'";
    EXPECT_NE((*p)->Log().find(named), std::string::npos) << (*p)->Log();
  }
}

}  // namespace
}  // namespace granary::testing
