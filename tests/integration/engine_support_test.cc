// What the Python module and its Mooncake layer need from the C++ client, on a real master and
// real nodes: Remove with force despite a read lease, Stat naming the node of each replica, and
// the refusal of CUDA device pointers (granary/device_pointer.h; a fake range stands in for GPU
// memory, so this runs on machines without one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "granary/device_pointer.h"
#include "granary/error_reason.h"
#include "granary/kv_key.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class EngineSupportTest : public ::testing::Test {
 protected:
  void TearDown() override {
    ClearFakeDeviceRanges();
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    client_.reset();
    cluster_.reset();
  }
  void Start(int nodes, int replica_num = 1) {
    Cluster::Options o;
    o.nodes = nodes;
    o.node_segment_size = "32MB";
    o.lease_ttl_ms = 60'000;  // a lease outlives the test unless released
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    ClientOptions co = cluster_->ClientOpts();
    co.replica_num = replica_num;
    auto client = client::ClientImpl::Create(co);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = std::move(*client);
  }
  // Takes a read lease on `key` and never releases it, as a Get still in flight would.
  void HoldReadLease(const std::string& key) {
    auto lease = client_->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet,
                                                                   proto::GetRequest{{key}});
    ASSERT_TRUE(lease.ok()) << lease.status();
    ASSERT_EQ(lease->results.size(), 1u);
    ASSERT_TRUE(lease->results[0].status.ToStatus().ok()) << lease->results[0].status.message;
  }
  static void ExpectHasLease(const absl::Status& st) {
    EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
    EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kHasLease) << st;
    EXPECT_STREQ(ErrorReasonName(ErrorReasonOf(st)), "HAS_LEASE");
  }
  static void ExpectDevicePointer(const absl::Status& st, const void* p) {
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kDevicePointer) << st;
    const std::string hex = absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
    EXPECT_TRUE(absl::StrContains(st.message(), hex)) << "want " << hex << " in: " << st;
  }

  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<client::ClientImpl> client_;
};

TEST_F(EngineSupportTest, ForceRemovesAnObjectWhoseReadLeaseIsHeld) {
  Start(1);
  const std::string value = MakeValue("k", 1, 4096);
  ASSERT_TRUE(client_->Put("k", value).ok());
  HoldReadLease("k");
  ExpectHasLease(client_->Remove("k"));
  ExpectHasLease(client_->BatchRemove({"k"})[0]);
  auto still = client_->Get("k");
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_TRUE(*still == value);
  ASSERT_TRUE(client_->Remove("k", /*force=*/true).ok());
  EXPECT_EQ(client_->Get("k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(*client_->Exist("k"));
  // The key is free again.
  ASSERT_TRUE(client_->Put("k", MakeValue("k", 2, 4096)).ok());
  EXPECT_TRUE(*client_->Get("k") == MakeValue("k", 2, 4096));
}

TEST_F(EngineSupportTest, ForceBatchRemoveTakesKeysLeasedByLookupPrefix) {
  Start(1);
  const std::vector<std::string> hashes = {"h0", "h1"};
  std::vector<std::string> keys;
  for (const auto& h : hashes) {
    keys.push_back(EncodeKvKey(KvKey{"model", "sha256", std::nullopt, h}));
    ASSERT_TRUE(client_->Put(keys.back(), MakeValue(keys.back(), 1, 1000)).ok());
  }
  auto found = client_->LookupPrefix("model", "sha256", std::nullopt, hashes, /*lease=*/true);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->present, 2u);
  for (const absl::Status& st : client_->BatchRemove(keys)) ExpectHasLease(st);
  for (const absl::Status& st : client_->BatchRemove(keys, /*force=*/true)) {
    EXPECT_TRUE(st.ok()) << st;
  }
  for (const auto& k : keys) {
    EXPECT_EQ(client_->Get(k).status().code(), absl::StatusCode::kNotFound) << k;
  }
  EXPECT_EQ(cluster_->Metric("granary_master_objects").value_or(-1), 0);
}

TEST_F(EngineSupportTest, StatNamesTheNodeOfEachCompleteReplica) {
  Start(2, /*replica_num=*/2);
  ASSERT_TRUE(client_->Put("two", MakeValue("two", 1, 1 << 20)).ok());
  auto info = client_->Stat("two");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->replicas, 2u);
  ASSERT_EQ(info->replica_addresses.size(), 2u);
  auto segs = client_->Segments();
  ASSERT_TRUE(segs.ok()) << segs.status();
  std::set<std::string> nodes;
  for (const auto& s : *segs) nodes.insert(s.node_address);
  ASSERT_EQ(nodes.size(), 2u);
  std::set<std::string> got(info->replica_addresses.begin(), info->replica_addresses.end());
  EXPECT_EQ(got, nodes);  // one replica on each node, named as Segments names them
  // List leaves the addresses out (Stat is the call that resolves them).
  auto list = client_->List("two", 10, "");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->objects.size(), 1u);
  EXPECT_TRUE(list->objects[0].replica_addresses.empty());
}

