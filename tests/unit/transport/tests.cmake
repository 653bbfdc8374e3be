granary_test(NAME transport_ep_info_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/ep_info_test.cc LIBS granary::transport)
# RPC and RMA in one process, on transport_fixture.h.
foreach(_part rpc rma)
  granary_test(NAME transport_${_part}_test LABELS unit tsan
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${_part}_test.cc LIBS granary::transport)
endforeach()
granary_test(NAME transport_topology_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/topology_test.cc LIBS granary::transport)
granary_test(NAME transport_rpc_listener_test LABELS unit tsan hostile
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/rpc_listener_test.cc LIBS granary::transport)
