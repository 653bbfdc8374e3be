# The master link on a real UCX transport in one process (a fake master answering Hello).
granary_test(NAME link_master_link_test LABELS unit tsan
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/master_link_test.cc LIBS granary::link)
