// The GPU tier on the fake device backend (cuda/fake_backend.h), between real processes: the
// master and the nodes are child processes with GRANARY_DEVICE_BACKEND=fake; this process's
// client runs on a FakeBackend of its own (SetBackendForTesting), whose fake device memory the
// CPU cannot touch (a stray memcpy faults) and which opens the nodes' fake IPC handles through
// /proc/<pid>/fd. Runs on machines without a GPU.
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
#include "cuda/checksum.h"
#include "cuda/device_backend.h"
#include "cuda/fake_backend.h"
#include "granary/device_pointer.h"
#include "granary/error_reason.h"
#include "node/node_server.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

// GRANARY_TEST_DEVICE_BACKEND=cuda (the ctest label gpu) runs the same bodies on the CUDA
// runtime, skipping without a device; the fault-injection cases need the fake and skip there.
bool OnCuda() {
  const char* v = std::getenv("GRANARY_TEST_DEVICE_BACKEND");
  return v != nullptr && std::string(v) == "cuda";
}

class GpuTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (OnCuda()) {
      cuda::DeviceBackend* cuda_backend = cuda::CudaBackend();
      if (cuda_backend == nullptr || cuda_backend->DeviceCount() == 0) {
        GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
      }
      backend_ = cuda_backend;
      cuda::SetBackendForTesting(backend_);
      return;
    }
    auto fake = cuda::FakeBackend::Create(cuda::FakeOptions{});
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    backend_ = fake_.get();
    cuda::SetBackendForTesting(fake_.get());
  }
  std::string BackendEnv() const {
    return absl::StrCat("GRANARY_DEVICE_BACKEND=", OnCuda() ? "cuda" : "fake");
  }
  // A cluster whose node has a 16 MB GPU segment beside its host segment.
  void StartWithGpu(int get_retries = 3) {
    Start({"--gpu_segment_size=16MB"}, /*segments_per_node=*/2, get_retries);
  }
  // The segments the master lists, by tier.
  std::vector<proto::SegmentInfo> SegmentsOf(proto::Tier tier) {
    auto rep = client_->Call<proto::SegmentsRequest, proto::SegmentsReply>(
        proto::MsgType::kSegments, proto::SegmentsRequest{});
    EXPECT_TRUE(rep.ok()) << rep.status();
    std::vector<proto::SegmentInfo> out;
    if (!rep.ok()) return out;
    for (const auto& s : rep->segments) {
      if (s.tier == tier) out.push_back(s);
    }
    return out;
  }
  // The replicas the master holds for `key` (segment id and offset).
  std::vector<proto::ReplicaDesc> ReplicasOf(const std::string& key) {
    proto::ListRequest req;
    req.prefix = key;
    auto rep = client_->Call<proto::ListRequest, proto::ListReply>(proto::MsgType::kList, req);
    EXPECT_TRUE(rep.ok()) << rep.status();
    if (!rep.ok()) return {};
    for (const auto& o : rep->objects) {
      if (o.key == key) return o.replicas;
    }
    return {};
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    client_.reset();
    cluster_.reset();
    for (void* d : device_buffers_) backend_->Free(0, d);
    cuda::SetBackendForTesting(nullptr);
    unsetenv("UCX_TLS");
  }
  // Device memory of the test's backend, freed at TearDown.
  char* DeviceAlloc(size_t n) {
    auto d = backend_->Alloc(0, n);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    device_buffers_.push_back(*d);
    return static_cast<char*>(*d);
  }
  void ToDevice(char* d, const std::string& v) {
    ASSERT_TRUE(backend_->Copy(0, d, v.data(), v.size(), cuda::CopyKind::kHostToDevice).ok());
  }
  std::string FromDevice(const char* d, size_t n) {
    std::string v(n, '\0');
    EXPECT_TRUE(backend_->Copy(0, v.data(), d, n, cuda::CopyKind::kDeviceToHost).ok());
    return v;
  }
  // A sample of this process's client metrics, 0 when absent.
  double ClientMetric(const std::string& sample) {
    const std::string text = client_->MetricsText();
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (absl::StartsWith(line, sample + " ")) {
        double v = 0;
        EXPECT_TRUE(absl::SimpleAtod(line.substr(sample.size() + 1), &v)) << line;
        return v;
      }
    }
    return 0;
  }
  // PutFrom device buffers, GetInto device buffers, host reads of device writes, device reads of
  // host writes, mixed batches and a registered device buffer, all byte-exact; the device
  // destinations are filled with a marker first, so a value that did not arrive shows.
  void RoundTripsThroughDeviceBuffers(const std::string& prefix,
                                      std::vector<size_t> sizes = {1, 63, 4096, 65537,
                                                                   (1u << 20) + 7}) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      const std::string key = absl::StrCat(prefix, i);
      const std::string value = MakeValue(key, 1, sizes[i]);
      char* src = DeviceAlloc(sizes[i]);
      char* dst = DeviceAlloc(sizes[i] + 16);
      ASSERT_TRUE(src != nullptr && dst != nullptr);
      ASSERT_NO_FATAL_FAILURE(ToDevice(src, value));
      ASSERT_NO_FATAL_FAILURE(ToDevice(dst, std::string(sizes[i] + 16, '\x5a')));
      ASSERT_TRUE(client_->PutFrom(key, src, sizes[i]).ok()) << key;
      auto host = client_->Get(key);
      ASSERT_TRUE(host.ok()) << key << ": " << host.status();
      EXPECT_TRUE(*host == value) << key << ": the device write reads back wrong on the host";
      auto n = client_->GetInto(key, dst, sizes[i] + 16);
      ASSERT_TRUE(n.ok()) << key << ": " << n.status();
      EXPECT_EQ(*n, sizes[i]);
      const std::string back = FromDevice(dst, sizes[i] + 16);
      EXPECT_TRUE(back.substr(0, sizes[i]) == value) << key << ": the device read differs";
      EXPECT_EQ(back.substr(sizes[i]), std::string(16, '\x5a')) << key << ": wrote past the value";
      // Too small a device buffer: refused, untouched.
      if (sizes[i] > 1) {
        auto small = client_->GetInto(key, dst, sizes[i] - 1);
        EXPECT_EQ(small.status().code(), absl::StatusCode::kFailedPrecondition) << small.status();
      }
    }
    // A host write read into a device buffer, beside a host read, in one batch; and a batch of
    // writes from a device and a host buffer.
    const std::string hv = MakeValue(prefix + "h", 2, 30000);
    ASSERT_TRUE(client_->Put(prefix + "h", hv).ok());
    char* d = DeviceAlloc(30000);
    std::vector<char> h(sizes.back(), '\0');
    auto gets = client_->BatchGetInto({prefix + "h", prefix + std::to_string(sizes.size() - 1)},
                                      {d, h.data()}, {30000, h.size()});
    ASSERT_EQ(gets.size(), 2u);
    ASSERT_TRUE(gets[0].ok()) << gets[0].status();
    ASSERT_TRUE(gets[1].ok()) << gets[1].status();
    EXPECT_TRUE(FromDevice(d, 30000) == hv);
    EXPECT_TRUE(std::string(h.data(), h.size()) ==
                MakeValue(prefix + std::to_string(sizes.size() - 1), 1, sizes.back()));
    const std::string dv = MakeValue(prefix + "d", 3, 20000);
    ASSERT_NO_FATAL_FAILURE(ToDevice(d, dv));
    const std::string hv2 = MakeValue(prefix + "h2", 3, 777);
    auto puts = client_->BatchPutFrom({prefix + "d", prefix + "h2"}, {d, hv2.data()},
                                      {dv.size(), hv2.size()});
    ASSERT_TRUE(puts[0].ok()) << puts[0];
    ASSERT_TRUE(puts[1].ok()) << puts[1];
    EXPECT_TRUE(*client_->Get(prefix + "d") == dv);
    EXPECT_TRUE(*client_->Get(prefix + "h2") == hv2);
    // A registered device buffer: recorded, used, unregistered; twice is ALREADY_EXISTS.
    char* reg = DeviceAlloc(1 << 16);
    ASSERT_TRUE(client_->RegisterBuffer(reg, 1 << 16).ok());
    EXPECT_EQ(client_->RegisterBuffer(reg, 1 << 16).code(), absl::StatusCode::kAlreadyExists);
    auto r = client_->GetInto(prefix + "d", reg + 4096, dv.size());
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(FromDevice(reg + 4096, dv.size()) == dv);
    EXPECT_TRUE(client_->UnregisterBuffer(reg).ok());
    EXPECT_EQ(client_->UnregisterBuffer(reg).code(), absl::StatusCode::kNotFound);
  }
  void Start(std::vector<std::string> node_flags = {}, int segments_per_node = 1,
             int get_retries = 3) {
    Cluster::Options o;
    o.nodes = nodes_;
    o.node_segment_size = "32MB";
    o.env = {BackendEnv()};
    o.env.insert(o.env.end(), extra_env_.begin(), extra_env_.end());
    o.node_flags = std::move(node_flags);
    o.segments_per_node = segments_per_node;
    o.client_ttl_sec = client_ttl_sec_;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    ClientOptions co = cluster_->ClientOpts();
    co.get_retries = get_retries;
    auto client = client::ClientImpl::Create(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  // A fresh client (no retries) whose transfers time out after `ms`.
  void ReconnectWithTransferTimeout(int64_t ms) {
    client_.reset();
    ClientOptions co = cluster_->ClientOpts();
    co.get_retries = 0;
    co.transfer_timeout_ms = ms;
    auto c = client::ClientImpl::Create(co);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = std::move(*c);
  }
  // The index of the cluster's node listening at `address` (from its log), or -1.
  int NodeIndexOf(const std::string& address) {
    const std::string port = address.substr(address.rfind(':') + 1);
    for (int i = 0; i < cluster_->node_count(); ++i) {
      if (absl::StrContains(cluster_->node(i)->Log(), "listening on port " + port + ",")) return i;
    }
    return -1;
  }
  double Metric(const std::string& sample) {
    auto v = cluster_->Metric(sample);
    EXPECT_TRUE(v.ok()) << sample << ": " << v.status();
    return v.ok() ? *v : -1;
  }
  static void ExpectDevicePointer(const absl::Status& st, const void* p) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kDevicePointer) << st;
    const std::string hex = absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
    EXPECT_TRUE(absl::StrContains(st.message(), hex)) << "want " << hex << " in: " << st;
  }

  cuda::DeviceBackend* backend_ = nullptr;
  std::unique_ptr<cuda::FakeBackend> fake_;  // null on the cuda backend
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<client::ClientImpl> client_;
  std::vector<std::string> extra_env_;  // for the cluster's processes (UCX_TLS=tcp)
  std::vector<void*> device_buffers_;
  double client_ttl_sec_ = 2;  // the cluster's --client_ttl (nodes' sessions too)
  int nodes_ = 1;              // the cluster's nodes (each with the same flags)
};

