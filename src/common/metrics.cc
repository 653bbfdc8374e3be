#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/utf8.h"

namespace granary::common {

std::string EscapeLabelValue(absl::string_view v) {
  // The exposition format takes UTF-8 label values with three escapes (\\, \", \n); a byte
  // outside UTF-8 becomes the text \xNN first (EscapeInvalidUtf8), whose backslash is then
  // escaped like any other, so a scrape stays parseable whatever a tenant or key holds.
  const std::string text = EscapeInvalidUtf8(v);
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

namespace {
std::string LabelText(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string s = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) s += ',';
    absl::StrAppend(&s, labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
  }
  s += '}';
  return s;
}
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  // Whole numbers print as integers up to 2^64 (counters of bytes pass 1e15), not as 1.8e+19.
  if (v == std::floor(v) && std::fabs(v) <= 18446744073709551616.0) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}
}  // namespace

MetricHistogram::MetricHistogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void MetricHistogram::Observe(double v) {
  // The first bound >= v: Prometheus buckets are "less than or equal to le".
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  double cur = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

std::vector<uint64_t> MetricHistogram::bucket_counts() const {
  std::vector<uint64_t> out(bounds_.size() + 1);
  for (size_t i = 0; i < out.size(); ++i) out[i] = buckets_[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t MetricHistogram::count() const {
  uint64_t n = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) n += buckets_[i].load(std::memory_order_relaxed);
  return n;
}

std::vector<double> LatencyBucketsSeconds() {
  std::vector<double> b;
  double decade = 1e-5;
  for (int i = 0; i < 6; ++i, decade *= 10) {  // 10 us ... 5 s
    for (double step : {1.0, 2.5, 5.0}) b.push_back(decade * step);
  }
  return b;
}

void MetricsWriter::Family(absl::string_view type, absl::string_view name, absl::string_view help) {
  if (std::find(seen_.begin(), seen_.end(), name) == seen_.end()) {
    seen_.emplace_back(name);
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
}

void MetricsWriter::Write(absl::string_view type, absl::string_view name, absl::string_view help,
                          const MetricLabels& labels, double value) {
  Family(type, name, help);
  absl::StrAppend(&out_, name, LabelText(labels), " ", FormatValue(value), "\n");
}

void MetricsWriter::Histogram(absl::string_view name, absl::string_view help,
                              const MetricLabels& labels, const MetricHistogram& h) {
  Family("histogram", name, help);
  const std::vector<uint64_t> counts = h.bucket_counts();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    MetricLabels with_le = labels;
    with_le.emplace_back("le", i < h.bounds().size() ? FormatValue(h.bounds()[i]) : "+Inf");
    absl::StrAppend(&out_, name, "_bucket", LabelText(with_le), " ",
                    FormatValue(static_cast<double>(cumulative)), "\n");
  }
  absl::StrAppend(&out_, name, "_sum", LabelText(labels), " ", FormatValue(h.sum()), "\n");
  absl::StrAppend(&out_, name, "_count", LabelText(labels), " ",
                  FormatValue(static_cast<double>(cumulative)), "\n");
}
void MetricsWriter::Counter(absl::string_view name, absl::string_view help,
                            const MetricLabels& labels, double value) {
  Write("counter", name, help, labels, value);
}
void MetricsWriter::Gauge(absl::string_view name, absl::string_view help,
                          const MetricLabels& labels, double value) {
  Write("gauge", name, help, labels, value);
}

MetricsRegistry::Entry& MetricsRegistry::EntryFor(absl::string_view name, absl::string_view help,
                                                  const MetricLabels& labels) {
  Entry& e = entries_[absl::StrCat(name, LabelText(labels))];
  if (e.name.empty()) {
    e.name = std::string(name);
    e.help = std::string(help);
    e.labels = labels;
  }
  return e;
}

MetricCounter* MetricsRegistry::Counter(absl::string_view name, absl::string_view help,
                                        const MetricLabels& labels) {
  granary::common::MutexLock lock(&mu_);
  Entry& e = EntryFor(name, help, labels);
  if (!e.counter) e.counter = std::make_unique<MetricCounter>();
  return e.counter.get();
}

MetricGauge* MetricsRegistry::Gauge(absl::string_view name, absl::string_view help,
                                    const MetricLabels& labels) {
  granary::common::MutexLock lock(&mu_);
  Entry& e = EntryFor(name, help, labels);
  if (!e.gauge) e.gauge = std::make_unique<MetricGauge>();
  return e.gauge.get();
}

MetricHistogram* MetricsRegistry::Histogram(absl::string_view name, absl::string_view help,
                                            const MetricLabels& labels,
                                            std::vector<double> bounds) {
  granary::common::MutexLock lock(&mu_);
  Entry& e = EntryFor(name, help, labels);
  if (!e.histogram) e.histogram = std::make_unique<MetricHistogram>(std::move(bounds));
  return e.histogram.get();
}

void MetricsRegistry::AddCollector(std::function<void(MetricsWriter&)> collector) {
  granary::common::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  MetricsWriter w;
  std::vector<std::function<void(MetricsWriter&)>> collectors;
  {
    granary::common::MutexLock lock(&mu_);
    for (const auto& [id, e] : entries_) {
      if (e.counter) w.Counter(e.name, e.help, e.labels, static_cast<double>(e.counter->value()));
      if (e.gauge) w.Gauge(e.name, e.help, e.labels, e.gauge->value());
      if (e.histogram) w.Histogram(e.name, e.help, e.labels, *e.histogram);
    }
    collectors = collectors_;
  }
  for (auto& c : collectors) c(w);
  return w.Take();
}

}  // namespace granary::common
