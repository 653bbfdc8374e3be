# Sizes and enabled tests (scripts/check_sizes.py, Debian's python3): no test file over 800
# lines, no disabled gtest, and every label of this tree in the "# Labels:" list of
# tests/CMakeLists.txt; and (--strict) no file under src/, device/ or python/ over 600 lines
# and no C++ function there over 100.
find_program(GRANARY_LINT_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT GRANARY_LINT_PYTHON)
  find_program(GRANARY_LINT_PYTHON python3 REQUIRED)
endif()
add_test(NAME lint_source_sizes
  COMMAND ${GRANARY_LINT_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/check_sizes.py
    --root ${PROJECT_SOURCE_DIR} --ctest ${CMAKE_CTEST_COMMAND} --build-dir ${CMAKE_BINARY_DIR}
    --strict)
# The checker's own tests, on small trees of their own.
add_test(NAME lint_check_sizes_selftest
  COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/check_sizes_test.py)
set_tests_properties(lint_source_sizes lint_check_sizes_selftest PROPERTIES LABELS unit
  TIMEOUT 60 ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

# The repository's own checks, in /usr/bin/python3 with the standard library only (label unit):
# no file refers to a path outside the repository, and the checker flags what it should.
add_test(NAME lint_repo_paths
  COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/repo_paths_check.py
    ${PROJECT_SOURCE_DIR})
add_test(NAME lint_repo_paths_self_test
  COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/repo_paths_check_test.py)
set_tests_properties(lint_repo_paths lint_repo_paths_self_test PROPERTIES LABELS unit TIMEOUT 60)

# docs/flags.md against what the programs print (scripts/flags_doc.py --check): a flag, default
# or help text changed without regenerating the page fails here (label unit).
set(_granary_flag_programs $<TARGET_FILE:granary_master> $<TARGET_FILE:granary_node>
  $<TARGET_FILE:granary>)
if(TARGET granary_bench)
  list(APPEND _granary_flag_programs $<TARGET_FILE:granary_bench>)
endif()
add_test(NAME docs_flags
  COMMAND ${GRANARY_LINT_PYTHON} ${PROJECT_SOURCE_DIR}/scripts/flags_doc.py --check
    ${PROJECT_SOURCE_DIR}/docs/flags.md ${_granary_flag_programs})
set_tests_properties(docs_flags PROPERTIES LABELS unit TIMEOUT 60)
