// PutOptions and GetOptions on every put and get form, against a real master and node: the
// options reach the master (tier, pins, the read lease), and bad values are refused by name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "granary/error_reason.h"
#include "tests/integration/cluster.h"

namespace granary::testing {
namespace {

class OptionsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
  }
  void Start(Cluster::Options o) {
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
    auto raw = client::ClientImpl::Create(cluster_->ClientOpts());
    ASSERT_TRUE(raw.ok()) << raw.status();
    client_ = std::move(*raw);
  }
  bool Exists(const std::string& key) {
    auto e = client_->Exist(key);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() && *e;
  }
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<client::ClientImpl> client_;
};

// The cluster has host segments only: a put that asks for the GPU tier has no room, whichever
// form carries the option, and stores nothing; asking for the host tier stores.
TEST_F(OptionsTest, PutOptionsTierReachesTheMasterFromEveryPutForm) {
  ASSERT_NO_FATAL_FAILURE(Start(Cluster::Options{}));
  const std::string v = MakeValue("v", 1, 4096);
  PutOptions gpu;
  gpu.tier = StorageTier::kGpu;
  PutOptions host;
  host.tier = StorageTier::kHost;
  auto refused = [](const absl::Status& st) {
    return absl::IsResourceExhausted(st) && absl::StrContains(st.message(), "gpu tier");
  };
  absl::Status one = client_->PutFrom("one", v.data(), v.size(), gpu);
  EXPECT_TRUE(refused(one)) << one;
  const std::vector<std::string> keys = {"batch"};
  const std::vector<const void*> bufs = {v.data()};
  const std::vector<size_t> sizes = {v.size()};
  absl::Status batch = client_->BatchPutFrom(keys, bufs, sizes, gpu)[0];
  EXPECT_TRUE(refused(batch)) << batch;
  const std::vector<std::string> rkeys = {"regions"};
  const std::vector<std::vector<BufferRegion>> regions = {
      {{const_cast<char*>(v.data()), 1000}, {const_cast<char*>(v.data()) + 1000, 3096}}};
  absl::Status scattered = client_->BatchPutFromRegions(rkeys, regions, gpu)[0];
  EXPECT_TRUE(refused(scattered)) << scattered;
  for (const char* k : {"one", "batch", "regions"}) EXPECT_FALSE(Exists(k)) << k;

  ASSERT_TRUE(client_->PutFrom("one", v.data(), v.size(), host).ok());
  ASSERT_TRUE(client_->BatchPutFrom(keys, bufs, sizes, host)[0].ok());
  ASSERT_TRUE(client_->BatchPutFromRegions(rkeys, regions, host)[0].ok());
  for (const char* k : {"one", "batch", "regions"}) {
    auto got = client_->Get(k);
    ASSERT_TRUE(got.ok()) << k << ": " << got.status();
    EXPECT_TRUE(*got == v) << k;
  }
}

// A hard pin given to PutFrom keeps the object through eviction; the unpinned object put
// beside it, older than everything that follows, is evicted (the control).
TEST_F(OptionsTest, AHardPinFromPutFromSurvivesEviction) {
  Cluster::Options o;
  o.node_segment_size = "16MB";
  ASSERT_NO_FATAL_FAILURE(Start(o));
  const std::string pinned = MakeValue("pinned", 1, 1 << 20);
  const std::string plain = MakeValue("plain", 1, 1 << 20);
  PutOptions hard;
  hard.hard_pin = true;
  ASSERT_TRUE(client_->PutFrom("pinned", pinned.data(), pinned.size(), hard).ok());
  ASSERT_TRUE(client_->PutFrom("plain", plain.data(), plain.size()).ok());
  for (int i = 0; i < 48; ++i) {  // three times the capacity
    const std::string k = absl::StrCat("fill-", i);
    const std::string v = MakeValue(k, 1, 1 << 20);
    absl::Status st = client_->PutFrom(k, v.data(), v.size());
    ASSERT_TRUE(st.ok()) << k << ": " << st;
  }
  EXPECT_FALSE(Exists("plain")) << "the oldest unpinned object was not evicted";
  auto got = client_->Get("pinned");
  ASSERT_TRUE(got.ok()) << "the hard-pinned object was evicted: " << got.status();
  EXPECT_TRUE(*got == pinned);
}

// GetOptions::lease_ms is what the master grants (capped at kMaxReadLeaseMs), the default
// without it; a lease held keeps a Remove out; a value over the limit is refused by name.
TEST_F(OptionsTest, GetOptionsLeaseIsGrantedCappedAndChecked) {
  Cluster::Options o;
  o.lease_ttl_ms = 5000;
  ASSERT_NO_FATAL_FAILURE(Start(o));
  const std::string v = MakeValue("k", 1, 8192);
  ASSERT_TRUE(client_->Put("k", v).ok());
  auto lease_of = [&](uint32_t asked) -> uint32_t {
    proto::GetRequest req{{"k"}, asked};
    auto rep = client_->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, req);
    EXPECT_TRUE(rep.ok()) << rep.status();
    if (!rep.ok() || rep->results.size() != 1) return 0;
    const proto::GetResult& r = rep->results[0];
    client_->ReleaseLeasesAsync(proto::KeyGenRequest{{{"k", r.generation, r.lease_token}}});
    return r.lease_ms;
  };
  EXPECT_EQ(lease_of(0), 5000u);
  EXPECT_EQ(lease_of(20'000), 20'000u);
  EXPECT_EQ(lease_of(proto::kMaxReadLeaseMs + 1), proto::kMaxReadLeaseMs);

  // A lease taken and not released (a reader that stalls) keeps a Remove out for its length.
  proto::GetRequest held{{"k"}, 60'000};
  auto rep = client_->Call<proto::GetRequest, proto::GetReply>(proto::MsgType::kGet, held);
  ASSERT_TRUE(rep.ok() && rep->results.size() == 1) << rep.status();
  absl::Status rm = client_->Remove("k");
  EXPECT_TRUE(absl::IsFailedPrecondition(rm)) << rm;
  EXPECT_EQ(ErrorReasonOf(rm), ErrorReason::kHasLease) << rm;

  // Through the client's own calls: the bytes, and the limit named.
  GetOptions get;
  get.lease_ms = 30'000;
  get.tier = StorageTier::kHost;
  std::string buf(v.size(), '\0');
  auto n = client_->GetInto("k", buf.data(), buf.size(), get);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, v.size());
  EXPECT_TRUE(buf == v);
  get.lease_ms = GetOptions::kMaxLeaseMs + 1;
  auto over = client_->GetInto("k", buf.data(), buf.size(), get);
  EXPECT_TRUE(absl::IsInvalidArgument(over.status())) << over.status();
  EXPECT_TRUE(absl::StrContains(over.status().message(), "600001")) << over.status();
  const std::vector<std::string> keys = {"k"};
  auto batch = client_->BatchGet(keys, get);
  EXPECT_TRUE(absl::IsInvalidArgument(batch[0].status())) << batch[0].status();
}

}  // namespace
}  // namespace granary::testing
