granary_test(NAME master_offset_allocator_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/offset_allocator_test.cc LIBS granary::master_alloc)
