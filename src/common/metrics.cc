#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace granary {

std::string EscapeLabelValue(absl::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
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
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    snprintf(buf, sizeof(buf), "%.0f", v);
    return buf;
  }
  char buf[32];
  snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}
}  // namespace

void MetricsWriter::Write(absl::string_view type, absl::string_view name, absl::string_view help,
                          const MetricLabels& labels, double value) {
  if (std::find(seen_.begin(), seen_.end(), name) == seen_.end()) {
    seen_.emplace_back(name);
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  absl::StrAppend(&out_, name, LabelText(labels), " ", FormatValue(value), "\n");
}
void MetricsWriter::Counter(absl::string_view name, absl::string_view help,
                            const MetricLabels& labels, double value) {
  Write("counter", name, help, labels, value);
}
void MetricsWriter::Gauge(absl::string_view name, absl::string_view help,
                          const MetricLabels& labels, double value) {
  Write("gauge", name, help, labels, value);
}

MetricCounter* MetricsRegistry::Counter(absl::string_view name, absl::string_view help,
                                        const MetricLabels& labels) {
  granary::MutexLock lock(&mu_);
  std::string id = absl::StrCat(name, LabelText(labels));
  Entry& e = entries_[id];
  if (!e.counter) {
    e.name = std::string(name);
    e.help = std::string(help);
    e.labels = labels;
    e.counter = std::make_unique<MetricCounter>();
  }
  return e.counter.get();
}

MetricGauge* MetricsRegistry::Gauge(absl::string_view name, absl::string_view help,
                                    const MetricLabels& labels) {
  granary::MutexLock lock(&mu_);
  std::string id = absl::StrCat(name, LabelText(labels));
  Entry& e = entries_[id];
  if (!e.gauge) {
    e.name = std::string(name);
    e.help = std::string(help);
    e.labels = labels;
    e.gauge = std::make_unique<MetricGauge>();
  }
  return e.gauge.get();
}

void MetricsRegistry::AddCollector(std::function<void(MetricsWriter&)> collector) {
  granary::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  MetricsWriter w;
  std::vector<std::function<void(MetricsWriter&)>> collectors;
  {
    granary::MutexLock lock(&mu_);
    for (const auto& [id, e] : entries_) {
      if (e.counter) w.Counter(e.name, e.help, e.labels, static_cast<double>(e.counter->value()));
      if (e.gauge) w.Gauge(e.name, e.help, e.labels, e.gauge->value());
    }
    collectors = collectors_;
  }
  for (auto& c : collectors) c(w);
  return w.Take();
}

}  // namespace granary
