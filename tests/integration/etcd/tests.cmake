# A real single-member etcd child process for tests (skipped without /usr/bin/etcd).
add_library(granary_test_etcd STATIC ${CMAKE_CURRENT_LIST_DIR}/etcd_server.cc)
target_link_libraries(granary_test_etcd
  PUBLIC granary::internal absl::status absl::statusor
  PRIVATE absl::strings PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)

# The etcd policy store against a real etcd child process (skipped without /usr/bin/etcd).
granary_test(NAME integration_etcd_policy_store_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/etcd_policy_store_test.cc
  LIBS granary::tenant_policy granary_test_etcd)

# Real masters (and a node) with --tenant_quota_connector_type=etcd against a real etcd.
granary_test(NAME integration_etcd_master_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/etcd_master_test.cc
  LIBS granary_test_cluster granary_test_etcd granary::tenant_policy
    PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
add_dependencies(integration_etcd_master_test granary_master granary_node)

# common/etcd's client against a real etcd child process (skipped without /usr/bin/etcd).
granary_test(NAME integration_etcd_client_test LABELS integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/etcd_client_test.cc
  LIBS granary::etcd granary_test_etcd)

# master/ha's LeaderElection on a real etcd: the margin a revoke keeps, the successor's view.
granary_test(NAME integration_leader_election_test LABELS integration tsan TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/leader_election_test.cc
  LIBS granary::master_ha granary_test_etcd)

# Master election and fencing (--enable_ha): real masters on a real etcd child process, a 2 s
# lease; kill -9, SIGTERM, SIGSTOP of a leader and of etcd, a fenced policy write.
granary_test(NAME integration_ha_master_test LABELS integration tsan TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ha_master_test.cc
  LIBS granary_test_cluster granary_test_etcd granary::embedded granary::transport
    PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
add_dependencies(integration_ha_master_test granary_master granary_node granary)
