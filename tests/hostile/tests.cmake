# Hostile input against real processes (label hostile): every *_test.cc in this folder is one
# gtest binary, run against a real master and node started by tests/integration/cluster.h.
file(GLOB _granary_hostile_tests ${CMAKE_CURRENT_LIST_DIR}/*_test.cc)
foreach(_src ${_granary_hostile_tests})
  get_filename_component(_name ${_src} NAME_WE)
  granary_test(NAME hostile_${_name} LABELS hostile integration TIMEOUT 300
    SOURCES ${_src} LIBS granary_test_cluster)
  add_dependencies(hostile_${_name} granary_master granary_node granary)
endforeach()
