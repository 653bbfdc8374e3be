#include "granary/client_options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace granary {
namespace {

class ClientOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
    path_ = ::testing::TempDir() + "/client_" + std::to_string(getpid()) + ".json";
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    std::remove(path_.c_str());
  }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  static constexpr const char* kVars[] = {
      "GRANARY_CONFIG_PATH",         "GRANARY_MASTER",
      "GRANARY_TENANT_ID",           "GRANARY_LOCAL_BUFFER_SIZE",
      "GRANARY_REPLICA_NUM",         "GRANARY_PROTOCOL",
      "GRANARY_RPC_TIMEOUT_MS",      "GRANARY_TENANT_TOKEN",
      "GRANARY_TRANSFER_TIMEOUT_MS", "GRANARY_GET_RETRIES",
      "GRANARY_LOG_LEVEL",           "GRANARY_LOCAL_HOSTNAME",
      "GRANARY_DEVICE_NAME",         "GRANARY_CLUSTER_ID",
      "GRANARY_GPU_DEVICE",          "GRANARY_TCP_DATA_BETWEEN_HOSTS",
      "GRANARY_COPY_THREADS"};
  std::string path_;
};

TEST_F(ClientOptionsTest, DefaultsAreValid) {
  ClientOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.tenant_id, "default");
  EXPECT_TRUE(o.tenant_token.empty());
  EXPECT_EQ(o.replica_num, 1);
}

TEST_F(ClientOptionsTest, JsonFileWithUnitsLoads) {
  Write(R"({"master_server_address": "10.0.0.1:50051", "tenant_id": "tenant-a",
            "replica_num": 2, "protocol": "tcp", "rpc_timeout_ms": 2500,
            "transfer_timeout_ms": "4000", "get_retries": 5, "log_level": "warning"})");
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->master_server_address, "10.0.0.1:50051");
  EXPECT_EQ(o->tenant_id, "tenant-a");
  EXPECT_EQ(o->replica_num, 2);
  EXPECT_EQ(o->transfer_timeout_ms, 4000);
  EXPECT_EQ(o->get_retries, 5);
  EXPECT_EQ(o->log_level, LogLevel::kWarning);
  EXPECT_EQ(o->protocol, "tcp");
  EXPECT_EQ(o->rpc_timeout_ms, 2500);
  EXPECT_TRUE(o->unknown_keys.empty());
}

TEST_F(ClientOptionsTest, AnEtcdMasterAddressAndItsClusterLoad) {
  Write(R"({"master_server_addr": "etcd://10.0.0.1:2379;10.0.0.2:2379", "cluster_id": "prod"})");
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->master_server_address, "etcd://10.0.0.1:2379;10.0.0.2:2379");
  EXPECT_EQ(o->cluster_id, "prod");
  setenv("GRANARY_MASTER", "etcd://127.0.0.1:2379", 1);
  setenv("GRANARY_CLUSTER_ID", "c2", 1);
  auto env = ClientOptions::FromEnvironment();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->master_server_address, "etcd://127.0.0.1:2379");
  EXPECT_EQ(env->cluster_id, "c2");
  EXPECT_EQ(ClientOptions().cluster_id, "granary_cluster");
}

TEST_F(ClientOptionsTest, MooncakeStyleFileLoadsAndUnknownKeysAreReported) {
  Write(R"({"local_hostname": "node1", "metadata_server": "etcd://x:2379",
            "global_segment_size": "4GB", "local_buffer_size": 1073741824,
            "protocol": "rdma", "device_name": "mlx5_0",
            "master_server_address": "127.0.0.1:50051"})");
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->device_name, "mlx5_0");
  EXPECT_EQ(o->protocol, "rdma");
  // Keys this version does not use, the two it no longer reads among them.
  EXPECT_EQ(o->unknown_keys, (std::vector<std::string>{"global_segment_size", "local_buffer_size",
                                                       "local_hostname", "metadata_server"}));
}

// A key that names the master but is not one Granary reads ("master", the Python keyword's name)
// is an error naming the key to use: ignored, it would leave the client on the default master.
TEST_F(ClientOptionsTest, AMasterKeyGranaryDoesNotReadIsAnErrorNamingTheOneToUse) {
  for (const char* key : {"master", "master_addr", "master_server"}) {
    Write(absl::StrCat(R"({")", key, R"(": "10.0.0.1:50051"})"));
    auto o = ClientOptions::FromJsonFile(path_);
    ASSERT_FALSE(o.ok()) << key;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(o.status().message().find(absl::StrCat("key '", key,
                                                     "' is not a config key: the "
                                                     "master's address goes in "
                                                     "'master_server_address'")),
              std::string::npos)
        << o.status();
  }
  Write(R"({"master_server_addr": "10.0.0.1:50051"})");  // the alias still reads
  ASSERT_TRUE(ClientOptions::FromJsonFile(path_).ok());
}

