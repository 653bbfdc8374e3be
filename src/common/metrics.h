#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace granary::common {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing counter. Lock-free; owned by its registry.
class MetricCounter {
 public:
  void Inc(uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> value_{0};
};

// A value that goes up and down. Lock-free; owned by its registry.
class MetricGauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) {
    double cur = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(cur, cur + d, std::memory_order_relaxed)) {
    }
  }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A distribution of observations over fixed bucket bounds, exported as a Prometheus histogram
// (cumulative _bucket{le=...} series, _sum and _count). Observe is lock-free: one relaxed
// atomic add on the bucket and one on the sum (a CAS loop), so a hot path can afford it
// (about 20 ns uncontended). _count is the sum of the buckets as a scrape reads them, one by one;
// _sum may include an observation whose bucket that scrape missed (Prometheus tolerates it).
class MetricHistogram {
 public:
  // `bounds`: the buckets' upper bounds, strictly increasing; +Inf is implied.
  explicit MetricHistogram(std::vector<double> bounds);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket, not cumulative: bounds().size() + 1 counts, the last one above every bound.
  std::vector<uint64_t> bucket_counts() const;
  // The sum of the buckets (no counter of its own: one atomic fewer per observation).
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

// Bounds in seconds from 10 us to 5 s in 1-2.5-5 steps (18): the master's request times.
std::vector<double> LatencyBucketsSeconds();

// Accumulates Prometheus text exposition; writes # HELP / # TYPE once per family.
class MetricsWriter {
 public:
  void Counter(absl::string_view name, absl::string_view help, const MetricLabels& labels,
               double value);
  void Gauge(absl::string_view name, absl::string_view help, const MetricLabels& labels,
             double value);
  void Histogram(absl::string_view name, absl::string_view help, const MetricLabels& labels,
                 const MetricHistogram& h);
  std::string Take() { return std::move(out_); }

 private:
  void Write(absl::string_view type, absl::string_view name, absl::string_view help,
             const MetricLabels& labels, double value);
  void Family(absl::string_view type, absl::string_view name, absl::string_view help);
  std::string out_;
  std::vector<std::string> seen_;
};

// Process metrics for /metrics. Registration takes a lock; updating a counter or gauge does
// not. Returned pointers live as long as the registry. Collectors run at scrape time (on the
// HTTP thread) to emit figures that are cheaper to compute on demand; they must not call back
// into the registry.
class MetricsRegistry {
 public:
  MetricCounter* Counter(absl::string_view name, absl::string_view help,
                         const MetricLabels& labels = {});
  MetricGauge* Gauge(absl::string_view name, absl::string_view help,
                     const MetricLabels& labels = {});
  // The same name and labels give the same histogram (the first call's bounds stay).
  MetricHistogram* Histogram(absl::string_view name, absl::string_view help,
                             const MetricLabels& labels, std::vector<double> bounds);
  void AddCollector(std::function<void(MetricsWriter&)> collector);
  std::string Render() const;

 private:
  struct Entry {
    std::string name, help;
    MetricLabels labels;
    std::unique_ptr<MetricCounter> counter;
    std::unique_ptr<MetricGauge> gauge;
    std::unique_ptr<MetricHistogram> histogram;
  };
  // The entry of one series (name and labels), created empty on first use.
  Entry& EntryFor(absl::string_view name, absl::string_view help, const MetricLabels& labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  mutable granary::common::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(MetricsWriter&)>> collectors_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the text format: \\, \" and \n, and any byte outside UTF-8 as the
// text \xNN (written \\xNN), so the line stays valid exposition text.
std::string EscapeLabelValue(absl::string_view v);

}  // namespace granary::common
