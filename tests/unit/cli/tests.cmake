granary_test(NAME cli_admin_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/admin_test.cc LIBS granary_cli_admin)