// Point 2 of the GPU tier: every buffer is classified through the device backend. Device memory
// of the backend (fake: PROT_NONE to the CPU, so any CPU copy would crash this test) takes the
// device paths (below); device memory no backend here can copy (a test's fake range, standing in
// for the engine's own CUDA memory under the none backend) is refused with the device-pointer
// error on every call, untouched, and nothing is stored or charged.
TEST_F(GpuTierTest, DeviceMemoryNoBackendCanCopyIsRefusedUntouchedAndNothingIsCharged) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr size_t kBytes = 64 << 10;
  std::vector<char> foreign(kBytes, '\x42');  // "device memory" of no backend of this process
  char* device = foreign.data();
  granary::testing::AddFakeDeviceRange(device, kBytes);
  ASSERT_TRUE(IsDevicePointer(device, kBytes));
  std::vector<char> host(kBytes, '\x11');
  ASSERT_FALSE(IsDevicePointer(host.data(), host.size()));
  ASSERT_TRUE(client_->Put("stored", MakeValue("stored", 1, 1000)).ok());
  const double used = Metric("granary_master_used_bytes{tier=\"host\"}");
  const double charged = Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}");

  ExpectDevicePointer(client_->RegisterBuffer(device, kBytes), device);
  ExpectDevicePointer(client_->PutFrom("d", device, kBytes), device);
  EXPECT_FALSE(*client_->Exist("d"));
  auto got = client_->GetInto("stored", device, kBytes);
  ASSERT_FALSE(got.ok());
  ExpectDevicePointer(got.status(), device);
  auto puts = client_->BatchPutFrom({"h", "d2"}, {host.data(), device + 4096}, {1000, 1000});
  ASSERT_EQ(puts.size(), 2u);
  EXPECT_TRUE(puts[0].ok()) << puts[0];
  ExpectDevicePointer(puts[1], device + 4096);
  EXPECT_FALSE(*client_->Exist("d2"));
  std::vector<char> into(1000, '\0');
  auto gets = client_->BatchGetInto({"stored", "h"}, {device, into.data()}, {1000, 1000});
  ASSERT_EQ(gets.size(), 2u);
  ExpectDevicePointer(gets[0].status(), device);
  ASSERT_TRUE(gets[1].ok()) << gets[1].status();
  EXPECT_EQ(std::string(into.data(), 1000), std::string(host.data(), 1000));
  granary::testing::ClearFakeDeviceRanges();
  EXPECT_EQ(foreign, std::vector<char>(kBytes, '\x42')) << "a refused buffer was written";

  // Only "h" was stored: one allocation more, nothing for the refused keys.
  EXPECT_EQ(Metric("granary_master_objects"), 2);
  EXPECT_GT(Metric("granary_master_used_bytes{tier=\"host\"}"), used);
  EXPECT_EQ(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}") - charged,
            Metric("granary_master_used_bytes{tier=\"host\"}") - used);
}

// Point 4, same host, host segment: a device buffer is written from and read into straight from
// the node's mapped memory (pinned lazily, copied host-to-device and device-to-host by the
// backend); device and host buffers mix in one batch; RegisterBuffer of device memory is
// recorded, not handed to UCX. Every value compared through the backend, never the CPU.
TEST_F(GpuTierTest, DeviceBuffersMoveStraightFromAndToSameHostNodeMemory) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(client_->Put("warm", "up").ok());  // maps the segment into this process
  ASSERT_TRUE(client_->Get("warm").ok());
  ASSERT_NO_FATAL_FAILURE(RoundTripsThroughDeviceBuffers("hs"));
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"staging\"}"), 0);
  EXPECT_GT(ClientMetric("granary_client_gpu_pinned_node_bytes"), 0)
      << "the node's memory was not pinned for the device copies";
}

// Point 4, no mapping (UCX_TLS=tcp: nothing is shared memory, as from another host): device
// buffers are staged through the client's pinned slots, values larger than a slot split and small
// ones packed, byte-exact both ways.
TEST_F(GpuTierTest, DeviceBuffersAreStagedWhereNothingIsMapped) {
  setenv("UCX_TLS", "tcp", 1);
  extra_env_ = {"UCX_TLS=tcp"};
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(
      RoundTripsThroughDeviceBuffers("st", {1, 4096, 65537, (4u << 20) + 1, (9u << 20) + 7}));
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"staging\"}"), 0);
  unsetenv("UCX_TLS");
}