// A config file past 1 MiB (or a device) is refused after that much, not read to its end.
TEST_F(ClientOptionsTest, AConfigOver1MiBIsRefused) {
  Write(absl::StrCat(R"({"tenant_id": "t", "pad": ")", std::string(1 << 20, 'x'), R"("})"));
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("holds more than 1048576 bytes"), std::string::npos)
      << o.status();
  EXPECT_FALSE(ClientOptions::FromJsonFile("/dev/zero").ok());
}

TEST_F(ClientOptionsTest, RemovedKeysAreReportedByName) {
  // A removed key loads (an old file keeps working) with a warning that names it, whatever its
  // value, from the file and from the environment.
  Write(R"({"local_buffer_size": "12XB", "tenant_id": "t"})");
  testing::internal::CaptureStderr();
  auto o = ClientOptions::FromJsonFile(path_);
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->unknown_keys, std::vector<std::string>{"local_buffer_size"});
  EXPECT_NE(err.find("'local_buffer_size' is no longer used"), std::string::npos) << err;

  setenv("GRANARY_LOCAL_HOSTNAME", "host1", 1);
  testing::internal::CaptureStderr();
  auto e = ClientOptions::FromEnvironment();
  err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_NE(err.find("GRANARY_LOCAL_HOSTNAME"), std::string::npos) << err;
  EXPECT_NE(err.find("'local_hostname' is no longer used"), std::string::npos) << err;
}

TEST_F(ClientOptionsTest, EveryFieldOfTheFileHasItsVariable) {
  setenv("GRANARY_TRANSFER_TIMEOUT_MS", "1234", 1);
  setenv("GRANARY_GET_RETRIES", "0", 1);
  setenv("GRANARY_LOG_LEVEL", "debug", 1);
  setenv("GRANARY_DEVICE_NAME", "mlx5_1", 1);
  setenv("GRANARY_GPU_DEVICE", "3", 1);
  setenv("GRANARY_PROTOCOL", "tcp", 1);
  setenv("GRANARY_TCP_DATA_BETWEEN_HOSTS", "one_sided", 1);
  setenv("GRANARY_COPY_THREADS", "0", 1);
  auto o = ClientOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->transfer_timeout_ms, 1234);
  EXPECT_EQ(o->get_retries, 0);
  EXPECT_EQ(o->log_level, LogLevel::kDebug);
  EXPECT_EQ(o->device_name, "mlx5_1");
  EXPECT_EQ(o->gpu_device, 3);
  EXPECT_EQ(o->protocol, "tcp");
  EXPECT_EQ(o->tcp_data_between_hosts, "one_sided");
  EXPECT_EQ(o->copy_threads, 0);
  EXPECT_EQ(ClientOptions().copy_threads, 1);
  setenv("GRANARY_LOG_LEVEL", "chatty", 1);
  auto bad = ClientOptions::FromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("GRANARY_LOG_LEVEL='chatty'"), absl::string_view::npos)
      << bad.status();
  unsetenv("GRANARY_LOG_LEVEL");
  setenv("GRANARY_TRANSFER_TIMEOUT_MS", "0", 1);
  EXPECT_FALSE(ClientOptions::FromEnvironment().ok());
}

TEST_F(ClientOptionsTest, LogLevelIsUnsetByDefault) {
  EXPECT_FALSE(ClientOptions().log_level.has_value());
  EXPECT_EQ(ClientOptions().log_sink, nullptr);
  Write(R"({"log_level": "loud"})");
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("log_level must be one of"), absl::string_view::npos)
      << o.status();
}

