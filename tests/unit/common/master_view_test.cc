// The pieces of HA address resolution that need no etcd: etcd:// addresses, their validation
// (each bad value named), and the epoch fence that refuses a deposed master.

#include "common/etcd/master_view.h"

#include <gtest/gtest.h>

namespace granary::etcd {
namespace {

TEST(MasterAddressTest, EtcdAddressesGiveTheirEndpoints) {
  EXPECT_EQ(EndpointsOfMasterAddress("etcd://a:2379;b:2379"), "a:2379,b:2379");
  EXPECT_EQ(EndpointsOfMasterAddress("etcd://127.0.0.1:2379"), "127.0.0.1:2379");
  EXPECT_EQ(EndpointsOfMasterAddress("127.0.0.1:50051"), std::nullopt);
  EXPECT_EQ(EndpointsOfMasterAddress("etcd:/a:1"), std::nullopt);
}

TEST(MasterAddressTest, BadEndpointsAndClusterIdsAreNamed) {
  EXPECT_TRUE(ValidateMasterAddress("--master", "etcd://a:2379;b:2379", "c1").ok());
  EXPECT_TRUE(ValidateMasterAddress("--master", "10.0.0.1:50051", "").ok())
      << "host:port is checked elsewhere; no cluster id is needed";
  absl::Status st = ValidateMasterAddress("--master", "etcd://a:2379;b:notaport", "c1");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("notaport"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("--master"), absl::string_view::npos) << st;
  st = ValidateMasterAddress("master_server_address", "etcd://a:2379", "x/y");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'x/y'"), absl::string_view::npos) << st;
  st = ValidateMasterAddress("master_server_address", "etcd://a:2379", "");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MasterViewKey("c1"), "granary/c1/master_view");
}

TEST(EpochFenceTest, AnOlderEpochIsRefusedOnceANewerOneWasSeen) {
  EpochFence f;
  EXPECT_TRUE(f.Accept(0, "m").ok()) << "no HA: epoch 0";
  EXPECT_TRUE(f.Accept(7, "m").ok());
  EXPECT_EQ(f.highest(), 7);
  EXPECT_TRUE(f.Accept(7, "m").ok()) << "the same leader again";
  absl::Status st = f.Accept(5, "the master at 10.0.0.2:50051");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("epoch 5"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("epoch 7"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("10.0.0.2:50051"), absl::string_view::npos) << st;
  EXPECT_EQ(f.highest(), 7) << "a refused epoch changes nothing";
  EXPECT_TRUE(f.Accept(12, "m").ok());
  EXPECT_FALSE(f.Accept(7, "m").ok());
  EXPECT_TRUE(f.Accept(0, "m").ok()) << "a master without HA never carries an epoch";
}

}  // namespace
}  // namespace granary::etcd