TEST_F(EngineSupportTest, DeviceBuffersAreRefusedUntouchedAndHostBuffersStillWork) {
  Start(1);
  std::vector<char> device(64 << 10, '\xAB');  // "device" memory: a fake range over host bytes
  std::vector<char> host(64 << 10, '\x11');
  AddFakeDeviceRange(device.data(), device.size());
  ASSERT_TRUE(IsDevicePointer(device.data() + 100, 1));
  ASSERT_FALSE(IsDevicePointer(host.data(), host.size()));
  const std::vector<char> before = device;

  ExpectDevicePointer(client_->RegisterBuffer(device.data(), device.size()), device.data());
  ExpectDevicePointer(client_->PutFrom("d", device.data(), device.size()), device.data());
  EXPECT_FALSE(*client_->Exist("d"));  // nothing was stored, not even a put in progress
  // A range whose last byte is device memory is refused too; the host part alone is not.
  std::vector<char> half(8192, '\x22');
  AddFakeDeviceRange(half.data() + 4096, 4096);
  ExpectDevicePointer(client_->PutFrom("e", half.data(), 4097), half.data());
  EXPECT_TRUE(client_->PutFrom("e", half.data(), 4096).ok());
  ASSERT_TRUE(client_->Put("stored", MakeValue("stored", 1, 1000)).ok());
  auto got = client_->GetInto("stored", device.data(), device.size());
  ASSERT_FALSE(got.ok());
  ExpectDevicePointer(got.status(), device.data());

  // Batches refuse per key; the host keys go through.
  auto puts = client_->BatchPutFrom({"h", "d2"}, {host.data(), device.data() + 4096}, {1000, 1000});
  ASSERT_EQ(puts.size(), 2u);
  EXPECT_TRUE(puts[0].ok()) << puts[0];
  ExpectDevicePointer(puts[1], device.data() + 4096);
  EXPECT_TRUE(*client_->Exist("h"));
  EXPECT_FALSE(*client_->Exist("d2"));
  std::vector<char> into(2000, '\0');
  auto gets =
      client_->BatchGetInto({"stored", "h", "stored"},
                            {device.data(), into.data(), into.data() + 1000}, {1000, 1000, 1000});
  ASSERT_EQ(gets.size(), 3u);
  ASSERT_FALSE(gets[0].ok());
  ExpectDevicePointer(gets[0].status(), device.data());
  ASSERT_TRUE(gets[1].ok()) << gets[1].status();
  ASSERT_TRUE(gets[2].ok()) << gets[2].status();
  EXPECT_EQ(std::string(into.data(), 1000), std::string(host.data(), 1000));
  EXPECT_EQ(std::string(into.data() + 1000, 1000), MakeValue("stored", 1, 1000));
  EXPECT_TRUE(device == before) << "a refused device buffer was written";

  // Once the range is no longer "device", the same memory works.
  ClearFakeDeviceRanges();
  ASSERT_TRUE(client_->RegisterBuffer(device.data(), device.size()).ok());
  ASSERT_TRUE(client_->PutFrom("d", device.data(), device.size()).ok());
  auto back = client_->GetInto("stored", device.data(), device.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, 1000u);
  EXPECT_TRUE(client_->UnregisterBuffer(device.data()).ok());
}

}  // namespace
}  // namespace granary::testing
