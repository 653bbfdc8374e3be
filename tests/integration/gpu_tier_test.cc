// The GPU tier on the fake device backend (cuda/fake_backend.h), between real processes: the
// master and the nodes are child processes with GRANARY_DEVICE_BACKEND=fake; this process's
// client runs on a FakeBackend of its own (SetBackendForTesting), whose fake device memory the
// CPU cannot touch (a stray memcpy faults) and which opens the nodes' fake IPC handles through
// /proc/<pid>/fd. Runs on machines without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "cuda/device_backend.h"
#include "cuda/fake_backend.h"
#include "granary/device_pointer.h"
#include "granary/error_reason.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class GpuTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fake = cuda::FakeBackend::Create(cuda::FakeOptions{});
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(*fake);
    cuda::SetBackendForTesting(fake_.get());
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    client_.reset();
    cluster_.reset();
    cuda::SetBackendForTesting(nullptr);
  }
  void Start(std::vector<std::string> node_flags = {}) {
    Cluster::Options o;
    o.nodes = 1;
    o.node_segment_size = "32MB";
    o.env = {"GRANARY_DEVICE_BACKEND=fake"};
    o.node_flags = std::move(node_flags);
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto client = client::ClientImpl::Create(cluster_->ClientOpts());
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
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

  std::unique_ptr<cuda::FakeBackend> fake_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<client::ClientImpl> client_;
};

// Point 2 of the GPU tier: every buffer is classified through the device backend, so fake device
// memory (PROT_NONE to the CPU: any CPU copy would crash this test) is refused with the device
// pointer error on every call, and nothing is stored or charged.
TEST_F(GpuTierTest, FakeDeviceBuffersAreRefusedUntouchedAndNothingIsCharged) {
  Start();
  constexpr size_t kBytes = 64 << 10;
  auto dev = fake_->Alloc(0, kBytes);
  ASSERT_TRUE(dev.ok()) << dev.status();
  char* device = static_cast<char*>(*dev);
  ASSERT_TRUE(IsDevicePointer(device, kBytes));
  ASSERT_TRUE(IsDevicePointer(device + kBytes - 1, 1));
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

  // Only "h" was stored: one allocation more, nothing for the refused keys.
  EXPECT_EQ(Metric("granary_master_objects"), 2);
  EXPECT_GT(Metric("granary_master_used_bytes{tier=\"host\"}"), used);
  EXPECT_EQ(Metric("granary_tenant_quota_charged_bytes{tenant_id=\"default\"}") - charged,
            Metric("granary_master_used_bytes{tier=\"host\"}") - used);
  // The device bytes are unchanged (read back through the backend, never by the CPU).
  std::vector<char> back(kBytes, '\x55');
  ASSERT_TRUE(fake_->Memset(0, device, 0x7e, kBytes).ok());
  ExpectDevicePointer(client_->PutFrom("d", device, kBytes), device);
  ASSERT_TRUE(fake_->Copy(0, back.data(), device, kBytes, cuda::CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(back, std::vector<char>(kBytes, '\x7e'));
  fake_->Free(0, device);
}

}  // namespace
}  // namespace granary::testing
