granary_test(NAME chaos_test LABELS chaos TIMEOUT 600
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chaos_test.cc LIBS granary_test_cluster)
add_dependencies(chaos_test granary_master granary_node put_start_hang)
