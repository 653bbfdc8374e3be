granary_test(NAME cuda_kv_layout_test LABELS unit gpu
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_layout_test.cc LIBS granary::cuda)
