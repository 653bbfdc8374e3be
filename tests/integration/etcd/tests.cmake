# The etcd policy store against a real etcd child process (skipped without /usr/bin/etcd).
granary_test(NAME integration_etcd_policy_store_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/etcd_policy_store_test.cc
  LIBS granary::tenant_policy PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