// Point 3: a node with a GPU segment and a same-host client. Puts that ask for the GPU tier land
// on the GPU segment, the others on the host segment; every value reads back byte-exact through
// the IPC mapping (device-to-host and host-to-device copies on a backend stream), and the
// allocation headers in device memory are the ones the client wrote.
TEST_F(GpuTierTest, GpuPutsLandOnTheGpuSegmentAndReadBackByteExactThroughIpc) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  const std::vector<proto::SegmentInfo> gpu = SegmentsOf(proto::Tier::kGpu);
  const std::vector<proto::SegmentInfo> host = SegmentsOf(proto::Tier::kHost);
  ASSERT_EQ(gpu.size(), 1u);
  ASSERT_EQ(host.size(), 1u);
  EXPECT_TRUE(gpu[0].rkey.empty()) << "a GPU segment must never be mapped with UCX";
  EXPECT_FALSE(gpu[0].gpu_ipc.empty());
  EXPECT_EQ(gpu[0].gpu_uuid.size(), 16u);
  EXPECT_EQ(gpu[0].size, 16u << 20);
  EXPECT_EQ(Metric("granary_master_capacity_bytes{tier=\"gpu\"}"), 16 << 20);
  auto api = HttpGet(cluster_->master_http_port(), "/api/v1/segments");
  ASSERT_TRUE(api.ok()) << api.status();
  EXPECT_TRUE(absl::StrContains(*api, "\"tier\":\"gpu\"")) << *api;

  const std::vector<size_t> sizes = {1, 63, 64, 4096, 65537, (1 << 20) + 7};
  std::vector<std::string> keys, values;
  std::vector<absl::string_view> views;
  for (size_t i = 0; i < sizes.size(); ++i) {
    keys.push_back(absl::StrCat("g", i));
    values.push_back(MakeValue(keys.back(), 1, sizes[i]));
  }
  for (const auto& v : values) views.push_back(v);
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  for (const absl::Status& st : client_->BatchPutWith(keys, views, on_gpu)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  ASSERT_TRUE(client_->Put("h0", MakeValue("h0", 1, 5000)).ok());  // host: the default
  PutOptions on_host;
  on_host.tier = StorageTier::kHost;
  ASSERT_TRUE(client_->BatchPutWith({"h1"}, {MakeValue("h1", 1, 700)}, on_host)[0].ok());
  for (const std::string& k : keys) {
    auto r = ReplicasOf(k);
    ASSERT_EQ(r.size(), 1u) << k;
    EXPECT_EQ(r[0].segment_id, gpu[0].segment_id) << k;
  }
  for (const std::string k : {"h0", "h1"}) {
    auto r = ReplicasOf(k);
    ASSERT_EQ(r.size(), 1u) << k;
    EXPECT_EQ(r[0].segment_id, host[0].segment_id) << k;
  }
  EXPECT_GT(Metric("granary_master_used_bytes{tier=\"gpu\"}"), 0);

  // Reads: Get, BatchGet and GetInto a host buffer.
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = client_->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    EXPECT_TRUE(*got == values[i]) << keys[i] << " differs";
  }
  auto batch = client_->BatchGet({keys[3], "h0", keys[5], "h1"});
  ASSERT_EQ(batch.size(), 4u);
  for (const auto& b : batch) ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(*batch[0] == values[3]);
  EXPECT_TRUE(*batch[1] == MakeValue("h0", 1, 5000));
  EXPECT_TRUE(*batch[2] == values[5]);
  std::vector<char> into(sizes[4], '\0');
  auto n = client_->GetInto(keys[4], into.data(), into.size());
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, sizes[4]);
  EXPECT_TRUE(std::string(into.data(), into.size()) == values[4]);
  EXPECT_EQ(Metric("granary_master_objects"), keys.size() + 2);

  // The headers in device memory, read through a mapping of this process's own (device to host).
  auto mapped = backend_->OpenIpc(0, gpu[0].gpu_ipc);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = ReplicasOf(keys[i]);
    ASSERT_EQ(r.size(), 1u);
    proto::AllocHeader h;
    const uint64_t at = r[0].address;  // List gives the allocation's offset in the segment
    ASSERT_TRUE(backend_
                    ->Copy(0, &h, static_cast<char*>(*mapped) + at, sizeof(h),
                           cuda::CopyKind::kDeviceToHost)
                    .ok());
    EXPECT_EQ(h.magic, proto::AllocHeader::kMagic) << keys[i];
    EXPECT_EQ(h.value_length, sizes[i]) << keys[i];
  }
  ASSERT_TRUE(backend_->CloseIpc(*mapped).ok());
  EXPECT_EQ(client_->Remove(keys[0]).code(), absl::StatusCode::kOk);
  EXPECT_EQ(client_->Get(keys[0]).status().code(), absl::StatusCode::kNotFound);
}

// Two threads whose device reads first touch the same piece of mapped node memory pin it once:
// with a registration that takes a while (as a GiB does on CUDA), the one that loses the race
// must neither count a pin failure nor leave the piece unpinned.
TEST_F(GpuTierTest, TwoThreadsPinningOnePieceOfNodeMemoryPinItOnce) {
  if (fake_ == nullptr) GTEST_SKIP() << "slows the fake's registrations";
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(client_->Put("warm", "up").ok());  // maps the segment into this process
  ASSERT_TRUE(client_->Get("warm").ok());
  const std::vector<std::string> keys = {"p0", "p1"};
  for (const std::string& k : keys) ASSERT_TRUE(client_->Put(k, MakeValue(k, 1, 5000)).ok());
  char* dst[2] = {DeviceAlloc(5000), DeviceAlloc(5000)};
  ASSERT_TRUE(dst[0] != nullptr && dst[1] != nullptr);
  fake_->SetHostRegisterDelay(absl::Milliseconds(300));
  std::vector<std::thread> readers;
  absl::Status read[2];
  for (int i = 0; i < 2; ++i) {
    readers.emplace_back([&, i] { read[i] = client_->GetInto(keys[i], dst[i], 5000).status(); });
  }
  for (std::thread& t : readers) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(read[i].ok()) << read[i];
    EXPECT_TRUE(FromDevice(dst[i], 5000) == MakeValue(keys[i], 1, 5000)) << keys[i];
  }
  EXPECT_EQ(ClientMetric("granary_client_gpu_pin_failures_total"), 0);
  EXPECT_EQ(ClientMetric("granary_client_gpu_pinned_node_bytes"), 32 << 20)
      << "the node's segment is not pinned";
}

// Point 4, same host, GPU segment: device buffers as sources and destinations of the GPU tier
// copy device to device through the IPC mapping, with no host bounce.
TEST_F(GpuTierTest, DeviceBuffersReachGpuSegmentsDeviceToDeviceThroughIpc) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::vector<size_t> sizes = {1, 4096, (1u << 20) + 7};
  for (size_t i = 0; i < sizes.size(); ++i) {
    const std::string key = absl::StrCat("dg", i);
    const std::string value = MakeValue(key, 1, sizes[i]);
    char* src = DeviceAlloc(sizes[i]);
    char* dst = DeviceAlloc(sizes[i]);
    ASSERT_NO_FATAL_FAILURE(ToDevice(src, value));
    ASSERT_TRUE(client_->BatchPutWith({key}, {absl::string_view(src, sizes[i])}, on_gpu)[0].ok());
    auto r = ReplicasOf(key);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].segment_id, SegmentsOf(proto::Tier::kGpu)[0].segment_id);
    auto n = client_->GetInto(key, dst, sizes[i]);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(FromDevice(dst, sizes[i]) == value) << key;
    EXPECT_TRUE(*client_->Get(key) == value) << key;  // and to a host buffer
  }
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 2 * sizes.size());
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
}

// Injected: a sticky copy error while a device buffer is read or written through the node's
// mapped memory fails the call clearly; the failed put stores nothing and leaves no charge, the
// failed get leaves the destination untouched; host transfers go on working.
TEST_F(GpuTierTest, ACopyErrorOnADeviceBufferFailsClearlyAndLeaksNoCharge) {
  if (fake_ == nullptr) GTEST_SKIP() << "fault injection needs the fake backend";
  ASSERT_NO_FATAL_FAILURE(Start({}, 1, /*get_retries=*/0));
  const std::string value = MakeValue("kept", 1, 10000);
  ASSERT_TRUE(client_->Put("kept", value).ok());
  ASSERT_TRUE(client_->Get("kept").ok());  // maps the segment
  char* d = DeviceAlloc(10000);
  ASSERT_NO_FATAL_FAILURE(ToDevice(d, std::string(10000, '\x5a')));
  const double charged = Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}");
  fake_->InjectStickyCopyError();
  absl::Status put = client_->PutFrom("lost", d, 5000);
  EXPECT_EQ(put.code(), absl::StatusCode::kInternal) << put;
  EXPECT_TRUE(absl::StrContains(put.message(), "device copy")) << put;
  EXPECT_FALSE(*client_->Exist("lost"));
  auto got = client_->GetInto("kept", d, 10000);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(absl::StrContains(got.status().message(), "device copy")) << got.status();
  EXPECT_EQ(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}"), charged);
  ASSERT_TRUE(client_->Put("host", "bytes").ok());
  EXPECT_EQ(*client_->Get("host"), "bytes");
  EXPECT_TRUE(*client_->Get("kept") == value);
}

