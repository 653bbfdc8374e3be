// The master's rebuild rate: how fast a restarted master restores the objects its nodes report
// (MasterService::InventoryReport), in-process with a FakeClock and no transport, on one thread
// as the master's progress thread runs the reports. Target: at least 1,000,000 objects/s.
//
//   granary_restore_bench [--objects 1000000] [--nodes 2] [--value_bytes 1000] [--rounds 3]
//   prints, per round: <objects> objects restored in <s> s: <rate> objects/s
//   and then the best round. Exits 1 when a round restores fewer objects than were reported.
//
// Each round is a fresh master: every node mounts one segment as a node resuming after a master
// restart, and its records (tenants a and b, one replica each) are built before the clock runs,
// in batches of proto::kMaxInventoryBatch, as a node sends them.

#include <gflags/gflags.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "master/master_options.h"
#include "master/master_service.h"
#include "proto/messages.h"

DEFINE_uint64(objects, 1'000'000, "objects reported, over all nodes");
DEFINE_uint32(nodes, 2, "nodes, each reporting its share of the objects");
DEFINE_uint64(value_bytes, 1000, "value size of every object");
DEFINE_uint32(rounds, 3, "rounds, each on a fresh master");

namespace granary::master {
namespace {

// One node's session, its segment, and its report's batches.
struct ReportingNode {
  SessionId session = 0;
  uint64_t segment_id = 0;
  std::vector<proto::InventoryReportRequest> batches;
};

// Hello and MountSegment for node `n` (1-based) resuming after a restart, with a segment large
// enough for `objects` values of `value_bytes`. Returns false (printed) when the master refuses.
bool MountNode(MasterService& svc, int n, uint64_t objects, uint64_t value_bytes,
               ReportingNode* node) {
  node->session = static_cast<SessionId>(n);
  proto::HelloRequest hello;
  hello.role = proto::Role::kNode;
  hello.client_id = absl::StrCat("node-", n);
  const proto::HelloReply h = svc.Hello(node->session, hello);
  if (!h.status.ToStatus().ok()) {
    fprintf(stderr, "Hello of node %d: %s\n", n, h.status.ToStatus().ToString().c_str());
    return false;
  }
  proto::MountSegmentRequest seg;
  seg.name = "seg0";
  seg.node_id = absl::StrCat("node-", n);
  seg.node_address = absl::StrCat("10.0.0.", n, ":7000");
  seg.base = static_cast<uint64_t>(n) * (uint64_t{1} << 40);
  seg.size = std::max<uint64_t>(objects, 1) * MasterService::AllocBytes(value_bytes);
  seg.rkey = "rkey";
  seg.worker_address = "worker";
  seg.resumed = true;
  const proto::MountSegmentReply m = svc.MountSegment(node->session, seg);
  if (!m.status.ToStatus().ok()) {
    fprintf(stderr, "MountSegment of node %d: %s\n", n, m.status.ToStatus().ToString().c_str());
    return false;
  }
  node->segment_id = m.segment_id;
  return true;
}

// Object j's record, on node j % nodes at its next free offset.
proto::InventoryRecord RecordOf(uint64_t j, size_t nodes, uint64_t value_bytes,
                                uint64_t segment_id) {
  proto::InventoryRecord r;
  r.tenant = j % 3 ? "tenant-a" : "tenant-b";
  r.key = absl::StrCat("key/", j);
  r.offset = (j / nodes) * MasterService::AllocBytes(value_bytes);
  r.alloc_size = MasterService::AllocBytes(value_bytes);
  r.value_length = value_bytes;
  r.generation = 1000 + j;
  r.commit_ms = 1000 + j;
  r.segment_id = segment_id;
  return r;
}

// Splits the objects over the nodes into report batches; each batch carries the node's total.
void BuildReports(uint64_t objects, uint64_t value_bytes, std::vector<ReportingNode>* nodes) {
  const size_t n = nodes->size();
  for (uint64_t j = 0; j < objects; ++j) {
    ReportingNode& node = (*nodes)[j % n];
    if (node.batches.empty() || node.batches.back().records.size() >= proto::kMaxInventoryBatch) {
      node.batches.emplace_back();
    }
    node.batches.back().records.push_back(RecordOf(j, n, value_bytes, node.segment_id));
  }
  for (ReportingNode& node : *nodes) {
    uint64_t total = 0;
    for (const auto& b : node.batches) total += b.records.size();
    if (node.batches.empty()) node.batches.emplace_back();
    node.batches.back().last = true;
    for (auto& b : node.batches) b.total = total;
  }
}

// One round on a fresh master: the objects restored and the seconds the reports took, or
// {0, -1} when the master refused a node.
std::pair<uint64_t, double> RunRound() {
  MasterOptions options;
  common::FakeClock clock;
  common::MetricsRegistry metrics;
  MasterService svc(options, &clock, &metrics);
  std::vector<ReportingNode> nodes(FLAGS_nodes);
  const uint64_t per_node = (FLAGS_objects + FLAGS_nodes - 1) / FLAGS_nodes;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!MountNode(svc, static_cast<int>(i + 1), per_node, FLAGS_value_bytes, &nodes[i])) {
      return {0, -1};
    }
  }
  BuildReports(FLAGS_objects, FLAGS_value_bytes, &nodes);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t restored = 0;
  for (const ReportingNode& node : nodes) {
    for (const auto& b : node.batches) restored += svc.InventoryReport(node.session, b).restored;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {restored, s};
}

int Main() {
  if (FLAGS_nodes == 0 || FLAGS_nodes > 250) {
    fprintf(stderr, "--nodes=%u: must be 1..250\n", FLAGS_nodes);
    return 2;
  }
  if (FLAGS_rounds == 0) {
    fprintf(stderr, "--rounds=0: must be at least 1\n");
    return 2;
  }
  double best = 0;
  for (uint32_t round = 0; round < FLAGS_rounds; ++round) {
    const auto [restored, s] = RunRound();
    if (s < 0) return 1;
    printf("%llu objects restored in %.3f s: %.0f objects/s\n",
           static_cast<unsigned long long>(restored), s, restored / s);
    if (restored != FLAGS_objects) {
      fprintf(stderr, "restored %llu of %llu objects\n", static_cast<unsigned long long>(restored),
              static_cast<unsigned long long>(FLAGS_objects));
      return 1;
    }
    best = std::max(best, restored / s);
  }
  printf("best: %.0f objects/s (one thread, as the master's progress thread runs the reports)\n",
         best);
  return 0;
}

}  // namespace
}  // namespace granary::master

int main(int argc, char** argv) {
  gflags::SetUsageMessage("the master's rebuild rate from node inventories, in-process");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return granary::master::Main();
}
