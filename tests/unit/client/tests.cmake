granary_test(NAME client_options_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/client_options_test.cc LIBS granary::client)
granary_test(NAME client_kv_key_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_key_test.cc LIBS granary::client)
granary_test(NAME client_registrations_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/registrations_test.cc LIBS granary::client)
granary_test(NAME client_planner_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/planner_test.cc LIBS granary::client)
granary_test(NAME client_log_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/client_log_test.cc LIBS granary::client)
granary_test(NAME client_device_pointer_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/device_pointer_test.cc
  LIBS granary::client granary::device granary::device_fake)
granary_test(NAME client_topology_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/client_topology_test.cc LIBS granary::client)