// Point 4, scatter lists: an object is the concatenation of its regions (device, host or both);
// multi-region lists are gathered into and scattered from one staging buffer per batch.
TEST_F(GpuTierTest, ScatterListsOfDeviceAndHostRegionsRoundTripByteExact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(client_->Put("warm", "up").ok());
  ASSERT_TRUE(client_->Get("warm").ok());
  // Region sizes per key; `on_device` says which regions are device memory.
  const std::vector<std::vector<size_t>> shape = {
      {1000, 70000, 5}, {300, 4096}, {65536}, {7, 9000, 1}};
  const std::vector<std::vector<bool>> on_device = {
      {true, true, true}, {false, false}, {true}, {false, true, false}};
  std::vector<std::string> keys, values;
  std::vector<std::vector<BufferRegion>> src, dst;
  std::vector<std::vector<char>> host_mem;  // keeps host regions alive
  host_mem.reserve(64);
  auto region = [&](size_t n, bool device) -> BufferRegion {
    if (device) return {DeviceAlloc(n), n};
    host_mem.emplace_back(n, '\x5a');
    return {host_mem.back().data(), n};
  };
  for (size_t i = 0; i < shape.size(); ++i) {
    keys.push_back(absl::StrCat("sl", i));
    size_t total = 0;
    for (size_t n : shape[i]) total += n;
    values.push_back(MakeValue(keys.back(), 1, total));
    std::vector<BufferRegion> s, d;
    size_t off = 0;
    for (size_t j = 0; j < shape[i].size(); ++j) {
      s.push_back(region(shape[i][j], on_device[i][j]));
      const std::string part = values.back().substr(off, shape[i][j]);
      if (on_device[i][j]) {
        ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(s.back().data), part));
      } else {
        std::memcpy(s.back().data, part.data(), part.size());
      }
      d.push_back(region(shape[i][j], on_device[i][j]));
      if (on_device[i][j]) {
        ASSERT_NO_FATAL_FAILURE(
            ToDevice(static_cast<char*>(d.back().data), std::string(shape[i][j], '\x5a')));
      }
      off += shape[i][j];
    }
    src.push_back(s);
    dst.push_back(d);
  }
  for (const absl::Status& st : client_->BatchPutFromRegions(keys, src)) ASSERT_TRUE(st.ok()) << st;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = client_->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == values[i]) << keys[i] << ": the gathered value differs";
  }
  auto read = client_->BatchGetIntoRegions(keys, dst);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(read[i].ok()) << keys[i] << ": " << read[i].status();
    EXPECT_EQ(*read[i], values[i].size());
    std::string back;
    for (size_t j = 0; j < dst[i].size(); ++j) {
      const auto* p = static_cast<const char*>(dst[i][j].data);
      back += on_device[i][j] ? FromDevice(p, dst[i][j].size) : std::string(p, dst[i][j].size);
    }
    EXPECT_TRUE(back == values[i]) << keys[i] << ": the scattered value differs";
  }
  // Too small a list, and an empty one.
  auto small =
      client_->BatchGetIntoRegions({keys[0], keys[1]}, {{region(10, true), region(10, false)}, {}});
  EXPECT_EQ(small[0].status().code(), absl::StatusCode::kFailedPrecondition) << small[0].status();
  EXPECT_EQ(small[1].status().code(), absl::StatusCode::kInvalidArgument) << small[1].status();
}

// A paged cache of 32 blocks (its layout, caches unset) and contents for its K and V caches.
struct KvContents {
  KvContents(int64_t block_size, int64_t num_heads, int64_t head_dim, int64_t elem_bytes,
             uint64_t seed) {
    layout.num_blocks = 32;
    layout.block_size = block_size;
    layout.num_heads = num_heads;
    layout.head_dim = head_dim;
    layout.elem_bytes = elem_bytes;
    block = static_cast<size_t>(block_size * num_heads * head_dim * elem_bytes);
    cache_bytes = 32 * block;
    k = MakeValue("K", seed, cache_bytes);
    v = MakeValue("V", seed, cache_bytes);
  }
  // The value stored for a block list: [K(b0) | V(b0) | K(b1) | ...].
  std::string Value(const std::vector<int32_t>& ids) const {
    std::string r;
    for (int32_t x : ids) r += k.substr(x * block, block) + v.substr(x * block, block);
    return r;
  }
  PagedKvCache layout;
  size_t block = 0, cache_bytes = 0;
  std::string k, v;
};

// Point 5: PutPagedKv gathers an engine's paged blocks (device caches here, host caches too)
// into one value per key, GetPagedKv scatters them back; both against the CPU reference, with
// the refusals named.
TEST_F(GpuTierTest, PagedKvPutAndGetMatchTheCpuReference) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  const size_t block = kv.block, cache_bytes = kv.cache_bytes;
  const std::string &k_host = kv.k, &v_host = kv.v;
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  auto reference = [&](const std::vector<int32_t>& b) { return kv.Value(b); };
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device caches" : "host caches");
    std::string kh = k_host, vh = v_host;
    if (device) {
      c.k_cache = DeviceAlloc(cache_bytes);
      c.v_cache = DeviceAlloc(cache_bytes);
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), k_host));
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), v_host));
    } else {
      c.k_cache = kh.data();
      c.v_cache = vh.data();
    }
    const std::vector<std::string> keys = {device ? "kvd0" : "kvh0", device ? "kvd1" : "kvh1"};
    for (const absl::Status& st : client_->PutPagedKv(keys, c, ids)) ASSERT_TRUE(st.ok()) << st;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto got = client_->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(*got == reference(ids[i])) << keys[i];
    }
    // Clear the caches, scatter back: the listed blocks return, the others stay cleared.
    const std::string zero(cache_bytes, '\0');
    if (device) {
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), zero));
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), zero));
    } else {
      kh = zero;
      vh = zero;
      c.k_cache = kh.data();
      c.v_cache = vh.data();
    }
    for (const absl::Status& st : client_->GetPagedKv(keys, c, ids)) ASSERT_TRUE(st.ok()) << st;
    const std::string kb = device ? FromDevice(static_cast<char*>(c.k_cache), cache_bytes) : kh;
    const std::string vb = device ? FromDevice(static_cast<char*>(c.v_cache), cache_bytes) : vh;
    for (int32_t b = 0; b < 32; ++b) {
      const bool listed = b == 3 || b == 7 || b == 1 || b == 30 || b == 0;
      EXPECT_EQ(kb.substr(b * block, block),
                listed ? k_host.substr(b * block, block) : std::string(block, '\0'))
          << "K block " << b;
      EXPECT_EQ(vb.substr(b * block, block),
                listed ? v_host.substr(b * block, block) : std::string(block, '\0'))
          << "V block " << b;
    }
    // Refusals: a block out of range, a block listed by two keys of one get, a value of
    // another layout, a bad layout field.
    auto out_of_range = client_->PutPagedKv({"bad"}, c, {{2, 32}});
    EXPECT_EQ(out_of_range[0].code(), absl::StatusCode::kInvalidArgument) << out_of_range[0];
    EXPECT_TRUE(absl::StrContains(out_of_range[0].message(), "32")) << out_of_range[0];
    EXPECT_FALSE(*client_->Exist("bad"));
    auto twice = client_->GetPagedKv(keys, c, {ids[0], {7}});
    EXPECT_TRUE(twice[0].ok()) << twice[0];
    EXPECT_EQ(twice[1].code(), absl::StatusCode::kInvalidArgument) << twice[1];
    EXPECT_TRUE(absl::StrContains(twice[1].message(), "block 7")) << twice[1];
    auto other = client_->GetPagedKv({keys[0]}, c, {{3, 7}});  // stored with 3 blocks
    EXPECT_EQ(other[0].code(), absl::StatusCode::kFailedPrecondition) << other[0];
    PagedKvCache odd = c;
    odd.elem_bytes = 3;
    auto layout = client_->PutPagedKv({"odd"}, odd, {{1}});
    EXPECT_EQ(layout[0].code(), absl::StatusCode::kInvalidArgument) << layout[0];
    EXPECT_TRUE(absl::StrContains(layout[0].message(), "elem_bytes")) << layout[0];
  }
}

// The paged-KV calls stage through device memory allocated once and kept: a later call
// allocates nothing (a cudaFree per call would wait for the whole device, the engine's kernels
// included, and a cudaMalloc per call competes with the engine's allocator), so an allocation
// that would now fail does not fail it.
TEST_F(GpuTierTest, PagedKvCallsReuseTheirDeviceStaging) {
  if (fake_ == nullptr) GTEST_SKIP() << "injects an allocation failure";
  ASSERT_NO_FATAL_FAILURE(Start());
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  c.k_cache = DeviceAlloc(kv.cache_bytes);
  c.v_cache = DeviceAlloc(kv.cache_bytes);
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), kv.k));
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), kv.v));
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  for (const absl::Status& st : client_->PutPagedKv({"r0", "r1"}, c, ids)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  fake_->FailNthAllocation(1);  // the next device allocation would fail
  for (const absl::Status& st : client_->PutPagedKv({"r2", "r3"}, c, ids))
    EXPECT_TRUE(st.ok()) << st;
  for (const absl::Status& st : client_->GetPagedKv({"r2", "r3"}, c, ids))
    EXPECT_TRUE(st.ok()) << st;
  fake_->FailNthAllocation(0);
  auto got = client_->Get("r3");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == kv.Value(ids[1]));
}

