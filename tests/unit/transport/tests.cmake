granary_test(NAME transport_ep_info_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ep_info_test.cc LIBS granary::transport)
granary_test(NAME transport_rpc_rma_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rpc_rma_test.cc LIBS granary::transport)
granary_test(NAME transport_topology_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/topology_test.cc LIBS granary::transport)
granary_test(NAME transport_rpc_listener_test LABELS unit tsan hostile
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rpc_listener_test.cc LIBS granary::transport)
