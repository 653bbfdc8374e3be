# The documentation (label unit and integration): the mkdocs site builds with --strict (a broken
# link or a page missing from the tree fails), and every shell, Python and C++ block of README.md
# and docs/ runs against a real master and node, or says why not (tests/docs/docs_blocks_test.py).
find_program(GRANARY_MKDOCS mkdocs)
if(GRANARY_MKDOCS)
  add_test(NAME docs_site
    COMMAND ${GRANARY_MKDOCS} build --strict --quiet -f ${PROJECT_SOURCE_DIR}/mkdocs.yml
      -d ${CMAKE_BINARY_DIR}/site)
else()
  add_test(NAME docs_site COMMAND ${CMAKE_COMMAND} -E echo
    "skipped: mkdocs is not installed (scripts/setup.sh installs it)")
  set_tests_properties(docs_site PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: mkdocs")
endif()
# Debian's mkdocs-material warns about an escape sequence of its own at every build.
set_tests_properties(docs_site PROPERTIES LABELS unit TIMEOUT 120
  ENVIRONMENT "PYTHONWARNINGS=ignore::DeprecationWarning")

# Lists that GitHub nests but the site renders flat (Python-Markdown nests at 4 spaces, and
# starts a list only after a blank line): tests/docs/docs_lists_check.py over README.md and
# docs/, and the check's own test, which renders its examples with Python-Markdown (label unit).
# Debian's python3, as tests/lint/tests.cmake finds it (this list may be read first).
find_program(GRANARY_LINT_PYTHON python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT GRANARY_LINT_PYTHON)
  find_program(GRANARY_LINT_PYTHON python3 REQUIRED)
endif()
add_test(NAME docs_lists
  COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/docs_lists_check.py
    ${PROJECT_SOURCE_DIR})
add_test(NAME docs_lists_self_test
  COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/docs_lists_check_test.py)
set_tests_properties(docs_lists docs_lists_self_test PROPERTIES LABELS unit TIMEOUT 60
  ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")

# The blocks need the Python module (so not in the sanitizer trees, which build none) and an
# install of the tree for the C++ blocks (label install, as the install test).
if(TARGET granary_python)
  add_test(NAME docs_blocks
    COMMAND ${GRANARY_LINT_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/docs_blocks_test.py
      --source ${PROJECT_SOURCE_DIR} --build ${CMAKE_BINARY_DIR})
  set_tests_properties(docs_blocks PROPERTIES LABELS "integration;install" TIMEOUT 600)
endif()