// The paged-KV and scatter-list calls run their device work (gathers, scatters, checksums,
// staging copies) on non-blocking streams of the buffer's device, never on the legacy default
// stream, which would wait for the engine's queued work, make the engine's later work wait for
// it, and break an engine capturing a CUDA graph.
TEST_F(GpuTierTest, DevicePathsKeepOffTheLegacyDefaultStream) {
  if (fake_ == nullptr) GTEST_SKIP() << "counts the fake's default-stream work";
  ASSERT_NO_FATAL_FAILURE(Start());
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  c.k_cache = DeviceAlloc(kv.cache_bytes);
  c.v_cache = DeviceAlloc(kv.cache_bytes);
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), kv.k));
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), kv.v));
  char* region = DeviceAlloc(300);
  ASSERT_NO_FATAL_FAILURE(ToDevice(region, std::string(300, 'r')));
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  const uint64_t before = fake_->DefaultStreamOps();
  PagedKvOptions checked;
  checked.checksum = true;
  for (const absl::Status& st : client_->PutPagedKv({"s0", "s1"}, c, ids, checked)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  for (const absl::Status& st : client_->GetPagedKv({"s0", "s1"}, c, ids, checked)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  const std::string host(100, 'h');
  std::vector<BufferRegion> two = {{region, 300}, {const_cast<char*>(host.data()), 100}};
  ASSERT_TRUE(client_->BatchPutFromRegions({"s2"}, {two})[0].ok());
  EXPECT_EQ(fake_->DefaultStreamOps(), before);
  auto got = client_->Get("s2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == std::string(300, 'r') + host);
}

// Point 5, the checksum: each value carries a 16-byte trailer with the CPU reference's checksum
// of its blocks, and round trips byte-exact for device and host caches; a value corrupted in
// place is DATA_LOSS naming the key and both checksums and scatters nothing of itself while the
// other keys of the batch scatter; checksum on and off do not mix. Blocks of 15 bytes, so that
// values and their trailers sit at odd offsets of the staging buffer.
TEST_F(GpuTierTest, PagedKvChecksumCatchesACorruptValue) {
  ASSERT_NO_FATAL_FAILURE(Start());
  const KvContents kv(3, 1, 5, 1, 2);
  PagedKvCache c = kv.layout;
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}, {12}};
  auto hex = [](uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); };
  PagedKvOptions on;
  on.checksum = true;
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device caches" : "host caches");
    std::string kh = kv.k, vh = kv.v;
    c.k_cache = device ? static_cast<void*>(DeviceAlloc(kv.cache_bytes)) : kh.data();
    c.v_cache = device ? static_cast<void*>(DeviceAlloc(kv.cache_bytes)) : vh.data();
    // Sets both caches to `k` and `v`, or reads them back.
    auto set = [&](const std::string& k, const std::string& v) {
      if (!device) {
        kh = k;
        vh = v;
        c.k_cache = kh.data();
        c.v_cache = vh.data();
        return;
      }
      ToDevice(static_cast<char*>(c.k_cache), k);
      ToDevice(static_cast<char*>(c.v_cache), v);
    };
    auto get = [&](bool v) {
      if (!device) return v ? vh : kh;
      return FromDevice(static_cast<char*>(v ? c.v_cache : c.k_cache), kv.cache_bytes);
    };
    // The blocks of `listed` hold the original bytes, all others `fill`.
    auto expect_blocks = [&](const std::vector<int32_t>& listed, char fill) {
      const std::string kb = get(false), vb = get(true);
      for (int32_t b = 0; b < 32; ++b) {
        const bool in = std::find(listed.begin(), listed.end(), b) != listed.end();
        EXPECT_EQ(kb.substr(b * kv.block, kv.block),
                  in ? kv.k.substr(b * kv.block, kv.block) : std::string(kv.block, fill))
            << "K block " << b;
        EXPECT_EQ(vb.substr(b * kv.block, kv.block),
                  in ? kv.v.substr(b * kv.block, kv.block) : std::string(kv.block, fill))
            << "V block " << b;
      }
    };
    ASSERT_NO_FATAL_FAILURE(set(kv.k, kv.v));
    const std::string p = device ? "sumd" : "sumh";
    const std::vector<std::string> keys = {p + "0", p + "1", p + "2"};
    for (const absl::Status& st : client_->PutPagedKv(keys, c, ids, on)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    // Stored: the blocks, then "GKVC", algorithm 1 and the CPU reference's checksum.
    for (size_t i = 0; i < keys.size(); ++i) {
      auto got = client_->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string blocks = kv.Value(ids[i]);
      ASSERT_EQ(got->size(), blocks.size() + client::kKvTrailerBytes) << keys[i];
      EXPECT_TRUE(got->substr(0, blocks.size()) == blocks) << keys[i];
      const uint64_t sum = cuda::ChecksumCpu(blocks.data(), blocks.size());
      std::string trailer = "GKVC" + std::string("\x01\0\0\0", 4);
      for (int b = 0; b < 8; ++b) trailer += static_cast<char>(sum >> (8 * b));
      EXPECT_EQ(absl::BytesToHexString(got->substr(blocks.size())), absl::BytesToHexString(trailer))
          << keys[i];
    }
    // Read back into cleared caches: the listed blocks return, the others stay cleared.
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, '\0'), std::string(kv.cache_bytes, '\0')));
    for (const absl::Status& st : client_->GetPagedKv(keys, c, ids, on)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    expect_blocks({3, 7, 1, 30, 0, 12}, '\0');

    // Corrupt key 1 in place: one byte of its blocks flipped, same size, same trailer.
    auto raw = client_->Get(keys[1]);
    ASSERT_TRUE(raw.ok()) << raw.status();
    std::string corrupt = *raw;
    corrupt[20] ^= 0x40;
    ASSERT_TRUE(client_->Remove(keys[1]).ok());
    ASSERT_TRUE(client_->Put(keys[1], corrupt).ok());
    const size_t payload = corrupt.size() - client::kKvTrailerBytes;
    const uint64_t stored = cuda::ChecksumCpu(raw->data(), payload);
    const uint64_t computed = cuda::ChecksumCpu(corrupt.data(), payload);
    ASSERT_NE(stored, computed);
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, 'z'), std::string(kv.cache_bytes, 'z')));
    auto res = client_->GetPagedKv(keys, c, ids, on);
    EXPECT_TRUE(res[0].ok()) << res[0];
    EXPECT_TRUE(res[2].ok()) << res[2];
    EXPECT_EQ(res[1].code(), absl::StatusCode::kDataLoss) << res[1];
    for (const std::string& want : {keys[1], hex(stored), hex(computed)}) {
      EXPECT_TRUE(absl::StrContains(res[1].message(), want)) << want << " not in " << res[1];
    }
    expect_blocks({3, 7, 1, 12}, 'z');  // key 1's blocks 30 and 0 untouched

    // Checksum on and off do not mix, and nothing is scattered.
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, 'q'), std::string(kv.cache_bytes, 'q')));
    auto off = client_->GetPagedKv({keys[0]}, c, {ids[0]});
    EXPECT_EQ(off[0].code(), absl::StatusCode::kFailedPrecondition) << off[0];
    EXPECT_TRUE(absl::StrContains(off[0].message(), "checksum trailer")) << off[0];
    EXPECT_TRUE(absl::StrContains(off[0].message(), "checksum on")) << off[0];
    const std::string plain = p + "plain";
    for (const absl::Status& st : client_->PutPagedKv({plain}, c, {{5, 6}})) {
      ASSERT_TRUE(st.ok()) << st;
    }
    auto plain_on = client_->GetPagedKv({plain}, c, {{5, 6}}, on);
    EXPECT_EQ(plain_on[0].code(), absl::StatusCode::kFailedPrecondition) << plain_on[0];
    EXPECT_TRUE(absl::StrContains(plain_on[0].message(), "without a checksum trailer"))
        << plain_on[0];
    auto other = client_->GetPagedKv({keys[0]}, c, {{3, 7}}, on);  // stored with 3 blocks
    EXPECT_EQ(other[0].code(), absl::StatusCode::kFailedPrecondition) << other[0];
    expect_blocks({}, 'q');
  }
}

// A node asked for a GPU segment where there is none refuses to start and names what is missing.
TEST_F(GpuTierTest, ANodeRefusesAGpuSegmentWithoutGpuSupportOrWithoutTheDevice) {
  ASSERT_NO_FATAL_FAILURE(Start());
  struct Case {
    std::string backend, device, want;
  };
  const std::vector<Case> cases = {
      {"GRANARY_DEVICE_BACKEND=none", "0", "--gpu_segment_size=16MB on --gpu_device=0: no CUDA"},
      {"GRANARY_DEVICE_BACKEND=fake", "7",
       "--gpu_device=7: no such device (the fake device "
       "backend has 1 device: 0..0)"},
  };
  for (const Case& c : cases) {
    auto p = Process::Start(
        {BinDir() + "/granary_node", "--master=" + cluster_->master_address(),
         "--host_segment_size=8MB", "--gpu_segment_size=16MB", "--gpu_device=" + c.device,
         "--metrics_port=0", "--metrics_host=127.0.0.1", "--local_hostname=127.0.0.1"},
        {c.backend}, absl::StrCat(cluster_->dir(), "/refused", c.device, ".log"));
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ((*p)->Wait(), 1) << (*p)->Log();
    EXPECT_TRUE(absl::StrContains((*p)->Log(), c.want)) << "want '" << c.want << "' in:\n"
                                                        << (*p)->Log();
  }
  EXPECT_EQ(Metric("granary_master_segments"), 1);  // nothing of them was mounted
}

