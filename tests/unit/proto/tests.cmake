granary_test(NAME proto_codec_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec_test.cc LIBS granary::proto)
