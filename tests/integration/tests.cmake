add_library(granary_test_cluster STATIC ${CMAKE_CURRENT_LIST_DIR}/cluster.cc
  ${CMAKE_CURRENT_LIST_DIR}/netns.cc)
target_link_libraries(granary_test_cluster PUBLIC granary::internal granary::client granary::http GTest::gtest
  granary_test_etcd)

add_executable(put_start_hang ${PROJECT_SOURCE_DIR}/tests/tools/put_start_hang.cc)
target_link_libraries(put_start_hang PRIVATE granary::client granary::internal)

granary_test(NAME integration_store_test LABELS integration tsan TIMEOUT 600
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/store_test.cc LIBS granary_test_cluster)
add_dependencies(integration_store_test granary_master granary_node put_start_hang)
granary_test(NAME integration_node_transfer_test LABELS integration tsan TIMEOUT 600
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/node_transfer_test.cc LIBS granary_test_cluster)
add_dependencies(integration_node_transfer_test granary_master granary_node)
granary_test(NAME integration_cli_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cli_test.cc LIBS granary_test_cluster)
add_dependencies(integration_cli_test granary_master granary_node granary)
granary_test(NAME integration_lifecycle_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/lifecycle_test.cc LIBS granary_test_cluster)
add_dependencies(integration_lifecycle_test granary_master granary_node)
granary_test(NAME integration_quota_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/quota_test.cc LIBS granary_test_cluster)
add_dependencies(integration_quota_test granary_master granary_node put_start_hang)
granary_test(NAME integration_copy_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/copy_test.cc LIBS granary_test_cluster)
add_dependencies(integration_copy_test granary_master granary_node)
granary_test(NAME integration_tenancy_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tenancy_test.cc LIBS granary_test_cluster)
add_dependencies(integration_tenancy_test granary_master granary_node)
granary_test(NAME integration_bad_input_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/bad_input_test.cc LIBS granary_test_cluster)
add_dependencies(integration_bad_input_test granary_master granary_node)
granary_test(NAME integration_fenced_read_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fenced_read_test.cc LIBS granary_test_cluster)
add_dependencies(integration_fenced_read_test granary_master granary_node)
# granary_bench exists only with GRANARY_BUILD_BENCH=ON.
if(TARGET granary_bench)
  granary_test(NAME integration_bench_smoke_test LABELS integration TIMEOUT 300
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/bench_smoke_test.cc LIBS granary_test_cluster)
  add_dependencies(integration_bench_smoke_test granary_master granary_node granary_bench)
endif()
granary_test(NAME integration_tenant_token_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/tenant_token_test.cc LIBS granary_test_cluster)
add_dependencies(integration_tenant_token_test granary_master granary_node granary)
granary_test(NAME integration_engine_support_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/engine_support_test.cc LIBS granary_test_cluster)
add_dependencies(integration_engine_support_test granary_master granary_node)
granary_test(NAME integration_embedded_node_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/embedded_node_test.cc LIBS granary_test_cluster granary::embedded)
add_dependencies(integration_embedded_node_test granary_master)
granary_test(NAME integration_cgroup_test LABELS integration cgroup TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cgroup_test.cc LIBS granary_test_cluster granary::node)
add_dependencies(integration_cgroup_test granary_master granary_node)
granary_test(NAME integration_pool_test LABELS integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/pool_test.cc LIBS granary_test_cluster)
add_dependencies(integration_pool_test granary_master granary_node)
granary_test(NAME integration_restart_test LABELS integration tsan TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/restart_test.cc LIBS granary_test_cluster)
add_dependencies(integration_restart_test granary_master granary_node)
granary_test(NAME integration_node_restart_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/node_restart_test.cc LIBS granary_test_cluster)
add_dependencies(integration_node_restart_test granary_master granary_node)
granary_test(NAME integration_disk_tier_test LABELS integration tsan TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/disk_tier_test.cc LIBS granary_test_cluster)
add_dependencies(integration_disk_tier_test granary_master granary_node)
# The GPU tier on the fake device backend (master and nodes with GRANARY_DEVICE_BACKEND=fake),
# on gpu_tier_fixture.h: only where granary_node carries the fake (GRANARY_DEVICE_FAKE, the
# top-level CMakeLists.txt). Each binary has a twin running the same bodies on the CUDA runtime
# (label gpu; they skip without a device, and the fault-injection cases skip there too).
if(GRANARY_DEVICE_FAKE)
  foreach(_part gpu_tier gpu_engine_buffers gpu_bounce)
    granary_test(NAME integration_${_part}_test LABELS integration tsan TIMEOUT 120
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_part}_test.cc
      LIBS granary_test_cluster granary::device granary::device_fake granary::node)
    add_dependencies(integration_${_part}_test granary_master granary_node)
    add_test(NAME integration_${_part}_cuda_test COMMAND integration_${_part}_test)
    set_tests_properties(integration_${_part}_cuda_test PROPERTIES LABELS "gpu" TIMEOUT 150
      ENVIRONMENT "GRANARY_BIN_DIR=${CMAKE_BINARY_DIR}/bin;GRANARY_TEST_DEVICE_BACKEND=cuda")
  endforeach()
endif()
# Separate hosts in network namespaces (tests/integration/netns.h); root only, else it skips.
granary_test(NAME integration_netns_test LABELS integration netns TIMEOUT 180
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/netns_test.cc LIBS granary_test_cluster)
add_dependencies(integration_netns_test granary_master granary_node put_start_hang)
granary_test(NAME integration_topology_test LABELS integration TIMEOUT 120
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/topology_test.cc LIBS granary_test_cluster)
add_dependencies(integration_topology_test granary_master granary_node granary)
granary_test(NAME integration_options_test LABELS integration TIMEOUT 300
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/options_test.cc LIBS granary_test_cluster)
add_dependencies(integration_options_test granary_master granary_node)