// Injected: the node's allocation fails (in-process node on this test's fake).
TEST_F(GpuTierTest, ANodeRefusesToStartWhenTheGpuAllocationFails) {
  if (fake_ == nullptr) GTEST_SKIP() << "fault injection needs the fake backend";
  node::NodeOptions o;
  o.host_segment_size = 0;
  o.gpu_segment_size = 16 << 20;
  o.gpu_segment_size_flag = "16MB";
  o.serve_http = false;
  fake_->FailNthAllocation(1);
  auto n = node::NodeServer::Create(o);
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kResourceExhausted) << n.status();
  EXPECT_TRUE(absl::StrContains(n.status().message(),
                                "--gpu_segment_size=16MB on --gpu_device=0: allocation failed"))
      << n.status();
}

// Injected: a sticky copy error in the client's backend fails the transfers with a clear
// status; a failed put stores nothing and leaves no charge; a failed get returns no bytes.
TEST_F(GpuTierTest, ACopyErrorFailsTheTransferAndLeaksNoCharge) {
  if (fake_ == nullptr) GTEST_SKIP() << "fault injection needs the fake backend";
  ASSERT_NO_FATAL_FAILURE(StartWithGpu(/*get_retries=*/0));
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("kept", 1, 10000);
  ASSERT_TRUE(client_->BatchPutWith({"kept"}, {value}, on_gpu)[0].ok());
  const double charged = Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}");
  const double used = Metric("granary_master_used_bytes{tier=\"gpu\"}");
  fake_->InjectStickyCopyError();
  absl::Status put = client_->BatchPutWith({"lost"}, {MakeValue("lost", 1, 5000)}, on_gpu)[0];
  EXPECT_EQ(put.code(), absl::StatusCode::kInternal) << put;
  EXPECT_TRUE(absl::StrContains(put.message(), "device copy of GPU segment")) << put;
  EXPECT_FALSE(*client_->Exist("lost"));
  std::vector<char> into(10000, '\x5a');
  auto got = client_->GetInto("kept", into.data(), into.size());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "device copy")) << got.status();
  EXPECT_EQ(into, std::vector<char>(10000, '\x5a')) << "a failed get wrote into the buffer";
  EXPECT_EQ(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}"), charged);
  EXPECT_EQ(Metric("granary_master_used_bytes{tier=\"gpu\"}"), used);
  // The host tier does not go through the device backend: still fine.
  ASSERT_TRUE(client_->Put("host", "bytes").ok());
  EXPECT_EQ(*client_->Get("host"), "bytes");
}

// Injected: the IPC open fails, so the client falls back to the node bounce (counted): the put
// and the get succeed byte-exact; the next batch opens the handle and copies through IPC again.
TEST_F(GpuTierTest, AnIpcOpenFailureFallsBackToTheNodeBounce) {
  if (fake_ == nullptr) GTEST_SKIP() << "fault injection needs the fake backend";
  ASSERT_NO_FATAL_FAILURE(StartWithGpu(/*get_retries=*/0));
  fake_->FailNextIpcOpen();
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("k", 1, 3000);
  absl::Status put = client_->BatchPutWith({"k"}, {value}, on_gpu)[0];
  ASSERT_TRUE(put.ok()) << put;
  EXPECT_EQ(ClientMetric("granary_client_gpu_fallback_total"), 1);
  EXPECT_EQ(ClientMetric("granary_client_gpu_bounced_values_total"), 1);
  // The failure is remembered (GpuSegments::kRetryOpenAfter): the next batch goes to the node
  // bounce without another open (which would now succeed) or another log line.
  auto got = client_->Get("k");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value);
  EXPECT_EQ(ClientMetric("granary_client_gpu_bounced_values_total"), 2);
  EXPECT_EQ(ClientMetric("granary_client_gpu_fallback_total"), 2);
  EXPECT_EQ(ClientMetric("granary_client_gpu_segment_opens_total"), 0);
  // A fresh client, whose first open fails on the get: staged by the node.
  client_.reset();
  ClientOptions co = cluster_->ClientOpts();
  co.get_retries = 0;
  auto c = client::ClientImpl::Create(co);
  ASSERT_TRUE(c.ok()) << c.status();
  client_ = std::move(*c);
  fake_->FailNextIpcOpen();
  char* d = DeviceAlloc(3000);
  auto n = client_->GetInto("k", d, 3000);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(FromDevice(d, 3000) == value);
  EXPECT_EQ(ClientMetric("granary_client_gpu_fallback_total"), 1);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"bounce\"}"), 1);
  auto again = client_->Get("k");  // a host buffer: the segment's own device, opened now
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(*again == value);
  EXPECT_EQ(ClientMetric("granary_client_gpu_segment_opens_total"), 1);
}

// A GPU segment is mapped on the device of the caller's buffer, so that the copy is one device to
// device copy there and no other GPU of the process gets a context: a client whose buffers are on
// its device 1 writes and reads a segment of the node's device 0 (device 0 here too, by UUID)
// and never touches its device 0.
TEST_F(GpuTierTest, AGpuSegmentIsMappedOnlyOnTheDeviceOfTheBuffer) {
  if (fake_ == nullptr) GTEST_SKIP() << "counts the fake's contexts";
  cuda::FakeOptions two;
  two.device_count = 2;
  auto fake = cuda::FakeBackend::Create(two);
  ASSERT_TRUE(fake.ok()) << fake.status();
  cuda::SetBackendForTesting(fake->get());
  fake_ = std::move(*fake);
  backend_ = fake_.get();
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("d1", 1, 70000);
  auto src = backend_->Alloc(1, value.size());
  auto dst = backend_->Alloc(1, value.size());
  ASSERT_TRUE(src.ok() && dst.ok());
  device_buffers_.push_back(*src);
  device_buffers_.push_back(*dst);
  ASSERT_TRUE(
      backend_->Copy(1, *src, value.data(), value.size(), cuda::CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(client_
                  ->BatchPutWith({"d1"},
                                 {absl::string_view(static_cast<char*>(*src), value.size())},
                                 on_gpu)[0]
                  .ok());
  auto n = client_->GetInto("d1", *dst, value.size());
  ASSERT_TRUE(n.ok()) << n.status();
  std::string back(value.size(), '\0');
  ASSERT_TRUE(
      backend_->Copy(1, back.data(), *dst, back.size(), cuda::CopyKind::kDeviceToHost).ok());
  EXPECT_TRUE(back == value);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 2);
  EXPECT_EQ(fake_->ContextsCreated(0), 0) << "the segment was mapped on another device";
  EXPECT_EQ(fake_->ContextsCreated(1), 1);
}

// Point 3, other hosts: a client whose devices do not include the segment's (another fake UUID
// seed: as on another host) reaches the GPU segment through the node bounce, over UCX_TLS=tcp
// as well: GPU-tier puts from host and device buffers, gets into host and device buffers, values
// from 1 byte to past two node slots (split) and small ones packed, all byte-exact; the headers
// the node wrote last check out on every read, and a read of a replaced key gets the new value.
class GpuBounceTest : public GpuTierTest {
 protected:
  void SetUp() override {
    if (OnCuda()) GTEST_SKIP() << "another host needs a second fake UUID seed";
    cuda::FakeOptions o;
    o.uuid_seed = 0x11;  // the node's fake devices are 0xfa...: none is local here
    auto fake = cuda::FakeBackend::Create(o);
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    backend_ = fake_.get();
    cuda::SetBackendForTesting(fake_.get());
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
      auto n = client_->GetInto(keys[i], d, sizes[i] + 8);
      ASSERT_TRUE(n.ok()) << keys[i] << ": " << n.status();
      EXPECT_EQ(*n, sizes[i]);
      const std::string back = FromDevice(d, sizes[i] + 8);
      EXPECT_TRUE(back.substr(0, sizes[i]) == values[i]) << keys[i] << ": the device read differs";
      EXPECT_EQ(back.substr(sizes[i]), std::string(8, '\x5a')) << keys[i];
      const std::string key2 = keys[i] + "d";
      const std::string v2 = MakeValue(key2, 2, sizes[i]);
      ASSERT_NO_FATAL_FAILURE(ToDevice(d, v2));
      ASSERT_TRUE(client_->BatchPutWith({key2}, {absl::string_view(d, sizes[i])}, on_gpu)[0].ok());
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

// The fake device mappings open in this process (each IPC mapping holds its memfd open).
int OpenFakeMappings() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && absl::StrContains(target, "granary-fake-device")) ++n;
  }
  return n;
}

