foreach(_part quota_ledger quota_ledger_concurrency)
  granary_test(NAME master_${_part}_test LABELS unit tsan
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_part}_test.cc LIBS granary::quota_ledger granary::tenant_policy)
endforeach()
granary_test(NAME master_tenant_policy_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/policy_test.cc LIBS granary::tenant_policy)
granary_test(NAME master_tenant_policy_store_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/policy_store_test.cc
  LIBS granary::tenant_policy PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
granary_test(NAME master_tenant_manager_test LABELS unit tsan SOURCES ${CMAKE_CURRENT_LIST_DIR}/tenant_manager_test.cc LIBS granary::master)
granary_test(NAME master_tenant_tokens_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tenant_tokens_test.cc LIBS granary::tenant_policy)
