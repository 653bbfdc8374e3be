granary_test(NAME common_size_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/size_test.cc LIBS granary::common)
granary_test(NAME common_sha256_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/sha256_test.cc LIBS granary::common)
granary_test(NAME common_error_reason_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/error_reason_test.cc LIBS granary::common)
granary_test(NAME common_log_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/log_test.cc LIBS granary::common)
granary_test(NAME common_metrics_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/metrics_test.cc LIBS granary::common)
granary_test(NAME common_backoff_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backoff_test.cc LIBS granary::common)
granary_test(NAME common_master_view_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/master_view_test.cc LIBS granary::etcd)
granary_test(NAME common_work_pool_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/work_pool_test.cc LIBS granary::common)
granary_test(NAME common_utf8_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/utf8_test.cc LIBS granary::common)
granary_test(NAME common_http_head_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_head_test.cc LIBS granary::http)
granary_test(NAME common_http_server_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/http_server_test.cc LIBS granary::http)
granary_test(NAME common_range_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/range_test.cc LIBS granary::common)