// The client maps a GPU segment once, and closes the mapping when the segment is unmounted: a
// node restarted in place mounts a new segment, which the client maps instead of the old one.
TEST_F(GpuTierTest, TheClientMapsASegmentOnceAndClosesItWhenTheSegmentIsGone) {
  if (fake_ == nullptr) GTEST_SKIP() << "counts the fake's mappings";
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  EXPECT_EQ(OpenFakeMappings(), 0);
  for (int i = 0; i < 5; ++i) {
    const std::string k = absl::StrCat("k", i);
    ASSERT_TRUE(client_->BatchPutWith({k}, {MakeValue(k, 1, 1000)}, on_gpu)[0].ok());
    auto got = client_->Get(k);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == MakeValue(k, 1, 1000));
  }
  EXPECT_EQ(OpenFakeMappings(), 1);
  cluster_->node(0)->Kill(SIGKILL);
  cluster_->node(0)->Wait();
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2).ok());
  std::string value = MakeValue("after", 1, 2000);
  absl::Status st;
  for (int attempt = 0; attempt < 50; ++attempt) {  // until the master dropped the dead node
    st = client_->BatchPutWith({"after"}, {value}, on_gpu)[0];
    if (st.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(st.ok()) << st;
  auto got = client_->Get("after");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == value);
  EXPECT_EQ(OpenFakeMappings(), 1) << "the dead node's segment is still mapped";
}

// A full GPU tier evicts its own least recently used object, never a host object (even an
// older one); a put that takes any tier goes to host once the GPU tier is full, evicting
// nothing there, and back to the GPU while it has room.
TEST_F(GpuTierTest, AFullGpuTierEvictsWithinItselfAndAnyFallsBackToHost) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  const std::vector<proto::SegmentInfo> gpu = SegmentsOf(proto::Tier::kGpu);
  const std::vector<proto::SegmentInfo> host = SegmentsOf(proto::Tier::kHost);
  ASSERT_EQ(gpu.size(), 1u);
  ASSERT_EQ(host.size(), 1u);
  ASSERT_TRUE(client_->Put("host", MakeValue("host", 1, 1 << 20)).ok());  // default: host
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string big = MakeValue("big", 1, 10 << 20);
  ASSERT_TRUE(client_->BatchPutWith({"big"}, {big}, on_gpu)[0].ok());
  const std::string big2 = MakeValue("big2", 1, 10 << 20);
  absl::Status st = client_->BatchPutWith({"big2"}, {big2}, on_gpu)[0];
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_FALSE(*client_->Exist("big"));  // the GPU tier's oldest
  EXPECT_TRUE(*client_->Exist("host"));
  ASSERT_EQ(ReplicasOf("big2").size(), 1u);
  EXPECT_EQ(ReplicasOf("big2")[0].segment_id, gpu[0].segment_id);
  auto got = client_->Get("big2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == big2);
  EXPECT_EQ(Metric("granary_master_tier_evicted_objects_total{tier=\"gpu\"}"), 1);
  EXPECT_EQ(Metric("granary_master_tier_evicted_objects_total{tier=\"host\"}"), 0);

  PutOptions any;
  any.tier = StorageTier::kAny;
  const std::string spill = MakeValue("spill", 1, 10 << 20);
  ASSERT_TRUE(client_->BatchPutWith({"spill"}, {spill}, any)[0].ok());
  ASSERT_EQ(ReplicasOf("spill").size(), 1u);
  EXPECT_EQ(ReplicasOf("spill")[0].segment_id, host[0].segment_id);
  EXPECT_TRUE(*client_->Exist("big2"));
  const std::string small = MakeValue("small", 1, 1 << 20);
  ASSERT_TRUE(client_->BatchPutWith({"small"}, {small}, any)[0].ok());
  ASSERT_EQ(ReplicasOf("small").size(), 1u);
  EXPECT_EQ(ReplicasOf("small")[0].segment_id, gpu[0].segment_id);
  for (const auto& [key, value] : {std::pair{"spill", &spill}, std::pair{"small", &small}}) {
    auto v = client_->Get(key);
    ASSERT_TRUE(v.ok()) << key << ": " << v.status();
    EXPECT_TRUE(*v == *value) << key;
  }
  EXPECT_EQ(Metric("granary_master_tier_evicted_objects_total{tier=\"gpu\"}"), 1);
}

// A master killed with -9 and restarted rebuilds the GPU segment's objects from the node's
// inventory (their headers read through the device, never by the CPU: the fake's device
// memory faults on that) beside the host segment's: byte-exact, on the same segments, the
// tenant's charge and entries unchanged; an object removed before the kill stays removed.
TEST_F(GpuTierTest, GpuObjectsSurviveAMasterRestart) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  const std::vector<proto::SegmentInfo> gpu = SegmentsOf(proto::Tier::kGpu);
  ASSERT_EQ(gpu.size(), 1u);
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  std::vector<std::string> keys, values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(absl::StrCat(i % 4 == 0 ? "h" : "g", i));
    values.push_back(MakeValue(keys.back(), 1, 1 + static_cast<size_t>(i) * 7919));
    const absl::Status st = i % 4 == 0
                                ? client_->Put(keys.back(), values.back())
                                : client_->BatchPutWith({keys.back()}, {values.back()}, on_gpu)[0];
    ASSERT_TRUE(st.ok()) << keys.back() << ": " << st;
  }
  ASSERT_TRUE(client_->Remove("g1").ok());
  // Every commit record and the free have reached the node (they travel asynchronously).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Metric("granary_master_inventory_records_sent_total") < keys.size() + 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(Metric("granary_master_inventory_records_sent_total"), keys.size() + 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the last reply is applied
  const std::string charged = "granary_tenant_quota_charged_bytes{tenant_id=\"default\"}";
  const double charged_before = Metric(charged);
  // Segment ids are new at every mount: the tier each object is on is what must not change.
  auto on_gpu_segment = [this](const std::string& key) {
    auto r = ReplicasOf(key);
    EXPECT_EQ(r.size(), 1u) << key;
    const std::vector<proto::SegmentInfo> g = SegmentsOf(proto::Tier::kGpu);
    return !r.empty() && g.size() == 1 && r[0].segment_id == g[0].segment_id;
  };
  for (const std::string& k : keys) {
    if (k != "g1") {
      EXPECT_EQ(on_gpu_segment(k), k[0] == 'g') << k;
    }
  }

  ASSERT_TRUE(cluster_->RestartMaster().ok());
  ASSERT_TRUE(cluster_->WaitForSegments(2, 20).ok()) << "the node did not re-mount";
  const auto restored_by = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (Metric("granary_master_inventory_restored_total") < keys.size() - 1 &&
         std::chrono::steady_clock::now() < restored_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Metric("granary_master_inventory_restored_total"), keys.size() - 1);
  EXPECT_EQ(Metric(charged), charged_before);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == "g1") {
      EXPECT_EQ(client_->Get("g1").status().code(), absl::StatusCode::kNotFound);
      continue;
    }
    EXPECT_EQ(on_gpu_segment(keys[i]), keys[i][0] == 'g') << keys[i];
    auto got = client_->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << keys[i] << ": " << got.status();
    EXPECT_TRUE(*got == values[i]) << keys[i] << " differs after the restart";
  }
}

// A GPU-tier put with no GPU segment mounted is refused for lack of room, not placed on host.
TEST_F(GpuTierTest, AGpuPutWithoutAGpuSegmentIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  absl::Status st = client_->BatchPutWith({"k"}, {MakeValue("k", 1, 100)}, on_gpu)[0];
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted) << st;
  EXPECT_FALSE(*client_->Exist("k"));
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

