granary_test(NAME proto_codec_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/codec_test.cc LIBS granary::proto)
granary_test(NAME proto_handshake_test LABELS unit hostile
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/handshake_test.cc LIBS granary::proto)
granary_test(NAME proto_serve_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/serve_test.cc LIBS granary::proto)
granary_test(NAME proto_transcode_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/transcode_test.cc LIBS granary::proto)
