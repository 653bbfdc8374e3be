# The upgrade test: the newest release tag's master, node and CLI (built in a git worktree under
# BUILD_DIR/upgrade) against this tree's, on loopback. Skipped (77) when git has no release tag.
add_test(NAME upgrade_test
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/upgrade/upgrade_test.sh ${CMAKE_BINARY_DIR})
set_tests_properties(upgrade_test PROPERTIES LABELS upgrade TIMEOUT 1800 SKIP_RETURN_CODE 77
  RUN_SERIAL TRUE)