TEST_F(ClientOptionsTest, BadValuesAreRejectedNamingThem) {
  struct Case {
    const char* json;
    const char* needle;
  } cases[] = {
      {R"({"get_retries": 1.5})", "get_retries must be an integer, got 1.5"},
      {R"({"replica_num": 0})", "replica_num 0"},
      {R"({"replica_num": "two"})", "replica_num"},
      {R"({"master_server_address": "nohost"})", "'nohost'"},
      {R"({"master_server_address": "etcd://a:2379;b:x"})", "b:x"},
      {R"({"master_server_address": "etcd://a:2379", "cluster_id": "a/b"})", "'a/b'"},
      {R"({"protocol": "carrier-pigeon"})", "carrier-pigeon"},
      {R"({"tenant_id": 7})", "tenant_id"},
      {R"({"rpc_timeout_ms": -1})", "rpc_timeout_ms -1"},
      {R"({"tcp_data_between_hosts": "pigeons"})", "tcp_data_between_hosts 'pigeons'"},
      {R"({"copy_threads": -1})", "copy_threads -1 is outside 0..64"},
      {R"({"copy_threads": 65})", "copy_threads 65 is outside 0..64"},
      {R"([1, 2])", "not an object"},
      {R"({"tenant_id": )", "not valid JSON"},
  };
  for (const auto& c : cases) {
    Write(c.json);
    auto o = ClientOptions::FromJsonFile(path_);
    ASSERT_FALSE(o.ok()) << c.json;
    EXPECT_NE(o.status().message().find(c.needle), absl::string_view::npos)
        << c.json << " -> " << o.status();
  }
  EXPECT_EQ(ClientOptions::FromJsonFile("/nonexistent/x.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClientOptionsTest, EnvironmentFillsOptionsWhenNoFileIsNamed) {
  setenv("GRANARY_MASTER", "127.0.0.1:6000", 1);
  setenv("GRANARY_TENANT_ID", "tenant-b", 1);
  setenv("GRANARY_REPLICA_NUM", "3", 1);
  auto o = ClientOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->master_server_address, "127.0.0.1:6000");
  EXPECT_EQ(o->tenant_id, "tenant-b");
  EXPECT_EQ(o->replica_num, 3);
  setenv("GRANARY_REPLICA_NUM", "lots", 1);
  auto bad = ClientOptions::FromEnvironment();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("GRANARY_REPLICA_NUM='lots'"), absl::string_view::npos);
}

TEST_F(ClientOptionsTest, TenantTokenFromJsonAndEnvironment) {
  Write(R"({"tenant_id": "tenant-a", "tenant_token": "s3cret token"})");
  auto o = ClientOptions::FromJsonFile(path_);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->tenant_token, "s3cret token");
  EXPECT_TRUE(o->unknown_keys.empty());

  setenv("GRANARY_TENANT_ID", "tenant-b", 1);
  setenv("GRANARY_TENANT_TOKEN", "env-token", 1);
  auto e = ClientOptions::FromEnvironment();
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->tenant_id, "tenant-b");
  EXPECT_EQ(e->tenant_token, "env-token");
  // As for tenant_id, a named config file wins over the variable.
  setenv("GRANARY_CONFIG_PATH", path_.c_str(), 1);
  auto f = ClientOptions::FromEnvironment();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->tenant_token, "s3cret token");
}

TEST_F(ClientOptionsTest, BadTenantTokenIsRejectedWithoutShowingIt) {
  // 256 bytes is the limit (proto::kMaxTokenBytes).
  ClientOptions o;
  o.tenant_token = std::string(256, 'k');
  EXPECT_TRUE(o.Validate().ok());
  o.tenant_token = std::string(257, 'k');
  absl::Status st = o.Validate();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tenant_token is 257 bytes, limit 256"), absl::string_view::npos)
      << st;
  EXPECT_EQ(st.message().find("kkkk"), absl::string_view::npos) << st;

  Write(R"({"tenant_token": ")" + std::string(300, 'q') + R"("})");
  auto big = ClientOptions::FromJsonFile(path_);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("300 bytes"), absl::string_view::npos) << big.status();
  EXPECT_EQ(big.status().message().find("qqqq"), absl::string_view::npos) << big.status();

  Write(R"({"tenant_token": 123456})");
  auto number = ClientOptions::FromJsonFile(path_);
  ASSERT_FALSE(number.ok());
  EXPECT_NE(number.status().message().find("tenant_token must be a string"),
            absl::string_view::npos)
      << number.status();
  EXPECT_EQ(number.status().message().find("123456"), absl::string_view::npos) << number.status();

  setenv("GRANARY_TENANT_TOKEN", std::string(257, 'e').c_str(), 1);
  auto env = ClientOptions::FromEnvironment();
  ASSERT_FALSE(env.ok());
  EXPECT_NE(env.status().message().find("257 bytes"), absl::string_view::npos) << env.status();
  EXPECT_EQ(env.status().message().find("eeee"), absl::string_view::npos) << env.status();
}

TEST_F(ClientOptionsTest, ConfigPathWinsOverVariables) {
  Write(R"({"tenant_id": "from-file"})");
  setenv("GRANARY_CONFIG_PATH", path_.c_str(), 1);
  setenv("GRANARY_TENANT_ID", "from-env", 1);
  auto o = ClientOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->tenant_id, "from-file");
}

}  // namespace
}  // namespace granary
