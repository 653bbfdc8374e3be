granary_test(NAME node_service_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/node_service_test.cc LIBS granary::node_service)
granary_test(NAME node_cgroup_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/cgroup_test.cc LIBS granary::node)
granary_test(NAME node_inventory_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/node_inventory_test.cc
  LIBS granary::node_service granary::device_fake)
granary_test(NAME node_transfer_watchdog_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/transfer_watchdog_test.cc LIBS granary::node_service)
granary_test(NAME node_memory_limits_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/memory_limits_test.cc LIBS granary::node)
granary_test(NAME node_disk_file_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/disk_file_test.cc LIBS granary::node_disk)
granary_test(NAME node_disk_record_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/disk_record_test.cc LIBS granary::node_disk)
granary_test(NAME node_disk_store_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/disk_store_test.cc LIBS granary::node_disk)
granary_test(NAME node_inventory_journal_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/inventory_journal_test.cc LIBS granary::node_service)
