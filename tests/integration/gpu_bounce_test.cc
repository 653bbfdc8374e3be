// The GPU tier from other hosts between real processes, on the fake device backend
// (gpu_tier_fixture.h): a client with none of the segment's devices reaches it through the node
// bounce (default transports and tcp, a stalled node), and Copy and Move push GPU-tier objects
// from one node's GPU segment into another's host segment.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/client_impl.h"
#include "client/paged_kv_trailer.h"
#include "device/checksum.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "granary/device_pointer.h"
#include "granary/error_reason.h"
#include "node/node_server.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"
#include "tests/integration/gpu_tier_fixture.h"

namespace granary::testing {
namespace {

using GpuTierTest = GpuTierFixture;

// Point 3, other hosts: a client whose devices do not include the segment's (another fake UUID
// seed: as on another host) reaches the GPU segment through the node bounce, over UCX_TLS=tcp
// as well: GPU-tier puts from host and device buffers, gets into host and device buffers, values
// from 1 byte to past two node slots (split) and small ones packed, all byte-exact; the headers
// the node wrote last check out on every read, and a read of a replaced key gets the new value.
class GpuBounceTest : public GpuTierTest {
 protected:
  void SetUp() override {
    if (OnCuda()) GTEST_SKIP() << "another host needs a second fake UUID seed";
    device::FakeOptions o;
    o.uuid_seed = 0x11;  // the node's fake devices are 0xfa...: none is local here
    auto fake = device::FakeBackend::Create(o);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    backend_ = fake_.get();
    device::SetBackendForTesting(fake_.get());
  }
  void RoundTrips() {
    ASSERT_NO_FATAL_FAILURE(Start({"--gpu_segment_size=64MB"}, /*segments_per_node=*/2));
    const uint64_t gpu_id = SegmentsOf(proto::Tier::kGpu).at(0).segment_id;
    PutOptions on_gpu;
    on_gpu.tier = StorageTier::kGpu;
    const std::vector<size_t> sizes = {
        1, 63, 64, 65, 4096, (4u << 20) - 64, (4u << 20) + 1, (9u << 20) + 7};
    std::vector<std::string> keys, values;
    for (size_t i = 0; i < sizes.size(); ++i) {
      keys.push_back(absl::StrCat("b", i));
      values.push_back(MakeValue(keys.back(), 1, sizes[i]));
    }
    // Host sources, one batch (small ones packed into one node slot).
    std::vector<absl::string_view> views(values.begin(), values.end());
    for (const absl::Status& st : client_->BatchPutWith(keys, views, on_gpu)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    for (const std::string& k : keys) {
      auto r = ReplicasOf(k);
      ASSERT_EQ(r.size(), 1u) << k;
      EXPECT_EQ(r[0].segment_id, gpu_id) << k;
    }
    auto batch = client_->BatchGet(keys);
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_TRUE(batch[i].ok()) << keys[i] << ": " << batch[i].status();
      EXPECT_TRUE(*batch[i] == values[i]) << keys[i] << " differs";
    }
    // Device destinations and device sources.
    for (size_t i = 0; i < keys.size(); ++i) {
      char* d = DeviceAlloc(sizes[i] + 8);
      ASSERT_NO_FATAL_FAILURE(ToDevice(d, std::string(sizes[i] + 8, '\x5a')));
      // The client's own copies run on streams of its own: no synchronous copy (on CUDA a
      // cudaMemcpy on the legacy default stream), and nothing on the default stream.
      const uint64_t sync_before = fake_->SynchronousCopies();
      const uint64_t default_before = fake_->DefaultStreamOps();
      auto n = client_->GetInto(keys[i], d, sizes[i] + 8);
      EXPECT_EQ(fake_->SynchronousCopies(), sync_before) << keys[i];
      EXPECT_EQ(fake_->DefaultStreamOps(), default_before) << keys[i];
      ASSERT_TRUE(n.ok()) << keys[i] << ": " << n.status();
      EXPECT_EQ(*n, sizes[i]);
      const std::string back = FromDevice(d, sizes[i] + 8);
      EXPECT_TRUE(back.substr(0, sizes[i]) == values[i]) << keys[i] << ": the device read differs";
      EXPECT_EQ(back.substr(sizes[i]), std::string(8, '\x5a')) << keys[i];
      const std::string key2 = keys[i] + "d";
      const std::string v2 = MakeValue(key2, 2, sizes[i]);
      ASSERT_NO_FATAL_FAILURE(ToDevice(d, v2));
      const uint64_t put_sync_before = fake_->SynchronousCopies();
      ASSERT_TRUE(client_->BatchPutWith({key2}, {absl::string_view(d, sizes[i])}, on_gpu)[0].ok());
      EXPECT_EQ(fake_->SynchronousCopies(), put_sync_before) << key2;
      auto h = client_->Get(key2);
      ASSERT_TRUE(h.ok()) << key2 << ": " << h.status();
      EXPECT_TRUE(*h == v2) << key2 << ": the device write reads back wrong";
      ASSERT_TRUE(client_->Remove(key2).ok());
    }
    // Many values in one batch: more than one slot's bytes and more Fetches than one slot
    // carries at a time (128), so both client slots take turns, byte-exact both ways.
    std::vector<std::string> many_keys, many_values;
    for (size_t i = 0; i < 300; ++i) {
      many_keys.push_back(absl::StrCat("many", i));
      many_values.push_back(MakeValue(many_keys.back(), 4, (i * 7919) % 30000 + 1));
    }
    std::vector<absl::string_view> many_views(many_values.begin(), many_values.end());
    for (const absl::Status& st : client_->BatchPutWith(many_keys, many_views, on_gpu)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    std::vector<absl::StatusOr<std::string>> many_got = client_->BatchGet(many_keys);
    for (size_t i = 0; i < many_keys.size(); ++i) {
      ASSERT_TRUE(many_got[i].ok()) << many_keys[i] << ": " << many_got[i].status();
      EXPECT_TRUE(*many_got[i] == many_values[i]) << many_keys[i] << " differs";
    }
    // A replaced key reads its new bytes.
    ASSERT_TRUE(client_->Remove(keys[4]).ok());
    const std::string fresh = MakeValue(keys[4], 9, sizes[4]);
    ASSERT_TRUE(client_->BatchPutWith({keys[4]}, {fresh}, on_gpu)[0].ok());
    EXPECT_TRUE(*client_->Get(keys[4]) == fresh);
    EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 0);
    EXPECT_EQ(ClientMetric("granary_client_gpu_segment_opens_total"), 0);
    EXPECT_GE(ClientMetric("granary_client_gpu_bounced_values_total"), 4.0 * keys.size());
    EXPECT_GE(ClientMetric("granary_client_gpu_transfers_total{path=\"bounce\"}"),
              2.0 * keys.size());
    EXPECT_EQ(ClientMetric("granary_client_gpu_fallback_total"), 0);
  }
};

TEST_F(GpuBounceTest, AnotherHostsClientReachesTheGpuSegmentThroughTheNodeBounce) {
  ASSERT_NO_FATAL_FAILURE(RoundTrips());
}

TEST_F(GpuBounceTest, AnotherHostsClientReachesTheGpuSegmentOverTcp) {
  setenv("UCX_TLS", "tcp", 1);
  extra_env_ = {"UCX_TLS=tcp"};
  ASSERT_NO_FATAL_FAILURE(RoundTrips());
}

// A node stalled (SIGSTOP) during a bounced read: the read fails within the transfer timeout
// and writes nothing; the slot it used is retired (the node, once resumed, still runs the queued
// Push into it), and after SIGCONT the next read, through a fresh slot, is byte-exact.
TEST_F(GpuBounceTest, AStalledNodeFailsTheBouncedReadInTimeAndItsSlotIsRetired) {
  client_ttl_sec_ = 20;  // the node stays mounted while stopped
  ASSERT_NO_FATAL_FAILURE(Start({"--gpu_segment_size=16MB"}, 2, /*get_retries=*/0));
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("stall", 1, 100000);
  ASSERT_TRUE(client_->BatchPutWith({"stall"}, {value}, on_gpu)[0].ok());
  ASSERT_NO_FATAL_FAILURE(ReconnectWithTransferTimeout(1000));
  EXPECT_TRUE(*client_->Get("stall") == value);
  cluster_->node(0)->Kill(SIGSTOP);
  ASSERT_TRUE(cluster_->node(0)->WaitStopped()) << "the node did not stop";
  std::vector<char> into(value.size(), '\x33');
  const auto t0 = std::chrono::steady_clock::now();
  auto got = client_->GetInto("stall", into.data(), into.size());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cluster_->node(0)->Kill(SIGCONT);
  ASSERT_FALSE(got.ok()) << "a read from a stopped node succeeded";
  EXPECT_LT(s, 5.0) << got.status();
  EXPECT_EQ(std::string(into.data(), into.size()), std::string(into.size(), '\x33'))
      << "a failed read wrote its destination";
  EXPECT_EQ(ClientMetric("granary_client_gpu_bounce_slots_retired_total"), 1);
  absl::StatusOr<std::string> again;
  for (int i = 0; i < 50; ++i) {  // the node catches up with its queued requests first
    again = client_->Get("stall");
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == value);
}

// Copy and Move of GPU-tier objects between two nodes, each with a host and a GPU segment: the
// source node pushes [header | value] out of its GPU segment through its bounce into the
// target's host segment; the copy reads back byte-exact (values across the 4 MiB slot too),
// alone once the source node is killed; a Move leaves only the host copy; the charge is one
// replica's per replica, with nothing in flight afterwards.
// (Each copied object then has a replica on each node, so killing either leaves one.)
class GpuCopyTest : public GpuTierTest {
 protected:
  void Run() {
    nodes_ = 2;
    ASSERT_NO_FATAL_FAILURE(StartWithGpu());
    PutOptions on_gpu;
    on_gpu.tier = StorageTier::kGpu;
    const std::vector<std::pair<std::string, size_t>> objects = {
        {"small", 3000}, {"large", (9u << 20) + 7}, {"moved", 70000}};
    std::vector<std::string> values;
    for (const auto& [key, size] : objects) {
      values.push_back(MakeValue(key, 1, size));
      absl::Status st = client_->BatchPutWith({key}, {values.back()}, on_gpu)[0];
      ASSERT_TRUE(st.ok()) << key << ": " << st;
    }
    const std::vector<proto::SegmentInfo> gpu = SegmentsOf(proto::Tier::kGpu);
    const std::vector<proto::SegmentInfo> host = SegmentsOf(proto::Tier::kHost);
    ASSERT_EQ(gpu.size(), 2u);
    ASSERT_EQ(host.size(), 2u);
    auto node_of = [&](uint64_t segment_id) {
      for (const auto& s : gpu) {
        if (s.segment_id == segment_id) return s.node_address;
      }
      for (const auto& s : host) {
        if (s.segment_id == segment_id) return s.node_address;
      }
      return std::string();
    };
    auto tier_of = [&](uint64_t segment_id) {
      for (const auto& s : gpu) {
        if (s.segment_id == segment_id) return proto::Tier::kGpu;
      }
      return proto::Tier::kHost;
    };
    const double charged_one = Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}");
    std::string source_node;
    for (size_t i = 0; i < objects.size(); ++i) {
      const std::string& key = objects[i].first;
      std::vector<proto::ReplicaDesc> before = ReplicasOf(key);
      ASSERT_EQ(before.size(), 1u) << key;
      ASSERT_EQ(tier_of(before[0].segment_id), proto::Tier::kGpu) << key;
      const std::string from = node_of(before[0].segment_id);
      const std::string to = node_of(gpu[0].segment_id) == from ? node_of(gpu[1].segment_id)
                                                                : node_of(gpu[0].segment_id);
      const bool move = key == "moved";
      absl::Status st = move ? client_->Move(key, to) : client_->Copy(key, to);
      ASSERT_TRUE(st.ok()) << key << ": " << st;
      std::vector<proto::ReplicaDesc> after = ReplicasOf(key);
      ASSERT_EQ(after.size(), move ? 1u : 2u) << key;
      const proto::ReplicaDesc& added = after.back();
      EXPECT_EQ(tier_of(added.segment_id), proto::Tier::kHost) << key;
      EXPECT_EQ(node_of(added.segment_id), to) << key;
      auto got = client_->Get(key);
      ASSERT_TRUE(got.ok()) << key << ": " << got.status();
      EXPECT_TRUE(*got == values[i]) << key << ": the copy reads back wrong";
      if (!move) source_node = from;
    }
    EXPECT_EQ(Metric("granary_tenant_quota_inflight_bytes{tenant_id=\"default\"}"), 0);
    EXPECT_GT(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}"), charged_one);
    // The copies alone serve the reads once the GPU replicas' node is gone.
    const int src_index = NodeIndexOf(source_node);
    ASSERT_GE(src_index, 0) << source_node;
    cluster_->node(src_index)->Kill(SIGKILL);
    cluster_->node(src_index)->Wait();
    ASSERT_TRUE(cluster_->WaitForSegments(2).ok());
    for (size_t i = 0; i < 2; ++i) {  // the copied ones: a replica on each node
      auto got = client_->Get(objects[i].first);
      ASSERT_TRUE(got.ok()) << objects[i].first << ": " << got.status();
      EXPECT_TRUE(*got == values[i]) << objects[i].first;
    }
  }
};

TEST_F(GpuCopyTest, CopyAndMoveOfGpuObjectsPushFromTheGpuSegment) { Run(); }

TEST_F(GpuCopyTest, CopyAndMoveOfGpuObjectsPushFromTheGpuSegmentOverTcp) {
  extra_env_ = {"UCX_TLS=tcp"};
  setenv("UCX_TLS", "tcp", 1);
  Run();
}
// A copy whose source node is stalled (SIGSTOP) mid-push fails within the transfer timeout,
// naming the nodes; the destination is revoked (nothing in flight, the charge as before, the
// object on its one GPU replica), and once the node resumes the copy succeeds byte-exact.
TEST_F(GpuCopyTest, ACopyFromAStalledNodeFailsInTimeAndRefunds) {
  if (fake_ == nullptr) GTEST_SKIP() << "the warm-up read needs the fake's injected IPC failure";
  nodes_ = 2;
  client_ttl_sec_ = 20;  // the node stays mounted while stopped
  ASSERT_NO_FATAL_FAILURE(StartWithGpu(/*get_retries=*/0));
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("stall", 1, 200000);
  ASSERT_TRUE(client_->BatchPutWith({"stall"}, {value}, on_gpu)[0].ok());
  ASSERT_NO_FATAL_FAILURE(ReconnectWithTransferTimeout(1000));
  const std::vector<proto::ReplicaDesc> replicas = ReplicasOf("stall");
  ASSERT_EQ(replicas.size(), 1u);
  std::string from, to;
  for (const auto& seg : SegmentsOf(proto::Tier::kGpu)) {
    (seg.segment_id == replicas[0].segment_id ? from : to) = seg.node_address;
  }
  ASSERT_FALSE(from.empty() || to.empty());
  const int index = NodeIndexOf(from);
  ASSERT_GE(index, 0) << from;
  // Connected to the node beforehand (a new connection's shared-memory offer has a 5 s
  // timeout of its own): a read through the bounce, after an IPC open made to fail.
  fake_->FailNextIpcOpen();
  auto warm = client_->Get("stall");
  ASSERT_TRUE(warm.ok()) << warm.status();
  ASSERT_EQ(ClientMetric("granary_client_gpu_fallback_total"), 1);
  const double charged = Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}");
  cluster_->node(index)->Kill(SIGSTOP);
  ASSERT_TRUE(cluster_->node(index)->WaitStopped()) << "the node did not stop";
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status st = client_->Copy("stall", to);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cluster_->node(index)->Kill(SIGCONT);
  ASSERT_FALSE(st.ok()) << "a copy from a stopped node succeeded";
  EXPECT_LT(s, 5.0) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "could not push the GPU-tier replica")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), from)) << st;
  EXPECT_EQ(ReplicasOf("stall").size(), 1u);
  EXPECT_EQ(Metric("granary_tenant_quota_inflight_bytes{tenant_id=\"default\"}"), 0);
  EXPECT_EQ(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}"), charged);
  absl::Status again;
  for (int i = 0; i < 50; ++i) {  // the node catches up with its queued requests first
    again = client_->Copy("stall", to);
    if (again.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_EQ(ReplicasOf("stall").size(), 2u);
  auto got = client_->Get("stall");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value);
}

}  // namespace
}  // namespace granary::testing
