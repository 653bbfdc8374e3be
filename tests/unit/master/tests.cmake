granary_test(NAME master_offset_allocator_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offset_allocator_test.cc LIBS granary::master_alloc)
# The facade (master_service_test) and its parts on master_fixture.h; quota admission and
# charges on quota_fixture.h.
granary_test(NAME master_service_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/master_service_test.cc LIBS granary::master)
foreach(_part session_table segment_registry object_store copy_coordinator eviction_quota
        object_store_charges)
  granary_test(NAME master_${_part}_test LABELS unit tsan
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_part}_test.cc LIBS granary::master)
endforeach()
granary_test(NAME master_timer_wheel_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/timer_wheel_test.cc LIBS granary::master)
granary_test(NAME master_eviction_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/eviction_test.cc LIBS granary::master)
granary_test(NAME master_admin_auth_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admin_auth_test.cc LIBS granary::master_server)
# The admin HTTP server on admin_http_fixture.h: the tenant quota API, and the read-only pages.
foreach(_part admin_http admin_http_metrics)
  granary_test(NAME master_${_part}_test LABELS unit tsan
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_part}_test.cc LIBS granary::master_server)
endforeach()
granary_test(NAME master_hello_token_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/hello_token_test.cc LIBS granary::master)
granary_test(NAME master_object_table_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/object_table_test.cc LIBS granary::master)
granary_test(NAME master_placement_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/placement_test.cc ${CMAKE_CURRENT_LIST_DIR}/tier_placement_test.cc
  LIBS granary::master)
granary_test(NAME master_pool_placement_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/pool_placement_test.cc LIBS granary::master)
granary_test(NAME master_dashboard_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/dashboard_test.cc LIBS granary::master_server)
target_compile_definitions(master_dashboard_test PRIVATE
  GRANARY_DASHBOARD_HTML="${PROJECT_SOURCE_DIR}/src/master/dashboard.html")
granary_test(NAME master_inventory_restore_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/inventory_restore_test.cc LIBS granary::master)
# The rebuild-rate benchmark (bench/restore_bench.cc, with GRANARY_BUILD_BENCH) in one small
# round, so that it keeps building and restoring every object it reports.
if(TARGET granary_restore_bench)
  add_test(NAME master_restore_bench_smoke
    COMMAND granary_restore_bench --objects=20000 --nodes=3 --rounds=1)
  set_tests_properties(master_restore_bench_smoke PROPERTIES LABELS unit TIMEOUT 60)
endif()
