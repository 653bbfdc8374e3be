#pragma once

// The fixture of the store's end-to-end tests (store_test, node_transfer_test): a real master and
// real nodes on loopback, once per transport.

#include <gtest/gtest.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/integration/cluster.h"

namespace granary::testing {

// A master and nodes as separate processes (cluster.h), reached over UCX's default transports
// or over tcp alone (the parameter: "default" or "tcp"), and clients of this process. A test
// starts its cluster with StartCluster; its logs are printed when the test failed.
class StoreFixture : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp") {
      setenv("UCX_TLS", "tcp", 1);
      env_ = {"UCX_TLS=tcp"};
    } else {
      unsetenv("UCX_TLS");
    }
  }
  void TearDown() override {
    if (HasFailure() && cluster_) cluster_->DumpLogs();
    cluster_.reset();
    unsetenv("UCX_TLS");
  }
  void StartCluster(Cluster::Options o) {
    o.env = env_;
    auto c = Cluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(*c);
  }
  std::unique_ptr<Client> NewClient(int replica_num = 1, const std::string& tenant = "default") {
    ClientOptions o = cluster_->ClientOpts(tenant);
    o.replica_num = replica_num;
    auto c = Client::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }
  double Metric(const std::string& sample) {
    auto v = cluster_->Metric(sample);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }

  std::vector<std::string> env_;
  std::unique_ptr<Cluster> cluster_;
};

}  // namespace granary::testing
