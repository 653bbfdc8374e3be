// MasterService as a whole, driven in-process with a FakeClock (master_fixture.h): generations
// by election term, many sessions at once leaking nothing, and /metrics at a million objects.
// Each part behind the facade has its own test: session_table_test, segment_registry_test,
// object_store_test, copy_coordinator_test, eviction_test, pool_placement_test.

#include "master/master_service.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/metrics.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/unit/master/master_fixture.h"
#include "tests/unit/master/single_key_calls.h"

namespace granary::master {
namespace {

using proto::WireStatus;
using test_calls::Code;

using MasterServiceTest = MasterFixture;

// HA: generations are term << 44 | counter once elected, so a later leader's grants always
// outrank an earlier one's (docs/architecture.md, "Election and fencing as built").
TEST_F(MasterServiceTest, HaGenerationsComeFromTheTermAndRiseAcrossTerms) {
  opts_.enable_ha = true;
  opts_.etcd_endpoints = "127.0.0.1:2379";
  svc().BecomeActive(3);
  NodeWith("n1", 64 * kMiB);
  SessionId c = Client();
  const uint64_t g1 = Put(c, "a", 1000);
  const uint64_t g2 = Put(c, "b", 1000);
  EXPECT_EQ(g1 >> 44, 3u);
  EXPECT_EQ(g2, g1 + 1);
  svc().BecomeActive(4);
  const uint64_t g3 = Put(c, "c", 1000);
  EXPECT_EQ(g3 >> 44, 4u);
  EXPECT_GT(g3, g2);
}

// ---------------------------------------------------------------------------------------------
// Concurrency

TEST_F(MasterServiceTest, ConcurrentRandomOperationsLeakNothing) {
  opts_.put_start_timeout_ms = 2'000;  // some deadlines fire during the run
  opts_.client_ttl_ms = 3'600'000;
  opts_.kv_lease_ttl_ms = 1'000;
  // Revoked and expired puts free their space at once: with a hold, how much is held depends on
  // how many operations the threads get through between two ticks, which the machine decides.
  opts_.aborted_put_hold_ms = 0;
  // Two nodes, small enough that eviction runs too.
  NodeWith("n1", 1 * kMiB);
  NodeWith("n2", 1 * kMiB);
  constexpr int kThreads = 8;
  constexpr int kOps = 2000;
  constexpr int kKeys = 64;
  std::vector<SessionId> sessions;
  for (int t = 0; t < kThreads; ++t) sessions.push_back(Client("acme"));
  MasterService& s = svc();

  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread ticker([&] {
    while (!done.load()) {
      clock_.AdvanceMs(40);  // deadlines (2 s) and leases (1 s) run out mid-run
      s.Heartbeat(1);        // the two nodes
      s.Heartbeat(2);
      if (!s.Tick().empty()) ++failures;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(1234 + t);
      SessionId sid = sessions[t];
      std::vector<std::pair<std::string, uint64_t>> puts;
      std::vector<proto::KeyGen> reads;  // the leases taken, as GetEnd echoes them
      auto key = [&] { return absl::StrCat("key", rng() % kKeys); };
      for (int i = 0; i < kOps; ++i) {
        switch (rng() % 8) {
          case 0:
          case 1: {
            proto::PutStartRequest r;
            r.entries.push_back({key(), 1 + rng() % (128 * kKiB)});
            r.replica_num = static_cast<uint8_t>(1 + rng() % 2);
            auto rep = s.PutStart(sid, r);
            if (Code(rep.status) != absl::StatusCode::kOk || rep.results.size() != 1) {
              ++failures;
              break;
            }
            auto& res = rep.results[0];
            if (Code(res.status) == absl::StatusCode::kOk) {
              if (res.replicas.size() != r.replica_num) ++failures;
              puts.emplace_back(r.entries[0].key, res.generation);
            }
            break;
          }
          case 2:
          case 3:
            if (!puts.empty()) {
              size_t j = rng() % puts.size();
              proto::KeyGenRequest r;
              r.entries.push_back({puts[j].first, puts[j].second});
              puts.erase(puts.begin() + j);
              s.PutEnd(sid, r);
            }
            break;
          case 4: {
            proto::GetRequest r;
            r.keys.push_back(key());
            auto rep = s.Get(sid, r);
            if (rep.results.size() != 1) {
              ++failures;
              break;
            }
            if (Code(rep.results[0].status) == absl::StatusCode::kOk) {
              reads.push_back({r.keys[0], rep.results[0].generation, rep.results[0].lease_token});
            }
            break;
          }
          case 5:
            if (!reads.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back(reads.back());
              reads.pop_back();
              s.GetEnd(sid, r);
            }
            break;
          case 6: {
            proto::RemoveRequest r;
            r.keys.push_back(key());
            r.force = rng() % 8 == 0;
            s.Remove(sid, r);
            if (rng() % 4 == 0) s.Exist(sid, proto::KeysRequest{r.keys});
            break;
          }
          case 7:
            if (!puts.empty()) {
              proto::KeyGenRequest r;
              r.entries.push_back({puts.back().first, puts.back().second});
              puts.pop_back();
              s.PutRevoke(sid, r);
            } else if (rng() % 8 == 0) {
              proto::ListRequest lr;
              lr.limit = 10;
              s.List(sid, lr);
            }
            break;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  ticker.join();
  EXPECT_EQ(failures.load(), 0);
  // The run exercised what it is meant to: space pressure and eviction, and expiry.
  auto counter = [&](const char* name, common::MetricLabels labels = {}) {
    return metrics_.Counter(name, "", labels)->value();
  };
  EXPECT_GT(counter("granary_master_evicted_objects_total"), 0u);
  EXPECT_GT(counter("granary_master_ops_total", {{"op", "put_end"}}), 1000u);
  EXPECT_GT(counter("granary_master_ops_total", {{"op", "get"}}), 1000u);
  EXPECT_LT(counter("granary_master_get_misses_total"),
            counter("granary_master_ops_total", {{"op", "get"}}));

  // Let every lease run out, then take everything down.
  clock_.AdvanceMs(opts_.kv_lease_ttl_ms + 1);
  SessionId admin = Client("acme");
  proto::ListRequest lr;
  lr.limit = proto::kMaxListLimit;
  auto all = s.List(admin, lr);
  ASSERT_EQ(Code(all.status), absl::StatusCode::kOk);
  EXPECT_FALSE(all.more);
  // The counts /metrics reports, kept as objects change, agree with the table itself.
  uint64_t processing = 0;
  for (const auto& o : all.objects) processing += o.state == proto::ObjectState::kProcessing;
  EXPECT_EQ(s.GetStats().objects, all.objects.size());
  EXPECT_EQ(s.GetStats().processing, processing);
  for (const auto& o : all.objects) {
    if (o.state == proto::ObjectState::kProcessing) {
      EXPECT_EQ(Code(PutRevoke(admin, o.key, o.generation)), absl::StatusCode::kOk) << o.key;
    } else {
      EXPECT_EQ(Code(Remove(admin, o.key)), absl::StatusCode::kOk) << o.key;
    }
  }
  auto st = s.GetStats();
  EXPECT_EQ(st.objects, 0u);
  EXPECT_EQ(st.processing, 0u);
  EXPECT_EQ(st.used, 0u);
  for (const auto& seg : s.ListSegments()) EXPECT_EQ(seg.used, 0u) << seg.name;
  // And the full capacity is usable again.
  EXPECT_EQ(Code(PutStart(admin, "after", ValueFor(kMiB), 2).status), absl::StatusCode::kOk);
}

// ---------------------------------------------------------------------------------------------
// /metrics in constant time: a scrape reads counts kept as objects change, never the table.

// The fastest of `n` renders of the registry, in microseconds.
double FastestScrapeUs(const common::MetricsRegistry& metrics, int n) {
  double best = 1e18;
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::string text = metrics.Render();
    auto t1 = std::chrono::steady_clock::now();
    EXPECT_TRUE(Has(text, "granary_master_objects "));
    best = std::min(best, std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  return best;
}

TEST_F(MasterServiceTest, AScrapeAtAMillionObjectsCostsWhatAnEmptyOneDoes) {
  constexpr uint64_t kObjects = 1'000'000;
  NodeWith("n1", 1ull << 30);
  SessionId c = Client();
  const double empty_us = FastestScrapeUs(metrics_, 20);
  uint64_t stored = 0;
  while (stored < kObjects) {
    proto::PutStartRequest ps;
    ps.replica_num = 1;
    const uint64_t n = std::min<uint64_t>(proto::kMaxBatch, kObjects - stored);
    for (uint64_t i = 0; i < n; ++i) ps.entries.push_back({absl::StrCat("m/", stored + i), 64});
    auto started = svc().PutStart(c, ps);
    ASSERT_EQ(Code(started.status), absl::StatusCode::kOk) << started.status.message;
    proto::KeyGenRequest end;
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(Code(started.results[i].status), absl::StatusCode::kOk);
      end.entries.push_back({ps.entries[i].key, started.results[i].generation});
    }
    // The last batch stays in progress, so the scrape has processing objects to report.
    if (stored + n < kObjects) svc().PutEnd(c, end);
    stored += n;
  }
  const uint64_t last_batch =
      kObjects % proto::kMaxBatch == 0 ? proto::kMaxBatch : kObjects % proto::kMaxBatch;
  const double full_us = FastestScrapeUs(metrics_, 20);
  std::string text = metrics_.Render();
  EXPECT_TRUE(Has(text, absl::StrCat("granary_master_objects ", kObjects, "\n"))) << text;
  EXPECT_TRUE(Has(text, absl::StrCat("granary_master_objects_processing ", last_batch, "\n")))
      << text;
  // Walking a million objects under the shard locks took tens of milliseconds against a
  // fraction of one for an empty master.
  EXPECT_LT(full_us, 2 * empty_us + 50) << "empty " << empty_us << " us, full " << full_us << " us";
  printf("scrape: empty %.0f us, at %llu objects %.0f us\n", empty_us,
         static_cast<unsigned long long>(kObjects), full_us);
}

}  // namespace
}  // namespace granary::master
