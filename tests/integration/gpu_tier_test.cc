// The GPU tier between real processes, on the fake device backend (gpu_tier_fixture.h): every
// buffer classified through the backend, device buffers to and from host and GPU segments (same
// host through mappings and IPC, staged where nothing is mapped), tier placement and eviction
// within a tier, the start refusals, the injected faults, the client's mappings, and a master
// restart. Engine buffers (scatter lists, paged KV, streams) are gpu_engine_buffers_test's;
// other hosts and copies between nodes gpu_bounce_test's.
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

class GpuTierTest : public GpuTierFixture {
 protected:
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
  static void ExpectDevicePointer(const absl::Status& st, const void* p) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kDevicePointer) << st;
    const std::string hex = absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
    EXPECT_TRUE(absl::StrContains(st.message(), hex)) << "want " << hex << " in: " << st;
  }
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
  auto mapped = backend_->runtime().OpenIpc(0, gpu[0].gpu_ipc);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  for (size_t i = 0; i < keys.size(); ++i) {
    auto r = ReplicasOf(keys[i]);
    ASSERT_EQ(r.size(), 1u);
    proto::AllocHeader h;
    const uint64_t at = r[0].address;  // List gives the allocation's offset in the segment
    ASSERT_TRUE(backend_->runtime()
                    .Copy(0, &h, static_cast<char*>(*mapped) + at, sizeof(h),
                          device::CopyKind::kDeviceToHost)
                    .ok());
    EXPECT_EQ(h.magic, proto::AllocHeader::kMagic) << keys[i];
    EXPECT_EQ(h.value_length, sizes[i]) << keys[i];
  }
  ASSERT_TRUE(backend_->runtime().CloseIpc(*mapped).ok());
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
  device::FakeOptions two;
  two.device_count = 2;
  auto fake = device::FakeBackend::Create(two);
  ASSERT_TRUE(fake.ok()) << fake.status();
  device::SetBackendForTesting(fake->get());
  fake_ = std::move(*fake);
  backend_ = fake_.get();
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  PutOptions on_gpu;
  on_gpu.tier = StorageTier::kGpu;
  const std::string value = MakeValue("d1", 1, 70000);
  auto src = backend_->runtime().Alloc(1, value.size());
  auto dst = backend_->runtime().Alloc(1, value.size());
  ASSERT_TRUE(src.ok() && dst.ok());
  device_buffers_.push_back(*src);
  device_buffers_.push_back(*dst);
  ASSERT_TRUE(backend_->runtime()
                  .Copy(1, *src, value.data(), value.size(), device::CopyKind::kHostToDevice)
                  .ok());
  ASSERT_TRUE(client_
                  ->BatchPutWith({"d1"},
                                 {absl::string_view(static_cast<char*>(*src), value.size())},
                                 on_gpu)[0]
                  .ok());
  auto n = client_->GetInto("d1", *dst, value.size());
  ASSERT_TRUE(n.ok()) << n.status();
  std::string back(value.size(), '\0');
  ASSERT_TRUE(backend_->runtime()
                  .Copy(1, back.data(), *dst, back.size(), device::CopyKind::kDeviceToHost)
                  .ok());
  EXPECT_TRUE(back == value);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 2);
  EXPECT_EQ(fake_->ContextsCreated(0), 0) << "the segment was mapped on another device";
  EXPECT_EQ(fake_->ContextsCreated(1), 1);
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

}  // namespace
}  // namespace granary::testing
