#pragma once

// The fixture of the GPU tier's integration tests (gpu_tier_test, gpu_engine_buffers_test,
// gpu_bounce_test): the fake device backend (device/fake/fake_backend.h) between real processes.
// The master and the nodes are child processes with GRANARY_DEVICE_BACKEND=fake; this process's
// client runs on a FakeBackend of its own (SetBackendForTesting), whose fake device memory the
// CPU cannot touch (a stray memcpy faults) and which opens the nodes' fake IPC handles through
// /proc/<pid>/fd. Runs on machines without a GPU.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/client_impl.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"

namespace granary::testing {

// GRANARY_TEST_DEVICE_BACKEND=cuda (the ctest label gpu) runs the same bodies on the CUDA
// runtime, skipping without a device; the fault-injection cases need the fake and skip there.
inline bool OnCuda() {
  const char* v = std::getenv("GRANARY_TEST_DEVICE_BACKEND");
  return v != nullptr && std::string(v) == "cuda";
}

// A cluster of real processes whose GPU segments live on the device backend (the fake, or the CUDA
// runtime under OnCuda), and a ClientImpl of this process on the same backend. The test starts
// the cluster (Start, StartWithGpu) after setting nodes_, extra_env_ and client_ttl_sec_; device
// memory from DeviceAlloc is freed at TearDown, and the logs are printed when the test failed.
class GpuTierFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    if (OnCuda()) {
      device::DeviceBackend* cuda_backend = device::CudaBackend();
      if (cuda_backend == nullptr || cuda_backend->runtime().DeviceCount() == 0) {
        GTEST_SKIP() << "no CUDA device (or a build without CUDA)";
      }
      backend_ = cuda_backend;
      device::SetBackendForTesting(backend_);
      return;
    }
    auto fake = device::FakeBackend::Create(device::FakeOptions{});
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    backend_ = fake_.get();
    device::SetBackendForTesting(fake_.get());
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
    for (void* d : device_buffers_) backend_->runtime().Free(0, d);
    device::SetBackendForTesting(nullptr);
    unsetenv("UCX_TLS");
  }
  // Device memory of the test's backend, freed at TearDown.
  char* DeviceAlloc(size_t n) {
    auto d = backend_->runtime().Alloc(0, n);
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return nullptr;
    device_buffers_.push_back(*d);
    return static_cast<char*>(*d);
  }
  void ToDevice(char* d, const std::string& v) {
    ASSERT_TRUE(
        backend_->runtime().Copy(0, d, v.data(), v.size(), device::CopyKind::kHostToDevice).ok());
  }
  std::string FromDevice(const char* d, size_t n) {
    std::string v(n, '\0');
    EXPECT_TRUE(backend_->runtime().Copy(0, v.data(), d, n, device::CopyKind::kDeviceToHost).ok());
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
  device::DeviceBackend* backend_ = nullptr;
  std::unique_ptr<device::FakeBackend> fake_;  // null on the cuda backend
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<client::ClientImpl> client_;
  std::vector<std::string> extra_env_;  // for the cluster's processes (UCX_TLS=tcp)
  std::vector<void*> device_buffers_;
  double client_ttl_sec_ = 2;  // the cluster's --client_ttl (nodes' sessions too)
  int nodes_ = 1;              // the cluster's nodes (each with the same flags)
};

}  // namespace granary::testing