// The stream contract (include/granary/client.h, DeviceWait). The engine writes each value on
// its stream, the fake's engine stream, whose writes land only once something waits for them
// (or after 60 s): as on a GPU, where the engine's kernels may still be writing when the put
// starts. A put without a DeviceWait reads the bytes from before the write and stores them as
// if they were good; with the engine's stream or an event recorded on it, every path (the host
// segment's mapped copy, the GPU segment's IPC copy, a scatter list's gather, the paged-KV
// gather, staging) waits, and stores the engine's bytes.
class EngineStreamTest : public GpuTierTest {
 protected:
  void SetUp() override {
    GpuTierTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (fake_ == nullptr) GTEST_SKIP() << "the engine stream whose writes land late is the fake's";
    auto engine = fake_->CreateEngineStream(0, absl::Seconds(60));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    auto event = fake_->CreateEvent(0);
    ASSERT_TRUE(event.ok()) << event.status();
    event_ = *event;
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      EXPECT_TRUE(backend_->SynchronizeStream(engine_).ok());
      backend_->DestroyStream(engine_);
    }
    if (event_ != nullptr) backend_->DestroyEvent(event_);
    GpuTierTest::TearDown();
  }
  // Device memory at `at` holds `old` (the value `tag` had before), and the engine's stream has
  // a write of `fresh` into it queued. The engine's source bytes live until TearDown.
  struct Write {
    std::string old, fresh;
  };
  Write EngineWrites(char* at, const std::string& tag, size_t n) {
    Write w{MakeValue(tag + "/old", 1, n), MakeValue(tag + "/fresh", 2, n)};
    EXPECT_TRUE(backend_->SynchronizeStream(engine_).ok());  // the last test's write first
    ToDevice(at, w.old);
    sources_.push_back(std::make_unique<std::string>(w.fresh));
    EXPECT_TRUE(backend_->CopyAsync(engine_, at, sources_.back()->data(), n).ok());
    return w;
  }
  std::string Stored(const std::string& key) {
    auto got = client_->Get(key);
    EXPECT_TRUE(got.ok()) << key << ": " << got.status();
    return got.ok() ? *got : std::string();
  }
  DeviceWait OnStream() const { return DeviceWait{engine_, nullptr}; }
  // An event recorded on the engine's stream after its write.
  DeviceWait OnEvent() {
    EXPECT_TRUE(backend_->RecordEvent(event_, engine_).ok());
    return DeviceWait{nullptr, event_};
  }
  // PutFrom of a device buffer, without and with the contract.
  void PutFromWaits(const std::string& tag, size_t n, bool by_event) {
    char* d = DeviceAlloc(n);
    ASSERT_NE(d, nullptr);
    Write w = EngineWrites(d, tag, n);
    ASSERT_TRUE(client_->PutFrom(tag + "/without", d, n).ok());
    EXPECT_TRUE(Stored(tag + "/without") == w.old)
        << tag << ": a put without the contract did not read the bytes from before the write";
    w = EngineWrites(d, tag + "/again", n);
    const DeviceWait wait = by_event ? OnEvent() : OnStream();
    ASSERT_TRUE(client_->PutFrom(tag + "/with", d, n, wait).ok());
    EXPECT_TRUE(Stored(tag + "/with") == w.fresh)
        << tag << ": a put with the engine's " << (by_event ? "event" : "stream")
        << " stored bytes from before the engine's write";
  }

  void* engine_ = nullptr;
  void* event_ = nullptr;
  std::vector<std::unique_ptr<std::string>> sources_;
};

TEST_F(EngineStreamTest, APutWaitsForTheEngineOnEveryPathAndReadsStaleBytesWithout) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  ASSERT_TRUE(client_->Put("warm", "up").ok());  // maps the host segment into this process
  ASSERT_TRUE(client_->Get("warm").ok());
  // The host segment, mapped: a device-to-host copy on the client's stream.
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("hs", 70000, /*by_event=*/false));
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("hs-event", 4096, /*by_event=*/true));
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
  // The GPU segment: a device-to-device copy through the IPC mapping (BatchPutWith, tier gpu).
  {
    constexpr size_t kBytes = 50000;
    char* d = DeviceAlloc(kBytes);
    ASSERT_NE(d, nullptr);
    PutOptions on_gpu;
    on_gpu.tier = StorageTier::kGpu;
    Write w = EngineWrites(d, "gpu", kBytes);
    ASSERT_TRUE(
        client_->BatchPutWith({"gpu/without"}, {absl::string_view(d, kBytes)}, on_gpu)[0].ok());
    EXPECT_TRUE(Stored("gpu/without") == w.old) << "the IPC put waited without the contract";
    for (const bool by_event : {false, true}) {
      w = EngineWrites(d, absl::StrCat("gpu", by_event), kBytes);
      on_gpu.wait = by_event ? OnEvent() : OnStream();
      const std::string key = absl::StrCat("gpu/with", by_event);
      ASSERT_TRUE(client_->BatchPutWith({key}, {absl::string_view(d, kBytes)}, on_gpu)[0].ok());
      EXPECT_TRUE(Stored(key) == w.fresh) << key << ": the IPC put did not wait";
      ASSERT_EQ(ReplicasOf(key).size(), 1u);
      EXPECT_EQ(ReplicasOf(key)[0].segment_id, SegmentsOf(proto::Tier::kGpu)[0].segment_id);
    }
    EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 0);
  }
  // A scatter list: two device regions gathered (synchronously) and a one-region list.
  {
    constexpr size_t kBytes = 3000;
    char* d = DeviceAlloc(3 * kBytes);
    ASSERT_NE(d, nullptr);
    const auto lists = [&] {
      return std::vector<std::vector<BufferRegion>>{{{d, kBytes}, {d + kBytes, kBytes}},
                                                    {{d + 2 * kBytes, kBytes}}};
    };
    Write w = EngineWrites(d, "regions", 3 * kBytes);
    for (const absl::Status& st :
         client_->BatchPutFromRegions({"r0/without", "r1/without"}, lists())) {
      ASSERT_TRUE(st.ok()) << st;
    }
    EXPECT_TRUE(Stored("r0/without") == w.old.substr(0, 2 * kBytes));
    EXPECT_TRUE(Stored("r1/without") == w.old.substr(2 * kBytes));
    w = EngineWrites(d, "regions/again", 3 * kBytes);
    for (const absl::Status& st :
         client_->BatchPutFromRegions({"r0/with", "r1/with"}, lists(), OnStream())) {
      ASSERT_TRUE(st.ok()) << st;
    }
    EXPECT_TRUE(Stored("r0/with") == w.fresh.substr(0, 2 * kBytes)) << "the gather did not wait";
    EXPECT_TRUE(Stored("r1/with") == w.fresh.substr(2 * kBytes)) << "the direct key did not wait";
  }
  // Paged KV: the gather kernel reads the caches after the wait.
  {
    const KvContents kv(4, 2, 8, 2, 1);
    PagedKvCache c = kv.layout;
    char* k = DeviceAlloc(kv.cache_bytes);
    char* v = DeviceAlloc(kv.cache_bytes);
    ASSERT_TRUE(k != nullptr && v != nullptr);
    c.k_cache = k;
    c.v_cache = v;
    ASSERT_NO_FATAL_FAILURE(ToDevice(v, kv.v));
    const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}};
    const Write w = EngineWrites(k, "kv", kv.cache_bytes);
    ASSERT_TRUE(client_->PutPagedKv({"kv/without"}, c, ids)[0].ok());
    KvContents old = kv;
    old.k = w.old;
    EXPECT_TRUE(Stored("kv/without") == old.Value(ids[0]));
    const Write again = EngineWrites(k, "kv/again", kv.cache_bytes);
    PagedKvOptions options;
    options.wait = OnStream();
    ASSERT_TRUE(client_->PutPagedKv({"kv/with"}, c, ids, options)[0].ok());
    KvContents fresh = kv;
    fresh.k = again.fresh;
    EXPECT_TRUE(Stored("kv/with") == fresh.Value(ids[0])) << "the paged-KV gather did not wait";
  }
  // A handle the backend does not know fails the put, which stores nothing.
  char* d = DeviceAlloc(100);
  ASSERT_NE(d, nullptr);
  int not_an_event = 0;
  absl::Status bad = client_->PutFrom("bad", d, 100, DeviceWait{nullptr, &not_an_event});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.message(), "DeviceWait")) << bad;
  EXPECT_FALSE(*client_->Exist("bad"));
}

// Staging (UCX_TLS=tcp: nothing is mapped): chunk copies into the client's pinned slots wait.
TEST_F(EngineStreamTest, AStagedPutWaitsForTheEngine) {
  setenv("UCX_TLS", "tcp", 1);
  extra_env_ = {"UCX_TLS=tcp"};
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("st", (4u << 20) + 3, /*by_event=*/false));
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("st-event", 1000, /*by_event=*/true));
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"staging\"}"), 0);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
}

}  // namespace
}  // namespace granary::testing
