// The Prometheus exposition of counters, gauges and histograms: families written once, the
// histogram's cumulative buckets, _sum and _count, and concurrent observations all counted.
#include "common/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace granary {
namespace {

TEST(MetricHistogramTest, BucketsAreLessOrEqualToTheirBound) {
  common::MetricHistogram h({1, 2, 5});
  for (double v : {0.5, 1.0, 1.5, 2.0, 4.0, 5.0, 6.0, 100.0}) h.Observe(v);
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{2, 2, 2, 2}));
  EXPECT_EQ(h.count(), 8u);
  EXPECT_DOUBLE_EQ(h.sum(), 120.0);
}

TEST(MetricHistogramTest, ExpositionIsCumulativeWithSumAndCount) {
  common::MetricsRegistry r;
  common::MetricHistogram* a =
      r.Histogram("req_seconds", "help text", {{"op", "Get"}}, {0.001, 0.01});
  common::MetricHistogram* b =
      r.Histogram("req_seconds", "help text", {{"op", "Put"}}, {0.001, 0.01});
  EXPECT_EQ(r.Histogram("req_seconds", "ignored", {{"op", "Get"}}, {5}), a);  // same series
  a->Observe(0.0005);
  a->Observe(0.005);
  a->Observe(0.5);
  b->Observe(0.002);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE req_seconds histogram\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("# TYPE req_seconds"), text.rfind("# TYPE req_seconds")) << text;
  EXPECT_NE(text.find("req_seconds_bucket{op=\"Get\",le=\"0.001\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("req_seconds_bucket{op=\"Get\",le=\"0.01\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("req_seconds_bucket{op=\"Get\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("req_seconds_count{op=\"Get\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("req_seconds_sum{op=\"Get\"} 0.5055\n"), std::string::npos) << text;
  EXPECT_NE(text.find("req_seconds_bucket{op=\"Put\",le=\"0.001\"} 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("req_seconds_count{op=\"Put\"} 1\n"), std::string::npos) << text;
}

TEST(MetricHistogramTest, ConcurrentObservationsAreAllCounted) {
  common::MetricHistogram h(common::LatencyBucketsSeconds());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&h, t] {
      for (int i = 0; i < 100000; ++i) h.Observe(1e-6 * (i % 1000) * (t + 1));
    });
  }
  for (auto& t : threads) t.join();
  uint64_t total = 0;
  for (uint64_t c : h.bucket_counts()) total += c;
  EXPECT_EQ(total, 400000u);
  EXPECT_EQ(h.count(), 400000u);
}

TEST(LatencyBucketsTest, RiseFrom10UsTo5S) {
  std::vector<double> b = common::LatencyBucketsSeconds();
  ASSERT_EQ(b.size(), 18u);
  EXPECT_DOUBLE_EQ(b.front(), 1e-5);
  EXPECT_NEAR(b.back(), 5.0, 1e-9);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);
}

TEST(MetricsWriterTest, CountersAndGaugesWriteTheirFamilyOnce) {
  common::MetricsRegistry r;
  r.Counter("ops_total", "ops", {{"op", "a"}})->Inc(3);
  r.Counter("ops_total", "ops", {{"op", "b"}})->Inc();
  r.Gauge("depth", "queue depth")->Set(2.5);
  const std::string text = r.Render();
  EXPECT_EQ(text.find("# TYPE ops_total counter"), text.rfind("# TYPE ops_total counter"));
  EXPECT_NE(text.find("ops_total{op=\"a\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ops_total{op=\"b\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE depth gauge\ndepth 2.5\n"), std::string::npos) << text;
}

// Label values are escaped per the exposition format, and bytes outside UTF-8 (a tenant id an
// older master saved, a node's name) become the text \xNN so the scrape stays valid.
TEST(MetricsWriterTest, LabelValuesAreEscapedAndStayUtf8) {
  EXPECT_EQ(common::EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(common::EscapeLabelValue("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(common::EscapeLabelValue("t\xff"), "t\\\\xff");  // the text \xff, its backslash escaped
  common::MetricsRegistry r;
  r.Gauge("g", "gauge", {{"tenant_id", "x\xfe\"y"}})->Set(1);
  EXPECT_NE(r.Render().find("g{tenant_id=\"x\\\\xfe\\\"y\"} 1\n"), std::string::npos) << r.Render();
}

// Whole numbers print as integers up to 2^64, not in exponent form.
TEST(MetricsWriterTest, LargeWholeNumbersPrintAsIntegers) {
  common::MetricsRegistry r;
  r.Counter("big_total", "big")->Inc(uint64_t{1} << 62);
  r.Gauge("huge", "huge")->Set(18446744073709551615.0);  // 2^64 - 1, which a double rounds up
  const std::string text = r.Render();
  EXPECT_NE(text.find("big_total 4611686018427387904\n"), std::string::npos) << text;
  EXPECT_NE(text.find("huge 18446744073709551616\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("e+"), std::string::npos) << text;
}

}  // namespace
}  // namespace granary
